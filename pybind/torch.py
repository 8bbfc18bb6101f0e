# SPDX-License-Identifier: Apache-2.0
"""redist.torch: a differentiable, compilable redistribution of torch tensors.

>>> import torch, redist, redist.torch
>>> rank = redist.get_context().process_group.rank
>>> x = torch.rand(redist.Slab.X.shape(rank, (8, 8)), dtype=torch.float64, requires_grad=True)
>>> y = redist.torch.redistribute(x, redist.Slab.X, redist.Slab.Y, global_shape=(8, 8))
>>> y.sum().backward()       # collective too: the adjoint redistribution

:func:`redistribute` is the custom operator ``torch.ops.redist.redistribute``
(``torch.library``) with a fake implementation, so ``torch.compile(fullgraph=True)``
traces a step containing it without a graph break, and with autograd: the backward is the
adjoint redistribution (:mod:`redist._adjoint`). Its planned objects live in a collective, bounded
plan cache (:mod:`redist._plan_cache`, :data:`CACHE_SIZE` entries by default).

Every call is collective: every rank calls it, in the same order, with its own tensor, and every
rank backpropagates through it (an output unused by one rank's loss would leave its peers
waiting in the backward: use it, e.g. ``loss + 0 * y.sum()``). Inside a compiled region that
holds for the whole region: a region entered on some ranks only hangs the others, as any
collective does. Importing ``redist`` does not import torch; importing ``redist.torch`` does.
"""

from __future__ import annotations

import dataclasses
import operator
import threading
from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch
from torch.autograd import forward_ad

from . import _runtime
from ._adjoint import adjoint, local_region
from ._blocks import BlockNonCyclic, ProcessGrid
from ._distributions import Box, Distribution, Slab
from ._options import RedistributeOptions
from ._plan_cache import DEFAULT_MAXSIZE, PlanCache
from ._redistribute import DistributionLike, Redistribute
from ._resolve import resolve_boxes
from .engine import collective
from .engine import geometry as geo
from .engine.errors import InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["CACHE_SIZE", "cache_info", "clear_cache", "redistribute", "set_cache_size"]

#: planned objects the cache keeps by default (least recently used freed first)
CACHE_SIZE = DEFAULT_MAXSIZE

#: the kinds of lookup in the cache: a rank running one where another runs another is refused everywhere (a
#: forward run by autograd's engine is a double backward's or a checkpoint's recomputation)
_BACKWARD_CALL = "the backward of redistribute"
_FORWARD_IN_BACKWARD = "redistribute inside a backward"
_cache = PlanCache("redist.torch", CACHE_SIZE, calls=("redistribute", _BACKWARD_CALL, _FORWARD_IN_BACKWARD))

# What the operator's schema cannot carry travels as small integers into these per-process tables
# (filled in call order: the same on every rank for the same program, and looked up locally only).
_SLAB, _BLOCKS, _BOX, _PROBLEM = 0, 1, 2, 3
_lock = threading.Lock()
_options: list[RedistributeOptions] = [RedistributeOptions(result_layout="C")]
_option_ids: dict[str, int] = {_options[0].fingerprint(): 0}
_fingerprints: list[str] = [_options[0].fingerprint()]  # options id -> its fingerprint
_problems: dict[int, collective.Problem] = {}  # code -> this rank's problem (the newest _PROBLEMS_KEPT)
_PROBLEMS_KEPT = 64


def _problem_code(exc: BaseException) -> tuple[int, ...]:
    """A distribution code standing for this rank's local problem (raised on every rank by the call)."""
    with _lock:
        code = max(_problems, default=-1) + 1
        _problems[code] = collective.problem(exc)
        for old in [c for c in _problems if c <= code - _PROBLEMS_KEPT]:
            del _problems[old]
        return (_PROBLEM, code)


def _options_id(options) -> int:
    opts = RedistributeOptions.coerce(options)
    if opts.result_layout == "auto":  # the fake implementation cannot see the other ranks' layouts: C
        opts.result_layout = "C"
    if opts.result != "persistent":
        raise NotSupportedError(
            f'redist.torch: options result={opts.result!r}: the adapter writes a fresh tensor per call itself; leave '
            'result at its default')
    with _lock:
        fp = opts.fingerprint()
        if fp not in _option_ids:
            _option_ids[fp] = len(_options)
            _options.append(opts)
            _fingerprints.append(fp)
        return _option_ids[fp]


