# SPDX-License-Identifier: Apache-2.0
"""Collective validation (engine/validate.py): every problem check_specs finds, with its message.

Every rank runs check_specs on the same gathered list, so each test builds that list directly.
The messages must name the ranks and boxes at fault.
"""

from __future__ import annotations

import pickle
import re

import pytest

from redist import Slab
from redist.engine import errors
from redist.engine import collective
from redist.engine.validate import RankSpec, check_specs, consensus_order, raise_first

G = (7, 4)  # global shape of the baseline problem: 3 ranks, Slab.X -> Slab.Y


def boxes(dist, g=G, nranks=3):
    return [dist.box(r, g, nranks=nranks).as_tuple() for r in range(nranks)]


def specs(in_boxes=None, out_boxes=None, **per_rank):
    """Valid specs for Slab.X -> Slab.Y on (7, 4), 3 ranks; ``per_rank={r: {field: value}}`` overrides."""
    in_boxes = in_boxes or boxes(Slab.X)
    out_boxes = out_boxes or boxes(Slab.Y)
    out = []
    for r, (bi, bo) in enumerate(zip(in_boxes, out_boxes)):
        kw = {
            "rank": r,
            "ndim": len(bi[0]),
            "dtype": "float64",
            "itemsize": 8,
            "package": "numpy",
            "memory": "cpu",
            "layouts": ("C",),
            "shape": tuple(h - l for l, h in zip(*bi)),
            "strides": None,
            "in_box": bi,
            "out_box": bo,
            "options": (("blocking", "auto"),),
        }
        kw.update(per_rank.get(f"r{r}", {}))
        out.append(RankSpec(**kw))
    return out


def expect(sp, exc, *parts):
    """check_specs finds ``exc`` whose message contains every one of ``parts``; raise_first raises it."""
    found = check_specs(sp)
    assert found is not None, "no problem found"
    cls, msg = found
    assert cls is exc, (cls, msg)
    for p in parts:
        assert p in msg, f"{p!r} not in {msg!r}"
    with pytest.raises(exc, match=re.escape(parts[0])):
        raise_first(sp)
    return msg


def test_valid_problem_passes():
    sp = specs()
    assert check_specs(sp) is None
    raise_first(sp)  # no exception
    assert consensus_order(sp) == "C"


def test_rankspec_is_small_and_picklable():
    sp = specs()[1]
    assert pickle.loads(pickle.dumps(sp)) == sp


def test_empty_boxes_are_valid():
    # 2 planes over 4 ranks: ranks 2 and 3 hold nothing on input, rank 3 nothing on output
    ib, ob = boxes(Slab.X, (2, 3), 4), boxes(Slab.Y, (2, 3), 4)
    sp = [
        RankSpec(
            rank=r,
            ndim=2,
            dtype="int32",
            itemsize=4,
            package="numpy",
            memory="cpu",
            shape=tuple(h - l for l, h in zip(*ib[r])),
            in_box=ib[r],
            out_box=ob[r],
        )
        for r in range(4)
    ]
    assert check_specs(sp) is None
    # every box empty: nothing to do, still valid
    e = ((0, 0), (0, 3))
    sp = [
        RankSpec(rank=r, ndim=2, dtype="int32", itemsize=4, shape=(0, 3), in_box=e, out_box=e)
        for r in range(2)
    ]
    assert check_specs(sp) is None


def test_offset_global_box_is_valid():
    ib = [((10, 5), (12, 9)), ((12, 5), (17, 9))]
    ob = [((10, 5), (17, 7)), ((10, 7), (17, 9))]
    assert check_specs(specs(ib + [((10, 5), (10, 5))], ob + [((17, 9), (17, 9))])) is None


# --- errors met before the gather -------------------------------------------------------------


@pytest.mark.parametrize(
    "raised, exc",
    [
        (TypeError("x"), errors.InvalidTypeError),
        (ValueError("x"), errors.InvalidValueError),
        (OverflowError("x"), errors.InvalidValueError),
        (NotImplementedError("x"), errors.NotSupportedError),
        (errors.InvalidTypeError("x"), errors.InvalidTypeError),
        (errors.NotSupportedError("x"), errors.NotSupportedError),
        (errors.BindDistributionError("x"), errors.BindDistributionError),
        (ZeroDivisionError("x"), errors.InternalError),  # not an input error: a bug
    ],
)
def test_local_error_is_reraised_with_one_class(raised, exc):
    """collective.problem encodes any exception with the one table; check_specs raises that class."""
    name, _ = collective.problem(raised)
    sp = specs(r1={"error": (name, "the operand is a list")}, r2={"error": ("InvalidValueError", "later rank")})
    cls, msg = check_specs(sp)
    assert cls is exc and errors.status_of(raised) == exc.status
    assert msg == "rank 1: the operand is a list"  # the first failing rank, named
    with pytest.raises(exc, match="^rank 1: the operand is a list$"):
        raise_first(sp)


def test_unknown_class_names_are_internal_errors():
    sp = specs(r1={"error": ("SomethingUnknown", "?")})
    assert check_specs(sp)[0] is errors.InternalError


