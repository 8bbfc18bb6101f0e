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

* :class:`BlockCyclic` -- ScaLAPACK's block-cyclic layout (nvmath-python parity); it can be
  redistributed when no process holds more than one block per axis.

Distributions compare by value (binding ignored), are hashable, and ``str`` gives their
constructor form (as nvmath-python prints them). Nothing here talks to MPI; methods that need
the number of processes take ``nranks=`` and otherwise ask the runtime (which starts it if
need be).
"""

from __future__ import annotations

import copy
import enum
import math
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from .engine import geometry as geo
from .engine.errors import (BindDistributionError, ConvertDistributionError, InvalidStateError, InvalidTypeError,
                            InvalidValueError)

__all__ = ["Distribution", "Box", "Slab", "ProcessGrid", "BlockCyclic", "BlockNonCyclic", "resolve_boxes"]


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
        from ._runtime import context  # the runtime starts lazily; geometry never needs it

        pg = context().process_group
        rank = pg.rank if rank is None else rank
        nranks = pg.nranks if nranks is None else nranks
    return _int(rank, "rank"), _int(nranks, "nranks")


def _split(extent: int, parts: int, index: int) -> tuple[int, int]:
    """[start, stop) of block ``index`` when ``extent`` is split in ``parts`` (first ``extent % parts`` +1)."""
    q, r = divmod(extent, parts)
    start = index * q + min(index, r)
    return start, start + q + (1 if index < r else 0)


def _check_ndim_arg(ndim, have: int | None) -> int | None:
    if ndim is None:
        return None
    n = _int(ndim, "ndim")
    if have is not None and n < have:
        raise InvalidValueError(f"ndim argument ({n}) must be >= the distribution's dimensionality ({have})")
    return n


def _check_target(cls) -> None:
    if cls is Distribution or not (isinstance(cls, type) and issubclass(cls, Distribution)):
        raise InvalidValueError(f"{cls} is not a valid distribution")


class Distribution(ABC):
    """How a global N-D array is split across processes (abstract).

    A distribution may be *bound* to a global shape (``bind(shape)`` returns a bound copy;
    nvmath-python's private ``_bind`` binds in place): ``shape()``/``box()`` then need no
    ``global_shape``. Equality ignores binding.
    """

    _global_shape: tuple[int, ...] | None = None  # bound global shape
    _local_shape: tuple[int, ...] | None = None  # this process's shape when bound with shape=

    @property
    @abstractmethod
    def ndim(self) -> int | None:
        """Number of dimensions, or None when the distribution fits any (e.g. ``Slab.X``)."""

    @abstractmethod
    def box(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
            nranks: int | None = None) -> Box:
        """The :class:`Box` process ``rank`` holds of an array of ``global_shape``."""

    def shape(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
              nranks: int | None = None) -> tuple[int, ...]:
        """Local shape process ``rank`` holds of an array of ``global_shape``.

        ``rank``/``nranks`` default to the runtime's (which starts it); given both, nothing
        here touches MPI.
        """
        return self.box(rank, global_shape, nranks=nranks).box_shape

    def copy(self) -> Distribution:
        """A shallow copy (binding included)."""
        return copy.copy(self)

    @abstractmethod
    def to(self, cls: type[Distribution], /, *, ndim: int | None = None, copy: bool = False) -> Distribution:
        """Convert to another distribution kind (see each class for what is supported)."""

    # -- binding -----------------------------------------------------------------------------

    @property
    def _bound(self) -> bool:
        return self._global_shape is not None

    @_bound.setter
    def _bound(self, value: bool) -> None:
        if not value:
            self._global_shape = self._local_shape = None

    def _binding_str(self) -> str:
        if self._global_shape is None:
            return ""
        return f"[bound: global_shape={self._global_shape}, shape={self._local_shape}]"

    def _check_bindable(self, g: tuple[int, ...]) -> None:
        """Raise BindDistributionError if ``g`` is not an array this distribution can split."""

    def bind(self, global_shape: Sequence[int]) -> Distribution:
        """A copy of this distribution bound to ``global_shape``."""
        g = _shape(global_shape)
        self._check_bindable(g)
        d = copy.copy(self)
        d._global_shape, d._local_shape = g, None
        d._adopt_ndim(len(g))
        return d

    def _adopt_ndim(self, ndim: int) -> None:
        """Binding fixes the dimensionality of distributions that had none."""

    def _bind(self, global_shape: Sequence[int], *, shape: Sequence[int] | None = None) -> Distribution:
        """nvmath-python's in-place binding: bind ``self`` to ``global_shape`` and check that
        this process's ``shape`` (if given) fits. Returns ``self``."""
        if self._bound:
            raise BindDistributionError(f"{self} is already bound")
        b = self.bind(global_shape)
        mine = b.shape()
        if shape is not None and tuple(shape) != mine:
            raise BindDistributionError(
                f"The given shapes (global_shape={b._global_shape}, shape={tuple(shape)}) don't fit distribution {self}")
        self.__dict__.update(b.__dict__)
        self._local_shape = mine
        return self

    def _check_rank(self, rank, nranks) -> tuple[int, int]:
        if rank is not None and (isinstance(rank, bool) or not isinstance(rank, (int, np.integer))):
            raise InvalidValueError(f"rank must be an integer, got {rank}")
        rank, nranks = _context_rank_nranks(rank, nranks)
        if not 0 <= rank < nranks:
            raise InvalidValueError(f"This is not a valid process rank: got rank={rank} with nranks={nranks}")
        return rank, nranks

    def _bound_shape(self, global_shape) -> tuple[int, ...]:
        bound = self._global_shape
        if global_shape is None:
            if bound is None:
                raise InvalidStateError("This distribution is unbound: please specify a global shape")
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

    def __init__(self, lower: Sequence[int], upper: Sequence[int]):
        try:
            lo, hi = geo.as_box(lower, upper)
        except (TypeError, ValueError) as e:
            raise InvalidValueError(f"invalid Box: {e}") from None
        for ax, (l, h) in enumerate(zip(lo, hi)):
            if h < l:
                raise InvalidValueError(
                    f"The upper coordinates must be larger than the lower coordinates, but got lower={lo} upper={hi} "
                    f"(lower > upper on axis {ax}; equal coordinates, an empty box, are allowed)"
                )
        self._lower, self._upper = lo, hi

    @property
    def lower(self) -> tuple[int, ...]:
        """Lower corner (inclusive)."""
        return self._lower

    @property
    def upper(self) -> tuple[int, ...]:
        """Upper corner (exclusive)."""
        return self._upper

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._lower)

    @property
    def box_shape(self) -> tuple[int, ...]:
        """``upper - lower``."""
        return geo.box_shape((self._lower, self._upper))

    @property
    def is_empty(self) -> bool:
        return geo.is_empty((self._lower, self._upper))

    def as_tuple(self) -> geo.BoxT:
        return self._lower, self._upper

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter((self._lower, self._upper))

    def __getitem__(self, i: int) -> tuple[int, ...]:
        return (self._lower, self._upper)[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and self.as_tuple() == other.as_tuple()

    def __hash__(self) -> int:
        return hash(("Box", self._lower, self._upper))

    def __repr__(self) -> str:
        return f"Box(lower={self._lower}, upper={self._upper})" + self._binding_str()

    __str__ = __repr__

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        """The box itself (a Box is what the *calling* process holds)."""
        return self

    def shape(self, rank=None, global_shape=None, *, nranks=None) -> tuple[int, ...]:
        """This process's shape. A Box knows only its own process's box: ``rank`` other than
        this process's raises RuntimeError (as nvmath-python does)."""
        if rank is not None:
            me, _ = _context_rank_nranks(None, nranks)
            if _int(rank, "rank") != me:
                raise InvalidStateError("Can't calculate local shape of peer process with Box distribution")
        return self.box_shape

    def _bind(self, global_shape, *, shape=None) -> Box:
        if self._bound:
            raise BindDistributionError(f"{self} is already bound")
        if shape is not None and tuple(shape) != self.box_shape:
            raise BindDistributionError(
                f"The given shapes don't fit this Box distribution: {tuple(global_shape)} and {tuple(shape)}, "
                f"lower={self._lower} upper={self._upper}")
        self._global_shape, self._local_shape = _shape(global_shape), self.box_shape
        return self

    def to(self, cls, /, *, ndim=None, copy=False) -> Box:
        """``Box.to(Box, ndim=n)`` appends axes of extent 1 (lower 0, upper 1)."""
        _check_target(cls)
        n = _check_ndim_arg(ndim, self.ndim)
        if cls is not Box:
            raise NotImplementedError(f"Box can't be converted to {getattr(cls, '__name__', cls)}")
        if n is None or n == self.ndim:
            return self.copy() if copy else self
        k = n - self.ndim
        d = Box(self._lower + (0,) * k, self._upper + (1,) * k)
        if self._bound:
            d._bind(self._global_shape + (1,) * k)
        return d


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
        self._p, self._ndim = p, ndim

    @property
    def partition_dim(self) -> int:
        """The axis that is split."""
        return self._p

    @property
    def ndim(self) -> int | None:
        return self._ndim

    @property
    def name(self) -> str:
        return {0: "Slab.X", 1: "Slab.Y", 2: "Slab.Z"}.get(self._p, "Slab")

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Slab)
            and self._p == other._p
            and (self._ndim is None or other._ndim is None or self._ndim == other._ndim)
        )

    def __hash__(self) -> int:
        return hash(("Slab", self._p))

    def __repr__(self) -> str:
        return f"Slab(partition_dim={self._p}, ndim={self._ndim})" + self._binding_str()

    __str__ = __repr__

    def _check_bindable(self, g: tuple[int, ...]) -> None:
        if self._ndim is not None and self._ndim != len(g):
            raise BindDistributionError(f"The given shape {g} doesn't have the same dimensionality as this {self} "
                                        "distribution")
        if self._p >= len(g):
            raise BindDistributionError(f"{self} can't split axis {self._p} of a {len(g)}-D array of shape {g} "
                                        "(partition_dim must be < ndim)")

    def _adopt_ndim(self, ndim: int) -> None:
        self._ndim = ndim

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

    def to(self, cls, /, *, ndim=None, copy=False, rank=None, global_shape=None, nranks=None) -> Distribution:
        """Convert to ``Slab`` (set or raise ndim), the ``BlockCyclic`` family (a
        :class:`BlockNonCyclic` on a 1-D grid along the partition axis) or ``Box`` (needs a
        global shape: bound, or given)."""
        _check_target(cls)
        n = _check_ndim_arg(ndim, self._ndim)
        if n is not None and n <= self._p:
            raise InvalidValueError(f"ndim ({n}) must be greater than the partition dimension ({self._p})")
        n = self._ndim if n is None else n
        extra = 0 if (n is None or self._ndim is None) else n - self._ndim
        if cls is Slab:
            if n == self._ndim:
                return self.copy() if copy else self
            d = Slab(self._p, n)
            if self._bound:
                d._global_shape = self._global_shape + (1,) * extra
                d._local_shape = None if self._local_shape is None else self._local_shape + (1,) * extra
            return d
        if issubclass(cls, BlockCyclic):
            if n is None:
                raise ConvertDistributionError(f"Can't convert Slab distribution to {cls.__name__}: unknown "
                                               "dimensionality")
            _, nranks = _context_rank_nranks(0, nranks)
            grid = [1] * n
            grid[self._p] = nranks
            d = BlockNonCyclic(ProcessGrid(tuple(grid), ProcessGrid.Layout.ROW_MAJOR))
            if self._bound:
                d = d.bind(self._global_shape + (1,) * extra)
            return d
        if cls is Box:
            if global_shape is None and self._global_shape is None:
                raise ConvertDistributionError("Unbound Slab distribution can't be converted to Box.")
            g = self._bound_shape(global_shape)
            b = self.box(rank, g, nranks=nranks).to(Box, ndim=n)
            return b._bind(g + (1,) * (len(b.lower) - len(g)))
        raise NotImplementedError(f"Slab can't be converted to {cls.__name__}")


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

    def __init__(self, shape: Sequence[int] | int | None = None, layout: ProcessGrid.Layout | None = None, *,
                 process_array: Any = None):
        if process_array is not None:
            if layout is not None:
                raise NotImplementedError("give either layout or process_array, not both")
            arr = np.asarray(process_array)
            if shape is not None and tuple(shape) != arr.shape:  # type: ignore[arg-type]
                raise InvalidValueError(f"shape {tuple(shape)} and process_array.shape {arr.shape} don't match")  # type: ignore[arg-type]
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

    @property
    def shape(self) -> tuple[int, ...]:
        """Grid extents."""
        return self._shape

    @property
    def layout(self) -> ProcessGrid.Layout | None:
        """Rank order (None with an explicit process_array)."""
        return self._layout

    @property
    def process_array(self) -> np.ndarray:
        """Rank at each grid position (a copy)."""
        return self._array.copy()

    @property
    def nranks(self) -> int:
        """Number of processes on the grid."""
        return int(self._array.size)

    def coords(self, rank: int) -> tuple[int, ...]:
        """Grid coordinates of ``rank``."""
        return self._coords[rank]

    def padded(self, ndim: int) -> ProcessGrid:
        """This grid with trailing axes of extent 1 up to ``ndim`` axes (ranks stay put)."""
        k = ndim - len(self._shape)
        if k <= 0:
            return self
        if self._layout is None:
            return ProcessGrid(process_array=self._array.reshape(self._shape + (1,) * k))
        return ProcessGrid(self._shape + (1,) * k, self._layout)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessGrid) and self._shape == other._shape and np.array_equal(self._array, other._array)

    def __hash__(self) -> int:
        return hash(("ProcessGrid", self._shape, self._array.tobytes()))

    def __repr__(self) -> str:
        if self._layout is None:
            return f"ProcessGrid(process_array={self._array.tolist()})"
        return f"ProcessGrid(shape={self._shape}, layout=ProcessGrid.Layout.{self._layout.name})"


