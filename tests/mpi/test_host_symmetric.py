# SPDX-License-Identifier: Apache-2.0
"""Host symmetric memory and push's stores straight into an out= there
(tests/mpi/workers/host_symmetric_worker.py: loops on every host method and push route, mixed
private and symmetric out=, misuse on one rank, use after free, finalize/initialize cycles)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_host_symmetric_memory(mpirun, nprocs):
    mpirun(nprocs, "host_symmetric_worker.py", timeout=240)
