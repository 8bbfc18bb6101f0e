# SPDX-License-Identifier: Apache-2.0
"""The transfer plan (engine/plan.py) and the reference executor (engine/reference.py).

Test data follow the style guide: element value = global linear index, uneven sizes.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from helpers import random_boxes
from redist import BlockNonCyclic, ProcessGrid, Slab
from redist.engine import geometry as geo
from redist.engine.plan import STAGING_ALIGN, Copy, fuse, make_plan, plan_key, simplify
from redist.engine.reference import empty_output, execute_reference


def dist_boxes(dist, g, nranks):
    return [dist.box(r, g, nranks=nranks).as_tuple() for r in range(nranks)]


def plans_for(in_boxes, out_boxes, itemsize=8, in_strides=None, out_order="C"):
    return [
        make_plan(r, in_boxes, out_boxes, itemsize=itemsize, in_strides=in_strides, out_order=out_order)
        for r in range(len(in_boxes))
    ]


def sl(box):
    return tuple(slice(lo, hi) for lo, hi in zip(*box))


def run_both(in_boxes, out_boxes, g, dtype=np.float64, order="C"):
    """Run Slab/Box problem with element value = global index; check every rank, both modes."""
    glob = np.arange(math.prod(g)).astype(dtype).reshape(g)
    inputs = [np.array(glob[sl(b)], order=order) for b in in_boxes]
    strides = [tuple(s // glob.itemsize for s in a.strides) for a in inputs]
    plans = plans_for(in_boxes, out_boxes, glob.itemsize, strides, order)
    for mode in ("direct", "staged"):
        outs = execute_reference(plans, inputs, mode=mode)
        for r, (o, b) in enumerate(zip(outs, out_boxes)):
            assert o.flags.c_contiguous if order == "C" else o.flags.f_contiguous
            np.testing.assert_array_equal(o, glob[sl(b)], err_msg=f"{mode} rank {r}")
    return plans


# --- simplify and Copy ------------------------------------------------------------------------


def test_simplify_examples():
    # C sub-box of a C array: the inner two axes are whole, so they merge
    assert simplify((4, 3, 5), (15, 5, 1), (15, 5, 1)) == ((60,), ((1,), (1,)))
    # unit dimensions are dropped
    assert simplify((1, 4, 1, 5), (99, 5, 7, 1), (20, 5, 3, 1)) == ((20,), ((1,), (1,)))
    # only merged where contiguous on *both* sides
    assert simplify((4, 3, 5), (15, 5, 1), (30, 10, 1)) == ((12, 5), ((5, 1), (10, 1)))
    assert simplify((4, 3, 5), (100, 5, 1), (15, 5, 1)) == ((4, 15), ((100, 1), (15, 1)))
    # strided innermost: no merge
    assert simplify((3, 2), (2, 1), (1, 3)) == ((3, 2), ((2, 1), (1, 3)))
    # all unit: one dimension of extent 1
    assert simplify((1, 1), (5, 1), (3, 1)) == ((1,), ((1,), (1,)))
    assert simplify(
        (),
    ) == ((1,), ())


def test_copy_runs():
    c = Copy((4, 60), 0, (100, 1), 7, (60, 1))
    assert c.contiguous_inner and c.run_length == 60 and c.runs == 4 and c.size == 240
    s = Copy((4, 60), 0, (100, 2), 0, (60, 1))
    assert not s.contiguous_inner and s.run_length == 1 and s.runs == 240
    assert c.src.offset == 0 and c.src.strides == (100, 1) and c.dst.offset == 7 and c.dst.size == 240


# --- run merging ------------------------------------------------------------------------------

BIG = (512, 512, 512)


def test_run_merging_c_order_slab_x_to_slab_y():
    """C order, Slab.X -> Slab.Y, 512^3, 4 ranks: one contiguous run per (peer, x-plane).

    Source rank s holds x in [128s, 128s+128), all y and z; destination d holds all x and
    y in [128d, 128d+128). Their common box is 128 x-planes of a 128x512 (y, z) block. In a C
    array z is contiguous and whole on both sides, and y is contiguous-after-z on both sides
    (stride 512 = the z extent) in the source slab *and* in the destination slab, so y and z
    merge into one run of 128*512 elements. x cannot merge (source x stride 512*512 but the
    block is 128*512), so each transfer is exactly 128 runs (one per x-plane), local included.
    """
    ib, ob = dist_boxes(Slab.X, BIG, 4), dist_boxes(Slab.Y, BIG, 4)
    for r in range(4):
        p = make_plan(r, ib, ob, itemsize=8, out_order="C")
        assert p.local is not None and len(p.sends) == len(p.recvs) == 3
        for t in p.transfers + p.recvs:
            assert t.direct.runs == 128, (r, t.src, t.dst, t.direct)
            assert t.direct.run_length == 128 * 512
            assert t.direct.shape == (128, 128 * 512)
            assert t.direct.src_strides == (512 * 512, 1) and t.direct.dst_strides == (128 * 512, 1)
            assert t.direct.src_offset == 128 * t.dst * 512  # (x0, 128 d, 0) in the source slab
            assert t.direct.dst_offset == 128 * t.src * 128 * 512  # (128 s, y0, 0) in the destination
            # packing reads the same 128 runs; unpacking writes one run, since the destination
            # slab holds every x, so a source's 128 planes are one contiguous block there
            assert t.pack.runs == 128 and t.unpack.runs == 1
            assert t.nbytes == 128 * 128 * 512 * 8


def test_run_merging_f_order_mirror():
    """F order mirrors C with the axes reversed: Slab.Z -> Slab.Y has one run per (peer, z-plane).

    In an F array x is contiguous and whole, y is contiguous-after-x in both slabs, so x and y
    merge into runs of 512*128 elements; z (the slowest axis) gives 128 runs.
    """
    ib, ob = dist_boxes(Slab.Z, BIG, 4), dist_boxes(Slab.Y, BIG, 4)
    for r in range(4):
        p = make_plan(r, ib, ob, itemsize=8, out_order="F")
        assert p.in_strides == (1, 512, 512 * 512) and p.out_strides == (1, 512, 512 * 128)
        for t in p.transfers + p.recvs:
            assert t.direct.runs == 128 and t.direct.run_length == 128 * 512
            assert t.direct.src_strides == (512 * 512, 1) and t.direct.dst_strides == (128 * 512, 1)


def test_f_order_slab_x_to_slab_y_cannot_merge_x():
    """The contrast: in F order x is the contiguous axis and the input slab cuts it (128 of 512),
    so runs are only 128 elements long: 512 z-planes x 128 y-rows = 65536 runs per transfer."""
    ib, ob = dist_boxes(Slab.X, BIG, 4), dist_boxes(Slab.Y, BIG, 4)
    p = make_plan(0, ib, ob, itemsize=8, out_order="F")
    for t in p.transfers:
        assert t.direct.run_length == 128 and t.direct.runs == 512 * 128


# --- small exact problems ---------------------------------------------------------------------


@pytest.mark.parametrize("order", "CF")
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matrix_2_processes(order, dtype):
    """nvmath's test_redistribute_matrix_2_processes: (2, 3), columns regrouped."""
    ib = [((0, 0), (2, 2)), ((0, 2), (2, 3))]
    ob = [((0, 0), (2, 1)), ((0, 1), (2, 3))]
    plans = run_both(ib, ob, (2, 3), dtype, order)
    glob = np.arange(6).reshape(2, 3)
    inputs = [np.array(glob[sl(b)], dtype=dtype, order=order) for b in ib]
    out = execute_reference(plans, inputs)
    np.testing.assert_array_equal(out[0], [[0], [3]])
    np.testing.assert_array_equal(out[1], [[1, 2], [4, 5]])


