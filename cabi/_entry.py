# SPDX-License-Identifier: Apache-2.0
"""The Python half of libredist.so: one body per C entry point, behind one exception barrier.

libredist.so's start-up code (see ``_build.py``) calls :func:`install`, which attaches these
bodies to the ``extern "Python"`` functions the C shim (``redist_shim.c``) calls. Every body
goes through :func:`_barrier`: any exception becomes a ``redist_status_t`` (via
``redist.engine.errors.status_of``) and its message is stored as this thread's last error.

Handles are small integers (the C ``redist_t`` is that integer cast to a pointer), never
reused, so a freed handle is told apart from a garbage one. Operands arrive as raw addresses
and become :class:`redist.RawArray` objects; those are cached per address, so a time loop that
alternates between a few buffers builds none on the hot path.
"""

from __future__ import annotations

import math
import os
import sys
import traceback

from . import _options as _c_options

_ffi = None
_lib = None
# bound by install() (after mpi4py's start-up settings): no import statements on hot paths
redist = None
E = None  # redist.engine.errors
_collective = None  # redist.engine.collective
_RawArray = None
dense_strides = None  # redist.engine.geometry.dense_strides

#: bytes of message the C side keeps (REDIST_MSG_SIZE - 1)
_MSG_MAX = 4095
_MAX_NDIM = 64
_MAX_FIELDS = 1024  # a larger nfields is garbage (the arrays would be read past their end)
_CACHE_MAX = 16

_handles: dict = {}  # id -> _Handle
_symmetric: dict = {}  # address -> the uint8 array of redist_allocate_symmetric_memory (what keeps it mapped)
_no_replay: set = set()  # ids whose compiled replays could not be built (_offer_replay)
_next_id = 1
_owns_mpi = False  # redist initialized MPI (the application had not): redist_finalize finalizes it
_mpi_finalized = False


class _Handle:
    """One redist_t: the Redistribute object and how to turn addresses into RawArrays (per field)."""

    __slots__ = (
        "_ops",
        "_outs",
        "device_id",
        "in_shape",
        "in_strides",
        "itemsize",
        "memory",
        "nfields",
        "order",
        "out_shape",
        "out_strides",
        "r",
    )

    def __init__(self, r, ops, out_shape, order, dense_order, nfields=0):
        self.r = r
        self.nfields = nfields  # 0: one array (redist_create, redist_create_ex); else redist_create_fields
        self.in_shape = ops[0].shape
        self.in_strides = [op.strides for op in ops]  # per field
        self.itemsize = [op.itemsize for op in ops]
        self.out_shape = out_shape
        self.out_strides = dense_strides(out_shape, order)  # out= is dense in the result's order
        self.memory, self.device_id = ops[0].memory, ops[0].device_id
        self.order = dense_order  # of a dense operand given by address
        self._ops = [{op.ptr: op} for op in ops]  # per field: address -> RawArray
        self._outs = [{} for _ in ops]  # per field: address (and strides) -> RawArray

    def operand(self, ptr: int, field: int = 0):
        op = self._ops[field].get(ptr)
        if op is None:
            if not ptr and math.prod(self.in_shape):
                raise E.InvalidValueError(
                    f"{_at(self, field)}the operand is NULL but this rank's input box holds "
                    f"{math.prod(self.in_shape)} elements")
            cache = self._ops[field]
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            op = cache[ptr] = _raw(ptr, self.in_shape, self.in_strides[field], self.itemsize[field], self.memory,
                                   self.device_id, self.order)
        return op

    def operands(self, ptrs) -> tuple:
        """The RawArrays of a C array of ``nfields`` operand addresses (NULL: every one NULL)."""
        addrs = _ffi.unpack(ptrs, self.nfields) if ptrs else (0,) * self.nfields
        return tuple(self.operand(p, f) for f, p in enumerate(addrs))

    def out(self, ptr: int, strides: tuple[int, ...] | None = None, field: int = 0):
        """``out=`` for ``ptr`` (dense in the result's order, or element ``strides``): the RawArray,
        made once per address and strides (Redistribute checks a new one)."""
        key = ptr if strides is None else (ptr, strides)
        cache = self._outs[field]
        raw = cache.get(key)
        if raw is None:
            if len(cache) >= _CACHE_MAX:
                cache.clear()
            raw = cache[key] = _raw(ptr, self.out_shape, self.out_strides if strides is None else strides,
                                    self.itemsize[field], self.memory, self.device_id, self.order)
        return raw

    def field(self, field: int) -> int:
        """A 0-based field index, checked."""
        if not 0 <= field < self.nfields:
            raise E.InvalidValueError(f"field must be in 0..{self.nfields - 1} (0-based), got {field}")
        return field


