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
from dataclasses import dataclass, replace
from typing import Any

from ..errors import CudaError
from . import kernels

__all__ = ["DriverMemory", "OutDesc", "Outputs", "PeerMappings", "RESULT", "memory_api", "plan_routes", "slot_of",
           "slots_fit"]

#: mappings of peers' allocations kept per executable (least recently used ones beyond are released)
MAPPINGS = 32
IPC_HANDLE_BYTES = 64  # CUipcMemHandle


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
        if self.kind == "private" and not self.buffer_id:
            return "private (only this rank stores into it)"
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
        self._attr_dev = int(driver.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
        self._dev = ctypes.c_int(-1)
        self._dev_ref = ctypes.byref(self._dev)
        proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64)
        res = driver.cuGetProcAddress(b"cuPointerGetAttribute", 12000, 0)
        self._get = proto(int(res[1])) if res[0] == driver.CUresult.CUDA_SUCCESS and int(res[1]) else \
            proto(("cuPointerGetAttribute", ctypes.CDLL("libcuda.so.1")))
        self.ipc_open: dict[tuple[int, int], list[int]] = {}  # (rank, buffer id) -> [mapped base, users] (PeerMappings)
        self._id = ctypes.c_uint64(0)
        self._id_ref = ctypes.byref(self._id)

    def buffer_id(self, ptr: int) -> int:
        """CU_POINTER_ATTRIBUTE_BUFFER_ID of the allocation holding ``ptr`` (0: not device memory)."""
        self._id.value = 0
        if self._get(self._id_ref, self._attr_id, ptr):
            return 0
        return self._id.value

    def device_of(self, ptr: int) -> int:
        """The ordinal of the device whose memory ``ptr`` is (-1: not device memory)."""
        self._dev.value = -1
        if self._get(self._dev_ref, self._attr_dev, ptr):
            return -1
        return self._dev.value

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
        return ctypes.string_at(handle.getPtr(), IPC_HANDLE_BYTES)  # the 64 bytes as they are (signed chars)

    def open(self, handle: bytes) -> int:
        drv = self._driver
        h = drv.CUipcMemHandle()
        ctypes.memmove(h.getPtr(), handle, IPC_HANDLE_BYTES)
        flag = drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        err, ptr = drv.cuIpcOpenMemHandle(h, int(flag))
        if err != drv.CUresult.CUDA_SUCCESS:
            raise CudaError(f"cuIpcOpenMemHandle failed: {getattr(err, 'name', err)}")
        return int(ptr)

    def close(self, ptr: int) -> None:
        self._driver.cuIpcCloseMemHandle(ptr)

    def close_all(self) -> None:
        """Close every mapping still open (finalize: those of copies recorded into the user's graphs)."""
        for base, _ in list(self.ipc_open.values()):
            self.close(base)
        self.ipc_open.clear()


def memory_api(rt: Any) -> Any:
    """The runtime's :class:`DriverMemory` (made on first use; a simulated runtime brings its own)."""
    api = getattr(rt, "memory_api", None)
    if api is None:
        api = DriverMemory()
        rt.memory_api = api
    return api