def _local_extent(n: int, nb: int, coord: int, first: int, nprocs: int) -> int:
    """Elements of an axis of ``n``, cut in blocks of ``nb`` dealt round-robin to ``nprocs``
    processes starting at ``first``, that the process at ``coord`` holds (ScaLAPACK's rule)."""
    dist = (coord - first) % nprocs
    full, rest = divmod(n, nb)
    mine = (full // nprocs) * nb
    extra = full % nprocs
    if dist < extra:
        return mine + nb
    if dist == extra:
        return mine + rest
    return mine


class BlockCyclic(Distribution):
    """Blocks of ``block_sizes`` dealt round-robin over a :class:`ProcessGrid` (ScaLAPACK's
    block-cyclic layout), starting at grid position ``first_process``.

    ``shape()`` gives any process's local extent. A process's part is one box only when no
    axis deals it more than one block; only then can it be redistributed (``box()``), as
    with nvmath-python, which accepts what converts to a Slab.
    """

    def __init__(self, process_grid: ProcessGrid, block_sizes: Sequence[int], *,
                 first_process: Sequence[int] | None = None):
        if not isinstance(process_grid, ProcessGrid):
            raise InvalidValueError(f"process_grid must be a ProcessGrid, got {process_grid!r}")
        if block_sizes is None or isinstance(block_sizes, (str, bytes)) or not all(
                isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in block_sizes):
            raise InvalidValueError(f"Must provide a sequence of integer block sizes, got {block_sizes}")
        if len(block_sizes) != len(process_grid.shape):
            raise InvalidValueError(f"Number of block sizes ({len(block_sizes)}) doesn't match dimensionality "
                                    f"({len(process_grid.shape)})")
        self._init(process_grid, tuple(int(b) for b in block_sizes), first_process)
        if any(b < 1 for b in self._block_sizes):
            raise InvalidValueError(f"block sizes must be >= 1, got {self._block_sizes}")

    def _init(self, grid: ProcessGrid, block_sizes: tuple[int, ...], first_process) -> None:
        n = len(grid.shape)
        if first_process is None:
            first = (0,) * n
        else:
            if isinstance(first_process, (str, bytes)) or not all(
                    isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in first_process):
                raise InvalidValueError(f"first_process must be a sequence of integer coordinates, got {first_process}")
            first = tuple(int(x) for x in first_process)
            if len(first) != n or any(not 0 <= x < g for x, g in zip(first, grid.shape)):
                raise InvalidValueError(f"first_process {tuple(first_process)} is not a valid index into the process "
                                        f"grid of shape {grid.shape}")
        self._grid, self._block_sizes, self._first = grid, block_sizes, first

    @property
    def process_grid(self) -> ProcessGrid:
        return self._grid

    @property
    def ndim(self) -> int:
        return len(self._grid.shape)

    @property
    def block_sizes(self) -> tuple[int, ...]:
        """Block extents per axis (-1: not known until bound, for BlockNonCyclic)."""
        return self._block_sizes

    @property
    def first_process(self) -> tuple[int, ...]:
        """Grid coordinates of the process that holds the first block."""
        return self._first

    def __eq__(self, other: object) -> bool:
        return (type(other) is type(self) and self._grid == other._grid  # type: ignore[attr-defined]
                and self._block_sizes == other._block_sizes and self._first == other._first)  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._grid, self._block_sizes, self._first))

    def __repr__(self) -> str:
        return f"BlockCyclic(process_grid={self._grid!r}, block_sizes={self._block_sizes})" + self._binding_str()

    __str__ = __repr__

    def _check_bindable(self, g: tuple[int, ...]) -> None:
        if len(self._grid.shape) > len(g):
            raise BindDistributionError(f"{self} has a {len(self._grid.shape)}-D grid but the array is {len(g)}-D")

    def _check_grid(self, g: tuple[int, ...], nranks: int) -> None:
        if self._grid.nranks != nranks:
            raise InvalidValueError(f"Number of grid elements ({self._grid.nranks}) must equal the number of "
                                    f"processes ({nranks})")
        if len(self._grid.shape) > len(g):
            raise InvalidValueError(f"{self} has a {len(self._grid.shape)}-D grid but the array is {len(g)}-D")

    def shape(self, rank=None, global_shape=None, *, nranks=None) -> tuple[int, ...]:
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        self._check_grid(g, nranks)
        c = self._grid.coords(rank)
        out = list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            out[d] = _local_extent(g[d], self._block_sizes[d], i, self._first[d], n)
        return tuple(out)

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        """Process ``rank``'s part as one Box; InvalidTypeError when an axis deals it several
        blocks (a cyclic layout is not a box)."""
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        self._check_grid(g, nranks)
        c = self._grid.coords(rank)
        lo, hi = [0] * len(g), list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            nb = self._block_sizes[d]
            if n > 1 and -(-g[d] // nb) > n:
                raise InvalidTypeError(
                    f"Redistribute requires distributions compatible with Box distribution: {self} deals "
                    f"{-(-g[d] // nb)} blocks of {nb} along axis {d} (extent {g[d]}) to {n} processes, so a process "
                    "holds several blocks (a cyclic layout, not one box)")
            k = (i - self._first[d]) % n
            lo[d], hi[d] = min(k * nb, g[d]), min((k + 1) * nb, g[d])
        return Box(lo, hi)

    def _promoted(self, n: int) -> BlockCyclic:
        k = n - self.ndim
        d = copy.copy(self)
        d._grid = self._grid.padded(n)
        d._block_sizes = self._block_sizes + (1,) * k
        d._first = self._first + (0,) * k
        if self._bound:
            d._global_shape = self._global_shape + (1,) * k
            d._local_shape = None if self._local_shape is None else self._local_shape + (1,) * k
        return d

    def to(self, cls, /, *, ndim=None, copy=False, rank=None, global_shape=None, nranks=None) -> Distribution:
        """Convert to ``BlockCyclic`` (raise ndim), ``Slab`` (bound; one split axis whose block
        size is its extent / processes) or ``Box`` (through Slab)."""
        _check_target(cls)
        n = _check_ndim_arg(ndim, self.ndim)
        n = self.ndim if n is None else n
        if cls is BlockCyclic:
            return self._promoted(n) if n != self.ndim else (self.copy() if copy else self)
        if cls is BlockNonCyclic:
            raise NotImplementedError("BlockCyclic can't be converted to BlockNonCyclic")
        if cls is Slab or cls is Box:
            s = self._as_slab(n)
            return s if cls is Slab else s.to(Box, ndim=n, rank=rank, global_shape=global_shape, nranks=nranks)
        raise NotImplementedError(f"{type(self).__name__} can't be converted to {cls.__name__}")

    def _as_slab(self, n: int) -> Slab:
        if not self._bound:
            raise ConvertDistributionError(
                "Unbound BlockCyclic distribution can't be converted to Slab. Consider using BlockNonCyclic if there "
                "is no cyclic distribution of blocks.")
        split = [d for d, k in enumerate(self._grid.shape) if k > 1]
        if len(split) > 1:
            raise ConvertDistributionError(
                "Can't convert this block distribution to Slab: partitioning must be on a single dimension")
        p = split[0] if split else 0
        g = self._global_shape
        k = self._grid.shape[p]
        if g[p] % k:
            raise ConvertDistributionError(
                f"Can't convert this distribution to Slab: data doesn't divide evenly on partition dimension "
                f"({g[p]} over {k} processes)")
        if self._block_sizes[p] != g[p] // k or any(f != 0 for f in self._first):
            raise ConvertDistributionError(
                f"This distribution can't be converted to Slab, because the block size in the partition dimension "
                f"({self._block_sizes[p]}) is not the extent divided by the processes ({g[p] // k})")
        return Slab(p, len(g)).bind(g + (1,) * (n - len(g)) if n > len(g) else g)  # type: ignore[return-value]


class BlockNonCyclic(BlockCyclic):
    """One contiguous block per process on an N-D :class:`ProcessGrid` (pencils, N-D blocks).

    Along axis ``d`` the extent ``S`` is split in ``grid.shape[d]`` blocks, the first ``S % g``
    one element larger (so extents need not divide the grid, unlike nvmath-python). A grid
    with fewer axes than the array leaves the trailing axes whole:
    ``BlockNonCyclic(ProcessGrid((1, 2, 2)))`` gives X-pencils on 4 processes.
    """

    def __init__(self, process_grid: ProcessGrid, *, first_process: Sequence[int] | None = None):
        if not isinstance(process_grid, ProcessGrid):
            raise InvalidValueError(f"process_grid must be a ProcessGrid, got {process_grid!r}")
        self._init(process_grid, (-1,) * len(process_grid.shape), first_process)
        if any(c != 0 for c in self._first):
            raise NotImplementedError("BlockNonCyclic with first_process other than the origin is not supported")

    @property
    def block_sizes(self) -> tuple[int, ...]:
        """The block extents once bound (-1 where unbound or uneven)."""
        g = self._global_shape
        if g is None:
            return self._block_sizes
        return tuple(b if b != -1 or d >= len(g) else (g[d] // k if g[d] % k == 0 else -1)
                     for d, (b, k) in enumerate(zip(self._block_sizes, self._grid.shape)))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlockNonCyclic) and self._grid == other._grid

    def __hash__(self) -> int:
        return hash(("BlockNonCyclic", self._grid))

    def __repr__(self) -> str:
        return f"BlockNonCyclic({self._grid!r})" + self._binding_str()

    __str__ = __repr__

    def shape(self, rank=None, global_shape=None, *, nranks=None) -> tuple[int, ...]:
        return self.box(rank, global_shape, nranks=nranks).box_shape

    def box(self, rank=None, global_shape=None, *, nranks=None) -> Box:
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        self._check_grid(g, nranks)
        c = self._grid.coords(rank)
        lo, hi = [0] * len(g), list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            lo[d], hi[d] = _split(g[d], n, i)
        return Box(lo, hi)

    def to(self, cls, /, *, ndim=None, copy=False, rank=None, global_shape=None, nranks=None) -> Distribution:
        """Convert to ``BlockNonCyclic``/``BlockCyclic`` (raise ndim), ``Box`` (needs a global
        shape) or ``Slab`` (grid split along one axis only)."""
        _check_target(cls)
        n = _check_ndim_arg(ndim, self.ndim)
        n = self.ndim if n is None else n
        if cls is BlockNonCyclic or cls is BlockCyclic:
            return self._promoted(n) if n != self.ndim else (self.copy() if copy else self)
        if cls is Box:
            if global_shape is None and self._global_shape is None:
                raise ConvertDistributionError("Unbound BlockNonCyclic distribution can't be converted to Box.")
            g = self._bound_shape(global_shape)
            b = self.box(rank, g, nranks=nranks).to(Box, ndim=n)
            return b._bind(g + (1,) * (len(b.lower) - len(g)))
        if cls is Slab:
            split = [d for d, k in enumerate(self._grid.shape) if k > 1]
            if len(split) > 1 or (split and self._grid.layout is None and self._grid.nranks > 1 and
                                  list(self._grid.process_array.ravel()) != list(range(self._grid.nranks))):
                raise ConvertDistributionError(
                    "Can't convert this block distribution to Slab: partitioning must be on a single dimension")
            s = Slab(split[0] if split else 0, n)
            return s.bind(self._global_shape + (1,) * (n - len(self._global_shape))) if self._bound else s  # type: ignore[operator]
        raise NotImplementedError(f"BlockNonCyclic can't be converted to {cls.__name__}")


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
