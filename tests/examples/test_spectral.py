# SPDX-License-Identifier: Apache-2.0
"""The spectral examples at tiny sizes under mpiexec: examples/fft3d.py (against numpy.fft.rfftn of
the gathered array), examples/taylor_green.py (P = 2, 4 equal to P = 1; the early-time energy and
dissipation against Taylor & Green's series) and examples/fft_roundtrip.f90 (Fortran + FFTW)."""

from __future__ import annotations

import importlib.util
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import helpers
from helpers import TESTS, gpu_env, gpu_ranks, mpi, run

pytestmark = pytest.mark.mpi

EXAMPLES = TESTS.parent / "examples"
FFTW_F03 = Path("/usr/include/fftw3.f03")  # Debian's libfftw3-dev


def example(nprocs, script, *args, timeout=120, env=None):
    res = mpi(nprocs, sys.executable, EXAMPLES / script, *args, timeout=timeout, env=env)
    assert res.returncode == 0, (
        f"mpiexec -n {nprocs} {script} {' '.join(map(str, args))} (rc={res.returncode}):\n"
        f"{res.stdout[-4000:]}"
    )
    return res.stdout


@pytest.mark.parametrize("script", ["fft3d.py", "taylor_green.py"])
def test_help(script):
    res = run([sys.executable, EXAMPLES / script, "--help"])
    assert res.returncode == 0 and "usage:" in res.stdout and "--gpu" in res.stdout, res.stdout + res.stderr


def test_taylor_green_refuses_an_unstable_dt():
    """At 512^3 the default dt is past RK4's stability limit for the viscous term: refused before any
    set-up, naming the largest dt that is stable."""
    res = run([sys.executable, EXAMPLES / "taylor_green.py", "--n", "512"])
    assert res.returncode == 2 and "stability limit" in res.stderr and "--dt <= 0.00321" in res.stderr, (
        res.stderr
    )


@pytest.mark.parametrize(
    "nprocs, args",
    [
        (1, ["--shape", "9", "8", "7"]),
        (2, ["--shape", "17", "12", "10", "--fields", "2"]),  # slabs (2 x 1), uneven
        (3, ["--shape", "10", "7", "5", "--grid", "1", "3", "--layout", "planes"]),  # pencils along one axis
        (4, ["--shape", "13", "10", "6", "--grid", "2", "2", "--fields", "3"]),
        (4, ["--shape", "6", "5", "4", "--grid", "2", "2", "--layout", "contiguous"]),  # permuted results
        (4, ["--shape", "3", "2", "2", "--grid", "4", "1"]),  # empty boxes
    ],
    ids=["P1", "P2-slabs-2fields", "P3-1x3-planes", "P4-2x2-3fields", "P4-contiguous", "P4-empty-boxes"],
)
def test_fft3d_matches_numpy(nprocs, args):
    _fft3d(nprocs, *args)


@pytest.mark.parametrize(
    "nprocs, args",
    [
        (2, ["--shape", "17", "12", "10", "--fields", "2"]),
        (4, ["--shape", "13", "10", "6", "--grid", "2", "2", "--layout", "contiguous"]),
    ],
    ids=["P2-slabs-2fields", "P4-2x2-contiguous"],
)
def test_fft3d_fftw_lines_match_numpy(nprocs, args):
    """FFTW lines (pyFFTW plans re-pointed at every call site's arrays), scaled once at the end."""
    pytest.importorskip("pyfftw")
    _fft3d(nprocs, "--fft", "fftw", *args)


def test_fftw_lines_take_strided_arrays():
    """User arrays that are not dense in any axis order (every other plane of a bigger array) go
    through numpy.fft with FFTW's unnormalised convention; the results are rfftn / irfftn still."""
    pytest.importorskip("pyfftw")
    code = f"""
import sys, numpy as np, redist
sys.path.insert(0, {str(EXAMPLES)!r})
from fft3d import PencilFFT
redist.initialize(device_id="cpu")
fft = PencilFFT((8, 6, 10), host_fft="fftw")
rng = np.random.default_rng(1)
big = rng.standard_normal((16, 6, 10))
u = big[::2]                                   # strides (2 planes, ...): not dense
hat = np.empty((16, 6, 6), complex)[::2]
back = np.empty((8, 12, 10))[:, ::2]
fft.forward(u, out=hat)
fft.backward(hat, out=back)
ref = np.fft.rfftn(u)
assert np.max(np.abs(hat - ref)) <= 1e-12 * np.max(np.abs(ref)), "forward"
assert np.max(np.abs(back - u)) <= 1e-12 * np.max(np.abs(u)), "backward"
print("OK")
"""
    res = run([sys.executable, "-c", code])
    assert res.returncode == 0 and "OK" in res.stdout, res.stdout + res.stderr


def _fft3d(nprocs, *args, env=None):
    """fft3d.py's forward and backward against numpy.fft.rfftn / irfftn of the gathered array."""
    out = example(nprocs, "fft3d.py", *args, "--iters", "1", env=env)
    m = re.search(r"max relative error (\S+) \((OK|FAILED)", out)
    assert m and m.group(2) == "OK" and float(m.group(1)) <= 1e-12, out


def _taylor_green(nprocs, *args, env=None):
    out = example(nprocs, "taylor_green.py", "--n", "16", "--steps", "10", "--nu", "0.002", *args, env=env)
    rows = re.findall(r"^\s*(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$", out, re.MULTILINE)
    assert len(rows) == 11, out
    return [tuple(float(v) for v in row) for row in rows]


def _load_series():
    spec = importlib.util.spec_from_file_location("taylor_green_series", EXAMPLES / "taylor_green.py")
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(EXAMPLES))  # taylor_green imports fft3d from its folder
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module.series


