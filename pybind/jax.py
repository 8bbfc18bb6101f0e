# SPDX-License-Identifier: Apache-2.0
"""redist.jax: redistribution of JAX arrays, eager and under ``jax.jit``, ``jax.grad`` and ``jax.vmap``.

>>> import jax, redist, redist.jax
>>> rank = redist.get_context().process_group.rank
>>> x = jax.numpy.ones(redist.Slab.X.shape(rank, (8, 8)))
>>> y = jax.jit(lambda a: redist.jax.redistribute(a, redist.Slab.X, redist.Slab.Y))(x)

One process per MPI rank (as mpi4jax): each process's JAX sees its own local device, and
:func:`redistribute` moves this rank's box of the global array. The exchange is an XLA custom call
(``jax.ffi``; the typed handlers of ``_jax_ffi.cc``, compiled once per jaxlib by
:mod:`redist._jax_build`) that runs redist's plan on XLA's buffers: on CPU through the host
backend (its compiled replays where a call repeats its buffers), on GPU on XLA's stream.

Planning is collective and happens when the call is traced (or run eagerly): the planned objects
live in a collective, bounded plan cache (:mod:`redist._plan_cache`, :data:`CACHE_SIZE` entries),
keyed by this rank's shape and dtype, the distributions and the options, and agreed across ranks
at every lookup. A compiled function keeps the number of its entry; an entry evicted (or freed by
:func:`clear_cache` or :func:`redist.finalize`) makes a later run of that compiled function raise
:class:`~redist.InvalidStateError` on every rank (trace it again: ``jax.clear_caches()``).

Ordering: every call carries an *ordered effect* (a token threaded by JAX), so the custom calls of
one process run in program order, one at a time, and are never removed as dead code. XLA may move
the rest of the program around them (independent arithmetic before or after), which changes no
result. They stay collective because every rank runs the same program: a function traced, or a
compiled function run, on some ranks only leaves the others waiting, as any MPI collective; where
the ranks' next lookups differ, the plan cache raises the same error on every rank.
"""

from __future__ import annotations

import ctypes
import dataclasses
import itertools
import logging
import types
from collections.abc import Hashable
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch, effects
from jax._src.core import abstract_token
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from . import _jax_build, _runtime
from ._adjoint import adjoint, local_region
from ._distributions import Box
from ._operands import RawArray
from ._options import RedistributeOptions
from ._plan_cache import DEFAULT_MAXSIZE, PlanCache
from ._redistribute import DistributionLike, Redistribute
from .engine import collective
from .engine import geometry as geo
from .engine.errors import InvalidStateError, NotSupportedError, RedistError

__all__ = ["CACHE_SIZE", "cache_info", "clear_cache", "redistribute", "set_cache_size"]

#: planned redistributions the cache keeps by default (least recently used freed first)
CACHE_SIZE = DEFAULT_MAXSIZE

_TARGET = "redist_redistribute"
_cache = PlanCache("redist.jax", CACHE_SIZE, settle=lambda: _settle())  # finalize() waits for exchanges in flight
_entries: dict[int, _Entry] = {}  # entry number -> planned object (what the handler runs)
_numbers = itertools.count(1)
# the problem of the last failed handler call (an eager call re-raises it as the redist class); the
# calls run one at a time (the ordered effect), on whichever thread XLA runs them
_failed = types.SimpleNamespace(problem=None)

# CPU results smaller than this (bytes) that XLA hands over for the first time, or whose out= calls keep
# running in Python, get the engine-owned result (a replayed call) copied in: there the copy costs less than a
# call through Python (~0.15-0.2 ms: the checks of a new out= and the exchange in Python). Larger results are
# always written by the exchange as out=, new buffer or not: their copy would cost more (perf/RESULTS.md, #46)
_COPY_BELOW = 2 << 20
# out= calls into one small XLA buffer that may run in Python (its first checked call, the calls before its
# replay is installed) before that buffer gets the engine-owned result copied into it instead
_SLOW_OUTS = 3

# 64-bit dtypes that JAX turns into 32-bit ones while jax_enable_x64 is off
_WIDE = {np.dtype(t) for t in (np.float64, np.int64, np.uint64, np.complex128)}


