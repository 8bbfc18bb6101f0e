# SPDX-License-Identifier: Apache-2.0
"""Property tests of the pure core: random problems, planned and run by the reference executor.

Each example draws a global shape (1-6 axes, small extents, some of extent 1), a number of ranks
P = 1..8, one decomposition for the input and one for the output (slabs on any axis, N-D grids
through ``BlockNonCyclic(ProcessGrid(...))``, random recursive box splits with empty boxes), an
element type (1, 2, 4, 8, 12, 16 bytes, a packed structured dtype), a C / F / padded-strided
operand layout per rank and an output order. The global array's element ``i`` (C linear index)
holds bytes made from ``i``, distinct for every element, so a result compared bit for bit with a
slice of the global array shows any misplaced, missing or torn element.

Budget: about 2,600 examples in all, well under a minute on 2 cores.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redist import BlockNonCyclic, ProcessGrid, Slab
from redist.engine import geometry as geo
from redist.engine.plan import STAGING_ALIGN, make_plan, simplify
from redist.engine.reference import execute_reference

pytestmark = pytest.mark.timeout(300)

SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
MAX_VOLUME = 720

DTYPES = [
    np.dtype(np.uint8),
    np.dtype("<u2"),
    np.dtype("<f4"),
    np.dtype("<f8"),
    np.dtype("V12"),
    np.dtype([("a", "<i4"), ("b", "<f8")]),  # 12 bytes, packed
    np.dtype("<c16"),
]
assert DTYPES[5].itemsize == 12


def void(a: np.ndarray) -> np.ndarray:
    """``a`` viewed as opaque bytes (same shape and strides)."""
    return a.view(np.dtype(f"V{a.dtype.itemsize}"))


def global_array(shape, dtype) -> np.ndarray:
    """The global array, C order: element i holds bytes (i >> 8k) ^ (0x5C + 0x35k), k = byte index.

    The low bytes alone identify i (volume <= 256**itemsize is kept by the strategies) and every
    byte position has its own constant, so any element or byte mix-up changes the bytes.
    """
    n = math.prod(shape)
    k = dtype.itemsize
    idx = np.arange(n, dtype=np.uint64)
    raw = np.empty((n, k), dtype=np.uint8)
    for b in range(k):
        shift = np.uint64(8 * b) if b < 8 else np.uint64(0)
        part = (idx >> shift) if b < 8 else idx * np.uint64(0)
        raw[:, b] = ((part & np.uint64(0xFF)).astype(np.uint8)) ^ np.uint8((0x5C + 0x35 * b) & 0xFF)
    return raw.reshape(tuple(shape) + (k,)).view(dtype)[..., 0]


def box_slices(box):
    return tuple(slice(lo, hi) for lo, hi in zip(*box))


# --- strategies -------------------------------------------------------------------------------


@st.composite
def global_shapes(draw, max_volume=MAX_VOLUME):
    """1-6 axes, extents >= 1 (never zero), volume <= max_volume; extent-1 axes are common."""
    ndim = draw(st.integers(1, 6))
    shape = []
    vol = 1
    for _ in range(ndim):
        hi = max(1, min(12, max_volume // vol))
        n = draw(st.sampled_from(sorted({1, min(2, hi), min(3, hi), hi})) | st.integers(1, hi))
        shape.append(n)
        vol *= n
    return tuple(shape)


def _factor(draw, p: int, k: int) -> tuple[int, ...]:
    """Random ordered factorisation of p into k factors."""
    out = []
    for _ in range(k - 1):
        divs = [d for d in range(1, p + 1) if p % d == 0]
        d = draw(st.sampled_from(divs))
        out.append(d)
        p //= d
    out.append(p)
    return tuple(out)


@st.composite
def decompositions(draw, gshape, nranks):
    """(kind, boxes): one box per rank tiling ``gshape`` exactly (empty boxes allowed)."""
    ndim = len(gshape)
    kind = draw(st.sampled_from(["slab", "grid", "split"]))
    if kind == "slab":
        axis = draw(st.integers(0, ndim - 1))
        dist = Slab(axis)
        return f"Slab({axis})", [dist.box(r, gshape, nranks=nranks).as_tuple() for r in range(nranks)]
    if kind == "grid":
        k = draw(st.integers(1, ndim))
        gs = _factor(draw, nranks, k)
        how = draw(st.sampled_from(["row", "col", "array"]))
        if how == "array":
            perm = draw(st.permutations(range(nranks)))
            grid = ProcessGrid(process_array=np.array(perm).reshape(gs))
        else:
            lay = ProcessGrid.Layout.ROW_MAJOR if how == "row" else ProcessGrid.Layout.COL_MAJOR
            grid = ProcessGrid(gs, lay)
        dist = BlockNonCyclic(grid)
        return repr(dist), [dist.box(r, gshape, nranks=nranks).as_tuple() for r in range(nranks)]
    # recursive split: cut a random box on a random axis at any position, ends included (so
    # empty pieces appear), until there are nranks boxes; then hand them out in random order
    boxes = [((0,) * ndim, tuple(gshape))]
    while len(boxes) < nranks:
        i = draw(st.integers(0, len(boxes) - 1))
        lo, hi = boxes[i]
        ax = draw(st.integers(0, ndim - 1))
        cut = draw(st.integers(lo[ax], hi[ax]))
        a = (lo, hi[:ax] + (cut,) + hi[ax + 1 :])
        b = (lo[:ax] + (cut,) + lo[ax + 1 :], hi)
        boxes[i : i + 1] = [a, b]
    order = draw(st.permutations(range(nranks)))
    return "split", [boxes[j] for j in order]


@st.composite
def layouts(draw):
    """("C"|"F"|"padded", base order, ghost (lo, hi) per axis, step)."""
    kind = draw(st.sampled_from(["C", "F", "padded"]))
    if kind != "padded":
        return (kind, kind, None, 1)
    order = draw(st.sampled_from("CF"))
    ghosts = draw(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=6, max_size=6))
    step = draw(st.sampled_from([1, 1, 2]))
    return ("padded", order, ghosts, step)


def make_operand(gvoid, box, layout, dtype):
    """Rank operand holding ``global[box]`` in ``layout`` (a view into a larger buffer if padded)."""
    kind, order, ghosts, step = layout
    shape = geo.box_shape(box)
    k = dtype.itemsize
    if kind == "padded":
        base_shape = tuple(g[0] + n * step + g[1] for n, g in zip(shape, ghosts))
    else:
        base_shape = shape
    raw = np.full(max(1, math.prod(base_shape)) * k, 0xEE, dtype=np.uint8)
    base = np.ndarray(base_shape, dtype=dtype, buffer=raw, order=order)
    if kind == "padded":
        view = base[tuple(slice(g[0], g[0] + n * step, step) for n, g in zip(shape, ghosts))]
    else:
        view = base
    void(view)[...] = gvoid[box_slices(box)]
    return view


@st.composite
def problems(draw):
    dtype = draw(st.sampled_from(DTYPES))
    gshape = draw(global_shapes(max_volume=min(MAX_VOLUME, 256**dtype.itemsize)))
    nranks = draw(st.integers(1, 8))
    in_kind, in_boxes = draw(decompositions(gshape, nranks))
    out_kind, out_boxes = draw(decompositions(gshape, nranks))
    lays = draw(st.lists(layouts(), min_size=nranks, max_size=nranks))
    # "C", "F" or any permutation of the axes (slowest-varying first)
    out_order = draw(st.one_of(st.sampled_from("CF"), st.permutations(range(len(gshape))).map(tuple)))
    return {
        "dtype": dtype,
        "gshape": gshape,
        "nranks": nranks,
        "in_kind": in_kind,
        "out_kind": out_kind,
        "in_boxes": in_boxes,
        "out_boxes": out_boxes,
        "layouts": lays,
        "out_order": out_order,
    }


def build(pb):
    """(global array, operands, plans) of a drawn problem."""
    dtype, k = pb["dtype"], pb["dtype"].itemsize
    g = global_array(pb["gshape"], dtype)
    gv = void(g)
    inputs = [make_operand(gv, b, lay, dtype) for b, lay in zip(pb["in_boxes"], pb["layouts"])]
    in_strides = [tuple(s // k for s in a.strides) for a in inputs]
    plans = [
        make_plan(
            r, pb["in_boxes"], pb["out_boxes"], itemsize=k, in_strides=in_strides, out_order=pb["out_order"]
        )
        for r in range(pb["nranks"])
    ]
    return g, inputs, plans


# --- the redistribution itself ----------------------------------------------------------------


@settings(max_examples=1100, **SETTINGS)
@given(pb=problems())
def test_reference_execution_matches_global_slices(pb):
    """Every rank's result == global[out_box] bit for bit, dense in out_order, direct and staged."""
    g, inputs, plans = build(pb)
    gv = void(g)
    k = pb["dtype"].itemsize
    before = [np.ascontiguousarray(void(a)).tobytes() for a in inputs]
    for mode in ("direct", "staged"):
        outs = execute_reference(plans, inputs, mode=mode)
        for r, (o, box) in enumerate(zip(outs, pb["out_boxes"])):
            shape = geo.box_shape(box)
            assert o.dtype == pb["dtype"]
            assert o.shape == shape
            dense = tuple(s * k for s in geo.dense_strides(shape, pb["out_order"]))
            assert o.strides == dense, (mode, r, o.strides, dense)
            if pb["out_order"] in ("C", "F"):
                assert o.flags.c_contiguous if pb["out_order"] == "C" else o.flags.f_contiguous
            got = np.ascontiguousarray(void(o)).tobytes()
            want = np.ascontiguousarray(gv[box_slices(box)]).tobytes()
            assert got == want, (
                f"{mode}: rank {r} result differs from global{box_slices(box)} "
                f"({pb['in_kind']} -> {pb['out_kind']})"
            )
    after = [np.ascontiguousarray(void(a)).tobytes() for a in inputs]
    assert before == after, "an operand was modified"
    # the staging slot layout does not depend on other ranks' operand strides: a receiver that
    # knows only its own operand unpacks exactly what the senders packed
    for r, p in enumerate(plans):
        only_mine = [p.in_strides if q == r else None for q in range(pb["nranks"])]
        alone = make_plan(
            r, pb["in_boxes"], pb["out_boxes"], itemsize=k, in_strides=only_mine, out_order=pb["out_order"]
        )
        assert [t.unpack for t in alone.recvs] == [t.unpack for t in p.recvs]
        assert [t.pack for t in alone.sends] == [t.pack for t in p.sends]
        assert (alone.send_offsets, alone.recv_offsets, alone.remote_offsets) == (
            p.send_offsets,
            p.recv_offsets,
            p.remote_offsets,
        )


