# SPDX-License-Identifier: Apache-2.0
"""The C ABI's compiled replays (cabi/redist_replay.c), driven from Python through ctypes.

    mpiexec -n P python replay_worker.py LIBDIR

libredist.so is loaded into this Python process, so the worker sees which calls entered Python
(``Redistribute.execute`` and ``_resume`` are counted) while it calls the C functions a C time
loop calls. For each problem (crossing slabs that land, reversed slabs with no local part, an
exchange where nothing crosses ranks, and one too large to land; element sizes 8 and 12) on a
push handle (one process: auto, its local copy), and on hybrid, datatype and pack handles: repeated calls with the same out= (and with none) run without Python after the
first and are right at every step, with the operand changed between steps; ranks that disagree
(out= on one rank only) still get the right data (the replaying ranks hand the call back to
Python); one rank's bad out= makes every rank fail alike with no byte of any out= or result
changed; a rebound operand (also when a failing call follows), a fields handle (results NULL after a
failure), redist_free, redist.finalize() from Python and finalize/initialize cycles leave no
replay behind that could run.
"""

from __future__ import annotations

import ctypes
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, expected_bytes, global_bytes, sl, slab_boxes  # noqa: E402

from mpi4py import MPI  # noqa: E402

import redist  # noqa: E402

SHAPE = (9, 7, 5)
LARGE = (256, 128, 32)  # 8-byte elements: 2 MiB received per rank at P = 2 (push's landing stops at 1 MiB)
STEPS = 6
HOST_METHOD_AUTO, HOST_METHOD_HYBRID, HOST_METHOD_DATATYPE, HOST_METHOD_PACK, HOST_METHOD_PUSH = 0, 1, 2, 3, 5
DEVICE_NONE = -2
SUCCESS, INVALID_VALUE, INVALID_STATE = 0, 1, 2

i64p = ctypes.POINTER(ctypes.c_int64)
vp = ctypes.c_void_p


class Options(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("version", ctypes.c_int32), ("order", ctypes.c_int32),
                ("transport", ctypes.c_int32), ("host_method", ctypes.c_int32), ("blocking", ctypes.c_int32),
                ("signal", ctypes.c_int32), ("result_ndim", ctypes.c_int32), ("result_order", ctypes.c_int32 * 16),
                ("allow_overlap", ctypes.c_int32)]


def load(libdir: str):
    lib = ctypes.CDLL(os.path.join(libdir, "libredist.so"))
    for name, args in {
        "redist_initialize": [ctypes.c_int32, ctypes.c_int32], "redist_finalize": [],
        "redist_create_ex": [ctypes.POINTER(vp), ctypes.c_int32, i64p, i64p, i64p, i64p, i64p, ctypes.c_int64,
                             ctypes.c_int32, vp, ctypes.POINTER(Options)],
        "redist_create_fields": [ctypes.POINTER(vp), ctypes.c_int32, ctypes.c_int32, i64p, i64p, i64p, i64p, i64p,
                                 i64p, ctypes.c_int32, ctypes.POINTER(vp), ctypes.POINTER(Options)],
        "redist_plan": [vp, vp], "redist_execute": [vp, vp, vp, ctypes.POINTER(vp)],
        "redist_execute_fields": [vp, vp, ctypes.POINTER(vp), ctypes.POINTER(vp)],
        "redist_reset_operand_unchecked": [vp, vp], "redist_reset_operand": [vp, vp], "redist_release_operand": [vp],
        "redist_free": [vp],
        "redist_allocate_symmetric_memory": [ctypes.POINTER(vp), ctypes.c_int64], "redist_free_symmetric_memory": [vp],
    }.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ctypes.c_int32
    lib.redist_get_last_error.restype = ctypes.c_char_p
    return lib


def bounds(box):
    return [(ctypes.c_int64 * len(box[0]))(*v) for v in box]


def push_options(method: int = HOST_METHOD_PUSH) -> Options:
    o = Options()
    o.struct_size, o.version, o.host_method = ctypes.sizeof(Options), 2, method
    return o


