# SPDX-License-Identifier: Apache-2.0
"""GPU ``out=`` in ordinary device memory (any allocator): what each rank's output is, the route
each field's writers take into it, and the mappings of peers' allocations (issue #44).

Peers store into a rank's output through their own mapping of it, each at its own address, so the
copy kernel takes one output slot per field and push destination (``kernels.MAXO``; slot ``f`` is
this rank's own output of field ``f``, ``f + nfields * (1 + j)`` its output on the j-th push destination). What a rank's output of a field is, as every rank learns
it (:class:`OutDesc`, exchanged when it changes):

* ``result``: the engine-owned result (offset 0 everywhere);
* ``symmetric``: on the NVSHMEM heap (any heap offset: peers add it to their peer pointer);
* ``private``: any other device memory of the rank's GPU (torch's caching allocator, cupy's pool,
  ``cudaMalloc``...). Its allocation (``cuMemGetAddressRange``) is exported once with CUDA IPC
  (``cuIpcGetMemHandle``) and opened by each rank that stores into it (``cuIpcOpenMemHandle``),
  cached by (rank, ``CU_POINTER_ATTRIBUTE_BUFFER_ID``): an allocation freed and another made at the
  same address has another buffer id, so it is never written through the old mapping.

Routes (:func:`plan_routes`, the same answer on every rank from the same descriptors):

* ``direct``: writers store straight into the output (result, symmetric, or a private output that
  every rank pushing into it has mapped; one pass, like the engine-owned result);
* ``landing``: a private output that cannot be mapped (memory CUDA IPC cannot export:
  ``cudaMallocAsync`` pools, torch's ``expandable_segments``; or a writer failed to open it):
  every writer stores into the engine-owned result (symmetric staging), then the owner copies it
  into the output (``cuMemcpyDtoDAsync`` on the stream, inside the graph step: one more pass).
  Such an output must be laid out like the result.

Nothing here needs a GPU: the driver calls go through :class:`DriverMemory`, which the unit tests'
simulated runtime replaces (``Runtime.memory_api``).
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import CudaError
from . import kernels

__all__ = ["DriverMemory", "OutDesc", "PeerMappings", "RESULT", "memory_api", "plan_routes", "slot_of"]

#: mappings of peers' allocations kept per executable (least recently used ones beyond are closed)
MAPPINGS = 32


@dataclass(frozen=True)
class OutDesc:
    """One rank's output of one field, as every rank learns it."""

    kind: str  # "result", "symmetric" or "private"
    offset: int = 0  # symmetric: heap offset; private: offset in its allocation
    buffer_id: int = 0  # private: CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation
    handle: bytes | None = None  # private: CUDA IPC handle of the allocation; None: cannot be exported
    why: str = ""  # private without a handle: why
    planned: bool = True  # laid out like the engine-owned result (the landing route needs it)
    exportable: bool = False  # private: CUDA IPC can export its allocation (the handle is made when needed)

    def label(self) -> str:
        if self.kind == "private":
            return f"private (buffer {self.buffer_id}{'' if self.exportable else ', not exportable: ' + self.why})"
        return self.kind if self.kind == "result" else f"symmetric at heap offset {self.offset}"


RESULT = OutDesc("result")


def slot_of(field: int, dst: int, me: int, push_to: Sequence[int], nfields: int) -> int:
    """The Bases output slot of ``field``'s output on rank ``dst`` in the kernels of rank ``me``."""
    if dst == me or not slots_fit(nfields, len(push_to)):
        return field
    return field + nfields * (1 + list(push_to).index(dst))


def slots_fit(nfields: int, npush: int) -> bool:
    """Whether every (field, push destination) has its own output slot (else one per field)."""
    return nfields * (1 + npush) <= kernels.MAXO


def plan_routes(descs: Sequence[Sequence[OutDesc]], push_from: Sequence[Sequence[int]],
                failed: Sequence[Sequence[int]], shared: bool) -> list[list[tuple[str, str]]]:
    """Per rank, per field: ``(route, why)`` with route "direct" or "landing".

    ``descs[r][f]``: rank r's output of field f; ``push_from[r]``: the ranks that store into rank r;
    ``failed[s]``: the ranks whose private output rank s could not map; ``shared``: some rank has
    one output slot per field only (too many fields x push destinations), so every writer of a field
    uses one offset: its outputs go direct only when every rank's is at the same symmetric offset.
    """
    nranks, nfields = len(descs), len(descs[0]) if descs else 0
    out = [[("direct", "")] * nfields for _ in range(nranks)]
    for f in range(nfields):
        if shared:
            deltas = {("result", 0) if d[f].kind == "result" else (d[f].kind, d[f].offset, d[f].buffer_id)
                      for d in descs}
            if len(deltas) > 1 or any(d[f].kind == "private" for d in descs):
                for r in range(nranks):
                    if descs[r][f].kind != "result":
                        out[r][f] = ("landing", "more fields x push destinations than the kernel's output slots")
            continue
        for r in range(nranks):
            d = descs[r][f]
            if d.kind != "private" or not push_from[r]:
                continue
            if not d.handle:
                out[r][f] = ("landing", d.why or "not exported")
            else:
                bad = [s for s in push_from[r] if r in failed[s]]
                if bad:
                    out[r][f] = ("landing", f"rank(s) {bad} could not map it")
    return out


