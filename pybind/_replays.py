# SPDX-License-Identifier: Apache-2.0
"""The compiled replays of a :class:`~redist.Redistribute`'s calls (engine/host/compiled.py): a
call that repeats a binding runs as the replay of the words offered after an earlier call of it,
and hands itself back to Python where a peer says something else.

:class:`_Replays` is one part of :class:`~redist.Redistribute` (its state is made there).
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from ._state import _State
from .engine.errors import CommunicationError, InternalError

#: how many times one binding's replay is offered (Redistribute._offer)
_OFFERS = 3


class _Replays:
    """Running, offering and resuming the compiled replays of :class:`~redist.Redistribute`."""

    def _replayed(self, replays, out) -> Any:
        """Run this call (no stream, the default flags) as the replay of its binding, where there is
        one: what it returns; None where the call goes through Python (not READY, no replay, DEBUG
        logging each call). A peer that says something else hands the call back to Python here, on
        every rank (:meth:`_resume`)."""
        if out is not None and (self._fields or not isinstance(out, np.ndarray)):  # (first: the torch out= hot path)
            return None
        if self._state is not _State.READY or self._logger.logger.isEnabledFor(logging.DEBUG):
            return None
        numpy = self._template.package == "numpy"  # its operands' data pointers are compared in C (MOVED)
        if out is None:
            if self._fields:
                rc = replays.run([id(o) for o in self._operand_obj] if numpy else (0,) * self._nfields,
                                 self._operand_ptrs, (0,) * self._nfields)
            else:
                rc = replays.run1(id(self._operand_obj) if numpy else 0, self._operand_ptrs[0], 0)
            target = self._result
        else:  # the out= is matched in C against its record (_offer), data pointer included
            rc = replays.run_out(id(self._operand_obj) if numpy else 0, self._operand_ptrs[0], out)
            target = out
        if rc == replays.DONE:
            return target
        if rc == replays.NONE or rc == replays.MOVED:  # MOVED: Python rebinds the operand (_operands_moved)
            return None
        if rc == replays.CHANGED:  # reshaped, retyped, made read-only or moved in place: checked again
            self._out_again.pop(id(out), None)
            self._out_checked.pop((id(out), 0), None)
            self._out_fast = None
            return None
        if rc == replays.RESUME:
            code, heard = replays.what_was_heard()
            self._resume(code, heard, out)
            return target
        why = replays.error()  # the same on every rank where the kernel refused a cross-memory copy
        raise CommunicationError(why if why.startswith("redist host backend") else
                                 f"redist host backend: MPI error in execute (compiled replay): {why}")

    def _offer(self, replays, out) -> None:
        """After a call that ran in Python: the words of its replay for the next call of this
        binding (local; an object whose words cannot be made keeps running in Python). A binding
        whose replay was installed _OFFERS times already stays in Python: its replays keep going
        before they run (a loop cycling through more bindings than a handle keeps, a checked rebind
        every step)."""
        again = None
        if out is None:
            key = (0,) * self._nfields
        elif self._fields or not isinstance(out, np.ndarray):  # an out= replays in C only as a numpy array
            return
        else:
            again = self._again_hit(out)
            if again is None:
                return
            key = (again[4],)
        binding = (*self._operand_ptrs, *key)
        offered = self._offered.get(binding, 0)
        if offered >= _OFFERS:
            return
        words = self._replay(replays.forget)
        if words is None:  # not counted: DEBUG logging, a binding not built yet, a route that cannot replay
            return
        if len(self._offered) >= 64:
            self._offered.clear()
        self._offered[binding] = offered + 1
        if not replays.offer(words, key):
            self._replays = None
            self._logger.warning("redist: the compiled replays refused this object's words (a build of another "
                                 "redist? reinstall it); its calls run in Python")
        elif again is not None and out.dtype.names is None:  # C compares the dtype by address: not its names
            replays.record_out(out, key[0], again[2])

    def _replay(self, forget) -> np.ndarray | None:
        """The words of the C ABI's compiled replay of the call just made (redist.cabi; None: it
        cannot be replayed), valid until ``forget()`` is called. Local."""
        if (self._exe is None or self._state is not _State.READY or self._fresh or self._streams
                or self._logger.isEnabledFor(logging.DEBUG)):  # a replay logs nothing
            return None
        return self._exe.replay(forget)

    def _resume(self, code: int, heard, out) -> None:
        """Collective: the rest of a replayed call into ``out`` (redist.cabi; the operand bound as it
        was made) whose status round, where this rank said ``code``, heard ``heard``."""
        try:
            _, problem = self._bind_call(out)  # accepted when the replay was made
            if problem is not None:
                raise InternalError(f"a replayed call's out= is refused now: {problem[1]}")
            self._exe.resume(code, heard)
        except BaseException:
            self._unbind_outs()  # as execute() does
            raise