def _encode(dist, global_shape, rank: int, nranks: int) -> tuple[int, ...]:
    """A distribution as ints: this rank's box where it is known without asking the other ranks,
    else the distribution itself (resolved collectively by the call)."""
    if isinstance(dist, Box):
        return (_BOX, *dist.lower, *dist.upper)
    g = global_shape if global_shape is not None else dist._global_shape
    if g is not None:
        box = dist.box(rank, tuple(g), nranks=nranks)
        return (_BOX, *box.lower, *box.upper)
    if isinstance(dist, Slab):
        return (_SLAB, dist.partition_dim)
    return (_BLOCKS, *_grid_code(dist.process_grid))


_EXPLICIT = -1  # a grid's rank order given as its process_array (no layout)


def _grid_code(grid: ProcessGrid) -> tuple[int, ...]:
    """A process grid as ints, rank order included: (layout, ndim, *shape), or (_EXPLICIT, ndim,
    *shape, *ranks) with the ranks in row-major order of the grid's positions."""
    shape = grid.shape
    if grid.layout is not None:
        return (int(grid.layout), len(shape), *shape)
    return (_EXPLICIT, len(shape), *shape, *(int(r) for r in grid.process_array.ravel()))


def _grid_decode(code: Sequence[int]) -> ProcessGrid:
    order, n = code[0], code[1]
    shape = tuple(code[2 : 2 + n])
    if order == _EXPLICIT:
        return ProcessGrid(process_array=np.asarray(code[2 + n :], dtype=np.int64).reshape(shape))
    return ProcessGrid(shape, ProcessGrid.Layout(order))


def _decode(code: Sequence[int]) -> Distribution:
    kind, rest = code[0], tuple(code[1:])
    if kind == _SLAB:
        return Slab(rest[0])
    if kind == _BLOCKS:
        return BlockNonCyclic(_grid_decode(rest))
    n = len(rest) // 2
    return Box(rest[:n], rest[n:])


# The distributions and options reach _resolve as plain data (strings, ints, tuples, None, classes):
# what assume_constant_result may take on every torch this supports (torch 2.11's Dynamo folds only
# Python constants there, not user objects such as Slab.X). _plain runs in the traced code, so inside
# torch.compile Dynamo guards on each attribute it reads (a distribution bound anew, or an options
# object changed in place, recompiles); _resolve rebuilds the objects from it.


def _plain(dist) -> tuple:
    """A distribution (or a (lower, upper) pair) as plain data, rebuilt by :func:`_rebuild`."""
    if isinstance(dist, Box):
        return ("box", dist._lower, dist._upper)
    if isinstance(dist, Slab):
        return ("slab", dist._p, dist._ndim, dist._global_shape)
    if isinstance(dist, BlockNonCyclic):
        grid = dist._grid
        order = int(grid._layout) if grid._layout is not None else tuple(grid._coords.items())  # rank order
        return ("blocks", grid._shape, order, dist._global_shape)
    if isinstance(dist, tuple) and len(dist) == 2:  # (lower, upper)
        return ("box", *dist)
    return ("other", type(dist).__name__)


def _static(plain):
    """``plain`` with every int specialised (``operator.index``): when a compiled function is called
    again with other sizes, Dynamo recompiles with the ints it saw change as symbols, which
    assume_constant_result cannot take; the index makes it guard on each value instead (one graph
    per size, as each size is its own plan)."""
    if isinstance(plain, bool) or not isinstance(plain, (int, tuple, list, dict)):
        return plain
    if isinstance(plain, int):
        return operator.index(plain)
    if isinstance(plain, dict):
        return {k: _static(v) for k, v in plain.items()}
    return tuple(_static(v) for v in plain)  # (a namedtuple's or a list's items: compared, hashed alike)


