# SPDX-License-Identifier: Apache-2.0
"""Redistribute: the stateful, plan-once / execute-many redistribution object."""

from __future__ import annotations

import dataclasses
import enum
import logging
import time

from . import _runtime
from ._distributions import Box, Distribution, resolve_boxes
from ._operands import Operand, wrap
from ._options import RedistributeOptions
from .engine.errors import InvalidStateError, InvalidTypeError, InvalidValueError, NotInitializedError, NotSupportedError
from .engine.plan import make_plan
from .engine.validate import RankSpec, consensus_order, local_error, raise_first, _exception_class

__all__ = ["Redistribute", "redistribute"]


class _State(enum.Enum):
    NEW = "constructed, operand bound, not planned"
    NEW_RELEASED = "constructed, operand released, not planned"
    READY = "planned, operand bound"
    RELEASED = "planned, operand released"
    FREED = "freed"


_PLANNED = (_State.READY, _State.RELEASED)
_HAS_OPERAND = (_State.NEW, _State.READY)


def _as_distribution(d, which: str) -> Distribution:
    if isinstance(d, Distribution):
        return d
    if isinstance(d, (tuple, list)) and len(d) == 2:  # a raw (lower, upper) pair, e.g. from the C ABI
        return Box(*d)
    raise InvalidTypeError(f"{which}_distribution must be a redist Distribution or a (lower, upper) pair, got {d!r}")


def _raise_gathered(errors) -> None:
    """Raise the first rank's error (identically on every rank)."""
    for rank, err in enumerate(errors):
        if err is not None:
            name, msg = err
            raise _exception_class(name)(msg if msg.startswith("rank ") else f"rank {rank}: {msg}")


