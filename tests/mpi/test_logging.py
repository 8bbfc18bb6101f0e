# SPDX-License-Identifier: Apache-2.0
"""Where redist logs (RedistributeOptions.logger): the "redist" logger by default, the rank at the
start of every line, planning at INFO and each execute() at DEBUG, under mpiexec on 2 ranks."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from redist._launch import find_mpiexec, run_mpi

pytestmark = pytest.mark.mpi

STEPS = 25
CODE = f"""
import logging, sys
import numpy as np
from mpi4py import MPI
import redist
from redist import Redistribute, Slab

level = getattr(logging, sys.argv[1])
# one file per rank: mpiexec may splice one rank's output into the middle of another's line
logfile = f"{{sys.argv[2]}}/{{MPI.COMM_WORLD.rank}}.log"
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s|%(message)s", filename=logfile)
logging.getLogger("redist").setLevel(level)        # the root logger stays at WARNING
redist.initialize(device_id="cpu")
rank = redist.get_context().process_group.rank
a = np.zeros(Slab.X.shape(rank, (8, 6, 4)))
with Redistribute(a, Slab.X, Slab.Y) as r:
    r.plan()
    for _ in range({STEPS}):
        r.execute()
        r.reset_operand_unchecked(a)
print("done", flush=True)
"""


def log_lines(level: str, tmp_path: Path) -> list[str]:
    """The first line of both ranks' log records (a plan's description continues on lines without "|")."""
    if find_mpiexec() is None:
        pytest.skip("mpiexec not found")
    res = run_mpi(2, [sys.executable, "-c", CODE, level, str(tmp_path)], timeout=120)
    assert res.returncode == 0 and res.stdout.count("done") == 2, res.stdout
    return [
        line for rank in (0, 1) for line in (tmp_path / f"{rank}.log").read_text().splitlines() if "|" in line
    ]


def test_info_has_planning_summaries_only(tmp_path):
    lines = log_lines("INFO", tmp_path)
    assert lines and all(re.match(r"INFO redist\|rank [01]: ", line) for line in lines), lines
    for rank in (0, 1):
        mine = [line for line in lines if line.startswith(f"INFO redist|rank {rank}: ")]
        assert any("Redistribute: 2 ranks" in line for line in mine), lines
        assert any(re.search(r"\|rank \d: plan: [0-9.]+ ms on cpu", line) for line in mine), lines
    assert not any("execute:" in line for line in lines), lines
    assert len(lines) < STEPS, f"{len(lines)} INFO lines for {STEPS} executes: {lines}"


def test_debug_logs_every_execute_with_the_rank(tmp_path):
    lines = log_lines("DEBUG", tmp_path)
    assert all(re.match(r"(INFO|DEBUG) redist\|rank [01]: ", line) for line in lines), lines
    for rank in (0, 1):
        executes = [
            line for line in lines if re.match(rf"DEBUG redist\|rank {rank}: execute: [0-9.]+ ms", line)
        ]
        assert len(executes) == STEPS, lines