class DriverMemory:
    """The driver calls on user allocations (cuda.bindings; the per-call buffer id through ctypes)."""

    def __init__(self) -> None:
        from cuda.bindings import driver

        self._driver = driver
        self._attr_id = int(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_BUFFER_ID)
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64)
        res = driver.cuGetProcAddress(b"cuPointerGetAttribute", 12000, 0)
        self._get = proto(int(res[1])) if res[0] == driver.CUresult.CUDA_SUCCESS and int(res[1]) else \
            proto(("cuPointerGetAttribute", ctypes.CDLL("libcuda.so.1")))
        self._id = ctypes.c_uint64(0)
        self._id_ref = ctypes.byref(self._id)

    def buffer_id(self, ptr: int) -> int:
        """CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation holding ``ptr`` (0: not device memory)."""
        self._id.value = 0
        if self._get(self._id_ref, self._attr_id, ptr):
            return 0
        return self._id.value

    def allocation(self, ptr: int) -> tuple[int, int, bool, str]:
        """(base, size, exportable, why not) of the allocation holding device address ``ptr``."""
        drv = self._driver
        attr = drv.CUpointer_attribute
        err, base, size = drv.cuMemGetAddressRange(ptr)
        if err != drv.CUresult.CUDA_SUCCESS:
            return 0, 0, False, f"cuMemGetAddressRange failed ({getattr(err, 'name', err)})"
        err, legacy = drv.cuPointerGetAttribute(attr.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr)
        if err != drv.CUresult.CUDA_SUCCESS or not legacy:
            return int(base), int(size), False, ("the allocation is not CUDA-IPC capable (a cudaMallocAsync pool, "
                                                 "cuMem/VMM memory such as torch's expandable_segments)")
        return int(base), int(size), True, ""

    def export(self, base: int) -> bytes:
        drv = self._driver
        err, handle = drv.cuIpcGetMemHandle(base)
        if err != drv.CUresult.CUDA_SUCCESS:
            raise CudaError(f"cuIpcGetMemHandle failed: {getattr(err, 'name', err)}")
        return bytes(handle.reserved)

    def open(self, handle: bytes) -> int:
        drv = self._driver
        h = drv.CUipcMemHandle()
        h.reserved = handle
        flag = drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        err, ptr = drv.cuIpcOpenMemHandle(h, int(flag))
        if err != drv.CUresult.CUDA_SUCCESS:
            raise CudaError(f"cuIpcOpenMemHandle failed: {getattr(err, 'name', err)}")
        return int(ptr)

    def close(self, ptr: int) -> None:
        self._driver.cuIpcCloseMemHandle(ptr)


def memory_api(rt: Any) -> Any:
    """The runtime's :class:`DriverMemory` (made on first use; a simulated runtime brings its own)."""
    api = getattr(rt, "memory_api", None)
    if api is None:
        api = DriverMemory()
        rt.memory_api = api
    return api


class PeerMappings:
    """This rank's mappings of peers' private outputs: (rank, buffer id) -> mapped base, least
    recently used ones closed beyond :data:`MAPPINGS` (never those in use)."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self._open: OrderedDict[tuple[int, int], int] = OrderedDict()
        self.opened = 0  # cuIpcOpenMemHandle calls made (what the first use of an allocation costs)

    def __len__(self) -> int:
        return len(self._open)

    def address(self, rank: int, desc: OutDesc) -> int:
        """Where rank ``rank``'s private output ``desc`` is mapped here (opened on first sight)."""
        key = (rank, desc.buffer_id)
        base = self._open.get(key)
        if base is None:
            base = self.api.open(desc.handle)
            self._open[key] = base
            self.opened += 1
        else:
            self._open.move_to_end(key)
        return base + desc.offset

    def trim(self, keep: set[tuple[int, int]]) -> None:
        """Close least recently used mappings beyond :data:`MAPPINGS`, except ``keep``."""
        for key in list(self._open):
            if len(self._open) <= MAPPINGS:
                break
            if key not in keep:
                self.api.close(self._open.pop(key))

    def close(self) -> None:
        """Close every mapping (free(), finalize)."""
        while self._open:
            _, base = self._open.popitem()
            try:
                self.api.close(base)
            except Exception:  # noqa: BLE001, S110 -- the context may be gone at interpreter exit
                pass
