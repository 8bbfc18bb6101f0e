# SPDX-License-Identifier: Apache-2.0
"""Process grids and the block distributions over them: :class:`ProcessGrid`,
:class:`BlockCyclic` (ScaLAPACK's block-cyclic layout, nvmath-python parity) and
:class:`BlockNonCyclic` (pencils and N-D blocks). See :mod:`._distributions` for the rest."""

from __future__ import annotations

import copy
import enum
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from ._distributions import Box, Distribution, Slab, _check_ndim_arg, _check_target, _int, _split
from .engine.errors import BindDistributionError, ConvertDistributionError, InvalidTypeError, InvalidValueError

__all__ = ["ProcessGrid", "BlockCyclic", "BlockNonCyclic"]


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

    def shape(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
              nranks: int | None = None) -> tuple[int, ...]:
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        self._check_grid(g, nranks)
        c = self._grid.coords(rank)
        out = list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            out[d] = _local_extent(g[d], self._block_sizes[d], i, self._first[d], n)
        return tuple(out)

    def box(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
            nranks: int | None = None) -> Box:
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

    def to(self, cls: type[Distribution], /, *, ndim: int | None = None, copy: bool = False,
           rank: int | None = None, global_shape: Sequence[int] | None = None,
           nranks: int | None = None) -> Distribution:
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

    def __str__(self) -> str:
        return self.__repr__()

    def shape(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
              nranks: int | None = None) -> tuple[int, ...]:
        return self.box(rank, global_shape, nranks=nranks).box_shape

    def box(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
            nranks: int | None = None) -> Box:
        g = self._bound_shape(global_shape)
        rank, nranks = self._check_rank(rank, nranks)
        self._check_grid(g, nranks)
        c = self._grid.coords(rank)
        lo, hi = [0] * len(g), list(g)
        for d, (n, i) in enumerate(zip(self._grid.shape, c)):
            lo[d], hi[d] = _split(g[d], n, i)
        return Box(lo, hi)

    def to(self, cls: type[Distribution], /, *, ndim: int | None = None, copy: bool = False,
           rank: int | None = None, global_shape: Sequence[int] | None = None,
           nranks: int | None = None) -> Distribution:
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