class Counting:
    """Counts this process's Python executes, resumed replays and rebinds of Redistribute."""

    def __init__(self):
        self.reset()
        cls = redist.Redistribute
        for name, attr in (("execute", "executes"), ("_resume", "resumes"), ("reset_operand_unchecked", "rebinds")):
            setattr(cls, name, self._counted(getattr(cls, name), attr))

    def _counted(self, method, attr):
        def counted(obj, *args, **kwargs):
            setattr(self, attr, getattr(self, attr) + 1)
            return method(obj, *args, **kwargs)

        return counted

    def reset(self):
        self.executes = self.resumes = self.rebinds = 0


class Problem:
    """One handle: its boxes, operand, out= and the expected bytes per step."""

    def __init__(self, env, lib, name, gshape, ins, outs, itemsize, symmetric=False, method=HOST_METHOD_PUSH):
        self.env, self.lib, self.name, self.gshape, self.itemsize = env, lib, name, gshape, itemsize
        self.symmetric = symmetric  # every out= in host symmetric memory (redist_allocate_symmetric_memory)
        self.allocated: list[int] = []
        self.method = method  # one rank: AUTO (one rank's exchange is its local copy, not push)
        self.push = method == HOST_METHOD_PUSH
        # push's calls with a private out= of the large exchange go as messages or cross-memory copies: Python
        self.replays_out = symmetric or not self.push or not name.startswith("large")
        me = env.rank
        self.inb, self.outb = ins[me], outs[me]
        self.a = np.zeros(tuple(h - l for l, h in zip(*self.inb)) + (itemsize,), np.uint8)
        self.b = np.zeros_like(self.a)  # a second operand (rebinding)
        self.out = self.new_out()
        self.handle = vp()
        lo, hi = bounds(self.inb)
        olo, ohi = bounds(self.outb)
        opts = push_options(method)
        st = lib.redist_create_ex(ctypes.byref(self.handle), len(gshape), lo, hi, None, olo, ohi, itemsize, 0,
                                  self.a.ctypes.data, ctypes.byref(opts))
        env.check(st == SUCCESS, f"{name}: redist_create_ex: {st} {lib.redist_get_last_error()}")
        st = lib.redist_plan(self.handle, None)
        env.check(st == SUCCESS, f"{name}: redist_plan: {st} {lib.redist_get_last_error()}")

    def new_out(self) -> np.ndarray:
        """An out= array of this rank's output box (collective when symmetric)."""
        shape = tuple(h - l for l, h in zip(*self.outb)) + (self.itemsize,)
        if not self.symmetric:
            return np.zeros(shape, np.uint8)
        ptr = vp()
        st = self.lib.redist_allocate_symmetric_memory(ctypes.byref(ptr), int(np.prod(shape)))
        self.env.check(st == SUCCESS and ptr.value, f"{self.name}: redist_allocate_symmetric_memory: {st}")
        self.allocated.append(ptr.value)
        return np.ctypeslib.as_array((ctypes.c_uint8 * int(np.prod(shape))).from_address(ptr.value)).reshape(shape)

    def fill(self, step, into=None):
        (self.a if into is None else into)[...] = global_bytes(self.gshape, self.itemsize, seed=step)[sl(self.inb)]
        return expected_bytes(global_bytes(self.gshape, self.itemsize, seed=step), self.outb, "C")

    def call(self, out) -> tuple[int, int, str]:
        res = vp()
        st = self.lib.redist_execute(self.handle, None, out, ctypes.byref(res))
        return st, res.value or 0, (self.lib.redist_get_last_error() or b"").decode() if st else ""

    def result_bytes(self, ptr) -> np.ndarray:
        n = self.out.size
        return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr)).copy() if n else np.zeros(0, np.uint8)


def steady(env, count, p, with_out: bool) -> None:
    """STEPS calls with the same out= (or none): right every step, Python only at the first."""
    count.reset()
    label = f"{p.name}, {'out=' if with_out else 'result'}"
    for step in range(STEPS):
        want = p.fill(step)
        st, res, err = p.call(p.out.ctypes.data if with_out else None)
        if not env.check(st == SUCCESS, f"{label}, step {step}: status {st}: {err}"):
            return
        got = p.out.reshape(-1) if with_out else p.result_bytes(res)
        env.check(not with_out or res == p.out.ctypes.data, f"{label}: result is not out=")
        env.check(np.array_equal(got, want), f"{label}, step {step}: wrong data")
    if p.replays_out or not with_out:
        env.check(count.executes == 1, f"{label}: {count.executes} of {STEPS} calls entered Python (want 1)")
        env.check(count.resumes == 0, f"{label}: {count.resumes} replays went back to Python (want 0)")


