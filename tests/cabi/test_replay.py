# SPDX-License-Identifier: Apache-2.0
"""The C ABI's compiled replays (cabi/redist_replay.c, engine/host/replay.py) at P = 2 and 3."""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.cabi]


@pytest.mark.parametrize("nprocs", [2, 3])
def test_replays(cabi, mpirun, nprocs):
    """Repeated C calls run without Python and stay right; disagreeing ranks, one rank's bad out=,
    rebinding, fields, free and finalize (tests/cabi/workers/replay_worker.py)."""
    mpirun(nprocs, "replay_worker.py", cabi.dir, timeout=240)