@pytest.mark.parametrize("order", "CF")
@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_matrix_4_processes_blocks_to_columns(order, dtype):
    ib = dist_boxes(BlockNonCyclic(ProcessGrid((2, 2))), (4, 4), 4)
    ob = dist_boxes(Slab.Y, (4, 4), 4)
    plans = run_both(ib, ob, (4, 4), dtype, order)
    # block (0, 0) keeps column 0 and sends column 1; block (0, 1) sends columns 2 and 3; ...
    assert [[t.dst for t in p.sends] for p in plans] == [[1], [2, 3], [0, 1], [2]]
    assert [p.local is not None for p in plans] == [True, False, False, True]


@pytest.mark.parametrize(
    "din, dout, g, nranks",
    [
        (Slab.X, Slab.Y, (7, 5, 3), 3),
        (Slab.X, Slab.Z, (7, 5, 3), 3),
        (Slab.Z, Slab.X, (7, 5, 3), 4),
        (Slab.Y, Slab.Y, (7, 5, 3), 3),  # nothing moves between ranks
        (Slab.X, Slab.Y, (2, 3), 5),  # empty slabs on both sides
        (
            BlockNonCyclic(ProcessGrid((1, 2, 3))),
            BlockNonCyclic(ProcessGrid((3, 1, 2), ProcessGrid.Layout.COL_MAJOR)),
            (7, 5, 4),
            6,
        ),  # X-pencils -> Y-pencils, uneven
        (Slab(0), Slab(5), (3, 2, 1, 2, 2, 5), 4),  # 6-D
        (Slab.X, Slab.X, (11,), 4),  # 1-D
    ],
)
@pytest.mark.parametrize("order", "CF")
def test_uneven_problems_value_is_global_index(din, dout, g, nranks, order):
    run_both(dist_boxes(din, g, nranks), dist_boxes(dout, g, nranks), g, np.float64, order)


