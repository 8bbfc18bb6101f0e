# SPDX-License-Identifier: Apache-2.0
"""``python -m redist``: the command-line entry point (``demo``, ``tune``, ``info``)."""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Sequence

_LAYOUTS = ("slab-x", "slab-y", "slab-z", "pencil-x", "pencil-y", "pencil-z")


def _positive(text: str) -> int:
    """argparse type: an integer >= 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _check_demo(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse bad demo arguments here, before mpiexec starts (argparse's message and exit code 2)."""
    import numpy as np

    try:
        dtype = np.dtype(args.dtype)
    except TypeError as e:
        parser.error(f"argument --dtype: {e}")
    if dtype.kind not in "biufc":
        parser.error(f"argument --dtype: {dtype} is not a number type (the demo's elements hold their index)")
    ndim = len(args.shape)
    for option, name in (("--from", args.from_), ("--to", args.to)):
        axis = "xyz".index(name[-1])
        if name.startswith("pencil-") and ndim < 3:
            parser.error(f"argument {option}: {name} needs a 3-D --shape, got {ndim}-D")
        if axis >= ndim:
            parser.error(f"argument {option}: {name} needs at least {axis + 1} dimensions, got {ndim}-D --shape")


def _grid2(p: int) -> tuple[int, int]:
    a = int(math.isqrt(p))
    while p % a:
        a -= 1
    return a, p // a


def _distribution(name: str, ndim: int, nranks: int):
    import redist

    axis = "xyz".index(name[-1])  # the dimensions were checked by _check_demo
    if name.startswith("slab-"):
        return redist.Slab(axis)
    a, b = _grid2(nranks)
    grid = [a, b]
    grid.insert(axis, 1)
    return redist.BlockNonCyclic(redist.ProcessGrid(tuple(grid) + (1,) * (ndim - 3)))


def _progress(i: int, n: int, enabled: bool):
    if not enabled:
        return
    width = 30
    done = width * i // n
    end = "\n" if i == n else ""
    if sys.stderr.isatty() or i == n:
        print(f"\r  [{'#' * done}{'.' * (width - done)}] {i}/{n}", end=end, file=sys.stderr, flush=True)


def _demo(args: argparse.Namespace) -> int:
    from ._launch import mpiexec_command, under_mpi_launcher

    if not under_mpi_launcher() and not args.in_place and args.ranks > 1:
        cmd = mpiexec_command(args.ranks) + [sys.executable, "-m", "redist", "demo", "--in-place", *args.argv]
        print(f"[redist] launching: {' '.join(cmd)}", flush=True)
        return os.spawnv(os.P_WAIT, cmd[0], cmd) if os.name == "posix" else 1

    import numpy as np

    import redist

    if not redist.is_initialized():
        redist.initialize()
    ctx = redist.get_context()
    pg = ctx.process_group
    rank, P = pg.rank, pg.nranks
    shape = tuple(args.shape)
    dtype = np.dtype(args.dtype)
    src_d, dst_d = _distribution(args.from_, len(shape), P), _distribution(args.to, len(shape), P)
    src_box, dst_box = src_d.box(rank, shape), dst_d.box(rank, shape)

    def expected(box):
        idx = np.indices(box.box_shape, dtype=np.int64)
        lin = np.zeros(box.box_shape, dtype=np.int64)
        for d in range(len(shape)):
            lin = lin * shape[d] + (idx[d] + box.lower[d])
        if dtype.kind == "c":
            return (lin + 1j * (-lin)).astype(dtype)
        return lin.astype(dtype)

    a = expected(src_box)
    want_b = expected(dst_box)
    xp, opts = np, None
    if args.gpu:
        if ctx.device_id is None:
            raise SystemExit("--gpu: redist runs CPU-only here (no GPU, or the [cuda] extra is missing)")
        import cupy as xp

        xp.cuda.Device(ctx.device_id).use()
        a, want_b = xp.asarray(a), xp.asarray(want_b)
        opts = {"blocking": True}  # time complete executes
    forward = redist.Redistribute(a, src_d, dst_d, options=opts)
    forward.plan()
    b = forward.execute()
    backward = redist.Redistribute(b, dst_d, src_d, options=opts)
    backward.plan()
    times_f, times_b, bad = [], [], 0
    show = rank == 0
    if show:
        print(f"redist demo: {P} rank(s), global {shape} {dtype.name}, {args.from_} -> {args.to} -> {args.from_}, "
              f"{args.iterations} iterations, execution {forward.execution_space}", flush=True)
    for it in range(1, args.iterations + 1):
        pg.mpi_comm.Barrier()
        t0 = time.perf_counter()
        b = forward.execute()
        t1 = time.perf_counter()
        backward.reset_operand_unchecked(b)
        a2 = backward.execute()
        t2 = time.perf_counter()
        times_f.append(t1 - t0)
        times_b.append(t2 - t1)
        bad += int(not bool(xp.array_equal(b, want_b))) + int(not bool(xp.array_equal(a2, a)))
        _progress(it, args.iterations, show)
    bad = pg.mpi_comm.allreduce(bad)
    moved = pg.mpi_comm.allreduce(sum(t.nbytes for t in forward._plan.sends))
    total = math.prod(shape) * dtype.itemsize
    tf = max(pg.mpi_comm.allgather(float(np.median(times_f))))
    tb = max(pg.mpi_comm.allgather(float(np.median(times_b))))
    forward.free()
    backward.free()
    if show:
        rows = [("forward", f"{args.from_}->{args.to}", tf), ("backward", f"{args.to}->{args.from_}", tb)]
        print(f"  {'step':9s} {'move':18s} {'array MB':>9s} {'moved MB':>9s} {'ms/execute':>11s} {'GB/s':>8s}")
        for step, move, t in rows:
            print(f"  {step:9s} {move:18s} {total / 1e6:9.2f} {moved / 1e6:9.2f} {t * 1e3:11.3f} {total / t / 1e9:8.2f}")
        verdict = "every element verified" if bad == 0 else f"{bad} MISMATCHED results"
        print(f"  {verdict} ({2 * args.iterations} executes per rank)", flush=True)
    return 0 if bad == 0 else 1