def test_local_error_round_trip_and_precedence():
    try:
        raise errors.InvalidTypeError("numpy.matrix is not supported")
    except errors.InvalidTypeError as e:
        enc = collective.problem(e)
    assert enc == ("InvalidTypeError", "numpy.matrix is not supported")
    # a carried error wins over every other problem (here: inconsistent ndim as well)
    sp = specs(r2={"error": enc, "ndim": 5})
    expect(sp, errors.InvalidTypeError, "rank 2: numpy.matrix is not supported")


# --- inconsistent properties ------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value, exc, what",
    [
        ("ndim", 3, errors.InvalidValueError, "number of dimensions"),
        ("package", "torch", errors.InvalidTypeError, "array package"),
        ("memory", "cuda", errors.InvalidValueError, "memory space"),
        ("dtype", "complex64", errors.InvalidValueError, "dtype"),
        ("itemsize", 4, errors.InvalidValueError, "element size"),
        ("options", (("blocking", True),), errors.InvalidValueError, "options"),
    ],
)
def test_inconsistent_property(field, value, exc, what):
    sp = specs(r2={field: value})
    ref = getattr(sp[0], field)
    msg = expect(sp, exc, f"inconsistent {what} across ranks", f"rank 0 has {ref!r}", f"rank 2 {value!r}")
    assert "rank 1" not in msg
    assert issubclass(exc, ValueError if exc is errors.InvalidValueError else TypeError)  # nvmath parity


def test_inconsistent_property_lists_at_most_four_ranks():
    n = 7
    ib, ob = boxes(Slab.X, (n, 2), n), boxes(Slab.Y, (n, 2), n)
    sp = [
        RankSpec(
            rank=r,
            ndim=2,
            dtype="float32" if r == 0 else "float64",
            itemsize=8,
            shape=(1, 2),
            in_box=ib[r],
            out_box=ob[r],
        )
        for r in range(n)
    ]
    msg = expect(sp, errors.InvalidValueError, "inconsistent dtype across ranks: rank 0 has 'float32'")
    assert "rank 1 'float64', rank 2 'float64', rank 3 'float64', rank 4 'float64' (and 2 more ranks)" in msg


# --- boxes one by one -------------------------------------------------------------------------


def test_missing_box():
    expect(specs(r1={"in_box": None}), errors.InvalidValueError, "rank 1 has no input box")
    expect(specs(r2={"out_box": None}), errors.InvalidValueError, "rank 2 has no output box")


def test_box_dimensionality():
    expect(
        specs(r1={"out_box": ((0, 0, 0), (7, 2, 1))}),
        errors.InvalidValueError,
        "rank 1 output box Box(lower=(0, 0, 0), upper=(7, 2, 1)) has 3 dimensions, the operand has 2",
    )


def test_negative_coordinates():
    expect(
        specs(r0={"in_box": ((-1, 0), (2, 4)), "shape": (3, 4)}),
        errors.InvalidValueError,
        "rank 0 input box Box(lower=(-1, 0), upper=(2, 4)) has a negative coordinate on axis 0",
    )
    expect(
        specs(r2={"out_box": ((0, -3), (7, -1))}),
        errors.InvalidValueError,
        "rank 2 output box Box(lower=(0, -3), upper=(7, -1)) has a negative coordinate on axis 1",
    )


def test_lower_greater_than_upper():
    expect(
        specs(r1={"in_box": ((3, 4), (6, 0))}),
        errors.InvalidValueError,
        "rank 1 input box Box(lower=(3, 4), upper=(6, 0)) has lower > upper on axis 1 (4 > 0)",
    )
    expect(
        specs(r0={"out_box": ((2, 0), (0, 2))}),
        errors.InvalidValueError,
        "rank 0 output box Box(lower=(2, 0), upper=(0, 2)) has lower > upper on axis 0 (2 > 0)",
    )


def test_operand_shape_differs_from_box_shape():
    expect(
        specs(r1={"shape": (3, 4)}),  # rank 1 holds rows 3..4: shape (2, 4)
        errors.InvalidValueError,
        "rank 1 operand shape (3, 4) does not match its input box "
        "Box(lower=(3, 0), upper=(5, 4)) of shape (2, 4)",
    )
    expect(specs(r1={"shape": (2, 4, 1)}), errors.InvalidValueError, "rank 1 operand shape (2, 4, 1)")


# --- the boxes together -----------------------------------------------------------------------


def test_input_boxes_overlap():
    ib = [((0, 0), (3, 4)), ((2, 0), (5, 4)), ((5, 0), (7, 4))]
    expect(
        specs(ib),
        errors.InvalidValueError,
        "The global number of elements is incompatible with the inferred global shape (7, 4): the input boxes "
        "hold 32 elements in all, their bounding box Box(lower=(0, 0), upper=(7, 4)) has 28",
        "rank 0 box Box(lower=(0, 0), upper=(3, 4)) overlaps rank 1 box Box(lower=(2, 0), upper=(5, 4))",
        "(both hold Box(lower=(2, 0), upper=(3, 4)))",
    )