def mixed(env, count, p) -> None:
    """Rank k passes out= at step k, the others none: push's replays hand back to Python, the message
    methods' run on; data right."""
    count.reset()
    for step in range(env.P):
        want = p.fill(10 + step)
        mine = env.rank == step
        before = p.out.copy()
        st, res, err = p.call(p.out.ctypes.data if mine else None)
        if not env.check(st == SUCCESS, f"{p.name}, mixed step {step}: status {st}: {err}"):
            return
        got = p.out.reshape(-1) if mine else p.result_bytes(res)
        env.check(np.array_equal(got, want), f"{p.name}, mixed step {step}: wrong data")
        env.check(mine or np.array_equal(p.out, before), f"{p.name}, mixed step {step}: an out= not passed changed")
    if p.push:  # push's status says whether an out= is passed: the replaying ranks hear another code
        env.check(env.comm.allreduce(count.resumes) > 0 or not p.replays_out, f"{p.name}: no replay was resumed")
    else:  # the message methods' status says only well: both bindings were replayed before, whatever the peers do
        env.check(count.resumes == count.executes == 0,
                  f"{p.name}: {count.resumes} resumes, {count.executes} calls in Python (want none)")


def one_bad(env, p) -> None:
    """The last rank passes its operand as out= (they overlap): every rank fails alike, with no byte
    of any rank's out= or result changed; the next good call is right."""
    for step in range(2):  # every rank replays an out= call now
        p.fill(20 + step)
        p.call(p.out.ctypes.data)
    st, res, _ = p.call(None)  # the result's address, and a replay of the calls without out= too
    p.call(p.out.ctypes.data)
    p.out[...] = 0xEE
    result = p.result_bytes(res)
    p.fill(30)
    bad = p.env.is_last()
    st, _, err = p.call(p.a.ctypes.data if bad else p.out.ctypes.data)
    every = env.comm.allgather((st, err))
    env.check(st == INVALID_VALUE, f"{p.name}, one bad out=: status {st}: {err}")
    env.check(len(set(every)) == 1, f"{p.name}, one bad out=: ranks differ: {every}")
    env.check(f"rank {env.P - 1}" in err, f"{p.name}, one bad out=: the message names no rank: {err}")
    env.check(bad or (p.out == 0xEE).all(), f"{p.name}, one bad out=: a refused call wrote into out=")
    env.check(np.array_equal(p.result_bytes(res), result), f"{p.name}, one bad out=: a refused call wrote the result")
    want = p.fill(31)
    st, _, err = p.call(p.out.ctypes.data)
    env.check(st == SUCCESS and np.array_equal(p.out.reshape(-1), want), f"{p.name}, after the bad call: {st} {err}")


def rebind(env, count, p) -> None:
    """Alternating operands and outs= (reset_operand_unchecked between calls): once each binding has
    run, neither the calls nor the rebinds enter Python, and each call reads the operand bound now.
    Rebound without Python, then a call Python makes (a new out=) or finishes (a rank without out=):
    Python reads the operand bound now too."""
    other = p.new_out()
    bindings = [(p.b, p.out), (p.a, p.out), (p.b, other), (p.a, other)]
    for rounds in range(3):
        count.reset()
        for k, (op, out) in enumerate(bindings):
            want = p.fill(40 + 4 * rounds + k, into=op)
            st = p.lib.redist_reset_operand_unchecked(p.handle, op.ctypes.data)
            env.check(st == SUCCESS, f"{p.name}: reset_operand_unchecked: {st}")
            st, _, err = p.call(out.ctypes.data)
            env.check(st == SUCCESS and np.array_equal(out.reshape(-1), want), f"{p.name}, binding {k}: {st} {err}")
        if rounds and p.replays_out:  # every binding has a replay now
            env.check(count.executes == count.rebinds == 0,
                      f"{p.name}, round {rounds}: {count.executes} calls and {count.rebinds} rebinds entered Python")
    for step, (op, out) in enumerate(((p.b, np.zeros_like(p.out)), (p.a, p.out))):
        want = p.fill(60 + step, into=op)
        p.lib.redist_reset_operand_unchecked(p.handle, op.ctypes.data)
        mine = out if step == 0 or env.rank else None  # step 1: rank 0 has no out=, the others resume
        st, res, err = p.call(None if mine is None else mine.ctypes.data)
        got = p.result_bytes(res) if mine is None else mine.reshape(-1)
        env.check(st == SUCCESS and np.array_equal(got, want), f"{p.name}, rebound, then Python, {step}: {st} {err}")