def _rebuild(plain: tuple):
    """The distribution :func:`_plain` described."""
    kind, *rest = plain
    if kind == "box":
        return Box(*rest)
    if kind == "other":
        raise InvalidTypeError(f"redist.torch: distributions must be Slab, BlockNonCyclic or Box (or a "
                               f"(lower, upper) pair), got {rest[0]}")
    if kind == "slab":
        p, ndim, g = rest
        dist = Slab(p, ndim)
    else:
        shape, order, g = rest
        if isinstance(order, int):
            grid = ProcessGrid(shape, ProcessGrid.Layout(order))
        else:
            ranks = np.empty(shape, dtype=np.int64)
            for r, coords in order:
                ranks[coords] = r
            grid = ProcessGrid(process_array=ranks)
        dist = BlockNonCyclic(grid)
    dist._global_shape = g
    return dist


def _plain_options(options):
    """A RedistributeOptions as plain data (its class and init fields); None, a dict or anything else
    as it is. Inside torch.compile a logger is left out (Dynamo hands no Logger on): the "redist"
    logger logs there."""
    compiling = torch.compiler.is_compiling()
    if isinstance(options, dict):
        return {k: v for k, v in options.items() if not (compiling and k == "logger")}
    if not isinstance(options, RedistributeOptions):
        return options
    fields = tuple((f.name, getattr(options, f.name)) for f in dataclasses.fields(options)
                   if f.init and not (compiling and f.name == "logger"))
    return ("options", type(options), fields)


def _rebuild_options(plain):
    if isinstance(plain, tuple) and plain[:1] == ("options",):
        return plain[1](**dict(plain[2]))
    return plain


def _options_key(options) -> Hashable:
    if options is None or isinstance(options, tuple):  # None, or _plain_options' snapshot
        return options
    if isinstance(options, dict):
        return tuple(sorted(options.items(), key=lambda kv: str(kv[0])))
    raise TypeError("not memoised")


_memo: dict[Hashable, tuple] = {}  # _resolve's results (local; forgotten at finalize)
_MEMO_KEPT = 256


@torch.compiler.assume_constant_result
def _resolve(input_distribution: tuple, output_distribution: tuple, global_shape, options, ndim) -> tuple:
    """(input code, output code, options id) of the distributions and options (:func:`_plain`,
    :func:`_plain_options`): what the operator takes. Local (no collective), so torch.compile may
    run it while tracing on each rank on its own; a local problem becomes a code the call raises on
    every rank."""
    try:
        key = (input_distribution, output_distribution, global_shape, _options_key(options), ndim)
        hash(key)
    except TypeError:
        key = None
    got = _memo.get(key) if key is not None else None
    if got is not None:
        return got
    try:
        ctx = _runtime.context()
        rank, nranks = ctx.process_group.rank, ctx.process_group.nranks
        opt = _options_id(_rebuild_options(options))
        if global_shape is not None:
            global_shape = tuple(int(n) for n in global_shape)
            if len(global_shape) != ndim:
                raise InvalidValueError(f"global_shape {global_shape} has {len(global_shape)} axes but the tensor {ndim}")
        got = (_encode(_rebuild(input_distribution), global_shape, rank, nranks),
               _encode(_rebuild(output_distribution), global_shape, rank, nranks), opt)
    except Exception as e:  # noqa: BLE001 -- raised on every rank by the call
        return _problem_code(e), (_PROBLEM,), 0
    if key is not None:
        if len(_memo) >= _MEMO_KEPT:
            _memo.clear()
        _memo[key] = got
    return got


_runtime.add_runtime_hooks(on_finalize=_memo.clear)  # rank and size may differ after the next initialize()


class _Allocation:
    """Fresh tensors of ``shape`` whose memory runs in ``layout`` ("C", "F" or axes slowest first),
    the permutation worked out once (a planned object's outputs, per call; the fake's)."""

    def __init__(self, shape: Sequence[int], layout) -> None:
        perm = geo.axis_order(layout, len(shape))
        self.dense = [shape[a] for a in perm]
        identity = list(perm) == sorted(perm)
        self.inverse = None if identity else sorted(range(len(perm)), key=perm.__getitem__)

    def __call__(self, dtype, device) -> torch.Tensor:
        dense = torch.empty(self.dense, dtype=dtype, device=device)
        return dense if self.inverse is None else dense.permute(self.inverse)