class _Entry:
    """One planned redistribution of the cache, for operands of one shape and dtype."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, input_distribution, output_distribution,
                 options: RedistributeOptions, gpu: bool) -> None:
        self.dtype, self.in_shape, self.gpu = dtype, shape, gpu
        self.options = options
        if gpu:  # an operand to plan with; the calls rebind XLA's buffers
            with jax.ensure_compile_time_eval():  # planned while tracing: a real device buffer, not a tracer
                self._placeholder = jnp.zeros(shape, dtype)
            operand: Any = RawArray(self._placeholder.unsafe_buffer_pointer(), shape, itemsize=dtype.itemsize,
                                    memory="cuda", device_id=_runtime.context().device_id, dtype=dtype)
        else:
            operand = np.empty(shape, dtype)
        self.r = Redistribute(operand, input_distribution, output_distribution, options=options)
        try:
            self.r.plan()
        except BaseException:
            self.r.free()
            raise
        self.out_shape = tuple(self.r.output_box.box_shape)
        self.in_bytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        self.out_bytes = int(np.prod(self.out_shape, dtype=np.int64)) * dtype.itemsize
        self._views: dict[tuple[int, bool], np.ndarray] = {}  # (address, writable) -> numpy view of XLA's buffer
        self._slow: dict[int, int] = {}  # result address -> its out= calls that ran in Python
        self._raws: dict[tuple[int, bool], RawArray] = {}  # GPU: _view's RawArray of XLA's buffer at (address, writable)
        self._adjoint = None
        self.number = next(_numbers)
        _entries[self.number] = self

    def _view(self, ptr: int, shape: tuple[int, ...], nbytes: int, writable: bool) -> np.ndarray:
        """A numpy view of XLA's buffer at ``ptr`` (kept by address: a call that gets the operand of an
        earlier one rebinds the same object, and its call replays in C)."""
        view = self._views.get((ptr, writable))
        if view is None:
            if nbytes == 0:
                view = np.empty(shape, self.dtype)
            else:
                view = np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), self.dtype).reshape(shape)
            view.flags.writeable = writable
            if len(self._views) >= 16:
                self._views.clear()
                self._slow.clear()
            self._views[(ptr, writable)] = view
        return view

    def _raw(self, ptr: int, shape: tuple[int, ...], writable: bool) -> RawArray:
        """GPU: XLA's device buffer at ``ptr`` as a RawArray (kept by address, as :meth:`_view`'s)."""
        raw = self._raws.get((ptr, writable))
        if raw is None:
            if len(self._raws) >= 16:
                self._raws.clear()
            raw = self._raws[(ptr, writable)] = RawArray(ptr, shape, itemsize=self.dtype.itemsize, memory="cuda",
                                                         device_id=self.r.device_id, dtype=self.dtype,
                                                         readonly=not writable)
        return raw

    def run(self, src: int, dst: int, stream: int) -> None:
        """Collective: the exchange from XLA's operand at ``src`` into XLA's result at ``dst``."""
        r = self.r
        if self.gpu:
            r.reset_operand_unchecked(self._raw(src, self.in_shape, False))
            # XLA's buffer as out= (device memory of any allocator, #44): the exchange stores into it, one pass;
            # an empty result has nothing to land (XLA's pointer may be null)
            r.execute(stream=stream, out=self._raw(dst, self.out_shape, True) if self.out_bytes else None)
            return
        r.reset_operand_unchecked(self._view(src, self.in_shape, self.in_bytes, False))
        out = self._views.get((dst, True))
        if self.out_bytes < _COPY_BELOW and (out is None or self._slow.get(dst, 0) > _SLOW_OUTS):
            # a small buffer XLA hands over for the first time (or whose calls keep taking the Python path): the
            # engine-owned result (its calls replay in C), copied into it; the view is kept for the next time
            np.copyto(self._view(dst, self.out_shape, self.out_bytes, True), r.execute())
            return
        # a buffer seen before (a loop gets the same few back), or a large one: written by the exchange itself
        # as out=, one pass less over the result; the calls into one buffer replay in C from the third on (while
        # the object keeps that buffer's replay: a loop cycling through more buffers runs them in Python)
        if out is None:
            out = self._view(dst, self.out_shape, self.out_bytes, True)
        before = r._python_calls
        r.execute(out=out)
        if r._python_calls != before:
            self._slow[dst] = self._slow.get(dst, 0) + 1

    @property
    def adjoint(self):
        """The backward's plan (:func:`redist._adjoint.adjoint`), made once."""
        if self._adjoint is None:
            self._adjoint = adjoint(self.r._in_boxes, self.r._out_boxes)
        return self._adjoint

    @property
    def collective_free(self) -> bool:
        """Whether :meth:`free` is collective (a GPU plan's is): the cache then frees it at a lookup
        every rank agrees on, not at ``clear_cache()`` (:mod:`redist._plan_cache`)."""
        return self.gpu

    def retire(self) -> None:
        """Local (cleared from the cache, freed later): compiled calls of it raise from now on."""
        _entries.pop(self.number, None)
        self._views.clear()
        self._raws.clear()

    drop = retire  # not freed at all (caches that diverged): released when collected

    def free(self) -> None:
        """Collective (the cache's eviction): the planned object goes; compiled calls of it then raise."""
        self.retire()
        self.r.free()


