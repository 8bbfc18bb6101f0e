# SPDX-License-Identifier: Apache-2.0
"""RedistributeOptions(tune=...) and wisdom under mpiexec (tests/mpi/workers/tune_worker.py): every
host candidate wins once on fuzzed problems, bit-exact; the slowest rank's median decides; rank
0's wisdom decides; export / import / forget, a corrupt file, REDIST_WISDOM across
finalize()/initialize()."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [2, 3])
def test_tune(mpirun, nprocs):
    mpirun(nprocs, "tune_worker.py", timeout=300)
