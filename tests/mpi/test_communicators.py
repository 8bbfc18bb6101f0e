# SPDX-License-Identifier: Apache-2.0
"""redist initialised on a split, a duplicated or a wrapped communicator (tests/mpi/workers/communicator_worker.py).

Site MPIs differ here from the mpich wheel: Open MPI and Intel MPI attach MPI_TAG_UB to
MPI.COMM_WORLD only. ``.ci/run`` runs this file against Debian's Open MPI too.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("kind,nprocs", [("split", 3), ("split", 4), ("dup", 2), ("group", 3)])
def test_communicator(mpirun, kind, nprocs):
    mpirun(nprocs, "communicator_worker.py", kind, timeout=120)
