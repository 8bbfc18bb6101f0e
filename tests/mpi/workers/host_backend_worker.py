# SPDX-License-Identifier: Apache-2.0
"""MPI worker for tests/mpi/test_host_backend.py: many host-backend cases in one mpiexec run.

    mpiexec -n P python host_backend_worker.py [--quick]

Every rank builds the same list of cases (seeded), plans its part with engine.plan.make_plan,
lowers it with redist.engine.host.lower for every method, binds, executes several times (with a
rebind to a second operand, a new output buffer and release_workspace in between) and checks its
result bit for bit against the global array. Failures are reduced across ranks after every case,
so no rank hangs on a disagreement; rank 0 prints "ALL OK" when every rank passed every case.
"""

from __future__ import annotations

import io
import logging
import math
import os
import sys
import time
import traceback
import tracemalloc

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import random_boxes, same_bits, sl  # noqa: E402
from redist import BlockNonCyclic, ProcessGrid, Slab
from redist._operands import wrap
from redist.engine import geometry as geo
from redist.engine.backend import Context, LowerOptions
from redist.engine.errors import InvalidStateError, InvalidValueError, NotSupportedError
from redist.engine.host import available_methods
from redist.engine.host import lower as host_lower
from redist.engine.plan import make_plan
from redist.engine.reference import empty_output

METHODS = available_methods() + ("push",)  # "alltoallw" needs MPI-4 persistent collectives

comm = MPI.COMM_WORLD
rank, P = comm.rank, comm.size
CTX = Context(comm.Dup())


def lower(plan, method="auto", logger=None):
    return host_lower(plan, CTX, LowerOptions(host_method=method, logger=logger))


def buf(a):
    return wrap(a).buffer
QUICK = "--quick" in sys.argv

STRUCT13 = np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "u1")])  # packed: itemsize 13
STRUCT12 = np.dtype([("x", "<i4"), ("y", "<f4"), ("z", "<u4")])  # 12-byte items
# "raw:" dtypes are filled with hashed bytes (NaN payloads in float16, arbitrary void bytes)
DTYPES = ["int8", "float16", "float32", "complex128", STRUCT13, STRUCT12, "raw:float16", "raw:V12", "raw:V16"]
LAYOUTS = ["C", "F", "padC", "padF", "inner2", "perm", "rev", "revF"]
MODES_SEEN: set = set()  # (side, mode) of every message the "hybrid" method made


# -- values -------------------------------------------------------------------------------


def values(idx: np.ndarray, dtype, salt: int) -> np.ndarray:
    """Element value = global linear index (+ salt for the second operand), in ``dtype``."""
    if isinstance(dtype, str) and dtype.startswith("raw:"):
        dt = np.dtype(dtype[4:])
        h1 = (idx.astype(np.uint64) + np.uint64(salt)) * np.uint64(0x9E3779B97F4A7C15)
        h2 = h1 ^ (h1 >> np.uint64(29)) * np.uint64(0xBF58476D1CE4E5B9)
        raw = np.stack([h1, h2], axis=-1).view(np.uint8).reshape(idx.shape + (16,))
        return np.ascontiguousarray(raw[..., : dt.itemsize]).view(dt).reshape(idx.shape)
    dt = np.dtype(dtype)
    v = idx + salt
    if dt.names:
        out = np.empty(idx.shape, dt)
        for k, name in enumerate(dt.names):
            out[name] = (v + k).astype(dt.fields[name][0])
        return out
    if dt.kind == "c":
        return (v - 1j * v).astype(dt)
    if dt.kind in "iu" and dt.itemsize < 8:  # wrap around, like C
        return (v & ((1 << (8 * dt.itemsize)) - 1)).astype(f"u{dt.itemsize}").view(dt)
    return v.astype(dt)


def np_dtype(dtype) -> np.dtype:
    return np.dtype(dtype[4:]) if isinstance(dtype, str) and dtype.startswith("raw:") else np.dtype(dtype)


