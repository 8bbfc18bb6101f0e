# SPDX-License-Identifier: Apache-2.0
"""Redistribute: the stateful, plan-once / execute-many redistribution object."""

from __future__ import annotations

import dataclasses
import pickle
import enum
import functools
import logging
import time
import weakref
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from . import _runtime
from ._distributions import Box, Distribution
from ._resolve import resolve_boxes
from ._operands import Operand, as_array, data_pointer, layout_signature, wrap
from ._options import RedistributeOptions, ranked_logger
from ._streams import current_stream, graph_handles, stream_handle
from .engine import backend, collective
from .engine.buffer import byte_extent
from .engine.geometry import axis_order, normal_order
from .engine.errors import CommunicationError, InternalError, InvalidStateError, InvalidTypeError, InvalidValueError, NotSupportedError
from .engine.plan import fuse, make_plan
from .engine.validate import RankSpec, check_boxes, check_fields, check_operands, consensus_order, raise_first

__all__ = ["Redistribute", "redistribute"]

#: the operand's array type (numpy.ndarray, torch.Tensor, cupy.ndarray or RawArray): execute()
#: returns the same type
ArrayT = TypeVar("ArrayT")
DistributionLike = Any  # a Distribution, or a (lower, upper) pair taken as a Box


class _State(enum.Enum):
    NEW = "constructed, operand bound, not planned"
    NEW_RELEASED = "constructed, operand released, not planned"
    READY = "planned, operand bound"
    RELEASED = "planned, operand released"
    FREED = "freed"


#: how many times one binding's replay is offered (Redistribute._offer)
_OFFERS = 3
_PLANNED = (_State.READY, _State.RELEASED)
_HAS_OPERAND = (_State.NEW, _State.READY)
_RELEASED_MSG = ("Execution cannot be performed after the operand has been released. Use reset_operand() "
                 "to provide a new operand before performing the execution.")


def _as_distribution(d, which: str) -> Distribution:
    if isinstance(d, Box):
        return d._valid()  # a Box made with bad coordinates raises here, inside the agreement
    if isinstance(d, Distribution):
        try:  # the ranks compare distributions by gathering them: one that cannot travel must fail here
            pickle.dumps(d)
        except Exception as e:  # noqa: BLE001 -- whatever pickling raises, said as a redist error
            raise InvalidValueError(f"{which}_distribution {type(d).__name__} cannot be sent to the other ranks "
                                    f"(pickling it raised {type(e).__name__}: {e})") from e
        return d
    if isinstance(d, (tuple, list)) and len(d) == 2:  # a raw (lower, upper) pair, e.g. from the C ABI
        return Box(*d)._valid()
    raise InvalidTypeError(f"{which}_distribution must be a redist Distribution or a (lower, upper) pair, got {d!r}")


#: address of element 0, per package (numpy: Redistribute._numpy_pointer, cached)
_POINTER = {
    "torch": lambda obj: obj.data_ptr(),
    "cupy": lambda obj: obj.data.ptr,
    "raw": lambda obj: obj.ptr,
}


def _template(op: Operand) -> Operand:
    """``op`` without its array: what later operands are compared with (holds no user memory)."""
    return dataclasses.replace(op, obj=None, buffer=dataclasses.replace(op.buffer, ptr=0, owner=None))


def _is_fields(operand) -> bool:
    """Several fields (a tuple or list of arrays) rather than one array."""
    return isinstance(operand, (tuple, list))


def _wrap_fields(operand, result_layout) -> list[Operand]:
    """The fields of a tuple/list operand, checked against field 0 on this rank (shape, package,
    memory, device; and a common memory layout unless ``result_layout`` forces one)."""
    if not operand:
        raise InvalidValueError("a tuple or list operand needs at least one field (array)")
    ops = []
    for f, obj in enumerate(operand):
        try:
            ops.append(wrap(obj))
        except Exception as e:
            raise type(e)(f"field {f}: {e} (a tuple or list operand holds several fields, one array each)") from e
    first = ops[0]
    for f, op in enumerate(ops[1:], 1):
        for attr, what in (("package", "array package"), ("memory", "memory space"), ("device_id", "device"),
                           ("shape", "shape")):
            if getattr(op, attr) != getattr(first, attr):
                raise InvalidValueError(
                    f"field {f} has {what} {getattr(op, attr)!r} but field 0 has {getattr(first, attr)!r}: the fields "
                    "of one Redistribute must share the shape (the box), package, memory space and device on each rank")
    if result_layout == "auto" and not set.intersection(*(set(op.layouts()) for op in ops)):
        raise InvalidValueError(
            f"the fields have different memory layouts ({', '.join(f'field {f} {op.layouts()}' for f, op in enumerate(ops))}): "
            "their results share one order; pass result_layout='C' or 'F'")
    return ops