def _at(h, field: int) -> str:
    """"field f: " before a message about field ``f`` of a fields handle; "" for one array."""
    return f"field {field}: " if h.nfields else ""


def _raw(ptr, shape, strides, itemsize, memory, device_id, order):
    return _RawArray(ptr, shape, strides, itemsize, memory=memory, device_id=device_id, order=order)


# --- the barrier -----------------------------------------------------------------------------


def _fail(exc: BaseException, where: str) -> int:
    try:
        cls = E.redist_class_of(exc)  # the one table: the same status whichever layer raised
        code = cls.status
        msg = f"{where}: {cls.__name__}: {exc}"
        if os.environ.get("REDIST_TRACEBACK"):
            msg += "\n" + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        _lib._redist_set_last_error(msg.encode("utf-8", "replace")[:_MSG_MAX])
        return code
    except BaseException:  # noqa: BLE001 -- never let anything escape into C
        return 7


def _barrier(body, where: str):
    """The one exception barrier: ``body``'s exceptions become a status + last-error message."""

    def entry(*args):
        try:
            return body(*args)
        except BaseException as exc:  # noqa: BLE001 -- C callers get a status, never an exception
            return _fail(exc, where)

    entry.__name__ = entry.__qualname__ = where
    return entry


def _onerror(exc_type, exc, tb):
    # cffi's own backstop (an exception inside the barrier or while converting the result)
    if exc is not None:
        _fail(exc, "redist")


# --- helpers ---------------------------------------------------------------------------------


def _mpi():
    from mpi4py import MPI

    return MPI


def _lookup(hid: int) -> _Handle:
    h = _handles.get(hid)
    if h is None:
        if hid == 0:
            raise E.InvalidValueError("the redist_t handle is NULL")
        if 0 < hid < _next_id:
            raise E.InvalidStateError(f"redist_t handle {hid} has been freed (use after redist_free or redist_finalize)")
        raise E.InvalidValueError(f"{hid:#x} is not a redist_t handle (uninitialized variable?)")
    return h


def _unpack(ptr, ndim, what):
    if not ptr:
        raise ValueError(f"{what} is NULL")
    return tuple(int(v) for v in _ffi.unpack(ptr, ndim))


# --- the entry points (bodies; names follow the C functions) -----------------------------------


def _initialize(fortran_comm, device_id):
    global _owns_mpi
    if _mpi_finalized:
        raise E.InvalidStateError(
            "redist_finalize() finalized MPI (redist had initialized it), so redist cannot start again; "
            "call MPI_Init in the application to initialize and finalize redist several times"
        )
    if redist.is_initialized():
        raise E.InvalidStateError("redist is already initialized; call redist_finalize() first")
    if device_id == -1:
        dev = None
    elif device_id == -2:
        dev = "cpu"
    elif device_id >= 0:
        dev = int(device_id)
    else:
        raise E.InvalidValueError(
            f"device_id must be a CUDA device ordinal, REDIST_DEVICE_AUTO (-1) or REDIST_DEVICE_NONE (-2), got {device_id}"
        )
    MPI = _mpi()
    if MPI.Is_finalized():
        raise E.InvalidStateError("MPI has already been finalized")
    if not MPI.Is_initialized():
        MPI.Init_thread(MPI.THREAD_MULTIPLE)
        _owns_mpi = True
    if fortran_comm == -1:
        comm = MPI.COMM_WORLD
    else:
        comm = MPI.Comm.f2py(int(fortran_comm))
        if comm == MPI.COMM_NULL:
            raise E.InvalidValueError("fortran_comm is MPI_COMM_NULL")
        if comm.Is_inter():
            raise E.InvalidValueError("fortran_comm is an inter-communicator; redist needs an intra-communicator")
    redist.initialize(device_id=dev, process_group=comm)
    return 0


def _finalize():
    global _mpi_finalized
    try:
        if redist.is_initialized():
            # free our handles in creation order (the same on every rank), then the runtime
            for hid in sorted(_handles):
                _handles.pop(hid).r.free()
            redist.finalize()
    finally:
        _handles.clear()
        _symmetric.clear()  # unmapped: valid until redist_finalize (redist.h)
        if _owns_mpi and not _mpi_finalized:
            MPI = _mpi()
            if not MPI.Is_finalized():
                MPI.Finalize()
            _mpi_finalized = True
    return 0


