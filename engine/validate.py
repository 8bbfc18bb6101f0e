# SPDX-License-Identifier: Apache-2.0
"""Validation of a redistribution problem, as pure functions over every rank's spec.

Each rank describes its side in a :class:`RankSpec`; the specs of all ranks are gathered once
(one allgather) and every rank runs :func:`check_specs` on the *same* list, so every rank finds
the same first problem and raises the same exception: no rank hangs waiting for one that failed.
Messages name the ranks and boxes at fault.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import errors
from . import geometry as geo
from .geometry import BoxT

#: Coordinates and extents must stay below this (element offsets are 64-bit integers).
MAX_COORD = 1 << 62

__all__ = ["MAX_COORD", "RankSpec", "check_boxes", "check_fields", "check_operands", "check_specs", "consensus_order",
           "raise_first"]


@dataclass(frozen=True)
class RankSpec:
    """One rank's side of the problem. Small and picklable: it travels in the one allgather.

    ``dtype`` is a key that tells element types apart exactly (byte order, field names, units).
    ``layouts`` lists the result orders this rank's operand is compatible with ("C", "F" or
    both for 1-D or degenerate operands). ``in_dist``/``out_dist`` are the distributions as
    given (the API resolves them to ``in_box``/``out_box`` on the gathered list). ``device`` is
    the operand's CUDA device, ``runtime_device`` the one redist runs on there. ``error``
    carries a failure met *before* the gather (bad operand type, say) as a
    :data:`~redist.engine.collective.Problem`, so that it, too, is raised on every rank.
    """

    rank: int
    ndim: int = 0
    dtype: str = ""
    itemsize: int = 0
    package: str = ""
    memory: str = ""
    layouts: tuple[str, ...] = ("C", "F")
    shape: tuple[int, ...] = ()
    strides: tuple[int, ...] | None = None
    in_box: BoxT | None = None
    out_box: BoxT | None = None
    options: str | tuple[object, ...] = ()
    in_dist: object = None
    out_dist: object = None
    device: int | None = None
    runtime_device: int | None = None
    error: tuple[str, str] | None = None
    nfields: int = 0  # fields in one exchange (a tuple operand); 0: one array
    fields: tuple[tuple[str, str, int, tuple[int, ...]], ...] = ()  # fields 1..: (dtype key, dtype name, itemsize, strides)
    global_shape: tuple[int, ...] | None = None  # the global_shape= passed (None: inferred), checked on every rank


def _differs(specs: Sequence[RankSpec], attr: str, what: str) -> str | None:
    ref = getattr(specs[0], attr)
    bad = [s for s in specs if getattr(s, attr) != ref]
    if not bad:
        return None
    shown = ", ".join(f"rank {s.rank} {getattr(s, attr)!r}" for s in bad[:4])
    more = f" (and {len(bad) - 4} more ranks)" if len(bad) > 4 else ""
    return f"inconsistent {what} across ranks: rank 0 has {ref!r}, but {shown}{more}"


def _box_problem(rank: int, which: str, box: BoxT | None, ndim: int) -> str | None:
    if box is None:
        return f"rank {rank} has no {which} box"
    lo, hi = box
    if len(lo) != ndim or len(hi) != ndim:
        return f"rank {rank} {which} box {geo.format_box(box)} has {len(lo)} dimensions, the operand has {ndim}"
    for ax, (l, h) in enumerate(zip(lo, hi)):
        if l >= MAX_COORD or h >= MAX_COORD:
            return (f"rank {rank} {which} box {geo.format_box(box)} has a coordinate >= 2**62 on axis {ax} "
                    "(redist addresses elements with 64-bit integers)")
        if l < 0 or h < 0:
            return f"rank {rank} {which} box {geo.format_box(box)} has a negative coordinate on axis {ax}"
        if l > h:
            return f"rank {rank} {which} box {geo.format_box(box)} has lower > upper on axis {ax} ({l} > {h})"
    if geo.volume(box) >= MAX_COORD:
        return f"rank {rank} {which} box {geo.format_box(box)} holds {geo.volume(box)} elements (at most 2**62)"
    return None


def check_operands(specs: Sequence[RankSpec]) -> tuple[type[BaseException], str] | None:
    """The first problem with what the ranks hold (before their boxes are known), or None."""
    for s in specs:
        if s.error is not None:
            return errors.error_class(s.error[0]), f"rank {s.rank}: {s.error[1]}"
    inv = errors.InvalidValueError
    for attr, what in (
        ("ndim", "number of dimensions"),
        ("package", "array package"),
        ("memory", "memory space"),
        ("dtype", "dtype"),
        ("itemsize", "element size"),
        ("options", "options"),
    ):
        msg = _differs(specs, attr, what)
        if msg:
            return (errors.InvalidTypeError if attr == "package" else inv), msg
    if specs[0].ndim < 1:
        return inv, "operands must have at least one dimension (got 0-D arrays)"
    for s in specs:
        if s.memory == "cuda" and None not in (s.device, s.runtime_device) and s.device != s.runtime_device:
            return inv, (
                f"rank {s.rank}: the operand is on CUDA device {s.device} but redist runs on device "
                f"{s.runtime_device} there (see redist.initialize(device_id=...))"
            )
    return None


def check_fields(specs: Sequence[RankSpec]) -> tuple[type[BaseException], str] | None:
    """The first problem with the ranks' fields (a tuple operand: several arrays, one exchange), or None.

    Every rank must pass as many fields, and field f must have the same dtype on every rank (field
    0 is the operand :func:`check_operands` looks at). Within a rank, the fields were checked
    against field 0 before the gather (shape, package, memory, device).
    """
    inv = errors.InvalidValueError
    msg = _differs(specs, "nfields", "number of fields (0: one array rather than a tuple)")
    if msg:
        return inv, msg
    for f in range(1, specs[0].nfields):
        ref = specs[0].fields[f - 1]
        bad = [s for s in specs if s.fields[f - 1][0] != ref[0]]
        if bad:
            shown = ", ".join(f"rank {s.rank} {s.fields[f - 1][1]}" for s in bad[:4])
            return inv, f"field {f}: inconsistent dtype across ranks: rank 0 has {ref[1]}, but {shown}"
    return None


def check_boxes(specs: Sequence[RankSpec], *, allow_overlap: bool = False) -> tuple[type[BaseException], str] | None:
    """The first problem with the ranks' boxes (they must be resolved), or None.

    Without ``allow_overlap`` the input boxes and the output boxes must each tile the same global
    box exactly. With it, boxes may overlap and outputs need not cover anything: every element of
    every output box must be held by some input box (the lowest rank holding it is its source).
    """
    inv = errors.InvalidValueError
    ndim = specs[0].ndim
    for which in ("input", "output"):  # every input first: an output laid over them may inherit their faults
        for s in specs:
            msg = _box_problem(s.rank, which, s.in_box if which == "input" else s.out_box, ndim)
            if msg:
                return inv, msg
    for s in specs:
        if tuple(s.shape) != geo.box_shape(s.in_box):
            return inv, (
                f"rank {s.rank} operand shape {tuple(s.shape)} does not match its input box "
                f"{geo.format_box(s.in_box)} of shape {geo.box_shape(s.in_box)}"
            )
    in_boxes = [s.in_box for s in specs]
    out_boxes = [s.out_box for s in specs]
    if allow_overlap:
        return _overlap_problem(in_boxes, out_boxes) or _layout_problem(specs)
    gin, gout = geo.bounding_box(in_boxes), geo.bounding_box(out_boxes)
    if gin != gout:
        f = lambda g: geo.format_box(g) if g else "empty"  # noqa: E731
        return inv, (
            f"the input boxes span the global box {f(gin)} but the output boxes span {f(gout)}: "
            f"input and output must describe the same global array (shape and origin){_outside(specs, gin, gout)}"
        )
    if gin is not None:
        total, want = sum(geo.volume(b) for b in in_boxes), geo.volume(gin)
        if total != want:  # nvmath-python's first diagnosis, then which boxes are at fault
            return inv, (
                f"The global number of elements is incompatible with the inferred global shape {geo.box_shape(gin)}: "
                f"the input boxes hold {total} elements in all, their bounding box {geo.format_box(gin)} "
                f"has {want}; {_tile_problem(in_boxes, gin)}"
            )
        for which, boxes in (("input", in_boxes), ("output", out_boxes)):
            msg = _tile_problem(boxes, gin)
            if msg:
                return inv, f"the {which} boxes do not tile the global array exactly: {msg}"
    return _layout_problem(specs)


def _outside(specs: Sequence[RankSpec], gin: BoxT | None, gout: BoxT | None) -> str:
    """"; rank r's input box ... lies outside ...": the first box beyond the other side's span."""
    for which, other, span in (("input", "output", gout), ("output", "input", gin)):
        for s in specs:
            box = s.in_box if which == "input" else s.out_box
            if not geo.is_empty(box) and (span is None or not geo.contains(span, box)):
                return f"; rank {s.rank} {which} box {geo.format_box(box)} lies outside the {other} boxes' span"
    return ""


