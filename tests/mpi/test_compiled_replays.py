# SPDX-License-Identifier: Apache-2.0
"""Python's repeated host calls replayed in C (engine/host/compiled.py; tests/mpi/workers/compiled_worker.py:
every host method and push route, result and out= loops, one rank doing something else, lifetimes;
and with REDIST_COMPILED_REPLAY=0)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_compiled_replays(mpirun, nprocs):
    mpirun(nprocs, "compiled_worker.py", timeout=300)


def test_compiled_replays_disabled(mpirun):
    mpirun(2, "compiled_worker.py", "--disabled", timeout=300)
