# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by tests/cabi/test_cabi.py, tests/cabi/test_fortran.py and perf/bench_cabi.py.

:func:`build_once` builds the library once per process and directory; :func:`compile_c` and
:func:`compile_fortran` build the examples and checks against it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from ._build import HERE, build, find_fortran_compiler, flags

__all__ = ["CHECKS", "EXAMPLES", "Built", "build_once", "c_compiler", "compile_c", "compile_fortran", "mpicc"]

EXAMPLES = HERE / "examples"
CHECKS = HERE / "checks"


@dataclass(frozen=True)
class Built:
    dir: Path
    cflags: list[str]
    libs: list[str]
    fflags: list[str]
    flibs: list[str]
    fortran: bool  # redist.mod + libredist_f.a were built


_built: dict[Path, Built] = {}


def build_once(out_dir: Path) -> Built:
    """Build into ``out_dir`` (Fortran module too when a compiler is found), once per process."""
    out_dir = Path(out_dir).resolve()
    if out_dir not in _built:
        written = build(out_dir, fortran=True)
        f = flags(out_dir)
        _built[out_dir] = Built(out_dir, f["cflags"].split(), f["libs"].split(), f["fflags"].split(),
                                f["flibs"].split(), "fortran_lib" in written)
    return _built[out_dir]


def c_compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def mpicc() -> str | None:
    """The mpicc of the MPI mpi4py uses: the one next to this Python (mpich wheel), else PATH."""
    here = Path(sys.executable).parent / "mpicc"
    return str(here) if os.access(here, os.X_OK) else shutil.which("mpicc")


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout}{res.stderr}")


def compile_c(src: Path, exe: Path, built: Built, *, compiler: str | None = None, extra: list[str] = ()) -> Path:
    cc = compiler or c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) found")
    _run([cc, "-O2", "-Wall", "-Werror", "-pthread", str(src), *built.cflags, *built.libs, *extra, "-o", str(exe)])
    return exe


def compile_fortran(src: Path, exe: Path, built: Built, *, compiler: str | None = None) -> Path:
    fc = find_fortran_compiler(compiler)
    if fc is None:
        raise RuntimeError("no Fortran compiler (gfortran or $FC) found")
    if not built.fortran:
        raise RuntimeError(f"{built.dir} has no redist.mod (built without a Fortran compiler)")
    _run([fc, "-std=f2008", "-Wall", "-O2", str(src), *built.fflags, *built.flibs, "-o", str(exe)])
    return exe
