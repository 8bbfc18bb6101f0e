# SPDX-License-Identifier: Apache-2.0
"""The C ABI (libredist.so, cffi embedding): build, header, examples under mpiexec, error paths.

The library is built once per session into a temporary directory (tests/helpers.py, build_once);
C programs from cabi/examples (as installed) and tests/cabi/checks are compiled against it and
run as real C processes (the embedded interpreter starts inside them), every multi-rank run under a timeout.
"""

from __future__ import annotations

import os
import re
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import redist
import helpers
from helpers import clean_env, gpu_ranks, mpi, run
from redist.engine.errors import STATUS

pytestmark = [pytest.mark.cabi]

API = [
    "redist_initialize", "redist_finalize", "redist_comm_rank", "redist_create", "redist_create_ex", "redist_plan",
    "redist_execute", "redist_execute_strided",
    "redist_reset_operand", "redist_reset_operand_unchecked", "redist_release_operand", "redist_free",
    "redist_graph", "redist_get_error_string", "redist_get_last_error", "redist_version",
    "redist_create_fields", "redist_get_nfields", "redist_execute_fields", "redist_execute_fields_strided",
    "redist_reset_operands", "redist_reset_operands_unchecked", "redist_reset_operand_field",
    "redist_reset_operand_field_unchecked", "redist_update_graph_exec",
    "redist_release_captured", "redist_allocate_symmetric_memory", "redist_free_symmetric_memory",
    "redist_export_wisdom", "redist_import_wisdom", "redist_forget_wisdom",
]


@pytest.fixture(scope="session")
def programs(cabi, tmp_path_factory):
    """The C programs, compiled lazily, once: programs("heat_loop") -> path."""
    bindir = tmp_path_factory.mktemp("cabi-bin")
    made = {}

    def get(name):
        if name not in made:
            src = helpers.cabi_examples() / f"{name}.c"
            if not src.exists():
                src = helpers.CABI_CHECKS / f"{name}.c"
            cc = None
            if name == "comm_split":  # calls MPI itself: the mpich wheel's mpicc
                cc = helpers.mpicc()
                if cc is None:
                    pytest.skip("no mpicc next to this Python or on PATH")
            made[name] = helpers.compile_c(src, bindir / name, cabi, compiler=cc)
        return made[name]

    return get


def assert_all_ranks_ok(res, nprocs, pattern=r"rank (\d+)/(\d+): OK"):
    ranks = {int(m.group(1)) for m in re.finditer(pattern, res.stdout)}
    assert res.returncode == 0 and ranks == set(range(nprocs)), f"rc={res.returncode}\n{res.stdout[-6000:]}"


# --- the build -------------------------------------------------------------------------------


def test_build_writes_library_header_and_module(cabi):
    for name in ("libredist.so", "redist.h", "redist.f90"):
        assert (cabi.dir / name).is_file()
    nm = shutil.which("nm")
    if nm:
        out = run([nm, "-D", "--defined-only", cabi.dir / "libredist.so"]).stdout
        exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
        assert exported - {"PyInit__redist_cabi"} == set(API)


def test_flags_cli(cabi):
    out = run([sys.executable, "-m", "redist.cabi", "flags", "--out", cabi.dir], env=clean_env()).stdout
    d = str(cabi.dir)
    assert f"-I{d}" in out and f"-L{d} -lredist -Wl,-rpath,{d}" in out and "-lredist_f" in out
    one = run([sys.executable, "-m", "redist.cabi", "flags", "--out", cabi.dir, "--cflags", "--libs"]).stdout.split()
    assert one == [f"-I{d}", f"-L{d}", "-lredist", f"-Wl,-rpath,{d}"]


def test_header_is_clean_c_and_cxx(cabi, tmp_path):
    src = tmp_path / "inc.c"
    src.write_text('#include "redist.h"\nint main(void) { redist_t h = 0; (void)h; return REDIST_SUCCESS; }\n')
    res = run([helpers.c_compiler(), "-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only",
               f"-I{cabi.dir}", src])
    assert res.returncode == 0, res.stderr
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx:
        srcpp = tmp_path / "inc.cpp"
        srcpp.write_text('#include "redist.h"\nint main() { return redist_get_last_error() == nullptr; }\n')
        res = run([cxx, "-Wall", "-Werror", f"-I{cabi.dir}", srcpp, *cabi.libs, "-o", tmp_path / "incpp"])
        assert res.returncode == 0, res.stderr


def test_header_status_codes_match_python():
    text = (helpers.cabi_dir() / "redist.h").read_text()
    codes = dict(re.findall(r"REDIST_(?:ERROR_)?(\w+) = (\d+)", text))
    for name, value in STATUS.items():
        assert int(codes[name]) == value, name