def _comm_rank(rank_p, nranks_p):
    if not redist.is_initialized():
        raise E.NotInitializedError("call redist_initialize() first")
    pg = redist.get_context().process_group
    if rank_p:
        rank_p[0] = pg.rank
    if nranks_p:
        nranks_p[0] = pg.nranks
    return 0


def _heap():
    if not redist.is_initialized():
        raise E.NotInitializedError("call redist_initialize() first")
    from redist import _runtime

    return _runtime.context().engine.host_heap()


def _allocate_symmetric_memory(ptr_p, nbytes):
    heap, failure = _heap(), None
    if not ptr_p:
        failure = E.InvalidValueError("ptr is NULL")
    elif nbytes < 0:
        failure = E.InvalidValueError(f"nbytes must be non-negative, got {nbytes}")
    part = heap.allocate(max(int(nbytes), 0), make_symmetric=True, failure=failure)  # collective
    ptr_p[0] = address = part.ctypes.data
    _symmetric[address] = part
    return 0


def _wisdom_path(path) -> str:
    if not redist.is_initialized():
        raise E.NotInitializedError("call redist_initialize() first")
    return "" if not path else _ffi.string(path).decode(errors="surrogateescape")


def _export_wisdom(path, entries_p):
    n = redist.export_wisdom(_wisdom_path(path))  # collective; an empty path raises on every rank
    if entries_p:
        entries_p[0] = n
    return 0


def _import_wisdom(path, entries_p):
    n = redist.import_wisdom(_wisdom_path(path))
    if entries_p:
        entries_p[0] = n
    return 0


def _forget_wisdom():
    if not redist.is_initialized():
        raise E.NotInitializedError("call redist_initialize() first")
    redist.forget_wisdom()
    return 0


def _free_symmetric_memory(ptr):
    heap, failure = _heap(), None
    part = _symmetric.get(int(ptr))
    if part is None:
        failure = E.InvalidValueError(f"the memory at 0x{int(ptr):x} was not allocated by "
                                      "redist_allocate_symmetric_memory (or was freed already)")
    heap.free([] if part is None else [(part.ctypes.data, part.nbytes, None)], failure=failure)  # collective
    del _symmetric[int(ptr)]
    return 0