# --- bookkeeping: bytes, staging layout, peer order -------------------------------------------


def _intervals_ok(starts, sizes, total):
    iv = sorted(zip(starts, sizes))
    for (a, n), (b, _) in itertools.pairwise(iv):
        if a + n > b:
            return False
    return all(0 <= a and a + n <= total for a, n in iv)


@settings(max_examples=600, **SETTINGS)
@given(pb=problems())
def test_transfer_bytes_and_staging_layout(pb):
    k = pb["dtype"].itemsize
    nranks = pb["nranks"]
    in_boxes, out_boxes = pb["in_boxes"], pb["out_boxes"]
    plans = [make_plan(r, in_boxes, out_boxes, itemsize=k, out_order=pb["out_order"]) for r in range(nranks)]
    total = math.prod(pb["gshape"]) * k
    # every element moves exactly once: local + sends over all ranks == local + recvs == global
    assert sum(t.nbytes for p in plans for t in p.transfers) == total
    assert sum(t.nbytes for p in plans for t in ((p.local,) if p.local else ()) + p.recvs) == total
    max_send = max(p.send_staging_bytes for p in plans)
    max_recv = max(p.recv_staging_bytes for p in plans)
    for r, p in enumerate(plans):
        assert (p.rank, p.nranks, p.itemsize) == (r, nranks, k)
        # what a rank sends / receives is exactly its input / output box
        assert sum(t.nbytes for t in p.transfers) == geo.volume(in_boxes[r]) * k
        got = sum(t.nbytes for t in p.recvs) + (p.local.nbytes if p.local else 0)
        assert got == geo.volume(out_boxes[r]) * k
        for t in p.transfers + p.recvs:
            assert t.box == geo.intersect(in_boxes[t.src], out_boxes[t.dst])
            assert t.nbytes == geo.volume(t.box) * k > 0
            assert t.direct.size == t.pack.size == t.unpack.size == t.elements == geo.volume(t.box)
            assert t.pack.dst_offset == 0 and t.unpack.src_offset == 0
            # a staging slot is dense (C order over the simplified shape)
            assert t.pack.dst_strides == geo.dense_strides(t.pack.shape, "C")
            assert t.unpack.src_strides == geo.dense_strides(t.unpack.shape, "C")
        if p.local is not None:
            assert p.local.src == p.local.dst == r
        assert all(t.src == r and t.dst != r for t in p.sends)
        assert all(t.dst == r and t.src != r for t in p.recvs)
        # peer order: step k sends to r+k, receives from r-k
        steps = [(t.dst - r) % nranks for t in p.sends]
        assert steps == sorted(steps)
        steps = [(r - t.src) % nranks for t in p.recvs]
        assert steps == sorted(steps)
        # staging: aligned, non-overlapping, inside the rank's and the symmetric allocation
        assert len(p.send_offsets) == len(p.remote_offsets) == len(p.sends)
        assert len(p.recv_offsets) == len(p.recvs)
        for off in p.send_offsets + p.recv_offsets + p.remote_offsets:
            assert off % STAGING_ALIGN == 0
        assert _intervals_ok(p.send_offsets, [t.nbytes for t in p.sends], p.send_staging_bytes)
        assert _intervals_ok(p.recv_offsets, [t.nbytes for t in p.recvs], p.recv_staging_bytes)
        assert p.send_staging_bytes % STAGING_ALIGN == 0 and p.recv_staging_bytes % STAGING_ALIGN == 0
        assert (p.max_send_staging_bytes, p.max_recv_staging_bytes) == (max_send, max_recv)
        # receive slots ordered by source rank
        by_src = sorted(zip((t.src for t in p.recvs), p.recv_offsets))
        assert [o for _, o in by_src] == sorted(o for _, o in by_src)
        # a send lands where the destination expects it
        for t, roff in zip(p.sends, p.remote_offsets):
            q = plans[t.dst]
            mine = [i for i, u in enumerate(q.recvs) if u.src == r]
            assert len(mine) == 1
            u = q.recvs[mine[0]]
            assert q.recv_offsets[mine[0]] == roff
            assert (u.box, u.nbytes, u.pack, u.unpack, u.direct) == (
                t.box,
                t.nbytes,
                t.pack,
                t.unpack,
                t.direct,
            )


