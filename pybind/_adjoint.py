# SPDX-License-Identifier: Apache-2.0
"""The adjoint of a redistribution: what a framework adapter's backward pass computes.

A redistribution is linear: every element of rank q's output box is a copy of one input element,
the one held by the *lowest* rank p whose input box holds it (README, "Allgather, broadcast,
gather, halos"). Its adjoint (the vector-Jacobian product) sends each output gradient back to
that source and sums where several outputs copied one input element:

    x̄_p[e] = Σ_{q : e ∈ O_q} ȳ_q[e]   if p is the source of e (no lower rank holds e), else 0

:func:`adjoint` turns the input and output boxes of every rank into frozen data that says how to
compute it with redistributions and local sums (no framework, MPI or CUDA here; the torch and
JAX adapters execute it):

* a *partition* (output boxes pairwise disjoint and covering every input element) needs one
  redistribution, the inverse (output boxes → input boxes), whose result is the gradient;
* otherwise (allgather, broadcast, halos, outputs that leave input elements out) every output
  element's gradient must reach its source and be summed: *rounds* of redistributions, each
  with pairwise-disjoint senders, in which every rank receives from one sender at most
  (``I_p ∩ O_q``); each round's result is added into the zero-initialised gradient at its place;
* either way, where input boxes overlap (replicated input), the gradient of a replica that was
  not the source is zero: each rank zeroes the parts of its box a lower rank holds.

Boxes are ``(lower, upper)`` tuples, half-open, in global coordinates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .engine import geometry as geo

__all__ = ["Adjoint", "Round", "adjoint", "local_region"]


@dataclass(frozen=True)
class Round:
    """One redistribution of the backward: every rank's input box (its output gradient's box, or an
    empty box where it sends nothing) and output box (what it receives, or an empty box)."""

    in_boxes: tuple[geo.BoxT, ...]
    out_boxes: tuple[geo.BoxT, ...]

    def sends(self, rank: int) -> bool:
        """Whether ``rank`` passes its output gradient in this round (else an empty operand)."""
        return not geo.is_empty(self.in_boxes[rank])


@dataclass(frozen=True)
class Adjoint:
    """How to compute the gradient of the input from the gradient of the output, for every rank.

    ``inverse``: one round whose result *is* the gradient (a partition); else the gradient starts
    at zero and each round's result is added into it at ``round.out_boxes[rank]``. ``zero[rank]``:
    boxes (global coordinates) inside ``rank``'s input box to set to zero at the end (replicas a
    lower rank is the source of).
    """

    in_boxes: tuple[geo.BoxT, ...]
    out_boxes: tuple[geo.BoxT, ...]
    rounds: tuple[Round, ...]
    inverse: bool
    zero: tuple[tuple[geo.BoxT, ...], ...]

    @property
    def overlap(self) -> bool:
        """Whether the rounds need ``allow_overlap=True`` (some round's boxes overlap or do not tile
        one global array)."""
        return not self.inverse or any(self.zero)

    def describe(self) -> str:
        """The backward as text: one line per round, then the zeroed replicas."""
        kind = "inverse redistribution" if self.inverse else f"{len(self.rounds)} round(s), summed"
        lines = [f"adjoint of {len(self.in_boxes)} ranks: {kind}"]
        for i, r in enumerate(self.rounds):
            senders = [p for p in range(len(r.in_boxes)) if r.sends(p)]
            moves = ", ".join(f"{p}<-{geo.format_box(b)}" for p, b in enumerate(r.out_boxes) if not geo.is_empty(b))
            lines.append(f"  round {i}: senders {senders}; receives {moves or 'nothing'}")
        for p, boxes in enumerate(self.zero):
            if boxes:
                lines.append(f"  rank {p} zeroes {', '.join(geo.format_box(b) for b in boxes)} (replicas)")
        return "\n".join(lines)


def _empty(ndim: int) -> geo.BoxT:
    return (0,) * ndim, (0,) * ndim


def _replicas(in_boxes: Sequence[geo.BoxT]) -> tuple[tuple[geo.BoxT, ...], ...]:
    """Per rank, the parts of its input box that some lower rank also holds (pairwise distinct
    boxes; they may overlap each other, which zeroing does not mind)."""
    out = []
    for p, box in enumerate(in_boxes):
        held = (geo.intersect(box, in_boxes[q]) for q in range(p) if not geo.is_empty(box))
        out.append(tuple(dict.fromkeys(b for b in held if b is not None)))
    return tuple(out)


def _is_partition(in_boxes: Sequence[geo.BoxT], out_boxes: Sequence[geo.BoxT]) -> bool:
    """Output boxes pairwise disjoint and covering every element of every input box."""
    full_out = [b for b in out_boxes if not geo.is_empty(b)]
    if geo.find_overlap(full_out) is not None:
        return False
    shared = geo.pairwise_overlap(in_boxes, full_out) if full_out else None
    for p, box in enumerate(in_boxes):
        need = geo.volume(box) if not geo.is_empty(box) else 0
        if need and (shared is None or int(shared[p].sum()) != need):
            return False
    return True


def adjoint(in_boxes: Sequence[geo.BoxT], out_boxes: Sequence[geo.BoxT]) -> Adjoint:
    """The backward of the redistribution ``in_boxes -> out_boxes`` (every rank's boxes, in rank order;
    the same on every rank, so every rank computes the same :class:`Adjoint`)."""
    ins = tuple(geo.as_box(*b) for b in in_boxes)
    outs = tuple(geo.as_box(*b) for b in out_boxes)
    nranks, ndim = len(ins), len(ins[0][0])
    zero = _replicas(ins)
    if _is_partition(ins, outs):
        return Adjoint(ins, outs, (Round(outs, ins),), True, zero)
    # every (sender q, receiver p) pair that moves something: p receives I_p ∩ O_q from q
    pairs = {q: {p: geo.intersect(ins[p], outs[q]) for p in range(nranks)} for q in range(nranks)}
    pending = [q for q in range(nranks) if any(b is not None for b in pairs[q].values())]
    rounds = []
    while pending:  # greedy, in rank order: the same rounds on every rank
        members: list[int] = []
        receivers: set[int] = set()
        for q in pending:
            gets = {p for p, b in pairs[q].items() if b is not None}
            if gets & receivers or any(geo.intersect(outs[q], outs[m]) is not None for m in members):
                continue
            members.append(q)
            receivers |= gets
        sender_boxes = tuple(outs[q] if q in members else _empty(ndim) for q in range(nranks))
        got = {p: pairs[q][p] for q in members for p in range(nranks) if pairs[q][p] is not None}
        rounds.append(Round(sender_boxes, tuple(got.get(p, _empty(ndim)) for p in range(nranks))))
        pending = [q for q in pending if q not in members]
    return Adjoint(ins, outs, tuple(rounds), False, zero)


def local_region(box: geo.BoxT, within: geo.BoxT) -> tuple[slice, ...]:
    """``box`` (global coordinates, inside ``within``) as slices of an array holding ``within``."""
    return tuple(slice(lo - w, hi - w) for lo, hi, w in zip(box[0], box[1], within[0]))