def _box_shape(code: Sequence[int]) -> tuple[int, ...]:
    n = (len(code) - 1) // 2
    return tuple(max(0, h - lo) for lo, h in zip(code[1 : 1 + n], code[1 + n :]))


def _local_problem(in_code, out_code) -> collective.Problem | None:
    """This rank's problem found while resolving its call (None: none)."""
    for code in (in_code, out_code):
        if code[0] == _PROBLEM and len(code) > 1:
            return _problems.get(code[1], ("InvalidValueError", "redist.torch.redistribute: bad arguments"))
    return None


def _execute_into(r: Redistribute, outs: list[torch.Tensor], gpu: bool) -> None:
    """Collective: the exchange written straight into ``outs`` (fresh tensors of torch's allocator;
    on GPUs out= in ordinary device memory, #44: one pass). On GPUs no tensor is kept alive after
    the call (the operand is released; the outputs are bound without a reference): cudagraph trees
    refuse a tensor of their pool that something else holds."""
    try:
        r._execute_fresh(outs)
    finally:
        if gpu:
            r.release_operand()


def _copied_result(r: Redistribute, fields: bool) -> list[torch.Tensor]:
    """Collective: the engine-owned result, copied into fresh tensors (one more pass). Where the
    exchange runs inside a CUDA graph capture on several ranks: a fresh tensor of the capture's pool
    is memory the peers that store into it have not mapped, which a capture cannot map."""
    try:
        res = r.execute()
    finally:
        r.release_operand()  # keep no tensor alive (as _execute_into)
    res = list(res) if fields else [res]
    return [x.clone(memory_format=torch.preserve_format) for x in res]


class _Forward:
    """A planned forward redistribution (one entry of the cache)."""

    def __init__(self, fields: list[torch.Tensor], in_code, out_code, opts: RedistributeOptions, needs_grad: bool):
        comm = _runtime.context().engine.comm
        flags = collective.agree(comm, None, needs_grad)
        if any(f != flags[0] for f in flags):
            r = next(i for i, f in enumerate(flags) if f != flags[0])
            raise InvalidValueError(
                f"redist.torch.redistribute: rank {r} needs the gradient of its input (requires_grad and grad mode) "
                f"{'and' if flags[r] else 'but'} rank 0 {'does not' if flags[r] else 'does'}: the backward is "
                "collective, so every rank must record it or none")
        self.fields = len(fields) > 1
        operand = tuple(fields) if self.fields else fields[0]
        self.r = Redistribute(operand, _decode(in_code), _decode(out_code), options=opts)
        try:
            self.r.plan()
        except BaseException:
            self.r.free()
            raise
        self.shape = self.r.output_box.box_shape
        self.alloc = _Allocation(self.shape, self.r.layout)
        self.gpu = self.r.memory_space == "cuda"
        self.nranks = _runtime.context().process_group.nranks
        self.pinned = False  # recorded into a CUDA graph (torch.compile mode="reduce-overhead"): never evicted

    def run(self, fields: list[torch.Tensor]) -> list[torch.Tensor]:
        r = self.r
        r.reset_operand_unchecked(tuple(fields) if self.fields else fields[0])
        if self.gpu:
            capturing = torch.cuda.is_current_stream_capturing()
            self.pinned = self.pinned or capturing
            if capturing and self.nranks > 1:
                return _copied_result(r, self.fields)
        outs = [self.alloc(t.dtype, t.device) for t in fields]
        _execute_into(r, outs, self.gpu)
        return outs

    @property
    def collective_free(self) -> bool:
        """Whether :meth:`free` is collective (a GPU plan's is): :mod:`redist._plan_cache` then
        frees it at a lookup every rank agrees on."""
        return self.gpu

    def free(self) -> None:
        self.r.free()


