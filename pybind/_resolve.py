# SPDX-License-Identifier: Apache-2.0
"""Every rank's input and output box from every rank's distributions: :func:`resolve_boxes` (pure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from ._blocks import BlockCyclic
from ._distributions import Box, Distribution, Slab
from .engine import geometry as geo
from .engine.errors import InvalidValueError

__all__ = ["resolve_boxes"]


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


def resolve_boxes(
    in_dists: Sequence, out_dists: Sequence, shapes: Sequence[tuple[int, ...]]
) -> tuple[list[geo.BoxT], list[geo.BoxT]]:
    """Every rank's input and output box, from every rank's distributions and operand shape.

    Pure and deterministic: every rank calls it on the same gathered lists and so raises the same
    error. Box distributions are taken as given (coverage is checked later, by the engine); Slab
    and BlockNonCyclic inputs infer the global shape from the local shapes and must reproduce
    each rank's shape; Slab and BlockNonCyclic outputs are laid over the input's global box.
    """
    nranks = len(shapes)
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
    else:
        if any(len(s) != ndim for s in shapes):
            r = next(i for i, s in enumerate(shapes) if len(s) != ndim)
            raise InvalidValueError(f"rank {r} operand is {len(shapes[r])}-D but rank 0's is {ndim}-D")
        gshape = _infer_global_shape(in_dists[0], shapes)
        origin = (0,) * ndim
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
