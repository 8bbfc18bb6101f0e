# SPDX-License-Identifier: Apache-2.0
"""Python's repeated host calls replayed in C (the extension ``_replay_ext``: engine/host/replay_ext.c
around cabi/redist_replay.c, the C ABI's replays).

A time loop calls ``execute()`` with the same operand and ``out=`` every step, or alternates between
a few. Once such a call has run through Python and succeeded, the executable's words for the next
identical call (:meth:`.push.PushExecutable.replay`, :meth:`.executable.HostExecutable.replay`)
are installed in the extension's table under the object's :class:`Replays`; the next call with
that binding runs there: the status round, then the stores, copies and messages, without the
interpreter. A peer that says something else hands the call back to Python on every rank
(``Redistribute._resume``), as the C ABI does. The executable forgets the words when they stop
being valid (freed, released operand, new status codes, freed host symmetric memory) and calls
:meth:`Replays.forget`.

The extension is optional: setup.py builds it where a C compiler is found. Without it (or with
``REDIST_COMPILED_REPLAY=0``) every call runs in Python, with the same results.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["Replays", "available", "data_pointer", "drop_all", "unavailable_reason"]

try:
    from . import _replay_ext  # type: ignore[attr-defined]
except ImportError as _e:  # built without a C compiler, or a checkout that was never installed
    _replay_ext = None
    _missing = f"the extension redist.engine.host._replay_ext is not built ({_e})"
else:
    _missing = None
# None also from a stale build of the extension (made before it had this function)
_array_data = getattr(_replay_ext.lib, "redist_array_data", None) if _replay_ext is not None else None


def data_pointer(array: np.ndarray) -> int:
    """The address of element 0 of the numpy ``array``, read anew (what the API's shortcuts for an
    ``out=`` seen before compare: numpy's ``__setstate__`` moves an array's data in place): one C call
    where the extension is built (also with REDIST_COMPILED_REPLAY=0), else numpy's
    ``__array_interface__`` (2-3 us)."""
    if _array_data is not None:
        return _array_data(id(array))
    return array.__array_interface__["data"][0]


def unavailable_reason() -> str | None:
    """Why Python's calls are not replayed in C (None: they are)."""
    if os.environ.get("REDIST_COMPILED_REPLAY", "").strip().lower() in ("0", "false", "no", "off"):
        return "REDIST_COMPILED_REPLAY=0"
    return _missing


def available() -> bool:
    """Whether new objects replay their repeated host calls in C."""
    return unavailable_reason() is None


def drop_all() -> None:
    """Every object's replays go (redist.finalize(): the requests they name are freed)."""
    if _replay_ext is not None:
        _replay_ext.lib.redist_replay_drop_all()