class _Backward:
    """The planned adjoint of a forward redistribution: one Redistribute per round (_adjoint.py)."""

    def __init__(self, grads: list[torch.Tensor], in_code, out_code, opts: RedistributeOptions, in_shape):
        ctx = _runtime.context()
        comm, rank = ctx.engine.comm, ctx.process_group.rank
        every = collective.agree(comm, None, (tuple(in_code), tuple(out_code), tuple(in_shape)))
        in_boxes, out_boxes = resolve_boxes([_decode(c) for c, _, _ in every], [_decode(c) for _, c, _ in every],
                                            [s for _, _, s in every])
        self.plan = adjoint(in_boxes, out_boxes)
        self.rank, self.in_shape, self.nranks = rank, tuple(in_shape), len(every)
        self.fields = len(grads) > 1
        self.pinned = False  # as _Forward's
        round_opts = dataclasses.replace(opts, result_layout="C", allow_overlap=opts.allow_overlap or self.plan.overlap)
        self.rounds: list[Redistribute] = []
        try:
            for rnd in self.plan.rounds:
                ops = self._operands(rnd, grads)
                r = Redistribute(tuple(ops) if self.fields else ops[0], Box(*rnd.in_boxes[rank]),
                                 Box(*rnd.out_boxes[rank]), options=round_opts)
                self.rounds.append(r)
                r.plan()
        except BaseException:
            self.free()
            raise

    def _operands(self, rnd, grads):
        if rnd.sends(self.rank):
            return grads
        empty = geo.box_shape(rnd.in_boxes[self.rank])
        return [torch.empty(empty, dtype=g.dtype, device=g.device) for g in grads]

    def run(self, grads: list[torch.Tensor]) -> list[torch.Tensor]:
        plan, rank = self.plan, self.rank
        inverse = plan.inverse
        result = None if inverse else [torch.zeros(self.in_shape, dtype=g.dtype, device=g.device) for g in grads]
        for rnd, r in zip(plan.rounds, self.rounds):
            r.reset_operand_unchecked(tuple(self._operands(rnd, grads)) if self.fields else self._operands(rnd, grads)[0])
            box = rnd.out_boxes[rank]
            gpu = r.memory_space == "cuda"
            capturing = gpu and torch.cuda.is_current_stream_capturing()
            self.pinned = self.pinned or capturing
            if capturing and self.nranks > 1:  # as _Forward.run's
                outs = _copied_result(r, self.fields)
            else:
                outs = [torch.empty(geo.box_shape(box), dtype=g.dtype, device=g.device) for g in grads]
                _execute_into(r, outs, gpu)
            if inverse:
                result = outs
            elif not geo.is_empty(box):
                where = local_region(box, plan.in_boxes[rank])
                for acc, o in zip(result, outs):
                    acc[where] += o
        for box in plan.zero[rank]:
            where = local_region(box, plan.in_boxes[rank])
            for acc in result:
                acc[where] = 0
        return result

    @property
    def collective_free(self) -> bool:
        """As :attr:`_Forward.collective_free`."""
        return any(r.memory_space == "cuda" for r in self.rounds)

    def free(self) -> None:
        for r in self.rounds:
            r.free()


def _field_key(fields):
    return tuple((t.shape, t.stride(), t.dtype, t.device) for t in fields)  # (repr: the same on every run)


def _unflag(fields):
    """Tensors with the conjugate or negative bit set are resolved (a copy) before they move."""
    return [t.resolve_conj().resolve_neg() if t.is_conj() or t.is_neg() else t for t in fields]


# The operators are defined with torch.library's low-level API rather than torch.library.custom_op:
# the same schema, tag, fake implementation, autograd and vmap rule, but the kernel is called
# without custom_op's per-call wrappers (an empty operator of this schema: 13 against 16-18 us per
# eager call, 33-34 against 39-40 compiled, torch 2.13 on a 2-core VM: perf/probe_torch_call.py).
# The integers are SymInt, as custom_op inferred them: an int[] would pin a dynamic axis.
_lib = torch.library.Library("redist", "DEF")
_lib.define("redistribute(Tensor[] fields, SymInt[] input_distribution, SymInt[] output_distribution, SymInt options, "
            "bool needs_grad) -> Tensor[]", tags=(torch.Tag.pt2_compliant_tag,))  # (custom_op's tag)
_lib.define("redistribute_adjoint(Tensor[] grads, SymInt[] input_distribution, SymInt[] output_distribution, SymInt options, "
            "SymInt[] input_shape) -> Tensor[]", tags=(torch.Tag.pt2_compliant_tag,))