def _create(handle_p, nfields, ndim, in_lower, in_upper, in_strides, out_lower, out_upper, element_sizes, order,
            memory, operands, options_p, fields=False):
    """redist_create, redist_create_ex (``fields`` False: one array, ``nfields`` 1) and
    redist_create_fields (``in_strides`` [nfields][ndim], ``element_sizes`` and ``operands`` [nfields])."""
    global _next_id
    if not redist.is_initialized():
        raise E.NotInitializedError(f"call redist_initialize() before redist_create{'_fields' if fields else ''}()")
    ctx = redist.get_context()
    # Decode locally, then agree: a bad argument on one rank fails redist_create on every rank.
    ops = None
    with _collective.attempt(ctx.engine.comm) as step:
        if not handle_p:
            raise ValueError("handle (the redist_t * out-argument) is NULL")
        if fields and not 1 <= nfields <= _MAX_FIELDS:
            why = " (redist_create_fields_f passes -1 when its field arrays differ in size)" if nfields == -1 else ""
            raise ValueError(f"nfields must be in 1..{_MAX_FIELDS}, got {nfields}{why}")
        if not 1 <= ndim <= _MAX_NDIM:
            why = " (redist_create_f passes -1 when its bound arrays, or global_shape, differ in size)" if ndim == -1 else ""
            raise ValueError(f"ndim must be in 1..{_MAX_NDIM}, got {ndim}{why}")
        lo, hi = _unpack(in_lower, ndim, "in_lower"), _unpack(in_upper, ndim, "in_upper")
        olo, ohi = _unpack(out_lower, ndim, "out_lower"), _unpack(out_upper, ndim, "out_upper")
        strides = _unpack(in_strides, nfields * ndim, "in_strides") if in_strides else None
        sizes = _unpack(element_sizes, nfields, "element_sizes")
        opts = _c_options.decode(_ffi, options_p, order)
        gshape = (_unpack(options_p.global_shape, ndim, "options->global_shape")
                  if order < 0 and options_p and _c_options.has(_ffi, options_p, "global_shape") and options_p.global_shape else None)
        if memory not in (0, 1):
            raise ValueError(f"memory must be REDIST_MEMORY_HOST (0) or REDIST_MEMORY_DEVICE (1), got {memory}")
        shape = tuple(h - l for l, h in zip(lo, hi))
        nelem = math.prod(max(0, n) for n in shape)
        if nelem and not operands:
            raise ValueError(f"operands is NULL but the input box holds {nelem} elements")
        ptrs = _ffi.unpack(operands, nfields) if operands else (0,) * nfields
        ordc = opts["result_layout"]  # "C"/"F", or the axes of result_order
        if not isinstance(ordc, str) and len(ordc) != ndim:
            raise ValueError(f"options->result_ndim is {len(ordc)} but ndim is {ndim}")
        dense = ordc if isinstance(ordc, str) else "CF"[options_p.order]  # a dense operand's order
        ops = []
        for f, (size, ptr) in enumerate(zip(sizes, ptrs)):
            at, size_name, op_name = ((f"field {f}: ", f"element_sizes[{f}]", f"operands[{f}]") if fields
                                      else ("", "element_size", "operand"))
            if size <= 0:
                raise ValueError(f"{at}{size_name} must be positive, got {size}")
            if nelem and not ptr:
                raise ValueError(f"{at}{op_name} is NULL but the input box holds {nelem} elements")
            ops.append(_raw(ptr, shape, strides[f * ndim:(f + 1) * ndim] if strides else None, size,
                            ("cpu", "cuda")[memory], ctx.device_id if memory == 1 else None, dense))
        step.payload = (ordc, memory, nfields, sizes)
    if len({p[:2] for p in step.gathered}) > 1:
        raise E.InvalidValueError(
            "order and memory must be the same on every rank; got (order, memory) = "
            + ", ".join(f"rank {r}: {k[:2]}" for r, k in enumerate(step.gathered))
        )
    if fields:
        _same_everywhere([p[2] for p in step.gathered], "nfields")
        for f in range(nfields):
            _same_everywhere([p[3][f] for p in step.gathered], f"field {f}: element_sizes[{f}]")
    # The result is dense in the order the C caller names, whatever the operand strides suggest.
    r = redist.Redistribute(tuple(ops) if fields else ops[0], (lo, hi), (olo, ohi), options=opts, global_shape=gshape)
    r._replayable = False  # its calls are replayed here (_offer_replay), not by the Python API's own table
    try:
        hid = _next_id
        _next_id += 1
        _handles[hid] = _Handle(r, ops, tuple(h - l for l, h in zip(olo, ohi)), ordc, dense, nfields if fields else 0)
    except BaseException:
        r.free()
        raise
    handle_p[0] = hid
    return 0


def _create_fields(*args):
    return _create(*args, fields=True)


def _same_everywhere(values: list, what: str) -> None:
    """Raise (on every rank: ``values`` are every rank's) unless ``what`` is the same on every rank."""
    bad = [(r, v) for r, v in enumerate(values) if v != values[0]]
    if bad:
        raise E.InvalidValueError(f"{what} must be the same on every rank: rank 0 has {values[0]}, but "
                                  + ", ".join(f"rank {r} has {v}" for r, v in bad))


def _one(hid) -> _Handle:
    """The handle of a one-array function (redist_execute, redist_reset_operand...), checked. Local."""
    h = _handles.get(hid) or _lookup(hid)
    if h.nfields:
        raise E.InvalidValueError(
            f"redist_t handle {hid} moves {h.nfields} fields (made by redist_create_fields): use the fields "
            "functions (redist_execute_fields, redist_reset_operands...)")
    return h


def _fields(hid) -> _Handle:
    """The handle of a fields function (redist_execute_fields, redist_reset_operands...), checked. Local."""
    h = _handles.get(hid) or _lookup(hid)
    if not h.nfields:
        raise E.InvalidValueError(
            f"redist_t handle {hid} moves one array (made by redist_create or redist_create_ex): use the one-array "
            "functions (redist_execute, redist_reset_operand...)")
    return h


def _plan(hid, stream):
    h = _handles.get(hid) or _lookup(hid)
    h.r.plan(stream=stream or None)
    return 0