# --- the examples ----------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 4])
def test_heat_loop(programs, nprocs):
    """3-D Slab.X -> Slab.Y -> Slab.X, 20 steps, reset_operand_unchecked, every element checked."""
    res = mpi(nprocs, programs("heat_loop"))
    assert_all_ranks_ok(res, nprocs)


@pytest.mark.mpi
def test_heat_loop_two_fields(programs):
    """The heat loop moves its two fields (u, v) in one exchange per direction (redist_create_fields)."""
    res = mpi(2, programs("heat_loop"), 6, 5, 4, 3)
    assert_all_ranks_ok(res, 2, r"rank (\d+)/(\d+): OK, 3 steps, every element of both 6 x 5 x 4 fields checked")


@pytest.mark.mpi
def test_heat_loop_empty_boxes(programs):
    res = mpi(3, programs("heat_loop"), 2, 5, 3, 4)  # 2 x-planes on 3 ranks: rank 2 holds nothing
    assert_all_ranks_ok(res, 3)


def test_heat_loop_minimal_environment(programs):
    """No mpiexec, no venv on PATH, nothing Python-related in the environment: the baked
    interpreter path still finds the environment the library was built in."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}
    res = run([programs("heat_loop"), 6, 5, 4, 5], env=env)
    assert res.returncode == 0 and "rank 0/1: OK" in res.stdout, res.stdout + res.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_halo_and_permuted_transpose(programs, nprocs):
    """allow_overlap halos (Jacobi steps in place) and a result_order {1, 0} transpose, every element checked."""
    res = mpi(nprocs, programs("halo_transpose"))
    assert_all_ranks_ok(res, nprocs)


@pytest.mark.mpi
def test_halo_and_permuted_transpose_empty_boxes(programs):
    res = mpi(4, programs("halo_transpose"), 3, 5, 4)  # 3 rows on 4 ranks: rank 3 holds nothing
    assert_all_ranks_ok(res, 4)


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [2, 4])
def test_comm_split_application_owns_mpi(programs, nprocs):
    """MPI_Init by the application, a split sub-communicator through MPI_Comm_c2f, re-initialize."""
    res = mpi(nprocs, programs("comm_split"))
    assert res.returncode == 0 and "ALL OK" in res.stdout, res.stdout[-6000:]
    assert res.stdout.count(": OK") == nprocs


# --- error paths -----------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 3])
def test_api_error_paths(programs, nprocs):
    """Bad box / argument on the last rank -> INVALID_VALUE naming it on every rank; execute before
    plan; released operand; use after free; bad handles; per-thread last error; finalize."""
    res = mpi(nprocs, programs("api_checks"), redist.__version__)
    assert_all_ranks_ok(res, nprocs, r"rank (\d+)/(\d+): (\d+) checks passed")
    assert f"bad box on rank {nprocs - 1} -> rank 0 got: redist_create: InvalidValueError: rank {nprocs - 1}" \
        in res.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", [1, 2, 3, 4])
def test_fields(programs, nprocs):
    """Fused fields (double, float, int16_t in one exchange), every element checked: engine-owned
    results, out= per field (dense, ghosted, reversed), rebinding every field and one field
    (checked and not), per-field operand strides with an F-order result, released operands, and
    handles of the other kind refused (tests/cabi/checks/fields_checks.c)."""
    res = mpi(nprocs, programs("fields_checks"))
    assert_all_ranks_ok(res, nprocs, r"rank (\d+)/(\d+): (\d+) fields checks passed")


@pytest.mark.mpi
def test_fields_empty_boxes(programs):
    res = mpi(4, programs("fields_checks"), 3, 5)  # 3 rows on 4 ranks: rank 3 holds no input
    assert_all_ranks_ok(res, 4, r"rank (\d+)/(\d+): (\d+) fields checks passed")


def probe(programs, env) -> dict:
    res = run([programs("init_probe")], env=env)
    assert res.returncode == 0, f"init_probe crashed (rc={res.returncode}):\n{res.stdout}\n{res.stderr}"
    got = dict(re.findall(r"^(\w[\w ]*): (.*)$", res.stdout, re.MULTILINE))
    got["stderr"] = res.stderr
    return got


def test_init_success(programs):
    got = probe(programs, clean_env())
    assert got["initialize"].startswith("0 ") and got["comm_rank"].startswith("0 rank=0 nranks=1")


def test_init_failure_missing_interpreter(programs):
    got = probe(programs, clean_env(REDIST_PYTHON="/nonexistent/venv/bin/python"))
    assert got["initialize"].startswith(f"{STATUS['PYTHON_INIT']} (REDIST_ERROR_PYTHON_INIT")
    assert "/nonexistent/venv/bin/python" in got["last error"]
    assert got["comm_rank"].startswith(f"{STATUS['PYTHON_INIT']} rank=-1")  # sticky, never 0
    assert got["finalize"] == str(STATUS["PYTHON_INIT"])


def test_init_failure_broken_pythonhome(programs):
    """A broken PYTHONHOME would make Py_InitializeEx abort the process; here it is a status."""
    got = probe(programs, clean_env(PYTHONHOME="/nonexistent/python-home"))
    assert got["initialize"].startswith(f"{STATUS['PYTHON_INIT']} ")
    assert "PYTHONHOME=/nonexistent/python-home" in got["last error"]


def test_init_failure_broken_package(programs, tmp_path):
    """The start-up code fails (a broken redist shadows the real one): status + its exception."""
    (tmp_path / "redist").mkdir()
    (tmp_path / "redist" / "__init__.py").write_text('raise ImportError("redist broken on purpose")\n')
    got = probe(programs, clean_env(PYTHONPATH=str(tmp_path)))
    assert got["initialize"].startswith(f"{STATUS['PYTHON_INIT']} ")
    assert "redist broken on purpose" in got["last error"]


def test_init_failure_deleted_venv(cabi, tmp_path):
    """The realistic case: the library was built from a venv that is later deleted (or recreated
    empty). libpython (the base interpreter's) still loads, so the program starts and must get
    REDIST_ERROR_PYTHON_INIT from redist, not a crash and not a silent 0."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    # this environment's packages (cffi, numpy, mpi4py, redist), as if installed in the new venv
    Path(purelib, "_parent_env.pth").write_text(
        "import site; " + "; ".join(f"site.addsitedir({d!r})" for d in site.getsitepackages()) + "\n")
    for item in Path(sys.prefix, "lib").glob("*mpi*"):  # the mpich wheel's libmpi, which mpi4py looks for
        (venv / "lib" / item.name).symlink_to(item)     # in <sys.prefix>/lib
    lib = tmp_path / "lib"
    res = run([py, "-m", "redist.cabi", "build", "--out", lib, "--no-fortran"], timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    built = helpers.Built(lib, [f"-I{lib}"], [f"-L{lib}", "-lredist", f"-Wl,-rpath,{lib}"], [], [], False)
    exe = helpers.compile_c(helpers.CABI_CHECKS / "init_probe.c", tmp_path / "probe", built)
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/tmp")}

    def probe_here():
        r = run([exe], env=env)
        assert r.returncode == 0, f"crashed (rc={r.returncode}):\n{r.stdout}\n{r.stderr}"
        return dict(re.findall(r"^(\w[\w ]*): (.*)$", r.stdout, re.MULTILINE))

    assert probe_here()["initialize"].startswith("0 ")  # works while the venv exists
    shutil.rmtree(venv)
    got = probe_here()
    assert got["initialize"].startswith(f"{STATUS['PYTHON_INIT']} ") and str(py) in got["last error"]
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    got = probe_here()  # recreated without cffi/redist: Python starts, the imports fail
    assert got["initialize"].startswith(f"{STATUS['PYTHON_INIT']} ")
    assert "_cffi_backend" in got["last error"] or "redist" in got["last error"]


# --- the device example (built here when CUDA headers exist; run on GPU machines) -------------


def cuda_home() -> Path | None:
    for cand in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if cand and (Path(cand) / "include" / "cuda_runtime.h").exists():
            return Path(cand)
    return None


@pytest.fixture(scope="session")
def device_loop(cabi, tmp_path_factory):
    cuda = cuda_home()
    if cuda is None:
        pytest.skip("no CUDA headers (cuda_runtime.h)")
    libdir = next((p for p in (cuda / "lib64", cuda / "lib") if (p / "libcudart.so").exists()), None)
    if libdir is None:
        pytest.skip("no libcudart.so")
    exe = tmp_path_factory.mktemp("cabi-cuda") / "device_loop"
    return helpers.compile_c(helpers.cabi_examples() / "device_loop.c", exe, cabi,
                       extra=[f"-I{cuda / 'include'}", f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}"])


def test_device_example_builds(device_loop):
    assert device_loop.exists()


def test_device_example_stub_without_cuda(cabi, tmp_path):
    exe = helpers.compile_c(helpers.cabi_examples() / "device_loop.c", tmp_path / "stub", cabi, extra=["-DREDIST_EXAMPLE_NO_CUDA"])
    assert "built without CUDA" in run([exe]).stdout


@pytest.mark.gpu
@pytest.mark.mpi
@pytest.mark.parametrize("nprocs", gpu_ranks(1, 2, 4))
def test_device_loop(device_loop, nprocs):
    res = mpi(nprocs, device_loop, timeout=300)
    assert_all_ranks_ok(res, nprocs)
