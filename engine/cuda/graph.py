# SPDX-License-Identifier: Apache-2.0
"""CUDA graphs: stream capture, instantiation, our kernel nodes, the cheap rebind, and the
user's own capture.

Three layers:

* :class:`Driver` -- every driver entry point the backend uses on graphs and streams, called
  through ctypes function pointers obtained once from ``cuGetProcAddress`` (the hot ones:
  ``cuGraphLaunch``, ``cuGraphExecKernelNodeSetParams``, ``cuLaunchKernel``,
  ``cuStreamIsCapturing``, ``cuGraphExecChildGraphNodeSetParams``; a call costs well under a
  microsecond of Python), plus a few methods with Python signatures for the plan-time and
  capture-time calls. Everything graph-related goes through it, so the tests' simulated driver
  can stand in for all of it.
* :class:`KernelLaunch` -- one kernel of a plan: its ``void*[]`` argument block, its
  ``CUDA_KERNEL_NODE_PARAMS`` (v2 layout), the CUfunction per vector width, and the graph nodes
  it became. ``launch(stream)`` enqueues it (eager or while capturing); ``update()`` rewrites
  its nodes in every instantiated graph with ``cuGraphExecKernelNodeSetParams`` (future
  launches only, so no synchronisation is needed).
* :class:`Capture` / :class:`GraphExec` -- our own capture (plan time) and its instantiation;
  :func:`join_capture` adds a graph as a child node of a capture the *user* has under way.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Literal

from ..errors import CudaError

__all__ = [
    "CAPTURE_ACTIVE",
    "CAPTURE_IMPLICIT",
    "CAPTURE_INVALIDATED",
    "CAPTURE_NONE",
    "Capture",
    "Driver",
    "GraphExec",
    "KernelLaunch",
    "KernelNodeParams",
    "check",
    "driver_api",
    "join_capture",
]

#: capture status of a stream (``cuStreamIsCapturing``), plus the legacy stream's "a blocking
#: stream is capturing" (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT: work there would join that capture)
CAPTURE_NONE, CAPTURE_ACTIVE, CAPTURE_INVALIDATED, CAPTURE_IMPLICIT = 0, 1, 2, 3
_ERROR_CAPTURE_IMPLICIT = 906  # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
_ERROR_LOSSY_QUERY = 402  # CUDA_ERROR_LOSSY_QUERY
_SET_CAPTURE_DEPENDENCIES = 1  # CU_STREAM_SET_CAPTURE_DEPENDENCIES
_CAPTURE_MODES = {"global": 0, "thread_local": 1, "relaxed": 2}


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
    """``CUDA_KERNEL_NODE_PARAMS_v2`` (the layout the kernel-node calls take since CUDA 12)."""

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
_PVP = ctypes.POINTER(ctypes.c_void_p)

# name -> (ctypes prototype, cuGetProcAddress version, legacy-library fallback symbol)
_SIGNATURES = {
    "cuGraphLaunch": (ctypes.CFUNCTYPE(_I, _VP, _VP), 12000, "cuGraphLaunch"),
    "cuGraphExecKernelNodeSetParams": (
        ctypes.CFUNCTYPE(_I, _VP, _VP, ctypes.POINTER(KernelNodeParams)),
        12000,
        "cuGraphExecKernelNodeSetParams_v2",
    ),
    "cuGraphKernelNodeSetParams": (
        ctypes.CFUNCTYPE(_I, _VP, ctypes.POINTER(KernelNodeParams)), 12000, "cuGraphKernelNodeSetParams_v2"),
    "cuGraphExecChildGraphNodeSetParams": (
        ctypes.CFUNCTYPE(_I, _VP, _VP, _VP), 12000, "cuGraphExecChildGraphNodeSetParams"),
    "cuGraphKernelNodeGetParams": (
        ctypes.CFUNCTYPE(_I, _VP, ctypes.POINTER(KernelNodeParams)), 12000, "cuGraphKernelNodeGetParams_v2"),
    "cuGraphChildGraphNodeGetGraph": (ctypes.CFUNCTYPE(_I, _VP, _PVP), 12000, "cuGraphChildGraphNodeGetGraph"),
    "cuLaunchKernel": (
        ctypes.CFUNCTYPE(_I, _VP, _U, _U, _U, _U, _U, _U, _U, _VP, _VP, _VP),
        12000,
        "cuLaunchKernel",
    ),
    "cuStreamSynchronize": (ctypes.CFUNCTYPE(_I, _VP), 12000, "cuStreamSynchronize"),
    "cuStreamIsCapturing": (ctypes.CFUNCTYPE(_I, _VP, ctypes.POINTER(_I)), 12000, "cuStreamIsCapturing"),
    # the CUDA 12.0 form (no edge data): a capture whose dependencies carry edge data answers LOSSY_QUERY
    "cuStreamGetCaptureInfo": (
        ctypes.CFUNCTYPE(_I, _VP, ctypes.POINTER(_I), ctypes.POINTER(_U64), _PVP, ctypes.POINTER(_PVP),
                         ctypes.POINTER(_SZ)),
        12000,
        "cuStreamGetCaptureInfo_v2",
    ),
    "cuGraphAddChildGraphNode": (
        ctypes.CFUNCTYPE(_I, _PVP, _VP, _PVP, _SZ, _VP), 12000, "cuGraphAddChildGraphNode"),
    "cuStreamUpdateCaptureDependencies": (
        ctypes.CFUNCTYPE(_I, _VP, _PVP, _SZ, _U), 12000, "cuStreamUpdateCaptureDependencies"),
    "cuMemcpyHtoDAsync": (ctypes.CFUNCTYPE(_I, _U64, _VP, _SZ, _VP), 12000, "cuMemcpyHtoDAsync_v2"),
    "cuMemcpyDtoHAsync": (ctypes.CFUNCTYPE(_I, _VP, _U64, _SZ, _VP), 12000, "cuMemcpyDtoHAsync_v2"),
    "cuMemcpyDtoDAsync": (ctypes.CFUNCTYPE(_I, _U64, _U64, _SZ, _VP), 12000, "cuMemcpyDtoDAsync_v2"),
}


class Driver:
    """ctypes function pointers to the driver calls on graphs and streams (see the module docstring)."""

    # one attribute per entry of _SIGNATURES (set in __init__); each returns a CUresult (0: success)
    cuGraphLaunch: Callable[..., int]
    cuGraphExecKernelNodeSetParams: Callable[..., int]
    cuGraphKernelNodeSetParams: Callable[..., int]
    cuGraphExecChildGraphNodeSetParams: Callable[..., int]
    cuGraphKernelNodeGetParams: Callable[..., int]
    cuGraphChildGraphNodeGetGraph: Callable[..., int]
    cuLaunchKernel: Callable[..., int]
    cuStreamSynchronize: Callable[..., int]
    cuStreamIsCapturing: Callable[..., int]
    cuStreamGetCaptureInfo: Callable[..., int]
    cuGraphAddChildGraphNode: Callable[..., int]
    cuStreamUpdateCaptureDependencies: Callable[..., int]
    cuMemcpyHtoDAsync: Callable[..., int]
    cuMemcpyDtoHAsync: Callable[..., int]
    cuMemcpyDtoDAsync: Callable[..., int]

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._tls = threading.local()
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

    # -- the user's capture (capture time: a few calls, none of them "unsafe" during a capture) --

    def capture_status(self, stream: int) -> int:
        """CAPTURE_NONE / ACTIVE / INVALIDATED, or CAPTURE_IMPLICIT for the legacy stream while a
        blocking stream is capturing (work there would be an illegal implicit join). On every
        execute: the out-argument is kept per thread (a new one per call cost more than the call)."""
        try:
            st, ref = self._tls.status
        except AttributeError:
            st = _I(0)
            ref = ctypes.byref(st)
            self._tls.status = (st, ref)
        rc = self.cuStreamIsCapturing(stream, ref)
        if rc == _ERROR_CAPTURE_IMPLICIT:
            return CAPTURE_IMPLICIT
        if rc:
            raise CudaError(f"cuStreamIsCapturing failed with CUresult {rc}{_err_name(rc)}")
        return st.value

    def capture_info(self, stream: int) -> tuple[int, int, int, list[int]]:
        """(status, capture id, the graph being captured, its current dependency nodes)."""
        status, cid, graph, deps, n = _I(0), _U64(0), _VP(0), _PVP(), _SZ(0)
        rc = self.cuStreamGetCaptureInfo(stream, ctypes.byref(status), ctypes.byref(cid), ctypes.byref(graph),
                                         ctypes.byref(deps), ctypes.byref(n))
        if rc == _ERROR_LOSSY_QUERY:
            raise CudaError("the capture's current dependencies carry edge data (programmatic dependent launch "
                            "edges), which redist cannot join; end that edge before the exchange")
        if rc:
            raise CudaError(f"cuStreamGetCaptureInfo failed with CUresult {rc}{_err_name(rc)}")
        return status.value, cid.value, int(graph.value or 0), [int(deps[i] or 0) for i in range(n.value)]

    def add_child(self, graph: int, deps: list[int], child: int) -> int:
        """``child`` cloned into ``graph`` as one node after ``deps``; the new node."""
        node = _VP(0)
        arr = (_VP * max(len(deps), 1))(*deps)
        self.call("cuGraphAddChildGraphNode", ctypes.byref(node), graph, arr, len(deps), child)
        return int(node.value)

    def child_kernels(self, child_node: int, funcs: set[int]) -> dict[int, int]:
        """{table pointer: node} of the kernel nodes running one of ``funcs`` (redist's kernels:
        their second argument is the segment table) in the graph embedded in ``child_node``."""
        g = _VP(0)
        self.call("cuGraphChildGraphNodeGetGraph", child_node, ctypes.byref(g))
        out = {}
        for nd in self.graph_nodes(int(g.value or 0)):
            if self.node_type(nd) == "kernel":
                table = self.kernel_table(nd, funcs)
                if table is not None:
                    out[table] = nd
        return out

    def kernel_table(self, node: int, funcs: set[int]) -> int | None:
        """The segment table of kernel node ``node`` when it runs one of ``funcs`` (redist's kernels),
        else None."""
        p = KernelNodeParams()
        self.call("cuGraphKernelNodeGetParams", node, ctypes.byref(p))
        if p.func not in funcs or not p.kernelParams:
            return None
        arg = ctypes.c_void_p.from_address(p.kernelParams + ctypes.sizeof(ctypes.c_void_p)).value
        return ctypes.c_uint64.from_address(arg).value

    def set_capture_dependencies(self, stream: int, nodes: list[int]) -> None:
        """The next operation captured on ``stream`` depends on ``nodes`` (and nothing else)."""
        arr = (_VP * max(len(nodes), 1))(*nodes)
        self.call("cuStreamUpdateCaptureDependencies", stream, arr, len(nodes), _SET_CAPTURE_DEPENDENCIES)

    # -- plan time (our own capture on the runtime's stream) ----------------------------------

    def begin_capture(self, stream: int, mode: str = "thread_local") -> None:
        from cuda.bindings import driver

        check(driver.cuStreamBeginCapture(driver.CUstream(stream), driver.CUstreamCaptureMode(_CAPTURE_MODES[mode])),
              "cuStreamBeginCapture")

    def end_capture(self, stream: int, *, discard: bool = False) -> int:
        """End the capture on ``stream``; the captured graph (0 when discarded)."""
        from cuda.bindings import driver

        res = driver.cuStreamEndCapture(driver.CUstream(stream))
        if discard:
            if res[0] == driver.CUresult.CUDA_SUCCESS and res[1] is not None and int(res[1]):
                driver.cuGraphDestroy(res[1])
            return 0
        return int(check(res, "cuStreamEndCapture"))

    def instantiate(self, graph: int) -> int:
        from cuda.bindings import driver

        return int(check(driver.cuGraphInstantiate(driver.CUgraph(graph), 0), "cuGraphInstantiate"))

    def upload(self, graph_exec: int, stream: int) -> None:
        from cuda.bindings import driver

        check(driver.cuGraphUpload(driver.CUgraphExec(graph_exec), driver.CUstream(stream)), "cuGraphUpload")

    def destroy_exec(self, graph_exec: int) -> None:
        from cuda.bindings import driver

        driver.cuGraphExecDestroy(driver.CUgraphExec(graph_exec))

    def destroy_graph(self, graph: int) -> None:
        from cuda.bindings import driver

        driver.cuGraphDestroy(driver.CUgraph(graph))

    def graph_nodes(self, graph: int) -> list[int]:
        from cuda.bindings import driver

        g = driver.CUgraph(graph)
        n = check(driver.cuGraphGetNodes(g, 0), "cuGraphGetNodes")
        n = n[-1] if isinstance(n, tuple) else n
        nodes = check(driver.cuGraphGetNodes(g, n), "cuGraphGetNodes")
        nodes = nodes[0] if isinstance(nodes, tuple) else nodes
        return [int(nd) for nd in nodes]

    def node_type(self, node: int) -> str:
        """"kernel", "memcpy", "graph" (a child graph), ... (CUgraphNodeType without its prefix)."""
        from cuda.bindings import driver

        t = check(driver.cuGraphNodeGetType(driver.CUgraphNode(node)), "cuGraphNodeGetType")
        return getattr(t, "name", str(t)).replace("CU_GRAPH_NODE_TYPE_", "").lower()

    def set_node_enabled(self, graph_exec: int, node: int, enabled: bool) -> None:
        from cuda.bindings import driver

        check(driver.cuGraphNodeSetEnabled(driver.CUgraphExec(graph_exec), driver.CUgraphNode(node),
                                           1 if enabled else 0), "cuGraphNodeSetEnabled")


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


def join_capture(drv: Driver, stream: int, child: int) -> tuple[int, int, int]:
    """Add graph ``child`` to the capture under way on ``stream``, after what the stream has
    captured so far, and make the stream's next operation depend on it.

    Returns (the capture's graph, the capture id, the child node). Nothing is enqueued on the
    stream, so nothing can invalidate the user's capture; ``child`` is cloned (later changes
    to it reach the copy only through ``cuGraphExecChildGraphNodeSetParams``).
    """
    status, cid, graph, deps = drv.capture_info(stream)
    if status != CAPTURE_ACTIVE or not graph:
        raise CudaError(f"stream 0x{stream:x} is not capturing (status {status})")
    node = drv.add_child(graph, deps, child)
    drv.set_capture_dependencies(stream, [node])
    return graph, cid, node


class KernelLaunch:
    """One kernel of a plan, launchable eagerly or into a capture, and rebindable in graphs.

    Kernel signature (copy.cu): ``(const Bases bases, const Seg* table, int nsegs, ...protocol)``;
    ``Bases`` is ``u64 in_base[MAXF]; i64 out_delta[MAXO]`` by value (per field the operand's
    address; per output slot the output's offset from the result there), set with :meth:`set_in` /
    :meth:`set_delta`;
    the epoch kernels add ``(u64* ctl, const u64* proto, int nranks, int ncredit, int narrive,
    int nwait, int wait, int bump)`` (``protocol``: those eight values).
    """

    def __init__(self, drv: Driver, funcs: dict[int, int], grid: int, block: int, table_ptr: int, nsegs: int,
                 protocol: tuple[int, ...] = (), shared_bytes: int = 0) -> None:
        self.drv = drv
        self.funcs: dict[int, int] = dict(funcs)  # vector width -> CUfunction (int)
        self.vec: int = max(self.funcs)
        from .kernels import MAXF, MAXO

        self.a_bases: ctypes.Array[ctypes.c_int64] = (ctypes.c_int64 * (MAXF + MAXO))()  # in_base[MAXF] then out_delta[MAXO]
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
        self.template_node: int = 0  # the node in our own (non-instantiated) graph

    def set_in(self, field: int, ptr: int) -> None:
        """Field ``field``'s operand address (takes effect at :meth:`update` / the next launch)."""
        self.a_bases[field] = ptr  # device addresses are below 2**63

    def set_delta(self, slot: int, delta: int) -> None:
        """Output slot ``slot``'s offset from the engine-owned result (slot f: field f's own output)."""
        self.a_bases[self._maxf + slot] = delta

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

    def update_template(self) -> None:
        """Push the current arguments/function into our own graph's node (what a clone copies)."""
        if self.template_node:
            rc = self.drv.cuGraphKernelNodeSetParams(self.template_node, self._pref)
            if rc:
                raise CudaError(f"cuGraphKernelNodeSetParams failed with CUresult {rc}{_err_name(rc)}")


class Capture:
    """``with Capture(drv, stream) as cap: ...; cap.mark()`` -> the graph and the nodes of each mark."""

    def __init__(self, drv: Driver, stream: int) -> None:
        self._drv = drv
        self._stream = stream
        self.graph: int = 0  # the captured CUgraph, once the block is left

    def __enter__(self) -> Capture:
        self._drv.begin_capture(self._stream, "thread_local")
        return self

    def mark(self) -> list[int]:
        """Nodes captured by the last operation (the current capture dependencies)."""
        return self._drv.capture_info(self._stream)[3]

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Literal[False]:
        if exc_type is not None:
            self._drv.end_capture(self._stream, discard=True)
            return False
        self.graph = self._drv.end_capture(self._stream)
        return False


class GraphExec:
    """An instantiated graph plus the graph it came from (node handles live in the latter)."""

    def __init__(self, drv: Driver, graph: int, upload_stream: int | None = None) -> None:
        self._drv = drv
        self.graph: int = graph  # CUgraph; 0 once destroyed
        try:
            self.handle: int = drv.instantiate(graph)  # CUgraphExec
        except BaseException:
            drv.destroy_graph(graph)
            raise
        if upload_stream is not None:
            drv.upload(self.handle, upload_stream)
        self.toggle_nodes: list[int] = []
        self.toggle_enabled: bool = True

    def count_nodes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for nd in self._drv.graph_nodes(self.graph):
            key = self._drv.node_type(nd)
            out[key] = out.get(key, 0) + 1
        return out

    def set_toggle(self, enabled: bool) -> None:
        """Enable/disable the entry-sync nodes (cuGraphNodeSetEnabled; future launches only)."""
        for nd in self.toggle_nodes:
            self._drv.set_node_enabled(self.handle, nd, enabled)
        self.toggle_enabled = enabled

    def destroy(self) -> None:
        ex, g = self.handle, self.graph
        self.handle = self.graph = 0
        if ex:
            self._drv.destroy_exec(ex)
        if g:
            self._drv.destroy_graph(g)
