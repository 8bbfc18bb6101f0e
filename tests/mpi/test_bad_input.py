# SPDX-License-Identifier: Apache-2.0
"""The bad-input matrix (tests/mpi/bad_input_cases.py): every case in its own mpiexec, at P=2 and
P=3, under a watchdog: the expected outcome on every rank, never a hang, a crash or wrong data.

CI runs all of it; ``python -m pytest tests/mpi/test_bad_input.py`` runs it alone (about 4
minutes on 2 cores).
"""

from __future__ import annotations

import importlib.util

import pytest
from bad_input_cases import CASES

pytestmark = pytest.mark.mpi

WATCHDOG_S = 90


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input(mpirun, name, nprocs):
    missing = [m for m in CASES[name].needs if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    mpirun(nprocs, "bad_input_worker.py", name, timeout=WATCHDOG_S)
