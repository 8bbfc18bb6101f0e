# SPDX-License-Identifier: Apache-2.0
"""Python's repeated host calls replayed in C (engine/host/compiled.py, the extension _replay_ext).

    mpiexec -n P python compiled_worker.py [--disabled]

Counted: which calls entered the executable's Python ``execute`` (the others ran as replays).
Uneven slabs, element value = global index, float64 and complex64, every host method and push
route. For each: repeated calls into the engine-owned result, into one out=, alternating two out=
arrays and two operands (a double-buffered loop), are right at every step and, from the third
call of a binding on, run without Python (alltoallw: always in Python); the engine-owned result
does not change under out= calls. Then, where replays exist: a new out= on one rank only (the
others replay, hand the call back, and every rank gets its data), a read-only out= on one rank
(every rank raises the same error, no byte of any out= or result changes), an out= reshaped in
place on one rank (checked again in Python), a released operand on one rank, more out= arrays in
turn than a handle keeps replays of, a DEBUG logger (calls go through Python and log; DEBUG during
an object's first calls does not keep it from replaying later), an out= changed in place on one
rank after its binding replays (read-only, a dtype view, its buffer moved by __setstate__, also before its
first replay; retyped to a dtype object at its old dtype's freed address, a record dtype renamed), several
fields, free(), an object
dropped without free() and finalize(): no replay is left behind. ``--disabled`` (REDIST_COMPILED_REPLAY=0): every call runs
in Python and no replay is made.
"""

from __future__ import annotations

import gc
import logging
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import PUSH_ROUTES, Report, global_values, push_route, sl  # noqa: E402

import redist  # noqa: E402
from redist import Redistribute, Slab  # noqa: E402
from redist.engine import errors  # noqa: E402
from redist.engine.host import compiled, executable, push  # noqa: E402

SHAPES = ((13, 10, 6), (40, 33, 20))  # the second lands nothing at P = 2: push's other routes too
METHODS = (*PUSH_ROUTES, "hybrid", "datatype", "pack", "alltoallw")  # "auto" is push on one node
STEPS = 6
python_calls = [0]  # calls that entered an executable's execute() in Python


def _counted(cls):
    original = cls.execute

    def execute(self, *args, **kwargs):
        python_calls[0] += 1
        return original(self, *args, **kwargs)

    cls.execute = execute


_counted(push.PushExecutable)
_counted(executable.HostExecutable)


def problem(shape, dtype, rank, P):
    g = global_values(shape, dtype)
    ib, ob = Slab.X.box(rank, shape, nranks=P), Slab.Y.box(rank, shape, nranks=P)
    return g, ib, ob, np.ascontiguousarray(g[sl(ib)])


def make(a, ib, ob, method):
    """A planned object of ``method`` (None where the MPI lacks it: raised on every rank)."""
    with push_route(method):
        r = Redistribute(a, ib, ob, options={"host_method": method.split("-")[0]})
        try:
            r.plan()
        except errors.NotSupportedError:
            r.free()
            return None
    return r


def held(r) -> int:
    return 0 if r._replays is None else r._replays.count()


def out_replays(method: str, shape, symmetric: bool) -> bool | None:
    """Whether an out= call of ``method`` has a replay (None: not checked): the message methods'
    always, alltoallw's never; push's (as planned, or copying across memories at every size) on the small
    shape (it lands, or copies across memories) or where it stores into host symmetric memory. Its other routes depend on P and
    the MPI (where nothing crosses ranks every route lands; messages run in Python:
    PushExecutable.replay)."""
    if method in ("hybrid", "datatype", "pack", "alltoallw"):
        return method != "alltoallw"
    return True if method in ("auto", "push", "push-copies") and (symmetric or shape == SHAPES[0]) else None


def loops(report: Report, world, disabled: bool) -> None:
    rank, P = world.Get_rank(), world.Get_size()
    for shape in SHAPES:
        for dtype in (np.float64, np.complex64):
            g, ib, ob, a = problem(shape, dtype, rank, P)
            want = g[sl(ob)]
            for symmetric in (False, True):
                if symmetric:
                    outs = [redist.allocate_symmetric_memory(want.shape, np, dtype=dtype, make_symmetric=True)
                            for _ in range(2)]
                else:
                    outs = [np.empty(want.shape, dtype) for _ in range(2)]
                for method in METHODS:
                    label = f"{method} {shape} {np.dtype(dtype).name} {'symmetric' if symmetric else 'private'} out="
                    r = make(a, ib, ob, method)
                    if r is None:
                        continue
                    one_loop(report, r, label, a, want, outs, disabled=disabled,
                             out_replay=out_replays(method, shape, symmetric))
                if symmetric:
                    for out in outs:
                        redist.free_symmetric_memory(out)