def lazy_then_failure(env, count, p) -> None:
    """Rebound without Python, then a call that fails (a NULL operand on the last rank, redist_initialize
    again on every rank): the operand bound before it stays bound, and the next call reads it."""
    for step, op in enumerate((p.b, p.a)):  # replays for both operands
        p.fill(70 + step, into=op)
        p.lib.redist_reset_operand_unchecked(p.handle, op.ctypes.data)
        p.call(p.out.ctypes.data)
    for k, fail in enumerate(("a NULL operand", "initialize again")):
        op = (p.b, p.a)[k]
        want = p.fill(80 + k, into=op)
        count.reset()
        env.check(p.lib.redist_reset_operand_unchecked(p.handle, op.ctypes.data) == SUCCESS, f"{p.name}: rebind")
        if p.name != "large":
            env.check(count.rebinds == 0, f"{p.name}: the rebind before {fail} entered Python")
        if k == 0:
            st = p.lib.redist_reset_operand_unchecked(p.handle, None) if env.is_last() else INVALID_VALUE
        else:
            st = p.lib.redist_initialize(-1, DEVICE_NONE)
        env.check(st != SUCCESS, f"{p.name}: {fail} succeeded")
        st, _, err = p.call(p.out.ctypes.data)
        env.check(st == SUCCESS and np.array_equal(p.out.reshape(-1), want),
                  f"{p.name}, after {fail}: status {st} {err}; the operand bound before it is "
                  f"{'not ' if st == SUCCESS and not np.array_equal(p.out.reshape(-1), want) else ''}what was read")


def freed(env, p) -> None:
    """After redist_free, the handle's replay is gone: the call fails on every rank."""
    env.check(p.lib.redist_free(p.handle) == SUCCESS, f"{p.name}: redist_free")
    st, _, err = p.call(p.out.ctypes.data)
    env.check(st == INVALID_STATE and "freed" in err, f"{p.name}, execute after free: {st} {err}")


def problems(env, lib) -> list[Problem]:
    P = env.P
    push = HOST_METHOD_PUSH if P > 1 else HOST_METHOD_AUTO
    xs, ys = slab_boxes(SHAPE, P, 0), slab_boxes(SHAPE, P, 1)
    large = slab_boxes(LARGE, P, 0), slab_boxes(LARGE, P, 1)
    made = [Problem(env, lib, f"slabs x->y, {isz} B", SHAPE, xs, ys, isz, method=push) for isz in (8, 12)]
    made.append(Problem(env, lib, "reversed slabs", SHAPE, xs, xs[::-1], 8, method=push))
    made.append(Problem(env, lib, "nothing crosses", SHAPE, ys, ys, 12, method=push))
    made.append(Problem(env, lib, "large", LARGE, *large, 8, method=push))
    # out= in host symmetric memory: the peers store straight into it (replayed, large ones too)
    made.append(Problem(env, lib, "slabs x->y, 8 B, symmetric out=", SHAPE, xs, ys, 8, symmetric=True, method=push))
    made.append(Problem(env, lib, "large, symmetric out=", LARGE, *large, 8, symmetric=True, method=push))
    # the message methods: their status round, then messages straight into out= (or the result)
    made.append(Problem(env, lib, "slabs x->y, 12 B, hybrid", SHAPE, xs, ys, 12, method=HOST_METHOD_HYBRID))
    made.append(Problem(env, lib, "reversed slabs, datatype", SHAPE, xs, xs[::-1], 8, method=HOST_METHOD_DATATYPE))
    made.append(Problem(env, lib, "large, pack", LARGE, *large, 8, method=HOST_METHOD_PACK))
    return made


