# SPDX-License-Identifier: Apache-2.0
"""RedistributeOptions(tune=...) and wisdom under mpiexec (tests/mpi/workers/autotune_worker.py): every
host candidate wins once on fuzzed problems, bit-exact; the slowest rank decides; rank
0's wisdom decides; export / import / forget, a corrupt file, REDIST_WISDOM across
finalize()/initialize()."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize("nprocs", [2, 3])
def test_tune(mpirun, nprocs):
    mpirun(nprocs, "autotune_worker.py", timeout=300)


def test_tune_cli(tmp_path):
    """`python -m redist tune --ranks 2` relaunches under mpiexec, prints the table, exports wisdom and
    draws the bar chart (or says why not)."""
    import importlib.util
    import json
    import subprocess
    import sys

    png, path = tmp_path / "t.png", tmp_path / "w.json"
    args = "tune --ranks 2 --shape 16 12 8 --to pencil-z --dtype complex128".split()
    cmd = [sys.executable, "-m", "redist", *args, "--wisdom", str(path), "--plot", str(png)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "redist tune: 2 rank(s), global (16, 12, 8) complex128" in res.stdout, res.stdout
    marked = [line for line in res.stdout.splitlines() if line.startswith("  * ")]
    assert len(marked) == 1 and f"chose {marked[0].split()[1]} after" in res.stdout, res.stdout
    assert json.loads(path.read_text())["entries"][0]["choice"] == marked[0].split()[1]
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in res.stdout and not png.exists(), res.stdout
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", res.stdout
