# SPDX-License-Identifier: Apache-2.0
"""The adjoint construction (pybind/_adjoint.py): <R x, y> == <x, R^T y> for every rank's boxes.

R (the forward redistribution) and the rounds of the backward are simulated in numpy with the
engine's rule (each output element from the lowest rank holding it), so the check needs no MPI.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import overlap_boxes, pencil_boxes, random_boxes, sl, slab_boxes

from redist._adjoint import adjoint, local_region
from redist.engine import geometry as geo


def _redistribute(pieces, in_boxes, out_boxes):
    """What the engine computes: each output element from the lowest rank whose input box holds it."""
    outs = []
    for ob in out_boxes:
        res = np.zeros(geo.box_shape(ob)) if not geo.is_empty(ob) else np.zeros((0,) * len(ob[0]))
        done = np.zeros(res.shape, bool)
        for p, ib in enumerate(in_boxes):
            common = geo.intersect(ib, ob)
            if common is None:
                continue
            here, there = local_region(common, ob), local_region(common, ib)
            fresh = ~done[here]
            res[here][fresh] = pieces[p][there][fresh]
            done[here] |= fresh
        assert done.all(), "an output element nobody holds"
        outs.append(res)
    return outs


def _backward(adj, grads):
    """Run ``adj`` in numpy: the rounds, the sums and the zeroed replicas."""
    nranks = len(adj.in_boxes)
    result = [
        np.zeros(geo.box_shape(b)) if not geo.is_empty(b) else np.zeros((0,) * len(b[0]))
        for b in adj.in_boxes
    ]
    for rnd in adj.rounds:
        empty = np.zeros((0,) * len(adj.in_boxes[0][0]))
        got = _redistribute(
            [grads[q] if rnd.sends(q) else empty for q in range(nranks)], rnd.in_boxes, rnd.out_boxes
        )
        for p in range(nranks):
            if geo.is_empty(rnd.out_boxes[p]):
                continue
            if adj.inverse:
                result[p] = got[p].copy()
            else:
                result[p][local_region(rnd.out_boxes[p], adj.in_boxes[p])] += got[p]
    for p, boxes in enumerate(adj.zero):
        for b in boxes:
            result[p][local_region(b, adj.in_boxes[p])] = 0
    return result


def _check(in_boxes, out_boxes, seed=0):
    rng = np.random.default_rng(seed)
    glob = geo.bounding_box(list(in_boxes))
    x = rng.standard_normal(geo.box_shape(glob))
    pieces = [x[sl(b)] if not geo.is_empty(b) else np.zeros((0,) * x.ndim) for b in in_boxes]
    # replicas hold their own values: the adjoint must tell them apart from the source
    pieces = [p + rng.standard_normal(p.shape) * (r > 0) for r, p in enumerate(pieces)]
    ys = _redistribute(pieces, in_boxes, out_boxes)
    grads = [rng.standard_normal(y.shape) for y in ys]
    adj = adjoint(in_boxes, out_boxes)
    back = _backward(adj, grads)
    lhs = sum(float(np.vdot(y, g)) for y, g in zip(ys, grads))
    rhs = sum(float(np.vdot(p, b)) for p, b in zip(pieces, back))
    assert np.isclose(lhs, rhs, rtol=1e-12, atol=1e-12), (lhs, rhs, adj.describe())
    for rnd in adj.rounds if not adj.inverse else ():  # summed rounds: senders disjoint, one sender each
        senders = [b for b in rnd.in_boxes if not geo.is_empty(b)]
        assert geo.find_overlap(senders) is None
        for ob in rnd.out_boxes:
            assert geo.is_empty(ob) or sum(geo.intersect(ob, s) is not None for s in senders) == 1
    return adj


@pytest.mark.parametrize("nranks", [1, 2, 3, 4])
def test_partitions_are_one_inverse_round(nranks):
    g = (7, 5, 6)
    for ins, outs in (
        (slab_boxes(g, nranks, 0), slab_boxes(g, nranks, 1)),
        (pencil_boxes(g, nranks, 0, 1), pencil_boxes(g, nranks, 1, 2)),
        (
            random_boxes(g, nranks, np.random.default_rng(nranks)),
            random_boxes(g, nranks, np.random.default_rng(nranks + 9)),
        ),
    ):
        adj = _check(ins, outs)
        assert adj.inverse and len(adj.rounds) == 1 and not adj.overlap
        assert adj.rounds[0].in_boxes == tuple(outs) and adj.rounds[0].out_boxes == tuple(ins)


@pytest.mark.parametrize("seed", range(40))
def test_overlapping_boxes(seed):
    rng = np.random.default_rng(seed)
    nranks = int(rng.integers(1, 5))
    label, ins, outs = overlap_boxes((5, 4, 3)[: int(rng.integers(1, 4))], nranks, rng)
    adj = _check(ins, outs, seed)
    assert "adjoint of" in adj.describe(), label


def test_allgather_sums_every_copy():
    g = (6, 4)
    ins = slab_boxes(g, 3, 0)
    full = ((0, 0), g)
    adj = _check(ins, [full] * 3)
    assert not adj.inverse and len(adj.rounds) == 3  # every rank's copy goes back to each source
    assert all(not z for z in adj.zero)


def test_replicated_input_zeroes_replicas():
    g = (4, 3)
    full = ((0, 0), g)
    adj = _check([full, full], slab_boxes(g, 2, 1))
    assert adj.inverse and adj.zero == ((), (full,)) and adj.overlap