def _tile_problem(boxes: Sequence[BoxT], glob: BoxT) -> str | None:
    """:func:`geo.cover_problem`, naming the option that accepts boxes that overlap on purpose."""
    msg = geo.cover_problem(boxes, glob)
    if msg and geo.find_overlap(boxes) is not None:
        msg += "; boxes that overlap on purpose (halos, replicated inputs, allgather) need allow_overlap=True"
    return msg


def _overlap_problem(in_boxes: Sequence[BoxT], out_boxes: Sequence[BoxT]) -> tuple[type[BaseException], str] | None:
    """Why the outputs cannot be filled from overlapping inputs (``allow_overlap=True``), or None."""
    counts, _ = geo.sources(in_boxes, out_boxes)
    held = counts.sum(axis=0)
    for d, box in enumerate(out_boxes):
        if int(held[d]) != geo.volume(box):
            where = geo.find_uncovered_point(in_boxes, box)
            at = f": element {where} is held by no input box" if where is not None else ""
            return errors.InvalidValueError, (
                f"rank {d} output box {geo.format_box(box)} is not covered by the input boxes "
                f"({int(held[d])} of its {geo.volume(box)} elements are held by some rank){at}"
            )
    return None


def _layout_problem(specs: Sequence[RankSpec]) -> tuple[type[BaseException], str] | None:
    if consensus_order(specs) is None:
        c = [s.rank for s in specs if s.layouts == ("C",)]
        f = [s.rank for s in specs if s.layouts == ("F",)]
        return errors.InvalidValueError, (
            "The input memory layout is not C or Fortran, or is inconsistent across processes: ranks "
            f"{c[:8]} hold C-ordered operands, ranks {f[:8]} Fortran-ordered ones; all ranks must use the same "
            "layout"
        )
    return None


def check_specs(specs: Sequence[RankSpec]) -> tuple[type[BaseException], str] | None:
    """The first problem with the gathered specs, as ``(exception class, message)``; None if fine."""
    return check_operands(specs) or check_boxes(specs)


def consensus_order(specs: Sequence[RankSpec]) -> str | None:
    """The result order every rank accepts ("C" preferred), or None if there is none."""
    ok = set("CF")
    for s in specs:
        ok &= set(s.layouts)
    return "C" if "C" in ok else ("F" if "F" in ok else None)


def raise_first(
    specs: Sequence[RankSpec],
    check: Callable[[Sequence[RankSpec]], tuple[type[BaseException], str] | None] = check_specs,
) -> None:
    """Raise the problem ``check`` finds (identically on every rank: the same list everywhere)."""
    found = check(specs)
    if found is not None:
        cls, msg = found
        raise cls(msg)