def test_input_boxes_leave_a_gap():
    ib = [((0, 0), (3, 4)), ((3, 0), (5, 3)), ((5, 0), (7, 4))]
    expect(
        specs(ib),
        errors.InvalidValueError,
        "The global number of elements is incompatible with the inferred global shape (7, 4)",
        "the boxes cover 26 of the 28 elements of the global box Box(lower=(0, 0), upper=(7, 4))",
        "element (3, 3) belongs to no rank",
    )


def test_output_boxes_overlap():
    ob = [((0, 0), (7, 2)), ((0, 1), (7, 3)), ((0, 3), (7, 4))]
    expect(
        specs(None, ob),
        errors.InvalidValueError,
        "the output boxes do not tile the global array exactly",
        "rank 0 box Box(lower=(0, 0), upper=(7, 2)) overlaps rank 1 box Box(lower=(0, 1), upper=(7, 3))",
    )


def test_input_boxes_overlap_and_gap_with_the_right_count():
    """As many elements as the global box, but one overlap and one gap: the tiling check names them."""
    ib = [((0, 0), (3, 4)), ((2, 0), (5, 4)), ((6, 0), (7, 4))]
    expect(specs(ib, [((0, 0), (7, 4)), ((0, 0), (0, 0)), ((0, 0), (0, 0))]), errors.InvalidValueError,
           "the input boxes do not tile the global array exactly",
           "rank 0 box Box(lower=(0, 0), upper=(3, 4)) overlaps rank 1 box Box(lower=(2, 0), upper=(5, 4))")


def test_output_boxes_leave_a_gap():
    ob = [((0, 0), (7, 1)), ((1, 1), (7, 3)), ((0, 3), (7, 4))]
    expect(
        specs(None, ob),
        errors.InvalidValueError,
        "the output boxes do not tile the global array exactly",
        "the boxes cover 26 of the 28 elements",
        "element (0, 1) belongs to no rank",
    )


def test_same_volume_overlap_and_gap_is_caught():
    # nvmath only compares element counts: [0,2), [1,3), [4,6) of 6 passed there
    ib = [((0,), (2,)), ((1,), (3,)), ((4,), (6,))]
    sp = [RankSpec(rank=r, ndim=1, shape=(2,), in_box=b, out_box=b) for r, b in enumerate(ib)]
    expect(sp, errors.InvalidValueError, "the input boxes do not tile", "rank 0 box", "overlaps rank 1 box")


def test_global_boxes_differ_in_shape():
    ob = [((0, 0), (7, 2)), ((0, 2), (7, 4)), ((0, 4), (7, 5))]
    expect(
        specs(None, ob),
        errors.InvalidValueError,
        "the input boxes span the global box Box(lower=(0, 0), upper=(7, 4)) but the output boxes span "
        "Box(lower=(0, 0), upper=(7, 5))",
        "input and output must describe the same global array (shape and origin)",
    )


def test_global_boxes_differ_in_origin():
    # same global shape (7, 4), shifted by one row: nvmath 1.0 lets this through
    ob = [((1, 0), (8, 2)), ((1, 2), (8, 3)), ((1, 3), (8, 4))]
    expect(
        specs(None, ob),
        errors.InvalidValueError,
        "the input boxes span the global box Box(lower=(0, 0), upper=(7, 4)) but the output boxes span "
        "Box(lower=(1, 0), upper=(8, 4))",
    )


def test_global_boxes_one_side_empty():
    e = ((0, 0), (0, 4))
    sp = [RankSpec(rank=r, ndim=2, shape=(0, 4), in_box=e, out_box=b) for r, b in enumerate(boxes(Slab.Y))]
    expect(
        sp, errors.InvalidValueError, "the input boxes span the global box empty but the output boxes span"
    )


# --- layout -----------------------------------------------------------------------------------


def test_inconsistent_layout():
    sp = specs(r1={"layouts": ("F",)})
    expect(
        sp,
        errors.InvalidValueError,
        "The input memory layout is not C or Fortran, or is inconsistent across processes: ranks [0, 2] hold C-ordered operands, "
        "ranks [1] Fortran-ordered ones; all ranks must use the same layout",
    )
    assert consensus_order(sp) is None


def test_layout_consensus():
    both = ("C", "F")
    assert consensus_order(specs(r0={"layouts": both}, r1={"layouts": both}, r2={"layouts": both})) == "C"
    sp = specs(r0={"layouts": ("F",)}, r1={"layouts": both}, r2={"layouts": ("F",)})
    assert consensus_order(sp) == "F" and check_specs(sp) is None  # 1-D/degenerate ranks fit either
    assert consensus_order(specs(r1={"layouts": both})) == "C"


def test_first_problem_wins_deterministically():
    # overlap on input AND inconsistent layout: the box problem is reported, the same every time
    ib = [((0, 0), (3, 4)), ((2, 0), (5, 4)), ((5, 0), (7, 4))]
    sp = specs(ib, r1={"layouts": ("F",)})
    assert check_specs(sp) == check_specs(list(sp))
    assert "overlaps" in check_specs(sp)[1]
