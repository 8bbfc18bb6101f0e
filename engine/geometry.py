# SPDX-License-Identifier: Apache-2.0
"""Pure N-D box geometry. No MPI, no CUDA: tuples of ints in, tuples of ints out.

Convention
----------
A box is a pair ``(lower, upper)`` of equal-length integer tuples in *global* coordinates,
``lower`` inclusive and ``upper`` exclusive, exactly like Python slices::

    box = ((0, 4), (2, 10))      # rows 0..1, columns 4..9 of the global array
    shape = (2, 6)               # upper - lower
    global_array[0:2, 4:10]      # the elements it holds

A box is *empty* when ``lower[i] == upper[i]`` on some axis: a rank may own nothing (a Slab
with fewer planes than ranks, say). Empty boxes never collide with anything, and are left out of
bounding boxes. ``lower > upper`` on any axis is invalid, as are negative coordinates.

Strides are in *elements*. ``dense_strides(shape, "C")`` is row-major, ``"F"`` column-major.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence

import numpy as np

__all__ = [
    "BoxT",
    "as_box",
    "box_shape",
    "volume",
    "is_empty",
    "intersect",
    "contains",
    "bounding_box",
    "normal_order",
    "dense_strides",
    "region_offset",
    "pairwise_overlap",
    "find_overlap",
    "find_uncovered_point",
    "cover_problem",
    "subtract",
    "sources",
    "format_box",
    "layout_candidates",
]

BoxT = tuple[tuple[int, ...], tuple[int, ...]]


def _as_int(v) -> int:
    # numpy integers are accepted, floats/bools are not (a bool box is almost surely a bug)
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TypeError(f"box coordinates must be integers, got {v!r} ({type(v).__name__})")
    return int(v)


def as_box(lower: Sequence[int], upper: Sequence[int]) -> BoxT:
    """Normalise ``(lower, upper)`` to a pair of int tuples (no validity checks beyond types)."""
    lo = tuple(_as_int(v) for v in lower)
    hi = tuple(_as_int(v) for v in upper)
    if len(lo) != len(hi):
        raise ValueError(f"lower {lo} and upper {hi} must have the same dimensionality")
    return lo, hi


def box_shape(box: BoxT) -> tuple[int, ...]:
    lo, hi = box
    return tuple(h - l for l, h in zip(lo, hi))


def volume(box: BoxT) -> int:
    return math.prod(max(0, h - l) for l, h in zip(*box))


def is_empty(box: BoxT) -> bool:
    return any(h <= l for l, h in zip(*box))


def intersect(a: BoxT, b: BoxT) -> BoxT | None:
    """The common part of two boxes, or None when it is empty."""
    lo = tuple(max(x, y) for x, y in zip(a[0], b[0]))
    hi = tuple(min(x, y) for x, y in zip(a[1], b[1]))
    if any(h <= l for l, h in zip(lo, hi)):
        return None
    return lo, hi


def contains(outer: BoxT, inner: BoxT) -> bool:
    """True when the non-empty ``inner`` lies inside ``outer`` (empty boxes are inside anything)."""
    if is_empty(inner):
        return True
    return all(o_l <= i_l and i_h <= o_h for o_l, o_h, i_l, i_h in zip(outer[0], outer[1], *inner))


def bounding_box(boxes: Sequence[BoxT]) -> BoxT | None:
    """Smallest box holding every non-empty box; None when all are empty."""
    full = [b for b in boxes if not is_empty(b)]
    if not full:
        return None
    lo = tuple(min(c) for c in zip(*(b[0] for b in full)))
    hi = tuple(max(c) for c in zip(*(b[1] for b in full)))
    return lo, hi


def axis_order(order: str | Sequence[int], ndim: int) -> tuple[int, ...]:
    """Axes from slowest- to fastest-varying of a dense ``order`` layout: "C" is ``(0, ..., n-1)``,
    "F" ``(n-1, ..., 0)``, a permutation of ``range(ndim)`` is itself. ValueError otherwise."""
    if isinstance(order, str):
        if order == "C":
            return tuple(range(ndim))
        if order == "F":
            return tuple(range(ndim - 1, -1, -1))
        raise ValueError(f"order must be 'C', 'F' or a permutation of the axes, got {order!r}")
    try:
        perm = tuple(operator.index(a) for a in order)
    except TypeError:
        raise ValueError(f"order must be 'C', 'F' or a permutation of the axes, got {order!r}") from None
    if sorted(perm) != list(range(ndim)):
        raise ValueError(f"order {perm} is not a permutation of the {ndim} axes (0..{ndim - 1})")
    return perm


def normal_order(order: str | Sequence[int], ndim: int) -> str | tuple[int, ...]:
    """One name for one layout: "C"/"F" for the identity/reversed permutation, else the permutation
    (ValueError as :func:`axis_order`)."""
    perm = axis_order(order, ndim)
    if isinstance(order, str):
        return order
    return "C" if perm == tuple(range(ndim)) else "F" if perm == tuple(range(ndim - 1, -1, -1)) else perm


def dense_strides(shape: Sequence[int], order: str | Sequence[int] = "C") -> tuple[int, ...]:
    """Element strides of a dense array of ``shape`` in ``order`` ("C", "F" or a permutation of
    the axes, slowest-varying first: see :func:`axis_order`)."""
    n = len(shape)
    strides = [0] * n
    acc = 1
    for d in reversed(axis_order(order, n)):
        strides[d] = acc
        acc *= max(1, shape[d])
    return tuple(strides)


def region_offset(outer_lower: Sequence[int], sub_lower: Sequence[int], strides: Sequence[int]) -> int:
    """Element offset of ``sub_lower`` inside an array whose first element sits at ``outer_lower``."""
    return sum((s - o) * st for s, o, st in zip(sub_lower, outer_lower, strides))


def format_box(box: BoxT) -> str:
    lo, hi = box
    return f"Box(lower={tuple(lo)}, upper={tuple(hi)})"


# --- many boxes at once (numpy, chunked so P in the thousands stays cheap) -------------------


def _arrays(boxes: Sequence[BoxT]) -> tuple[np.ndarray, np.ndarray]:
    lo = np.array([b[0] for b in boxes], dtype=np.int64).reshape(len(boxes), -1)
    hi = np.array([b[1] for b in boxes], dtype=np.int64).reshape(len(boxes), -1)
    return lo, hi


def pairwise_overlap(a: Sequence[BoxT], b: Sequence[BoxT], chunk: int = 256) -> np.ndarray:
    """``out[i, j]`` = number of elements ``a[i]`` and ``b[j]`` share (an int64 matrix)."""
    alo, ahi = _arrays(a)
    blo, bhi = _arrays(b)
    out = np.zeros((len(a), len(b)), dtype=np.int64)
    for start in range(0, len(a), chunk):
        s = slice(start, start + chunk)
        ext = np.minimum(ahi[s, None, :], bhi[None, :, :]) - np.maximum(alo[s, None, :], blo[None, :, :])
        out[s] = np.prod(np.clip(ext, 0, None), axis=2)
    return out


def find_overlap(boxes: Sequence[BoxT]) -> tuple[int, int] | None:
    """First pair ``(i, j)``, ``i < j``, of boxes that share an element; None if pairwise disjoint."""
    if len(boxes) < 2:
        return None
    m = pairwise_overlap(boxes, boxes)
    np.fill_diagonal(m, 0)
    hits = np.argwhere(np.triu(m) > 0)
    if len(hits) == 0:
        return None
    i, j = hits[0]
    return int(i), int(j)


def find_uncovered_point(boxes: Sequence[BoxT], glob: BoxT, max_cells: int = 1 << 20) -> tuple[int, ...] | None:
    """A point of ``glob`` no box covers, or None (also None when the search would be too large).

    Coordinate compression: the box faces cut ``glob`` into at most ``(2P+1)^ndim`` cells, each
    either wholly covered or wholly uncovered by any given box.
    """
    full = [b for b in boxes if not is_empty(b)]
    cuts = []
    for d in range(len(glob[0])):
        c = {glob[0][d], glob[1][d]}
        for lo, hi in full:
            c.update(v for v in (lo[d], hi[d]) if glob[0][d] <= v <= glob[1][d])
        cuts.append(sorted(c))
    if math.prod(len(c) - 1 for c in cuts) > max_cells:
        return None
    grids = np.meshgrid(*[np.array(c[:-1], dtype=np.int64) for c in cuts], indexing="ij")
    pts = np.stack([g.ravel() for g in grids], axis=1)
    covered = np.zeros(len(pts), dtype=bool)
    for lo, hi in full:
        covered |= np.all((pts >= np.array(lo)) & (pts < np.array(hi)), axis=1)
    missing = np.flatnonzero(~covered)
    return None if len(missing) == 0 else tuple(int(v) for v in pts[missing[0]])


def cover_problem(boxes: Sequence[BoxT], glob: BoxT) -> str | None:
    """Why ``boxes`` (one per rank) do not tile ``glob`` exactly, or None when they do.

    Exact cover = every box inside ``glob``, boxes pairwise disjoint, total volume == volume(glob).
    The message names ranks and boxes.
    """
    for r, b in enumerate(boxes):
        if not contains(glob, b):
            return f"rank {r} box {format_box(b)} lies outside the global box {format_box(glob)}"
    pair = find_overlap(boxes)
    if pair is not None:
        i, j = pair
        common = intersect(boxes[i], boxes[j])
        return (
            f"rank {i} box {format_box(boxes[i])} overlaps rank {j} box {format_box(boxes[j])} "
            f"(both hold {format_box(common)})"
        )
    covered = sum(volume(b) for b in boxes)
    total = volume(glob)
    if covered != total:
        where = find_uncovered_point(boxes, glob)
        at = f"; element {where} belongs to no rank" if where is not None else ""
        return (
            f"the boxes cover {covered} of the {total} elements of the global box {format_box(glob)}{at}"
        )
    return None


def subtract(box: BoxT, cut: BoxT) -> list[BoxT]:
    """Pairwise-disjoint boxes holding the elements of ``box`` outside ``cut`` (at most ``2·ndim``)."""
    common = intersect(box, cut)
    if common is None:
        return [] if is_empty(box) else [box]
    pieces = []
    lo, hi = list(box[0]), list(box[1])
    for d in range(len(lo)):  # peel the slabs below and above ``common`` on each axis in turn
        if lo[d] < common[0][d]:
            pieces.append((tuple(lo), tuple(hi[:d] + [common[0][d]] + hi[d + 1:])))
        if common[1][d] < hi[d]:
            pieces.append((tuple(lo[:d] + [common[1][d]] + lo[d + 1:]), tuple(hi)))
        lo[d], hi[d] = common[0][d], common[1][d]
    return pieces


def sources(in_boxes: Sequence[BoxT],
            out_boxes: Sequence[BoxT]) -> tuple[np.ndarray, Callable[[int, int], tuple[BoxT, ...]]]:
    """Who sends what when input boxes may overlap: each element comes from the lowest rank holding it.

    Returns ``(counts, parts)``: ``counts[s, d]`` (int64 matrix) = elements rank s is the source of
    in rank d's output box; ``parts(s, d)`` = those elements as pairwise-disjoint boxes, in a
    deterministic order (one box, ``in_boxes[s] ∩ out_boxes[d]``, when no lower rank's box cuts
    into it; none when the pair moves nothing).
    """
    counts = pairwise_overlap(in_boxes, out_boxes)
    held = pairwise_overlap(in_boxes, in_boxes)
    np.fill_diagonal(held, 0)
    special: dict[tuple[int, int], tuple[BoxT, ...]] = {}
    for s in range(1, len(in_boxes)):
        lower = [int(q) for q in np.flatnonzero(held[s, :s])]
        if not lower:
            continue
        for d in np.flatnonzero(counts[s]):
            d = int(d)
            pieces = [intersect(in_boxes[s], out_boxes[d])]
            for q in lower:
                pieces = [x for p in pieces for x in subtract(p, in_boxes[q])]
            bound = bounding_box(pieces) if pieces else None
            n = sum(volume(p) for p in pieces)
            if bound is not None and n == volume(bound):
                pieces = [bound]  # the pieces tile a box: one copy
            special[(s, d)] = tuple(pieces)
            counts[s, d] = n

    def parts(s: int, d: int) -> tuple[BoxT, ...]:
        got = special.get((s, d))
        if got is not None:
            return got
        box = intersect(in_boxes[s], out_boxes[d])
        return () if box is None else (box,)

    return counts, parts


def layout_candidates(shape: Sequence[int], strides: Sequence[int]) -> tuple[str, ...]:
    """Result orders ("C", "F") consistent with an operand's element strides.

    Only dimensions of extent > 1 and a nonzero stride count: a 1-D or degenerate operand fits
    both, and so does a broadcast axis (stride 0: every index reads the same elements, which fits
    either order). An operand whose strides are neither decreasing nor increasing (permuted axes)
    fits both too: its result is dense in whichever order the other ranks agree on. The sign of a
    stride does not matter: a reversed view (``a[::-1]``) keeps its array's order.
    """
    st = [abs(s) for n, s in zip(shape, strides) if n > 1 and s != 0]
    c = all(a >= b for a, b in zip(st, st[1:]))
    f = all(a <= b for a, b in zip(st, st[1:]))
    if c and not f:
        return ("C",)
    if f and not c:
        return ("F",)
    return ("C", "F")
