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


@pytest.mark.parametrize("nprocs", [2, 3])
def test_single_rank_corruptions_property(mpirun, nprocs):
    """Hypothesis over random valid problems with at most one corruption on one rank (operand,
    boxes, options, out=, field index, call sequence), every host method
    (tests/mpi/workers/property_worker.py): every rank raises the same error or none does, and a
    failed call changes no byte of any rank's operand, result or out=."""
    res = mpirun(nprocs, "property_worker.py", 150, timeout=300)
    assert "150 examples" in res.stdout
