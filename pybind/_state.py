# SPDX-License-Identifier: Apache-2.0
"""The states of a :class:`~redist.Redistribute` (its state machine: pybind/_redistribute.py)."""

from __future__ import annotations

import enum


class _State(enum.Enum):
    NEW = "constructed, operand bound, not planned"
    NEW_RELEASED = "constructed, operand released, not planned"
    READY = "planned, operand bound"
    RELEASED = "planned, operand released"
    FREED = "freed"


_PLANNED = (_State.READY, _State.RELEASED)
_HAS_OPERAND = (_State.NEW, _State.READY)
_RELEASED_MSG = ("Execution cannot be performed after the operand has been released. Use reset_operand() "
                 "to provide a new operand before performing the execution.")