# --- plan keys --------------------------------------------------------------------------------


@settings(max_examples=300, **SETTINGS)
@given(pb=problems(), data=st.data())
def test_plan_key_is_stable_and_distinguishes_problems(pb, data):
    _g, _inputs, plans = build(pb)
    k = pb["dtype"].itemsize
    nranks = pb["nranks"]
    in_strides = [p.in_strides for p in plans]

    def as_np(boxes):
        return [(tuple(map(np.int64, lo)), tuple(map(np.int32, hi))) for lo, hi in boxes]

    again = [
        make_plan(
            r,
            as_np(pb["in_boxes"]),
            as_np(pb["out_boxes"]),
            itemsize=k,
            in_strides=in_strides,
            out_order=pb["out_order"],
        )
        for r in range(nranks)
    ]
    assert [p.key for p in plans] == [p.key for p in again]
    assert plans == again
    assert len({p.key for p in plans}) == nranks  # the rank is part of the problem
    r = data.draw(st.integers(0, nranks - 1))
    kw = {"itemsize": k, "in_strides": in_strides, "out_order": pb["out_order"]}
    base = plans[r].key
    other_order = "F" if plans[r].out_order == "C" else "C"  # a permutation equal to C's is named "C"
    assert make_plan(r, pb["in_boxes"], pb["out_boxes"], **{**kw, "out_order": other_order}).key != base
    assert make_plan(r, pb["in_boxes"], pb["out_boxes"], **{**kw, "itemsize": k + 1}).key != base
    swapped = make_plan(r, pb["out_boxes"], pb["in_boxes"], itemsize=k, out_order=pb["out_order"])
    if pb["in_boxes"] != pb["out_boxes"]:
        assert swapped.key != base
    padded = [tuple(s * 3 for s in st_) for st_ in in_strides]
    assert make_plan(r, pb["in_boxes"], pb["out_boxes"], **{**kw, "in_strides": padded}).key != base