def _redistribute_kernel(fields: list[torch.Tensor], input_distribution: list[int], output_distribution: list[int],
                         options: int, needs_grad: bool) -> list[torch.Tensor]:
    fields = _unflag(fields)
    opts = _options[options]
    key = ("forward", tuple(input_distribution), tuple(output_distribution), _fingerprints[options], needs_grad,
           _field_key(fields))
    problem = _local_problem(input_distribution, output_distribution)
    call = "redistribute" if torch._C._current_graph_task_id() == -1 else _FORWARD_IN_BACKWARD
    entry = _cache.get(key, lambda: _Forward(fields, input_distribution, output_distribution, opts, needs_grad),
                       problem, call=call)
    return entry.run(fields)


def _redistribute_fake(fields, input_distribution, output_distribution, options, needs_grad):
    if input_distribution[0] == _PROBLEM or output_distribution[0] == _PROBLEM:
        return [torch.empty_like(t) for t in fields]  # the call raises on every rank when it runs
    if output_distribution[0] != _BOX:
        raise NotSupportedError(
            "redist.torch.redistribute inside torch.compile needs this rank's output box without asking the other "
            "ranks: pass global_shape=..., distributions bound to it (Slab.X.bind(shape)), or Box distributions")
    shape = _box_shape(output_distribution)
    layout = _options[options].result_layout
    alloc = _Allocation(shape, layout)
    return [alloc(t.dtype, t.device) for t in fields]


def _adjoint_kernel(grads: list[torch.Tensor], input_distribution: list[int], output_distribution: list[int],
                    options: int, input_shape: list[int]) -> list[torch.Tensor]:
    _refuse_transformed(grads)  # (is_grads_batched=True batches the gradients): refused on every rank, as the forward
    grads = _unflag(grads)
    opts = _options[options]
    key = ("adjoint", tuple(input_distribution), tuple(output_distribution), _fingerprints[options], tuple(input_shape),
           _field_key(grads))
    entry = _cache.get(key, lambda: _Backward(grads, input_distribution, output_distribution, opts, input_shape),
                       call=_BACKWARD_CALL)
    return entry.run(grads)


def _adjoint_fake(grads, input_distribution, output_distribution, options, input_shape):
    return [torch.empty(tuple(input_shape), dtype=g.dtype, device=g.device) for g in grads]


def _forward_context(ctx, inputs, output):
    fields, in_code, out_code, options, _ = inputs
    ctx.codes = (list(in_code), list(out_code), options)
    ctx.input_shape = list(fields[0].shape)


def _forward_backward(ctx, grads):
    _refuse_transformed(grads)
    in_code, out_code, options = ctx.codes
    back = torch.ops.redist.redistribute_adjoint(list(grads), in_code, out_code, options, ctx.input_shape)
    return back, None, None, None, None


class _Eager(torch.autograd.Function):
    """An eager call that records its backward: the operator's autograd (the same kernels and
    context) without torch.library's wrapping of it, the dispatcher with pytree flattening and
    default filling around both kernels, which cost more than half of an 8^3 forward +
    ``torch.autograd.grad`` at P = 1 (perf/RESULTS.md). The fields come as separate arguments: a
    Function differentiates its tensor arguments only, not a list's."""

    @staticmethod
    def forward(ctx, in_code, out_code, options, *fields):
        # needs_grad: the plan's build checks that every rank records the backward, or none
        args = list(fields), in_code, out_code, options, True
        _forward_context(ctx, args, None)
        return tuple(_redistribute_kernel(*args))

    @staticmethod
    def backward(ctx, *grads):
        # The operator where grad mode is on (create_graph=True: its own backward gives double backward),
        # where compiled autograd traces this (Dynamo would trace into the kernel) or torch would see it.
        if torch.is_grad_enabled() or torch.compiler.is_compiling() or not _plain_autograd(grads):
            back = _forward_backward(ctx, grads)[0]
        else:
            back = _adjoint_kernel(list(grads), *ctx.codes, ctx.input_shape)
        return None, None, None, *back


def _adjoint_context(ctx, inputs, output):
    _, in_code, out_code, options, _ = inputs
    ctx.codes = (list(in_code), list(out_code), options)