def test_taylor_green_ranks_agree_and_follow_the_series():
    """P = 2 (slabs), 3 (1 x 3) and 4 (2 x 2 pencils) print P = 1's energy and dissipation to round-off; the
    nonlinear parts (E - e^(-6 nu t)/8 against -(5/192) nu t^3, eps - nu (3/4) e^(-6 nu t) against
    nu (5/64) t^2) agree with Taylor & Green's series to 1 % by t = 0.1."""
    one = _taylor_green(1)
    for nprocs, args in ((2, ()), (3, ("--grid", "1", "3")), (4, ("--grid", "2", "2"))):
        other = _taylor_green(nprocs, *args)
        worst = max(abs(a[i] - b[i]) / abs(a[i]) for a, b in zip(one, other) for i in (2, 3))
        assert worst < 1e-12, (nprocs, worst)
    series, nu = _load_series(), 0.002
    for step, t, energy, dissipation in one[5:]:
        decay = math.exp(-6 * nu * t)
        e_nl, eps_nl = energy - decay / 8, dissipation - nu * 0.75 * decay
        s_e, s_eps = series(t, nu)
        assert abs(e_nl / (s_e - decay / 8) - 1) < 0.01, (t, e_nl, s_e - decay / 8)
        assert abs(eps_nl / (s_eps - nu * 0.75 * decay) - 1) < 0.01, (t, eps_nl, s_eps - nu * 0.75 * decay)


@pytest.mark.gpu
@pytest.mark.parametrize("nprocs", gpu_ranks(1, 2))
def test_fft3d_gpu_matches_numpy(nprocs):
    """cupy + cuFFT lines, every exchange on the CUDA backend with permuted results."""
    _fft3d(nprocs, "--gpu", "--shape", "17", "12", "10", "--fields", "2", env=gpu_env())
    _fft3d(nprocs, "--gpu", "--shape", "9", "8", "6", "--grid", "1", str(nprocs), env=gpu_env())


@pytest.mark.gpu
@pytest.mark.parametrize("nprocs", gpu_ranks(1, 2))
@pytest.mark.parametrize("mode", [[], ["--eager"]], ids=["one-graph-per-step", "eager"])
def test_taylor_green_gpu_equals_host(nprocs, mode):
    """The whole RK4 step captured once into a CUDA graph and replayed (or launched eagerly) gives the
    host run's energy and dissipation to round-off at every step."""
    host = _taylor_green(1, env=gpu_env())
    gpu = _taylor_green(nprocs, "--gpu", *mode, env=gpu_env())
    worst = max(abs(a[i] - b[i]) / abs(a[i]) for a, b in zip(host, gpu) for i in (2, 3))
    assert worst < 1e-12, worst


@pytest.fixture(scope="module")
def fft_roundtrip(tmp_path_factory):
    fc = helpers.fortran_compiler()
    if fc is None or shutil.which(fc) is None or helpers.c_compiler() is None:
        pytest.skip("no Fortran or C compiler (apt-get install gfortran)")
    if not FFTW_F03.exists():
        pytest.skip(f"{FFTW_F03} not found (apt-get install libfftw3-dev)")
    built = helpers.build_once(tmp_path_factory.getbasetemp() / "cabi")
    exe = tmp_path_factory.mktemp("spectral") / "fft_roundtrip"
    res = subprocess.run(
        [
            fc,
            "-std=f2008",
            "-Wall",
            "-Werror",
            "-O2",
            f"-I{FFTW_F03.parent}",
            str(EXAMPLES / "fft_roundtrip.f90"),
            *built.fflags,
            *built.flibs,
            "-lfftw3",
            "-o",
            str(exe),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    return exe


@pytest.mark.fortran
@pytest.mark.parametrize(
    "nprocs, args",
    [(1, []), (2, []), (4, ["13", "6", "5"]), (3, ["7", "2", "4", "1", "3", "3"])],
    ids=["P1", "P2", "P4-2x2-uneven", "P3-empty-boxes"],
)
def test_fortran_fft_roundtrip(fft_roundtrip, nprocs, args):
    res = mpi(nprocs, fft_roundtrip, *args)
    ranks = {int(r) for r in re.findall(r"rank (\d+)/\d+: OK \(Fortran \+ FFTW\)", res.stdout)}
    assert res.returncode == 0 and ranks == set(range(nprocs)), res.stdout[-4000:]


@pytest.mark.fortran
def test_fortran_help(fft_roundtrip):
    res = run([fft_roundtrip, "--help"])
    assert res.returncode == 0 and "usage:" in res.stdout, res.stdout + res.stderr


@pytest.mark.skipif(importlib.util.find_spec("jax") is None, reason="jax is not installed (the [jax] extra)")
def test_jax_spectral():
    """examples/jax_spectral.py, jitted and differentiated: at P = 1 and P = 3 (uneven slabs) the same
    field and gradient as one process on the whole array (--check), and the same printed figures."""
    lines = []
    for nprocs in (1, 3):
        out = example(nprocs, "jax_spectral.py", "--n", "10", "--steps", "2", "--check", timeout=240)
        assert "matches one process" in out, out
        figures = re.search(r"energy \S+, \|grad\| \S+", out)
        assert figures is not None, out
        lines.append(figures.group(0))
    e1, g1 = (float(v) for v in re.findall(r"[-+0-9.e]+(?=,|$)", lines[0].replace("|grad| ", "")))
    e3, g3 = (float(v) for v in re.findall(r"[-+0-9.e]+(?=,|$)", lines[1].replace("|grad| ", "")))
    assert math.isclose(e1, e3, rel_tol=1e-12) and math.isclose(g1, g3, rel_tol=1e-10), lines