class PeerMappings:
    """One executable's mappings of peers' private outputs: (rank, buffer id) -> mapped base, least
    recently used ones released beyond :data:`MAPPINGS` (never those in use). The process opens a
    handle once (CUDA maps an allocation once per process): the runtime's :class:`DriverMemory`
    holds every open one with the number of executables using it, and closes it at the last release."""

    def __init__(self, api: Any) -> None:
        self.api = api
        if getattr(api, "ipc_open", None) is None:
            api.ipc_open = {}  # (rank, buffer id) -> [mapped base, users], shared by the runtime's executables
        self._shared: dict[tuple[int, int], list[int]] = api.ipc_open
        self._open: OrderedDict[tuple[int, int], int] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def address(self, rank: int, desc: OutDesc) -> int:
        """Where rank ``rank``'s private output ``desc`` is mapped here (opened on first sight)."""
        key = (rank, desc.buffer_id)
        base = self._open.get(key)
        if base is None:
            entry = self._shared.get(key)
            if entry is None:
                entry = self._shared[key] = [self.api.open(desc.handle), 0]
            entry[1] += 1
            base = self._open[key] = entry[0]
        else:
            self._open.move_to_end(key)
        return base + desc.offset

    def _release(self, key: tuple[int, int]) -> None:
        self._open.pop(key)
        entry = self._shared.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] <= 0:
            del self._shared[key]
            try:
                self.api.close(entry[0])
            except Exception:  # noqa: BLE001, S110 -- the context may be gone at interpreter exit
                pass

    def trim(self, keep: set[tuple[int, int]]) -> None:
        """Release least recently used mappings beyond :data:`MAPPINGS`, except ``keep``."""
        for key in list(self._open):
            if len(self._open) <= MAPPINGS:
                break
            if key not in keep:
                self._release(key)

    def close(self) -> None:
        """Release every mapping (free())."""
        for key in list(self._open):
            self._release(key)


def _key(descs: Sequence[OutDesc]) -> tuple:
    """What identifies a rank's outputs in the registry (a description without its handle)."""
    return tuple((d.kind, d.offset, d.buffer_id, d.planned, d.exportable) for d in descs)