def _live(number: int) -> _Entry:
    """The planned entry ``number``; InvalidStateError where it was freed (the same on every rank: the
    caches agree)."""
    entry = _entries.get(number)
    if entry is None:
        raise InvalidStateError(
            f"redist.jax: this compiled function calls planned redistribution #{number}, which was freed (evicted "
            "from the plan cache, clear_cache() or redist.finalize()); trace it again (jax.clear_caches()) or keep "
            "more plans (set_cache_size)")
    return entry


@ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_int64,
                  ctypes.c_int64, ctypes.c_void_p, ctypes.c_int64)
def _execute(number, src, dst, stream, src_bytes, dst_bytes, msg, room):
    """What the handler calls (ctypes takes the GIL): 0, or 1 with the problem's class and message in ``msg``."""
    try:
        entry = _live(number)
        if src_bytes != entry.in_bytes or dst_bytes != entry.out_bytes:  # never: the call was traced for them
            raise InvalidStateError(f"redist.jax: XLA passed {src_bytes} B -> {dst_bytes} B to a plan for "
                                    f"{entry.in_bytes} B -> {entry.out_bytes} B")
        entry.run(src, dst, stream)
        _failed.problem = None
        return 0
    except BaseException as e:  # noqa: BLE001 -- handed to XLA as the call's error
        problem = collective.problem(e)
        _failed.problem = problem
        text = f"{problem[0]}: {problem[1]}".encode("utf-8", "replace")[: room - 1]
        ctypes.memmove(msg, text + b"\0", len(text) + 1)
        return 1


_library = _jax_build.load()
_library.redist_jax_set_execute.argtypes = [ctypes.c_uint64]
_library.redist_jax_set_execute(ctypes.cast(_execute, ctypes.c_void_p).value)
jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(_library.RedistJaxCpu), platform="cpu")
try:
    jax.ffi.register_ffi_target(_TARGET, jax.ffi.pycapsule(_library.RedistJaxCuda), platform="CUDA")
    _cuda_registered = True
except Exception:  # noqa: BLE001 -- a jaxlib without its CUDA plugin: CPU only
    _cuda_registered = False


class _RedistEffect(effects.Effect):
    """The ordered effect of redist's custom calls: one token threads them in program order."""

    def __repr__(self) -> str:
        return "RedistExchange"

    __str__ = __repr__


_effect = _RedistEffect()
effects.lowerable_effects.add_type(_RedistEffect)
effects.ordered_effects.add_type(_RedistEffect)
effects.control_flow_allowed_effects.add_type(_RedistEffect)
effects.custom_derivatives_allowed_effects.add_type(_RedistEffect)

_redistribute_p = Primitive("redist_redistribute")
_redistribute_p.def_impl(partial(dispatch.apply_primitive, _redistribute_p))


def _abstract(x, *, entry: int, shape: tuple[int, ...]):
    return jax.core.ShapedArray(shape, x.dtype), {_effect}


_redistribute_p.def_effectful_abstract_eval(_abstract)


