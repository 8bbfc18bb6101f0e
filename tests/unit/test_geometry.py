# SPDX-License-Identifier: Apache-2.0
"""Pure box geometry (engine/geometry.py): half-open boxes in global coordinates."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from redist.engine import geometry as geo


def B(lo, hi):
    return tuple(lo), tuple(hi)


# --- single boxes -----------------------------------------------------------------------------


def test_as_box_normalises_numpy_integers():
    box = geo.as_box([np.int64(1), np.int32(2)], (np.uint8(3), 4))
    assert box == ((1, 2), (3, 4))
    assert all(type(v) is int for v in box[0] + box[1])


@pytest.mark.parametrize("bad", [1.0, True, np.bool_(False), "1", None])
def test_as_box_rejects_non_integers(bad):
    with pytest.raises(TypeError, match="box coordinates must be integers"):
        geo.as_box((0, bad), (1, 2))


def test_as_box_rejects_mismatched_dimensionality():
    with pytest.raises(
        ValueError, match=r"lower \(0, 0\) and upper \(1,\) must have the same dimensionality"
    ):
        geo.as_box((0, 0), (1,))


def test_shape_volume_empty():
    box = B((0, 4), (2, 10))  # rows 0..1, columns 4..9
    assert geo.box_shape(box) == (2, 6)
    assert geo.volume(box) == 12
    assert not geo.is_empty(box)
    g = np.arange(100).reshape(10, 10)
    assert g[0:2, 4:10].size == geo.volume(box)
    empty = B((3, 4), (3, 9))
    assert geo.is_empty(empty) and geo.volume(empty) == 0 and geo.box_shape(empty) == (0, 5)
    assert geo.volume(B((), ())) == 1  # a 0-D box holds one element
    for nd in range(1, 7):
        box = B((1,) * nd, (3,) * nd)
        assert geo.volume(box) == 2**nd and geo.box_shape(box) == (2,) * nd


def test_intersect():
    a, b = B((0, 0), (4, 6)), B((2, 3), (8, 9))
    assert geo.intersect(a, b) == B((2, 3), (4, 6))
    assert geo.intersect(b, a) == geo.intersect(a, b)
    assert geo.intersect(a, a) == a
    assert geo.intersect(a, B((4, 0), (6, 6))) is None  # touching faces share nothing (half-open)
    assert geo.intersect(a, B((1, 1), (1, 5))) is None  # empty box
    assert geo.intersect(B((0,) * 5, (3,) * 5), B((2,) * 5, (9,) * 5)) == B((2,) * 5, (3,) * 5)


def test_contains():
    outer = B((0, 0), (4, 4))
    assert geo.contains(outer, B((1, 1), (4, 4)))
    assert geo.contains(outer, outer)
    assert not geo.contains(outer, B((1, 1), (5, 4)))
    assert geo.contains(outer, B((9, 9), (9, 12)))  # an empty box is inside anything


def test_bounding_box_skips_empty_boxes():
    boxes = [B((2, 3), (4, 5)), B((0, 9), (0, 20)), B((3, 1), (6, 4))]
    assert geo.bounding_box(boxes) == B((2, 1), (6, 5))
    assert geo.bounding_box([B((1, 1), (1, 3))]) is None
    assert geo.bounding_box([]) is None


def test_dense_strides():
    assert geo.dense_strides((2, 3, 4), "C") == (12, 4, 1)
    assert geo.dense_strides((2, 3, 4), "F") == (1, 2, 6)
    assert geo.dense_strides((5,)) == (1,)
    assert geo.dense_strides((2, 0, 4), "C") == (4, 4, 1)  # zero extents count as 1
    assert geo.dense_strides((3, 2, 1, 5, 4, 2), "C") == tuple(
        s // 8 for s in np.empty((3, 2, 1, 5, 4, 2), np.float64).strides
    )
    assert geo.dense_strides((3, 2, 1, 5, 4, 2), "F") == tuple(
        s // 8 for s in np.empty((3, 2, 1, 5, 4, 2), np.float64, order="F").strides
    )


def test_region_offset():
    # element (3, 5) of an array whose first element is global (2, 1), C strides (10, 1)
    assert geo.region_offset((2, 1), (3, 5), (10, 1)) == 14
    assert geo.region_offset((2, 1), (2, 1), (10, 1)) == 0


def test_format_box():
    assert geo.format_box(B((0, 1), (2, 3))) == "Box(lower=(0, 1), upper=(2, 3))"


# --- many boxes -------------------------------------------------------------------------------


def test_pairwise_overlap():
    a = [B((0, 0), (2, 4)), B((2, 0), (4, 4)), B((1, 1), (1, 4))]
    b = [B((0, 0), (4, 2)), B((0, 2), (4, 4))]
    m = geo.pairwise_overlap(a, b)
    assert m.dtype == np.int64 and m.shape == (3, 2)
    assert m.tolist() == [[4, 4], [4, 4], [0, 0]]
    # matches intersect/volume on random 3-D boxes, chunking included
    rng = np.random.default_rng(0)
    lo = rng.integers(0, 5, (40, 3))
    boxes = [B(l, l + rng.integers(0, 4, 3)) for l in lo]
    m = geo.pairwise_overlap(boxes, boxes, chunk=7)
    for i, x in enumerate(boxes):
        for j, y in enumerate(boxes):
            c = geo.intersect(x, y)
            assert m[i, j] == (geo.volume(c) if c else 0)


def test_find_overlap():
    assert geo.find_overlap([B((0,), (4,))]) is None
    assert geo.find_overlap([B((0,), (2,)), B((2,), (4,))]) is None
    assert geo.find_overlap([B((0,), (2,)), B((2,), (4,)), B((3,), (5,)), B((0,), (5,))]) == (0, 3)
    # identical empty boxes never collide
    assert geo.find_overlap([B((1, 1), (1, 3)), B((1, 1), (1, 3))]) is None


def test_find_uncovered_point():
    glob = B((0, 0), (4, 4))
    tiles = [B((0, 0), (2, 4)), B((2, 0), (4, 2)), B((2, 2), (4, 4))]
    assert geo.find_uncovered_point(tiles, glob) is None
    assert geo.find_uncovered_point(tiles[:2], glob) == (2, 2)
    assert geo.find_uncovered_point([], glob) == (0, 0)
    # an offset 6-D global box minus one element: 12 boxes around the hole
    g6 = B((1,) * 6, (4,) * 6)
    hole = (2, 3, 1, 1, 2, 3)
    pieces = []
    for d in range(6):
        fixed_lo, fixed_hi = hole[:d], tuple(h + 1 for h in hole[:d])
        pieces.append(B(fixed_lo + (1,) + (1,) * (5 - d), fixed_hi + (hole[d],) + (4,) * (5 - d)))
        pieces.append(B(fixed_lo + (hole[d] + 1,) + (1,) * (5 - d), fixed_hi + (4,) + (4,) * (5 - d)))
    assert geo.find_overlap(pieces) is None
    assert sum(map(geo.volume, pieces)) == 3**6 - 1
    assert geo.find_uncovered_point(pieces, g6) == hole
    assert geo.cover_problem(pieces, g6) == (
        "the boxes cover 728 of the 729 elements of the global box "
        "Box(lower=(1, 1, 1, 1, 1, 1), upper=(4, 4, 4, 4, 4, 4)); "
        "element (2, 3, 1, 1, 2, 3) belongs to no rank"
    )
    assert geo.cover_problem(pieces + [B(hole, tuple(h + 1 for h in hole))], g6) is None
    # give up rather than build a huge grid
    many = [B((i,), (i + 1,)) for i in range(0, 100, 2)]
    assert geo.find_uncovered_point(many, B((0,), (100,))) == (1,)
    assert geo.find_uncovered_point(many, B((0,), (100,)), max_cells=10) is None


def test_cover_problem_exact():
    glob = B((0, 0), (4, 6))
    tiles = [B((0, 0), (4, 3)), B((0, 3), (4, 6)), B((4, 0), (4, 6))]  # the last rank holds nothing
    assert geo.cover_problem(tiles, glob) is None


def test_cover_problem_overlap_names_ranks_and_boxes():
    glob = B((0, 0), (4, 4))
    boxes = [B((0, 0), (2, 4)), B((2, 0), (4, 4)), B((1, 1), (3, 2))]
    msg = geo.cover_problem(boxes, glob)
    assert msg == (
        "rank 0 box Box(lower=(0, 0), upper=(2, 4)) overlaps rank 2 box Box(lower=(1, 1), upper=(3, 2)) "
        "(both hold Box(lower=(1, 1), upper=(2, 2)))"
    )


def test_cover_problem_gap_names_the_missing_element():
    glob = B((0, 0), (4, 4))
    boxes = [B((0, 0), (2, 4)), B((2, 0), (4, 3))]
    msg = geo.cover_problem(boxes, glob)
    assert msg == (
        "the boxes cover 14 of the 16 elements of the global box Box(lower=(0, 0), upper=(4, 4)); "
        "element (2, 3) belongs to no rank"
    )


def test_cover_problem_outside():
    glob = B((0, 0), (4, 4))
    msg = geo.cover_problem([B((0, 0), (4, 2)), B((0, 2), (4, 5))], glob)
    assert msg == (
        "rank 1 box Box(lower=(0, 2), upper=(4, 5)) lies outside the global box "
        "Box(lower=(0, 0), upper=(4, 4))"
    )


def test_cover_problem_gap_without_point_when_search_is_too_large():
    # 600 diagonal cells cut a 1200x1200 box into more than 2**20 cells: the count is still given
    boxes = [B((i, i), (i + 1, i + 1)) for i in range(0, 1200, 2)]
    glob = B((0, 0), (1200, 1200))
    assert geo.find_uncovered_point(boxes, glob) is None
    msg = geo.cover_problem(boxes, glob)
    assert msg == (
        "the boxes cover 600 of the 1440000 elements of the global box Box(lower=(0, 0), upper=(1200, 1200))"
    )


# --- layouts ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "shape, order, want",
    [
        ((3, 4), "C", ("C",)),
        ((3, 4), "F", ("F",)),
        ((5,), "C", ("C", "F")),  # 1-D fits both
        ((3, 1), "C", ("C", "F")),  # one extent > 1: both
        ((1, 4, 1), "F", ("C", "F")),
        ((2, 3, 4, 1, 2, 3), "C", ("C",)),
        ((2, 3, 4, 1, 2, 3), "F", ("F",)),
        ((0, 4), "C", ("C", "F")),  # empty operands fit both
    ],
)
def test_layout_candidates_dense(shape, order, want):
    a = np.empty(shape, np.float32, order=order)
    assert geo.layout_candidates(a.shape, [s // 4 for s in a.strides]) == want


def test_layout_candidates_padded_and_permuted():
    big = np.empty((6, 7, 8), np.int16)
    v = big[1:4, 2:6, 1:7]  # padded C view
    assert geo.layout_candidates(v.shape, [s // 2 for s in v.strides]) == ("C",)
    v = np.asfortranarray(big)[1:4, ::2, 1:7]
    assert geo.layout_candidates(v.shape, [s // 2 for s in v.strides]) == ("F",)
    p = big.transpose(1, 0, 2)  # permuted axes: neither, accepted by both
    assert geo.layout_candidates(p.shape, [s // 2 for s in p.strides]) == ("C", "F")


@pytest.mark.parametrize("strides, want", [((0, 1), ("C", "F")), ((1, 0), ("C", "F")), ((0, 0), ("C", "F")),
                                           ((0, 5, 1), ("C",)), ((1, 0, 4), ("F",))])
def test_layout_candidates_broadcast_axes_fit_either_order(strides, want):
    """A zero-stride (broadcast) axis reads the same elements at every index: it fits both orders."""
    shape = (4, 5) if len(strides) == 2 else (4, 5, 6)
    assert geo.layout_candidates(shape, strides) == want


def test_geometry_plan_validate_import_no_mpi_cuda_cffi():
    code = (
        "import redist.engine.plan, redist.engine.validate, redist.engine.reference, "
        "redist._distributions, redist._blocks, redist._resolve, sys; "
        "bad=[m for m in ('mpi4py','cupy','cuda','cffi','torch','nvshmem') if m in sys.modules]; "
        "assert not bad, bad"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr
