# SPDX-License-Identifier: Apache-2.0
"""Validation of a redistribution problem, as pure functions over every rank's spec.

Each rank describes its side in a :class:`RankSpec`; the specs of all ranks are gathered once
(one allgather) and every rank runs :func:`check_specs` on the *same* list, so every rank finds
the same first problem and raises the same exception: no rank hangs waiting for one that failed.
Messages name the ranks and boxes at fault.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import errors
from . import geometry as geo
from .geometry import BoxT

__all__ = ["RankSpec", "check_specs", "consensus_order", "local_error", "raise_first"]


@dataclass(frozen=True)
class RankSpec:
    """One rank's side of the problem. Small and picklable: it travels in the allgather.

    ``layouts`` lists the result orders this rank's operand is compatible with ("C", "F" or
    both for 1-D or degenerate operands). ``error`` carries a failure met *before* the gather
    (bad operand type, say) as ``(exception class name, message)`` so that it, too, is raised
    on every rank.
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
    options: tuple = ()
    error: tuple[str, str] | None = None


def local_error(exc: BaseException) -> tuple[str, str]:
    """Encode an exception for :attr:`RankSpec.error`."""
    return type(exc).__name__, str(exc)


_BY_NAME = {name: getattr(errors, name) for name in errors.__all__ if isinstance(getattr(errors, name), type)}
_BY_NAME.update({c.__name__: c for c in (ValueError, TypeError, RuntimeError, NotImplementedError, IndexError)})


def _exception_class(name: str) -> type[BaseException]:
    return _BY_NAME.get(name, errors.InvalidValueError)


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
        if l < 0 or h < 0:
            return f"rank {rank} {which} box {geo.format_box(box)} has a negative coordinate on axis {ax}"
        if l > h:
            return f"rank {rank} {which} box {geo.format_box(box)} has lower > upper on axis {ax} ({l} > {h})"
    return None


def check_specs(specs: Sequence[RankSpec]) -> tuple[type[BaseException], str] | None:
    """The first problem with the gathered specs, as ``(exception class, message)``; None if fine."""
    for s in specs:
        if s.error is not None:
            name, msg = s.error
            return _exception_class(name), f"rank {s.rank}: {msg}"
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
    ndim = specs[0].ndim
    if ndim < 1:
        return inv, "operands must have at least one dimension (got 0-D arrays)"
    for s in specs:
        for which, box in (("input", s.in_box), ("output", s.out_box)):
            msg = _box_problem(s.rank, which, box, ndim)
            if msg:
                return inv, msg
        if tuple(s.shape) != geo.box_shape(s.in_box):
            return inv, (
                f"rank {s.rank} operand shape {tuple(s.shape)} does not match its input box "
                f"{geo.format_box(s.in_box)} of shape {geo.box_shape(s.in_box)}"
            )
    in_boxes = [s.in_box for s in specs]
    out_boxes = [s.out_box for s in specs]
    gin, gout = geo.bounding_box(in_boxes), geo.bounding_box(out_boxes)
    if gin != gout:
        f = lambda g: geo.format_box(g) if g else "empty"  # noqa: E731
        return inv, (
            f"the input boxes span the global box {f(gin)} but the output boxes span {f(gout)}: "
            "input and output must describe the same global array (shape and origin)"
        )
    if gin is not None:
        for which, boxes in (("input", in_boxes), ("output", out_boxes)):
            msg = geo.cover_problem(boxes, gin)
            if msg:
                return inv, f"the {which} boxes do not tile the global array exactly: {msg}"
    if consensus_order(specs) is None:
        c = [s.rank for s in specs if s.layouts == ("C",)]
        f = [s.rank for s in specs if s.layouts == ("F",)]
        return inv, (
            f"inconsistent memory layout across ranks: ranks {c[:8]} hold C-ordered operands, "
            f"ranks {f[:8]} Fortran-ordered ones; all ranks must use the same layout"
        )
    return None


def consensus_order(specs: Sequence[RankSpec]) -> str | None:
    """The result order every rank accepts ("C" preferred), or None if there is none."""
    ok = set("CF")
    for s in specs:
        ok &= set(s.layouts)
    return "C" if "C" in ok else ("F" if "F" in ok else None)


def raise_first(specs: Sequence[RankSpec]) -> None:
    """Raise the problem :func:`check_specs` finds (identically on every rank), if any."""
    found = check_specs(specs)
    if found is not None:
        cls, msg = found
        raise cls(msg)
