# SPDX-License-Identifier: Apache-2.0
"""Every rank's input and output box from every rank's distributions: :func:`resolve_boxes` (pure)."""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Sequence

from ._blocks import BlockCyclic
from ._distributions import Box, Distribution, Slab
from .engine import geometry as geo
from .engine.errors import InvalidTypeError, InvalidValueError

__all__ = ["normal_global_shape", "resolve_boxes"]


def _dist_kind(d) -> str:
    return type(d).__name__


def _same_extents(dist, shapes, axes) -> None:
    """Axes ``dist`` does not split must have one extent on every rank; name the odd rank out."""
    for ax in axes:
        values = [s[ax] for s in shapes]
        if len(set(values)) > 1:
            common, count = Counter(values).most_common(1)[0]
            if 2 * count <= len(values):  # no majority: nobody to single out
                shown = ", ".join(f"rank {i} has {v}" for i, v in enumerate(values[:8]))
                raise InvalidValueError(
                    f"the operands' extents on axis {ax}, which the input distribution {dist} does not split, "
                    f"differ between ranks: {shown}"
                )
            r = next(i for i, v in enumerate(values) if v != common)
            raise InvalidValueError(
                f"rank {r} operand shape {tuple(shapes[r])} does not fit the input distribution {dist}: its extent "
                f"on axis {ax}, which {dist} does not split, is {values[r]}, but {values.count(common)} of the "
                f"{len(values)} ranks have {common}"
            )


