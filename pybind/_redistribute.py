# SPDX-License-Identifier: Apache-2.0
"""Redistribute: the stateful, plan-once / execute-many redistribution object."""

from __future__ import annotations

import dataclasses
import pickle
import functools
import logging
import time
import weakref
from typing import Any, Generic, Literal, TypeVar

import numpy as np

from . import _runtime, _wisdom
from ._binding import _POINTER, _Binding, _is_fields, _template, _wrap_fields
from ._distributions import Box, Distribution
from ._replays import _Replays
from ._resolve import normal_global_shape, resolve_boxes
from ._operands import as_array, wrap
from ._options import RedistributeOptions, ranked_logger
from ._state import _HAS_OPERAND, _PLANNED, _RELEASED_MSG, _State
from ._streams import current_stream, graph_handles, stream_handle
from .engine import backend, collective
from .engine.buffer import byte_extent
from .engine.geometry import axis_order, normal_order
from .engine.errors import InvalidStateError, InvalidTypeError, InvalidValueError, NotSupportedError
from .engine.plan import fuse, make_plan
from .engine.validate import RankSpec, check_boxes, check_fields, check_operands, consensus_order, raise_first

__all__ = ["Redistribute", "redistribute"]

#: the operand's array type (numpy.ndarray, torch.Tensor, cupy.ndarray or RawArray): execute()
#: returns the same type
ArrayT = TypeVar("ArrayT")
DistributionLike = Any  # a Distribution, or a (lower, upper) pair taken as a Box


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


class Redistribute(_Binding, _Replays, Generic[ArrayT]):
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
    global_shape
        The global array's shape, checked (optional; the same on every process). Without it the
        global shape is inferred: from the local extents under a :class:`Slab` or
        :class:`BlockNonCyclic` input distribution, as the input boxes' bounding box for
        :class:`Box`. A mismatch (every process passing the whole array as its slab, say) raises
        :class:`InvalidValueError` on every process, naming the inferred shape and each box.

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
                 *, options: RedistributeOptions | dict[str, Any] | None = None, stream: Any = None,
                 global_shape: tuple[int, ...] | None = None) -> None:
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
                global_shape=normal_global_shape(global_shape),
            )
            ctor_stream = None if stream is None else stream_handle(stream)
        except Exception as e:  # noqa: BLE001 -- any local failure is raised on every rank below
            spec = RankSpec(rank=rank, error=collective.problem(e))
        specs = collective.agree(comm, None, spec)
        # From here on every rank computes the same thing from the same data.
        raise_first(specs, check_operands)
        raise_first(specs, check_fields)
        in_boxes, out_boxes = resolve_boxes([s.in_dist for s in specs], [s.out_dist for s in specs],
                                            [s.shape for s in specs], [s.global_shape for s in specs])
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
        self._torch_operand = self._template.package == "torch"  # (its data pointer is read every call: moved?)
        self._in_boxes, self._out_boxes = in_boxes, out_boxes
        # per field, per rank: the operand's element strides
        self._all_strides = [[s.strides for s in specs]] + [[s.fields[f][3] for s in specs]
                                                             for f in range(len(ops) - 1)]
        self._out_order = rl if isinstance(rl, tuple) else consensus_order(specs)  # a tuple is a true permutation
        self._ctor_stream = ctor_stream
        self._result = None
        # per field: a weak reference to the out= object bound now (None: the engine-owned result); weak, so that
        # an out= the caller drops (host symmetric memory freed and dropped) goes while this object lives
        self._outs: list = [None] * len(ops)
        self._outs_bound = False  # some field has an out= bound (several fields)
        # (id, field) -> (weak reference, layout signature, Buffer, lo, hi) of out= objects checked before
        self._out_checked: dict = {}
        # (field, type, memory key) -> (Buffer, lo, hi, clear) of torch and cupy out= checked before: a new object
        # laying out the same memory alike is bound without the checks (_Binding._same_memory)
        self._out_memory: dict = {}
        # one field, not numpy: (the weak reference bound in _outs[0], its signature, the operand address it was
        # checked against, the signature function) of the out= bound now, taken again by the next call unchecked
        self._out_fast: tuple | None = None
        # one field, numpy: id -> (weak reference, shape/strides/dtype/names, operand addresses, Buffer, key) of
        # out= objects a call accepted (a time loop's few arrays: taken again without the checks; _again).
        # numpy refuses to resize an array that has weak references, but __setstate__ moves its data: compared.
        self._out_again: dict = {}
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
        self._pointer = _POINTER[op.package]
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
        self._plan = self._release = self._tuning = None
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
        tuning = self.tuning
        return f"{self._plan.describe()}\n{self._exe.describe()}" + (f"\n{tuning.describe()}" if tuning else "")

    @property
    def tuning(self) -> Any:
        """What ``tune="measure"``/``"wisdom"`` measured and chose at :meth:`plan` (``chosen``, ``times``:
        per candidate the median of its calls' slowest rank in seconds, ``source``, ``describe()``); None with
        ``tune="estimate"`` or before planning."""
        return self._tuning

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
                logger=self._logger if self._logger.isEnabledFor(logging.INFO) else None,
                **_wisdom.tune_options(o, self._templates, self._all_strides,
                                       self._objects() if self._state is _State.NEW else ()))
        exe = backend.lower(plan, ctx.engine, lower_opts)
        with collective.attempt(ctx.engine.comm, on_failure=exe.free):  # roll back on every rank
            if self._state is _State.NEW:
                for f, obj in enumerate(self._objects()):
                    exe.bind_input(wrap(obj).buffer, f)
            results = tuple(as_array(exe.results[f], t, owner=exe) for f, t in enumerate(self._templates))
            self._result = results if self._fields else results[0]
        self._plan, self._exe = plan, exe
        self._tuning = getattr(exe, "tuning", None)  # engine/tune.py's record (kept after free())
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
        moved = self._torch_operand and self._operand_moved()
        if moved:
            replays = None  # rebound or refused below
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
        elif moved or self._template.package == "numpy":
            problem = problem or self._operands_moved()
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
        self._out_checked, self._out_again, self._out_fast, self._out_memory = {}, {}, None, {}
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
                 stream: Any = None, global_shape: tuple[int, ...] | None = None) -> ArrayT:
    """Collective: redistribute ``operand`` once (plan + execute + free) and return the result.

    The result belongs to the caller. For GPU operands it lives on the symmetric heap: free it
    with :func:`redist.free_symmetric_memory` (collective), as with nvmath-python.
    """
    with Redistribute(operand, input_distribution, output_distribution, options=options, stream=stream,
                      global_shape=global_shape) as r:
        if r.nfields > 1 and r.memory_space == "cuda":  # the same everywhere (agreed at construction)
            raise NotSupportedError(
                "redistribute() of several fields on GPUs: their results share one symmetric allocation, which "
                "free_symmetric_memory cannot free field by field; use Redistribute((...), ...) and its persistent "
                "results")
        r.plan(stream=stream)
        result = r.execute(stream=stream, sync_symmetric_memory=sync_symmetric_memory)
        r._detach_result()  # free() below waits for the GPU work, then leaves the result to the caller
        return result
