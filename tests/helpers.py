# SPDX-License-Identifier: Apache-2.0
"""Helpers shared by every test module and every MPI worker (one place, no copies).

Global arrays carry their element's global linear index, so a misplaced element shows;
decompositions are seeded; MPI workers record failures, reduce them across ranks before
deciding (no rank waits on another that failed) and print ``ALL OK`` on rank 0.

Workers run as scripts under ``mpiexec``; they put ``tests/`` on ``sys.path`` and import it.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

TESTS = Path(__file__).resolve().parent


def gpu_count() -> int:
    """CUDA devices visible to this process (0 without a driver or cuda-bindings)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return 0
        err, n = driver.cuDeviceGetCount()
        return n if err == driver.CUresult.CUDA_SUCCESS else 0
    except Exception:  # noqa: BLE001
        return 0


def have_torch() -> bool:
    """PyTorch is installed (``[test]`` does not pull it: on plain PyPI it is the CUDA build)."""
    import importlib.util

    return importlib.util.find_spec("torch") is not None


#: the reason torch tests give when they skip
NO_TORCH = "needs PyTorch (CPU build: pip install torch --index-url https://download.pytorch.org/whl/cpu)"


def shared_gpu() -> bool:
    """REDIST_SHARED_GPU=1: GPU tests may put several ranks on one GPU."""
    return os.environ.get("REDIST_SHARED_GPU", "").strip().lower() in ("1", "true", "yes", "on")


#: push's routes for calls with an out=, as host-method names of the tests: "push" (as planned: below
#: LANDING_MAX the landing, or from DIRECT_SMALL_MIN cross-memory copies where the kernel allows them),
#: "push-copies" (below LANDING_MAX cross-memory copies at every size), "push-messages" (MPI messages
#: into out= at every size), "push-direct" (the peers' stores straight into out=, cross-memory attach,
#: at every size and on every MPI, short runs too)
PUSH_ROUTES = ("push", "push-copies", "push-messages", "push-direct")


@contextlib.contextmanager
def push_route(method: str):
    """Objects planned inside take push's route ``method`` (one of :data:`PUSH_ROUTES`) for calls with
    an out=; any other method: nothing changes."""
    from redist.engine.host.push import tuning

    saved = tuning.LANDING_MAX, tuning.DIRECT, tuning.DIRECT_MIN_RUN, tuning.DIRECT_SMALL_MIN
    if method in ("push-messages", "push-direct"):  # LANDING_MAX -1: not even exchanges that receive nothing land
        tuning.LANDING_MAX, tuning.DIRECT, tuning.DIRECT_MIN_RUN = -1, method == "push-direct", 0
    if method == "push-copies":
        tuning.DIRECT_SMALL_MIN = 0
    try:
        yield
    finally:
        tuning.LANDING_MAX, tuning.DIRECT, tuning.DIRECT_MIN_RUN, tuning.DIRECT_SMALL_MIN = saved


def gpu_env(**extra) -> dict:
    """The environment of a GPU worker: this process's (PYTHONPATH kept: GPU machines install redist
    with ``pip --target``), NVSHMEM's settings for one host (no NVLink multicast, UID bootstrap over
    ``lo``) unless already set, unbuffered output."""
    env = dict(os.environ)
    for key, value in (("NVSHMEM_DISABLE_NVLS", "1"), ("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo"),
                       ("PYTHONUNBUFFERED", "1")):
        env.setdefault(key, value)
    env.update(extra)
    return env


def gpu_ranks(*counts):
    """pytest parameters ``P1``, ``P2``...: rank counts a GPU test can run here (one GPU per rank, or
    several ranks on one GPU under REDIST_SHARED_GPU=1; those ids end in ``-shared``)."""
    import pytest

    n = gpu_count()
    out = []
    for p in counts:
        share = p > n >= 1 and shared_gpu()
        out.append(pytest.param(p, id=f"P{p}" + ("-shared" if share else ""), marks=pytest.mark.skipif(
            n < p and not share, reason=f"needs {p} GPUs (one per rank), or REDIST_SHARED_GPU=1 and one GPU")))
    return out


# --- boxes ---------------------------------------------------------------------------------