def layout(local: np.ndarray, how: str, seed: int) -> np.ndarray:
    """``local`` copied into an array of the given memory layout (same values)."""
    sh = local.shape
    if how == "C" or local.ndim == 0:
        return np.ascontiguousarray(local)
    if how == "F":
        return np.asfortranarray(local)
    if how in ("padC", "padF"):
        big = np.empty(tuple(n + 1 + (d % 3) for d, n in enumerate(sh)), local.dtype, order=how[-1])
        a = big[tuple(slice(0, n) for n in sh)]
        a[...] = local
        return a
    if how == "inner2":
        big = np.empty(sh[:-1] + (2 * sh[-1] + 1,), local.dtype)
        a = big[..., : 2 * sh[-1] : 2]
        a[...] = local
        return a
    if how == "perm":
        perm = np.random.default_rng(seed).permutation(local.ndim)
        inv = np.argsort(perm)
        return np.ascontiguousarray(local.transpose(perm)).transpose(inv)
    if how in ("rev", "revF"):  # negative strides: every axis reversed (numpy views, as a[::-1] gives)
        flip = tuple(slice(None, None, -1) for _ in sh)
        base = np.ascontiguousarray(local[flip]) if how == "rev" else np.asfortranarray(local[flip])
        return base[flip]
    raise ValueError(how)


def strided_out(shape, dtype, how: str):
    """An out= array of ``shape`` with other strides than the result's (any of LAYOUTS)."""
    return layout(np.zeros(shape, dtype), how, 7)


def elem_strides(a: np.ndarray) -> tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


# -- decompositions -----------------------------------------------------------------------


def dist_boxes(dist, gshape):
    return [dist.box(r, gshape, nranks=P).as_tuple() for r in range(P)]