def _info(args: argparse.Namespace) -> int:
    import redist

    redist.initialize()
    ctx = redist.get_context()
    if ctx.process_group.rank == 0:
        print(f"redist {redist.__version__}: {ctx.process_group.nranks} rank(s), backends {ctx.backends}, "
              f"device {ctx.device_id}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The ``redist`` / ``python -m redist`` command line; returns the exit code."""
    from . import __version__

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="python -m redist", description="redist command-line tools")
    parser.add_argument("--version", action="version", version=f"redist {__version__}")
    sub = parser.add_subparsers(dest="cmd")
    d = sub.add_parser(
        "demo", help="redistribute a known array back and forth, verify, and time it",
        description="Redistribute a global array whose elements hold their own index from one layout to "
                    "another and back, verify every element on every rank, and time each execute(). "
                    "Started by plain python it launches --ranks processes under mpiexec; under mpiexec "
                    "(or with --in-place) it runs in the processes it was started in.")
    d.add_argument("--ranks", type=_positive, default=4,
                   help="processes to launch under mpiexec when not already under one (default 4)")
    d.add_argument("--in-place", action="store_true",
                   help="run in this process (a one-rank run) instead of launching --ranks processes")
    d.add_argument("--shape", type=_positive, nargs="+", default=[256, 256, 256], help="global shape (default 256 256 256)")
    d.add_argument("--from", dest="from_", choices=_LAYOUTS, default="slab-x",
                   help="layout of the input (default slab-x; pencil-* split the two other axes)")
    d.add_argument("--to", choices=_LAYOUTS, default="slab-y", help="layout of the result (default slab-y)")
    d.add_argument("--dtype", default="complex64", help="numpy dtype of the elements (default complex64)")
    d.add_argument("--iterations", type=_positive, default=20,
                   help="executes in each direction, timed (default 20)")
    d.add_argument("--gpu", action="store_true",
                   help="cupy operands on the GPUs (CUDA graph backend; one rank per GPU)")
    from . import _tune_cli

    t = _tune_cli.add_parser(sub, _LAYOUTS, _positive)
    sub.add_parser("info", help="print the runtime context")
    args = parser.parse_args(argv)
    if args.cmd == "demo":
        _check_demo(d, args)
        args.argv = [a for a in argv[1:] if a != "--in-place"]
        return _demo(args)
    if args.cmd == "tune":
        _check_demo(t, args)
        args.argv = [a for a in argv[1:] if a != "--in-place"]
        return _tune_cli.run(args, _distribution)
    if args.cmd == "info":
        return _info(args)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