# --- simplify ---------------------------------------------------------------------------------


def _addresses(shape, offset, strides):
    idx = np.indices(shape).reshape(len(shape), -1) if shape else np.zeros((0, 1), int)
    return offset + (np.array(strides, dtype=np.int64)[:, None] * idx).sum(axis=0)


@settings(max_examples=300, **SETTINGS)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=6),
    data=st.data(),
)
def test_simplify_keeps_every_address_pair(shape, data):
    """Simplified (shape, strides) visit the same (src, dst) address pairs in the same order."""
    n = len(shape)

    def strides():
        kind = data.draw(st.sampled_from(["C", "F", "padded", "random"]))
        if kind in "CF":
            return geo.dense_strides(shape, kind)
        if kind == "padded":
            pad = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
            acc, out = 1, [0] * n
            for d in range(n - 1, -1, -1):
                out[d] = acc
                acc *= shape[d] + pad[d]
            return tuple(out)
        return tuple(data.draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)))

    s_st, d_st = strides(), strides()
    sh, (s2, d2) = simplify(shape, s_st, d_st)
    assert math.prod(sh) == math.prod(shape)
    assert 1 not in sh or sh == (1,)
    assert len(sh) <= max(1, sum(1 for v in shape if v != 1))
    assert np.array_equal(_addresses(sh, 0, s2), _addresses(shape, 0, s_st))
    assert np.array_equal(_addresses(sh, 0, d2), _addresses(shape, 0, d_st))


