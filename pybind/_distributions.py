# SPDX-License-Identifier: Apache-2.0
"""Distributions: which box of the global array each process holds.

* :class:`Box` -- an explicit ``(lower, upper)`` box per process (lower inclusive, upper
  exclusive, global coordinates). ``lower == upper`` on an axis means the process holds nothing.
* :class:`Slab` -- split one axis into ``P`` consecutive slabs in rank order; the first
  ``S % P`` ranks get ``S // P + 1`` planes, the others ``S // P`` (nvmath-python's rule).
  ``Slab.X``, ``Slab.Y`` and ``Slab.Z`` split axes 0, 1 and 2.
* :class:`BlockNonCyclic` over a :class:`ProcessGrid` -- split several axes at once (2-D
  pencils, N-D blocks). Along each axis the same remainder rule applies, so extents need not
  divide the grid.

Distributions are immutable values: equal when they describe the same split, hashable, and
``str`` gives their constructor form. Nothing here talks to MPI; methods that need the number
of processes take ``nranks=`` and otherwise ask the runtime (which starts it if need be).
"""

from __future__ import annotations

import enum
import math
from collections import Counter
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from .engine import geometry as geo
from .engine.errors import BindDistributionError, ConvertDistributionError, InvalidValueError

__all__ = ["Distribution", "Box", "Slab", "ProcessGrid", "BlockNonCyclic", "resolve_boxes"]


def _int(v, what: str) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise InvalidValueError(f"{what} must be an integer, got {v!r}")
    return int(v)


def _shape(global_shape, what="global_shape") -> tuple[int, ...]:
    if isinstance(global_shape, (int, np.integer)):
        global_shape = (global_shape,)
    shape = tuple(_int(v, what) for v in global_shape)
    if any(v < 0 for v in shape):
        raise InvalidValueError(f"{what} must not have negative extents, got {shape}")
    return shape


def _context_rank_nranks(rank, nranks) -> tuple[int, int]:
    if rank is None or nranks is None:
        from ._runtime import get_context  # the runtime starts lazily; geometry never needs it

        pg = get_context().process_group
        rank = pg.rank if rank is None else rank
        nranks = pg.nranks if nranks is None else nranks
    return _int(rank, "rank"), _int(nranks, "nranks")