class Replays:
    """One object's replays in the extension's table (keyed by ``serial``, unique in the process),
    for ``nfields`` operands, with room for what ``nranks - 1`` peers say. Local."""

    #: what :meth:`run1` and :meth:`run` return: no replay of this binding (run it in Python), done, a
    #: peer said something else (nothing written: Python finishes the call), an MPI call failed
    NONE, DONE, RESUME, FAILED = -1, 0, 1, 2
    #: what :meth:`run_out` also returns: the out= changed in place since its record (which went)
    CHANGED = -2
    #: what every run returns where a numpy operand's data moved since it was bound (nothing ran)
    MOVED = -3

    __slots__ = ("serial", "fields", "nfields", "heard", "_objects", "_ops", "_outs", "_lib", "_ffi", "_watched")
    serial: int
    fields: int
    nfields: int
    heard: Any  # int32_t[nranks + 2]: what run() heard (what_was_heard)

    def __init__(self, serial: int, fields: bool, nfields: int, nranks: int) -> None:
        assert _replay_ext is not None
        self._lib, self._ffi = _replay_ext.lib, _replay_ext.ffi
        self.serial, self.fields, self.nfields = serial, int(fields), nfields
        self.heard = self._ffi.new("int32_t[]", nranks + 2)
        self._objects = self._ffi.new("uintptr_t[]", nfields)
        self._ops = self._ffi.new("uintptr_t[]", nfields)
        self._outs = self._ffi.new("uintptr_t[]", nfields)
        self._watched: dict[int, weakref.ref] = {}  # id(out) -> a weak reference that drops its record

    def offer(self, words: np.ndarray, outs: Sequence[int]) -> bool:
        """Install ``words`` (engine/host/replay.py) for the binding just run into ``outs`` (one key
        per field; 0: the engine-owned result). False where the extension refused them (another
        version of the words, no memory): such calls stay in Python."""
        return self._lib._redist_set_replay(self.serial, self.fields, self.nfields, list(outs), list(outs),
                                            self._ffi.from_buffer("int64_t[]", words), len(words)) == 0

    def forget(self) -> None:
        """Every replay of this object goes (what the executable calls when its words stop being valid)."""
        self._lib._redist_drop_replay(self.serial)
        self._forget_outs()

    def _forget_outs(self) -> None:
        self._lib.redist_out_forget(self.serial)
        self._watched.clear()

    def record_out(self, out: np.ndarray, key: int, operands: Sequence[int]) -> None:
        """Record ``out`` as it is now (checked against ``operands``) as the array of replay key
        ``key``, for :meth:`run_out`. The record goes with the array (a weak reference's callback),
        so its address never names another object."""
        ident = id(out)
        if ident not in self._watched:
            if len(self._watched) >= 64:  # the C table keeps 64 records in all
                self._forget_outs()
            self._watched[ident] = weakref.ref(out, self._dropper(ident))
        self._lib.redist_out_record(self.serial, ident, key, list(operands), len(operands))

    def _dropper(self, ident: int):
        lib, serial, watched = self._lib, self.serial, self._watched  # not self: the callback keeps no cycle

        def drop(_ref: weakref.ref) -> None:
            lib.redist_out_drop(serial, ident)
            watched.pop(ident, None)

        return drop

    def recorded(self) -> int:
        """How many out= arrays this object has records of (:meth:`record_out`)."""
        return self._lib.redist_out_count(self.serial)

    def run_out(self, obj: int, operand: int, out: np.ndarray) -> int:
        """One field into a numpy ``out=``: as :meth:`run1` for the key of its record, where ``out``
        (the caller holds it) still has the type, data pointer, shape, strides, dtype and
        writability recorded with it and was checked against ``operand``; CHANGED where it was
        recorded and is not as recorded now; NONE otherwise."""
        return self._lib.redist_replay_execute_out(self.serial, obj, operand, id(out), self.heard, len(self.heard))

    def run1(self, obj: int, operand: int, out: int) -> int:
        """One field: the replay of this binding (``out``: its key, 0 for the engine-owned result):
        NONE, DONE, RESUME (:meth:`what_was_heard`), FAILED (:meth:`error`), or MOVED where ``obj``
        (``id()`` of the numpy operand, the caller holds it; 0: not numpy) has its data elsewhere
        than ``operand`` now (``ndarray.__setstate__``: nothing ran)."""
        return self._lib.redist_replay_execute1(self.serial, obj, operand, out, self.heard, len(self.heard))

    def run(self, objs: Sequence[int], operands: Sequence[int], outs: Sequence[int]) -> int:
        """Several fields: as :meth:`run1`."""
        self._objects[0:self.nfields] = objs
        self._ops[0:self.nfields] = operands
        self._outs[0:self.nfields] = outs
        return self._lib.redist_replay_execute(self.serial, self.fields, self.nfields, self._objects, self._ops,
                                               self._outs, self.heard, len(self.heard))

    def what_was_heard(self) -> tuple[int, list[int]]:
        """After RESUME: this rank's code and the codes its peers said."""
        return self.heard[0], [self.heard[2 + i] for i in range(self.heard[1])]

    def count(self) -> int:
        """How many bindings of this object have a replay now."""
        return self._lib.redist_replay_count(self.serial)

    def error(self) -> str:
        """After FAILED: the MPI call that failed and its message."""
        return self._ffi.string(self._lib.redist_replay_error()).decode("utf-8", "replace")