def _execute(hid, stream, out, strides, result_p):
    """redist_execute and redist_execute_strided (``strides`` NULL: a dense out; errors say redist_execute)."""
    h = _one(hid)
    if not out:
        res = h.r.execute(stream=stream or None)
    elif not strides:
        res = h.r.execute(stream=stream or None, out=h._outs[0].get(out) or h.out(out))
    else:
        st = tuple(int(v) for v in _ffi.unpack(strides, len(h.out_shape)))
        res = h.r.execute(stream=stream or None, out=h.out(out, st))
    result_p[0] = res.ptr
    if not stream and not strides:
        _offer_replay(hid, h, (out,), (res.ptr,))
    return 0


def _execute_fields(hid, stream, outs, strides, results_p):
    """redist_execute_fields and redist_execute_fields_strided (``strides`` NULL: dense outs)."""
    h = _fields(hid)
    n = h.nfields
    if results_p:
        for f in range(n):
            results_p[f] = 0
    if not outs:
        res = h.r.execute(stream=stream or None)
    else:
        nd = len(h.out_shape)
        st = _ffi.unpack(strides, n * nd) if strides else None
        res = h.r.execute(stream=stream or None, out=tuple(
            None if not p else h.out(p, None if st is None else tuple(st[f * nd:(f + 1) * nd]), f)
            for f, p in enumerate(_ffi.unpack(outs, n))))
    if results_p:
        for f, a in enumerate(res):
            results_p[f] = a.ptr
        if not stream and not strides:
            _offer_replay(hid, h, _ffi.unpack(outs, n) if outs else (0,) * n, tuple(a.ptr for a in res))
    return 0


def _offer_replay(hid, h, outs, results) -> None:
    """Hand the C side the compiled replay of the call just made, where there is one (redist_replay.c:
    the next call of this handle with the same ``outs`` runs without Python). Local; never raises:
    the call itself has succeeded on every rank. A handle whose words cannot be built is said so
    once and not offered again."""
    if hid in _no_replay:
        return
    try:
        words = h.r._replay(lambda: _lib._redist_drop_replay(hid))
        if words is not None and _lib._redist_set_replay(hid, int(bool(h.nfields)), len(outs), list(outs),
                                                         list(results), _ffi.from_buffer("int64_t[]", words),
                                                         len(words)) != 0:
            raise E.InternalError(f"libredist.so refused the words of replay version {words[0]} (a library "
                                  "built from another redist? rebuild it: python -m redist.cabi build), or no memory")
    except Exception:  # noqa: BLE001 -- without a replay the next call goes through Python
        _no_replay.add(hid)
        h.r._logger.warning("redist C ABI: no compiled replays for handle %d (its calls run in Python):\n%s", hid,
                            traceback.format_exc())


def _resume(hid, code, heard, n, operands, outs, results):
    """A replayed call whose status round heard another code from a peer (this rank said ``code``):
    Python binds the replay's operands and outs and finishes the call. Errors as the execute
    function called reports them."""
    h = _handles.get(hid)
    try:
        if h is None:
            raise E.InternalError(f"the replayed redist_t handle {hid} is gone")
        ptrs = _ffi.unpack(outs, h.nfields or 1)
        if h.nfields:
            h.r.reset_operand_unchecked(h.operands(operands))
            out = tuple(h.out(p, None, f) if p else None for f, p in enumerate(ptrs))
        else:
            h.r.reset_operand_unchecked(h.operand(operands[0]))
            out = h.out(ptrs[0]) if ptrs[0] else None
        h.r._resume(code, [heard[i] for i in range(n)], out)
    except BaseException as exc:  # noqa: BLE001 -- C callers get a status, never an exception
        return _fail(exc, "redist_execute_fields" if h is not None and h.nfields else "redist_execute")
    return 0


def _reset_checked(h, decode, **field) -> int:
    """reset_operand's checks are collective, and so is ``decode()`` (the new RawArrays): a NULL
    operand or a bad field on one rank fails every rank."""
    op = None
    with _collective.attempt(redist.get_context().engine.comm):
        op = decode()
    h.r.reset_operand(op, **field)
    return 0


def _reset_operand(hid, operand):
    h = _one(hid)
    return _reset_checked(h, lambda: h.operand(operand))


def _reset_operand_unchecked(hid, operand):
    h = _one(hid)
    h.r.reset_operand_unchecked(h.operand(operand))
    return 0


def _reset_operands(hid, operands):
    h = _fields(hid)
    return _reset_checked(h, lambda: h.operands(operands))