def python_after_replay(env, count, p) -> None:
    """Two out= in host symmetric memory: a call into A through Python, a replay into B (it publishes B
    in this rank's header), then, the replays dropped (redist_reset_operand; or redist_release_operand,
    which the engine's replays go with, and a reset), a call into A through Python again: it publishes
    A again, so the peers store into A, not where the replay left them."""
    other = p.new_out()
    for how in ("reset", "release, reset"):
        env.check(p.lib.redist_reset_operand(p.handle, p.a.ctypes.data) == SUCCESS, f"{p.name}: reset_operand")
        for step, out in enumerate((other, p.out, other)):  # Python, Python, then a replay into other
            count.reset()
            want = p.fill(90 + step)
            st, _, err = p.call(out.ctypes.data)
            env.check(st == SUCCESS and np.array_equal(out.reshape(-1), want), f"{p.name}, step {step}: {st} {err}")
            env.check(count.executes == (step < 2), f"{p.name}, step {step}: {count.executes} calls entered Python")
        if how.startswith("release"):
            env.check(p.lib.redist_release_operand(p.handle) == SUCCESS, f"{p.name}: release_operand")
        env.check(p.lib.redist_reset_operand(p.handle, p.a.ctypes.data) == SUCCESS, f"{p.name}: reset_operand")
        for step in range(2):  # through Python, then its replay
            count.reset()
            want = p.fill(93 + step)
            st, _, err = p.call(p.out.ctypes.data)
            env.check(count.executes == (step == 0), f"{p.name}, {how}: {count.executes} calls entered Python")
            env.check(st == SUCCESS and np.array_equal(p.out.reshape(-1), want),
                      f"{p.name}, {how}: into A after a replay into B, call {step}: {st} {err}")


def symmetric_freed(env, count, p) -> None:
    """After redist_free_symmetric_memory of a peer's out= (and a new allocation there), the replays
    that stored into it are gone: the calls are right, into the new memory; misuse on one rank
    fails on every rank."""
    for ptr in p.allocated:
        env.check(p.lib.redist_free_symmetric_memory(ptr) == SUCCESS, f"{p.name}: redist_free_symmetric_memory")
    p.allocated.clear()
    p.out = p.new_out()
    for step in range(3):
        want = p.fill(70 + step)
        st, _, err = p.call(p.out.ctypes.data)
        env.check(st == SUCCESS and np.array_equal(p.out.reshape(-1), want), f"{p.name}, new out= {step}: {st} {err}")
    bad = vp(p.a.ctypes.data if env.is_last() else p.allocated[0])
    st = p.lib.redist_free_symmetric_memory(bad)
    err = (p.lib.redist_get_last_error() or b"").decode()
    every = env.comm.allgather(st)
    env.check(set(every) == {INVALID_VALUE} and f"rank {env.P - 1}" in err,
              f"{p.name}: one rank frees memory not allocated so: {every} {err}")
    st = p.lib.redist_allocate_symmetric_memory(None if env.is_last() else ctypes.byref(vp()), 8)
    every = env.comm.allgather(st)
    env.check(set(every) == {INVALID_VALUE}, f"{p.name}: one rank passes ptr NULL: {every}")
    st = p.lib.redist_allocate_symmetric_memory(ctypes.byref(vp()), -1 if env.is_last() else 8)
    env.check(set(env.comm.allgather(st)) == {INVALID_VALUE}, f"{p.name}: one rank asks for -1 bytes")
    want = p.fill(80)  # nothing was freed: still stored into straight, and replayed
    count.reset()
    for _ in range(3):
        st, _, err = p.call(p.out.ctypes.data)
        env.check(st == SUCCESS and np.array_equal(p.out.reshape(-1), want), f"{p.name}, after the misuse: {st} {err}")
    env.check(count.executes <= 1, f"{p.name}: {count.executes} of 3 calls entered Python after the misuse")