def _split(extent: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of block ``index`` when ``extent`` is split in ``parts`` (first ``extent % parts`` +1)."""
    q, r = divmod(extent, parts)
    start = index * q + min(index, r)
    return start, start + q + (1 if index < r else 0)


class Distribution(ABC):
    """How a global N-D array is split across processes (abstract)."""

    @property
    @abstractmethod
    def ndim(self) -> int | None:
        """Number of dimensions, or None when the distribution fits any (e.g. ``Slab.X``)."""

    @abstractmethod
    def box(self, rank: int | None = None, global_shape=None, *, nranks: int | None = None) -> Box:
        """The :class:`Box` process ``rank`` holds of an array of ``global_shape``."""

    def shape(self, rank: int | None = None, global_shape=None, *, nranks: int | None = None) -> tuple[int, ...]:
        """Local shape process ``rank`` holds of an array of ``global_shape``."""
        return self.box(rank, global_shape, nranks=nranks).box_shape

    def copy(self) -> Distribution:
        """Distributions are immutable; a copy is the object itself (kept for nvmath parity)."""
        return self

    @abstractmethod
    def to(self, cls, /, *, ndim: int | None = None, copy: bool = False, **kw) -> Distribution:
        """Convert to another distribution kind (see each class for what is supported)."""

    def _check_rank(self, rank, nranks) -> tuple[int, int]:
        rank, nranks = _context_rank_nranks(rank, nranks)
        if not 0 <= rank < nranks:
            raise InvalidValueError(f"This is not a valid process rank: got rank={rank} with nranks={nranks}")
        return rank, nranks

    def _bound_shape(self, global_shape):
        bound = getattr(self, "_global_shape", None)
        if global_shape is None:
            if bound is None:
                raise InvalidValueError("This distribution is unbound: please specify a global shape")
            return bound
        g = _shape(global_shape)
        if bound is not None and g != bound:
            raise InvalidValueError(
                "This distribution is already bound to a different global shape: "
                f"provided {g}, bound to {bound}"
            )
        return g


class Box(Distribution):
    """An explicit box ``[lower, upper)`` in global coordinates, given by each process.

    ``Box((0, 4), (2, 10))`` holds ``global[0:2, 4:10]``. numpy integers are accepted, and
    ``lower == upper`` on some axis gives an empty box (the process holds nothing).
    Unpacks as ``lower, upper = box``.
    """

    __slots__ = ("_lower", "_upper")

    def __init__(self, lower: Sequence[int], upper: Sequence[int]):
        try:
            lo, hi = geo.as_box(lower, upper)
        except (TypeError, ValueError) as e:
            raise InvalidValueError(f"invalid Box: {e}") from None
        for ax, (l, h) in enumerate(zip(lo, hi)):
            if h < l:
                raise InvalidValueError(
                    f"The upper coordinates must be >= the lower coordinates, but got lower={lo} upper={hi} "
                    f"(lower > upper on axis {ax})"
                )
        self._lower, self._upper = lo, hi

    lower = property(lambda self: self._lower, doc="Lower corner (inclusive).")
    upper = property(lambda self: self._upper, doc="Upper corner (exclusive).")
    ndim = property(lambda self: len(self._lower), doc="Number of dimensions.")
    box_shape = property(lambda self: geo.box_shape((self._lower, self._upper)), doc="upper - lower.")

    @property
    def is_empty(self) -> bool:
        return geo.is_empty((self._lower, self._upper))

    def as_tuple(self) -> geo.BoxT:
        return self._lower, self._upper

    def __iter__(self):
        return iter((self._lower, self._upper))

    def __getitem__(self, i):
        return (self._lower, self._upper)[i]

    def __eq__(self, other):
        return isinstance(other, Box) and self.as_tuple() == other.as_tuple()

    def __hash__(self):
        return hash(("Box", self._lower, self._upper))

    def __repr__(self):
        return f"Box(lower={self._lower}, upper={self._upper})"

    __str__ = __repr__

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        """The box itself (a Box is what the *calling* process holds)."""
        return self

    def shape(self, rank=None, global_shape=None, *, nranks=None):
        return self.box_shape

    def to(self, cls, /, *, ndim=None, copy=False, **kw):
        """``Box.to(Box, ndim=n)`` appends axes of extent 1 (lower 0, upper 1)."""
        if cls is not Box:
            raise NotImplementedError(f"Box can't be converted to {getattr(cls, '__name__', cls)}")
        n = self.ndim if ndim is None else _int(ndim, "ndim")
        if n < self.ndim:
            raise InvalidValueError(f"ndim argument ({n}) must be >= the distribution's dimensionality ({self.ndim})")
        k = n - self.ndim
        return Box(self._lower + (0,) * k, self._upper + (1,) * k)


class Slab(Distribution):
    """Split axis ``partition_dim`` into consecutive slabs, one per process, in rank order.

    Process ``r`` of ``P`` gets ``S // P + 1`` planes if ``r < S % P`` else ``S // P`` (so with
    ``S < P`` the last ranks hold nothing). ``Slab.X``/``Slab.Y``/``Slab.Z`` split axis 0/1/2.
    """

    X: Slab
    Y: Slab
    Z: Slab

    def __init__(self, partition_dim: int, ndim: int | None = None):
        p = _int(partition_dim, "partition_dim")
        if p < 0:
            raise InvalidValueError(f"partition_dim must be integer >= 0, got {partition_dim}")
        if ndim is not None:
            ndim = _int(ndim, "ndim")
            if ndim < 1:
                raise InvalidValueError(f"ndim must be integer >= 1, got {ndim}")
            if p >= ndim:
                raise InvalidValueError("partition_dim must be < ndim")
        self._p, self._ndim, self._global_shape = p, ndim, None

    partition_dim = property(lambda self: self._p, doc="The axis that is split.")
    ndim = property(lambda self: self._ndim)

    @property
    def name(self) -> str:
        return {0: "Slab.X", 1: "Slab.Y", 2: "Slab.Z"}.get(self._p, "Slab") if self._ndim is None else "Slab"

    def __eq__(self, other):
        return (
            isinstance(other, Slab)
            and self._p == other._p
            and (self._ndim is None or other._ndim is None or self._ndim == other._ndim)
        )

    def __hash__(self):
        return hash(("Slab", self._p))

    def __repr__(self):
        nd = "" if self._ndim is None else f", ndim={self._ndim}"
        return f"Slab(partition_dim={self._p}{nd})"

    __str__ = __repr__

    def bind(self, global_shape) -> Slab:
        """A copy of this Slab that remembers ``global_shape`` (so ``shape``/``box`` need no argument)."""
        g = _shape(global_shape)
        if self._p >= len(g):
            raise BindDistributionError(f"{self} can't split axis {self._p} of a {len(g)}-D array of shape {g}")
        if self._ndim is not None and self._ndim != len(g):
            raise BindDistributionError(f"The given shape {g} doesn't have the same dimensionality as {self}")
        s = Slab(self._p, len(g))
        s._global_shape = g
        return s

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        g = self._bound_shape(global_shape)
        if self._p >= len(g):
            raise InvalidValueError(f"{self} can't split axis {self._p} of a {len(g)}-D array of shape {g}")
        if self._ndim is not None and self._ndim != len(g):
            raise InvalidValueError(f"The given shape {g} doesn't have the same dimensionality as {self}")
        rank, nranks = self._check_rank(rank, nranks)
        lo, hi = [0] * len(g), list(g)
        lo[self._p], hi[self._p] = _split(g[self._p], nranks, rank)
        return Box(lo, hi)

    def to(self, cls, /, *, ndim=None, copy=False, rank=None, global_shape=None, nranks=None):
        """Convert to ``Slab`` (set ndim), ``BlockNonCyclic`` (1-D grid) or ``Box`` (needs a global shape)."""
        if ndim is not None and self._ndim is not None and ndim < self._ndim:
            raise InvalidValueError(
                f"ndim argument ({ndim}) must be >= the distribution's dimensionality ({self._ndim})"
            )
        if cls is Slab:
            n = ndim if ndim is not None else self._ndim
            if n is not None and n <= self._p:
                raise InvalidValueError(f"ndim ({n}) must be greater than the partition dimension ({self._p})")
            return Slab(self._p, n)
        if cls is BlockNonCyclic:
            n = ndim if ndim is not None else self._ndim
            if n is None:
                raise ConvertDistributionError("Can't convert Slab distribution to BlockNonCyclic: unknown dimensionality")
            if n <= self._p:
                raise InvalidValueError(
                    f"ndim ({n}) must be greater than the partition dimension ({self._p})"
                )
            _, nranks = _context_rank_nranks(0, nranks)
            grid = [1] * n
            grid[self._p] = nranks
            return BlockNonCyclic(ProcessGrid(tuple(grid), ProcessGrid.Layout.ROW_MAJOR))
        if cls is Box:
            if global_shape is None and self._global_shape is None:
                raise ConvertDistributionError("Unbound Slab distribution can't be converted to Box.")
            return self.box(rank, global_shape, nranks=nranks).to(Box, ndim=ndim)
        raise NotImplementedError(f"Slab can't be converted to {getattr(cls, '__name__', cls)}")


Slab.X, Slab.Y, Slab.Z = Slab(0), Slab(1), Slab(2)


class ProcessGrid:
    """An N-D grid of processes: which process sits at which grid coordinate.

    ``ProcessGrid((2, 4))`` puts 8 processes on a 2×4 grid in row-major order (rank = i*4 + j);
    ``layout=ProcessGrid.Layout.COL_MAJOR`` uses column-major order (rank = i + j*2) and
    ``process_array`` gives an explicit array of ranks.
    """

    class Layout(enum.IntEnum):
        COL_MAJOR = 0
        ROW_MAJOR = 1

    def __init__(self, shape: Sequence[int] | None = None, layout: ProcessGrid.Layout | None = None, *, process_array=None):
        if process_array is not None:
            if layout is not None:
                raise NotImplementedError("give either layout or process_array, not both")
            arr = np.asarray(process_array)
            if shape is not None and tuple(shape) != arr.shape:
                raise InvalidValueError(f"shape {tuple(shape)} and process_array.shape {arr.shape} don't match")
            flat = sorted(int(v) for v in arr.ravel())
            if flat != list(range(arr.size)):
                raise InvalidValueError(f"process_array must hold each rank 0..{arr.size - 1} once, got {arr.tolist()}")
            self._shape, self._layout, self._array = tuple(arr.shape), None, arr.astype(np.int64)
        else:
            if shape is None:
                raise InvalidValueError("shape must be provided when process_array=None")
            if isinstance(shape, (int, np.integer)):
                shape = (shape,)
            self._shape = tuple(_int(v, "process grid extent") for v in shape)
            if any(v < 1 for v in self._shape):
                raise InvalidValueError(f"process grid extents must be >= 1, got {self._shape}")
            if layout is None:
                layout = ProcessGrid.Layout.ROW_MAJOR
            if not isinstance(layout, ProcessGrid.Layout):
                raise InvalidValueError(f"layout must be of type ProcessGrid.Layout, got {layout!r}")
            self._layout = layout
            order = "C" if layout == ProcessGrid.Layout.ROW_MAJOR else "F"
            self._array = np.arange(math.prod(self._shape), dtype=np.int64).reshape(self._shape, order=order)
        self._coords = {int(r): tuple(int(c) for c in idx) for idx, r in np.ndenumerate(self._array)}

    shape = property(lambda self: self._shape, doc="Grid extents.")
    layout = property(lambda self: self._layout, doc="Rank order (None with an explicit process_array).")
    process_array = property(lambda self: self._array.copy(), doc="Rank at each grid position.")
    nranks = property(lambda self: self._array.size, doc="Number of processes on the grid.")

    def coords(self, rank: int) -> tuple[int, ...]:
        """Grid coordinates of ``rank``."""
        return self._coords[rank]

    def __eq__(self, other):
        return isinstance(other, ProcessGrid) and self._shape == other._shape and np.array_equal(self._array, other._array)

    def __hash__(self):
        return hash(("ProcessGrid", self._shape, self._array.tobytes()))

    def __repr__(self):
        if self._layout is None:
            return f"ProcessGrid(process_array={self._array.tolist()})"
        return f"ProcessGrid(shape={self._shape}, layout=ProcessGrid.Layout.{self._layout.name})"


class BlockNonCyclic(Distribution):
    """One contiguous block per process on an N-D :class:`ProcessGrid` (pencils, N-D blocks).

    Along axis ``d`` the extent ``S`` is split in ``grid.shape[d]`` blocks, the first ``S % g``
    one element larger. A grid with fewer axes than the array leaves the trailing axes whole:
    ``BlockNonCyclic(ProcessGrid((1, 2, 2)))`` gives X-pencils on 4 processes.
    """

    def __init__(self, process_grid: ProcessGrid, *, first_process=None):
        if not isinstance(process_grid, ProcessGrid):
            raise InvalidValueError(f"process_grid must be a ProcessGrid, got {process_grid!r}")
        if first_process is not None and any(int(c) != 0 for c in first_process):
            raise NotImplementedError("BlockNonCyclic with first_process other than the origin is not supported")
        self._grid, self._global_shape = process_grid, None

    process_grid = property(lambda self: self._grid)
    ndim = property(lambda self: len(self._grid.shape))

    def __eq__(self, other):
        return isinstance(other, BlockNonCyclic) and self._grid == other._grid

    def __hash__(self):
        return hash(("BlockNonCyclic", self._grid))

    def __repr__(self):
        return f"BlockNonCyclic({self._grid!r})"

    __str__ = __repr__

    def bind(self, global_shape) -> BlockNonCyclic:
        g = _shape(global_shape)
        if len(self._grid.shape) > len(g):
            raise BindDistributionError(f"{self} has a {len(self._grid.shape)}-D grid but the array is {len(g)}-D")
        b = BlockNonCyclic(self._grid)
        b._global_shape = g
        return b

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        if self._grid.nranks != nranks:
            raise InvalidValueError(f"Number of grid elements ({self._grid.nranks}) must equal the number of processes ({nranks})")
        if len(self._grid.shape) > len(g):
            raise InvalidValueError(f"{self} has a {len(self._grid.shape)}-D grid but the array is {len(g)}-D")
        c = self._grid.coords(rank)
        lo, hi = [0] * len(g), list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            lo[d], hi[d] = _split(g[d], n, i)
        return Box(lo, hi)

    def to(self, cls, /, *, ndim=None, copy=False, rank=None, global_shape=None, nranks=None):
        """Convert to ``Box`` (needs a global shape) or ``Slab`` (grid split along one axis only)."""
        if cls is BlockNonCyclic:
            return self
        if cls is Box:
            if global_shape is None and self._global_shape is None:
                raise ConvertDistributionError("Unbound BlockNonCyclic distribution can't be converted to Box.")
            return self.box(rank, global_shape, nranks=nranks).to(Box, ndim=ndim)
        if cls is Slab:
            split = [d for d, n in enumerate(self._grid.shape) if n > 1]
            if len(split) > 1 or (split and self._grid.layout is None and self._grid.nranks > 1 and
                                  list(self._grid.process_array.ravel()) != list(range(self._grid.nranks))):
                raise ConvertDistributionError("Can't convert this block distribution to Slab: partitioning must be on a single dimension")
            return Slab(split[0] if split else 0, ndim)
        raise NotImplementedError(f"BlockNonCyclic can't be converted to {getattr(cls, '__name__', cls)}")


# --- resolution of every rank's distribution to boxes (pure; runs on gathered data) ---------


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
    assert isinstance(dist, BlockNonCyclic)
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
