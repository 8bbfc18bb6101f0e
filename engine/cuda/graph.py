# SPDX-License-Identifier: Apache-2.0
"""CUDA graphs: stream capture, instantiation, our kernel nodes, and the cheap rebind.

Two layers:

* :class:`Driver` -- the handful of driver entry points on the hot path (``cuGraphLaunch``,
  ``cuGraphExecKernelNodeSetParams``, ``cuLaunchKernel``, ``cuStreamSynchronize``, the async
  memcpys), called through ctypes function pointers obtained once from ``cuGetProcAddress``.
  A call costs well under a microsecond of Python, and argument blocks are preallocated
  ctypes objects mutated in place (no tuple marshalling per call).
* :class:`KernelLaunch` -- one kernel of a plan: its ``void*[]`` argument block, its
  ``CUDA_KERNEL_NODE_PARAMS`` (v2 layout), the CUfunction per vector width, and the graph nodes
  it became. ``launch(stream)`` enqueues it (eager or while capturing); ``update()`` rewrites
  its nodes in every instantiated graph with ``cuGraphExecKernelNodeSetParams`` (future
  launches only, so no synchronisation is needed).

Everything else uses cuda.bindings (plan-time calls, not hot).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from ..errors import CudaError

__all__ = ["Capture", "Driver", "GraphExec", "KernelLaunch", "KernelNodeParams", "check", "driver_api"]


def check(result: tuple[Any, ...], what: str) -> Any:
    """Raise CudaError unless the cuda.bindings call succeeded; return the remaining values."""
    from cuda.bindings import driver

    err = result[0]
    if err != driver.CUresult.CUDA_SUCCESS:
        name = getattr(err, "name", str(err))
        try:
            _, desc = driver.cuGetErrorString(err)
            desc = desc.decode() if isinstance(desc, bytes) else str(desc)
        except Exception:  # noqa: BLE001
            desc = ""
        raise CudaError(f"{what} failed: {name}{': ' + desc if desc else ''}")
    rest = result[1:]
    if len(rest) == 0:
        return None
    return rest[0] if len(rest) == 1 else rest


class KernelNodeParams(ctypes.Structure):
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (the layout cuGraphExecKernelNodeSetParams takes since CUDA 12)."""

    _fields_ = [
        ("func", ctypes.c_void_p),
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("kernelParams", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


assert ctypes.sizeof(KernelNodeParams) == 72


_VP, _U, _I, _SZ, _U64 = ctypes.c_void_p, ctypes.c_uint, ctypes.c_int, ctypes.c_size_t, ctypes.c_uint64

# name -> (ctypes prototype, cuGetProcAddress version, legacy-library fallback symbol)
_SIGNATURES = {
    "cuGraphLaunch": (ctypes.CFUNCTYPE(_I, _VP, _VP), 12000, "cuGraphLaunch"),
    "cuGraphExecKernelNodeSetParams": (
        ctypes.CFUNCTYPE(_I, _VP, _VP, ctypes.POINTER(KernelNodeParams)),
        12000,
        "cuGraphExecKernelNodeSetParams_v2",
    ),
    "cuLaunchKernel": (
        ctypes.CFUNCTYPE(_I, _VP, _U, _U, _U, _U, _U, _U, _U, _VP, _VP, _VP),
        12000,
        "cuLaunchKernel",
    ),
    "cuStreamSynchronize": (ctypes.CFUNCTYPE(_I, _VP), 12000, "cuStreamSynchronize"),
    "cuMemcpyHtoDAsync": (ctypes.CFUNCTYPE(_I, _U64, _VP, _SZ, _VP), 12000, "cuMemcpyHtoDAsync_v2"),
    "cuMemcpyDtoHAsync": (ctypes.CFUNCTYPE(_I, _VP, _U64, _SZ, _VP), 12000, "cuMemcpyDtoHAsync_v2"),
    "cuMemcpyDtoDAsync": (ctypes.CFUNCTYPE(_I, _U64, _U64, _SZ, _VP), 12000, "cuMemcpyDtoDAsync_v2"),
}


class Driver:
    """ctypes function pointers to the hot driver calls (see the module docstring)."""

    # one attribute per entry of _SIGNATURES (set in __init__); each returns a CUresult (0: success)
    cuGraphLaunch: Callable[..., int]
    cuGraphExecKernelNodeSetParams: Callable[..., int]
    cuLaunchKernel: Callable[..., int]
    cuStreamSynchronize: Callable[..., int]
    cuMemcpyHtoDAsync: Callable[..., int]
    cuMemcpyDtoHAsync: Callable[..., int]
    cuMemcpyDtoDAsync: Callable[..., int]

    def __init__(self) -> None:
        from cuda.bindings import driver

        check(driver.cuInit(0), "cuInit")
        lib = None
        for name, (proto, version, fallback) in _SIGNATURES.items():
            addr = 0
            try:
                flag = driver.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM
                res = driver.cuGetProcAddress(name.encode(), version, int(getattr(flag, "value", flag)))
                if res[0] == driver.CUresult.CUDA_SUCCESS:
                    addr = int(res[1])
            except Exception:  # noqa: BLE001 -- fall back to the library symbol below
                addr = 0
            if addr:
                fn = proto(addr)
            else:
                if lib is None:
                    lib = ctypes.CDLL("libcuda.so.1")
                fn = proto((fallback, lib))
            setattr(self, name, fn)

    def call(self, name: str, *args: Any) -> None:
        rc = getattr(self, name)(*args)
        if rc:
            raise CudaError(f"{name} failed with CUresult {rc}{_err_name(rc)}")


def _err_name(rc: int) -> str:
    try:
        from cuda.bindings import driver

        return f" ({driver.CUresult(rc).name})"
    except Exception:  # noqa: BLE001
        return ""


_driver: Driver | None = None
_driver_lock = threading.Lock()


def driver_api() -> Driver:
    global _driver
    if _driver is None:
        with _driver_lock:
            if _driver is None:
                _driver = Driver()
    return _driver


class KernelLaunch:
    """One kernel of a plan, launchable eagerly or into a capture, and rebindable in graphs.

    Kernel signature (copy.cu): ``(const Bases bases, const Seg* table, int nsegs, ...protocol)``;
    ``Bases`` is ``u64 in_base[MAXF]; i64 out_delta[MAXF]`` by value (per field: the operand's
    address and the output's offset from its result), set with :meth:`set_in` / :meth:`set_delta`;
    the epoch kernels add ``(u64* ctl, const u64* proto, int nranks, int ncredit, int narrive,
    int nwait, int wait, int bump)`` (``protocol``: those eight values).
    """

    def __init__(self, drv: Driver, funcs: dict[int, int], grid: int, block: int, table_ptr: int, nsegs: int,
                 protocol: tuple[int, ...] = (), shared_bytes: int = 0) -> None:
        self.drv = drv
        self.funcs: dict[int, int] = dict(funcs)  # vector width -> CUfunction (int)
        self.vec: int = max(self.funcs)
        from .kernels import MAXF

        self.a_bases = (ctypes.c_int64 * (2 * MAXF))()  # in_base[MAXF] then out_delta[MAXF]
        self._maxf = MAXF
        self.a_table: ctypes.c_void_p = ctypes.c_void_p(table_ptr)
        self.a_nsegs: ctypes.c_int = ctypes.c_int(nsegs)
        args = [self.a_bases, self.a_table, self.a_nsegs]
        self.a_wait: ctypes.c_int | None = None
        if protocol:
            ctl, proto, nranks, ncredit, narrive, nwait, wait, bump = protocol
            self.a_wait = ctypes.c_int(wait)
            args += [ctypes.c_void_p(ctl), ctypes.c_void_p(proto), ctypes.c_int(nranks), ctypes.c_int(ncredit),
                     ctypes.c_int(narrive), ctypes.c_int(nwait), self.a_wait, ctypes.c_int(bump)]
        self._args = args  # keep the ctypes values alive: argv points at them
        self._argv = (ctypes.c_void_p * len(args))(*(ctypes.addressof(a) for a in args))
        p = KernelNodeParams()
        p.func = self.funcs[self.vec]
        p.gridDimX, p.gridDimY, p.gridDimZ = grid, 1, 1
        p.blockDimX, p.blockDimY, p.blockDimZ = block, 1, 1
        p.sharedMemBytes = shared_bytes  # the tile buffer of transposing segments (dynamic)
        self._argv_addr = ctypes.addressof(self._argv)
        p.kernelParams = self._argv_addr
        p.extra = None
        p.kern = None
        p.ctx = None
        self.params: KernelNodeParams = p
        self._pref = ctypes.pointer(p)
        self.grid: int = grid
        self.block: int = block
        self.nodes: list[tuple[int, int]] = []  # (CUgraphExec, CUgraphNode) as ints

    def set_in(self, field: int, ptr: int) -> None:
        """Field ``field``'s operand address (takes effect at :meth:`update` / the next launch)."""
        self.a_bases[field] = ptr  # device addresses are below 2**63

    def set_delta(self, field: int, delta: int) -> None:
        """Field ``field``'s output offset from its engine-owned result."""
        self.a_bases[self._maxf + field] = delta

    def set_vec(self, vec: int) -> None:
        if vec != self.vec:
            self.vec = vec
            self.params.func = self.funcs[vec]

    def launch(self, stream: int) -> None:
        p = self.params
        rc = self.drv.cuLaunchKernel(
            p.func, p.gridDimX, 1, 1, p.blockDimX, 1, 1, p.sharedMemBytes, stream, self._argv_addr, None
        )
        if rc:
            raise CudaError(
                f"cuLaunchKernel (redist copy kernel, grid {p.gridDimX}) failed with CUresult {rc}"
                f"{_err_name(rc)}"
            )

    def update(self) -> None:
        """Push the current arguments/function into every graph node made from this kernel."""
        if not self.nodes:
            return
        fn = self.drv.cuGraphExecKernelNodeSetParams
        for ex, node in self.nodes:
            rc = fn(ex, node, self._pref)
            if rc:
                raise CudaError(f"cuGraphExecKernelNodeSetParams failed with CUresult {rc}{_err_name(rc)}")


def _capture_dependencies(stream_obj: Any) -> list[Any]:
    """The nodes the next captured operation will depend on (i.e. the last ones captured)."""
    from cuda.bindings import driver

    res = driver.cuStreamGetCaptureInfo(stream_obj)
    if res[0] != driver.CUresult.CUDA_SUCCESS:
        check(res, "cuStreamGetCaptureInfo")
    for item in res[1:]:
        if isinstance(item, (list, tuple)):
            return [n for n in item if n is not None and int(n) != 0]
    raise CudaError(f"cuStreamGetCaptureInfo returned no dependency list ({res!r})")


class Capture:
    """``with Capture(stream) as cap: ...; cap.mark()`` -> the graph and the nodes of each mark."""

    def __init__(self, stream: int) -> None:
        from cuda.bindings import driver

        self._stream = driver.CUstream(stream)
        self.graph: Any = None  # the captured CUgraph (cuda.bindings), once the block is left

    def __enter__(self) -> Capture:
        from cuda.bindings import driver

        check(
            driver.cuStreamBeginCapture(
                self._stream, driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            ),
            "cuStreamBeginCapture",
        )
        return self

    def mark(self) -> list[Any]:
        """Nodes captured by the last operation (the current capture dependencies)."""
        return _capture_dependencies(self._stream)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        from cuda.bindings import driver

        res = driver.cuStreamEndCapture(self._stream)
        if exc_type is not None:
            if res[0] == driver.CUresult.CUDA_SUCCESS and res[1] is not None:
                driver.cuGraphDestroy(res[1])
            return False
        self.graph = check(res, "cuStreamEndCapture")
        return False


class GraphExec:
    """An instantiated graph plus the graph it came from (node handles live in the latter)."""

    def __init__(self, graph: Any, upload_stream: int | None = None) -> None:
        from cuda.bindings import driver

        self.graph: Any = graph  # CUgraph (cuda.bindings); None once destroyed
        self.exec: Any = check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")  # CUgraphExec
        self.handle: int = int(self.exec)
        if upload_stream is not None:
            check(driver.cuGraphUpload(self.exec, driver.CUstream(upload_stream)), "cuGraphUpload")
        self.toggle_nodes: list[Any] = []  # CUgraphNode handles
        self.toggle_enabled: bool = True

    def count_nodes(self) -> dict[str, int]:
        from cuda.bindings import driver

        n = check(driver.cuGraphGetNodes(self.graph, 0), "cuGraphGetNodes")
        n = n[-1] if isinstance(n, tuple) else n
        nodes = check(driver.cuGraphGetNodes(self.graph, n), "cuGraphGetNodes")
        nodes = nodes[0] if isinstance(nodes, tuple) else nodes
        out: dict[str, int] = {}
        for nd in nodes:
            t = check(driver.cuGraphNodeGetType(nd), "cuGraphNodeGetType")
            key = getattr(t, "name", str(t)).replace("CU_GRAPH_NODE_TYPE_", "").lower()
            out[key] = out.get(key, 0) + 1
        return out

    def set_toggle(self, enabled: bool) -> None:
        """Enable/disable the entry-sync nodes (cuGraphNodeSetEnabled; future launches only)."""
        from cuda.bindings import driver

        for nd in self.toggle_nodes:
            check(driver.cuGraphNodeSetEnabled(self.exec, nd, 1 if enabled else 0), "cuGraphNodeSetEnabled")
        self.toggle_enabled = enabled

    def destroy(self) -> None:
        from cuda.bindings import driver

        ex, g = self.exec, self.graph
        self.exec = self.graph = None
        self.handle = 0
        if ex is not None:
            driver.cuGraphExecDestroy(ex)
        if g is not None:
            driver.cuGraphDestroy(g)