class Redistribute:
    """Redistribute a distributed N-D array: plan once, execute many times.

    Collective construction: every process passes its local piece (``operand``) and the
    input/output distributions; every process gets the same validation error if anything is
    wrong on any process.

    Parameters
    ----------
    operand
        This process's box of the global array: ``numpy.ndarray``, ``torch.Tensor`` (CPU or
        CUDA), ``cupy.ndarray``, or :class:`redist.RawArray`. Positional-only. C-, F-ordered or
        strided (e.g. padded with ghost layers; positive strides). GPU operands need **not**
        be on the NVSHMEM symmetric heap (a difference from nvmath-python).
    input_distribution, output_distribution
        :class:`Slab`, :class:`BlockNonCyclic`, or :class:`Box` (each process its own box;
        a plain ``(lower, upper)`` pair is accepted as a Box). Any number of dimensions; boxes
        may be empty.
    options
        :class:`RedistributeOptions` or a dict of its fields.
    stream
        CUDA stream for GPU work (cupy/torch/cuda.core stream or a raw ``cudaStream_t`` int);
        ignored on the host backend.

    Differences from nvmath-python 1.0 (deliberate)
    -----------------------------------------------
    * The result is persistent: :meth:`execute` returns an array owned by this object, reused
      (overwritten) by the next :meth:`execute` and released by :meth:`free`. Pass ``out=`` to
      write into your own array instead.
    * Host operands run on MPI, with no GPU round trip (``execution="auto"``).
    * All validation is collective and raised identically on every process.
    * Any number of dimensions, any element size, strided inputs, empty boxes.
    * :meth:`reset_operand` is collective (its checks are, too).
    """

    def __init__(self, operand, /, input_distribution, output_distribution, *, options=None, stream=None):
        self._state = None
        self._path = None
        self._serial = None
        ctx = _runtime.get_context()
        pg = ctx.process_group
        err, op, opts, din, dout = None, None, None, None, None
        try:
            opts = RedistributeOptions.coerce(options)
            op = wrap(operand)
            din = _as_distribution(input_distribution, "input")
            dout = _as_distribution(output_distribution, "output")
        except Exception as e:  # noqa: BLE001 -- any local failure is raised on every rank below
            err = local_error(e)
        mine = (err, din, dout, None if op is None else (
            op.package, op.memory, op.device_id, op.dtype_name, op.itemsize, op.shape, op.strides, op.layouts()),
            None if opts is None else opts.fingerprint(), ctx.device_id)
        everyone = pg.allgather(mine)
        # From here on every rank computes the same thing from the same data.
        _raise_gathered([e[0] for e in everyone])
        in_boxes, out_boxes = resolve_boxes([e[1] for e in everyone], [e[2] for e in everyone],
                                            [e[3][5] for e in everyone])
        specs = [
            RankSpec(rank=r, ndim=len(o[5]), dtype=o[3], itemsize=o[4], package=o[0], memory=o[1], layouts=o[7],
                     shape=o[5], strides=o[6], in_box=in_boxes[r], out_box=out_boxes[r], options=f)
            for r, (_, _, _, o, f, _) in enumerate(everyone)
        ]
        if opts.result_layout != "auto":  # a forced result order makes operand layouts irrelevant
            specs = [dataclasses.replace(s, layouts=(opts.result_layout,)) for s in specs]
        raise_first(specs)
        for r, (_, _, _, o, _, dev) in enumerate(everyone):
            if o[1] == "cuda" and o[2] != dev:
                raise InvalidValueError(
                    f"rank {r}: the operand is on CUDA device {o[2]} but redist runs on device {dev} there "
                    "(see redist.initialize(device_id=...))"
                )
        memory = specs[0].memory
        if opts.execution == "cpu" and memory == "cuda":
            raise NotSupportedError("execution='cpu' needs host operands; these operands are in GPU memory")
        execution = "cuda" if (memory == "cuda" or opts.execution == "cuda") else "cpu"
        if execution == "cuda" and ctx.cuda is None:
            raise NotInitializedError(
                "CUDA execution needs redist initialised with a GPU (NVSHMEM); this run is CPU-only: "
                "check redist.get_context().device_id and the [cuda] extra"
            )
        self._ctx, self._options = ctx, opts
        self._logger = opts.logger if opts.logger is not None else logging.getLogger()
        self._operand: Operand | None = op
        self._template = dataclasses.replace(op, obj=None, ptr=0)
        self._in_boxes, self._out_boxes = in_boxes, out_boxes
        self._all_strides = [s.strides for s in specs]
        self._out_order = consensus_order(specs)
        self._execution = execution
        self._last_out = None  # (object, Operand) of the last out= that passed the collective check
        self._plan = None
        self._state = _State.NEW
        self._serial = _runtime._register(self)
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info(
                "Redistribute: %d ranks, global %s, %s %s itemsize %d, %s-order result, execution %s; "
                "rank %d input %s -> output %s",
                pg.nranks, specs and _fmt_global(in_boxes), op.package, op.dtype_name, op.itemsize,
                self._out_order, execution, pg.rank, Box(*in_boxes[pg.rank]), Box(*out_boxes[pg.rank]),
            )

    # --- properties -------------------------------------------------------------------------

    input_box = property(lambda self: Box(*self._in_boxes[self._ctx.process_group.rank]),
                         doc="This process's input box.")
    output_box = property(lambda self: Box(*self._out_boxes[self._ctx.process_group.rank]),
                          doc="This process's output box.")
    layout = property(lambda self: self._out_order, doc='"C" or "F": the order of the result.')
    result_layout = layout
    execution_space = property(lambda self: self._execution, doc='"cpu" or "cuda".')
    memory_space = property(lambda self: self._template.memory, doc='"cpu" or "cuda": where operands live.')
    device_id = property(lambda self: self._ctx.device_id)
    blocking = property(lambda self: self._options.blocking)

    @property
    def plan_description(self) -> str:
        """The transfer plan as text (after :meth:`plan`)."""
        self._need_planned("describe")
        return self._plan.describe()

    # --- state machine helpers --------------------------------------------------------------

    def _check_not_freed(self, what: str):
        if self._state is _State.FREED or self._state is None:
            raise InvalidStateError(f"Redistribute.{what}() cannot be called after free()")

    def _need_planned(self, what: str):
        self._check_not_freed(what)
        if self._state not in _PLANNED:
            raise InvalidStateError(f"Redistribute.{what}() cannot be called before plan() has been called.")

    # --- the API ------------------------------------------------------------------------------

    def plan(self, stream=None) -> None:
        """Collective: build the transfer plan and lower it to the execution backend.

        For CUDA execution this captures and instantiates the CUDA graph for ``stream``.
        Planning twice is a no-op. On failure every rank raises and the object stays unplanned.
        """
        self._check_not_freed("plan")
        if self._state in _PLANNED:
            self._logger.debug("Redistribute.plan(): already planned; redoing the plan is not supported")
            return
        pg = self._ctx.process_group
        t0 = time.perf_counter()
        path, err = None, None
        try:
            plan = make_plan(pg.rank, self._in_boxes, self._out_boxes, itemsize=self._template.itemsize,
                             in_strides=self._all_strides, out_order=self._out_order)
            operand = self._operand if self._state is _State.NEW else self._template
            log = self._logger if self._logger.isEnabledFor(logging.INFO) else None
            if self._execution == "cpu":
                from ._paths import HostPath as cls
            else:
                from ._cuda_path import CudaPath as cls
            path = cls(plan, operand, self._ctx, self._options, log, stream)
        except Exception as e:  # noqa: BLE001 -- collective failure handling below
            err = local_error(e)
        errors = pg.allgather(err)
        if any(e is not None for e in errors):
            if path is not None:  # roll back: every rank that got this far frees what it made
                path.free()
            _raise_gathered(errors)
        self._plan, self._path = plan, path
        self._state = _State.READY if self._state is _State.NEW else _State.RELEASED
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info(
                "plan: %.3f ms on %s; rank %d sends %s, receives %s, keeps %d B",
                (time.perf_counter() - t0) * 1e3, self._execution, pg.rank,
                {d: b for d, b in plan.send_bytes.items()}, {s: b for s, b in plan.recv_bytes.items()},
                plan.local.nbytes if plan.local else 0,
            )
            self._logger.debug("%s", plan.describe())

    def execute(self, stream=None, release_workspace: bool = False, sync_symmetric_memory: bool = True, out=None):
        """Collective: redistribute the current operand; return this process's output box.

        Returns the engine-owned result (persistent: overwritten by the next ``execute``,
        released by :meth:`free`), or ``out`` when given. ``out`` must have the result's shape,
        dtype, package and layout (dense, in :attr:`layout` order); on GPUs it must be on the
        symmetric heap, the same allocation on every rank. Pass ``out`` on all ranks alike.
        ``release_workspace`` and ``sync_symmetric_memory`` follow nvmath-python and must be
        equal on all ranks.
        """
        state = self._state
        if state is not _State.READY:
            self._check_not_freed("execute")
            if state in _PLANNED:
                raise InvalidStateError(
                    "Execution cannot be performed after the operand has been released. Use reset_operand() "
                    "to provide a new operand before performing the execution."
                )
            raise InvalidStateError("Execution cannot be performed before plan() has been called.")
        out_op = None
        if out is not None:
            last = self._last_out
            if last is not None and last[0] is out:
                out_op = last[1]
            else:
                out_op = self._check_out(out)
        return self._path.execute(stream=stream, out=out_op, release_workspace=release_workspace,
                                  sync_symmetric_memory=sync_symmetric_memory)

    def _check_out(self, out) -> Operand:
        problem, op = None, None
        try:
            op = wrap(out)
            problem = self._path.out_problem(op)
            sig = self._path.out_signature(op) if problem is None else None
        except Exception as e:  # noqa: BLE001
            problem, sig = str(e), None
        gathered = self._ctx.process_group.allgather((problem, sig))
        _raise_gathered([None if p is None else ("InvalidValueError", f"out= {p}") for p, _ in gathered])
        sigs = {s for _, s in gathered}
        if len(sigs) > 1:
            raise InvalidValueError(
                "out= must be the same symmetric allocation on every rank (got different heap offsets: "
                f"{[s for _, s in gathered]})"
            )
        self._last_out = (out, op)
        return op

    def _compat_problem(self, op: Operand) -> str | None:
        t = self._template
        for attr, what in (("package", "package"), ("memory", "memory space"), ("device_id", "device"),
                           ("dtype_name", "data type"), ("shape", "shape")):
            if getattr(op, attr) != getattr(t, attr):
                return (f"The new operand's {what} ({getattr(op, attr)}) doesn't match the original operand's "
                        f"({getattr(t, attr)})")
        if op.size > 1 and op.strides != t.strides:
            return f"The new operand's strides ({op.strides}) don't match the original operand's ({t.strides})"
        return None

    def reset_operand(self, operand, *, stream=None) -> None:
        """Collective: replace the operand by a compatible one (same package, dtype, shape,
        strides, memory space and device); checked on every rank, raised on every rank."""
        self._check_not_freed("reset_operand")
        problem, op = None, None
        try:
            if operand is None:
                raise InvalidValueError(
                    "reset_operand() requires a valid operand; use release_operand() to drop the current one")
            op = wrap(operand)
            msg = self._compat_problem(op)
            if msg is not None:
                raise InvalidValueError(msg)
        except Exception as e:  # noqa: BLE001 -- raised on every rank below
            problem = local_error(e)
        _raise_gathered(self._ctx.process_group.allgather(problem))
        self._bind(op, stream)
        if self._logger.isEnabledFor(logging.INFO):
            self._logger.info("reset_operand: new operand bound")

    def reset_operand_unchecked(self, operand, *, stream=None) -> None:
        """Replace the operand with no checks and no logging (the caller guarantees compatibility).

        On CUDA this updates kernel-node parameters of the instantiated graphs (no re-capture).
        """
        state = self._state
        if state in _PLANNED:
            self._path.rebind(operand, stream)
            self._operand_obj = operand
            self._state = _State.READY
            return
        self._check_not_freed("reset_operand_unchecked")
        self._bind(wrap(operand), stream)

    def _bind(self, op: Operand, stream) -> None:
        if self._state in _PLANNED:
            self._path.bind_input(op, stream)
            self._state = _State.READY
        else:
            self._state = _State.NEW
        self._operand = op
        self._operand_obj = op.obj

    def release_operand(self) -> None:
        """Drop this object's references to the operand (and any device mirror of it).

        The plan is kept; call :meth:`reset_operand` before the next :meth:`execute`.
        Repeated calls are no-ops.
        """
        self._check_not_freed("release_operand")
        if self._state not in _HAS_OPERAND:
            self._logger.info("release_operand: the operand is already released")
            return
        if self._path is not None:
            self._path.release_operand()
        self._operand = None
        self._operand_obj = None
        self._state = _State.RELEASED if self._state is _State.READY else _State.NEW_RELEASED

    def graph(self, stream=None) -> int:
        """The CUDA graph (``CUgraph`` handle as int) executed for ``stream``, for use as a child node."""
        self._need_planned("graph")
        return self._path.graph(stream)

    def free(self) -> None:
        """Collective: release every resource (waits for in-flight GPU work first). Idempotent."""
        if self._state is _State.FREED or self._state is None:
            return
        path, self._path = self._path, None
        self._state = _State.FREED
        self._operand = self._operand_obj = None
        self._last_out = None
        if self._serial is not None:
            _runtime._unregister(self._serial)
        if path is not None:
            path.free()

    def _detach_result(self):
        """Hand the engine-owned result to the caller (function form): free() will not reclaim it."""
        if self._path is not None:
            self._path.detach_result()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()
        return False

    def __repr__(self):
        st = self._state.name if self._state is not None else "INVALID"
        return f"<redist.Redistribute {st} execution={getattr(self, '_execution', '?')}>"


def _fmt_global(boxes) -> str:
    from .engine.geometry import bounding_box

    g = bounding_box(boxes)
    return str(Box(*g)) if g else "empty"


def redistribute(operand, /, input_distribution, output_distribution, *, sync_symmetric_memory: bool = True,
                 options=None, stream=None):
    """Collective: redistribute ``operand`` once (plan + execute + free) and return the result.

    The result belongs to the caller. For GPU operands it lives on the symmetric heap: free it
    with :func:`redist.free_symmetric_memory` (collective), as with nvmath-python.
    """
    with Redistribute(operand, input_distribution, output_distribution, options=options, stream=stream) as r:
        r.plan(stream=stream)
        result = r.execute(stream=stream, sync_symmetric_memory=sync_symmetric_memory)
        r._detach_result()  # free() below waits for the GPU work, then leaves the result to the caller
        return result
