# SPDX-License-Identifier: Apache-2.0
"""engine/host/compiled.py: the extension of the compiled replays is built, and its table refuses
what it cannot run (the replays themselves: tests/mpi/test_compiled.py)."""

from __future__ import annotations

import itertools
import sys

import numpy as np

from redist.engine.host import compiled
from redist.engine.host.replay import VERSION

_serials = itertools.count(10**9)  # far from the serials of objects made in this process


def test_extension_is_built():
    # an install whose compile failed runs every call in Python: said here, not left unnoticed
    assert compiled._replay_ext is not None, compiled.unavailable_reason()


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("REDIST_COMPILED_REPLAY", "0")
    assert not compiled.available()
    assert compiled.unavailable_reason() == "REDIST_COMPILED_REPLAY=0"
    monkeypatch.setenv("REDIST_COMPILED_REPLAY", "1")
    assert compiled.available()


def test_table_refuses_words_it_cannot_run():
    replays = compiled.Replays(next(_serials), False, 1, 2)
    header = [VERSION] + [0] * 16 + [0x1000]  # the 17 header words and one operand: no MPI calls given
    assert not replays.offer(np.array(header, np.int64), [0])
    assert not replays.offer(np.array([VERSION + 1] + header[1:], np.int64), [0])  # another version
    assert not replays.offer(np.array([VERSION], np.int64), [0])  # truncated
    assert replays.count() == 0


def test_no_replay_runs_for_an_unknown_binding():
    replays = compiled.Replays(next(_serials), False, 1, 3)
    assert replays.run1(0, 0x1000, 0) == replays.NONE
    assert replays.run([0], [0x1000], [7]) == replays.NONE
    a = np.zeros(4)
    assert replays.run1(id(a), a.ctypes.data, 0) == replays.NONE
    assert replays.run1(id(a), a.ctypes.data + 8, 0) == replays.MOVED  # its data is elsewhere now: nothing ran
    assert replays.run([id(a)], [a.ctypes.data + 8], [0]) == replays.MOVED
    replays.forget()  # nothing held: a no-op
    assert replays.count() == 0


def _recorded(replays, shape=(3, 4), dtype=np.float64):
    size = int(np.prod(shape))
    out = np.zeros(size + 1, dtype)[:size].reshape(shape)  # a view: __setstate__ cannot reuse its buffer
    replays.record_out(out, 7, [0x1000])
    assert replays.recorded() == 1
    return out


def test_out_record_goes_with_its_array():
    # a record names its array by address: it must go before that address can name another object
    replays = compiled.Replays(next(_serials), False, 1, 2)
    out = _recorded(replays)
    assert replays.run_out(0, 0x1000, out) == replays.NONE  # as recorded: key 7, which has no replay
    del out
    assert replays.recorded() == 0
    out = _recorded(replays)
    replays.forget()
    assert replays.recorded() == 0
    assert replays.run_out(0, 0x1000, out) == replays.NONE


def test_out_record_sees_an_array_changed_in_place():
    changes = {
        "read-only": lambda out: setattr(out.flags, "writeable", False),
        "reshaped": lambda out: setattr(out, "shape", (9, 1)),
        "another dtype": lambda out: setattr(out, "dtype", np.int64),
        "moved by __setstate__": lambda out: out.__setstate__(out.__reduce__()[2]),
    }
    replays = compiled.Replays(next(_serials), False, 1, 2)
    for name, change in changes.items():
        out = _recorded(replays, (3, 3))
        data = out.ctypes.data
        change(out)
        assert name != "moved by __setstate__" or out.ctypes.data != data
        assert replays.run_out(0, 0x1000, out) == replays.CHANGED, name
        assert replays.recorded() == 0, name  # the record went: Python checks the array again
        assert replays.run_out(0, 0x1000, out) == replays.NONE, name


def test_out_record_names_its_operands():
    replays = compiled.Replays(next(_serials), False, 1, 2)
    out = _recorded(replays)
    assert replays.run_out(0, 0x2000, out) == replays.NONE  # checked against another operand only
    assert replays.recorded() == 1  # the record stays: the array is as it was
    replays.forget()


def test_out_records_are_bounded():
    replays = compiled.Replays(next(_serials), False, 1, 2)
    arrays = [np.zeros(4) for _ in range(100)]
    for out in arrays:
        replays.record_out(out, 7, [0x1000])
    assert 1 <= replays.recorded() <= 64
    replays.record_out(arrays[0], 7, [0x1000])  # again: one record of it, not two
    count = replays.recorded()
    replays.record_out(arrays[0], 7, [0x1000])
    assert replays.recorded() == count
    replays.forget()
    assert replays.recorded() == 0


def test_out_record_of_a_subclass():
    class Tagged(np.ndarray):
        pass

    replays = compiled.Replays(next(_serials), False, 1, 2)
    out = np.zeros((3, 4)).view(Tagged)
    replays.record_out(out, 7, [0x1000])
    assert replays.run_out(0, 0x1000, out) == replays.NONE  # as recorded
    assert replays.run_out(0, 0x1000, out.view(np.ndarray)) == replays.NONE  # another object: no record
    out.shape = (4, 3)
    assert replays.run_out(0, 0x1000, out) == replays.CHANGED
    del out
    assert replays.recorded() == 0


def test_out_record_owns_its_dtype_and_type():
    # the record compares the dtype and type objects by address: it holds them, so that a dtype or type
    # made after the array's was freed cannot take that address and pass for it (counts are taken
    # outside the asserts: pytest's rewriting holds what an assert evaluates)
    class Tagged(np.ndarray):
        pass

    def counts(*objects):
        return tuple(sys.getrefcount(o) for o in objects)

    replays = compiled.Replays(next(_serials), False, 1, 2)
    out = np.zeros((3, 4), np.dtype([("a", "<f8")])).view(Tagged)  # a dtype object of its own
    first = out.dtype
    before = counts(first, Tagged)
    replays.record_out(out, 7, [0x1000])
    recorded = counts(first, Tagged)
    assert recorded == (before[0] + 1, before[1] + 1)
    replays.record_out(out, 7, [0x1000])  # recorded again: still one reference each
    again = counts(first, Tagged)
    assert again == recorded
    out.dtype = np.dtype([("b", "<i8")])  # the array lets go of the first dtype; the record holds it
    retyped = counts(first)
    assert retyped == (before[0],)
    changed = replays.run_out(0, 0x1000, out)  # as it is now is not as recorded: the record goes with its references
    after = counts(first, Tagged)
    assert changed == replays.CHANGED
    assert after == (before[0] - 1, before[1])
    second = out.dtype
    for release in ("forget", "drop"):  # forget(), and an array dropped, release them too
        held = counts(second)
        replays.record_out(out, 7, [0x1000])
        recorded = counts(second)
        if release == "forget":
            replays.forget()
        else:
            del out
        released = counts(second)
        assert recorded == (held[0] + 1,)
        assert released == (held[0] - (release == "drop"),), release
        assert replays.recorded() == 0


def test_data_pointer():
    base = np.zeros((5, 6))
    for view in (base, base[::-1], base[1:, ::-2], base.T, base[2:3, 4:5], np.zeros(0)):
        assert compiled.data_pointer(view) == view.__array_interface__["data"][0]
    base = np.zeros(5)
    moved = base[:4]  # a view of base, which keeps the old buffer: the new one is elsewhere
    old = compiled.data_pointer(moved)
    moved.__setstate__(np.ones(4).__reduce__()[2])  # numpy moves an array's data in place
    assert compiled.data_pointer(moved) == moved.__array_interface__["data"][0] != old
    assert compiled.data_pointer(base) == old