class Redistribute(Generic[ArrayT]):
    """Redistribute a distributed N-D array: plan once, execute many times.

    Collective construction: every process passes its local piece (``operand``) and the
    input/output distributions; every process gets the same validation error if anything is
    wrong on any process.

    Parameters
    ----------
    operand
        This process's box of the global array: ``numpy.ndarray``, ``torch.Tensor`` (CPU or
        CUDA), ``cupy.ndarray``, or :class:`redist.RawArray`. Positional-only. C-, F-ordered or
        strided (padded with ghost layers, reversed ``a[::-1]``, broadcast): any strides. GPU
        operands need **not** be on the NVSHMEM symmetric heap (a difference from nvmath-python).
    input_distribution, output_distribution
        :class:`Slab`, :class:`BlockNonCyclic`, or :class:`Box` (each process its own box;
        a plain ``(lower, upper)`` pair is accepted as a Box). Any number of dimensions; boxes
        may be empty.
    options
        :class:`RedistributeOptions` or a dict of its fields.
    stream
        CUDA stream for GPU work (cupy/torch/cuda.core stream or a raw ``cudaStream_t`` int);
        ignored on the host backend.

    Notes
    -----
    Deliberate differences from nvmath-python 1.0:

    * The result is persistent: :meth:`execute` returns an array owned by this object, reused
      (overwritten) by the next :meth:`execute` and released by :meth:`free`. Pass ``out=`` to
      write into your own array instead.
    * Host operands run on MPI, with no GPU round trip (``execution="auto"``).
    * All validation is collective and raised identically on every process.
    * Any number of dimensions, any element size, strided inputs, empty boxes.
    * :meth:`reset_operand` is collective (its checks are, too).
    """

    #: how options given as None or a dict are completed (redist.distribution uses result="fresh")
    _options_class = RedistributeOptions

    def __init__(self, operand: ArrayT, /, input_distribution: DistributionLike, output_distribution: DistributionLike,
                 *, options: RedistributeOptions | dict[str, Any] | None = None, stream: Any = None) -> None:
        self._state = None
        self._exe = None
        self._serial = None
        ctx = _runtime.context()
        comm = ctx.engine.comm
        rank = ctx.process_group.rank
        op = opts = None
        fields = _is_fields(operand)
        try:
            opts = self._options_class.coerce(options)
            ops = _wrap_fields(operand, opts.result_layout) if fields else [wrap(operand)]
            op = ops[0]
            if isinstance(opts.result_layout, tuple) and len(opts.result_layout) == len(op.shape):
                opts.result_layout = normal_order(opts.result_layout, len(op.shape))  # (0, 1, 2) and "C" agree
            layouts = tuple(sorted(set.intersection(*(set(o.layouts()) for o in ops))))
            spec = RankSpec(
                rank=rank, ndim=len(op.shape), dtype=op.dtype_key, itemsize=op.itemsize, package=op.package,
                memory=op.memory, layouts=layouts if fields else op.layouts(), shape=op.shape, strides=op.strides,
                options=opts.fingerprint(), in_dist=_as_distribution(input_distribution, "input"),
                out_dist=_as_distribution(output_distribution, "output"), device=op.device_id,
                runtime_device=ctx.device_id, nfields=len(ops) if fields else 0,
                fields=tuple((o.dtype_key, o.dtype_name, o.itemsize, o.strides) for o in ops[1:]),
            )
            ctor_stream = None if stream is None else stream_handle(stream)
        except Exception as e:  # noqa: BLE001 -- any local failure is raised on every rank below
            spec = RankSpec(rank=rank, error=collective.problem(e))
        specs = collective.agree(comm, None, spec)
        # From here on every rank computes the same thing from the same data.
        raise_first(specs, check_operands)
        raise_first(specs, check_fields)
        in_boxes, out_boxes = resolve_boxes([s.in_dist for s in specs], [s.out_dist for s in specs],
                                            [s.shape for s in specs])
        specs = [dataclasses.replace(s, in_box=i, out_box=o) for s, i, o in zip(specs, in_boxes, out_boxes)]
        rl = opts.result_layout
        if isinstance(rl, tuple) and len(rl) != len(op.shape):  # same options and ndim everywhere: same error
            raise InvalidValueError(f"result_layout {rl} has {len(rl)} axes but the operands are {len(op.shape)}-D")
        if rl != "auto":  # a forced result order makes operand layouts irrelevant
            specs = [dataclasses.replace(s, layouts=("C",) if isinstance(rl, tuple) else (rl,)) for s in specs]
        raise_first(specs, functools.partial(check_boxes, allow_overlap=opts.allow_overlap))
        self._backend = backend.select_backend(op.memory, opts.execution, ctx.cuda is not None)
        self._ctx, self._options = ctx, opts
        self._logger = ranked_logger(opts.logger, rank)
        self._fields = fields  # a tuple/list operand: execute() returns a tuple
        self._nfields = len(ops)
        self._operand_obj = tuple(operand) if fields else operand
        self._templates = [_template(o) for o in ops]
        self._template = self._templates[0]
        self._in_boxes, self._out_boxes = in_boxes, out_boxes
        # per field, per rank: the operand's element strides
        self._all_strides = [[s.strides for s in specs]] + [[s.fields[f][3] for s in specs]
                                                             for f in range(len(ops) - 1)]
        self._out_order = rl if isinstance(rl, tuple) else consensus_order(specs)  # a tuple is a true permutation
        self._ctor_stream = ctor_stream
        self._result = None
        self._outs: list = [None] * len(ops)  # per field: the out= object bound now (None: the engine-owned result)
        self._outs_bound = False  # some field has an out= bound (several fields)
        # (id, field) -> (weak reference, layout signature, Buffer, lo, hi) of out= objects checked before
        self._out_checked: dict = {}
        # one field, numpy: id -> (weak reference, shape/strides/dtype/names, operand addresses, Buffer, key) of
        # out= objects a call accepted (a time loop's few arrays: taken again without the checks; _again).
        # numpy refuses to resize an array that has weak references, but __setstate__ moves its data: compared.
        self._out_again: dict = {}
        self._ptrs: dict = {}  # id -> (weak reference, address) of numpy operands rebound before
        # planned on host: where repeated calls run in C (engine/host/compiled.py; None: in Python), and
        # how many calls ran in Python (a replay is offered from the second on: not for one-shot use)
        self._replays = None
        self._python_calls = 0
        self._offered: dict = {}  # (operand addresses, out= keys) -> how many times its replay was offered
        self._replayable = True  # False: the C ABI replays this object's calls itself (redist.cabi)
        self._out_keys = 0  # the last key given to an out= binding of _out_again (its replays' key)
        # per field: the bytes it spans around its address, and the address
        self._extents = [byte_extent(o.shape, o.strides, o.itemsize) for o in ops]
        self._operand_ptrs = [o.ptr for o in ops]
        self._pointer = self._numpy_pointer if op.package == "numpy" else _POINTER[op.package]
        self._streams = self._backend != "host"  # execute() needs a stream handle
        self._fresh = opts.result == "fresh"
        if self._fresh and fields:
            raise NotSupportedError(
                'result="fresh" (the default of redist.distribution.Redistribute) takes one operand; several fields '
                'need persistent results: redist.Redistribute, or options result="persistent" (execute(out=...) then '
                'takes a tuple of your own arrays)')
        if self._fresh and op.package == "raw":
            raise NotSupportedError('result="fresh" needs numpy, torch or cupy operands (a RawArray has no allocator)')
        self._last_stream = self._last_handle = None
        self._plan = self._release = None
        self._state = _State.NEW
        self._serial = _runtime._register(self)
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info(
                "Redistribute: %d ranks, global %s, %s %s itemsize %d, %s-order result, backend %s; "
                "rank %d input %s -> output %s%s",
                ctx.process_group.nranks, _fmt_global(in_boxes), op.package,
                "/".join(o.dtype_name for o in ops), op.itemsize,
                self._out_order, self._backend, rank, Box(*in_boxes[rank]), Box(*out_boxes[rank]),
                f"; {len(ops)} fields in one exchange" if fields else "",
            )

    # --- properties -------------------------------------------------------------------------

    @property
    def input_box(self) -> Box:
        """This process's input box."""
        return Box(*self._in_boxes[self._ctx.process_group.rank])

    @property
    def output_box(self) -> Box:
        """This process's output box."""
        return Box(*self._out_boxes[self._ctx.process_group.rank])

    @property
    def layout(self) -> str | tuple[int, ...]:
        """"C", "F" or the axes slowest-varying first: the memory order of the result."""
        return self._out_order

    @property
    def execution_space(self) -> str:
        """"cpu" or "cuda": where the exchange runs."""
        return "cpu" if self._backend == "host" else "cuda"

    @property
    def memory_space(self) -> str:
        """"cpu" or "cuda": where operands live."""
        return self._template.memory

    @property
    def device_id(self) -> int | None:
        """The CUDA device of this process (None when it runs CPU-only)."""
        return self._ctx.device_id

    @property
    def blocking(self) -> Literal[True, "auto"]:
        """The ``blocking`` option: True or "auto"."""
        return self._options.blocking

    @property
    def operand(self) -> Any:
        """The operand bound now (a tuple for several fields; None once released)."""
        return self._operand_obj

    @property
    def nfields(self) -> int:
        """How many fields move in one exchange (1 for one array)."""
        return self._nfields

    @property
    def plan_description(self) -> str:
        """The lowered plan as text (after :meth:`plan`)."""
        self._need_planned("describe")
        return f"{self._plan.describe()}\n{self._exe.describe()}"

    # --- state machine helpers --------------------------------------------------------------

    def _check_not_freed(self, what: str):
        if self._state is _State.FREED or self._state is None:
            raise InvalidStateError(f"Redistribute.{what}() cannot be called after free()")

    def _need_planned(self, what: str):
        self._check_not_freed(what)
        if self._state not in _PLANNED:
            raise InvalidStateError(f"Redistribute.{what}() cannot be called before plan() has been called.")

    def _stream(self, stream) -> int:
        if stream is None:
            s = current_stream(self._template.package, self._ctx.device_id if self._backend == "cuda" else None)
            if s is not None:
                return s
            return 0 if self._ctor_stream is None else self._ctor_stream
        if stream is self._last_stream:
            return self._last_handle
        h = stream_handle(stream)
        self._last_stream, self._last_handle = stream, h
        return h

    # --- the API ------------------------------------------------------------------------------

    def plan(self, stream: Any = None) -> None:
        """Collective: build the transfer plan and lower it to the execution backend.

        For CUDA execution the exchange is captured into its CUDA graph here, once.
        Planning twice is a no-op. On failure every rank raises and the object stays unplanned.
        """
        self._check_not_freed("plan")
        if self._state in _PLANNED:
            self._logger.debug("Redistribute.plan(): already planned; redoing the plan is not supported")
            return
        ctx = self._ctx
        t0 = time.perf_counter()
        with collective.attempt(ctx.engine.comm):
            plans = [make_plan(ctx.process_group.rank, self._in_boxes, self._out_boxes, itemsize=t.itemsize,
                               in_strides=strides, out_order=self._out_order)
                     for t, strides in zip(self._templates, self._all_strides)]
            plan = fuse(plans) if self._fields else plans[0]
            o = self._options
            lower_opts = backend.LowerOptions(
                backend=self._backend, transport=o.transport, host_method=o.host_method, signal=o.signal,
                blocking=o.blocking is True,
                logger=self._logger if self._logger.isEnabledFor(logging.INFO) else None)
        exe = backend.lower(plan, ctx.engine, lower_opts)
        with collective.attempt(ctx.engine.comm, on_failure=exe.free):  # roll back on every rank
            if self._state is _State.NEW:
                for f, obj in enumerate(self._objects()):
                    exe.bind_input(wrap(obj).buffer, f)
            results = tuple(as_array(exe.results[f], t, owner=exe) for f, t in enumerate(self._templates))
            self._result = results if self._fields else results[0]
        self._plan, self._exe = plan, exe
        self._release = exe.release_captured  # still callable after free()
        if not self._streams and self._replayable and not self._fresh:
            self._replays = backend.replays(self._serial, self._fields, self._nfields, ctx.process_group.nranks)
            if self._replays is not None:  # an object dropped without free(): its replays go with it
                weakref.finalize(self, self._replays.forget)
        self._state = _State.READY if self._state is _State.NEW else _State.RELEASED
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info(
                "plan: %.3f ms on %s; rank %d sends %s, receives %s, keeps %d B",
                (time.perf_counter() - t0) * 1e3, self.execution_space, plan.rank, plan.send_bytes, plan.recv_bytes,
                sum(p.local.nbytes for p in plans if p.local),
            )
            self._logger.debug("%s", plan.describe())

    def execute(self, stream: Any = None, release_workspace: bool = False, sync_symmetric_memory: bool = True,
                out: ArrayT | None = None) -> ArrayT:
        """Collective: redistribute the current operand; return this process's output box.

        With several fields (a tuple operand) every field moves in the one exchange and the
        result is a tuple (one array per field); ``out`` is then a tuple too (None entries: that
        field's engine-owned result).

        Returns the engine-owned result (persistent: overwritten by the next ``execute``,
        released by :meth:`free`), or ``out`` when given. ``out`` must have the result's shape,
        dtype and package, be writable and not overlap the operand, and may have any strides
        (the interior of a ghosted array, a reversed view); host ``out=`` may be passed on some
        ranks only; on GPUs it is any device memory of the rank's GPU (torch, cupy, cudaMalloc,
        symmetric: the peers store into it through mappings made the first time an allocation is
        used, collectively; memory they cannot map, laid out like the result, is landed and
        copied), and a new stride pattern lowers the exchange for it once, collectively. ``release_workspace`` and
        ``sync_symmetric_memory`` follow nvmath-python and must be equal on all ranks. Any
        problem on any rank raises the same error on every rank.

        GPU: on a stream that is capturing a CUDA graph (``torch.cuda.graph``, cupy's
        ``begin_capture``, ``cudaStreamBeginCapture``; any capture mode) the exchange is not run
        but recorded into that capture, after what the stream captured so far (kernel nodes, or one
        child-graph node); every replay of the user's graph then runs it. Every rank must capture (or not) alike
        and replay the same graphs in the same order, stream-ordered with its direct executes of
        this object. What cannot be captured (a first ``out=`` of new strides, ``release_workspace``,
        ``result="fresh"``, host operands) raises on every rank before anything is enqueued, so the
        capture stays valid. See :meth:`update_captured` for rebinding the recorded copies.
        """
        replays = self._replays
        if stream is not None or release_workspace is not False or sync_symmetric_memory is not True:
            replays = None  # only calls with the default flags and no stream replay
        if replays is not None:
            done = self._replayed(replays, out)
            if done is not None:
                return done
        exe = self._exe
        problem = None
        s = 0
        if self._streams:
            if stream is not None and stream is self._last_stream:
                s = self._last_handle
            else:
                try:
                    s = self._stream(stream)
                except Exception as e:  # noqa: BLE001
                    problem = collective.problem(e)
        elif stream is not None and self._ctx.cuda is not None:  # a host exchange handed a CUDA stream
            problem = self._host_capture_problem(stream)
        if self._fresh and exe is not None:
            if out is None:
                out = self._fresh_result(s)
            elif self._template.memory != "cpu":  # GPUs: the allocation is collective, so every rank says
                self._fresh_result(s, wanted=False)
        if self._state is not _State.READY:
            if exe is None:  # before plan() or after free(): this rank cannot take part
                self._check_not_freed("execute")
                raise InvalidStateError("Execution cannot be performed before plan() has been called.")
            problem = ("InvalidStateError", _RELEASED_MSG)
        target, p = self._bind_call(out)
        problem = problem or p
        try:
            if self._logger.isEnabledFor(logging.DEBUG):  # per call: DEBUG (a time loop would flood INFO)
                t0 = time.perf_counter()
                exe.execute(s, sync_symmetric_memory, release_workspace, problem)
                self._logger.debug("execute: %.3f ms on %s (%s)", (time.perf_counter() - t0) * 1e3,
                                   self.execution_space, "blocking" if self._backend == "host" or
                                   self._options.blocking is True else "asynchronous")
            else:
                exe.execute(s, sync_symmetric_memory, release_workspace, problem)
        except BaseException:
            self._unbind_outs()  # a refused call keeps no out= it was given (it wrote none)
            raise
        if replays is not None and problem is None:
            self._python_calls += 1
            if self._python_calls > 1:
                self._offer(replays, out)
        return target

    def _replayed(self, replays, out) -> Any:
        """Run this call (no stream, the default flags) as the replay of its binding, where there is
        one: what it returns; None where the call goes through Python (not READY, no replay, DEBUG
        logging each call). A peer that says something else hands the call back to Python here, on
        every rank (:meth:`_resume`)."""
        if self._state is not _State.READY or self._logger.logger.isEnabledFor(logging.DEBUG):
            return None
        if out is None:
            if self._fields:
                rc = replays.run(self._operand_ptrs, (0,) * self._nfields)
            else:
                rc = replays.run1(self._operand_ptrs[0], 0)
            target = self._result
        elif self._fields or not isinstance(out, np.ndarray):
            return None
        else:  # the out= is matched in C against its record (_offer), data pointer included
            rc = replays.run_out(self._operand_ptrs[0], out)
            target = out
        if rc == replays.DONE:
            return target
        if rc == replays.NONE:
            return None
        if rc == replays.CHANGED:  # reshaped, retyped, made read-only or moved in place: checked again
            self._out_again.pop(id(out), None)
            self._out_checked.pop((id(out), 0), None)
            return None
        if rc == replays.RESUME:
            code, heard = replays.what_was_heard()
            self._resume(code, heard, out)
            return target
        why = replays.error()  # the same on every rank where the kernel refused a cross-memory copy
        raise CommunicationError(why if why.startswith("redist host backend") else
                                 f"redist host backend: MPI error in execute (compiled replay): {why}")

    def _offer(self, replays, out) -> None:
        """After a call that ran in Python: the words of its replay for the next call of this
        binding (local; an object whose words cannot be made keeps running in Python). A binding
        whose replay was installed _OFFERS times already stays in Python: its replays keep going
        before they run (a loop cycling through more bindings than a handle keeps, a checked rebind
        every step)."""
        again = None
        if out is None:
            key = (0,) * self._nfields
        elif self._fields:
            return
        else:
            again = self._again_hit(out)
            if again is None:
                return
            key = (again[4],)
        binding = (*self._operand_ptrs, *key)
        offered = self._offered.get(binding, 0)
        if offered >= _OFFERS:
            return
        words = self._replay(replays.forget)
        if words is None:  # not counted: DEBUG logging, a binding not built yet, a route that cannot replay
            return
        if len(self._offered) >= 64:
            self._offered.clear()
        self._offered[binding] = offered + 1
        if not replays.offer(words, key):
            self._replays = None
            self._logger.warning("redist: the compiled replays refused this object's words (a build of another "
                                 "redist? reinstall it); its calls run in Python")
        elif again is not None and out.dtype.names is None:  # C compares the dtype by address: not its names
            replays.record_out(out, key[0], again[2])

    def _bind_call(self, out) -> tuple[Any, collective.Problem | None]:
        """Bind ``out`` (None: the engine-owned results) for a call: (what the call returns, this
        rank's problem with it)."""
        if self._fields:
            if out is None and not self._outs_bound:  # the time loop's call: every field's own result
                return self._result, None
            return self._bind_outs(out)
        if out is None:
            if self._outs[0] is not None:
                self._exe.bind_output(None)
                self._outs[0] = None
            return self._result, None
        again = self._again_hit(out)
        if again is not None:
            if out is not self._outs[0]:  # a time loop's out= again, unchanged since a call took it: bind it
                try:
                    self._exe.bind_output(again[3])
                except Exception as e:  # noqa: BLE001 -- agreed on by the call
                    return out, collective.problem(e)
                self._outs[0] = out
            return out, None
        return out, self._bind_out(out, 0)

    def _replay(self, forget) -> np.ndarray | None:
        """The words of the C ABI's compiled replay of the call just made (redist.cabi; None: it
        cannot be replayed), valid until ``forget()`` is called. Local."""
        if (self._exe is None or self._state is not _State.READY or self._fresh or self._streams
                or self._logger.isEnabledFor(logging.DEBUG)):  # a replay logs nothing
            return None
        return self._exe.replay(forget)

    def _resume(self, code: int, heard, out) -> None:
        """Collective: the rest of a replayed call into ``out`` (redist.cabi; the operand bound as it
        was made) whose status round, where this rank said ``code``, heard ``heard``."""
        try:
            _, problem = self._bind_call(out)  # accepted when the replay was made
            if problem is not None:
                raise InternalError(f"a replayed call's out= is refused now: {problem[1]}")
            self._exe.resume(code, heard)
        except BaseException:
            self._unbind_outs()  # as execute() does
            raise

    def _unbind_outs(self) -> None:
        """Bind every field back to its engine-owned result (what a call without out= does); also
        where the operand is released (a call refused for that took its out= first)."""
        if self._exe is None or self._state not in _PLANNED:
            return
        for f, o in enumerate(self._outs):
            if o is not None:
                self._exe.bind_output(None, f)
                self._outs[f] = None
        self._outs_bound = False

    def _host_capture_problem(self, stream) -> collective.Problem | None:
        """Why a host exchange cannot take ``stream`` (it is capturing a CUDA graph), or None."""
        try:
            capturing = self._ctx.cuda.driver.capture_status(stream_handle(stream))
        except Exception as e:  # noqa: BLE001
            return collective.problem(e)
        if not capturing:
            return None
        return ("InvalidValueError", ("execute(stream=...) with host operands on a stream that is capturing a "
                "CUDA graph: a host exchange runs on MPI when called and cannot be recorded into a graph; call it "
                "outside the capture, or capture GPU operands"))

    def _fresh_result(self, stream: int, wanted: bool = True):
        """result="fresh": a new array for this execute (on GPUs collective: symmetric memory, which a
        capture cannot hold: every rank learns first whether some rank's stream is capturing, and
        whether every rank wants one: a GPU rank that passed out= calls this with ``wanted=False``,
        which returns None)."""
        t, shape = self._template, self._exe.result.shape
        if t.memory == "cpu":
            perm = axis_order(self._out_order, len(shape))
            inverse = tuple(perm.index(d) for d in range(len(shape)))
            stored = tuple(shape[d] for d in perm)  # dense in memory, slowest axis first
            if t.package == "numpy":
                return np.empty(stored, dtype=t.dtype).transpose(inverse)
            import torch

            return torch.empty(stored, dtype=t.dtype).permute(*inverse)
        from ._symmetric import allocate_symmetric_memory

        problem = None
        try:
            if wanted and self._backend == "cuda" and self._ctx.cuda.driver.capture_status(stream):
                problem = ("InvalidStateError", (
                    'execute() with result="fresh" inside a CUDA graph capture: a fresh result is a collective '
                    'symmetric allocation, which a capture cannot hold; use result="persistent" (the default) or out='))
        except Exception as e:  # noqa: BLE001 -- a bad stream: raised on every rank
            problem = collective.problem(e)
        wants = collective.agree(self._ctx.engine.comm, problem, wanted)
        if not all(wants):
            if any(wants):  # a fresh result is one collective allocation: every rank or none
                lacking = [r for r, w in enumerate(wants) if not w]
                raise InvalidValueError(
                    f'execute() with result="fresh" on GPUs: rank(s) {lacking} passed out= and the others did not; a '
                    'fresh result is one collective symmetric allocation: pass out= on every rank or on none')
            return None
        return allocate_symmetric_memory(shape, t.package, dtype=t.dtype, axis_order=self._out_order,
                                         make_symmetric=True)

    def _bind_outs(self, out) -> tuple[tuple, collective.Problem | None]:
        """Several fields: bind each field's out= (None: its engine-owned result); (targets, problem)."""
        n = self._nfields
        if out is None:
            out = (None,) * n
        elif not _is_fields(out) or len(out) != n:
            got = f"{len(out)} entries" if _is_fields(out) else type(out).__name__
            return self._result, self._out_failed(f"out= must be a tuple of {n} arrays (one per field), got {got}", None)
        problem, ranges = None, []
        for f, o in enumerate(out):
            if o is None:
                if self._outs[f] is not None:
                    self._exe.bind_output(None, f)
                    self._outs[f] = None
                continue
            problem = problem or self._bind_out(o, f, ranges)
        self._outs_bound = any(o is not None for o in self._outs)
        for i, (f, lo, hi) in enumerate(ranges):  # two fields written into the same bytes
            for g, lo2, hi2 in ranges[i + 1:]:
                if lo < hi2 and lo2 < hi and problem is None:
                    problem = self._out_failed(f"field {g}'s out= overlaps field {f}'s", None)
        return tuple(r if o is None else o for r, o in zip(self._result, out)), problem

    def _bind_out(self, out, field: int, ranges: list | None = None) -> collective.Problem | None:
        """Check field ``field``'s ``out`` locally and bind it; its problem (None if fine) for the
        call's agreement. ``ranges`` (several fields) receives ``(field, lo, hi)``, the bytes it spans.

        Objects checked before are kept (weakly) with their buffer and layout signature, so a loop
        that alternates between a few out= arrays re-checks only what can change: writability and
        overlap with the operands; an object reshaped (or re-typed) in place since is checked anew.
        """
        try:
            hit = self._out_checked.get((id(out), field))
            checked = hit is not None and hit[0]() is out and hit[1] == layout_signature(out)
            if checked:
                _, _, buf, lo, hi = hit
            else:
                try:
                    op = wrap(out)
                except InvalidValueError as e:  # e.g. strides, a lazy torch flag: said of the out=
                    return self._out_failed(f"out= is refused: {e}", field)
                t = self._templates[field]
                if op.package != t.package:
                    return self._out_failed(f"out= must be a {t.package} array like the operand, got {op.package}",
                                            field)
                if op.dtype_key != t.dtype_key:
                    return self._out_failed(f"out= has dtype {op.dtype_name}, expected {t.dtype_name}", field)
                msg = self._exe.out_problem(op.buffer, field)
                if msg is not None:
                    return self._out_failed(msg, field)
                buf = op.buffer
                for g, res in enumerate(self._exe.results):  # another field's engine-owned result: peers write it
                    if g != field and buf.overlaps(res):
                        return self._out_failed(f"out= overlaps field {g}'s engine-owned result (the exchange writes "
                                                "it too)", field)
                lo, hi = buf.address_range()
                if len(self._out_checked) >= 8 * self._nfields:
                    self._out_checked.clear()
                try:
                    self._out_checked[(id(out), field)] = (weakref.ref(out), layout_signature(out),
                                                           dataclasses.replace(buf, owner=None), lo, hi)
                except TypeError:  # an object without weak references: checked every time
                    pass
            if ranges is not None:
                ranges.append((field, lo, hi))
            if self._template.package == "numpy" and not out.flags.writeable:
                return self._out_failed("out= is read-only", field)
            if self._state is _State.READY:
                for g, (p, (before, after)) in enumerate(zip(self._operand_ptrs, self._extents)):
                    if p is not None and lo < p + after and p + before < hi:
                        what = "the operand" if not self._fields else f"field {g}'s operand"
                        return self._out_failed(f"out= overlaps {what} (the exchange would read what it overwrites)",
                                                field)
            if out is not self._outs[field] or not checked:  # a new object, or this one changed in place
                self._exe.bind_output(buf, field)
                self._outs[field] = out
            if ranges is None and self._state is _State.READY and self._template.package == "numpy":
                self._again(out, buf)
            return None
        except Exception as e:  # noqa: BLE001 -- agreed on by the call
            return collective.problem(e)

    def _again_hit(self, out) -> tuple | None:
        """``out``'s record in ``_out_again`` where it may be taken again without its checks: the
        same object, still writable, with the layout (a record dtype's names too), data and against an
        operand it was checked with."""
        again = self._out_again.get(id(out))
        if (again is None or again[0]() is not out or not out.flags.writeable
                or again[1] != (out.shape, out.strides, out.dtype, out.dtype.names)
                or self._operand_ptrs[0] not in again[2]
                or data_pointer(out) != again[3].ptr):  # moved in place by __setstate__: checked again
            return None
        return again

    def _again(self, out, buf) -> None:
        """Keep ``out`` (numpy, one field, just accepted with the operand bound now) for calls that
        take it again without the checks: its layout, the operands it was checked against (up to
        4: a loop alternating operands), its buffer and its key (the key of its compiled replays,
        the same while the object and its layout are)."""
        layout = (out.shape, out.strides, out.dtype, out.dtype.names)  # a record dtype's names are settable
        op = self._operand_ptrs[0]
        hit = self._out_again.get(id(out))
        if hit is not None and hit[0]() is out and hit[1] == layout and hit[3].ptr == buf.ptr:
            self._out_again[id(out)] = (hit[0], layout, (op, *hit[2][:3]) if op not in hit[2] else hit[2], hit[3],
                                        hit[4])
            return
        if len(self._out_again) >= 8:
            self._out_again.clear()
        self._out_keys += 1
        try:
            self._out_again[id(out)] = (weakref.ref(out), layout, (op,), dataclasses.replace(buf, owner=None),
                                        self._out_keys)
        except TypeError:  # no weak references
            pass

    def _out_failed(self, msg: str, field: int | None = 0) -> collective.Problem:
        where = f"field {field}: " if self._fields and field is not None else ""
        return "InvalidValueError", f"execute(out=...): {where}{msg} (this rank's output box is {self.output_box})"

    def _compat_problem(self, op: Operand, field: int = 0) -> str | None:
        t = self._templates[field]
        for attr, what in (("package", "package"), ("memory", "memory space"), ("device_id", "device"),
                           ("dtype_key", "data type"), ("shape", "shape")):
            if getattr(op, attr) != getattr(t, attr):
                name = "dtype_name" if attr == "dtype_key" else attr
                return (f"The new operand's {what} ({getattr(op, name)}) doesn't match the original operand's "
                        f"({getattr(t, name)})")
        if op.size > 1 and op.strides != t.strides:
            return f"The new operand's strides ({op.strides}) don't match the original operand's ({t.strides})"
        return None

    def _alias_problem(self, op: Operand) -> str | None:
        """Why ``op`` cannot be read while this object writes its outputs, or None. The engine-owned
        results only: an out= is checked against the operand by the execute() that passes it, so
        the out= of the last call may become the next operand (a ping-pong loop)."""
        if self._exe is None:
            return None
        for f, written in enumerate(self._exe.results):
            if op.buffer.overlaps(written):
                where = f" of field {f}" if self._fields else ""
                return f"the new operand overlaps this object's own result{where} (the exchange would read what it overwrites)"
        return None

    def _objects(self) -> tuple:
        """The operand objects bound now, one per field."""
        return self._operand_obj if self._fields else (self._operand_obj,)

    def _field_index(self, field: int | None) -> int | None:
        if field is None:
            return None
        if not self._fields:
            raise InvalidValueError("field= needs a Redistribute of several fields (a tuple operand)")
        if not isinstance(field, int) or isinstance(field, bool) or not 0 <= field < self._nfields:
            raise InvalidValueError(f"field must be an int in [0, {self._nfields}), got {field!r}")
        return field

    def reset_operand(self, operand: ArrayT, *, field: int | None = None, stream: Any = None) -> None:
        """Collective: replace the operand by a compatible one (same package, dtype, shape,
        strides, memory space and device); checked on every rank, raised on every rank.

        With several fields pass a tuple (every field), or one array with ``field=`` (that field).
        """
        self._check_not_freed("reset_operand")
        if self._replays is not None:  # as the C ABI does: a checked rebind starts its replays afresh
            self._replays.forget()
        ops = None
        fields = range(self._nfields)
        with collective.attempt(self._ctx.engine.comm):
            if operand is None:
                raise InvalidValueError(
                    "reset_operand() requires a valid operand; use release_operand() to drop the current one")
            f0 = self._field_index(field)
            if f0 is not None:
                fields, objs = [f0], [operand]
            elif self._fields:
                if not _is_fields(operand) or len(operand) != self._nfields:
                    raise InvalidValueError(f"reset_operand() needs a tuple of {self._nfields} arrays (one per field) "
                                            "or one array with field=")
                objs = list(operand)
            else:
                objs = [operand]
            ops = [wrap(obj) for obj in objs]
            for f, op in zip(fields, ops):
                msg = self._compat_problem(op, f) or self._alias_problem(op)
                if msg is not None:
                    where = f"field {f}: " if self._fields else ""
                    raise InvalidValueError(f"{where}{msg} (this rank's input box is {self.input_box})")
        if self._fields and self._state not in _HAS_OPERAND and len(ops) < self._nfields:
            raise InvalidStateError("reset_operand(field=...) needs every field bound: the operands were released; "
                                    "pass a tuple of every field")
        self._bind(ops, list(fields))
        self._logger.debug("reset_operand: new operand bound")

    def reset_operand_unchecked(self, operand: ArrayT, *, field: int | None = None, stream: Any = None) -> None:
        """Replace the operand with no checks and no logging (the caller guarantees compatibility).

        On CUDA this updates kernel-node parameters of the instantiated graph (no re-capture):
        with several fields one update per kernel for the whole tuple, or for one ``field=``.
        """
        if field is not None and (not self._fields or self._state not in _HAS_OPERAND or field.__class__ is not int
                                  or not 0 <= field < self._nfields):
            self._check_not_freed("reset_operand_unchecked")
            self._field_index(field)  # one array, or not a field index: raises (local, like the C ABI's range check)
            raise InvalidStateError("reset_operand_unchecked(field=...) needs every field bound: the operands were "
                                    "released; pass a tuple of every field")
        if self._state in _PLANNED:
            if field is not None and self._replays is not None:  # as the C ABI does
                self._replays.forget()
            if not self._fields:
                ptr = self._pointer(operand)
                self._exe.rebind_input(ptr, operand)
                self._operand_obj = operand
                self._operand_ptrs[0] = ptr
            elif field is None:
                ptrs = [self._pointer(obj) for obj in operand]
                self._exe.rebind_inputs(ptrs, operand)
                self._operand_obj = tuple(operand)
                self._operand_ptrs = ptrs
            else:
                ptr = self._pointer(operand)
                self._exe.rebind_input(ptr, operand, field)
                self._operand_obj = self._operand_obj[:field] + (operand,) + self._operand_obj[field + 1:]
                self._operand_ptrs[field] = ptr
            self._state = _State.READY
            return
        self._check_not_freed("reset_operand_unchecked")
        if field is not None:
            self._bind([wrap(operand)], [field])
            return
        self._bind([wrap(obj) for obj in (operand if self._fields else (operand,))], list(range(self._nfields)))

    def _numpy_pointer(self, operand) -> int:
        """The address of a numpy ``operand``, kept (weakly) for the next rebind to the same object.

        numpy's ``__array_interface__`` costs ~2 us; an array's address never changes while it
        keeps its shape, which reset_operand_unchecked's contract already requires.
        """
        hit = self._ptrs.get(id(operand))
        if hit is not None and hit[0]() is operand:
            return hit[1]
        ptr = operand.__array_interface__["data"][0]
        if len(self._ptrs) >= 8:
            self._ptrs.clear()
        self._ptrs[id(operand)] = (weakref.ref(operand), ptr)
        return ptr

    def _bind(self, ops: list[Operand], fields: list[int]) -> None:
        if self._state in _PLANNED:
            for f, op in zip(fields, ops):
                self._exe.bind_input(op.buffer, f)
            self._state = _State.READY
        else:
            self._state = _State.NEW
        if self._fields:
            objs = list(self._operand_obj) if self._operand_obj is not None else [None] * self._nfields
            for f, op in zip(fields, ops):
                objs[f] = op.obj
                self._operand_ptrs[f] = op.ptr
            self._operand_obj = tuple(objs)
        else:
            self._operand_obj = ops[0].obj
            self._operand_ptrs[0] = ops[0].ptr

    def release_operand(self) -> None:
        """Drop every reference this object holds to the operand (and any device mirror of it).

        The plan is kept; call :meth:`reset_operand` before the next :meth:`execute`.
        Repeated calls are no-ops.
        """
        self._check_not_freed("release_operand")
        if self._state not in _HAS_OPERAND:
            self._logger.debug("release_operand: the operand is already released")
            return
        if self._exe is not None:
            self._exe.release_input()
        self._operand_obj = None
        self._operand_ptrs = [None] * self._nfields
        self._ptrs = {}
        self._state = _State.RELEASED if self._state is _State.READY else _State.NEW_RELEASED

    def graph(self, stream: Any = None) -> int:
        """The CUDA graph (``CUgraph`` handle as int) executed for ``stream``, for use as a child node."""
        self._need_planned("graph")
        return self._exe.graph(self._stream(stream))

    def update_captured(self, graph: Any, /) -> int:
        """Push the operand bound now into every copy of this exchange that :meth:`execute`
        recorded into the user's ``graph``.

        An execute on a stream that is capturing a CUDA graph (``torch.cuda.graph``, cupy's
        ``Stream.begin_capture``, ``cudaStreamBeginCapture``) records the exchange into that graph
        (redist's kernel nodes, or a child-graph node): a copy, which keeps the bindings it was recorded with. After
        :meth:`reset_operand_unchecked` (or :meth:`reset_operand`), call this to make the copies in
        ``graph`` read the new operand from the next replay on (launches already enqueued are not
        affected). Local: no communication, like :meth:`reset_operand_unchecked`. The copies keep
        the ``out=`` and ``sync_symmetric_memory`` they were recorded with (peers store into that
        ``out=``: changing it on one rank would desynchronise the job); if the last execute used
        others (an ``execute()`` into the engine-owned result in between, say), this raises
        InvalidStateError: execute once as captured, or capture again. Keep the arrays a graph was
        recorded with alive while you may replay it.

        ``graph``: a ``torch.cuda.CUDAGraph`` made with ``keep_graph=True`` and instantiated, a
        ``cupy.cuda.Graph``, or a ``(cudaGraph_t, cudaGraphExec_t)`` pair. Returns how many copies
        were updated. Once you destroy such graphs, call :meth:`release_captured`.
        """
        self._need_planned("update_captured")
        if self._state is not _State.READY:
            raise InvalidStateError("update_captured: the operand has been released; reset_operand() first")
        g, ge = graph_handles(graph)
        return self._exe.update_captured(g, ge)

    def release_captured(self) -> None:
        """Declare that no CUDA graph of yours holding a copy of this exchange (recorded by
        :meth:`execute` during a capture) will be launched again: you destroyed those graphs.

        Local. Until then the memory the copies use outlives :meth:`free` (it is retired and freed
        at ``redist.finalize()``) and ``release_workspace=True`` is refused. May be called after
        :meth:`free` too: the retired memory is then freed at the next plan (collectively, once
        every rank that recorded copies has released them). A no-op on host.
        """
        if self._release is not None:
            self._release()

    def free(self) -> None:
        """Collective: release every resource (waits for in-flight GPU work first). Idempotent."""
        if self._state is _State.FREED or self._state is None:
            return
        exe, self._exe = self._exe, None
        self._state = _State.FREED
        self._operand_obj = self._result = None
        self._outs, self._outs_bound = [None] * self._nfields, False
        self._out_checked, self._ptrs, self._out_again = {}, {}, {}
        self._replays = None  # exe.free() below makes its executable forget them
        if self._serial is not None:
            _runtime._unregister(self._serial)
        if exe is not None:
            exe.free()

    def _detach_result(self):
        """Hand the engine-owned result to the caller (function form): free() will not reclaim it."""
        if self._exe is not None:
            self._exe.detach_result()

    def __enter__(self) -> Redistribute[ArrayT]:
        return self

    def __exit__(self, *exc: object) -> bool:
        self.free()
        return False

    def __repr__(self) -> str:
        st = self._state.name if self._state is not None else "INVALID"
        return f"<redist.Redistribute {st} backend={getattr(self, '_backend', '?')}>"


