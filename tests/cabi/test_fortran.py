# SPDX-License-Identifier: Apache-2.0
"""The Fortran module (cabi/redist.f90) with gfortran: standard conformance, the heat-loop
example under mpiexec, and the Fortran wrappers' error paths."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import redist
import helpers
from helpers import mpi

pytestmark = [pytest.mark.fortran, pytest.mark.cabi]

FC = helpers.fortran_compiler()


@pytest.fixture(scope="session")
def fortran(tmp_path_factory):
    if FC is None or shutil.which(FC) is None:
        pytest.skip("no Fortran compiler (apt-get install gfortran)")
    if helpers.c_compiler() is None:
        pytest.skip("no C compiler")
    built = helpers.build_once(tmp_path_factory.getbasetemp() / "cabi")
    assert built.fortran, "the build found gfortran but did not compile redist.mod"
    return built


@pytest.fixture(scope="session")
def fprograms(fortran, tmp_path_factory):
    bindir = tmp_path_factory.mktemp("fortran-bin")
    made = {}

    def get(name):
        if name not in made:
            src = helpers.cabi_examples() / f"{name}.f90"
            if not src.exists():
                src = helpers.CABI_CHECKS / f"{name}.f90"
            made[name] = helpers.compile_fortran(src, bindir / name, fortran)
        return made[name]

    return get


def test_module_is_standard_fortran_2008(tmp_path):
    if FC is None or shutil.which(FC) is None:
        pytest.skip("no Fortran compiler")
    res = subprocess.run([FC, "-std=f2008", "-pedantic", "-Wall", "-Wextra", "-Werror", "-fsyntax-only",
                          f"-J{tmp_path}", str(helpers.cabi_dir() / "redist.f90")], check=False, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr


def test_module_binds_every_c_function():
    header = (helpers.cabi_dir() / "redist.h").read_text()
    module = (helpers.cabi_dir() / "redist.f90").read_text()
    c_functions = set(re.findall(r"^(?:redist_status_t|const char \*)\s*(redist_\w+)\(", header, re.MULTILINE))
    bound = set(re.findall(r'bind\(C, name="(redist_\w+)"\)', module))
    assert len(c_functions) == 31 and bound == c_functions
    for const in ("REDIST_SUCCESS", "REDIST_ERROR_PYTHON_INIT", "REDIST_ORDER_F", "REDIST_MEMORY_DEVICE",
                  "REDIST_COMM_WORLD", "REDIST_DEVICE_AUTO", "REDIST_DEVICE_NONE", "REDIST_TRANSPORT_PUT",
                  "REDIST_HOST_METHOD_ALLTOALLW", "REDIST_OPTIONS_VERSION"):
        c_value = re.search(rf"#define {const} \((-?\d+)\)|{const} = (\d+)", header)
        f_value = re.search(rf"{const} = (-?\d+)", module)
        assert c_value and f_value and int(next(v for v in c_value.groups() if v)) == int(f_value.group(1)), const


def assert_all_ranks(res, nprocs, pattern):
    ranks = {int(m.group(1)) for m in re.finditer(pattern, res.stdout)}
    assert res.returncode == 0 and ranks == set(range(nprocs)), f"rc={res.returncode}\n{res.stdout[-6000:]}"


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_heat_loop_fortran(fprograms, nprocs):
    """use redist, 1-based bounds, column-major arrays, two fields in one exchange
    (redist_create_fields_f), 20 steps, every element of both checked."""
    res = mpi(nprocs, fprograms("heat_loop"))
    assert_all_ranks(res, nprocs, r"rank (\d+)/\d+: OK \(Fortran\)")


@pytest.mark.mpi
def test_heat_loop_fortran_empty_boxes(fprograms):
    res = mpi(3, fprograms("heat_loop"), 2, 3, 4, 3)
    assert_all_ranks(res, 3, r"rank (\d+)/\d+: OK \(Fortran\)")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_halo_and_permuted_transpose_fortran(fprograms, nprocs):
    """allow_overlap halos written into a ghosted array (redist_execute_strided), in-place Jacobi
    steps, then a result_order_f([2, 1]) transpose; every element checked."""
    res = mpi(nprocs, fprograms("halo_transpose"))
    assert_all_ranks(res, nprocs, r"rank (\d+)/\d+: OK \(Fortran\)")


@pytest.mark.mpi
def test_halo_and_permuted_transpose_fortran_empty_boxes(fprograms):
    res = mpi(4, fprograms("halo_transpose"), 3, 3, 2)  # 3 columns on 4 ranks: rank 3 holds nothing
    assert_all_ranks(res, 4, r"rank (\d+)/\d+: OK \(Fortran\)")


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_fortran_wrappers_and_errors(fprograms, nprocs):
    """redist_create_f (1-based bounds, optional strides), mismatched bound arrays and a bad box on
    one rank (collective INVALID_VALUE), execute before plan / after free, string helpers; two
    fields (double with strides, float) through redist_create_fields_f, 1-based field rebinding,
    mismatched field arrays (collective INVALID_VALUE), handles of the other kind refused."""
    res = mpi(nprocs, fprograms("api_checks"), redist.__version__)
    assert_all_ranks(res, nprocs, r"rank (\d+)/\d+: \d+ Fortran checks passed")
