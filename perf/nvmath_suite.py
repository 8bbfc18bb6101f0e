# SPDX-License-Identifier: Apache-2.0
"""Run nvmath-python's own Redistribute test-suite and CPU examples against redist.

Usage::

    python perf/nvmath_suite.py --nvmath-src DIR [--nranks 2 4] [--mode both] [--keep TMPDIR]

``DIR`` is an nvmath-python checkout (or a copy of its files) that holds
``tests/nvmath_tests/distributed/`` and ``examples/distributed/redistribute/``. Nothing of
nvmath is copied into this repository: the files are read from ``DIR`` at run time, copied to a
temporary directory, and rewritten there.

What it does
------------
1. Copies ``tests/nvmath_tests/helpers.py``, ``tests/nvmath_tests/distributed/{conftest,
   helpers,helpers_fft}.py``, the test modules (``--modules``) and the example scripts into a
   temporary directory and rewrites the imports mechanically with the rules of
   :data:`REWRITE_RULES` (printed at start). Only code is rewritten: string literals and
   comments are masked first (``tokenize``), so expected error messages such as
   ``"nvmath.distributed has already been initialized"`` stay exactly as nvmath wrote them.
2. For each process count P (``--nranks``) and each module, runs
   ``mpiexec -n P python -m pytest -q -p no:cacheprovider -rfEs MODULE`` (with
   ``--oversubscribe`` under Open MPI) under a timeout, one JUnit XML and one output file per
   rank (the rank is read from PMI_RANK / OMPI_COMM_WORLD_RANK / PMIX_RANK), and collects
   pass/fail/error/skip counts per rank plus every distinct failure message.
3. Runs every CPU-only example under ``mpiexec -n N`` where N is the example header's
   ``$ mpiexec -n N`` line, printing ok/failed and the last lines of output.
4. Prints a summary table.

Modes (``--mode``)
------------------
* ``strict``: only the import rewrite. This is what a user who swaps the imports sees.
* ``compat``: additionally loads ``_nvmath_suite_shim/compat.py`` (in the temp dir only,
  never in redist) that fills names redist lacks with minimal stand-ins, so that modules that
  die at import in strict mode run further. Every stand-in that was applied is printed; each
  one is an item of the drop-in work list. A stand-in is applied only while redist lacks the
  name or signature, so the layer shrinks by itself as redist grows.
* ``both`` (default): strict, then compat.

No GPU: how GPU-only cases are handled
--------------------------------------
nvmath's own suite has no CPU-only mode: its ``process_group`` fixture and test modules call
``cuda.core.system.get_num_devices()`` (which raises without a driver) and compute
``rank % num_devices``, and GPU cases build cupy arrays. The minimal mechanism used here:

* ``from cuda.core import system`` is rewritten to the harness's ``system`` whose
  ``get_num_devices()`` returns the real device count, or 1 when there is no GPU (so
  ``rank % n`` is defined). The example runner likewise makes ``torch.cuda.device_count()``
  return 1 when there is no GPU. ``HAVE_GPU`` is the real answer.
* Without a GPU, the harness conftest (root of the temp dir) marks as skipped, with reason
  ``no GPU``, every test whose parameters include the value ``"gpu"``
  (``input_memory_space="gpu"``) and the tests of :data:`GPU_ONLY_TESTS` (they create cupy data
  unconditionally).
* nvmath test infrastructure that is not Redistribute API (``nvmath.internal.*`` tensor
  wrappers, typemaps, ``device_ctx``, ``get_or_create_stream`` and
  ``nvmath.distributed._internal.tensor_*``) is mapped to ``_nvmath_suite_shim``: a small
  numpy / torch-CPU implementation of the methods the helpers use (``.tensor``, ``.shape``,
  element ``.strides``, ``.dtype`` name, ``.module``, ``.device``, ``.empty``, ``.copy_``).
  ``maybe_register_package("cupy")`` is a no-op without cupy.
* Without a GPU, ``redist.initialize`` is wrapped (``_nvmath_suite_shim/nogpu.py``): an
  integer ``device_id`` becomes ``"cpu"`` and a valid backends list naming ``"nvshmem"`` is
  dropped; strings, None and invalid backends pass through, so redist's own argument checks
  are what ``test_initialize.py`` sees.
* The example runner applies the same emulation and, in compat mode, the compat layer, then
  runs the example with ``runpy`` as ``__main__``.
* With a GPU (and cupy) present nothing is skipped; the GPU cases then run against redist.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
import tokenize
import xml.etree.ElementTree as ET
from pathlib import Path

# --------------------------------------------------------------------------------------------
# The rewrite table: (regex on code with strings/comments masked, replacement, why). In order.
# --------------------------------------------------------------------------------------------
REWRITE_RULES: list[tuple[str, str, str]] = [
    # nvmath test infrastructure (not Redistribute API) -> harness shim.
    (r"\bnvmath\.distributed\._internal\.tensor_wrapper\b", "_nvmath_suite_shim.tensor_wrapper", "test infra"),
    (r"\bnvmath\.distributed\._internal\.tensor_ifc\b", "_nvmath_suite_shim.tensor_ifc", "test infra"),
    (r"\bnvmath\.internal\.tensor_ifc_ndbuffer\b", "_nvmath_suite_shim.tensor_ifc", "test infra"),
    (r"\bnvmath\.internal\.tensor_ifc\b", "_nvmath_suite_shim.tensor_ifc", "test infra"),
    (r"\bnvmath\.internal\.tensor_wrapper\b", "_nvmath_suite_shim.tensor_wrapper", "test infra"),
    (r"\bnvmath\.internal\.typemaps\b", "_nvmath_suite_shim.typemaps", "test infra"),
    (r"\bnvmath\.internal\.utils\b", "_nvmath_suite_shim.utils", "test infra"),
    (r"(?m)^(\s*)from cuda\.core import system\b", r"\1from _nvmath_suite_shim import system", "no-GPU emulation"),
    # The API under test -> redist.
    (r"\bnvmath\.distributed\.process_group\b", "redist.process_group", "API (process_group module)"),
    (r"\bnvmath\.distributed\.distribution\b", "redist.distribution", "API (distribution module)"),
    (r"\bnvmath\.distributed\b", "redist", "API (runtime: initialize, get_context, ...)"),
]

#: The library's own name inside expected messages (string literals), applied unless
#: ``--keep-messages``: a test that matches "nvmath.distributed has already been initialized"
#: names the library, and the swap renames the library.
MESSAGE_RULES: list[tuple[str, str, str]] = [
    (r"\bnvmath\.distributed\b", "redist", "the library's name in expected messages"),
]
RENAME_IN_MESSAGES = True

#: Tests that need a GPU whatever their parameters (they build cupy operands unconditionally).
GPU_ONLY_TESTS = {"test_reset_operand_none": "creates its operand with cupy on the GPU"}

#: Test modules run by default (each in its own mpiexec: they differ in initialization).
DEFAULT_MODULES = ["test_redistribute.py", "test_distribution_promotion.py", "test_initialize.py"]

#: Support files of the distributed tests.
SUPPORT_FILES = ["__init__.py", "conftest.py", "helpers.py", "helpers_fft.py"]

FFT_WHY = "uses nvmath's distributed FFT, which redist does not have"
GPU_EXAMPLE_PATTERNS = [
    (r"\.fft\.FFT\(", FFT_WHY),
    (r"(?m)^\s*(import cupy|from cupy)", "imports cupy"),
    (r"allocate_symmetric_memory", "allocates GPU symmetric memory"),
    (r"device=device_id", "creates tensors on the GPU"),
]


# --------------------------------------------------------------------------------------------
# Rewriting
# --------------------------------------------------------------------------------------------
def _mask(src: str):
    """Replace string and comment tokens by placeholders; return (masked, restore)."""
    lines = src.splitlines(keepends=True)
    offsets = [0]
    for ln in lines:
        offsets.append(offsets[-1] + len(ln))
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type in (tokenize.STRING, tokenize.COMMENT) or tok.type == getattr(tokenize, "FSTRING_START", -1):
                a = offsets[tok.start[0] - 1] + tok.start[1]
                b = offsets[tok.end[0] - 1] + tok.end[1]
                spans.append((a, b))
    except (tokenize.TokenError, IndentationError):
        return src, lambda s: s
    pieces, saved, pos = [], [], 0
    for a, b in spans:
        if a < pos:
            continue
        pieces.append(src[pos:a])
        pieces.append(f"\x00{len(saved)}\x00")
        saved.append(src[a:b])
        pos = b
    pieces.append(src[pos:])

    def restore(s: str) -> str:
        def piece(m):
            text = saved[int(m.group(1))]
            if RENAME_IN_MESSAGES and not text.lstrip().startswith("#"):
                for pat, rep, _why in MESSAGE_RULES:
                    text = re.sub(pat, rep, text)
            return text

        return re.sub(r"\x00(\d+)\x00", piece, s)

    return "".join(pieces), restore


def rewrite_source(src: str) -> tuple[str, dict[int, int]]:
    masked, restore = _mask(src)
    hits: dict[int, int] = {}
    for i, (pat, rep, _why) in enumerate(REWRITE_RULES):
        masked, n = re.subn(pat, rep, masked)
        if n:
            hits[i] = n
    return restore(masked), hits


def print_rules() -> None:
    print("Import rewrite rules (applied in order, to code only; strings and comments untouched):")
    for i, (pat, rep, why) in enumerate(REWRITE_RULES):
        print(f"  R{i:<2d} {pat:58s} -> {rep:36s} [{why}]")
    if RENAME_IN_MESSAGES:
        print("In string literals (expected messages; --keep-messages turns this off):")
        for i, (pat, rep, why) in enumerate(MESSAGE_RULES):
            print(f"  M{i:<2d} {pat:58s} -> {rep:36s} [{why}]")


# --------------------------------------------------------------------------------------------
# The harness files written into the temp dir (our code, not nvmath's).
# --------------------------------------------------------------------------------------------
SHIM_FILES: dict[str, str] = {}

SHIM_FILES["_nvmath_suite_shim/__init__.py"] = '''
"""nvmath_suite harness: no-GPU emulation, test-infrastructure stand-ins, compat layer."""
import os


def _real_gpu_count():
    try:
        from cuda.core import system as _s
        return int(_s.get_num_devices())
    except Exception:
        return 0


REAL_NUM_DEVICES = _real_gpu_count()
HAVE_GPU = REAL_NUM_DEVICES > 0
COMPAT = os.environ.get("NVMATH_SUITE_COMPAT") == "1"
'''

SHIM_FILES["_nvmath_suite_shim/system.py"] = '''
"""Stand-in for cuda.core.system: the real device count, or 1 without a GPU (rank % n)."""
from . import REAL_NUM_DEVICES


def get_num_devices():
    return REAL_NUM_DEVICES if REAL_NUM_DEVICES > 0 else 1
'''

SHIM_FILES["_nvmath_suite_shim/nogpu.py"] = '''
"""No-GPU emulation (both modes). nvmath always needs a GPU; here an integer device_id (the
tests' ``rank % get_num_devices()``) becomes "cpu", and a valid nvmath backends list naming
"nvshmem" is dropped (redist refuses backends=['nvshmem'] with device 'cpu'). Any other
argument (strings, None, invalid backends) is passed through unchanged, so redist's own
validation is what the tests see."""
import functools

from . import HAVE_GPU

BACKENDS = ("nvshmem", "nccl")
APPLIED = []


def apply():
    if HAVE_GPU or APPLIED:
        return
    import redist

    real = redist.initialize

    @functools.wraps(real)
    def initialize(device_id=None, *args, **kwargs):
        if isinstance(device_id, int) and not isinstance(device_id, bool):
            device_id = "cpu"
            b = kwargs.get("backends", args[1] if len(args) > 1 else None)
            if isinstance(b, (list, tuple)) and b and "nvshmem" in b and all(x in BACKENDS for x in b):
                if "backends" in kwargs:
                    kwargs["backends"] = None
                else:
                    args = (args[0], None) + tuple(args[2:])
        return real(device_id, *args, **kwargs)

    redist.initialize = initialize
    APPLIED.append("redist.initialize: integer device_id -> 'cpu', backends=['nvshmem'] -> None (no GPU)")
'''

SHIM_FILES["_nvmath_suite_shim/typemaps.py"] = '''
import numpy as np


class _Widths(dict):
    def __missing__(self, name):
        return np.dtype(name).itemsize * 8


NAME_TO_DATA_WIDTH = _Widths(bfloat16=16, float8_e4m3fn=8, float8_e5m2=8, bool=8)
'''

SHIM_FILES["_nvmath_suite_shim/utils.py"] = '''
import contextlib


def device_ctx(device_id):
    return contextlib.nullcontext()


def get_or_create_stream(device_id, stream=None, op_package=None):
    raise RuntimeError("nvmath_suite harness: a CUDA stream was requested (GPU case; no GPU stand-in)")
'''

SHIM_FILES["_nvmath_suite_shim/tensor_ifc.py"] = '''
"""CPU stand-ins for nvmath's TensorHolder wrappers (numpy and torch-CPU)."""
import numpy as np


class TensorHolder:
    name = None
    module = None

    def __init__(self, tensor):
        self.tensor = tensor

    def __repr__(self):
        return f"{type(self).__name__}({self.shape}, {self.dtype}, strides={self.strides})"


class DistributedTensor(TensorHolder):
    is_symmetric_memory = False


class NDBufferTensor(TensorHolder):
    pass


def _need_cpu(device_id):
    if device_id not in ("cpu", None):
        raise RuntimeError(f"nvmath_suite harness: GPU tensor requested (device_id={device_id!r})")


class NumpyDistributedTensor(DistributedTensor):
    name = "numpy"
    module = np
    device = "cpu"
    device_id = "cpu"

    @property
    def dtype(self):
        return self.tensor.dtype.name

    @property
    def itemsize(self):
        return self.tensor.itemsize

    @property
    def shape(self):
        return tuple(self.tensor.shape)

    @property
    def size(self):
        return self.tensor.size

    @property
    def strides(self):
        return tuple(s // self.tensor.itemsize for s in self.tensor.strides)

    @property
    def data_ptr(self):
        return self.tensor.ctypes.data

    @classmethod
    def empty(cls, shape, device_id="cpu", *, dtype="float32", strides=None, **context):
        _need_cpu(device_id)
        dt = np.dtype(dtype)
        st = tuple(s * dt.itemsize for s in strides) if strides else None
        return cls(np.ndarray(shape, dtype=dt, strides=st))

    def copy_(self, src, stream_holder=None):
        np.copyto(self.tensor, src.tensor)

    def to(self, device_id, stream_holder=None, symmetric_memory=None):
        _need_cpu(device_id)
        return self

    def reshape(self, shape, *, copy=None):
        return type(self)(np.reshape(self.tensor, shape))


class TorchDistributedTensor(DistributedTensor):
    name = "torch"

    @property
    def module(self):
        import torch
        return torch

    @property
    def device(self):
        return "cpu" if self.tensor.device.type == "cpu" else "cuda"

    @property
    def device_id(self):
        return "cpu" if self.tensor.device.type == "cpu" else self.tensor.device.index

    @property
    def dtype(self):
        return str(self.tensor.dtype).split(".")[-1]

    @property
    def itemsize(self):
        return self.tensor.element_size()

    @property
    def shape(self):
        return tuple(self.tensor.shape)

    @property
    def size(self):
        return self.tensor.numel()

    @property
    def strides(self):
        return tuple(self.tensor.stride())

    @property
    def data_ptr(self):
        return self.tensor.data_ptr()

    @classmethod
    def empty(cls, shape, device_id="cpu", *, dtype="float32", strides=None, **context):
        import torch
        _need_cpu(device_id)
        dt = getattr(torch, dtype)
        if strides:
            return cls(torch.empty_strided(tuple(shape), tuple(strides), dtype=dt))
        return cls(torch.empty(tuple(shape), dtype=dt))

    def copy_(self, src, stream_holder=None):
        self.tensor.copy_(src.tensor)

    def to(self, device_id, stream_holder=None, symmetric_memory=None):
        _need_cpu(device_id)
        return self

    def reshape(self, shape, *, copy=None):
        return type(self)(self.tensor.reshape(shape))
'''

SHIM_FILES["_nvmath_suite_shim/tensor_wrapper.py"] = '''
import numpy as np

from .tensor_ifc import NumpyDistributedTensor, TensorHolder, TorchDistributedTensor

_TENSOR_TYPES = {"numpy": NumpyDistributedTensor}


def maybe_register_package(package, call_base=True):
    if package == "torch":
        _TENSOR_TYPES["torch"] = TorchDistributedTensor
    elif package == "cupy":
        try:
            import cupy  # noqa: F401
        except ImportError:
            return  # no cupy: GPU cases are skipped by the harness
        raise RuntimeError("nvmath_suite harness: cupy wrappers are not emulated")


def wrap_operand(native_operand):
    if isinstance(native_operand, TensorHolder):
        return native_operand
    if isinstance(native_operand, np.ndarray):
        return NumpyDistributedTensor(native_operand)
    mod = type(native_operand).__module__.split(".")[0]
    if mod == "torch":
        maybe_register_package("torch")
        return TorchDistributedTensor(native_operand)
    raise TypeError(f"nvmath_suite harness: can't wrap {type(native_operand)}")
'''

SHIM_FILES["_nvmath_suite_shim/compat.py"] = r'''
"""Compat layer (temp dir only): stand-ins for what redist lacks, so tests run further.

Each stand-in is applied only when redist lacks the name/signature; APPLIED lists them.
"""
import enum
import importlib
import inspect
import sys
import types

import numpy as np

import redist

from . import HAVE_GPU

APPLIED = []


def _note(what):
    APPLIED.append(what)


def apply():
    if APPLIED:
        return
    # 1. The distribution module.
    try:
        importlib.import_module("redist.distribution")
    except ImportError:
        sys.modules["redist.distribution"] = redist
        redist.distribution = redist
        _note("redist.distribution missing -> aliased to the redist package")

    # 2. BlockCyclic.
    if not hasattr(redist, "BlockCyclic"):
        class BlockCyclic:  # placeholder: importable, unusable
            def __init__(self, *a, **k):
                raise NotImplementedError("nvmath_suite compat: redist has no BlockCyclic")
        redist.BlockCyclic = BlockCyclic
        _note("BlockCyclic missing -> placeholder whose constructor raises NotImplementedError")

    # 3. Process groups.
    try:
        pgmod = importlib.import_module("redist.process_group")
    except ImportError:
        sys.modules["redist.process_group"] = pgmod = redist
        redist.process_group = redist
        _note("redist.process_group missing -> aliased to the redist package")
    if not hasattr(pgmod, "ReductionOp"):
        class ReductionOp(enum.IntEnum):
            SUM = 0
            MIN = 1
            MAX = 2
        pgmod.ReductionOp = ReductionOp
        _note("redist.process_group.ReductionOp missing -> IntEnum SUM/MIN/MAX")
    for name in ("MPIProcessGroup", "TorchProcessGroup", "ProcessGroup"):
        if pgmod is not redist and hasattr(redist, name) and not hasattr(pgmod, name):
            setattr(pgmod, name, getattr(redist, name))
            _note(f"redist.process_group.{name} missing -> redist.{name}")
    PG = redist.ProcessGroup
    if hasattr(redist, "MPIProcessGroup"):
        _process_groups_done = True
    else:
        _process_groups_done = False
    if not _process_groups_done:
        _old_style_process_group(redist, PG)
        if pgmod is not redist:
            pgmod.MPIProcessGroup = redist.MPIProcessGroup
    if not hasattr(redist, "TorchProcessGroup"):
        class TorchProcessGroup:
            def __init__(self, *a, **k):
                raise NotImplementedError("nvmath_suite compat: redist has no TorchProcessGroup")
        redist.TorchProcessGroup = TorchProcessGroup
        _note("TorchProcessGroup missing -> placeholder")
    _initialize_and_context(redist)


def _old_style_process_group(redist, PG):
    """redist without MPIProcessGroup: ProcessGroup(comm, rank, nranks) gets nvmath's methods."""

    def _mpi_op(op):
        from mpi4py import MPI
        return {0: MPI.SUM, 1: MPI.MIN, 2: MPI.MAX}[int(op)]

    added = []
    if not hasattr(PG, "allreduce_buffer"):
        def allreduce_buffer(self, array, *, op):
            from mpi4py import MPI
            self.comm.Allreduce(MPI.IN_PLACE, array, op=_mpi_op(op))
        PG.allreduce_buffer = allreduce_buffer
        added.append("allreduce_buffer")
    if not hasattr(PG, "broadcast_buffer"):
        def broadcast_buffer(self, array, *, root=0):
            self.comm.Bcast(array, root=root)
        PG.broadcast_buffer = broadcast_buffer
        added.append("broadcast_buffer")
    if not hasattr(PG, "allreduce_object"):
        def allreduce_object(self, obj, *, op):
            return self.comm.allreduce(obj, op=op)
        PG.allreduce_object = allreduce_object
        added.append("allreduce_object")
    if not hasattr(PG, "_mpi_comm"):
        PG._mpi_comm = property(lambda self: self.comm)
        added.append("_mpi_comm")
    if added:
        _note("redist.ProcessGroup lacks " + ", ".join(added) + " -> added (MPI)")
    if not hasattr(redist, "MPIProcessGroup"):
        class _Meta(type):
            def __instancecheck__(cls, obj):
                return isinstance(obj, PG)

        class MPIProcessGroup(metaclass=_Meta):
            def __new__(cls, mpi_comm):
                return PG(mpi_comm, mpi_comm.Get_rank(), mpi_comm.Get_size())
        redist.MPIProcessGroup = MPIProcessGroup
        _note("MPIProcessGroup missing -> factory returning redist.ProcessGroup(comm, rank, nranks)")


def _initialize_and_context(redist):
    # 4. initialize(device_id, process_group, backends).
    init = redist.initialize
    params = inspect.signature(init).parameters
    if "backends" not in params:
        def initialize(device_id, process_group, backends=None):
            comm = getattr(process_group, "comm", process_group)
            return init(device_id if HAVE_GPU else "cpu", comm)
        redist.initialize = initialize
        _note("initialize() has no 'backends' parameter -> wrapper initialize(device_id, process_group, "
              "backends) calling redist.initialize(device_id or 'cpu' without GPU, comm)")

    # 5. get_context(): nvmath returns None before initialize() and reads nvmath.distributed._ctx.
    from redist import _runtime
    try:
        implicit = "initialize(" in inspect.getsource(redist.get_context)
    except (OSError, TypeError):
        implicit = False
    injectable = "_ctx" in vars(redist)
    if implicit or not injectable:
        redist._ctx = None

        def get_context():
            injected = redist.__dict__.get("_ctx")
            if injected is not None:
                return injected
            return _runtime._ctx
        redist.get_context = get_context
        why = []
        if implicit:
            why.append("initializes implicitly (nvmath returns None before initialize())")
        if not injectable:
            why.append("ignores an injected redist._ctx")
        _note("get_context() " + " and ".join(why) + " -> wrapper returning redist._ctx or the current "
              "context (None before initialize)")

    # 6. DistributedContext(device_id=, process_group=, nvshmem_available=, nccl_comm=).
    DC = redist.DistributedContext
    if "nvshmem_available" not in inspect.signature(DC).parameters:
        def DistributedContext(*, device_id, process_group, nvshmem_available=False, nccl_comm=None):
            return types.SimpleNamespace(device_id=device_id, process_group=process_group,
                                         nvshmem_available=nvshmem_available, nccl_comm=nccl_comm)
        redist.DistributedContext = DistributedContext
        _note("DistributedContext has no nvshmem_available/nccl_comm fields -> namespace factory")
'''

SHIM_FILES["_nvmath_suite_shim/run_example.py"] = '''
"""python -m _nvmath_suite_shim.run_example FILE: no-GPU emulation (+ compat), then run FILE."""
import runpy
import sys

from . import COMPAT, HAVE_GPU

if not HAVE_GPU:
    try:
        import torch
        torch.cuda.device_count = lambda: 1  # the examples compute rank % device_count()
    except ImportError:
        pass
from . import nogpu

nogpu.apply()
if COMPAT:
    from . import compat
    compat.apply()
path = sys.argv[1]
sys.argv = sys.argv[1:]
runpy.run_path(path, run_name="__main__")
'''

ROOT_CONFTEST = '''
"""nvmath_suite harness conftest (root of the temp dir)."""
import os

import pytest

from _nvmath_suite_shim import COMPAT, HAVE_GPU

GPU_ONLY_TESTS = %(gpu_only)r

from _nvmath_suite_shim import nogpu

nogpu.apply()
if COMPAT:
    from _nvmath_suite_shim import compat

    compat.apply()


def _rank():
    for k in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"):
        if k in os.environ:
            return int(os.environ[k])
    return 0


def pytest_report_header(config):
    lines = [f"nvmath_suite harness: HAVE_GPU={HAVE_GPU} COMPAT={COMPAT}"] + ["no-GPU emulation: " + a for a in nogpu.APPLIED]
    if COMPAT:
        lines += ["compat stand-in: " + a for a in compat.APPLIED]
    return lines


def pytest_collection_modifyitems(config, items):
    if HAVE_GPU:
        return
    for item in items:
        name = getattr(item, "originalname", item.name)
        params = getattr(getattr(item, "callspec", None), "params", {})
        if any(isinstance(v, str) and v == "gpu" for v in params.values()):
            item.add_marker(pytest.mark.skip(reason="no GPU: GPU operand case"))
        elif name in GPU_ONLY_TESTS:
            item.add_marker(pytest.mark.skip(reason="no GPU: " + GPU_ONLY_TESTS[name]))
'''

MINIMAL_PARENT_HELPERS = '''
"""nvmath_suite: stand-in for tests/nvmath_tests/helpers.py (absent from the given source)."""
import pytest


def assert_reset_to_none_behavior(*, with_release, single_operand, obj, **reset_kwargs):
    pytest.skip("nvmath_suite: tests/nvmath_tests/helpers.py not provided")
'''


# --------------------------------------------------------------------------------------------
# Setup
# --------------------------------------------------------------------------------------------
def build_tree(src: Path, tmp: Path, modules: list[str]) -> tuple[list[Path], dict[str, dict[int, int]]]:
    dist_src = src / "tests" / "nvmath_tests" / "distributed"
    ex_src = src / "examples" / "distributed" / "redistribute"
    if not dist_src.is_dir():
        sys.exit(f"error: {dist_src} not found")
    for rel, text in SHIM_FILES.items():
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text).lstrip())
    (tmp / "conftest.py").write_text(textwrap.dedent(ROOT_CONFTEST % {"gpu_only": GPU_ONLY_TESTS}).lstrip())
    (tmp / "pytest.ini").write_text("[pytest]\naddopts =\n")
    dist = tmp / "nvmath_tests" / "distributed"
    dist.mkdir(parents=True)
    (tmp / "nvmath_tests" / "__init__.py").write_text("")
    hits_by_file: dict[str, dict[int, int]] = {}

    def copy(srcf: Path, dstf: Path):
        text, hits = rewrite_source(srcf.read_text())
        dstf.write_text(text)
        hits_by_file[str(dstf.relative_to(tmp))] = hits

    parent_helpers = src / "tests" / "nvmath_tests" / "helpers.py"
    if parent_helpers.is_file():
        copy(parent_helpers, tmp / "nvmath_tests" / "helpers.py")
    else:
        (tmp / "nvmath_tests" / "helpers.py").write_text(textwrap.dedent(MINIMAL_PARENT_HELPERS).lstrip())
        print(f"note: {parent_helpers} absent: using a stub assert_reset_to_none_behavior (skips)")
    for name in SUPPORT_FILES + modules:
        f = dist_src / name
        if f.is_file():
            copy(f, dist / name)
        elif name == "__init__.py":
            (dist / name).write_text("")
        else:
            print(f"note: {f} absent")
    examples = []
    if ex_src.is_dir():
        exdir = tmp / "examples"
        exdir.mkdir()
        for f in sorted(ex_src.glob("*.py")):
            copy(f, exdir / f.name)
            examples.append(exdir / f.name)
    return examples, hits_by_file


def find_mpiexec() -> tuple[list[str], str]:
    cand = shutil.which("mpiexec") or str(Path(sys.executable).parent / "mpiexec")
    if not Path(cand).exists():
        sys.exit("error: mpiexec not found on PATH")
    try:
        ver = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        ver = ""
    cmd = [cand]
    flavour = "mpich"
    if "Open MPI" in ver or "OpenRTE" in ver or "open-mpi" in ver.lower():
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")  # Open MPI refuses root otherwise (containers)
        flavour = "openmpi"
    return cmd, flavour


RANK_SH = "${PMI_RANK:-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}}"


def run_ranked(mpiexec, nranks, tmp: Path, outdir: Path, pycmd: str, env, timeout) -> tuple[int | str, float]:
    """mpiexec -n P sh -c 'pycmd > outdir/out-RANK.txt 2>&1' (pycmd may use $RANK)."""
    outdir.mkdir(parents=True, exist_ok=True)
    script = f'RANK={RANK_SH}; {pycmd} > "{outdir}/out-$RANK.txt" 2>&1'
    cmd = mpiexec + ["-n", str(nranks), "sh", "-c", script]
    t0 = time.time()
    with open(outdir / "mpiexec.txt", "w") as log:  # mpiexec's own complaints (the ranks write their files)
        p = subprocess.Popen(cmd, cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc: int | str = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the session of this mpiexec: its ranks (a hang), nothing else
            p.wait()
            rc = "TIMEOUT"
    if rc not in (0, "TIMEOUT") and not any((outdir / f"out-{r}.txt").is_file() for r in range(nranks)):
        print(f"    mpiexec failed before any rank ran: {(outdir / 'mpiexec.txt').read_text(errors='replace')[-1500:]}")
    return rc, time.time() - t0


SUMMARY_RE = re.compile(r"^=+ (.*?) in [\d.]+s.*=+$")


def parse_counts(text: str) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    last = None
    for line in text.splitlines():
        m = SUMMARY_RE.match(line.strip())
        if m:
            last = m.group(1)
    if last is None:
        for line in reversed(text.splitlines()):  # -q prints "N passed, M failed in Xs" without '='
            if re.search(r"\d+ (passed|failed|skipped|errors?|deselected)", line) and " in " in line:
                last = line
                break
    if last is None:
        return {}
    for n, what in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed|deselected)", last):
        what = "error" if what.startswith("error") else what
        counts[what] = counts.get(what, 0) + int(n)
    return counts


def parse_junit(path: Path) -> list[tuple[str, str, str]]:
    """[(test id, kind, first message line)] for failures and errors."""
    out = []
    if not path.is_file():
        return out
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError:
        return out
    for tc in root.iter("testcase"):
        tid = tc.get("name", "?")
        for kind in ("failure", "error"):
            for el in tc.findall(kind):
                msg = el.get("message") or ""
                if not msg or msg == "collection failure":
                    # Collection errors: the exception is in the E-lines of the traceback.
                    elines = [ln[1:].strip() for ln in (el.text or "").splitlines() if ln.startswith("E ")]
                    msg = " | ".join(elines[-3:]) or (el.text or "").strip().splitlines()[-1:][0:1] and \
                        (el.text or "").strip().splitlines()[-1]
                out.append((tid, kind, " ".join(str(msg).split())[:600]))
    return out


def run_module(mpiexec, nranks, tmp, resdir, module, env, timeout, per_test_timeout):
    tag = f"{module[:-3]}-P{nranks}"
    outdir = resdir / tag
    extra = ""
    try:
        import pytest_timeout  # noqa: F401
        extra = f" -p timeout --timeout={per_test_timeout}"
    except ImportError:
        pass
    py = (f'"{sys.executable}" -m pytest -q -p no:cacheprovider -rfEs{extra} '
          f'--junitxml="{outdir}/junit-$RANK.xml" nvmath_tests/distributed/{module}')
    rc, dt = run_ranked(mpiexec, nranks, tmp, outdir, py, env, timeout)
    ranks = []
    for r in range(nranks):
        text = (outdir / f"out-{r}.txt").read_text(errors="replace") if (outdir / f"out-{r}.txt").is_file() else ""
        ranks.append({"counts": parse_counts(text), "fails": parse_junit(outdir / f"junit-{r}.xml"), "text": text})
    return {"module": module, "nranks": nranks, "rc": rc, "time": dt, "ranks": ranks, "dir": outdir}


def _have_gpu() -> bool:
    """A CUDA device is visible to this process (then GPU examples run)."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        if err != driver.CUresult.CUDA_SUCCESS:
            return False
        err, n = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and n > 0
    except Exception:  # noqa: BLE001 -- no driver, no cuda-bindings
        return False


def example_info(path: Path) -> tuple[int, str | None]:
    text = path.read_text()
    m = re.search(r"\$ mpiexec -n (\d+) python", text)
    n = int(m.group(1)) if m else 2
    for pat, why in GPU_EXAMPLE_PATTERNS:
        if re.search(pat, text):
            return n, why
    return n, None


def run_example(mpiexec, path: Path, n: int, tmp, resdir, env, timeout):
    outdir = resdir / f"example-{path.stem}"
    py = f'"{sys.executable}" -m _nvmath_suite_shim.run_example "{path}"'
    rc, dt = run_ranked(mpiexec, n, tmp, outdir, py, env, timeout)
    texts = [(outdir / f"out-{r}.txt").read_text(errors="replace") if (outdir / f"out-{r}.txt").is_file() else ""
             for r in range(n)]
    return {"name": path.name, "n": n, "rc": rc, "time": dt, "texts": texts}


# --------------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------------
def fmt_counts(c: dict[str, int]) -> str:
    if not c:
        return "no summary (crash/timeout?)"
    return " ".join(f"{k[0]}={c.get(k, 0)}" for k in ("passed", "failed", "error", "skipped"))


def report_module(res, tail_lines: int) -> None:
    m, P = res["module"], res["nranks"]
    print(f"\n--- {m}  P={P}  rc={res['rc']}  {res['time']:.1f}s  (results: {res['dir']})")
    for r, rk in enumerate(res["ranks"]):
        print(f"    rank {r}: {fmt_counts(rk['counts'])}")
    # Distinct failures over all ranks.
    seen: dict[tuple[str, str], tuple[str, list[int]]] = {}
    for r, rk in enumerate(res["ranks"]):
        for tid, kind, msg in rk["fails"]:
            key = (tid, kind)
            if key not in seen:
                seen[key] = (msg, [r])
            elif r not in seen[key][1]:
                seen[key][1].append(r)
    for (tid, kind), (msg, rs) in sorted(seen.items()):
        where = "all ranks" if len(rs) == P else f"ranks {rs}"
        print(f"    {kind.upper():7s} {tid}  [{where}]\n            {msg}")
    if not any(rk["counts"] for rk in res["ranks"]):
        tails: dict[str, list[int]] = {}
        for r, rk in enumerate(res["ranks"]):
            tails.setdefault("\n".join(rk["text"].splitlines()[-tail_lines:]), []).append(r)
        for tail, rs in tails.items():
            print(f"    rank(s) {rs} output tail:\n" + textwrap.indent(tail, "      | "))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nvmath-src", required=True, type=Path, help="nvmath-python checkout (or copy)")
    ap.add_argument("--nranks", nargs="+", type=int, default=[2, 4])
    ap.add_argument("--mode", choices=["strict", "compat", "both"], default="both")
    ap.add_argument("--modules", nargs="+", default=DEFAULT_MODULES)
    ap.add_argument("--keep", type=Path, default=None, help="use (and keep) this directory instead of a temp dir")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per mpiexec run")
    ap.add_argument("--per-test-timeout", type=int, default=300)
    ap.add_argument("--no-examples", action="store_true")
    ap.add_argument("--tail", type=int, default=8, help="output lines shown per failed example / crashed run")
    ap.add_argument("--example-nranks", type=int, default=None,
                    help="run every example on this many processes (default: the example header's)")
    ap.add_argument("--keep-messages", action="store_true",
                    help="leave 'nvmath.distributed' in expected messages (see MESSAGE_RULES)")
    args = ap.parse_args()
    global RENAME_IN_MESSAGES
    RENAME_IN_MESSAGES = not args.keep_messages

    src = args.nvmath_src.resolve()
    if args.keep:
        tmp = args.keep.resolve()
        if tmp.exists():
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="nvmath_suite_"))
    print_rules()
    examples, hits = build_tree(src, tmp, args.modules)
    print(f"\nRewritten files in {tmp}:")
    for f, h in sorted(hits.items()):
        print(f"  {f:60s} " + (", ".join(f"R{i}x{n}" for i, n in sorted(h.items())) or "-"))
    mpiexec, flavour = find_mpiexec()
    print(f"\nmpiexec: {' '.join(mpiexec)} ({flavour}); python: {sys.executable}")

    modes = ["strict", "compat"] if args.mode == "both" else [args.mode]
    table = []
    for mode in modes:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(tmp) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["NVMATH_SUITE_COMPAT"] = "1" if mode == "compat" else "0"
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        resdir = tmp / "results" / mode
        print(f"\n==================== mode: {mode} ====================")
        if mode == "compat":
            code = "from _nvmath_suite_shim import compat; compat.apply(); print('\\n'.join(compat.APPLIED))"
            probe = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp,
                                   capture_output=True, text=True, timeout=300, check=False)
            print("compat stand-ins applied (each is a missing redist name / signature):")
            for line in (probe.stdout.strip().splitlines() or ["(none)"]):
                print("  - " + line)
            if probe.returncode:
                print(probe.stderr[-2000:])
        for P in args.nranks:
            for module in args.modules:
                if not (tmp / "nvmath_tests" / "distributed" / module).is_file():
                    continue
                res = run_module(mpiexec, P, tmp, resdir, module, env, args.timeout, args.per_test_timeout)
                report_module(res, args.tail)
                c0 = res["ranks"][0]["counts"] if res["ranks"] else {}
                same = all(rk["counts"] == c0 for rk in res["ranks"])
                table.append((mode, module, f"P={P}", fmt_counts(c0) + ("" if same else "  (ranks differ)"),
                              str(res["rc"])))
        if args.no_examples:
            continue
        print(f"\n--- examples ({mode})")
        for ex in examples:
            n, gpu_why = example_info(ex)
            if args.example_nranks:
                n = args.example_nranks
            if gpu_why and (not _have_gpu() or gpu_why == FFT_WHY):
                why = gpu_why if gpu_why == FFT_WHY else f"GPU: {gpu_why}"
                print(f"    SKIP   {ex.name:40s} ({why})")
                table.append((mode, ex.name, f"n={n}", f"skipped ({why})", "-"))
                continue
            r = run_example(mpiexec, ex, n, tmp, resdir, env, args.timeout)
            ok = r["rc"] == 0
            print(f"    {'ok' if ok else 'FAILED':6s} {ex.name:40s} mpiexec -n {n}  rc={r['rc']}  {r['time']:.1f}s")
            if not ok:
                shown: dict[str, list[int]] = {}
                for rk, text in enumerate(r["texts"]):
                    tail = "\n".join(text.rstrip().splitlines()[-args.tail:])
                    shown.setdefault(tail, []).append(rk)
                for tail, rks in shown.items():
                    if tail:
                        print(f"      rank(s) {rks}:\n" + textwrap.indent(tail, "        | "))
            table.append((mode, ex.name, f"n={n}", "ok" if ok else "FAILED", str(r["rc"])))

    print("\n==================== summary (rank 0 counts: p=passed f=failed e=error s=skipped) ====================")
    w = max(len(t[1]) for t in table) if table else 10
    print(f"{'mode':7s} {'module / example':{w}s} {'procs':6s} {'result':44s} rc")
    for mode, what, procs, result, rc in table:
        print(f"{mode:7s} {what:{w}s} {procs:6s} {result:44s} {rc}")
    if args.keep:
        print(f"\nkept: {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