def _fmt_global(boxes) -> str:
    from .engine.geometry import bounding_box

    g = bounding_box(boxes)
    return str(Box(*g)) if g else "empty"


def redistribute(operand: ArrayT, /, input_distribution: DistributionLike, output_distribution: DistributionLike, *,
                 sync_symmetric_memory: bool = True, options: RedistributeOptions | dict[str, Any] | None = None,
                 stream: Any = None) -> ArrayT:
    """Collective: redistribute ``operand`` once (plan + execute + free) and return the result.

    The result belongs to the caller. For GPU operands it lives on the symmetric heap: free it
    with :func:`redist.free_symmetric_memory` (collective), as with nvmath-python.
    """
    with Redistribute(operand, input_distribution, output_distribution, options=options, stream=stream) as r:
        if r.nfields > 1 and r.memory_space == "cuda":  # the same everywhere (agreed at construction)
            raise NotSupportedError(
                "redistribute() of several fields on GPUs: their results share one symmetric allocation, which "
                "free_symmetric_memory cannot free field by field; use Redistribute((...), ...) and its persistent "
                "results")
        r.plan(stream=stream)
        result = r.execute(stream=stream, sync_symmetric_memory=sync_symmetric_memory)
        r._detach_result()  # free() below waits for the GPU work, then leaves the result to the caller
        return result