def _reset_operands_unchecked(hid, operands):
    h = _fields(hid)
    h.r.reset_operand_unchecked(h.operands(operands))
    return 0


def _reset_operand_field(hid, field, operand):
    h = _fields(hid)
    return _reset_checked(h, lambda: h.operand(operand, h.field(field)), field=field)


def _reset_operand_field_unchecked(hid, field, operand):
    h = _fields(hid)
    h.r.reset_operand_unchecked(h.operand(operand, h.field(field)), field=field)
    return 0


def _get_nfields(hid, nfields_p):
    h = _handles.get(hid) or _lookup(hid)
    if not nfields_p:
        raise ValueError("nfields (the int32_t * out-argument) is NULL")
    nfields_p[0] = h.nfields
    return 0


def _release_operand(hid):
    h = _handles.get(hid) or _lookup(hid)
    h.r.release_operand()
    return 0


def _free(hid):
    h = _handles.get(hid) or _lookup(hid)
    del _handles[hid]
    h.r.free()
    return 0


def _graph(hid, stream, graph_p):
    h = _handles.get(hid) or _lookup(hid)
    graph_p[0] = int(h.r.graph(stream=stream or None))
    return 0


def _update_graph_exec(hid, graph, graph_exec, ncopies_p):
    h = _handles.get(hid) or _lookup(hid)
    if not graph or not graph_exec:
        raise E.InvalidValueError("cuda_graph and cuda_graph_exec must not be NULL")
    ncopies_p[0] = h.r.update_captured((graph, graph_exec))
    return 0


def _release_captured(hid):
    (_handles.get(hid) or _lookup(hid)).r.release_captured()
    return 0


_BODIES = {
    "_redist_py_initialize": _initialize,
    "_redist_py_finalize": _finalize,
    "_redist_py_comm_rank": _comm_rank,
    "_redist_py_allocate_symmetric_memory": _allocate_symmetric_memory,
    "_redist_py_free_symmetric_memory": _free_symmetric_memory,
    "_redist_py_export_wisdom": _export_wisdom,
    "_redist_py_import_wisdom": _import_wisdom,
    "_redist_py_forget_wisdom": _forget_wisdom,
    "_redist_py_create": _create,
    "_redist_py_create_fields": _create_fields,
    "_redist_py_plan": _plan,
    "_redist_py_execute": _execute,
    "_redist_py_execute_fields": _execute_fields,
    "_redist_py_reset_operand": _reset_operand,
    "_redist_py_reset_operand_unchecked": _reset_operand_unchecked,
    "_redist_py_reset_operands": _reset_operands,
    "_redist_py_reset_operands_unchecked": _reset_operands_unchecked,
    "_redist_py_reset_operand_field": _reset_operand_field,
    "_redist_py_reset_operand_field_unchecked": _reset_operand_field_unchecked,
    "_redist_py_get_nfields": _get_nfields,
    "_redist_py_release_operand": _release_operand,
    "_redist_py_free": _free,
    "_redist_py_graph": _graph,
    "_redist_py_update_graph_exec": _update_graph_exec,
    "_redist_py_release_captured": _release_captured,
}
_OWN_BARRIER = {"_redist_py_resume": _resume}  # it names the execute function called


def install(ffi, lib) -> None:
    """Attach every body to its ``extern "Python"`` function (libredist.so start-up code)."""
    global _ffi, _lib
    _ffi, _lib = ffi, lib
    if lib._redist_started_python() and "mpi4py.MPI" not in sys.modules:
        # A C/Fortran process: redist decides when MPI starts (redist_initialize) and ends
        # (redist_finalize), and the application may have initialized MPI itself already.
        import mpi4py

        mpi4py.rc.initialize = False
        mpi4py.rc.finalize = False
    # fail at start-up (REDIST_ERROR_PYTHON_INIT), not at the first call
    global redist, E, _collective, _RawArray, dense_strides
    import redist as _redist
    from redist.engine import collective, errors, geometry

    redist, E, _collective, _RawArray = _redist, errors, collective, _redist.RawArray
    dense_strides = geometry.dense_strides

    for name, body in _BODIES.items():
        where = "redist_" + name[len("_redist_py_"):]
        ffi.def_extern(name=name, error=7, onerror=_onerror)(_barrier(body, where))
    for name, body in _OWN_BARRIER.items():
        ffi.def_extern(name=name, error=7, onerror=_onerror)(body)