# --- cover checks on drawn decompositions -----------------------------------------------------


@settings(max_examples=300, **SETTINGS)
@given(data=st.data())
def test_cover_problem_on_random_decompositions(data):
    gshape = data.draw(global_shapes())
    nranks = data.draw(st.integers(1, 8))
    _, boxes = data.draw(decompositions(gshape, nranks))
    glob = ((0,) * len(gshape), gshape)
    assert geo.cover_problem(boxes, glob) is None
    assert geo.find_uncovered_point(boxes, glob) is None
    assert geo.bounding_box(boxes) == glob
    full = [i for i, b in enumerate(boxes) if not geo.is_empty(b)]
    # drop one non-empty box: a gap, and the uncovered point lies in the dropped box
    i = data.draw(st.sampled_from(full))
    rest = boxes[:i] + [((0,) * len(gshape), (0,) * len(gshape))] + boxes[i + 1 :]
    pt = geo.find_uncovered_point(rest, glob)
    assert pt is not None and geo.contains(boxes[i], (pt, tuple(v + 1 for v in pt)))
    msg = geo.cover_problem(rest, glob)
    assert msg is not None and f"element {pt} belongs to no rank" in msg
    # give another rank a copy of it: an overlap naming both ranks
    if nranks > 1:
        j = data.draw(st.sampled_from([x for x in range(nranks) if x != i]))
        dup = list(boxes)
        dup[j] = boxes[i]
        msg = geo.cover_problem(dup, glob)
        lo, hi = min(i, j), max(i, j)
        assert msg is not None and f"rank {lo} box" in msg and f"overlaps rank {hi} box" in msg


# --- overlapping boxes (allow_overlap): replication, allgather, broadcast, gather, halos -------


def _tagged(gv: np.ndarray, rank: int) -> np.ndarray:
    """The global array as rank ``rank`` holds it: first byte of every element xor a rank tag."""
    raw = np.ascontiguousarray(gv).view(np.uint8).reshape(gv.shape + (gv.dtype.itemsize,)).copy()
    raw[..., 0] ^= np.uint8(0x11 * (rank + 1))
    return raw.view(gv.dtype)[..., 0]


