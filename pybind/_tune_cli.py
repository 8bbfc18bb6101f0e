# SPDX-License-Identifier: Apache-2.0
"""``python -m redist tune``: measure every route of one problem (``tune="measure"``) and print the table."""

from __future__ import annotations

import argparse
import os
import sys


def add_parser(sub, layouts, positive) -> argparse.ArgumentParser:
    t = sub.add_parser(
        "tune", help="time every route of one redistribution and print which wins",
        description="Plan one redistribution with tune='measure' (docs/tuning.md): every candidate route (host "
                    "methods; on GPUs transport x signal x kernel variant) is warmed up and timed on every rank, "
                    "the median of each call's slowest rank counts, the fastest wins. Started by plain python it launches "
                    "--ranks processes under mpiexec.")
    t.add_argument("--ranks", type=positive, default=4, help="processes to launch under mpiexec (default 4)")
    t.add_argument("--in-place", action="store_true", help="run in this process instead of launching --ranks")
    t.add_argument("--shape", type=positive, nargs="+", default=[64, 64, 64], help="global shape (default 64 64 64)")
    t.add_argument("--from", dest="from_", choices=layouts, default="slab-x", help="input layout (default slab-x)")
    t.add_argument("--to", choices=layouts, default="slab-y", help="result layout (default slab-y)")
    t.add_argument("--dtype", default="float64", help="numpy dtype (default float64)")
    t.add_argument("--budget", type=float, default=10.0, help="seconds of measuring at most (default 10)")
    t.add_argument("--wisdom", metavar="PATH", help="also export what was measured to this wisdom file")
    t.add_argument("--plot", metavar="PNG", help="draw the table as a bar chart (needs matplotlib)")
    t.add_argument("--gpu", action="store_true", help="cupy operands on the GPUs (CUDA backend)")
    return t


def run(args: argparse.Namespace, distribution) -> int:
    from ._launch import mpiexec_command, under_mpi_launcher

    if not under_mpi_launcher() and not args.in_place and args.ranks > 1:
        cmd = mpiexec_command(args.ranks) + [sys.executable, "-m", "redist", "tune", "--in-place", *args.argv]
        print(f"[redist] launching: {' '.join(cmd)}", flush=True)
        return os.spawnv(os.P_WAIT, cmd[0], cmd) if os.name == "posix" else 1

    import numpy as np

    import redist

    if not redist.is_initialized():
        redist.initialize()
    ctx = redist.get_context()
    rank, P = ctx.process_group.rank, ctx.process_group.nranks
    shape = tuple(args.shape)
    src, dst = distribution(args.from_, len(shape), P), distribution(args.to, len(shape), P)
    a = np.zeros(src.shape(rank, shape), dtype=np.dtype(args.dtype))
    if args.gpu:
        if ctx.device_id is None:
            raise SystemExit("--gpu: redist runs CPU-only here (no GPU, or the [cuda] extra is missing)")
        import cupy

        cupy.cuda.Device(ctx.device_id).use()
        a = cupy.asarray(a)
    with redist.Redistribute(a, src, dst, options={"tune": "measure", "tune_budget": args.budget}) as r:
        r.plan()
        tuning = r.tuning
    if args.wisdom:
        redist.export_wisdom(args.wisdom)
    if rank == 0:
        print(f"redist tune: {P} rank(s), global {shape} {np.dtype(args.dtype).name}, {args.from_} -> {args.to}, "
              f"{'GPU' if args.gpu else 'host'}")
        print(tuning.describe(), flush=True)
        if args.plot:
            _plot(tuning, args)
    return 0


def _plot(tuning, args) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("--plot: matplotlib is not installed (pip install matplotlib); no plot written")
        return
    rows = [(label, t) for label, t, _ in tuning.times if t is not None]
    fig, ax = plt.subplots(figsize=(6, 0.4 * len(rows) + 1.2))
    colors = ["tab:green" if label == tuning.chosen else "tab:gray" for label, _ in rows]
    ax.barh([label for label, _ in rows], [t * 1e6 for _, t in rows], color=colors)
    ax.invert_yaxis()
    ax.set_xlabel("median of the slowest rank per call (us)")
    ax.set_title(f"redist tune: {' x '.join(map(str, args.shape))} {args.dtype}, {args.from_} -> {args.to}")
    fig.tight_layout()
    fig.savefig(args.plot, dpi=120)
    print(f"--plot: wrote {args.plot}")
