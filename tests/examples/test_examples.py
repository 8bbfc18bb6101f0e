# SPDX-License-Identifier: Apache-2.0
"""Every script in examples/ runs under mpiexec as its docstring says, on small sizes, and checks itself.

Each example compares its distributed result with a one-process reference (or checks every
element) and exits non-zero on a mismatch; here it runs on 3 ranks (uneven slabs) and 1 rank.
A new example gets a row in ``RUNS``; ``test_every_example_is_run`` fails until it has one.
"""

from __future__ import annotations

import sys

import pytest
from helpers import NO_TORCH, TESTS, have_torch

from redist._launch import find_mpiexec, run_mpi

pytestmark = pytest.mark.mpi

EXAMPLES = TESTS.parent / "examples"

#: script -> (arguments for a small run, what its last line must say)
RUNS = {
    "time_loop.py": (["--shape", "11", "9", "7", "--steps", "3"], "max error"),
    "halo_exchange.py": (["--shape", "13", "9", "--iterations", "6"], "max error"),
    "several_fields.py": (["--shape", "9", "7", "5", "--steps", "3"], "0 wrong results"),
    "fno_layer.py": (
        ["--shape", "9", "7", "5", "--steps", "3", "--backend", "aot_eager"],
        "max relative difference",
    ),
}

#: examples that need PyTorch (skipped without it)
NEEDS_TORCH = {"fno_layer.py"}


#: examples with a test module of their own
ELSEWHERE = {
    "fft3d.py": "test_spectral.py",
    "taylor_green.py": "test_spectral.py",
    "jax_spectral.py": "test_spectral.py",
}


def test_every_example_is_run():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted({**RUNS, **ELSEWHERE})


@pytest.mark.parametrize("nprocs", [1, 3])
@pytest.mark.parametrize("script", sorted(RUNS))
def test_example(script, nprocs):
    if find_mpiexec() is None:
        pytest.skip("mpiexec not found")
    if script in NEEDS_TORCH and not have_torch():
        pytest.skip(NO_TORCH)
    args, expect = RUNS[script]
    res = run_mpi(nprocs, [sys.executable, str(EXAMPLES / script), *args], timeout=120)
    assert res.returncode == 0, res.stdout[-4000:]
    assert expect in res.stdout.strip().splitlines()[-1], res.stdout[-4000:]