@settings(max_examples=400, **SETTINGS)
@given(pb=problems(), seed=st.integers(0, 2**32 - 1))
def test_overlapping_boxes_take_each_element_from_the_lowest_rank(pb, seed):
    """Outputs may overlap and need not cover; inputs may be replicated: every element of every
    output box comes from the lowest rank holding it (ranks' replicas differ here, so a wrong
    source shows), direct and staged, in any output order."""
    from helpers import overlap_boxes

    dtype, k, gshape, nranks = pb["dtype"], pb["dtype"].itemsize, pb["gshape"], pb["nranks"]
    label, in_boxes, out_boxes = overlap_boxes(gshape, nranks, np.random.default_rng(seed))
    gv = void(global_array(gshape, dtype))
    held = [_tagged(gv, r) for r in range(nranks)]
    source = np.full(gshape, -1)
    for r in reversed(range(nranks)):
        source[box_slices(in_boxes[r])] = r
    lays = pb["layouts"]
    inputs = [make_operand(held[r], b, lays[r], dtype) for r, b in enumerate(in_boxes)]
    in_strides = [tuple(s // k for s in a.strides) for a in inputs]
    plans = [make_plan(r, in_boxes, out_boxes, itemsize=k, in_strides=in_strides, out_order=pb["out_order"])
             for r in range(nranks)]
    # every output element is received exactly once; a rank sends each element to each receiver once
    for d, p in enumerate(plans):
        got = sum(t.elements for t in ((p.local,) if p.local else ()) + p.recvs)
        assert got == geo.volume(out_boxes[d]), label
    for mode in ("direct", "staged"):
        outs = execute_reference(plans, inputs, mode=mode)
        for r, (o, box) in enumerate(zip(outs, out_boxes)):
            src = source[box_slices(box)]
            assert (src >= 0).all(), label
            want = np.empty(geo.box_shape(box), gv.dtype)
            for q in np.unique(src):
                want[src == q] = held[q][box_slices(box)][src == q]
            assert np.ascontiguousarray(void(o)).tobytes() == np.ascontiguousarray(want).tobytes(), (
                f"{mode}: rank {r} {label}")


@settings(max_examples=300, **SETTINGS)
@given(gshape=global_shapes(), nranks=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_sources_take_each_element_from_its_lowest_holder(gshape, nranks, seed):
    """For every output box the parts of the ranks are disjoint boxes inside it and its sender's
    input box, and an element is in rank s's part iff s is the lowest rank holding it."""
    from helpers import overlap_boxes

    _, ins, outs = overlap_boxes(gshape, nranks, np.random.default_rng(seed))
    counts, parts = geo.sources(ins, outs)
    first = np.full(gshape, -1)
    for r in reversed(range(nranks)):
        first[box_slices(ins[r])] = r
    for d, ob in enumerate(outs):
        mine = np.full(gshape, -1)
        for s in range(nranks):
            boxes = parts(s, d)
            assert sum(geo.volume(b) for b in boxes) == counts[s, d]
            for b in boxes:
                assert not geo.is_empty(b) and geo.contains(ins[s], b) and geo.contains(ob, b)
                assert (mine[box_slices(b)] == -1).all()
                mine[box_slices(b)] = s
        inside = np.zeros(gshape, bool)
        inside[box_slices(ob)] = True
        assert (mine[inside] == first[inside]).all() and (mine[~inside] == -1).all()


def test_sources_with_holes_and_notches():
    # rank 1 holds everything around rank 0's box: nothing of it goes to rank 0's copy of that box,
    # row 0 goes to rank 1 as one box
    ins = [((1, 1), (3, 3)), ((0, 0), (4, 4))]
    counts, parts = geo.sources(ins, [((1, 1), (3, 3)), ((0, 0), (1, 4))])
    assert parts(1, 0) == () and parts(0, 0) == (ins[0],) and parts(1, 1) == (((0, 0), (1, 4)),)
    assert counts.tolist() == [[4, 0], [0, 4]]
    # an output straddling the hole: rank 1 sends the frame around it as several boxes
    counts, parts = geo.sources(ins, [((0, 0), (4, 4)), ((0, 0), (0, 0))])
    frame = parts(1, 0)
    assert len(frame) > 1 and sum(geo.volume(b) for b in frame) == 12 == counts[1, 0]
    assert all(geo.intersect(b, ins[0]) is None for b in frame)
    # a notch cut by two lower boxes that together leave a box: one box
    counts, parts = geo.sources([((0,), (4,)), ((6,), (10,)), ((0,), (8,))], [((0,), (10,))] * 3)
    assert parts(2, 1) == (((4,), (6,)),) and counts[:, 0].tolist() == [4, 4, 2]


@settings(max_examples=200, **SETTINGS)
@given(pb=problems(), data=st.data())
def test_retarget_all_writes_every_rank_at_its_strides(pb, data):
    """Every rank's output at its own padded strides (an out= into a ghosted array on each rank):
    the senders' direct copies use the destination's strides, the unpacks the rank's own."""
    g, inputs, plans = build(pb)
    gv = void(g)
    shapes = [geo.box_shape(b) for b in pb["out_boxes"]]
    pads = [data.draw(st.lists(st.integers(0, 2), min_size=len(sh), max_size=len(sh))) for sh in shapes]
    padded = []
    for sh, pad in zip(shapes, pads):
        ext = tuple(n + p for n, p in zip(sh, pad))
        padded.append(geo.dense_strides(ext, pb["out_order"]))
    moved = [p.retarget_all(padded) for p in plans]
    for mode in ("direct", "staged"):
        outs = execute_reference(moved, inputs, mode=mode)
        for r, (o, box) in enumerate(zip(outs, pb["out_boxes"])):
            assert o.strides == tuple(s * pb["dtype"].itemsize for s in padded[r])
            got = np.ascontiguousarray(void(o)).tobytes()
            want = np.ascontiguousarray(gv[box_slices(box)]).tobytes()
            assert got == want, f"{mode}: rank {r}"