def _adjoint_backward(ctx, grads):
    _refuse_transformed(grads)
    in_code, out_code, options = ctx.codes
    again = torch.ops.redist.redistribute(list(grads), in_code, out_code, options, True)
    return again, None, None, None, None


_VMAP_REFUSED = ("redist.torch.redistribute under torch.func.vmap (or a backward with is_grads_batched=True): a "
                 "batched call would be one collective per batch element on each rank, and ranks may batch "
                 "differently; move the batch into the tensor (an extra axis of the boxes) instead")


def _refuse_transformed(grads) -> None:
    """A backward whose gradients a transform wraps (``is_grads_batched=True``'s legacy batching, a
    ``torch.func`` transform over ``torch.autograd.grad``) would be refused by torch on this rank
    only, before any kernel or vmap rule: refused here through the cache's agreement instead, so
    that the peers raise too."""
    refused = None if torch.compiler.is_compiling() else _transform_problem([g for g in grads if g is not None])
    if refused is not None:
        _refuse(refused)


def _refuse_batched(*args):
    # the vmap rule, and the kernel of torch's legacy batching (is_grads_batched=True reaching the operator itself,
    # as a compiled forward's backward calls it): refused through the cache's agreement, so the peers' lookups raise
    # it too (a vmap or batched backward on some ranks only), rather than by torch on this rank only
    _refuse(_VMAP_REFUSED)


for _name, _kernel, _fake, _backward, _context in (
        ("redistribute", _redistribute_kernel, _redistribute_fake, _forward_backward, _forward_context),
        ("redistribute_adjoint", _adjoint_kernel, _adjoint_fake, _adjoint_backward, _adjoint_context)):
    _lib.impl(_name, _kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"redist::{_name}", _fake, lib=_lib)
    torch.library.register_autograd(f"redist::{_name}", _backward, setup_context=_context, lib=_lib)
    torch.library.register_vmap(f"redist::{_name}", _refuse_batched, lib=_lib)
    _lib.impl(_name, _refuse_batched, "Batched")


def redistribute(t: torch.Tensor | Sequence[torch.Tensor], /, input_distribution: DistributionLike,
                 output_distribution: DistributionLike, *, global_shape: Sequence[int] | None = None,
                 options: RedistributeOptions | dict[str, Any] | None = None
                 ) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """Collective: this rank's box of ``output_distribution``, as a fresh tensor, differentiable.

    ``t``: this rank's box of ``input_distribution`` (any strides; a tuple or list of tensors of
    one shape moves as several fields in one exchange, and a tuple comes back).
    ``input_distribution``, ``output_distribution``: :class:`~redist.Slab`,
    :class:`~redist.BlockNonCyclic` or :class:`~redist.Box` (per rank), as for
    :class:`~redist.Redistribute`. ``global_shape``: the global array's shape; needed inside
    ``torch.compile`` unless both distributions are boxes or bound to a shape (``Slab.X.bind(g)``),
    since a compiled region must know the output's shape without asking the other ranks.
    ``options``: :class:`~redist.RedistributeOptions` or a dict (``result_layout``,
    ``allow_overlap``, ``transport``...); ``result_layout="auto"`` means "C" here.

    The result is a new tensor written once by the exchange (on GPUs ``out=`` in torch's own
    memory; inside a CUDA graph capture on several ranks, one copy of the engine-owned result
    instead). Autograd: the
    gradient is the adjoint (the inverse redistribution for a partition, a sum into the owners
    where the output replicates); double backward works. Errors are redist's, the same on every
    rank; a call refused changes nothing.
    """
    fields = isinstance(t, (tuple, list))
    tensors = list(t) if fields else [t]
    compiling = torch.compiler.is_compiling()
    if not tensors or not all(isinstance(x, torch.Tensor) for x in tensors):
        bad = InvalidTypeError(
            f"redist.torch.redistribute takes a torch.Tensor or a tuple of them, got {type(t).__name__}"
            + ("" if not fields else f" holding {[type(x).__name__ for x in tensors]}"))
        codes = _problem_code(bad), (_PROBLEM,), 0
        tensors = [torch.empty(0)]
    else:
        g = None if global_shape is None else tuple(global_shape)
        plain = (_plain(input_distribution), _plain(output_distribution), g, _plain_options(options))
        codes = _resolve(*(_static(plain) if compiling else plain), tensors[0].dim())
    needs_grad = torch.is_grad_enabled() and any(x.requires_grad for x in tensors)
    if needs_grad and not compiling and torch.is_inference_mode_enabled():  # (Dynamo breaks the graph at it)
        needs_grad = False  # under inference_mode with enable_grad: recorded by no operator of torch's either
    refused = None if compiling else _transform_problem(tensors)
    if refused is not None:  # raised on every rank: the peers' calls meet this one in the cache's lookup
        _refuse(refused)
    args = tensors, list(codes[0]), list(codes[1]), codes[2], needs_grad
    if compiling or not (_plain_autograd(tensors) if needs_grad else _undispatched(tensors)):
        out = torch.ops.redist.redistribute(*args)
    elif needs_grad:
        out = _Eager.apply(*args[1:4], *tensors)
    else:
        out = _redistribute_kernel(*args)  # what torch's dispatcher would run, without its ~10 us per call
    return tuple(out) if fields else out[0]