def sl(box) -> tuple[slice, ...]:
    """The slices of a ``(lower, upper)`` box (or a redist.Box)."""
    lo, hi = box
    return tuple(slice(a, b) for a, b in zip(lo, hi))


def slab_boxes(gshape, nranks: int, axis: int) -> list:
    from redist import Slab

    return [Slab(axis).box(r, gshape, nranks=nranks).as_tuple() for r in range(nranks)]


def dist_boxes(dist, gshape, nranks: int) -> list:
    return [dist.box(r, gshape, nranks=nranks).as_tuple() for r in range(nranks)]


def pencil_boxes(gshape, nranks: int, a: int, b: int) -> list:
    """``nranks`` boxes splitting axes a and b over a near-square grid."""
    pa = max(d for d in range(1, nranks + 1) if nranks % d == 0 and d * d <= nranks)
    pb = nranks // pa
    out = []
    for r in range(nranks):
        i, j = divmod(r, pb)
        lo, hi = [0] * len(gshape), list(gshape)
        for ax, k, n in ((a, i, pa), (b, j, pb)):
            e = gshape[ax]
            lo[ax] = k * (e // n) + min(k, e % n)
            hi[ax] = lo[ax] + e // n + (k < e % n)
        out.append((tuple(lo), tuple(hi)))
    return out


def random_boxes(gshape, nranks: int, rng: np.random.Generator, allow_empty: bool = True) -> list:
    """A seeded exact cover of ``gshape`` by ``nranks`` boxes (uneven, maybe empty), shuffled."""
    boxes = [(tuple(0 for _ in gshape), tuple(gshape))]
    while len(boxes) < nranks:
        i = int(rng.integers(len(boxes)))
        lo, hi = boxes[i]
        ax = int(rng.integers(len(gshape)))
        if not allow_empty and hi[ax] - lo[ax] < 2:
            continue
        cut = int(rng.integers(lo[ax], hi[ax] + 1)) if allow_empty else int(rng.integers(lo[ax] + 1, hi[ax]))
        a_hi, b_lo = list(hi), list(lo)
        a_hi[ax] = b_lo[ax] = cut
        boxes[i : i + 1] = [(lo, tuple(a_hi)), (tuple(b_lo), hi)]
    order = rng.permutation(nranks)
    return [boxes[j] for j in order]


def overlap_boxes(gshape, nranks: int, rng: np.random.Generator) -> tuple[str, list, list]:
    """``(label, in_boxes, out_boxes)`` of a seeded problem for ``allow_overlap=True``.

    Inputs: an exact cover, identical replicas (everyone or the first half of the ranks hold
    the global box), slabs along axis 0 grown by a halo (each rank is then the source of what
    its lower neighbour does not hold), or "nested": random boxes on every rank but the last,
    which holds everything (what it sends around the others' boxes is then several boxes). Outputs: allgather, broadcast of one random box, gather
    onto one rank, an exact cover grown by a halo (clipped), or random sub-boxes (maybe empty).
    """
    nd = len(gshape)
    full = (tuple(0 for _ in gshape), tuple(gshape))

    def grown(boxes, g):
        return [(tuple(max(0, l - g) for l in lo), tuple(min(n, h + g) for h, n in zip(hi, gshape)))
                if all(h > l for l, h in zip(lo, hi)) else (lo, hi)
                for lo, hi in boxes]

    def sub_box():
        lo = [int(rng.integers(0, n + 1)) for n in gshape]
        return tuple(lo), tuple(int(rng.integers(l, n + 1)) for l, n in zip(lo, gshape))

    in_kind = ["cover", "replicas", "halo slabs", "nested"][int(rng.integers(4))]
    if in_kind == "cover":
        ins = random_boxes(gshape, nranks, rng)
    elif in_kind == "replicas":
        half = max(1, nranks // 2) if rng.integers(2) else nranks
        cover = random_boxes(gshape, nranks - half, rng) if half < nranks else []
        ins = [full] * half + cover
    elif in_kind == "halo slabs":
        slabs = [((r * gshape[0] // nranks,) + full[0][1:], ((r + 1) * gshape[0] // nranks,) + full[1][1:])
                 for r in range(nranks)]
        ins = grown(slabs, int(rng.integers(1, 3)))
    else:
        ins = [sub_box() for _ in range(nranks - 1)] + [full]
    out_kind = ["allgather", "broadcast", "gather", "halo", "random"][int(rng.integers(5))]
    if out_kind == "allgather":
        outs = [full] * nranks
    elif out_kind == "broadcast":
        b = sub_box()
        outs = [b] * nranks
    elif out_kind == "gather":
        root = int(rng.integers(nranks))
        outs = [full if r == root else (full[0], full[0]) for r in range(nranks)]
    elif out_kind == "halo":
        outs = grown(random_boxes(gshape, nranks, rng), int(rng.integers(1, 3)))
    else:
        outs = [sub_box() for _ in range(nranks)]
    return f"{in_kind} -> {out_kind} {nd}-D", ins, outs


# --- global arrays -------------------------------------------------------------------------


def global_values(shape, dtype, salt: int = 0) -> np.ndarray:
    """Element value = global linear index (+ salt), made distinct in every byte layout."""
    dtype = np.dtype(dtype)
    lin = np.arange(math.prod(shape), dtype=np.int64) + salt
    if dtype.fields is not None:
        out = np.empty(lin.size, dtype=dtype)
        for i, name in enumerate(dtype.names):
            out[name] = (lin * (i + 3)).astype(dtype.fields[name][0])
        return out.reshape(shape)
    if dtype.kind == "c":
        return (lin + 1j * (-lin - 0.5)).astype(dtype).reshape(shape)
    if dtype.kind == "f":
        return (lin % 2039 + lin / 7.0).astype(dtype).reshape(shape)
    if dtype.kind == "M":
        return lin.astype(dtype).reshape(shape)
    if dtype.kind in "SU":
        return np.array([str(v % 10 ** min(dtype.itemsize // (4 if dtype.kind == "U" else 1), 9)) for v in lin],
                        dtype=dtype).reshape(shape)
    return (lin % np.iinfo(dtype).max).astype(dtype).reshape(shape)


def global_bytes(gshape, itemsize: int, seed: int = 0) -> np.ndarray:
    """uint8 array ``gshape + (itemsize,)``: a distinct byte pattern per element."""
    lin = np.arange(math.prod(gshape), dtype=np.uint64).reshape(gshape)
    b = np.arange(itemsize, dtype=np.uint64)
    return ((lin[..., None] * np.uint64(2654435761) + b * np.uint64(97) + np.uint64(seed)) % np.uint64(251)).astype(
        np.uint8)


def operand_bytes(G: np.ndarray, box, strides, itemsize: int) -> np.ndarray:
    """A rank's operand as raw bytes with element ``strides`` (positive, possibly padded)."""
    shape = tuple(h - l for l, h in zip(*box))
    if math.prod(shape) == 0:
        return np.zeros(0, np.uint8)
    span = sum((n - 1) * s for n, s in zip(shape, strides)) + 1
    buf = np.zeros(span * itemsize, np.uint8)
    view = np.lib.stride_tricks.as_strided(buf, shape=shape + (itemsize,),
                                           strides=tuple(s * itemsize for s in strides) + (1,))
    view[...] = G[sl(box)]
    return buf


def strided_operand(G: np.ndarray, box, strides, itemsize: int) -> tuple[np.ndarray, int]:
    """A rank's operand as raw bytes for element ``strides`` of any sign (zero: the elements of
    that axis share memory, so the box's first index along it is stored). Returns the bytes and
    the byte offset of element (0, ..., 0) in them."""
    from redist.engine.buffer import byte_extent

    shape = tuple(h - l for l, h in zip(*box))
    lo, hi = byte_extent(shape, strides, itemsize)
    buf = np.zeros(max(hi - lo, 0), np.uint8)
    if math.prod(shape) == 0:
        return buf, 0
    view = np.lib.stride_tricks.as_strided(buf[-lo:], shape=shape + (itemsize,),
                                           strides=tuple(s * itemsize for s in strides) + (1,))
    sub = G[sl(box)]
    for ax, s in enumerate(strides):  # a shared (zero-stride) axis holds its first index only
        if s == 0:
            sub = np.take(sub, [0] * sub.shape[ax], axis=ax)
    np.copyto(view, sub)
    return buf, -lo


def expected_bytes(G: np.ndarray, box, order) -> np.ndarray:
    """The bytes of ``box`` of the global byte array, dense in ``order`` ("C", "F" or the axes
    slowest-varying first)."""
    sub = G[sl(box)]
    n = sub.ndim - 1  # the last axis holds the bytes of one element
    perm = tuple(range(n)) if order == "C" else tuple(reversed(range(n))) if order == "F" else tuple(order)
    return np.ascontiguousarray(np.transpose(sub, perm + (n,))).reshape(-1)


def same_bits(a, b) -> bool:
    """Equal shapes and equal bytes (NaN payloads and padding bytes included)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    return np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes()


# --- processes ----------------------------------------------------------------------------


def clean_env(**extra) -> dict:
    """The test process's environment without anything that points Python elsewhere."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONHOME", "PYTHONPATH", "REDIST_PYTHON", "PYTHONEXECUTABLE")}
    env.update(extra)
    return env


def run(cmd, *, env=None, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], check=False, capture_output=True, text=True, timeout=timeout,
                          env=clean_env() if env is None else env)


def mpi(nprocs, exe, *args, timeout=120, env=None):
    """``mpiexec -n nprocs exe args`` in ``env`` (default: a clean environment), killed after ``timeout`` s."""
    import pytest
    from redist._launch import find_mpiexec, run_mpi

    if find_mpiexec() is None:
        pytest.skip("mpiexec not found")
    return run_mpi(nprocs, [str(exe), *map(str, args)], timeout=timeout, env=clean_env() if env is None else env)


# --- resources of this process (lifetime and soak workers) ----------------------------------


def rss_mib() -> float:
    """Resident memory, MiB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def shm_mapped() -> int:
    """Bytes of /dev/shm files this process maps (redist's segments, MPI's own)."""
    total = 0
    with open("/proc/self/maps") as f:
        for line in f:
            if "/dev/shm/" in line:
                lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
                total += hi - lo
    return total


def shm_files() -> list[str]:
    return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"redist-{os.getpid()}-"))


# --- MPI workers ---------------------------------------------------------------------------


class Report:
    """Failures of one MPI worker; :meth:`finish` reduces them across ranks and prints ALL OK."""

    def __init__(self, comm):
        self.comm = comm
        self.rank = comm.Get_rank()
        self.items: list[str] = []

    def check(self, cond, what: str) -> bool:
        if not cond:
            self.fail(what)
        return bool(cond)

    def fail(self, what: str) -> None:
        self.items.append(f"rank {self.rank}: {what}")
        print(f"[rank {self.rank}] FAIL {what}", flush=True)

    def exception(self, where: str) -> None:
        self.fail(f"{where}: {traceback.format_exc()}")

    def ok_everywhere(self) -> bool:
        """Collective: no rank has failed so far."""
        return self.comm.allreduce(len(self.items)) == 0

    def expect_error(self, fn, cls, pattern: str, label: str) -> None:
        """``fn`` raises ``cls`` (by name or subclass) matching ``pattern``, the same on every rank."""
        got = None
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            got = (type(e).__name__, str(e), isinstance(e, cls))
        every = self.comm.allgather(got)
        if got is None:
            self.fail(f"{label}: no exception")
            return
        if not got[2]:
            self.fail(f"{label}: {got[0]} is not {cls.__name__}: {got[1]}")
        if not re.search(pattern, got[1]):
            self.fail(f"{label}: message {got[1]!r} does not match {pattern!r}")
        if any(e is None or e[:2] != got[:2] for e in every):
            self.fail(f"{label}: ranks raised different errors: {every}")

    def finish(self) -> int:
        """Collective: print every failure (rank 0) and ALL OK when there are none; exit code."""
        every = self.comm.allgather(self.items)
        flat = [f for fs in every for f in fs]
        if self.rank == 0:
            if flat:
                print(f"{len(flat)} FAILURE(S):")
                for f in flat[:40]:
                    print("  " + f[:3000])
            else:
                print("ALL OK", flush=True)
        return 1 if flat else 0


def run_report_mode(comm, modes: dict) -> int:
    """Collective: a worker's entry -- run ``modes[sys.argv[1]](report)``, an exception a failure of
    this rank; :meth:`Report.finish`'s exit code."""
    report = Report(comm)
    try:
        modes[sys.argv[1]](report)
    except Exception:  # noqa: BLE001
        report.exception(sys.argv[1])
    return report.finish()


# --- the C ABI ------------------------------------------------------------------------------
# Used by tests/cabi and perf/bench_cabi.py: the library built once per process and directory,
# C and Fortran programs compiled against it. The examples are the installed package's
# (redist/cabi/examples, what users get); the checks live here (tests/cabi/checks).

CABI_CHECKS = TESTS / "cabi" / "checks"


def cabi_dir() -> Path:
    """The installed redist.cabi package directory (redist.h, redist.f90, examples/)."""
    from redist.cabi._build import HERE

    return HERE


def cabi_examples() -> Path:
    """The installed C and Fortran examples (redist/cabi/examples)."""
    return cabi_dir() / "examples"


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
    from redist.cabi._build import build, flags

    out_dir = Path(out_dir).resolve()
    if out_dir not in _built:
        written = build(out_dir, fortran=True)
        f = flags(out_dir)
        _built[out_dir] = Built(out_dir, f["cflags"].split(), f["libs"].split(), f["fflags"].split(),
                                f["flibs"].split(), "fortran_lib" in written)
    return _built[out_dir]


def c_compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def fortran_compiler() -> str | None:
    """$FC, else gfortran on PATH (what redist.cabi build uses)."""
    from redist.cabi._build import find_fortran_compiler

    return find_fortran_compiler()


def mpicc() -> str | None:
    """The mpicc of the MPI mpi4py uses: the one next to this Python (mpich wheel), else PATH."""
    here = Path(sys.executable).parent / "mpicc"
    return str(here) if os.access(here, os.X_OK) else shutil.which("mpicc")


def _compile(cmd: list[str]) -> None:
    res = subprocess.run(cmd, check=False, capture_output=True, text=True)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({res.returncode}):\n{res.stdout}{res.stderr}")


def compile_c(src: Path, exe: Path, built: Built, *, compiler: str | None = None, extra: Sequence[str] = ()) -> Path:
    cc = compiler or c_compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc/gcc) found")
    _compile([cc, "-O2", "-Wall", "-Werror", "-pthread", str(src), *built.cflags, *built.libs, *extra, "-o", str(exe)])
    return exe


def compile_fortran(src: Path, exe: Path, built: Built, *, compiler: str | None = None) -> Path:
    from redist.cabi._build import find_fortran_compiler

    fc = find_fortran_compiler(compiler)
    if fc is None:
        raise RuntimeError("no Fortran compiler (gfortran or $FC) found")
    if not built.fortran:
        raise RuntimeError(f"{built.dir} has no redist.mod (built without a Fortran compiler)")
    _compile([fc, "-std=f2008", "-Wall", "-O2", str(src), *built.fflags, *built.flibs, "-o", str(exe)])
    return exe


# --- a thread-simulated communicator (engine.collective, engine.tune without MPI) ---------


class ThreadComm:
    """Ranks are threads; allgather through a barrier (the tests' stand-in for mpi4py)."""

    def __init__(self, hub, rank):
        self.hub, self.rank = hub, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.hub["p"]

    def allgather(self, obj):
        h = self.hub
        h["slots"][self.rank] = obj
        h["barrier"].wait()
        out = list(h["slots"])
        h["barrier"].wait()
        return out


def run_ranks(p, fn):
    hub = {"p": p, "slots": [None] * p, "barrier": threading.Barrier(p, timeout=30)}
    results, excs = [None] * p, [None] * p

    def target(r):
        try:
            results[r] = fn(ThreadComm(hub, r), r)
        except BaseException as e:  # noqa: BLE001
            excs[r] = e

    ts = [threading.Thread(target=target, args=(r,)) for r in range(p)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not any(t.is_alive() for t in ts), "a rank hung"
    return results, excs