def one_loop(report: Report, r, label: str, a, want, outs, *, disabled: bool, out_replay: bool | None) -> None:
    """Repeated calls of ``r`` into its result and into ``outs``; ``out_replay``: whether its out= calls
    replay (None: not checked)."""
    result_replays = not disabled and not label.startswith("alltoallw")
    if disabled:
        out_replay = False
    report.check((r._replays is not None) == (not disabled), f"{label}: replays {r._replays}")
    operands = [a + 1, a + 2]
    # the engine-owned result, one operand
    for step in range(STEPS):
        before = python_calls[0]
        res = r.execute()
        report.check(np.array_equal(res, want), f"{label}: result step {step} wrong")
        ran = python_calls[0] - before
        if step >= 2:  # the first runs in Python, the second too and offers its replay
            report.check(ran == (0 if result_replays else 1), f"{label}: result step {step}: {ran} Python calls")
    kept = res.copy()
    # two operands, two out= arrays: a double-buffered loop (four bindings)
    for step in range(3 * 4):
        op, out = operands[step % 2], outs[(step // 2) % 2]
        op[...] = a + step  # new data every step (the same arrays)
        r.reset_operand_unchecked(op)
        out[...] = -1
        before = python_calls[0]
        got = r.execute(out=out)
        ran = python_calls[0] - before
        report.check(got is out and np.array_equal(out, want + step), f"{label}: out= step {step} wrong")
        if step >= 4 and out_replay is not None:  # each binding has run once in Python (and offered its replay)
            report.check(ran == (0 if out_replay else 1), f"{label}: out= step {step}: {ran} Python calls")
    report.check(np.array_equal(res, kept), f"{label}: the engine-owned result changed under out= calls")
    replays = r._replays
    if replays is not None and result_replays:
        misuse(report, r, label, a, want, outs)
    r.free()
    report.check(replays is None or replays.count() == 0, f"{label}: replays left after free()")


def misuse(report: Report, r, label: str, a, want, outs) -> None:
    """On an object whose calls replay: one rank does something else."""
    world = report.comm
    rank, P = world.Get_rank(), world.Get_size()
    last = rank == P - 1
    r.reset_operand_unchecked(a)
    for _ in range(3):
        r.execute(out=outs[0])
    # a new out= on the last rank only: the others replay and hand the call back
    fresh = np.full(want.shape, -1, want.dtype)
    got = r.execute(out=fresh if last else outs[0])
    report.check(np.array_equal(got, want), f"{label}: new out= on rank {P - 1} only: wrong data")
    # a read-only out= on the last rank: every rank raises, nothing changes anywhere
    outs[0][...] = 7
    result_before = r.execute().copy()
    for _ in range(2):
        r.execute()
    bad = np.full(want.shape, 5, want.dtype)
    bad.flags.writeable = False
    target = bad if last else outs[0]
    report.expect_error(lambda: r.execute(out=target), errors.InvalidValueError, "read-only",
                        f"{label}: read-only out= on rank {P - 1}")
    report.check(np.all(outs[0] == 7) and np.all(bad == 5), f"{label}: a refused call wrote an out=")
    report.check(np.array_equal(r._result, result_before), f"{label}: a refused call wrote the result")
    # an out= reshaped in place on the last rank (after its binding replayed): checked in Python again
    for _ in range(3):
        r.execute(out=outs[1])
    if last and outs[1].ndim and outs[1].shape[0] > 1 and outs[1].shape[-1] > 1:
        outs[1].shape = outs[1].shape[::-1]
    if world.allreduce(int(outs[1].shape != want.shape)):
        report.expect_error(lambda: r.execute(out=outs[1]), errors.InvalidValueError, "shape",
                            f"{label}: out= reshaped in place on rank {P - 1}")
        outs[1].shape = want.shape
    # a released operand on the last rank: every rank raises, and the object works again after a reset
    for _ in range(3):
        r.execute()
    if last:
        r.release_operand()
    report.expect_error(lambda: r.execute(), errors.InvalidStateError, "released",
                        f"{label}: released operand on rank {P - 1}")
    r.reset_operand(a)
    report.check(np.array_equal(r.execute(), want), f"{label}: after the released operand")
    # more out= arrays in turn than a handle keeps replays of (4): right at every call
    many = [np.empty_like(want) for _ in range(6)]
    for step in range(4 * len(many)):
        out = many[step % len(many)]
        out[...] = -1
        r.execute(out=out)
        report.check(np.array_equal(out, want), f"{label}: cycling {len(many)} out= arrays, step {step} wrong")
    # DEBUG: every call goes through Python (and is logged)
    for _ in range(3):
        r.execute()
    logger = r._logger.logger if hasattr(r._logger, "logger") else r._logger
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        before = python_calls[0]
        r.execute()
        report.check(python_calls[0] - before == 1, f"{label}: a DEBUG call did not run in Python")
    finally:
        logger.setLevel(level)


def changed_in_place(report: Report, world, disabled: bool) -> None:
    """An out= whose binding replays, changed in place on the last rank only (the C record of the
    array is checked, not only Python's): made read-only (every rank raises, no byte changes),
    viewed as another dtype (every rank raises), its buffer moved by ``__setstate__`` (the data
    lands in the new buffer, the old one is not written), also between its first and second call.
    That a record goes with its array: tests/unit/test_compiled.py."""
    rank, P = world.Get_rank(), world.Get_size()
    last = rank == P - 1
    g, ib, ob, a = problem((13, 10, 6), np.float64, rank, P)
    want = g[sl(ob)]
    for method in ("auto", "hybrid", "pack"):
        label = f"{method} out= changed in place on rank {P - 1}"
        r = make(a, ib, ob, method)
        if r is None:
            continue
        flat = np.empty(want.size + 1, want.dtype)[:want.size]  # out= a view of it: __setstate__ cannot free
        out = flat.reshape(want.shape)                           # its buffer

        def replayed(steps=3):
            for step in range(steps):
                out[...] = -1
                before = python_calls[0]
                r.execute(out=out)
                ran = python_calls[0] - before
            report.check(np.array_equal(out, want), f"{label}: wrong data")
            report.check(ran == int(disabled), f"{label}: the last call ran {ran} times in Python")

        replayed()
        out[...] = 7
        result_before = r.execute().copy()
        if last:
            out.flags.writeable = False
        report.expect_error(lambda: r.execute(out=out), errors.InvalidValueError, "read-only", f"{label}: read-only")
        report.check(np.all(out == 7), f"{label}: a refused call wrote the read-only out=")
        report.check(np.array_equal(r._result, result_before), f"{label}: a refused call wrote the result")
        out.flags.writeable = True
        replayed()
        if last:
            out.dtype = np.int64  # the same bytes, another dtype (in place)
        report.expect_error(lambda: r.execute(out=out), errors.InvalidValueError, "dtype", f"{label}: dtype view")
        out.dtype = np.float64
        replayed()
        moved(report, r, out, want, last, f"{label}: after its replays")
        replayed()
        r.free()
        # moved before any record of it (between its first and second call): the Python shortcuts too
        r = make(a, ib, ob, method)
        out = np.empty(want.size + 1, want.dtype)[:want.size].reshape(want.shape)
        r.execute(out=out)
        moved(report, r, out, want, last, f"{label}: after its first call")
        replayed()
        r.free()


def moved(report: Report, r, out, want, last: bool, label: str) -> None:
    """``out`` moved to a new buffer by ``__setstate__`` on the last rank: the next calls write the new
    buffer (the API reads the data pointer again), never the old one."""
    old = out[...]
    if last:  # a new buffer of the same bytes (the view's base keeps the old one)
        out.__setstate__(out.__reduce__()[2])
    report.check(not last or out.ctypes.data != old.ctypes.data, f"{label}: __setstate__ did not move")
    for _ in range(3):
        out[...] = -1
        old[...] = -1
        r.execute(out=out)
        report.check(np.array_equal(out, want), f"{label}: an out= moved by __setstate__ was not written")
        report.check(not last or np.all(old == -1), f"{label}: the buffer __setstate__ replaced was written")


def retyped_elsewhere(report: Report, world, disabled: bool) -> None:
    """An out= whose binding replays, changed on the last rank once the API's caches of it have gone
    (8 other out= arrays since) while its C record stays: retyped in place to a dtype object made after
    its own was freed (numpy's allocator puts it at the freed one's address), or a record dtype's
    field renamed in place (the same dtype object). Refused on every rank (the C record holds the dtype
    it compares by address; a record dtype is not matched in C), no byte of it written; the other ranks,
    which replay, hand their call back."""
    rank, P = world.Get_rank(), world.Get_size()
    last = rank == P - 1
    g, ib, ob, a = problem((13, 10, 6), np.float64, rank, P)
    want = g[sl(ob)]
    record = np.dtype([("a", "<f8")])
    for change in ("retyped", "renamed"):
        for method in ("auto", "push"):  # (the message methods' uncached calls drop every replay and record)
            label = f"{method} out= {change} in place on rank {P - 1} after its caches went"
            own = np.dtype("f8").newbyteorder("<") if change == "retyped" else np.dtype([("a", "<f8")])
            operand = a if change == "retyped" else a.view(record)
            r = make(operand, ib, ob, method)
            if r is None:
                continue
            out = np.empty(want.shape, own)  # a dtype object of its own (numpy's float64 is never freed)
            for _ in range(3):
                r.execute(out=out)
            others = [np.empty(want.shape, operand.dtype) for _ in range(8)]
            for other in others:  # calls in Python (not replayed): the API's caches forget out and its dtype
                r.execute(out=other, release_workspace=True)
            recorded = 0 if r._replays is None else r._replays.recorded()
            kept = not disabled and change == "retyped" and r._exe.method == "push"  # (auto: push where P > 1)
            report.check(recorded == int(kept), f"{label}: {recorded} records")
            freed = id(own)
            del own
            if last and change == "retyped":
                out.dtype = np.float64  # the array lets go of its dtype
                out.dtype = np.dtype("i8").newbyteorder("<")
            elif last:
                out.dtype.names = ("b",)
            reused = world.allreduce(int(last and change == "retyped" and id(out.dtype) == freed))
            out.view(np.uint8)[...] = 255
            report.expect_error(lambda: r.execute(out=out), errors.InvalidValueError, "dtype",
                                f"{label} (at the freed address: {bool(reused)})")
            report.check(np.all(out.view(np.uint8) == 255), f"{label}: a refused call wrote the out=")
            if last and change == "retyped":
                out.dtype = np.float64
            elif last:
                out.dtype.names = ("a",)
            r.execute(out=out)
            report.check(np.array_equal(out.view(np.float64), want), f"{label}: wrong data after")
            r.free()


def fields(report: Report, world, disabled: bool) -> None:
    """Several fields: repeated result calls replay; the data of each field is right."""
    rank, P = world.Get_rank(), world.Get_size()
    shape = (11, 9, 7)
    g, ib, ob, a = problem(shape, np.float64, rank, P)
    b = (a * 3).astype(np.complex64)
    for method in ("auto", "hybrid"):
        r = Redistribute((a, b), ib, ob, options={"host_method": method})
        r.plan()
        for step in range(STEPS):
            before = python_calls[0]
            ra, rb = r.execute()
            ok = np.array_equal(ra, g[sl(ob)]) and np.array_equal(rb, (g[sl(ob)] * 3).astype(np.complex64))
            report.check(ok, f"fields {method}: step {step} wrong")
            if step >= 2:
                report.check(python_calls[0] - before == int(disabled), f"fields {method}: step {step} in Python")
        r.free()


def debug_first(report: Report, world, disabled: bool) -> None:
    """DEBUG logging during an object's first calls (they run in Python): its calls replay once the
    level is lowered (the calls at DEBUG offered nothing, and used up none of its offers)."""
    rank, P = world.Get_rank(), world.Get_size()
    g, ib, ob, a = problem((13, 10, 6), np.float64, rank, P)
    r = Redistribute(a, ib, ob)
    r.plan()
    logger = r._logger.logger
    level = logger.level
    logger.setLevel(logging.DEBUG)
    try:
        for _ in range(5):
            r.execute()
    finally:
        logger.setLevel(level)
    for step in range(4):
        before = python_calls[0]
        got = r.execute()
        report.check(np.array_equal(got, g[sl(ob)]), f"after DEBUG: step {step} wrong")
        if step >= 1:
            report.check(python_calls[0] - before == int(disabled), f"after DEBUG: step {step} ran in Python")
    r.free()


def lifetimes(report: Report, world, disabled: bool) -> None:
    """An object dropped without free() and finalize() leave no replay behind."""
    rank, P = world.Get_rank(), world.Get_size()
    g, ib, ob, a = problem((13, 10, 6), np.float64, rank, P)
    r = Redistribute(a, ib, ob)
    r.plan()
    for _ in range(4):
        res = r.execute()
    replays = r._replays
    report.check(disabled or replays.count() == 1, "dropped: no replay before")
    del r
    gc.collect()
    report.check(disabled or replays.count() == 0, "an object dropped without free() left its replays")
    report.check(np.array_equal(res, g[sl(ob)]), "the result held past the object is wrong")
    r = Redistribute(a, ib, ob)
    r.plan()
    for _ in range(4):
        r.execute()
    replays = r._replays
    redist.finalize()
    report.check(disabled or replays.count() == 0, "finalize() left replays")
    redist.initialize()
    r = Redistribute(a, ib, ob)
    r.plan()
    for _ in range(4):
        got = r.execute()
    report.check(np.array_equal(got, g[sl(ob)]), "after finalize/initialize: wrong data")
    r.free()


def main() -> int:
    disabled = "--disabled" in sys.argv
    if disabled:
        os.environ["REDIST_COMPILED_REPLAY"] = "0"
    redist.initialize()
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    report = Report(world)
    report.check(compiled.available() != disabled, f"compiled replays: {compiled.unavailable_reason()}")
    for part in (loops, changed_in_place, retyped_elsewhere, fields, debug_first, lifetimes):
        try:
            part(report, world, disabled)
        except Exception:  # noqa: BLE001
            report.exception(part.__name__)
        if not report.ok_everywhere():
            break
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
