# SPDX-License-Identifier: Apache-2.0
"""Push's status codes (engine/host/status.py's WELL plus these bits, and the codes of the ranks whose
peers store straight into their ``out=``): what a rank says about a call in its status message."""

from __future__ import annotations

from ..status import WELL

#: status codes (engine/host/status.py): WELL plus these bits, and the direct codes
_OUT, _STALE = 1, 2
_DIRECT = WELL + _OUT + _STALE + 1  # my every out= can be stored into directly: its addresses are in my segment
_DIRECT_STALE = _DIRECT + 1  # the same, and my messages are not built
_SHARED = _DIRECT_STALE + 1  # my every out= is in host symmetric memory: plain stores, no cross-memory copy
_SHARED_STALE = _SHARED + 1  # the same, and my messages are not built
_CODES = _SHARED_STALE + 1  # with the arrival tag, 16 tags per object
_WITH_OUT = (WELL + _OUT, WELL + _OUT + _STALE)  # the codes of a rank with an out= that peers cannot store into
_DIRECTS = (_DIRECT, _DIRECT_STALE, _SHARED, _SHARED_STALE)  # the peers store straight into my out=
_SHAREDS = (_SHARED, _SHARED_STALE)
_CROSS = (_DIRECT, _DIRECT_STALE)  # my out= is copied into across memories (cross-memory attach)
_STALES = (WELL + _STALE, WELL + _OUT + _STALE, _DIRECT_STALE, _SHARED_STALE)