def fields(env, lib, count) -> None:
    """A fields handle (8- and 12-byte fields): replayed with both outs, then with one."""
    xs, ys = slab_boxes(SHAPE, env.P, 0), slab_boxes(SHAPE, env.P, 1)
    me, sizes = env.rank, (8, 12)
    shape_in = tuple(h - l for l, h in zip(*xs[me]))
    shape_out = tuple(h - l for l, h in zip(*ys[me]))
    ops = [np.zeros(shape_in + (s,), np.uint8) for s in sizes]
    outs = [np.zeros(shape_out + (s,), np.uint8) for s in sizes]
    handle = vp()
    lo, hi = bounds(xs[me])
    olo, ohi = bounds(ys[me])
    opts = push_options()
    st = lib.redist_create_fields(ctypes.byref(handle), 2, 3, lo, hi, None, olo, ohi, (ctypes.c_int64 * 2)(*sizes),
                                  0, (vp * 2)(*(o.ctypes.data for o in ops)), ctypes.byref(opts))
    env.check(st == SUCCESS and lib.redist_plan(handle, None) == SUCCESS, f"fields: create/plan {st}")
    for which in ((0, 1), (0,)):
        count.reset()
        for step in range(STEPS):
            want = []
            for f, s in enumerate(sizes):
                G = global_bytes(SHAPE, s, seed=50 + 7 * f + step)
                ops[f][...] = G[sl(xs[me])]
                want.append(expected_bytes(G, ys[me], "C"))
            results = (vp * 2)()
            st = lib.redist_execute_fields(handle, None, (vp * 2)(*(outs[f].ctypes.data if f in which else None
                                                                    for f in range(2))), results)
            env.check(st == SUCCESS, f"fields {which}, step {step}: {st} {lib.redist_get_last_error()}")
            for f, s in enumerate(sizes):
                ptr = outs[f].ctypes.data if f in which else results[f]
                env.check(results[f] == ptr, f"fields {which}: results[{f}] is not where the data is")
                got = np.ctypeslib.as_array((ctypes.c_uint8 * want[f].size).from_address(ptr))
                env.check(np.array_equal(got, want[f]), f"fields {which}, step {step}, field {f}: wrong data")
        env.check(count.executes == 1, f"fields {which}: {count.executes} of {STEPS} calls entered Python (want 1)")
    # the last rank's field 1 out= overlaps its operand: every rank fails, results[] all NULL
    bad = (vp * 2)(outs[0].ctypes.data, ops[0].ctypes.data if env.is_last() else None)
    results = (vp * 2)(1, 1)
    st = lib.redist_execute_fields(handle, None, bad, results)
    env.check(st == INVALID_VALUE and results[0] is None and results[1] is None,
              f"fields, one bad out=: status {st}, results {list(results)} (want NULL)")
    env.check(lib.redist_free(handle) == SUCCESS, "fields: redist_free")


def main() -> int:
    comm = MPI.COMM_WORLD
    env = Report(comm)
    env.P = comm.Get_size()
    env.is_last = lambda: env.rank == env.P - 1
    lib = load(sys.argv[1])
    count = Counting()
    for cycle in range(2):  # a second initialize/finalize cycle: nothing left from the first
        env.check(lib.redist_initialize(-1, DEVICE_NONE) == SUCCESS, f"cycle {cycle}: redist_initialize")
        try:
            for p in problems(env, lib):
                steady(env, count, p, True)
                steady(env, count, p, False)
                mixed(env, count, p)
                one_bad(env, p)
                rebind(env, count, p)
                lazy_then_failure(env, count, p)
                if p.symmetric and cycle == 0:
                    python_after_replay(env, count, p)
                    symmetric_freed(env, count, p)
                if cycle == 0:
                    freed(env, p)
            fields(env, lib, count)
        except Exception:  # noqa: BLE001 -- reported, then the ranks go on together
            env.exception(f"cycle {cycle}")
        env.check(lib.redist_finalize() == SUCCESS, f"cycle {cycle}: redist_finalize")
    # redist.finalize() from Python frees a handle's executable under the C side: its replay goes too
    env.check(lib.redist_initialize(-1, DEVICE_NONE) == SUCCESS, "redist_initialize after the cycles")
    p = problems(env, lib)[0]
    steady(env, count, p, True)
    redist.finalize()
    count.reset()
    st, _, err = p.call(p.out.ctypes.data)
    env.check(st == INVALID_STATE and count.executes == 1,
              f"execute after redist.finalize() from Python: status {st} ({err}), {count.executes} Python calls "
              "(want INVALID_STATE from Python: no replay of the freed executable)")
    env.check(lib.redist_finalize() == SUCCESS, "redist_finalize after redist.finalize()")
    return env.finish()


if __name__ == "__main__":
    sys.exit(main())