def _lowering(ctx, x, *, entry: int, shape: tuple[int, ...]):
    token = ctx.tokens_in.get(_effect)
    with_token = ctx.replace(avals_in=(*ctx.avals_in, abstract_token), avals_out=(*ctx.avals_out, abstract_token))
    out = list(jax.ffi.ffi_lowering(_TARGET, has_side_effect=True)(with_token, x, token, entry=np.int64(entry)))
    ctx.set_tokens_out(mlir.TokenSet({_effect: out.pop()}))
    return out


mlir.register_lowering(_redistribute_p, _lowering, platform="cpu")
if _cuda_registered:
    mlir.register_lowering(_redistribute_p, _lowering, platform="cuda")


def _batched(args, dims, *, entry: int, shape: tuple[int, ...]):
    """vmap: the batch becomes a new leading axis of every rank's boxes (one exchange for the batch)."""
    (x,), (d,) = args, dims
    x = jnp.moveaxis(x, d, 0)
    e = _live(entry)
    n = x.shape[0]
    ib, ob = e.r.input_box, e.r.output_box
    batched = _lookup(x.shape, x.dtype, Box((0, *ib.lower), (n, *ib.upper)), Box((0, *ob.lower), (n, *ob.upper)),
                      e.options, None)
    return _redistribute_p.bind(x, entry=batched.number, shape=batched.out_shape), 0


batching.primitive_batchers[_redistribute_p] = _batched


def _dist_key(dist) -> Hashable:
    return type(dist).__name__, repr(dist)


def _coerce_options(options) -> RedistributeOptions:
    opts = RedistributeOptions.coerce(options)
    if opts.result_layout == "auto":
        opts = dataclasses.replace(opts, result_layout="C")
    if opts.result_layout != "C":
        raise NotSupportedError(
            f"redist.jax: options result_layout={opts.result_layout!r}: JAX arrays are row-major; leave result_layout "
            "at 'auto' (or 'C') and transpose with jnp.transpose (XLA fuses it)")
    if opts.result != "persistent":
        raise NotSupportedError(f"redist.jax: options result={opts.result!r}: the adapter writes XLA's own result "
                                "buffer; leave result at its default")
    return opts


def _settle() -> None:
    """``jax.effects_barrier()`` that does not fail on an earlier call's error, and forgets it.

    A custom call that fails at run time raised its error to whoever waited on its results, but
    JAX keeps the failed token (on GPUs): every later barrier would raise it again, and every later
    call threaded on the token would fail with it. So wait for each token, then start afresh."""
    tokens = dispatch.runtime_tokens
    for token in [*tokens.current_tokens.values(), *tokens.output_runtime_tokens.values()]:
        try:
            token.block_until_ready()
        except jax.errors.JaxRuntimeError as err:
            logging.getLogger("redist").debug("redist.jax: an earlier dispatch failed (its caller saw it): %s", err)
    tokens.clear()


def _lookup(shape, dtype, input_distribution, output_distribution, options, problem) -> _Entry:
    """Collective: the planned entry for this rank's call (built on a miss, which is a miss on every rank)."""
    _settle()  # no exchange of an earlier dispatch still runs while the ranks agree here
    dtype = np.dtype(dtype)
    gpu = jax.default_backend() == "gpu"
    shape = tuple(int(n) for n in shape)
    key: Hashable = ("jax", shape, dtype.str, _dist_key(input_distribution), _dist_key(output_distribution),
                     options.fingerprint() if options is not None else None, gpu)
    return _cache.get(key, lambda: _Entry(shape, dtype, input_distribution, output_distribution, options, gpu),
                      problem)


@partial(jax.custom_vjp, nondiff_argnums=(1,))
def _apply(x, entry: int):
    return _redistribute_p.bind(x, entry=entry, shape=_live(entry).out_shape)


def _apply_fwd(x, entry: int):
    return _apply(x, entry), None


def _apply_bwd(entry: int, _, g):
    e = _live(entry)
    plan = e.adjoint
    rank = e.r._ctx.process_group.rank
    opts = dataclasses.replace(e.options, allow_overlap=e.options.allow_overlap or plan.overlap)
    grad = None if plan.inverse else jnp.zeros(e.in_shape, g.dtype)
    for rnd in plan.rounds:
        send = g if rnd.sends(rank) else jnp.zeros(geo.box_shape(rnd.in_boxes[rank]), g.dtype)
        box = rnd.out_boxes[rank]
        got = redistribute(send, Box(*rnd.in_boxes[rank]), Box(*box), options=opts)
        if plan.inverse:
            grad = got
        elif not geo.is_empty(box):
            grad = grad.at[local_region(box, plan.in_boxes[rank])].add(got)
    for box in plan.zero[rank]:
        grad = grad.at[local_region(box, plan.in_boxes[rank])].set(0)
    return (grad,)


