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
the number of processes take ``nranks=`` and otherwise ask the runtime, which must be up
(:func:`redist.initialize`): they never start it, nor MPI. The grid distributions live in
:mod:`._blocks`, box resolution in :mod:`._resolve`.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import numpy as np

from .engine import geometry as geo
from .engine.errors import (BindDistributionError, ConvertDistributionError, InvalidStateError,
                            InvalidValueError, NotInitializedError)

__all__ = ["Distribution", "Box", "Slab"]


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
        from ._runtime import get_context  # geometry never starts the runtime (nor MPI) by itself

        ctx = get_context()
        if ctx is None:
            raise NotInitializedError(
                f"redist has not been initialized: pass {'rank= and nranks=' if rank is None else 'nranks='} "
                "(nothing then touches MPI), or call redist.initialize() first")
        pg = ctx.process_group
        rank = pg.rank if rank is None else rank
        nranks = pg.nranks if nranks is None else nranks
    return _int(rank, "rank"), _int(nranks, "nranks")


def _given(coords) -> tuple:
    """``coords`` as a tuple for display (whatever they are), or the object itself."""
    try:
        return tuple(coords)
    except TypeError:
        return coords


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

        ``rank``/``nranks`` default to the runtime's (after :func:`redist.initialize`; before
        it, without them, NotInitializedError). Nothing here starts MPI.
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

    def _bound_shape(self, global_shape: Sequence[int] | None) -> tuple[int, ...]:
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

    A box is checked where it is used, not where it is made: ``Box((4,), (2,))`` constructs, and
    :class:`~redist.Redistribute` then raises the same InvalidValueError on every rank, naming
    the rank (a box built wrong on one rank must not leave the others waiting in a collective);
    any other use of it (``lower``, ``shape()``, ``box()``...) raises that error at once.
    """

    def __init__(self, lower: Sequence[int], upper: Sequence[int]):
        self._problem: InvalidValueError | None = None
        try:
            lo, hi = geo.as_box(lower, upper)
        except (TypeError, ValueError) as e:
            self._fail(lower, upper, f"invalid Box: {e}")
            return
        for ax, (l, h) in enumerate(zip(lo, hi)):
            if h < l:
                self._fail(lo, hi, f"The upper coordinates must be larger than the lower coordinates, but got "
                                   f"lower={lo} upper={hi} (lower > upper on axis {ax}; equal coordinates, an empty "
                                   "box, are allowed)")
                return
        self._lower, self._upper = lo, hi

    def _fail(self, lower, upper, msg: str) -> None:
        """Keep what was given (for repr and equality) and the problem, raised at first use."""
        self._problem = InvalidValueError(msg)
        self._lower, self._upper = _given(lower), _given(upper)

    def _valid(self) -> Box:
        """Raise the InvalidValueError of a box made with bad coordinates; the box itself otherwise."""
        if self._problem is not None:
            raise InvalidValueError(str(self._problem))
        return self

    @property
    def lower(self) -> tuple[int, ...]:
        """Lower corner (inclusive)."""
        return self._valid()._lower

    @property
    def upper(self) -> tuple[int, ...]:
        """Upper corner (exclusive)."""
        return self._valid()._upper

    @property
    def ndim(self) -> int:
        """Number of dimensions."""
        return len(self._valid()._lower)

    @property
    def box_shape(self) -> tuple[int, ...]:
        """``upper - lower``."""
        return geo.box_shape(self.as_tuple())

    @property
    def is_empty(self) -> bool:
        return geo.is_empty(self.as_tuple())

    def as_tuple(self) -> geo.BoxT:
        self._valid()
        return self._lower, self._upper

    def __iter__(self) -> Iterator[tuple[int, ...]]:
        return iter(self.as_tuple())

    def __getitem__(self, i: int) -> tuple[int, ...]:
        return self.as_tuple()[i]

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Box) and (self._lower, self._upper) == (other._lower, other._upper)

    def __hash__(self) -> int:
        return hash(("Box", self._lower, self._upper))

    def __repr__(self) -> str:
        return f"Box(lower={self._lower}, upper={self._upper})" + self._binding_str()

    __str__ = __repr__

    def box(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
            nranks: int | None = None) -> Box:
        """The box itself (a Box is what the *calling* process holds)."""
        return self._valid()

    def shape(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
              nranks: int | None = None) -> tuple[int, ...]:
        """This process's shape. A Box knows only its own process's box: ``rank`` other than
        this process's raises RuntimeError (as nvmath-python does)."""
        self._valid()
        if rank is not None:
            if nranks is not None and _int(nranks, "nranks") == 1:
                me = 0  # one process: it is rank 0, no runtime needed
            else:
                from ._runtime import get_context

                ctx = get_context()
                if ctx is None:
                    raise NotInitializedError(
                        "redist has not been initialized: Box.shape(rank) compares rank with this process's rank, "
                        "which needs redist.initialize() first (Box.shape() without rank needs nothing)")
                me = ctx.process_group.rank
            if _int(rank, "rank") != me:
                raise InvalidStateError("Can't calculate local shape of peer process with Box distribution")
        return self.box_shape

    def _bind(self, global_shape: Sequence[int], *, shape: Sequence[int] | None = None) -> Box:
        self._valid()
        if self._bound:
            raise BindDistributionError(f"{self} is already bound")
        if shape is not None and tuple(shape) != self.box_shape:
            raise BindDistributionError(
                f"The given shapes don't fit this Box distribution: {tuple(global_shape)} and {tuple(shape)}, "
                f"lower={self._lower} upper={self._upper}")
        self._global_shape, self._local_shape = _shape(global_shape), self.box_shape
        return self

    def to(self, cls: type[Distribution], /, *, ndim: int | None = None, copy: bool = False) -> Box:
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

    def box(self, rank: int | None = None, global_shape: Sequence[int] | None = None, *,
            nranks: int | None = None) -> Box:
        g = self._bound_shape(global_shape)
        if self._p >= len(g):
            raise InvalidValueError(f"{self} can't split axis {self._p} of a {len(g)}-D array of shape {g}")
        if self._ndim is not None and self._ndim != len(g):
            raise InvalidValueError(f"The given shape {g} doesn't have the same dimensionality as {self}")
        rank, nranks = self._check_rank(rank, nranks)
        lo, hi = [0] * len(g), list(g)
        lo[self._p], hi[self._p] = _split(g[self._p], nranks, rank)
        return Box(lo, hi)

    def to(self, cls: type[Distribution], /, *, ndim: int | None = None, copy: bool = False,
           rank: int | None = None, global_shape: Sequence[int] | None = None,
           nranks: int | None = None) -> Distribution:
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
        from ._blocks import BlockCyclic, BlockNonCyclic, ProcessGrid  # they build on Slab

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