class Outputs:
    """One executable's outputs as routed (every field; its layout variants share them).

    Every rank keeps the same *registry*: per rank, the outputs it has used (descriptions with their
    IPC handles, and which writers could not map them), filled from the allgather of a call where
    some rank's outputs were new. A call then passes only each rank's registry index, in the per-call
    Allreduce (``CallCheck(per_rank=True)``): a rank switching between outputs it used before (double
    buffering) costs no gather, and every rank routes the selection locally (:meth:`select`). The
    executable applies the offsets it gives."""

    REGISTRY = 32  # entries per rank; beyond, the registry starts again (the same call on every rank)
    EXPORTED = 64  # allocations whose description (base, IPC handle) is kept; beyond, all but those bound now go

    def __init__(self, rt: Any, nfields: int, push_to: Sequence[int], push_from: Sequence[int],
                 results: Sequence[Any], peer_out: dict[int, int], field_offsets: Sequence[int]) -> None:
        self.rt: Any = rt
        self.nfields: int = nfields
        self.push_to: tuple[int, ...] = tuple(push_to)
        self.push_from: tuple[int, ...] = tuple(push_from)
        self.results: Sequence[Any] = results
        self.peer_out: dict[int, int] = peer_out
        self.field_offsets: tuple[int, ...] = tuple(field_offsets)
        self.shared: bool = not slots_fit(nfields, len(push_to))  # one output slot per field (too many destinations)
        self.descs: list[OutDesc] = [RESULT] * nfields  # this rank's, as bound
        self.agreed: list[OutDesc] = [RESULT] * nfields  # as last routed
        self.bufs: list[Any] = [None] * nfields  # the bound outputs (None: the result)
        self.land: list[Any] = [None] * nfields  # the bound outputs that take the landing route
        self.landing_anywhere: bool = False  # some rank's output lands (writers then always wait for credits)
        self.watch: list[int] = []  # fields whose output peers store into: buffer id checked per call
        self.text: str = ""  # the routes, for describe() and the logger
        nranks = rt.nranks
        self._reg: list[dict[tuple, int]] = [{_key(self.descs): 0} for _ in range(nranks)]  # key -> index
        self._reg_descs: list[list[list[OutDesc]]] = [[list(self.descs)] for _ in range(nranks)]
        self._reg_failed: list[list[frozenset[int]]] = [[frozenset()] for _ in range(nranks)]  # writers that failed
        self._push_from: list | None = None  # every rank's writers (from the first gather)
        self._shared_any = self.shared
        self.current: list[int] = [0] * nranks  # every rank's registry index, as routed
        self._my_index: int | None = 0  # this rank's outputs' index (None: not registered yet)
        self._mappings: PeerMappings | None = None
        self._exported: dict[int, list] = {}  # buffer id -> [base, IPC handle (b"": not yet; None: never), why not]
        self._where: tuple[list, str] = ([], "")
        self._copies: list | None | bool = None  # landing()'s answer (False: to be made again)
        self._mine: list[str] = ["direct"] * nfields  # this rank's routes, as last routed

    @property
    def changed(self) -> bool:
        """Whether this rank's outputs are not in the registry (the call must gather)."""
        return self._my_index is None

    @property
    def index(self) -> int:
        """This rank's value in the per-call Allreduce: its registry index + 1 (0: not registered)."""
        return 0 if self._my_index is None else self._my_index + 1

    def _look_up(self) -> None:
        self._my_index = self._reg[self.rt.rank].get(_key(self.descs))

    @property
    def where(self) -> str:
        """This rank's outputs in words (for the agreement's error message; remade when they change)."""
        if self._where[0] != self.descs:
            self._where = (list(self.descs), "out= " + ", ".join(d.label() for d in self.descs))
        return self._where[1]

    def bind(self, field: int, buf: Any, planned: bool) -> bool:
        """Bind field ``field``'s output (None: the result); whether it lands (its own offset is 0)."""
        self.bufs[field] = buf
        self.descs[field] = self.describe(buf, planned)
        self._look_up()
        # as routed when it is what was routed (else the next execute decides)
        landing = buf is not None and self._mine[field] == "landing" and self.descs[field] == self.agreed[field]
        self.land[field] = buf if landing else None
        self._copies = False
        return landing

    def describe(self, buf: Any, planned: bool) -> OutDesc:
        """What this rank's output ``buf`` is, as the other ranks must know it."""
        rt = self.rt
        if buf is None:
            return RESULT
        if rt.sym_lookup(buf.ptr) is not None or rt.is_symmetric(buf.ptr):
            return OutDesc("symmetric", rt.heap_offset(buf.ptr), planned=planned)
        if not self.push_from and not self.shared:  # nobody else stores into it: one description
            return OutDesc("private", planned=planned, handle=b"")  # whatever its address
        api = memory_api(rt)
        bid = api.buffer_id(buf.ptr)
        known = self._exported.get(bid) if bid else None
        if known is None:  # pointer queries only: allowed while a stream captures (the export is not)
            base, _, ok, why = api.allocation(buf.ptr)
            known = [base, b"" if ok else None, why]
            if len(self._exported) >= self.EXPORTED:  # all but the allocations bound now go (payload() reads theirs)
                bound = {d.buffer_id for d in self.descs}
                self._exported = {b: v for b, v in self._exported.items() if b in bound}
            self._exported[bid] = known
        base, handle, why = known
        return OutDesc("private", buf.ptr - base, bid, None, why, planned, handle is not None)

    def problem(self, buf: Any, planned_strides: tuple[int, ...]) -> str | None:
        """Why device memory off the symmetric heap cannot be this rank's output (None: it can)."""
        api = memory_api(self.rt)
        if not api.buffer_id(buf.ptr):
            return ("out= is not device memory of this process's CUDA context (a host array, or memory of "
                    "another process?)")
        dev = api.device_of(buf.ptr)
        if dev != self.rt.device_id:
            return f"out= is memory of CUDA device {dev}, expected device {self.rt.device_id} (this rank's GPU)"
        if not self.push_from and not self.shared:  # only this rank stores into it
            return None
        lo, hi = buf.address_range()
        base, size, ok, why = api.allocation(buf.ptr)
        if buf.size and (lo < base or hi > base + size):
            return f"out= (bytes [{lo - base}, {hi - base}) of its allocation) reaches outside its allocation ({size} bytes)"
        if not ok and not buf.is_dense(planned_strides):  # the landing route copies the result as it is laid out
            return (f"out= has strides {buf.strides} in memory other ranks cannot map ({why}): such an out= must be "
                    f"laid out like the result (strides {planned_strides}); peers store into the engine-owned result "
                    "and this rank copies it into out=")
        return None

    def recheck(self) -> tuple[str, str] | None:
        """Whether each output peers store into is still the allocation routed (one buffer-id query
        per such field): freed and reallocated at its address, it is described anew (the call routes
        it again); freed for good, the call's problem."""
        api = memory_api(self.rt)
        for f in self.watch:
            buf, desc = self.bufs[f], self.descs[f]
            if buf is None:
                continue
            bid = api.buffer_id(buf.ptr)
            if bid == desc.buffer_id:
                continue
            if not bid:
                return ("InvalidValueError", f"out= (field {f}) at 0x{buf.ptr:x} is no longer device memory: it was "
                        "freed while bound (pass a live array, or out=None)")
            self.descs[f] = self.describe(buf, desc.planned)
            self._look_up()
        return None

    def payload(self, capture: bool) -> tuple[list[OutDesc], bool, tuple[int, ...]]:
        """What this rank tells the others when some rank's outputs changed: its descriptions with
        their allocations' IPC handles (exported once per allocation, never inside a capture, which
        :meth:`route` refuses anyway), whether it has one slot per field, who stores into it."""
        descs = []
        for desc in self.descs:
            if desc.kind == "private" and desc.exportable and desc.buffer_id:
                known = self._exported[desc.buffer_id]
                if not known[1] and not capture:
                    known[1] = memory_api(self.rt).export(known[0])
                desc = replace(desc, handle=known[1] or None)  # None inside a capture: route() refuses
            descs.append(desc)
        return descs, self.shared, self.push_from

    def register(self, every: Sequence[tuple[Any, ...]], capture: bool) -> tuple[list[int], dict[int, int]]:
        """Collective (every rank, every rank's :meth:`payload`): register the outputs some rank has
        not used before -- this rank maps the private ones it stores into, the ranks agree on those
        some writer could not map -- then route the selection (:meth:`select`)."""
        from ..errors import InvalidStateError

        rt, me, nranks = self.rt, self.rt.rank, len(every)
        descs = [list(d) for d, _, _ in every]
        self._push_from = [p for _, _, p in every]
        self._shared_any = any(sh for _, sh, _ in every)
        keys = [_key(d) for d in descs]
        new = [r for r in range(nranks) if keys[r] not in self._reg[r]]
        if new:
            if capture and self._needs_mapping([descs[r] if r in new else [] for r in range(nranks)], self._push_from):
                raise InvalidStateError(
                    "execute(out=...) inside a CUDA graph capture with an out= in memory no execute() has used yet: "
                    "mapping it on the ranks that store into it is collective; call execute(out=...) with it once "
                    "outside the capture first")
            if any(len(reg) + 1 > self.REGISTRY for reg in self._reg):  # start again (the same on every rank)
                self._reg = [{} for _ in range(nranks)]
                self._reg_descs = [[] for _ in range(nranks)]
                self._reg_failed = [[] for _ in range(nranks)]
                new = list(range(nranks))
                if self._mappings is not None:
                    self._mappings.trim({(d, x.buffer_id) for d in self.push_to for x in descs[d]})
            failed: list[int] = []
            for d in new if not self._shared_any else ():
                if d not in self.push_to:
                    continue
                for desc in descs[d]:
                    if desc.kind == "private" and desc.handle:
                        if self._mappings is None:
                            self._mappings = PeerMappings(memory_api(rt))
                        try:
                            self._mappings.address(d, desc)
                        except CudaError:
                            failed.append(d)
            every_failed = rt.comm.allgather(failed) if nranks > 1 else [failed]
            for r in new:
                self._reg[r][keys[r]] = len(self._reg_descs[r])
                self._reg_descs[r].append(descs[r])
                self._reg_failed[r].append(frozenset(s for s in range(nranks) if r in every_failed[s]))
        self._my_index = self._reg[me][keys[me]]
        return self.select([self._reg[r][keys[r]] for r in range(nranks)])

    def select(self, indices: Sequence[int]) -> tuple[list[int], dict[int, int]]:
        """Local: route every rank's registered outputs ``indices`` (the same answer on every rank);
        this rank's own output offsets (per field) and the push destinations' (slot -> offset)."""
        from ..errors import InvalidValueError

        rt, nf, me = self.rt, self.nfields, self.rt.rank
        nranks = len(indices)
        descs = [self._reg_descs[r][i] for r, i in enumerate(indices)]
        failed = [[r for r, i in enumerate(indices) if s in self._reg_failed[r][i]] for s in range(nranks)]
        push_from = self._push_from or [()] * nranks
        routes = plan_routes(descs, push_from, failed, self._shared_any)
        bad = [(r, f) for r in range(nranks) for f in range(nf)
               if routes[r][f][0] == "landing" and not descs[r][f].planned]
        if bad:
            r, f = bad[0]
            raise InvalidValueError(
                f"rank {r}: out= (field {f}) cannot be mapped by the ranks storing into it ({routes[r][f][1]}) and "
                "has strides other than the result's: the landing route copies the result as it is laid out; pass "
                "an out= laid out like the result there")
        res = self.results
        peer: dict[int, int] = {}
        for f in range(nf):
            for d in () if self._shared_any else self.push_to:
                desc, route = descs[d][f], routes[d][f][0]
                if desc.kind == "result" or route == "landing":
                    delta = 0
                elif desc.kind == "symmetric":
                    delta = desc.offset - rt.heap_offset(res[f].ptr)
                else:
                    delta = self._mappings.address(d, desc) - (self.peer_out[d] + self.field_offsets[f])
                peer[slot_of(f, d, me, self.push_to, nf)] = delta
        self._mine = [route for route, _ in routes[me]]
        own = self._own()
        self.watch = [f for f in range(nf) if descs[me][f].kind == "private" and descs[me][f].buffer_id]
        self.current, self.agreed = list(indices), list(self.descs)
        self.landing_anywhere = any(route == "landing" for row in routes for route, _ in row)
        self.text = "; ".join(
            f"rank {r} field {f}: {descs[r][f].label()} -> {route}{' (' + why + ')' if why else ''}"
            for r in range(nranks) for f, (route, why) in enumerate(routes[r]) if descs[r][f].kind != "result")
        return own, peer

    def _own(self) -> list[int]:
        """This rank's own output offsets as routed (0: the result, or landing), the landed outputs noted."""
        own = []
        for f, buf in enumerate(self.bufs):
            landing = self._mine[f] == "landing" and buf is not None
            self.land[f] = buf if landing else None
            own.append(0 if buf is None or landing else buf.ptr - self.results[f].ptr)
        self._copies = False
        return own

    def _needs_mapping(self, descs: list[list[OutDesc]], push_from: list) -> bool:
        """Collective (inside a capture): whether registering ``descs`` (per rank; [] where nothing is
        new) needs an export or a mapping no execute() made yet, which a capture cannot hold."""
        unexported = any(d.kind == "private" and d.exportable and not d.handle and push_from[r]
                         for r, row in enumerate(descs) for d in row)
        opened = self._mappings._open if self._mappings is not None else {}
        mine = any(desc.kind == "private" and desc.handle and (d, desc.buffer_id) not in opened
                   for d in self.push_to for desc in descs[d])
        return unexported or (any(self.rt.comm.allgather(mine)) if len(descs) > 1 else mine)

    def landing(self) -> list[tuple[int, int, int]] | None:
        """The landing route's copies (dst, src, bytes): each landed field's result into its output
        (None: none; made again only when an output or a route changed)."""
        if self._copies is False:
            out = []
            for f, buf in enumerate(self.land):
                if buf is not None:
                    lo, hi = self.results[f].address_range()
                    if hi > lo:
                        out.append((buf.address_range()[0], lo, hi - lo))
            self._copies = out or None
        return self._copies

    def close(self) -> None:
        """Close every mapping (free())."""
        if self._mappings is not None:
            self._mappings.close()