def test_padded_operand_with_ghost_layers_and_12_byte_records():
    dt = np.dtype([("a", "<i4"), ("b", "<f8")])
    g = (5, 4, 3)
    glob = np.zeros(g, dt)
    glob["a"] = np.arange(60).reshape(g)
    glob["b"] = -np.arange(60).reshape(g) - 0.5
    ib, ob = dist_boxes(Slab.X, g, 2), dist_boxes(Slab.Z, g, 2)
    inputs = []
    for b in ib:
        n = geo.box_shape(b)
        big = np.zeros(tuple(v + 2 for v in n), dt)  # one ghost layer on every side
        big["a"] = -1
        v = big[1:-1, 1:-1, 1:-1]
        v[...] = glob[sl(b)]
        inputs.append(v)
    strides = [tuple(s // 12 for s in a.strides) for a in inputs]
    assert strides[0] == ((4 + 2) * (3 + 2), 3 + 2, 1)
    plans = plans_for(ib, ob, 12, strides, "C")
    for mode in ("direct", "staged"):
        for o, b in zip(execute_reference(plans, inputs, mode=mode), ob):
            assert o.dtype == dt and o.flags.c_contiguous
            assert o.tobytes() == np.ascontiguousarray(glob[sl(b)]).tobytes()


# --- plan contents ----------------------------------------------------------------------------


def test_plan_fields_and_peer_order():
    g, P = (10, 6), 4
    ib, ob = dist_boxes(Slab.X, g, P), dist_boxes(Slab.Y, g, P)
    p = make_plan(1, ib, ob, itemsize=4)
    assert (p.rank, p.nranks, p.ndim, p.itemsize, p.out_order) == (1, 4, 2, 4, "C")
    assert p.global_box == ((0, 0), g)
    assert p.in_box == ((3, 0), (6, 6)) and p.in_shape == (3, 6) and p.in_strides == (6, 1)
    assert p.out_box == ((0, 2), (10, 4)) and p.out_shape == (10, 2) and p.out_strides == (2, 1)
    assert p.in_elements == 18 and p.out_elements == 20
    # step k: send to rank+k, receive from rank-k
    assert [t.dst for t in p.sends] == [2, 3, 0]
    assert [t.src for t in p.recvs] == [0, 3, 2]
    assert p.local.box == ((3, 2), (6, 4))
    assert p.transfers == (p.local,) + p.sends
    # X split 3, 3, 2, 2; Y split 2, 2, 1, 1
    assert p.send_bytes == {2: 3 * 1 * 4, 3: 3 * 1 * 4, 0: 3 * 2 * 4}
    assert p.recv_bytes == {0: 3 * 2 * 4, 3: 2 * 2 * 4, 2: 2 * 2 * 4}
    t = p.sends[0]
    assert (t.src, t.dst, t.box, t.nbytes, t.elements) == (1, 2, ((3, 4), (6, 5)), 12, 3)
    assert t.src_region == t.direct.src and t.dst_region == t.direct.dst


def test_staging_layout_by_hand():
    """Three ranks, Slab.X -> Slab.Y on (5, 3), 12-byte items: every slot is one aligned block."""
    ib, ob = dist_boxes(Slab.X, (5, 3), 3), dist_boxes(Slab.Y, (5, 3), 3)
    plans = plans_for(ib, ob, itemsize=12)
    p = plans[1]
    assert STAGING_ALIGN == 256
    assert [t.dst for t in p.sends] == [2, 0] and p.send_offsets == (0, 256)
    # rank 1 is the second source in both destinations' staging (ordered by source rank)
    assert p.remote_offsets == (256, 0)
    assert [t.src for t in p.recvs] == [0, 2] and p.recv_offsets == (0, 256)
    assert p.send_staging_bytes == p.recv_staging_bytes == 512
    assert plans[0].remote_offsets == (0, 0)  # rank 0 comes first everywhere
    assert plans[2].remote_offsets == (256, 256)
    assert all(q.max_send_staging_bytes == 512 and q.max_recv_staging_bytes == 512 for q in plans)


def test_staging_bytes_are_symmetric_maxima():
    # rank 0 sends a lot, the others little: max_* is the same on every rank
    g = (8, 40)
    ib = [((0, 0), (8, 37)), ((0, 37), (8, 38)), ((0, 38), (8, 40))]
    ob = dist_boxes(Slab.X, g, 3)
    plans = plans_for(ib, ob, itemsize=8)
    sends = [q.send_staging_bytes for q in plans]
    recvs = [q.recv_staging_bytes for q in plans]
    assert len(set(sends)) > 1
    assert {q.max_send_staging_bytes for q in plans} == {max(sends)}
    assert {q.max_recv_staging_bytes for q in plans} == {max(recvs)}
    assert sends[0] == sum(-(-t.nbytes // 256) * 256 for t in plans[0].sends)


def test_nothing_to_move():
    ib = [((0,), (4,)), ((4,), (4,))]
    p = make_plan(1, ib, ib, itemsize=8)
    assert p.local is None and p.sends == () and p.recvs == () and p.transfers == ()
    assert p.send_staging_bytes == p.recv_staging_bytes == 0
    assert "(nothing to move)" in p.describe()
    q = make_plan(0, ib, ib, itemsize=8)
    assert q.local is not None and q.sends == () and q.max_send_staging_bytes == 0


def test_describe_names_every_transfer():
    ib, ob = dist_boxes(Slab.X, (5, 3), 3), dist_boxes(Slab.Y, (5, 3), 3)
    text = make_plan(1, ib, ob, itemsize=12).describe()
    lines = text.splitlines()
    assert lines[0].startswith("Plan rank 1/3 key=") and "itemsize=12 out_order=C" in lines[0]
    assert "global Box(lower=(0, 0), upper=(5, 3))" in text
    assert "input  Box(lower=(2, 0), upper=(4, 3)) shape=(2, 3) strides=(3, 1)" in text
    assert sum(line.lstrip().startswith("local") for line in lines) == 1
    assert (
        "send  1->2 Box(lower=(2, 2), upper=(4, 3)) 24 B" in text and "staging@0 -> peer staging@256" in text
    )
    assert "recv  2->1 Box(lower=(4, 1), upper=(5, 2)) 12 B" in text


def test_plan_is_frozen_and_compares_without_key():
    ib, ob = dist_boxes(Slab.X, (6, 4), 2), dist_boxes(Slab.Y, (6, 4), 2)
    p = make_plan(0, ib, ob, itemsize=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.rank = 1
    assert p == make_plan(0, ib, ob, itemsize=8)
    assert hash(p.local) == hash(make_plan(0, ib, ob, itemsize=8).local)


def test_dense_default_strides_follow_out_order():
    ib, ob = dist_boxes(Slab.X, (6, 4, 2), 2), dist_boxes(Slab.Y, (6, 4, 2), 2)
    assert make_plan(0, ib, ob, itemsize=8, out_order="F").in_strides == (1, 3, 12)
    assert make_plan(0, ib, ob, itemsize=8, out_order="F").out_strides == (1, 6, 12)
    # None for one rank only: that rank dense, the others as given
    p = make_plan(0, ib, ob, itemsize=8, in_strides=[None, (100, 10, 1)])
    assert p.in_strides == (8, 2, 1)
    assert make_plan(1, ib, ob, itemsize=8, in_strides=[None, (100, 10, 1)]).in_strides == (100, 10, 1)


def test_numpy_integer_boxes_give_the_same_plan():
    ib, ob = dist_boxes(Slab.X, (6, 4), 2), dist_boxes(Slab.Y, (6, 4), 2)
    npb = [(np.array(lo), np.array(hi, dtype=np.int32)) for lo, hi in ib]
    p, q = make_plan(1, ib, ob, itemsize=8), make_plan(np.int64(1), npb, ob, itemsize=np.int64(8))
    assert p == q and p.key == q.key
    assert type(q.rank) is int and type(q.itemsize) is int


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"rank": 2}, r"rank 2 is not in \[0, 2\)"),
        ({"rank": -1}, r"rank -1 is not in \[0, 2\)"),
        ({"out_order": "K"}, "order must be 'C', 'F' or a permutation of the axes, got 'K'"),
        ({"itemsize": 0}, "itemsize must be positive, got 0"),
        ({"out_boxes": [((0,), (4,))]}, "got 2 input boxes but 1 output boxes"),
    ],
)
def test_make_plan_rejects(kw, match):
    args = {
        "rank": 0,
        "in_boxes": [((0,), (2,)), ((2,), (4,))],
        "out_boxes": [((0,), (3,)), ((3,), (4,))],
        "itemsize": 8,
    }
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        make_plan(args.pop("rank"), args.pop("in_boxes"), args.pop("out_boxes"), **args)


# --- plan keys --------------------------------------------------------------------------------


def test_plan_key_stable_across_processes():
    ib, ob = dist_boxes(Slab.X, (9, 7, 5), 3), dist_boxes(Slab.Z, (9, 7, 5), 3)
    key = make_plan(2, ib, ob, itemsize=16, out_order="F").key
    code = (
        "from redist.engine.plan import make_plan; "
        f"print(make_plan(2, {ib!r}, {ob!r}, itemsize=16, out_order='F').key)"
    )
    for seed in ("0", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run(
            [sys.executable, "-c", code], check=False, capture_output=True, text=True, env=env, timeout=120
        )
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == key
    assert len(key) == 32 and int(key, 16) >= 0
    assert plan_key(1, "a") == plan_key(1, "a") != plan_key(1, "b")


def test_plan_key_changes_with_the_problem():
    g = (6, 4)
    ib, ob = dist_boxes(Slab.X, g, 2), dist_boxes(Slab.Y, g, 2)
    base = make_plan(0, ib, ob, itemsize=8).key
    others = [
        make_plan(1, ib, ob, itemsize=8).key,
        make_plan(0, ib, ob, itemsize=4).key,
        make_plan(0, ib, ob, itemsize=8, out_order="F").key,
        make_plan(0, ob, ib, itemsize=8).key,
        make_plan(0, ib, dist_boxes(Slab.X, g, 2), itemsize=8).key,
        make_plan(0, ib, ob, itemsize=8, in_strides=[(8, 1), None]).key,  # padded rank 0
        make_plan(0, ib, ob, itemsize=8, in_strides=[None, (1, 3)]).key,  # another rank's layout
    ]
    assert base not in others and len(set(others)) == len(others)


# --- reference executor -----------------------------------------------------------------------


def test_empty_output_is_dense_and_poisoned():
    ib, ob = dist_boxes(Slab.X, (5, 3), 2), dist_boxes(Slab.Y, (5, 3), 2)
    for order in "CF":
        p = make_plan(0, ib, ob, itemsize=4, out_order=order)
        o = empty_output(p, np.uint32)
        assert o.shape == (5, 2) and (o.flags.c_contiguous if order == "C" else o.flags.f_contiguous)
        assert (o == 0xA5A5A5A5).all()
    e = empty_output(
        make_plan(1, [((0,), (3,)), ((3,), (3,))], [((0,), (3,)), ((3,), (3,))], itemsize=8), "f8"
    )
    assert e.shape == (0,)


def test_execute_reference_rejects_mismatches():
    ib, ob = dist_boxes(Slab.X, (4, 3), 2), dist_boxes(Slab.Y, (4, 3), 2)
    plans = plans_for(ib, ob)
    good = [np.zeros((2, 3)), np.zeros((2, 3))]
    with pytest.raises(ValueError, match=r"rank 1: operand shape \(3, 3\) != planned \(2, 3\)"):
        execute_reference(plans, [good[0], np.zeros((3, 3))])
    with pytest.raises(ValueError, match="rank 0: operand strides"):
        execute_reference(plans, [np.zeros((2, 3), order="F"), good[1]])
    with pytest.raises(ValueError, match=r"plans\[0\] is for rank 1/2"):
        execute_reference(plans[::-1], good)
    with pytest.raises(ValueError, match="mode must be 'direct' or 'staged'"):
        execute_reference(plans, good, mode="nvshmem")


def test_staged_mode_moves_bits_not_values():
    """NaN payloads and signed zeros survive: copies move bytes."""
    g = (6, 5)
    raw = np.arange(30, dtype=np.uint64) | np.uint64(0x7FF8000000000000)  # quiet NaNs with payloads
    glob = raw.view(np.float64).reshape(g)
    glob[0, 0] = -0.0
    ib, ob = dist_boxes(Slab.X, g, 3), dist_boxes(Slab.Y, g, 3)
    inputs = [np.ascontiguousarray(glob[sl(b)]) for b in ib]
    plans = plans_for(ib, ob)
    for mode in ("direct", "staged"):
        for o, b in zip(execute_reference(plans, inputs, mode=mode), ob):
            assert o.view(np.uint64).tolist() == np.ascontiguousarray(glob[sl(b)]).view(np.uint64).tolist()


def test_fuse_one_plan_keeps_its_staging():
    """A single plan fused is laid out as the plan itself (backends lower every plan fused)."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        p = int(rng.integers(1, 6))
        g = tuple(int(x) for x in rng.integers(1, 9, 3))
        ib, ob = random_boxes(g, p, rng), random_boxes(g, p, rng)
        for r in range(p):
            plan = make_plan(r, ib, ob, itemsize=8)
            f = fuse([plan])
            assert (f.send_offsets, f.recv_offsets, f.remote_offsets) == (plan.send_offsets, plan.recv_offsets,
                                                                          plan.remote_offsets)
            assert (f.max_send_staging_bytes, f.max_recv_staging_bytes) == (plan.max_send_staging_bytes,
                                                                           plan.max_recv_staging_bytes)
            assert all(parts == (0,) for parts in f.send_parts + f.recv_parts)


def test_fuse_slots_agree_between_sender_and_receiver():
    """Every field's part of a pair's slot starts at the same place for the sender (send_parts,
    remote_offsets) and the receiver (recv_parts, recv_offsets), aligned, big enough, disjoint."""
    rng = np.random.default_rng(4)
    itemsizes = (8, 4, 16, 1)
    for _ in range(20):
        p = int(rng.integers(2, 6))
        g = tuple(int(x) for x in rng.integers(1, 9, 3))
        ib, ob = random_boxes(g, p, rng), random_boxes(g, p, rng)
        fused = [fuse([make_plan(r, ib, ob, itemsize=s) for s in itemsizes]) for r in range(p)]
        for r, f in enumerate(fused):
            assert f.nfields == 4 and f.itemsizes == itemsizes
            for i, t in enumerate(f.first.sends):
                q = fused[t.dst]
                j = [u.src for u in q.first.recvs].index(r)
                assert f.remote_offsets[i] == q.recv_offsets[j]
                assert f.send_parts[i] == q.recv_parts[j]
                ends = [part + fp.sends[i].nbytes for part, fp in zip(f.send_parts[i], f.fields)]
                assert all(part % STAGING_ALIGN == 0 for part in f.send_parts[i])
                assert all(e <= nxt for e, nxt in zip(ends, f.send_parts[i][1:])), "parts overlap"
                assert f.send_offsets[i] + ends[-1] <= f.send_staging_bytes <= f.max_send_staging_bytes
            assert f.send_bytes == {t.dst: sum(fp.sends[i].nbytes for fp in f.fields)
                                    for i, t in enumerate(f.first.sends)}
            assert "4 field(s)" in f.describe()


def test_fuse_refuses_other_boxes():
    a = make_plan(0, [((0,), (4,))], [((0,), (4,))], itemsize=8)
    b = make_plan(0, [((0,), (5,))], [((0,), (5,))], itemsize=8)
    with pytest.raises(ValueError, match="field 1's plan has other boxes"):
        fuse([a, b])
    with pytest.raises(ValueError, match="at least one plan"):
        fuse([])