def _refuse(message: str) -> None:
    """Collective: raise NotSupportedError(``message``) through the cache's agreement, so that the
    peers' lookups (a forward, a backward) raise it too, naming this rank."""
    _cache.get(None, lambda: None, collective.problem(NotSupportedError(message)))


def _undispatched(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether an eager call may run the operator's kernels without torch's dispatcher (through
    :class:`_Eager` where it records the gradient): nothing of torch's would see the operator (no
    dispatch or function mode, such as FakeTensorMode or ``with torch.device(...)``, no tensor
    subclass, JIT trace or profiler). Local."""
    return (not torch._C._len_torch_dispatch_stack() and not torch._C._is_torch_function_mode_enabled()
            and torch._C._get_tracing_state() is None and not torch.autograd._profiler_enabled()
            and all(type(t) is torch.Tensor for t in tensors))


def _plain_autograd(tensors: Sequence[torch.Tensor]) -> bool:
    """Whether :class:`_Eager` may run for ``tensors``: :func:`_undispatched`, and no torch.func
    transform is active (a tensor the transform does not wrap, such as a closure's, reaches the
    operator unrefused and works there; torch refuses a Function without ``setup_context`` under
    any transform, on the ranks under it only). Local."""
    return torch._C._functorch.peek_interpreter_stack() is None and _undispatched(tensors)


def _transform_problem(tensors: Sequence[torch.Tensor]) -> str | None:
    """Why ``tensors`` cannot go through the operator (a torch.func transform's wrapper or a
    forward-mode dual tensor, whose tangent the operator would drop), or None. Local."""
    for t in tensors:
        if torch._C._functorch.is_batchedtensor(t) or torch._C._functorch.is_legacy_batchedtensor(t):
            return _VMAP_REFUSED  # (legacy: autograd.grad(..., is_grads_batched=True) batches a backward's gradients)
        if torch._C._functorch.is_gradtrackingtensor(t):
            return ("redist.torch.redistribute under torch.func.grad, vjp, jvp, jacrev or jacfwd is not supported "
                    "(torch's transforms would drop or refuse its derivative); differentiate with torch.autograd "
                    "instead (loss.backward(), torch.autograd.grad)")
        if forward_ad._current_level >= 0 and forward_ad.unpack_dual(t).tangent is not None:
            return ("redist.torch.redistribute of a dual tensor (torch.autograd.forward_ad): forward-mode "
                    "differentiation is not supported (the tangent would be dropped); use reverse mode "
                    "(loss.backward(), torch.autograd.grad)")
    return None


def clear_cache() -> None:
    """Collective: free every planned redistribution of the cache (also done by :func:`redist.finalize`)."""
    _cache.clear()


def set_cache_size(maxsize: int) -> None:
    """Collective: keep at most ``maxsize`` planned redistributions (default :data:`CACHE_SIZE`)."""
    _cache.resize(maxsize)


def cache_info() -> dict[str, int]:
    """Local: ``{"hits", "misses", "size", "maxsize"}`` of the plan cache (the same on every rank)."""
    return {"hits": _cache.hits, "misses": _cache.misses, "size": len(_cache), "maxsize": _cache.maxsize}
