# SPDX-License-Identifier: Apache-2.0
"""Distributions (pybind/_distributions.py, _blocks.py, _resolve.py): Box, Slab, ProcessGrid, BlockNonCyclic,
resolve_boxes.

Semantics mirror nvmath-python 1.0 (see shared/reference/nvmath-redistribute.md, section 1.2):
the Slab remainder rule gives ``S // P + 1`` planes to the first ``S % P`` ranks. Unlike nvmath,
empty boxes, numpy integers, uneven BlockNonCyclic extents and any dimensionality are accepted.
Every call passes ``nranks=`` so nothing here starts a runtime.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest

from redist import (
    BindDistributionError,
    BlockNonCyclic,
    Box,
    ConvertDistributionError,
    Distribution,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    ProcessGrid,
    Slab,
)
from redist._resolve import _held_boxes, normal_global_shape, resolve_boxes
from redist.engine import geometry as geo

ROW, COL = ProcessGrid.Layout.ROW_MAJOR, ProcessGrid.Layout.COL_MAJOR


def tiles_exactly(boxes, gshape, origin=None):
    origin = origin or (0,) * len(gshape)
    glob = (tuple(origin), tuple(o + s for o, s in zip(origin, gshape)))
    return geo.cover_problem([b.as_tuple() if isinstance(b, Box) else b for b in boxes], glob) is None


# --- Box --------------------------------------------------------------------------------------


def test_box_basics():
    b = Box((0, 4), (2, 10))
    assert b.lower == (0, 4) and b.upper == (2, 10)
    assert b.ndim == 2 and b.box_shape == (2, 6) and not b.is_empty
    lo, hi = b  # unpacks like nvmath's Box
    assert (lo, hi) == ((0, 4), (2, 10)) and b[0] == lo and b[1] == hi
    with pytest.raises(IndexError):
        b[2]
    assert b.as_tuple() == ((0, 4), (2, 10))
    # a Box is what the calling process holds, whatever the rank/global shape asked
    assert b.box(3, (100, 100), nranks=8) is b
    assert b.shape() == (2, 6) and b.shape(0, nranks=1) == (2, 6)  # its own rank: the box shape
    c = b.copy()
    assert isinstance(b, Distribution) and c == b and c is not b


def test_box_numpy_integers_and_empty():
    b = Box(np.array([1, 2], dtype=np.int32), (np.int64(3), np.uint16(2)))
    assert b.lower == (1, 2) and b.upper == (3, 2)
    assert all(type(v) is int for v in b.lower + b.upper)
    assert b.is_empty and b.box_shape == (2, 0)
    assert Box((5,), (5,)).box_shape == (0,)


def test_box_equality_hash_str():
    a, b = Box((0, 1), (2, 3)), Box([np.int64(0), 1], [2, np.int8(3)])
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Box((0, 1), (2, 4)) and a != ((0, 1), (2, 3))
    assert str(a) == repr(a) == "Box(lower=(0, 1), upper=(2, 3))"


@pytest.mark.parametrize(
    "lower, upper, match",
    [
        (
            (2, 2),
            (0, 0),
            r"The upper coordinates must be larger than the lower coordinates, but got lower=\(2, 2\) "
            r"upper=\(0, 0\) \(lower > upper on axis 0; equal coordinates, an empty box, are allowed\)",
        ),
        ((0, 3), (4, 2), r"lower=\(0, 3\) upper=\(4, 2\) \(lower > upper on axis 1;"),
        ((0, 1), (4,), "same dimensionality"),
        ((0, 1.0), (4, 2), "must be integers"),
        ((0, True), (4, 2), "must be integers"),
    ],
)
def test_box_rejects(lower, upper, match):
    """A bad Box constructs (so one rank's bad box cannot leave the others waiting in a
    collective) and raises at its first use; Redistribute raises it on every rank."""
    b = Box(lower, upper)
    assert repr(b).startswith("Box(lower=") and b == Box(lower, upper) and b != Box((0, 0), (1, 1))
    for use in (lambda: b.lower, lambda: b.upper, lambda: b.box_shape, lambda: b.as_tuple(), lambda: tuple(b),
                lambda: b.shape(), lambda: b.box(), lambda: b._bind((4, 4)), lambda: b.to(Box, ndim=3)):
        with pytest.raises(InvalidValueError, match=match):
            use()


def test_box_to_box_promotes():
    assert Box((1,), (4,)).to(Box, ndim=3) == Box((1, 0, 0), (4, 1, 1))
    assert Box((1, 2), (4, 5)).to(Box) == Box((1, 2), (4, 5))
    with pytest.raises(
        InvalidValueError, match=r"ndim argument \(1\) must be >= the distribution's dimensionality \(2\)"
    ):
        Box((1, 2), (4, 5)).to(Box, ndim=1)
    with pytest.raises(NotImplementedError, match="Box can't be converted to Slab"):
        Box((1,), (4,)).to(Slab)


# --- Slab -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "extent, nranks, sizes",
    [
        (39, 4, [10, 10, 10, 9]),  # nvmath's examples
        (63, 4, [16, 16, 16, 15]),
        (8, 3, [3, 3, 2]),
        (10, 4, [3, 3, 2, 2]),
        (12, 4, [3, 3, 3, 3]),
        (2, 5, [1, 1, 0, 0, 0]),  # fewer planes than ranks: the last ranks hold nothing
        (0, 3, [0, 0, 0]),
        (7, 1, [7]),
    ],
)
def test_slab_remainder_rule(extent, nranks, sizes):
    g = (extent, 5)
    assert [Slab.X.shape(r, g, nranks=nranks) for r in range(nranks)] == [(s, 5) for s in sizes]
    # first S % P ranks get S // P + 1
    q, rem = divmod(extent, nranks)
    assert sizes == [q + (r < rem) for r in range(nranks)]
    boxes = [Slab.X.box(r, g, nranks=nranks) for r in range(nranks)]
    starts = [b.lower[0] for b in boxes]
    assert starts == [sum(sizes[:r]) for r in range(nranks)]  # consecutive, in rank order
    assert all(b.lower[1] == 0 and b.upper[1] == 5 for b in boxes)
    if extent:
        assert tiles_exactly(boxes, g)


def test_slab_to_box():
    g = (4, 10, 3)
    b = Slab.Y.to(Box, rank=1, global_shape=g, nranks=3)
    assert b == Box((0, 4, 0), (4, 7, 0 + 3))
    assert Slab.Y.box(1, g, nranks=3) == b
    assert Slab.Y.to(Box, rank=2, global_shape=(4, 10), nranks=3, ndim=3) == Box((0, 7, 0), (4, 10, 1))
    with pytest.raises(ConvertDistributionError, match="Unbound Slab distribution can't be converted to Box"):
        Slab.Y.to(Box, rank=0, nranks=3)
    # an empty part converts to an empty Box (nvmath raises here)
    e = Slab.X.to(Box, rank=3, global_shape=(2, 6), nranks=4)
    assert e.is_empty and e.box_shape == (0, 6)


@pytest.mark.parametrize("ndim", range(1, 7))
def test_slab_every_axis_every_ndim(ndim):
    rng = np.random.default_rng(ndim)
    g = tuple(int(v) for v in rng.integers(1, 6, ndim))
    for axis in range(ndim):
        for nranks in (1, 2, 3, 7):
            boxes = [Slab(axis).box(r, g, nranks=nranks) for r in range(nranks)]
            assert tiles_exactly(boxes, g)
            for r, b in enumerate(boxes):
                assert b.box_shape == tuple(
                    (g[d] // nranks + (r < g[d] % nranks)) if d == axis else g[d] for d in range(ndim)
                )


def test_slab_aliases_equality_hash_str():
    assert (Slab.X.partition_dim, Slab.Y.partition_dim, Slab.Z.partition_dim) == (0, 1, 2)
    assert Slab.X == Slab(0) and Slab.Y == Slab(1) and Slab.Z == Slab(2)
    assert Slab.X != Slab.Y and Slab.X != Box((0,), (1,))
    assert Slab.X.ndim is None
    assert Slab(0) == Slab(0, ndim=3)  # unknown ndim matches any
    assert Slab(0, ndim=2) != Slab(0, ndim=3)
    assert hash(Slab(0)) == hash(Slab(0, ndim=3)) == hash(Slab.X)
    assert len({Slab.X, Slab(0), Slab.Y}) == 2
    assert str(Slab.X) == "Slab(partition_dim=0, ndim=None)"
    assert repr(Slab(1, ndim=3)) == "Slab(partition_dim=1, ndim=3)"
    assert (Slab.X.name, Slab.Y.name, Slab.Z.name, Slab(3).name) == ("Slab.X", "Slab.Y", "Slab.Z", "Slab")


def test_slab_numpy_integers():
    s = Slab(np.int64(1), ndim=np.int32(2))
    assert s == Slab(1, ndim=2)
    assert s.box(np.int64(1), (np.int64(4), np.int16(5)), nranks=np.int8(2)) == Box((0, 3), (4, 5))
    assert Slab.X.box(1, np.array([5, 2]), nranks=2) == Box((3, 0), (5, 2))
    assert Slab.X.box(2, 7, nranks=3) == Box((5,), (7,))  # an int global shape is 1-D


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: Slab(-1), "partition_dim must be integer >= 0, got -1"),
        (lambda: Slab(0, ndim=0), "ndim must be integer >= 1, got 0"),
        (lambda: Slab(2, ndim=2), "partition_dim must be < ndim"),
        (lambda: Slab(1.0), "partition_dim must be an integer"),
        (
            lambda: Slab.X.box(4, (8, 8), nranks=4),
            r"This is not a valid process rank: got rank=4 with nranks=4",
        ),
        (lambda: Slab.X.box(-1, (8, 8), nranks=4), r"got rank=-1 with nranks=4"),
        (
            lambda: Slab.Z.box(0, (8, 8), nranks=2),
            r"Slab\(partition_dim=2, ndim=None\) can't split axis 2 of a 2-D array",
        ),
        (lambda: Slab.X.box(0, (-1, 3), nranks=1), "must not have negative extents"),
        (
            lambda: Slab(0, ndim=2).box(0, (4, 4, 4), nranks=2),
            r"\(4, 4, 4\) doesn't have the same dimensionality",
        ),
        (
            lambda: Slab(0, ndim=2).to(Slab, ndim=1),
            r"ndim argument \(1\) must be >= the distribution's dimensionality \(2\)",
        ),
        (lambda: Slab(2).to(Slab, ndim=2), r"ndim \(2\) must be greater than the partition dimension \(2\)"),
        (
            lambda: Slab(2).to(BlockNonCyclic, ndim=2, nranks=4),
            r"ndim \(2\) must be greater than the partition",
        ),
    ],
)
def test_slab_rejects(make, match):
    with pytest.raises(InvalidValueError, match=match):
        make()


def test_slab_bind_and_conversions():
    s = Slab.Y.bind((4, 6))
    assert s.ndim == 2 and s == Slab.Y
    assert s.box(1, nranks=2) == Box((0, 3), (4, 6))
    assert s.to(Box, rank=0, nranks=2) == Box((0, 0), (4, 3))
    assert s.box(1, (4, 6), nranks=2) == Box((0, 3), (4, 6))  # the bound shape again is fine
    with pytest.raises(
        InvalidValueError, match=r"already bound to a different global shape: provided \(4, 8\)"
    ):
        s.box(1, (4, 8), nranks=2)
    with pytest.raises(BindDistributionError, match=r"can't split axis 1 of a 1-D array"):
        Slab.Y.bind((4,))
    with pytest.raises(BindDistributionError, match="same dimensionality"):
        Slab(0, ndim=3).bind((4, 4))
    assert Slab.Y.to(Slab, ndim=3) == Slab(1, ndim=3)
    assert Slab(1, ndim=2).to(Slab, ndim=4).ndim == 4
    bnc = Slab.Y.to(BlockNonCyclic, ndim=3, nranks=4)
    assert bnc == BlockNonCyclic(ProcessGrid((1, 4, 1), ROW))
    g = (5, 9, 2)
    assert [bnc.box(r, g, nranks=4) for r in range(4)] == [Slab.Y.box(r, g, nranks=4) for r in range(4)]
    with pytest.raises(ConvertDistributionError, match="unknown dimensionality"):
        Slab.Y.to(BlockNonCyclic, nranks=4)
    with pytest.raises(InvalidValueError, match="is not a valid distribution"):
        Slab.X.to(int)
    with pytest.raises(InvalidStateError, match="This distribution is unbound: please specify a global shape"):
        Slab.X.shape(0, nranks=2)  # RuntimeError, as nvmath-python raises


# --- ProcessGrid ------------------------------------------------------------------------------


def test_process_grid_row_and_col_major():
    row = ProcessGrid((2, 4))
    assert row.layout == ROW and row.shape == (2, 4) and row.nranks == 8
    assert [row.coords(r) for r in range(8)] == [(r // 4, r % 4) for r in range(8)]  # rank = i*4 + j
    col = ProcessGrid((2, 4), COL)
    assert [col.coords(r) for r in range(8)] == [(r % 2, r // 2) for r in range(8)]  # rank = i + j*2
    assert col.process_array.tolist() == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert row != col and hash(row) != hash(col)
    assert ProcessGrid((1, 4), ROW) == ProcessGrid((1, 4), COL)  # same rank placement
    assert ProcessGrid(4).shape == (4,)
    assert repr(col) == "ProcessGrid(shape=(2, 4), layout=ProcessGrid.Layout.COL_MAJOR)"


def test_process_grid_process_array():
    arr = np.array([[3, 0], [1, 2]])
    g = ProcessGrid(process_array=arr)
    assert g.layout is None and g.shape == (2, 2) and g.nranks == 4
    assert g.coords(3) == (0, 0) and g.coords(2) == (1, 1)
    assert ProcessGrid((2, 2), process_array=arr) == g
    pa = g.process_array
    pa[0, 0] = 99  # a copy
    assert g.process_array[0, 0] == 3
    assert ProcessGrid(process_array=[[0, 1], [2, 3]]) == ProcessGrid((2, 2), ROW)
    assert repr(g) == "ProcessGrid(process_array=[[3, 0], [1, 2]])"


def test_process_grid_any_dimensionality():
    for shape in [(6,), (2, 3), (2, 1, 3), (1, 2, 1, 2), (2, 1, 1, 1, 2), (1, 1, 2, 1, 1, 2)]:
        for lay in (ROW, COL):
            g = ProcessGrid(shape, lay)
            coords = [g.coords(r) for r in range(g.nranks)]
            assert sorted(coords) == sorted(np.ndindex(*shape))
            order = "C" if lay == ROW else "F"
            assert all(np.ravel_multi_index(c, shape, order=order) == r for r, c in enumerate(coords))


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: ProcessGrid(), InvalidValueError, "shape must be provided when process_array=None"),
        (lambda: ProcessGrid((2, 0)), InvalidValueError, "process grid extents must be >= 1"),
        (
            lambda: ProcessGrid((2, 2), layout=1),
            InvalidValueError,
            "layout must be of type ProcessGrid.Layout",
        ),
        (lambda: ProcessGrid((2, 2), ROW, process_array=[[0, 1], [2, 3]]), NotImplementedError, "not both"),
        (
            lambda: ProcessGrid((2, 3), process_array=[[0, 1], [2, 3]]),
            InvalidValueError,
            r"shape \(2, 3\) and process_array.shape \(2, 2\) don't match",
        ),
        (
            lambda: ProcessGrid(process_array=[[0, 1], [1, 3]]),
            InvalidValueError,
            "must hold each rank 0..3 once",
        ),
    ],
)
def test_process_grid_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


# --- BlockNonCyclic ---------------------------------------------------------------------------


def test_pencils_uneven_extents():
    """X-pencils and Y-pencils on a 2x3 grid of a 7x5x4 array (nothing divides)."""
    g = (7, 5, 4)
    xp = BlockNonCyclic(ProcessGrid((1, 2, 3)))  # X whole: split Y over 2, Z over 3
    boxes = [xp.box(r, g, nranks=6) for r in range(6)]
    assert boxes[0] == Box((0, 0, 0), (7, 3, 2))
    assert boxes[5] == Box((0, 3, 3), (7, 5, 4))
    assert [b.box_shape for b in boxes] == [(7, 3, 2), (7, 3, 1), (7, 3, 1), (7, 2, 2), (7, 2, 1), (7, 2, 1)]
    assert tiles_exactly(boxes, g)
    yp = BlockNonCyclic(ProcessGrid((2, 3)))  # grid shorter than the array: Z stays whole
    boxes = [yp.box(r, g, nranks=6) for r in range(6)]
    assert [b.box_shape for b in boxes] == [(4, 2, 4), (4, 2, 4), (4, 1, 4), (3, 2, 4), (3, 2, 4), (3, 1, 4)]
    assert all(b.lower[2] == 0 and b.upper[2] == 4 for b in boxes)
    assert tiles_exactly(boxes, g)


def test_block_non_cyclic_layouts_place_ranks():
    g = (4, 6)
    row = BlockNonCyclic(ProcessGrid((2, 3), ROW))
    col = BlockNonCyclic(ProcessGrid((2, 3), COL))
    arr = BlockNonCyclic(ProcessGrid(process_array=[[5, 4, 3], [2, 1, 0]]))
    assert row.box(1, g, nranks=6) == Box((0, 2), (2, 4))
    assert col.box(1, g, nranks=6) == Box((2, 0), (4, 2))
    assert arr.box(0, g, nranks=6) == Box((2, 4), (4, 6))
    for d in (row, col, arr):
        assert tiles_exactly([d.box(r, g, nranks=6) for r in range(6)], g)


@pytest.mark.parametrize("ndim", range(1, 7))
def test_block_non_cyclic_n_dimensional(ndim):
    rng = np.random.default_rng(10 + ndim)
    g = tuple(int(v) for v in rng.integers(1, 7, ndim))
    grid = tuple(int(v) for v in rng.integers(1, 4, ndim))
    nranks = math.prod(grid)
    for lay in (ROW, COL):
        d = BlockNonCyclic(ProcessGrid(grid, lay))
        assert d.ndim == ndim
        boxes = [d.box(r, g, nranks=nranks) for r in range(nranks)]
        assert tiles_exactly(boxes, g)
        for r, b in enumerate(boxes):
            c = d.process_grid.coords(r)
            for ax in range(ndim):
                q, rem = divmod(g[ax], grid[ax])
                assert b.box_shape[ax] == q + (c[ax] < rem)
                assert b.lower[ax] == c[ax] * q + min(c[ax], rem)


def test_block_non_cyclic_empty_blocks():
    d = BlockNonCyclic(ProcessGrid((4, 2)))
    boxes = [d.box(r, (2, 3), nranks=8) for r in range(8)]
    assert [b.is_empty for b in boxes] == [False] * 4 + [True] * 4
    assert tiles_exactly(boxes, (2, 3))


def test_block_non_cyclic_equality_bind_and_conversions():
    a = BlockNonCyclic(ProcessGrid((2, 2)))
    assert a == BlockNonCyclic(ProcessGrid((2, 2), ROW)) and hash(a) == hash(
        BlockNonCyclic(ProcessGrid((2, 2)))
    )
    assert a != BlockNonCyclic(ProcessGrid((2, 2), COL)) and a != Slab.X
    assert str(a) == "BlockNonCyclic(ProcessGrid(shape=(2, 2), layout=ProcessGrid.Layout.ROW_MAJOR))"
    assert BlockNonCyclic(ProcessGrid((2, 2)), first_process=(0, 0)) == a
    b = a.bind((5, 3))
    assert b.box(3, nranks=4) == Box((3, 2), (5, 3))
    assert a.to(Box, rank=3, global_shape=(5, 3), nranks=4) == Box((3, 2), (5, 3))
    assert a.to(Box, rank=3, global_shape=(5, 3), nranks=4, ndim=3) == Box((3, 2, 0), (5, 3, 1))
    assert a.to(BlockNonCyclic) is a
    with pytest.raises(
        ConvertDistributionError, match="Unbound BlockNonCyclic distribution can't be converted to Box"
    ):
        a.to(Box, rank=0, nranks=4)
    with pytest.raises(BindDistributionError, match="has a 2-D grid but the array is 1-D"):
        a.bind((5,))
    assert BlockNonCyclic(ProcessGrid((1, 4, 1))).to(Slab) == Slab.Y
    with pytest.raises(ConvertDistributionError, match="partitioning must be on a single dimension"):
        a.to(Slab)
    with pytest.raises(ConvertDistributionError, match="partitioning must be on a single dimension"):
        BlockNonCyclic(ProcessGrid(process_array=[[1, 0]])).to(Slab)  # not in rank order


@pytest.mark.parametrize(
    "make, exc, match",
    [
        (lambda: BlockNonCyclic((2, 2)), InvalidValueError, "process_grid must be a ProcessGrid"),
        (
            lambda: BlockNonCyclic(ProcessGrid((2, 2)), first_process=(1, 0)),
            NotImplementedError,
            "first_process",
        ),
        (
            lambda: BlockNonCyclic(ProcessGrid((2, 2))).box(0, (4, 4), nranks=3),
            InvalidValueError,
            r"Number of grid elements \(4\) must equal the number of processes \(3\)",
        ),
        (
            lambda: BlockNonCyclic(ProcessGrid((2, 2, 2))).box(0, (4, 4), nranks=8),
            InvalidValueError,
            "has a 3-D grid but the array is 2-D",
        ),
        (
            lambda: BlockNonCyclic(ProcessGrid((2, 2))).box(4, (4, 4), nranks=4),
            InvalidValueError,
            "not a valid process rank",
        ),
    ],
)
def test_block_non_cyclic_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


# --- resolve_boxes ----------------------------------------------------------------------------


def shapes_of(dist, g, nranks):
    return [dist.shape(r, g, nranks=nranks) for r in range(nranks)]


@pytest.mark.parametrize(
    "din, dout, g, nranks",
    [
        (Slab.X, Slab.Y, (8, 5), 3),
        (Slab.Z, Slab.X, (3, 4, 10), 4),
        (Slab(4), Slab(1), (2, 3, 1, 2, 7, 2), 5),
        (Slab.X, Slab.Y, (2, 9), 4),  # empty input slabs
        (BlockNonCyclic(ProcessGrid((2, 3))), Slab.Z, (5, 7, 2), 6),
        (BlockNonCyclic(ProcessGrid((1, 2, 3), COL)), BlockNonCyclic(ProcessGrid((3, 2))), (4, 5, 7), 6),
        (BlockNonCyclic(ProcessGrid(process_array=[[2, 0], [1, 3]])), Slab.X, (3, 5), 4),
        (BlockNonCyclic(ProcessGrid((4, 2))), Slab.Y, (2, 3), 8),  # empty blocks
    ],
)
def test_resolve_boxes_infers_global_shape(din, dout, g, nranks):
    in_boxes, out_boxes = resolve_boxes([din] * nranks, [dout] * nranks, shapes_of(din, g, nranks))
    assert in_boxes == [din.box(r, g, nranks=nranks).as_tuple() for r in range(nranks)]
    assert out_boxes == [dout.box(r, g, nranks=nranks).as_tuple() for r in range(nranks)]
    assert tiles_exactly(in_boxes, g) and tiles_exactly(out_boxes, g)
    assert resolve_boxes([din] * nranks, [dout] * nranks, shapes_of(din, g, nranks), [g] * nranks) == (
        in_boxes, out_boxes)
    assert _held_boxes(din, shapes_of(din, g, nranks)) == in_boxes  # what a global_shape= mismatch names
    bigger = tuple(n + 1 for n in g)
    with pytest.raises(InvalidValueError, match=rf"global_shape={re.escape(str(bigger))} was passed, but the "
                                                rf"inferred global shape is {re.escape(str(g))}"):
        resolve_boxes([din] * nranks, [dout] * nranks, shapes_of(din, g, nranks), [bigger] * nranks)


def test_resolve_boxes_global_shape_of_box_inputs():
    ins = [Box((10, 20), (12, 23)), Box((12, 20), (14, 23))]
    assert resolve_boxes(ins, [Slab.Y] * 2, [(2, 3), (2, 3)], [(4, 3), (4, 3)])[0] == [b.as_tuple() for b in ins]
    with pytest.raises(InvalidValueError, match=r"global_shape=\(14, 23\) was passed, but the inferred global "
                                                r"shape is \(4, 3\) \(the bounding box of the input boxes\): the "
                                                r"input boxes are rank 0 Box\(lower=\(10, 20\), upper=\(12, 23\)\)"):
        resolve_boxes(ins, [Slab.Y] * 2, [(2, 3), (2, 3)], [(14, 23), (14, 23)])
    with pytest.raises(InvalidValueError, match=r"global_shape \(4, 3, 1\) has 3 axes but the operands are 2-D"):
        resolve_boxes(ins, [Slab.Y] * 2, [(2, 3), (2, 3)], [(4, 3, 1), (4, 3, 1)])


@pytest.mark.parametrize("value, error", [("ab", InvalidTypeError), (3, InvalidTypeError), ((2.0, 3), InvalidTypeError),
                                          ((), InvalidValueError), ((4, -1), InvalidValueError)])
def test_normal_global_shape_refuses(value, error):
    with pytest.raises(error, match="global_shape must"):
        normal_global_shape(value)
    assert normal_global_shape(np.array([4, 3])) == (4, 3) and normal_global_shape(None) is None


def test_resolve_boxes_box_input_places_outputs_at_its_origin():
    # global box [10, 14) x [20, 23): Slab outputs are laid over it, not over the origin
    ins = [Box((10, 20), (12, 23)), Box((12, 20), (14, 23))]
    in_boxes, out_boxes = resolve_boxes(ins, [Slab.Y] * 2, [(2, 3), (2, 3)])
    assert in_boxes == [b.as_tuple() for b in ins]
    assert out_boxes == [((10, 20), (14, 22)), ((10, 22), (14, 23))]
    _, out_boxes = resolve_boxes(ins, [BlockNonCyclic(ProcessGrid((1, 2)))] * 2, [(2, 3), (2, 3)])
    assert out_boxes == [((10, 20), (14, 22)), ((10, 22), (14, 23))]
    # Box outputs are taken as given
    outs = [Box((10, 20), (14, 21)), Box((10, 21), (14, 23))]
    assert resolve_boxes(ins, outs, [(2, 3), (2, 3)])[1] == [b.as_tuple() for b in outs]
    # Slab in, Box out
    in_boxes, out_boxes = resolve_boxes(
        [Slab.X] * 2, [Box((0, 0), (3, 1)), Box((0, 1), (3, 2))], [(2, 2), (1, 2)]
    )
    assert in_boxes == [((0, 0), (2, 2)), ((2, 0), (3, 2))]
    assert out_boxes == [((0, 0), (3, 1)), ((0, 1), (3, 2))]


def test_resolve_boxes_all_empty_box_input():
    e = Box((0, 0), (0, 0))
    assert resolve_boxes([e, e], [Slab.X] * 2, [(0, 0), (0, 0)]) == (
        [((0, 0), (0, 0))] * 2,
        [((0, 0), (0, 0))] * 2,
    )


@pytest.mark.parametrize(
    "din, dout, shapes, match",
    [
        # sums to 8 but violates the remainder rule (nvmath raises on one rank only; here on all)
        (
            [Slab.X] * 3,
            [Slab.Y] * 3,
            [(4, 5), (2, 5), (2, 5)],
            (
                r"rank 0 operand shape \(4, 5\) does not fit the input distribution Slab\(partition_dim=0, ndim=None\): "
                r"for the global shape \(8, 5\) inferred from all ranks, rank 0 should hold \(3, 5\)"
            ),
        ),
        ([Slab.X] * 3, [Slab.Y] * 3, [(3, 5), (3, 4), (2, 5)], r"rank 1 operand shape \(3, 4\) does not fit"),
        (
            [Slab.X] * 3,
            [Slab.Y] * 3,
            [(3, 5), (3, 5, 1), (2, 5)],
            "rank 1 operand is 3-D but rank 0's is 2-D",
        ),
        (
            [BlockNonCyclic(ProcessGrid((2, 2)))] * 4,
            [Slab.X] * 4,
            [(2, 2), (2, 2), (2, 2), (2, 3)],
            r"rank 3 operand shape \(2, 3\) does not fit the input distribution BlockNonCyclic",
        ),
        (
            [BlockNonCyclic(ProcessGrid((2, 2)))] * 3,
            [Slab.X] * 3,
            [(2, 2)] * 3,
            r"Number of grid elements \(4\) must equal the number of processes \(3\)",
        ),
        (
            [BlockNonCyclic(ProcessGrid((1, 1, 2)))] * 2,
            [Slab.X] * 2,
            [(2, 2)] * 2,
            "3-D grid but the operands are 2-D",
        ),
        ([Slab.Z] * 2, [Slab.Y] * 2, [(2, 5), (2, 5)], r"can't split axis 2 of 2-D operands"),
        (
            [Slab.X, Box((0, 0), (1, 1)), Slab.X],
            [Slab.Y] * 3,
            [(3, 5), (3, 5), (2, 5)],
            "Inconsistent input distribution type across processes: rank 0 uses Slab, rank 1 uses Box",
        ),
        (
            [Slab.X, Slab.X, BlockNonCyclic(ProcessGrid(3))],
            [Slab.Y] * 3,
            [(3, 5), (3, 5), (2, 5)],
            (
                "Inconsistent input distribution type across processes: "
                "rank 0 uses Slab, rank 2 uses BlockNonCyclic"
            ),
        ),
        (
            [Slab.X] * 3,
            [Slab.Y, Box((0, 0), (1, 1)), Slab.Y],
            [(3, 5), (3, 5), (2, 5)],
            "Inconsistent output distribution type across processes: rank 0 uses Slab, rank 1 uses Box",
        ),
        (
            [Slab.X, Slab.Y, Slab.X],
            [Slab.Y] * 3,
            [(3, 5), (3, 5), (2, 5)],
            (
                r"Inconsistent input distribution across processes: rank 0 uses Slab\(partition_dim=0, ndim=None\), "
                r"rank 1 uses Slab\(partition_dim=1, ndim=None\)"
            ),
        ),
        (
            [Slab.X] * 3,
            [Slab.Y, Slab.Y, Slab.Z],
            [(3, 5), (3, 5), (2, 5)],
            "Inconsistent output distribution across processes: .* rank 2 uses Slab\\(partition_dim=2, ndim=None\\)",
        ),
        # a Slab that declares its dimensionality must match the operands
        ([Slab(0, ndim=2)] * 2, [Slab.Y] * 2, [(2, 5, 3), (2, 5, 3)], "doesn't have the same dimensionality"),
        (
            [Box((0, 0, 0), (2, 5, 3)), Box((2, 0, 0), (4, 5, 3))],
            [Slab(1, ndim=2)] * 2,
            [(2, 5, 3)] * 2,
            "doesn't have the same dimensionality",
        ),
        # a distribution bound to another global shape
        (
            [Slab.X.bind((6, 5))] * 3,
            [Slab.Y] * 3,
            [(3, 5), (3, 5), (2, 5)],
            "already bound to a different global shape",
        ),
    ],
)
def test_resolve_boxes_errors(din, dout, shapes, match):
    with pytest.raises(InvalidValueError, match=match):
        resolve_boxes(din, dout, shapes)


def test_shape_without_nranks_never_starts_mpi():
    """Before initialize(), a shape without nranks raises NotInitializedError and leaves MPI alone, so
    a later explicit initialize() works (in a fresh process: this one must not start MPI)."""
    import subprocess
    import sys

    code = (
        "import sys, redist\n"
        "from redist import Slab, BlockNonCyclic, ProcessGrid\n"
        "for call in (lambda: Slab.X.shape(0, (8, 6)), lambda: Slab.Y.box(None, (8, 6), nranks=2),\n"
        "             lambda: BlockNonCyclic(ProcessGrid((1, 1))).shape(0, (8, 6))):\n"
        "    try:\n"
        "        call()\n"
        "        raise SystemExit('no error')\n"
        "    except redist.NotInitializedError as e:\n"
        "        assert 'redist.initialize() first' in str(e) and isinstance(e, RuntimeError), e\n"
        "assert 'mpi4py' not in sys.modules and not redist.is_initialized()\n"
        "assert Slab.X.shape(1, (8, 6), nranks=2) == (4, 6) and 'mpi4py' not in sys.modules\n"
        "redist.initialize(device_id='cpu')\n"
        "assert Slab.X.shape(0, (8, 6)) == (8, 6)\n"
        "print('ok')\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stdout + res.stderr