def _infer_global_shape(dist: Distribution, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Global shape implied by every rank's local shape under ``dist`` (Slab / BlockNonCyclic)."""
    nranks = len(shapes)
    ndim = len(shapes[0])
    if isinstance(dist, Slab):
        p = dist.partition_dim
        if p >= ndim:
            raise InvalidValueError(f"{dist} can't split axis {p} of {ndim}-D operands")
        _same_extents(dist, shapes, [d for d in range(ndim) if d != p])
        g = list(shapes[0])
        g[p] = sum(s[p] for s in shapes)
        return tuple(g)
    assert isinstance(dist, BlockCyclic)
    grid = dist.process_grid
    if grid.nranks != nranks:
        raise InvalidValueError(f"Number of grid elements ({grid.nranks}) must equal the number of processes ({nranks})")
    if len(grid.shape) > ndim:
        raise InvalidValueError(f"{dist} has a {len(grid.shape)}-D grid but the operands are {ndim}-D")
    _same_extents(dist, shapes, [d for d in range(ndim) if d >= len(grid.shape) or grid.shape[d] == 1])
    g = list(shapes[0])
    for d, n in enumerate(grid.shape):
        # extent along d = sum of the extents of the ranks on the grid line through the origin
        g[d] = sum(shapes[r][d] for r in range(nranks) if all(c == 0 for k, c in enumerate(grid.coords(r)) if k != d))
    return tuple(g)


def _held_boxes(dist: Distribution, shapes: Sequence[tuple[int, ...]]) -> list[geo.BoxT]:
    """Where each rank's piece lies when the pieces are stacked in ``dist``'s order (for messages)."""
    nranks = len(shapes)
    if isinstance(dist, Slab):
        p = dist.partition_dim
        coords = [tuple(r if d == p else 0 for d in range(len(shapes[0]))) for r in range(nranks)]
    else:
        coords = [tuple(dist.process_grid.coords(r)) for r in range(nranks)]
    boxes = []
    for r in range(nranks):
        lo = tuple(sum(shapes[q][d] for q in range(nranks)
                       if coords[q][d] < coords[r][d] and all(c == 0 for k, c in enumerate(coords[q]) if k != d))
                   if d < len(coords[r]) else 0 for d in range(len(shapes[r])))
        boxes.append((lo, tuple(a + n for a, n in zip(lo, shapes[r]))))
    return boxes


def normal_global_shape(value) -> tuple[int, ...] | None:
    """``global_shape=`` as a tuple of non-negative ints (None: not given); raises on this rank only."""
    if value is None:
        return None
    try:
        shape = tuple(operator.index(n) for n in value)
    except TypeError:
        raise InvalidTypeError(f"global_shape must be a sequence of ints, got {value!r}") from None
    if not shape or any(n < 0 for n in shape):
        raise InvalidValueError(f"global_shape must list one non-negative extent per axis, got {shape}")
    return shape


def _global_shape_problem(given: Sequence, gshape: tuple[int, ...], dist, boxes: Sequence[geo.BoxT]) -> str | None:
    """Why every rank's ``global_shape=`` (``given``, None where not passed) is not ``gshape``, or None."""
    if all(g is None for g in given):
        return None
    bad = [r for r, g in enumerate(given) if g != given[0]]
    if bad:
        shown = ", ".join(f"rank {r} passes {given[r]}" for r in bad[:8])
        return (f"global_shape differs between ranks: rank 0 passes {given[0]}, but {shown} (None: not passed); "
                "pass the same global_shape on every rank")
    if tuple(given[0]) == tuple(gshape):
        return None
    if len(given[0]) != len(gshape):
        return f"global_shape {given[0]} has {len(given[0])} axes but the operands are {len(gshape)}-D"
    held = ", ".join(f"rank {r} {geo.format_box(b)}" for r, b in enumerate(boxes[:8]))
    more = f" and {len(boxes) - 8} more ranks" if len(boxes) > 8 else ""
    if isinstance(dist, Box):
        how = "the bounding box of the input boxes"
    else:
        how = f"inferred from the ranks' local extents under the input distribution {dist}"
        try:
            want = [dist.box(r, given[0], nranks=len(boxes)).box_shape for r in range(len(boxes))]
        except InvalidValueError:  # no box of that shape for some rank: the boxes below say enough
            want = [geo.box_shape(b) for b in boxes]
        r = next((r for r, b in enumerate(boxes) if geo.box_shape(b) != want[r]), None)
        if r is not None:
            how += f"; for global_shape={given[0]}, rank {r} would hold {want[r]}, not {geo.box_shape(boxes[r])}"
    return (f"global_shape={given[0]} was passed, but the inferred global shape is {tuple(gshape)} ({how}): "
            f"the input boxes are {held}{more}")


def resolve_boxes(
    in_dists: Sequence, out_dists: Sequence, shapes: Sequence[tuple[int, ...]], global_shapes: Sequence | None = None
) -> tuple[list[geo.BoxT], list[geo.BoxT]]:
    """Every rank's input and output box, from every rank's distributions and operand shape.

    Pure and deterministic: every rank calls it on the same gathered lists and so raises the same
    error. Box distributions are taken as given (coverage is checked later, by the engine); Slab
    and BlockNonCyclic inputs infer the global shape from the local shapes and must reproduce
    each rank's shape; Slab and BlockNonCyclic outputs are laid over the input's global box.
    ``global_shapes`` (every rank's ``global_shape=``, None where not passed) must equal the
    inferred global shape (the input boxes' bounding box for Box inputs) on every rank.
    """
    nranks = len(shapes)
    given = list(global_shapes) if global_shapes is not None else [None] * nranks
    for which, dists in (("input", in_dists), ("output", out_dists)):
        kinds = {_dist_kind(d) for d in dists}
        if len(kinds) > 1:
            first = _dist_kind(dists[0])
            r = next(i for i, d in enumerate(dists) if _dist_kind(d) != first)
            raise InvalidValueError(
                f"Inconsistent {which} distribution type across processes: rank 0 uses {first}, rank {r} uses "
                f"{_dist_kind(dists[r])}"
            )
        if not isinstance(dists[0], Box):
            for r, d in enumerate(dists):
                if d != dists[0]:
                    raise InvalidValueError(
                        f"Inconsistent {which} distribution across processes: rank 0 uses {dists[0]}, rank {r} uses {d}"
                    )
    ndim = len(shapes[0])
    if isinstance(in_dists[0], Box):
        in_boxes = [d.as_tuple() for d in in_dists]
        origin = geo.bounding_box(in_boxes)
        gshape = geo.box_shape(origin) if origin else (0,) * ndim
        origin = origin[0] if origin else (0,) * ndim
        msg = _global_shape_problem(given, gshape, in_dists[0], in_boxes)
        if msg:
            raise InvalidValueError(msg)
    else:
        if any(len(s) != ndim for s in shapes):
            r = next(i for i, s in enumerate(shapes) if len(s) != ndim)
            raise InvalidValueError(f"rank {r} operand is {len(shapes[r])}-D but rank 0's is {ndim}-D")
        gshape = _infer_global_shape(in_dists[0], shapes)
        origin = (0,) * ndim
        msg = _global_shape_problem(given, gshape, in_dists[0], _held_boxes(in_dists[0], shapes))
        if msg:
            raise InvalidValueError(msg)
        in_boxes = []
        for r in range(nranks):
            b = in_dists[0].box(r, gshape, nranks=nranks)
            if b.box_shape != tuple(shapes[r]):
                raise InvalidValueError(
                    f"rank {r} operand shape {tuple(shapes[r])} does not fit the input distribution {in_dists[0]}: "
                    f"for the global shape {gshape} inferred from all ranks, rank {r} should hold {b.box_shape} "
                    f"({b})"
                )
            in_boxes.append(b.as_tuple())
    if isinstance(out_dists[0], Box):
        out_boxes = [d.as_tuple() for d in out_dists]
    else:
        out_boxes = []
        for r in range(nranks):
            lo, hi = out_dists[0].box(r, gshape, nranks=nranks).as_tuple()
            out_boxes.append((tuple(a + o for a, o in zip(lo, origin)), tuple(a + o for a, o in zip(hi, origin))))
    return in_boxes, out_boxes