def grids_2d(n):
    return [(a, n // a) for a in range(1, n + 1) if n % a == 0]


def make_cases():
    """(name, gshape, in_boxes, out_boxes) for this P, identical on every rank."""
    rng = np.random.default_rng(1234 + P)
    cases = []
    slabs = {"X": Slab.X, "Y": Slab.Y, "Z": Slab.Z}
    shapes3 = [(8, 6, 5), (5, 3, 7), (2, 9, 4)] if not QUICK else [(5, 3, 7)]
    for g in shapes3:
        for a in "XYZ":
            for b in "XYZ":
                cases.append((f"slab {a}->{b} {g}", g, dist_boxes(slabs[a], g), dist_boxes(slabs[b], g)))
    # 2-D pencils on 3-D arrays: grid over axes (0,1) and over axes (1,2)
    g = (6, 7, 5)
    grids = grids_2d(P)
    for ga in grids:
        for gb in grids:
            A = BlockNonCyclic(ProcessGrid(ga))
            B = BlockNonCyclic(ProcessGrid((1,) + gb, ProcessGrid.Layout.COL_MAJOR))
            cases.append((f"pencil {ga}->(1,){gb}", g, dist_boxes(A, g), dist_boxes(B, g)))
            cases.append((f"pencil (1,){gb}->{ga}", g, dist_boxes(B, g), dist_boxes(A, g)))
    cases.append(("slab X->pencil", g, dist_boxes(Slab.X, g), dist_boxes(BlockNonCyclic(ProcessGrid(grids[-1])), g)))
    # 1-D .. 5-D, slabs and random boxes (uneven, empty ranks)
    nd_shapes = [(13,), (5, 7), (4, 6, 5), (3, 4, 2, 5), (2, 3, 2, 3, 2)]
    for gs in nd_shapes:
        nd = len(gs)
        cases.append((f"{nd}-D slab 0->{nd - 1} {gs}", gs, dist_boxes(Slab(0), gs), dist_boxes(Slab(nd - 1), gs)))
        for k in range(2 if QUICK else 4):
            cases.append((f"{nd}-D random #{k} {gs}", gs, random_boxes(gs, P, rng), random_boxes(gs, P, rng)))
    # everything on one rank -> spread, and back; same in and out (nothing to send)
    g = (4, 5, 3)
    one = [((0, 0, 0), g)] + [((0, 0, 0), (0, 0, 0))] * (P - 1)
    cases.append(("all on rank 0 -> slab Y", g, one, dist_boxes(Slab.Y, g)))
    cases.append(("slab Z -> all on rank 0", g, dist_boxes(Slab.Z, g), one))
    cases.append(("identity slab X", g, dist_boxes(Slab.X, g), dist_boxes(Slab.X, g)))
    # messages above MPI's eager limit (rendezvous path), strided on both sides
    # (hybrid then mixes datatype and pack: a datatype send may meet an unpacked receive)
    g = (48, 64, 32)
    for a in "XYZ":
        for b in "XYZ":
            if a != b:
                cases.append((f"big slab {a}->{b}", g, dist_boxes(slabs[a], g), dist_boxes(slabs[b], g)))
    # more ranks than planes: empty boxes on both sides
    g = (2, 3, 2)
    cases.append(("tiny slab X->Z", g, dist_boxes(Slab.X, g), dist_boxes(Slab.Z, g)))
    return cases


# -- one case -----------------------------------------------------------------------------


def global_array(gshape, dtype, salt):
    idx = np.arange(math.prod(gshape), dtype=np.int64).reshape(gshape)
    return values(idx, dtype, salt)


def run_case(ci, name, gshape, in_boxes, out_boxes, dtype, lay_seed, out_order, methods, fails):
    dt = np_dtype(dtype)
    lays = [LAYOUTS[(lay_seed + r) % len(LAYOUTS)] for r in range(P)]
    myin = in_boxes[rank]
    g1 = global_array(gshape, dtype, 0)
    g2 = global_array(gshape, dtype, 101)
    a1 = layout(g1[sl(myin)], lays[rank], ci)
    a2 = layout(g2[sl(myin)], lays[rank], ci)  # second operand: same layout, other memory and values
    strides = comm.allgather(elem_strides(a1))
    plan = make_plan(rank, in_boxes, out_boxes, itemsize=dt.itemsize, in_strides=strides, out_order=out_order)
    myout = out_boxes[rank]
    exp1 = g1[sl(myout)]
    exp2 = g2[sl(myout)]
    tag = f"[{name} dtype={dt} layout={lays[rank]} out={out_order}]"
    for method in methods:
        exe = None
        try:
            exe = lower(plan, method)
            assert exe.method == method, exe.method
            if method == "hybrid":
                for m in exe._sends:
                    MODES_SEEN.add(("send", m.mode))
                for m in exe._layout((exe.result.strides,))[1]:
                    MODES_SEEN.add(("recv", m.mode))
            d = exe.describe()
            assert isinstance(d, str) and method in d, d
            exe.bind_input(buf(a1))
            exe.execute()
            res = np.ndarray(plan.out_shape, dt, buffer=exe.result.owner,
                             strides=tuple(s * dt.itemsize for s in exe.result.strides))
            check([("engine-owned result", res, exp1)], fails, tag, method)
            out = empty_output(plan, dt)
            exe.bind_output(buf(out))
            for k in range(2):
                exe.execute()
                check([(f"execute #{k}", out, exp1)], fails, tag, method)
            exe.rebind_input(buf(a2).ptr, a2)  # rebind the operand
            exe.execute()
            check([("rebind", out, exp2)], fails, tag, method)
            exe.bind_input(buf(a1))
            exe.execute()
            check([("rebind back", out, exp1)], fails, tag, method)
            if method != "alltoallw":  # an out= of other strides (padded, reversed, permuted...)
                how = LAYOUTS[(ci + 3) % len(LAYOUTS)]
                out3 = strided_out(plan.out_shape, dt, how)
                exe.bind_output(buf(out3))
                exe.execute()
                check([(f"strided out= ({how})", out3, exp1)], fails, tag, method)
                exe.bind_output(buf(out))
            exe.release_workspace()
            exe.execute()
            check([("after release_workspace", out, exp1)], fails, tag, method)
            exe.release_input()  # drop the operand, then bind it again
            exe.bind_input(buf(a1))
            exe.execute()
            check([("after release_input", out, exp1)], fails, tag, method)
            out2 = empty_output(plan, dt)  # a new out= buffer
            exe.bind_output(buf(out2))
            exe.bind_input(buf(a2))
            exe.execute()
            exe.execute()
            check([("new output", out2, exp2)], fails, tag, method)
            exe.release_workspace()
            exe.release_workspace()
        except NotSupportedError as e:
            # alltoallw moves MPI datatypes, which need positive strides: refused on every rank
            if not (method == "alltoallw" and any(lay.startswith("rev") for lay in lays) and "positive" in str(e)):
                fails.append(f"{tag} {method}: exception\n{traceback.format_exc()}")
        except Exception:  # noqa: BLE001 -- recorded, reduced across ranks
            fails.append(f"{tag} {method}: exception\n{traceback.format_exc()}")
        finally:
            if exe is not None:
                exe.free()
                exe.free()  # idempotent


def check(steps, fails, tag, method):
    for what, out, exp in steps:
        if not same_bits(out, exp):
            nbad = "?"
            if out.shape == exp.shape:
                ob = np.ascontiguousarray(out).view(np.uint8).reshape(out.size, -1)
                eb = np.ascontiguousarray(exp).view(np.uint8).reshape(exp.size, -1)
                nbad = int((ob != eb).any(axis=1).sum())
            fails.append(f"{tag} {method}: {what}: result differs (shape {out.shape} vs {exp.shape}, "
                         f"{nbad} element(s) wrong)")


# -- extra checks -------------------------------------------------------------------------


def check_no_per_call_allocation(fails):
    """After warm-up, execute must not keep or make (large) allocations."""
    g = (32, 32, 32)
    ib, ob = dist_boxes(Slab.X, g), dist_boxes(Slab.Y, g)
    gl = global_array(g, "complex128", 0)
    a = np.ascontiguousarray(gl[sl(ib[rank])])
    plan = make_plan(rank, ib, ob, itemsize=16)
    for method in METHODS:
        exe = lower(plan, method)
        out = empty_output(plan, np.complex128)
        exe.bind_output(buf(out))
        exe.bind_input(buf(a))
        for _ in range(3):
            exe.execute()
        tracemalloc.start()
        base_cur, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for _ in range(20):
            exe.execute()
        cur, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        if cur - base_cur > 4096 or peak - base_cur > 16384:
            fails.append(f"{method}: execute allocates: current +{cur - base_cur} B, peak +{peak - base_cur} B")
        if not same_bits(out, gl[sl(ob[rank])]):
            fails.append(f"{method}: allocation case gives a wrong result")
        # rebinding an operand with the same address is free: nothing is rebuilt
        exe.bind_input(buf(a))
        if (exe._pairs is None) if method == "push" else (not exe._ready):
            fails.append(f"{method}: rebinding the same operand made the executable rebuild")
        exe.free()


def check_logging_and_errors(fails):
    g = (6, 4, 5)
    ib, ob = dist_boxes(Slab.X, g), dist_boxes(Slab.Z, g)
    plan = make_plan(rank, ib, ob, itemsize=8)
    stream = io.StringIO()
    log = logging.getLogger(f"redist.test.host.{rank}")
    log.setLevel(logging.DEBUG)
    h = logging.StreamHandler(stream)
    log.addHandler(h)
    log.propagate = False
    exe = lower(plan, logger=log)  # auto
    text = stream.getvalue()
    if "send bytes per peer" not in text or "method=" not in text or exe.method not in text:
        fails.append(f"logging: INFO line missing: {text!r}")
    if P > 1 and "send ->" not in text and "store ->" not in text:
        fails.append(f"logging: DEBUG describe missing: {text!r}")
    if exe.method != ("push" if P > 1 else "hybrid"):
        fails.append(f"auto chose {exe.method!r} (one node: push for P > 1)")
    exe.free()
    log.removeHandler(h)
    # a bad method raises on every rank, without a hang
    try:
        lower(plan, "nope")
        fails.append("bad method did not raise")
    except InvalidValueError:
        pass
    # ranks that disagree on the method raise everywhere
    if P > 1:
        try:
            e = lower(plan, METHODS[rank % 2])
            e.free()
            fails.append("disagreeing methods did not raise")
        except InvalidValueError:
            pass
    # execute before binding is an error (raised identically on every rank)
    exe = lower(plan, "pack")
    try:
        exe.execute()
        fails.append("execute before bind did not raise")
    except InvalidStateError:
        pass
    exe.free()
    # a problem on the last rank only, with every method: every rank raises its message, nobody
    # writes into its output, and the next exchange works
    g = global_array(plan.in_shape, "float64", 0)
    for method in METHODS:
        exe = lower(plan, method)
        exe.bind_input(buf(g))
        out = np.full(plan.out_shape, -1.0)
        exe.bind_output(buf(out))
        for planted in (("InvalidValueError", "planted problem"), None):
            prob = planted if rank == P - 1 else None
            try:
                exe.execute(problem=prob)
                if planted is not None:
                    fails.append(f"{method}: a problem on the last rank did not raise here")
            except InvalidValueError as e:
                if planted is None or f"rank {P - 1}: planted problem" not in str(e):
                    fails.append(f"{method}: unexpected error: {e}")
            if planted is not None and method == "push" and not (out == -1.0).all():
                fails.append(f"{method}: a failed execute wrote into out=")
        exe.free()


def check_all_empty(fails):
    """A global array with a zero extent: nothing to move at all."""
    g = (0, 4)
    ib, ob = dist_boxes(Slab.X, g), dist_boxes(Slab.Y, g)
    plan = make_plan(rank, ib, ob, itemsize=4)
    for method in METHODS:
        exe = lower(plan, method)
        a = np.empty(geo.box_shape(ib[rank]), np.float32)
        out = empty_output(plan, np.float32)
        exe.bind_input(buf(a))
        exe.bind_output(buf(out))
        exe.execute()
        exe.execute()
        if "nothing to move" not in exe.describe():
            fails.append(f"empty plan describe: {exe.describe()}")
        exe.free()


def main():
    t0 = time.perf_counter()
    fails: list[str] = []
    total_fail = 0
    cases = make_cases()
    ncase = 0
    for ci, (name, gshape, ib, ob) in enumerate(cases):
        # every dtype on every case; layouts (per rank) and the result order rotate with them
        dtypes = DTYPES if not QUICK else DTYPES[ci % 3 :: 3]
        for di, dtype in enumerate(dtypes):
            order = "CF"[(ci + di) % 2]
            run_case(ci, name, gshape, ib, ob, dtype, ci + di, order, METHODS, fails)
            ncase += 1
        n = comm.allreduce(len(fails))
        if n:
            total_fail += n
            if fails:
                print(f"rank {rank} FAIL:\n  " + "\n  ".join(fails[:5]), flush=True)
            fails.clear()
            if total_fail > 20:
                break
    if P > 1:
        seen = set().union(*comm.allgather(MODES_SEEN))
        want = {(side, mode) for side in ("send", "recv") for mode in ("direct", "datatype", "staged")}
        if not want <= seen:
            fails.append(f"hybrid never made {sorted(want - seen)} messages: the cases miss a code path")
    for fn in (check_no_per_call_allocation, check_logging_and_errors, check_all_empty):
        try:
            fn(fails)
        except Exception:  # noqa: BLE001 -- recorded, reduced across ranks
            fails.append(f"{fn.__name__}: exception\n{traceback.format_exc()}")
        n = comm.allreduce(len(fails))
        if n:
            total_fail += n
            if fails:
                print(f"rank {rank} FAIL in {fn.__name__}:\n  " + "\n  ".join(fails[:5]), flush=True)
            fails.clear()
    comm.Barrier()
    if rank == 0:
        print(f"P={P}: {ncase} cases x {len(METHODS)} methods + extra checks in {time.perf_counter() - t0:.1f} s, "
              f"{total_fail} failure(s)", flush=True)
        if total_fail == 0:
            print("ALL OK", flush=True)
    sys.exit(1 if total_fail else 0)


if __name__ == "__main__":
    main()