_apply.defvjp(_apply_fwd, _apply_bwd)


def _x64_problem(x) -> collective.Problem | None:
    """A 64-bit numpy operand while jax_enable_x64 is off (JAX would silently halve it)."""
    dtype = getattr(x, "dtype", None)
    if isinstance(x, jax.Array) or dtype is None or jax.config.jax_enable_x64:
        return None
    if np.dtype(dtype) in _WIDE:
        return ("InvalidValueError", f"redist.jax.redistribute: the operand is {np.dtype(dtype)} but jax_enable_x64 is "
                "off, so JAX would make it 32-bit: enable it first (jax.config.update('jax_enable_x64', True))")
    return None


def redistribute(x: Any, /, input_distribution: DistributionLike, output_distribution: DistributionLike, *,
                 options: RedistributeOptions | dict[str, Any] | None = None) -> jax.Array:
    """Collective: this rank's box of ``output_distribution``, as a new JAX array; eager, under
    ``jax.jit``, differentiable (``jax.grad``, ``jax.vjp``) and batched by ``jax.vmap``.

    ``x``: this rank's box of ``input_distribution`` (a JAX array, or anything ``jnp.asarray``
    takes). ``input_distribution``, ``output_distribution``: :class:`~redist.Slab`,
    :class:`~redist.BlockNonCyclic` or :class:`~redist.Box` (per rank), as for
    :class:`~redist.Redistribute`. ``options``: :class:`~redist.RedistributeOptions` or a dict
    (``allow_overlap``, ``host_method``, ...); the result is row-major (``result_layout`` "auto" or
    "C").

    Every rank calls it, in the same order, with its own box (under ``jit``: every rank runs the
    same program). Errors are redist's, the same on every rank: those found while planning (a box
    that does not match the array, dtypes that differ across ranks, a 64-bit numpy operand while
    ``jax_enable_x64`` is off) are raised by the call or the trace; one met while a compiled
    function runs is raised by JAX (``JaxRuntimeError``, whose message starts with the redist
    class's name), or as the redist class itself by an eager call.

    The gradient is the adjoint: the inverse redistribution, summed into the owners where outputs
    replicate (``allow_overlap``). ``vmap`` moves the whole batch in one exchange (the batch is a
    new leading axis of every rank's boxes).
    """
    problem = _x64_problem(x)
    opts = None
    try:
        opts = _coerce_options(options)
    except RedistError as e:
        problem = problem or collective.problem(e)
    if problem is not None:
        x = jnp.zeros((0,), jnp.float32)
    else:
        x = jnp.asarray(x)
    entry = _lookup(x.shape, x.dtype, input_distribution, output_distribution, opts, problem)
    try:
        y = _apply(x, entry.number)
        if isinstance(y, jax.core.Tracer):
            return y
        return y.block_until_ready()  # an eager call raises its errors here (or above), as the redist class
    except jax.errors.JaxRuntimeError as e:
        problem, _failed.problem = _failed.problem, None
        if problem is None:
            raise
        raise collective.exception(problem) from e


def clear_cache() -> None:
    """Collective: free every planned redistribution of the cache (also done by :func:`redist.finalize`).
    Compiled functions that call them must be traced again (``jax.clear_caches()``)."""
    _settle()
    _cache.clear()


def set_cache_size(maxsize: int) -> None:
    """Collective: keep at most ``maxsize`` planned redistributions (default :data:`CACHE_SIZE`)."""
    _settle()
    _cache.resize(maxsize)


def cache_info() -> dict[str, int]:
    """Local: ``{"hits", "misses", "size", "maxsize"}`` of the plan cache (the same on every rank)."""
    return {"hits": _cache.hits, "misses": _cache.misses, "size": len(_cache), "maxsize": _cache.maxsize}
