# SPDX-License-Identifier: Apache-2.0
"""Multi-rank checks of the public API on the host backend (run under mpiexec by test_api.py).

Usage: api_worker.py {matrix|lifecycle|errors|torch} [seed]
Every rank records failures; they are gathered before deciding, and rank 0 prints ALL OK.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import traceback

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import helpers  # noqa: E402
from helpers import global_values as global_array  # noqa: E402
from helpers import same_bits as same_bytes  # noqa: E402

import redist
from redist import BlockNonCyclic, Box, ProcessGrid, Redistribute, Slab
from redist.engine import geometry

redist.initialize()
ctx = redist.get_context()
comm = ctx.process_group.mpi_comm
rank, P = ctx.process_group.rank, ctx.process_group.nranks
failures: list[str] = []


def check(cond, what):
    if not cond:
        failures.append(f"rank {rank}: {what}")


def piece(g, box, layout):
    sl = tuple(slice(l, h) for l, h in zip(box.lower, box.upper))
    part = g[sl]
    if layout == "C":
        return np.ascontiguousarray(part)
    if layout == "F":
        return np.asfortranarray(part)
    # padded: a view into a larger array with 2 ghost cells on each side of every axis
    pad = np.zeros(tuple(n + 4 for n in part.shape), dtype=g.dtype)
    inner = pad[tuple(slice(2, 2 + n) for n in part.shape)]
    inner[...] = part
    return inner


def random_boxes(rng, shape, nranks):
    return [Box(*b) for b in helpers.random_boxes(shape, nranks, rng)]


def run_case(shape, dtype, din, dout, layout, label, options=None):
    g = global_array(shape, dtype)
    ib = din if isinstance(din, Box) else din.box(rank, shape)
    ob = dout if isinstance(dout, Box) else dout.box(rank, shape)
    a = piece(g, ib, layout)
    try:
        with Redistribute(a, din, dout, options=options) as r:
            r.plan()
            b = r.execute()
            want = g[tuple(slice(l, h) for l, h in zip(ob.lower, ob.upper))]
            check(same_bytes(b, want), f"{label}: wrong result")
            order = r.layout
            dense = tuple(s * b.itemsize for s in geometry.dense_strides(b.shape, order))
            check(b.strides == dense or b.size <= 1, f"{label}: result strides {b.strides}, not dense {order} {dense}")
            # a second operand (different values) through reset_operand_unchecked, then back
            a2 = piece(g[::-1].copy() if len(shape) else g, ib, layout)
            r.reset_operand_unchecked(a2)
            b2 = r.execute()
            want2 = g[::-1][tuple(slice(l, h) for l, h in zip(ob.lower, ob.upper))]
            check(same_bytes(b2, want2), f"{label}: wrong result after rebind")
            check(b2 is b, f"{label}: result is not persistent")
    except Exception:  # noqa: BLE001 -- recorded, reduced across ranks
        failures.append(f"rank {rank}: {label}: {traceback.format_exc()}")


def matrix(seed):
    rng = np.random.default_rng(seed)
    dtypes = [np.int8, np.float16, np.float32, np.complex128, np.dtype([("a", "<i4"), ("b", "<f8")], align=False)]
    # slabs, 3-D, every pair of axes, C/F/padded, every dtype
    for (x, y), dt, layout in itertools.product([(0, 1), (1, 0), (1, 2), (2, 0), (0, 0)], dtypes, "CFP"):
        run_case((7, 6, 5), dt, Slab(x), Slab(y), layout, f"Slab{x}->Slab{y} {np.dtype(dt)} {layout}")
    # 1-D .. 5-D slabs with uneven sizes (and fewer planes than ranks)
    for nd in range(1, 6):
        shape = tuple(int(v) for v in rng.integers(1, 6, nd))
        shape = (max(shape[0], 2),) + shape[1:]
        for layout in "CF":
            run_case(shape, np.float32, Slab(0), Slab(nd - 1), layout, f"{nd}-D {shape} {layout}")
    # 2-D pencil grids
    if P in (2, 4):
        a, b = (1, 2) if P == 2 else (2, 2)
        for grids in [((1, a, b), (a, 1, b)), ((a, b, 1), (1, a, b))]:
            for lay in ("C", "F"):
                run_case((5, 7, 6), np.complex128, BlockNonCyclic(ProcessGrid(grids[0])),
                         BlockNonCyclic(ProcessGrid(grids[1], ProcessGrid.Layout.COL_MAJOR)), lay,
                         f"pencils {grids} {lay}")
    # permuted results (result_layout = axes slowest first), every host method, 2-D .. 5-D
    methods = ["auto", "hybrid", "datatype", "pack"] + (["push"] if P > 1 else [])
    for k in range(10):
        nd = 2 + k % 4
        shape = tuple(int(v) for v in rng.integers(1, 6, nd))
        perm = tuple(int(v) for v in rng.permutation(nd))
        ib, ob = random_boxes(rng, shape, P), random_boxes(rng, shape, P)
        run_case(shape, dtypes[k % len(dtypes)], ib[rank], ob[rank], "CFP"[k % 3],
                 f"permuted result {perm} {shape} #{k}", {"result_layout": perm, "host_method": methods[k % len(methods)]})
    run_case((6, 5, 4), np.complex64, Slab(0), Slab(1), "C", "pencil transpose, axis 1 contiguous",
             {"result_layout": (0, 2, 1)})
    # allow_overlap: replicated inputs, allgather, broadcast, gather, halos; every host method, 1-D .. 4-D
    for k in range(12):
        nd = 1 + k % 4
        shape = tuple(int(v) for v in rng.integers(1, 7, nd))
        label, ib, ob = helpers.overlap_boxes(shape, P, rng)
        run_case(shape, dtypes[k % len(dtypes)], Box(*ib[rank]), Box(*ob[rank]), "CFP"[k % 3],
                 f"overlap {label} {shape} #{k}", {"allow_overlap": True, "host_method": methods[k % len(methods)]})
    # replicated input with holes: the last rank holds everything around the others' boxes
    if P > 1:
        g3 = (6, 7, 5)
        nest = [Box((1, 1, 1), (3, 5, 4)), Box((3, 0, 2), (5, 3, 5)), Box((0, 4, 0), (2, 7, 2))][: P - 1]
        mine = nest[rank] if rank < P - 1 else Box((0, 0, 0), g3)
        for k, method in enumerate(["auto", "hybrid", "datatype", "pack", "push"]):
            run_case(g3, np.float64, mine, Slab(1) if k % 2 else Box((0, 0, 0), g3), "CFP"[k % 3],
                     f"several boxes per pair, {method}", {"allow_overlap": True, "host_method": method})
    # allgather of a padded (strided) operand through staging: one pack serves every peer
    g3 = (7, 6, 5)
    for method in ("pack", "hybrid"):
        run_case(g3, np.float64, Slab(0), Box((0, 0, 0), g3), "P", f"allgather, padded operand, {method}",
                 {"allow_overlap": True, "host_method": method})
    if P > 2:
        a = piece(global_array(g3, np.float64), Slab(0).box(rank, g3), "P")
        with Redistribute(a, Slab(0), Box((0, 0, 0), g3), options={"allow_overlap": True, "host_method": "pack"}) as r:
            r.plan()
            shared = r.plan_description.count("packed once for an earlier peer")  # 7 rows: nobody is empty at P <= 4
            check(shared == P - 2, f"allgather with pack: {shared} sends share a slot, expected {P - 2}")
    # random boxes, uneven and empty ranks, 2-D .. 4-D
    for k in range(12):
        nd = 2 + k % 3
        shape = tuple(int(v) for v in rng.integers(1, 7, nd))
        ib = random_boxes(rng, shape, P)
        ob = random_boxes(rng, shape, P)
        lay = "CFP"[k % 3]
        run_case(shape, dtypes[k % len(dtypes)], ib[rank], ob[rank], lay, f"random boxes {shape} #{k} {lay}")


def expect_error(fn, cls, pattern, label):
    """fn must raise cls with a message matching pattern, on every rank, identically."""
    got = None
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        got = (type(e).__name__, str(e))
    every = comm.allgather(got)
    if got is None:
        failures.append(f"rank {rank}: {label}: no exception")
        return
    if not isinstance_name(got[0], cls):
        failures.append(f"rank {rank}: {label}: {got[0]} is not {cls.__name__}: {got[1]}")
    if not re.search(pattern, got[1]):
        failures.append(f"rank {rank}: {label}: message {got[1]!r} does not match {pattern!r}")
    if any(e != every[0] for e in every):
        failures.append(f"rank {rank}: {label}: ranks raised different errors: {every}")


def isinstance_name(name, cls):
    return any(c.__name__ == name for c in _all_subclasses(cls)) or name == cls.__name__


def _all_subclasses(cls):
    out = {cls}
    for c in cls.__subclasses__():
        out |= _all_subclasses(c)
    return out


def lifecycle():
    shape = (8, 6, 4)
    g = global_array(shape, np.float64)
    a = piece(g, Slab.X.box(rank, shape), "C")
    want = g[tuple(slice(l, h) for l, h in zip(*Slab.Y.box(rank, shape)))]
    r = Redistribute(a, Slab.X, Slab.Y)
    expect_error(r.execute, RuntimeError, r"before plan\(\) has been called", "execute before plan")
    r.plan()
    r.plan()  # planning twice is a no-op
    check(same_bytes(r.execute(), want), "execute after double plan")
    # reset checks (each mismatch)
    expect_error(lambda: r.reset_operand(a.astype(np.float32)), ValueError, r"data type", "reset dtype")
    expect_error(lambda: r.reset_operand(np.zeros((a.shape[0] + 1,) + a.shape[1:])), ValueError, r"shape",
                 "reset shape")
    if a.shape[0] > 1:
        expect_error(lambda: r.reset_operand(np.asfortranarray(a)), ValueError, r"strides", "reset strides")
    expect_error(lambda: r.reset_operand(None), ValueError, r"requires a valid operand", "reset None")
    expect_error(lambda: r.reset_operand([1, 2]), TypeError, r"not supported", "reset list")
    # bad input on one rank only: every rank must raise the same error
    if P > 1:
        bad = a.astype(np.float32) if rank == P - 1 else a
        expect_error(lambda: r.reset_operand(bad), ValueError, rf"rank {P - 1}: .*data type", "reset on one rank")
    # release / execute / reset
    r.release_operand()
    r.release_operand()  # no-op
    expect_error(r.execute, RuntimeError, r"after the operand has been released", "execute after release")
    a2 = a * 2
    r.reset_operand(a2)
    check(same_bytes(r.execute(), want * 2), "execute after release + reset")
    # out=
    out = np.empty_like(want, order="C")
    res = r.execute(out=out)
    check(res is out and same_bytes(out, want * 2), "out= result")
    expect_error(lambda: r.execute(out=np.empty(want.shape, np.float32)), ValueError, r"out= .*dtype", "out dtype")
    expect_error(lambda: r.execute(out=np.empty(want.shape[::-1] + (2,))), ValueError, r"out= .*shape", "out shape")
    r.free()
    r.free()  # idempotent
    expect_error(r.execute, RuntimeError, r"after free", "execute after free")
    expect_error(lambda: r.reset_operand(a), RuntimeError, r"after free", "reset after free")
    expect_error(r.plan, RuntimeError, r"after free", "plan after free")
    # context manager frees
    with Redistribute(a, Slab.X, Slab.Y) as r2:
        r2.plan()
        check(same_bytes(r2.execute(), want), "context manager execute")
    check(r2._state.name == "FREED", "context manager did not free")
    # function form, options as dict and dataclass
    b = redist.redistribute(a, Slab.X, Slab.Y, options={"blocking": True})
    check(same_bytes(b, want), "function form")
    b = redist.redistribute(a, Slab.X, Slab.Y, options=redist.RedistributeOptions(execution="cpu"))
    check(same_bytes(b, want), "function form (options object)")
    expect_error(lambda: redist.redistribute(a, Slab.X, Slab.Y, options={"bogus": 1}), ValueError,
                 r"unknown Redistribute option", "bad option key")
    # release before plan, then reset, then plan
    r3 = Redistribute(a, Slab.X, Slab.Y)
    r3.release_operand()
    r3.plan()
    expect_error(r3.execute, RuntimeError, r"released", "execute after release before plan")
    r3.reset_operand_unchecked(a)
    check(same_bytes(r3.execute(), want), "reset_operand_unchecked after release")
    r3.free()
    # several live objects at once
    objs = [Redistribute(a, Slab.X, Slab.Y) for _ in range(3)]
    for o in objs:
        o.plan()
    for o in objs:
        check(same_bytes(o.execute(), want), "several live objects")
    for o in objs:
        o.free()


def torch_case():
    import torch

    shape = (6, 5, 4)
    g = global_array(shape, np.float32)
    ib, ob = Slab.Y.box(rank, shape), Slab.Z.box(rank, shape)
    a = torch.from_numpy(piece(g, ib, "C"))
    want = g[tuple(slice(l, h) for l, h in zip(*ob))]
    with Redistribute(a, Slab.Y, Slab.Z) as r:
        r.plan()
        b = r.execute()
        check(isinstance(b, torch.Tensor), f"torch in -> {type(b)} out")
        check(same_bytes(b.numpy(), want), "torch result")
        out = torch.empty(tuple(want.shape), dtype=torch.float32)
        r.execute(out=out)
        check(same_bytes(out.numpy(), want), "torch out=")
    # Fortran-ordered torch tensor (a permuted view) keeps F order
    af = torch.from_numpy(np.asfortranarray(piece(g, ib, "C")))
    with Redistribute(af, Slab.Y, Slab.Z) as r:
        r.plan()
        b = r.execute()
        check(same_bytes(b.numpy(), want), "torch F result")
        check(b.numpy().flags.f_contiguous, "torch F result not F-ordered")
        r.reset_operand(torch.from_numpy(np.asfortranarray(piece(g, ib, "C") * 3)))
        check(same_bytes(r.execute().numpy(), want * 3), "torch F reset")
    # a torch tensor where the object was made with numpy
    with Redistribute(piece(g, ib, "C"), Slab.Y, Slab.Z) as r:
        expect_error(lambda: r.reset_operand(torch.from_numpy(piece(g, ib, "C"))), ValueError, r"package",
                     "reset package")


def errors():
    shape = (8, 6)
    g = global_array(shape, np.int32)
    a = piece(g, Slab.X.box(rank, shape), "C")
    if P > 1:
        # rank P-1 passes an overlapping box; rank 1 (if distinct) passes a wrong dtype
        def overlap():
            ib = Slab.X.box(rank, shape)
            if rank == P - 1:
                ib = Box((0, 0), (ib.upper[0], 6))
            aa = piece(g, ib, "C")
            Redistribute(aa, ib, Slab.Y)

        expect_error(overlap, ValueError, rf"overlaps rank {P - 1}|rank {P - 1} .*overlaps", "overlap on one rank")

        def dtype1():
            Redistribute(a.astype(np.float64) if rank == 1 else a, Slab.X, Slab.Y)

        expect_error(dtype1, ValueError, r"inconsistent dtype .*rank 1", "dtype on one rank")

        def gap():
            ib = Slab.X.box(rank, shape)
            if rank == 0:
                ib = Box(ib.lower, (ib.upper[0], 5))
            Redistribute(piece(g, ib, "C"), ib, Slab.Y)

        expect_error(gap, ValueError, r"do not tile|lies outside|element \(", "gap on one rank")

        def layout():
            Redistribute(np.asfortranarray(a) if rank % 2 else a, Slab.X, Slab.Y)

        if a.shape[0] > 1:
            expect_error(layout, ValueError, r"inconsistent across processes: ranks", "layout on odd ranks")

        def not_array():
            Redistribute([1, 2, 3] if rank == 0 else a, Slab.X, Slab.Y)

        expect_error(not_array, TypeError, r"rank 0: .*not supported", "list on rank 0")

        def slab_shape():
            Redistribute(a[:-1] if rank == 0 and a.shape[0] > 1 else a, Slab.X, Slab.Y)

        expect_error(slab_shape, ValueError, r"rank \d+ operand shape", "Slab shape mismatch")

    def neg():
        Redistribute(a, ((-1, 0), (a.shape[0] - 1, 6)) if rank == 0 else Slab.X.box(rank, shape), Slab.Y)

    expect_error(neg, ValueError, r"negative coordinate", "negative coordinate")

    def inverted():
        Redistribute(a, ((3, 0), (1, 6)), Slab.Y)

    expect_error(inverted, ValueError, r"lower > upper", "lower > upper")

    def origin():
        ib = Slab.X.box(rank, shape)
        ob = Slab.Y.box(rank, (8, 7))
        Redistribute(a, ib, ob)

    expect_error(origin, ValueError, r"same global array", "global box differs")
    expect_error(lambda: Redistribute(a, Slab.X, Slab.Y, options={"blocking": False}), ValueError,
                 r"blocking", "bad blocking")


def main():
    what = sys.argv[1]
    seed = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    try:
        {"matrix": matrix, "lifecycle": lifecycle, "errors": errors, "torch": torch_case}[what](
            *([seed] if what == "matrix" else []))
    except Exception:  # noqa: BLE001 -- recorded, reduced across ranks
        failures.append(f"rank {rank}: uncaught: {traceback.format_exc()}")
    every = comm.allgather(failures)
    if rank == 0:
        flat = [f for fs in every for f in fs]
        if flat:
            print(f"{len(flat)} FAILURE(S):")
            for f in flat[:40]:
                print("  " + f)
            sys.exit(1)
        print("ALL OK", flush=True)


if __name__ == "__main__":
    main()
