# SPDX-License-Identifier: Apache-2.0
"""The command lines (``redist`` / ``python -m redist``, ``python -m redist.cabi``): argument errors
are argparse's (exit code 2, usage on stderr) and come before any mpiexec starts."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

import redist


def cli(*args: str, module: str = "redist") -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, timeout=60)


def test_version():
    res = cli("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"redist {redist.__version__}", res


@pytest.mark.parametrize(
    "args,message",
    [
        (["--dtype", "nonsense"], r"argument --dtype: data type 'nonsense' not understood"),
        (["--dtype", "object"], r"argument --dtype: object is not a number type"),
        (["--shape", "-4", "8", "8"], r"argument --shape: must be at least 1, got -4"),
        (["--shape", "8", "x"], r"argument --shape: invalid int value: 'x'"),
        (["--ranks", "0"], r"argument --ranks: must be at least 1, got 0"),
        (["--iterations", "0"], r"argument --iterations: must be at least 1, got 0"),
        (
            ["--shape", "8", "8", "--to", "slab-z"],
            r"argument --to: slab-z needs at least 3 dimensions, got 2-D",
        ),
        (
            ["--shape", "8", "8", "--from", "pencil-y"],
            r"argument --from: pencil-y needs a 3-D --shape, got 2-D",
        ),
        (["--to", "diagonal"], r"argument --to: invalid choice: 'diagonal'"),
    ],
)
def test_demo_argument_errors_before_mpiexec(args, message):
    res = cli("demo", *args)
    assert res.returncode == 2, res
    assert "launching" not in res.stdout and "usage: python -m redist demo" in res.stderr, res
    assert re.search(message, res.stderr), res


@pytest.mark.parametrize(
    "args,message",
    [
        (["--dtype", "nonsense"], r"argument --dtype: data type 'nonsense' not understood"),
        (["--budget", "x"], r"argument --budget: invalid float value: 'x'"),
    ],
)
def test_tune_argument_errors_before_mpiexec(args, message):
    res = cli("tune", *args)
    assert res.returncode == 2, res
    assert "launching" not in res.stdout and "usage: python -m redist tune" in res.stderr, res
    assert re.search(message, res.stderr), res


def test_cabi_flags_refuses_an_unbuilt_directory(tmp_path):
    res = cli("flags", "--out", str(tmp_path), module="redist.cabi")
    assert res.returncode == 2 and res.stdout == "", res
    assert (
        f"no redist C ABI built in {tmp_path.resolve()}" in res.stderr and "redist.cabi build" in res.stderr
    ), res


def test_cabi_flags_refuses_fortran_flags_without_the_module(tmp_path):
    for name in ("libredist.so", "redist.h"):  # what a --no-fortran build leaves (contents are not read)
        (tmp_path / name).write_text("")
    assert (
        cli("flags", "--out", str(tmp_path), "--cflags", module="redist.cabi").stdout.strip()
        == f"-I{tmp_path.resolve()}"
    )
    res = cli("flags", "--out", str(tmp_path), "--flibs", module="redist.cabi")
    assert res.returncode == 2 and "has no Fortran module" in res.stderr, res
    assert "Fortran:          not built" in cli("flags", "--out", str(tmp_path), module="redist.cabi").stdout
