# SPDX-License-Identifier: Apache-2.0
"""The CUDA backend without a GPU: NVRTC compiles every kernel variant for sm_90, and every
plan's launch list (graph node list, segments, tables) is checked by replaying it on host
memory through the kernel's own index maths. Runs in CI (needs cuda-core + NVRTC, no device).
"""

from __future__ import annotations

import os
import subprocess
import sys

import math

import numpy as np
import pytest
from helpers import expected_bytes, global_bytes, operand_bytes, random_boxes, slab_boxes, strided_operand
from redist.engine import geometry as geo
from redist.engine.cuda import kernels
from redist.engine.cuda.emulator import emulate_job
from redist.engine.cuda.launch_list import align_of, build_launch_list
from redist.engine.errors import CudaError, InvalidStateError, InvalidValueError
from redist.engine.plan import make_plan


def _nvrtc_available() -> bool:
    try:
        from cuda.core import Program  # noqa: F401

        kernels.compile_family(0, 0, "90")
        return True
    except Exception:  # noqa: BLE001
        return False


needs_nvrtc = pytest.mark.skipif(
    not _nvrtc_available(), reason="cuda-core / NVRTC not installed (pip install '.[nvrtc]')"
)


# --------------------------------------------------------------------------------------------
# helpers: global arrays, operands, expected results
# --------------------------------------------------------------------------------------------


def run_case(
    in_boxes,
    out_boxes,
    itemsize,
    *,
    transport="auto",
    order="C",
    strides=None,
    reach=None,
    in_offsets=None,
    out_delta=0,
    vec=None,
    seg_limit=kernels.SEG_LIMIT,
    seed=1,
    signal="epoch",
    epochs=2,
):
    p = len(in_boxes)
    g = geo.bounding_box(list(in_boxes))
    gshape = tuple(g[1]) if g else tuple(0 for _ in in_boxes[0][0])
    G = global_bytes(gshape, itemsize, seed)
    if strides is None:
        strides = [geo.dense_strides(geo.box_shape(b), order) for b in in_boxes]
    plans = [
        make_plan(r, in_boxes, out_boxes, itemsize=itemsize, in_strides=strides, out_order=order)
        for r in range(p)
    ]
    if any(s <= 0 for st, b in zip(strides, in_boxes) for s, n in zip(st, geo.box_shape(b)) if n > 1):
        pieces = [strided_operand(G, in_boxes[r], strides[r], itemsize) for r in range(p)]
        inputs = [buf for buf, _ in pieces]
        origins = [off for _, off in pieces]
        G = G.copy()
        for r in range(p):  # zero strides: the expected result repeats the stored (first) index
            box = tuple(slice(a, b) for a, b in zip(*in_boxes[r]))
            for ax, st in enumerate(strides[r]):
                if st == 0:
                    G[box] = np.take(G[box], [0] * G[box].shape[ax], axis=ax)
    else:
        inputs = [operand_bytes(G, in_boxes[r], strides[r], itemsize) for r in range(p)]
        origins = None
    outs, lls = emulate_job(
        plans,
        inputs,
        reach=reach,
        transport=transport,
        vec=vec,
        in_offsets=in_offsets,
        in_origins=origins,
        out_delta=out_delta,
        seg_limit=seg_limit,
        signal=signal,
        epochs=epochs,
    )
    for r in range(p):
        want = expected_bytes(G, out_boxes[r], order)
        got = outs[r][: len(want)]
        assert np.array_equal(got, want), (
            f"rank {r}: result differs (transport={transport}, itemsize={itemsize})"
        )
    return lls


# --------------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------------


def test_fast_divmod():
    rng = np.random.default_rng(0)
    divisors = [1, 2, 3, 5, 7, 16, 255, 256, 257, 1000, 4096, 65535, 65537, (1 << 30) + 3, (1 << 31) - 1]
    divisors += [int(x) for x in rng.integers(1, 1 << 31, 200)]
    n = np.concatenate([np.arange(0, 5000), rng.integers(0, 1 << 31, 20000), [(1 << 31) - 1]]).astype(
        np.uint64
    )
    for d in divisors:
        mul, shr = kernels.fast_divmod_params(d)
        q = n if mul == 0 else (n * np.uint64(mul)) >> np.uint64(32 + shr)
        assert np.array_equal(q, n // np.uint64(d)), d


def test_seg_layout():
    assert kernels.SEG_DTYPE.itemsize == 328
    assert kernels.SEG_DTYPE.fields["sstride"][1] == 192 and kernels.SEG_DTYPE.fields["run_mul"][1] == 56
    src = kernels.family_source(256, 2)
    assert "static_assert(sizeof(Seg) == 328" in src and kernels.kernel_name(256, 2, 16) in src
    assert kernels.family_widths(0) == (16, 8, 4, 2, 1) and kernels.family_widths(12) == (4, 2, 1)


@pytest.mark.slow
@needs_nvrtc
def test_compile_every_family_for_sm90():
    """Every family shape (nout 0..MAXD with a per-segment run length) of every kind (plain, the
    epoch protocol's copy and unpack) and the fixed run lengths that itemsizes 1..16 produce, each
    for all its vector widths, compile to sm_90 cubins."""
    fams = {(0, n, kind) for n in range(kernels.MAXD + 1) for kind in kernels.KINDS}
    for itemsize in range(1, 17):
        fams.add((itemsize * 5, 1 + itemsize % 3, "plain"))
    # and the families real plans ask for, in both signal modes
    for itemsize in (1, 2, 3, 4, 8, 12, 16):
        for gshape, ax in (((8, 12, 10), 1), ((6, 5, 7, 3), 2), ((9, 4), 1)):
            ib, ob = slab_boxes(gshape, 3, 0), slab_boxes(gshape, 3, ax)
            for r in range(3):
                pl = make_plan(r, ib, ob, itemsize=itemsize)
                for t in ("push", "put"):
                    for signal in ("epoch", "barrier"):
                        fams |= build_launch_list(pl, transport=t, signal=signal).families()
    assert {k for _, _, k in fams} == set(kernels.KINDS)
    for run, nout, kind in sorted(fams):
        obj = kernels.compile_family(run, nout, "90", kind)
        assert obj.code_type == "cubin"
        code = bytes(obj.code)
        assert code[:4] == b"\x7fELF", "not a cubin"
        for v in kernels.family_widths(run):
            assert kernels.kernel_name(run, nout, v, kind).encode() in code


# --------------------------------------------------------------------------------------------
# launch lists (the graph description)
# --------------------------------------------------------------------------------------------


def test_graph_shapes_slab_x_to_y_barrier():
    g = (32, 32, 32)
    ib, ob = slab_boxes(g, 2, 0), slab_boxes(g, 2, 1)
    pl = make_plan(0, ib, ob, itemsize=8)
    push = build_launch_list(pl, transport="auto", signal="barrier")
    assert push.node_labels() == ["sync_all*", "kernel:copy[local,push]", "barrier_all"]
    assert push.push_to == (1,) and push.put_to == () and push.result_bytes == 16 * 32 * 32 * 8
    k = push.kernel("copy")
    assert k.run_bytes == 16 * 32 * 8 and k.nout == 1 and k.vmax == 16 and k.reads_input and k.writes_output
    assert len(k.segments) == 2 and push.send_staging_bytes == 0
    put = build_launch_list(pl, transport="put", signal="barrier")
    assert put.node_labels() == [
        "kernel:copy[local,pack]",
        "sync_all",
        "put->1",
        "quiet",
        "barrier_all",
        "kernel:unpack[unpack]",
    ]
    assert put.send_staging_bytes >= 16 * 16 * 32 * 8 and put.put_from == (1,)
    # unreachable peer: auto falls back to put, push refuses
    reach = np.array([[1, 0], [0, 1]], bool)
    assert build_launch_list(pl, reach, transport="auto", signal="barrier").node_labels() == put.node_labels()
    with pytest.raises(NotImplementedError, match="reachable"):
        build_launch_list(pl, reach, transport="push")
    assert "push to [1]" in push.describe()


def test_graph_shapes_slab_x_to_y_epoch():
    """The barrier-free protocol: no NVSHMEM barrier anywhere; push is one kernel."""
    g = (32, 32, 32)
    ib, ob = slab_boxes(g, 2, 0), slab_boxes(g, 2, 1)
    pl = make_plan(0, ib, ob, itemsize=8)
    push = build_launch_list(pl, transport="auto")
    assert push.signal == "epoch" and push.node_labels() == ["kernel:copy[local,push](epoch)"]
    k = push.kernel("copy")
    assert (k.kind, k.credit_to, k.arrive_to, k.wait_for, k.bump) == ("epoch", (1,), (1,), (1,), True)
    assert "credits to [1], arrivals to [1], waits for [1], bumps the epoch" in push.describe()
    put = build_launch_list(pl, transport="put")
    assert put.node_labels() == ["kernel:copy[local,pack](epoch)", "put+signal->1", "kernel:unpack[unpack](epoch)",
                                 "quiet"]
    copy, unpack = put.kernel("copy"), put.kernel("unpack")
    assert copy.credit_to == (1,) and copy.arrive_to == () and copy.wait_for == () and not copy.bump
    assert unpack.kind == "epoch_unpack" and unpack.bump
    # an unreachable source gets its credit as an NVSHMEM signal, not a store
    reach = np.array([[1, 0], [0, 1]], bool)
    far = build_launch_list(pl, reach)
    assert far.node_labels() == ["credit->1", "kernel:copy[local,pack](epoch)", "put+signal->1",
                                 "kernel:unpack[unpack](epoch)", "quiet"]
    assert far.kernel("copy").credit_to == ()
    # one rank: nothing to agree on, the plain kernel
    one = build_launch_list(make_plan(0, slab_boxes(g, 1, 0), slab_boxes(g, 1, 1), itemsize=8))
    assert one.node_labels() == ["kernel:copy[local]"] and one.signal == "none"


def test_epoch_protocol_lists_pair_up_across_ranks():
    """Every credit, arrival and put signal a rank expects is one some other rank sends."""
    g = (12, 12, 6)
    p = 4
    ib, ob = slab_boxes(g, p, 0), slab_boxes(g, p, 2)
    reach = np.ones((p, p), bool)
    reach[0, 3] = reach[3, 0] = False
    lls = [build_launch_list(make_plan(r, ib, ob, itemsize=8), reach) for r in range(p)]
    for r, ll in enumerate(lls):
        k = ll.kernel("copy")
        credits = set(k.credit_to) | {st.pe for st in ll.steps if st.op == "credit"}
        sources = {s for s in range(p) if s != r and r in set(lls[s].push_to) | set(lls[s].put_to)}
        assert credits == sources, (r, credits, sources)
        assert set(k.arrive_to) == set(ll.push_to)
        assert set(k.wait_for) == {s for s in range(p) if r in lls[s].push_to}
        assert set(ll.put_from) == {s for s in range(p) if r in lls[s].put_to}
        assert set(ll.push_from) == {s for s in range(p) if r in lls[s].push_to}  # who maps this rank's out= (#44)
        assert not any(st.op in ("sync_all", "barrier_all") for st in ll.steps)


def test_graph_shapes_single_rank_and_local_only():
    g = (16, 8)
    pl = make_plan(0, slab_boxes(g, 1, 0), slab_boxes(g, 1, 1), itemsize=4)
    ll = build_launch_list(pl)
    assert ll.node_labels() == ["kernel:copy[local]"]
    k = ll.kernel("copy")
    assert len(k.segments) == 1 and k.nout == 0 and k.segments[0].row_bytes == 16 * 8 * 4
    # X -> X on 3 ranks: nothing crosses ranks, no NVSHMEM node anywhere
    ib = slab_boxes((9, 4), 3, 0)
    for r in range(3):
        assert build_launch_list(make_plan(r, ib, ib, itemsize=2)).node_labels() == ["kernel:copy[local]"]


def test_graph_mixed_transports_same_structure_on_every_rank():
    g = (12, 12, 6)
    p = 4
    ib, ob = slab_boxes(g, p, 0), slab_boxes(g, p, 1)
    reach = np.ones((p, p), bool)
    reach[0, 3] = reach[3, 0] = False  # one pair only reachable through puts
    lls = [build_launch_list(make_plan(r, ib, ob, itemsize=8), reach, signal="barrier") for r in range(p)]
    ops = [[s.op for s in ll.steps if s.op != "put" and s.op != "kernel" and s.op != "quiet"] for ll in lls]
    assert all(o == ["sync_all", "sync_all", "barrier_all"] for o in ops), ops  # collectives match
    assert lls[0].put_to == (3,) and lls[3].put_to == (0,) and lls[1].put_to == ()
    assert lls[1].node_labels()[:3] == ["sync_all*", "kernel:copy[local,push]", "sync_all"]


# --------------------------------------------------------------------------------------------
# host replay of whole jobs through the kernel index maths
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("signal", ["epoch", "barrier"])
@pytest.mark.parametrize("transport", ["push", "put"])
@pytest.mark.parametrize("itemsize", [1, 2, 3, 4, 8, 12, 16])
def test_emulate_slabs(transport, itemsize, signal):
    g = (7, 6, 5)
    for p in (1, 2, 3, 4):
        for a, b in ((0, 1), (1, 0), (0, 2), (2, 1), (1, 1)):
            run_case(slab_boxes(g, p, a), slab_boxes(g, p, b), itemsize, transport=transport, signal=signal)


@pytest.mark.parametrize("transport", ["push", "put", "mixed"])
def test_emulate_epoch_protocol_with_empty_ranks(transport):
    """Ranks that send nothing, receive nothing or hold nothing still take part in every epoch."""
    rng = np.random.default_rng(7)
    for p in (2, 3, 4):
        reach = None
        if transport == "mixed":
            reach = np.ones((p, p), bool)
            reach[0, p - 1] = reach[p - 1, 0] = False
        g = (2, 3, 4)  # fewer planes than ranks at P = 3, 4: empty boxes
        run_case(slab_boxes(g, p, 0), slab_boxes(g, p, 2), 8, transport="auto" if transport == "mixed" else transport,
                 reach=reach, epochs=3)
        one = [((0, 0, 0), g)] + [((0, 0, 0), (0, 0, 0))] * (p - 1)
        run_case(one, slab_boxes(g, p, 1), 4, transport="auto" if transport == "mixed" else transport, reach=reach)
        run_case(random_boxes(g, p, rng), random_boxes(g, p, rng), 2, transport="auto" if transport == "mixed"
                 else transport, reach=reach, epochs=3)


@pytest.mark.parametrize("order", ["C", "F"])
def test_emulate_random_boxes_nd(order):
    rng = np.random.default_rng(7)
    for case in range(40):
        ndim = int(rng.integers(1, 6))
        gshape = tuple(int(x) for x in rng.integers(1, 7, ndim))
        p = int(rng.integers(1, 6))
        ib, ob = random_boxes(gshape, p, rng), random_boxes(gshape, p, rng)
        itemsize = int(rng.choice([1, 2, 4, 8, 16, 3, 12]))
        transport = ["auto", "put", "push"][case % 3]
        reach = None
        if transport == "auto" and p > 2:
            reach = rng.random((p, p)) < 0.6
            reach = reach & reach.T
            np.fill_diagonal(reach, True)
        run_case(ib, ob, itemsize, transport=transport, order=order, reach=reach, seed=case)


def test_emulate_permuted_results():
    """result_layout as a permutation: the kernels write the transposed layout directly."""
    rng = np.random.default_rng(11)
    for case in range(30):
        ndim = int(rng.integers(2, 6))
        gshape = tuple(int(x) for x in rng.integers(1, 6, ndim))
        p = int(rng.integers(1, 5))
        perm = tuple(int(a) for a in rng.permutation(ndim))
        ib, ob = random_boxes(gshape, p, rng), random_boxes(gshape, p, rng)
        itemsize = int(rng.choice([1, 4, 8, 16, 12]))
        lls = run_case(ib, ob, itemsize, transport=["push", "put"][case % 2], order=perm, seed=case)
        assert all(ll.nranks == p for ll in lls)
    g = (6, 8, 4)  # a pencil transpose with the new axis contiguous
    run_case(slab_boxes(g, 2, 0), slab_boxes(g, 2, 1), 8, order=(0, 2, 1))


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8, 16, 12])
@pytest.mark.parametrize("transport", ["push", "put"])
def test_emulate_tiled_transposes(itemsize, transport):
    """Permuted results whose copies transpose: tiled through shared memory (edges that are not
    multiples of the tile, several tiles, outer dimensions), or row by row where the vector width
    is not the element size (12-byte elements, a misaligned operand)."""
    def c_order(boxes):  # C-ordered operands (run_case's default is dense in the result order)
        return [geo.dense_strides(geo.box_shape(b), "C") for b in boxes]

    g = (3, 140, 75)
    ib = slab_boxes(g, 2, 0)
    lls = run_case(ib, slab_boxes(g, 2, 1), itemsize, transport=transport, order=(0, 2, 1), strides=c_order(ib),
                   seed=5)
    tiled = [s for ll in lls for k in ll.kernels for s in k.segments if s.tile_a is not None]
    assert bool(tiled) == (itemsize in kernels.VEC_WIDTHS), itemsize
    for s in tiled:  # one block per tile, as the kernel deals them
        assert kernels.tile_count(s.outer, s.tile_a, s.row_bytes) > 1
    if itemsize in (4, 8):  # a misaligned operand: narrower vectors, the row-by-row path
        run_case(ib, slab_boxes(g, 2, 1), itemsize, transport=transport, order=(0, 2, 1), strides=c_order(ib),
                 in_offsets=[2, 2], seed=6)
    # 4-D with the transposed pair inside, and F order over C operands
    ib4 = slab_boxes((4, 5, 33, 40), 3, 0)
    run_case(ib4, slab_boxes((4, 5, 33, 40), 3, 1), itemsize, transport=transport, order=(1, 0, 3, 2),
             strides=c_order(ib4), seed=7)
    ib2 = slab_boxes((40, 50), 2, 0)
    lls = run_case(ib2, slab_boxes((40, 50), 2, 1), itemsize, transport=transport, order="F", strides=c_order(ib2),
                   seed=8)
    assert any(s.tile_a is not None for ll in lls for k in ll.kernels for s in k.segments) == (itemsize in kernels.VEC_WIDTHS)


def test_replicated_inputs_only_the_lowest_holder_talks():
    """Replicas: only rank 0 sends, so a pair that never exchanges needs no reachability (push)."""
    full = ((0, 0), (4, 6))
    plans = [make_plan(r, [full] * 3, [full] * 3, itemsize=8) for r in range(3)]
    reach = np.array([[1, 1, 1], [1, 1, 0], [1, 0, 1]], bool)  # 1 and 2 cannot reach each other
    lls = run_case([full] * 3, [full] * 3, 8, transport="push", reach=reach)
    assert [tuple(ll.push_to) for ll in lls] == [(1, 2), (), ()] and not any(ll.any_put for ll in lls)
    assert [[t.dst for t in p.sends] for p in plans] == [[1, 2], [], []]


@pytest.mark.parametrize("transport", ["push", "put"])
def test_emulate_several_boxes_per_pair(transport):
    """Replicated input with holes: the last rank holds everything around the others' boxes, so
    what it sends to each output is several boxes (one slot, one put, several segments)."""
    g = (6, 7, 5)
    full = ((0, 0, 0), g)
    for p in (2, 3, 4):
        ib = [((1, 1, 1), (3, 5, 4)), ((3, 0, 2), (5, 3, 5)), ((0, 4, 0), (2, 7, 2))][: p - 1] + [full]
        for ob in (slab_boxes(g, p, 1), [full] * p):
            plans = [make_plan(r, ib, ob, itemsize=8) for r in range(p)]
            assert any(t.more for pl in plans for t in pl.transfers), "no transfer of several boxes"
            run_case(ib, ob, 8, transport=transport, seed=p)


def test_emulate_overlapping_boxes():
    """allow_overlap plans (replicas, allgather, broadcast, gather, halos) through the kernels."""
    from helpers import overlap_boxes

    rng = np.random.default_rng(23)
    for case in range(30):
        gshape = tuple(int(x) for x in rng.integers(1, 7, int(rng.integers(1, 5))))
        p = int(rng.integers(1, 5))
        label, ib, ob = overlap_boxes(gshape, p, rng)
        itemsize = int(rng.choice([1, 4, 8, 16, 12]))
        order = ["C", "F"][case % 2]
        lls = run_case(ib, ob, itemsize, transport=["push", "put", "auto"][case % 3], order=order, seed=case)
        assert all(ll.nranks == p for ll in lls), label


@pytest.mark.parametrize("transport", ["push", "put"])
def test_emulate_strided_outputs(transport):
    """Every rank's out= at its own strides (the interior of a ghosted array, a reversed axis):
    plans retargeted with Plan.retarget_all, pushes store with the destination's strides."""
    from redist.engine.buffer import byte_extent

    rng = np.random.default_rng(31)
    for case in range(12):
        nd = int(rng.integers(2, 4))
        g = tuple(int(x) for x in rng.integers(2, 7, nd))
        p = int(rng.integers(1, 5))
        ib, ob = random_boxes(g, p, rng), random_boxes(g, p, rng)
        itemsize = int(rng.choice([1, 4, 8, 16, 12]))
        shapes = [geo.box_shape(b) for b in ob]
        ghosted = [geo.dense_strides(tuple(n + 2 for n in sh), "C") for sh in shapes]  # interior of +2 per axis
        if case % 3 == 2:  # axis 0 reversed: element (0, ...) sits at the far end
            ghosted = [(-st[0],) + st[1:] for st in ghosted]
        plans = [make_plan(r, ib, ob, itemsize=itemsize).retarget_all(ghosted) for r in range(p)]
        G = global_bytes(g, itemsize, case)
        inputs = [operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r]), "C"), itemsize) for r in range(p)]
        spans = [byte_extent(sh, st, itemsize) for sh, st in zip(shapes, ghosted)]
        origin = max(-lo for lo, _ in spans)  # where element (0, ...) sits in each out= region
        size = origin + max(hi for _, hi in spans)
        outs, _ = emulate_job(plans, inputs, transport=transport, out_delta=origin, out_bytes=size)
        for r in range(p):
            if not math.prod(shapes[r]):
                continue
            view = np.lib.stride_tricks.as_strided(
                outs[r][origin:], shape=shapes[r] + (itemsize,),
                strides=tuple(s * itemsize for s in ghosted[r]) + (1,)) if ghosted[r][0] > 0 else None
            if view is None:  # reversed: read it back through the positive-stride view of the flipped axis
                base = origin + (shapes[r][0] - 1) * ghosted[r][0] * itemsize
                view = np.lib.stride_tricks.as_strided(
                    outs[r][base:], shape=shapes[r] + (itemsize,),
                    strides=(-ghosted[r][0] * itemsize,) + tuple(s * itemsize for s in ghosted[r][1:]) + (1,))[::-1]
            want = G[tuple(slice(a, b) for a, b in zip(*ob[r]))]
            assert np.array_equal(view, want), f"case {case} rank {r} ({transport})"


def test_emulate_strided_inputs_and_alignment():
    rng = np.random.default_rng(3)
    g = (6, 10, 8)
    ib, ob = slab_boxes(g, 2, 0), slab_boxes(g, 2, 1)
    for itemsize in (1, 2, 4, 8, 16):
        shapes = [geo.box_shape(b) for b in ib]
        # padded (ghost-layer) inputs and a transposed input layout
        padded = [(s[1] * (s[2] + 3) + 7, s[2] + 3, 1) for s in shapes]
        run_case(ib, ob, itemsize, strides=padded, transport="push")
        run_case(ib, ob, itemsize, strides=padded, transport="put")
        transposed = [(1, s[0], s[0] * s[1]) for s in shapes]
        run_case(ib, ob, itemsize, strides=transposed, transport="auto")
        # misaligned operands (vector width drops at bind time) and an out= delta
        for off in (1, 2, 4, 8, 12):
            run_case(ib, ob, itemsize, in_offsets=[off, off + 1], out_delta=4096 + 8, transport="push")
            run_case(ib, ob, itemsize, in_offsets=[off, 0], out_delta=256, transport="put")
    del rng


@pytest.mark.parametrize("transport", ["push", "put"])
def test_emulate_negative_and_zero_strides(transport):
    """Reversed axes (a[::-1]) and broadcast (zero-stride) operands: the kernel walks them as given."""
    g = (6, 10, 8)
    ib, ob = slab_boxes(g, 3, 0), slab_boxes(g, 3, 1)
    shapes = [geo.box_shape(b) for b in ib]
    for itemsize in (1, 4, 8, 16):
        reversed_c = [(-s[1] * s[2], s[2], -1) for s in shapes]
        run_case(ib, ob, itemsize, strides=reversed_c, transport=transport)
        reversed_f = [(1, -s[0], s[0] * s[1]) for s in shapes]
        run_case(ib, ob, itemsize, strides=reversed_f, transport=transport)
        broadcast = [(0, s[2], 1) for s in shapes]
        run_case(ib, ob, itemsize, strides=broadcast, transport=transport)


def test_emulate_every_vector_width():
    g = (8, 16, 16)
    ib, ob = slab_boxes(g, 2, 0), slab_boxes(g, 2, 2)
    for v in kernels.VEC_WIDTHS:
        for t in ("push", "put"):
            run_case(ib, ob, 16, transport=t, vec=v)


def test_emulate_split_segments():
    """Segments above the kernel's index range are cut (tested with a tiny limit)."""
    g = (10, 12, 9)
    ib, ob = slab_boxes(g, 2, 0), slab_boxes(g, 2, 1)
    for limit in (64, 200, 1000):
        for t in ("push", "put"):
            lls = run_case(ib, ob, 4, transport=t, seg_limit=limit)
            assert all(s.nbytes <= limit for ll in lls for k in ll.kernels for s in k.segments)
    # a single long run
    run_case(slab_boxes((4096,), 1, 0), slab_boxes((4096,), 1, 0), 8, seg_limit=1000)


def test_blocks_split():
    assert kernels.blocks_for([100], 132) == [1]
    chunk = kernels.BLOCK * kernels.ILP * 16
    assert kernels.blocks_for([3 * chunk + 1], 132) == [4]  # one block per chunk below the cap
    b = kernels.blocks_for([1 << 30, 1 << 30], 132)
    assert b[0] == b[1] and sum(b) <= 132 * kernels.GRID_PER_SM
    assert kernels.blocks_for([1 << 30, 10], 132)[1] == 1


def test_modules_import_without_gpu():
    import redist._symmetric as sm
    from redist.engine.cuda import executable, lowering, mirror, symmetric

    assert hasattr(sm, "allocate_symmetric_memory") and hasattr(symmetric, "allocate")
    assert executable.CudaExecutable and lowering.lower and mirror.MirrorExecutable
    from redist.engine.errors import NotInitializedError

    # GPU packages need the GPU runtime; numpy gets host symmetric memory (tests/mpi/test_host_symmetric.py)
    code = ("import numpy, redist; a = redist.allocate_symmetric_memory((2, 2), numpy); assert a.shape == (2, 2); "
            "redist.allocate_symmetric_memory((2, 2), 'cupy')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, REDIST_DEVICE="cpu"))
    assert NotInitializedError.__name__ in res.stderr and "CPU-only" in res.stderr, res.stderr


# --------------------------------------------------------------------------------------------
# The executable and CudaPath on a simulated job: ranks are threads, device memory is host
# memory in one fake address space (peer pointers included), NVSHMEM calls are thread
# barriers and memcpys, and every cuLaunchKernel runs the kernel emulator on the segment table
# that lower() uploaded, with the arguments read back from the ctypes argument block.
# --------------------------------------------------------------------------------------------

import bisect
import ctypes
import threading
import time
import types


class _Hub:
    def __init__(self, p):
        self.p = p
        self.barrier = threading.Barrier(p, timeout=60)
        self.slots = [None] * p
        self.lock = threading.Lock()
        self.bases: list[int] = []
        self.bufs: list[np.ndarray] = []
        self.ids: dict[int, int] = {}  # region base -> its buffer id (CU_POINTER_ATTRIBUTE_BUFFER_ID)
        self.last_id = 0

    # memory
    def add(self, base, n, fill=0xCD, alias=None):
        """A region at ``base`` (``alias``: the memory of the region at that address, mapped again)."""
        with self.lock:
            data = np.full(n, fill, np.uint8) if alias is None else self.bufs[self.bases.index(alias)]
            i = bisect.bisect(self.bases, base)
            self.bases.insert(i, base)
            self.bufs.insert(i, data)
            self.last_id += 1
            self.ids[base] = self.last_id

    def remove(self, base):
        with self.lock:
            i = self.bases.index(base)
            del self.bases[i], self.bufs[i], self.ids[base]

    def region(self, addr):
        """(base, size, buffer id) of the region holding ``addr``, or None."""
        with self.lock:
            i = bisect.bisect(self.bases, addr) - 1
            if i < 0 or addr >= self.bases[i] + len(self.bufs[i]):
                return None
            return self.bases[i], len(self.bufs[i]), self.ids[self.bases[i]]

    def locate(self, addr: int, n: int):
        with self.lock:
            i = bisect.bisect(self.bases, addr) - 1
            assert i >= 0, hex(addr)
            b, buf = self.bases[i], self.bufs[i]
        off = addr - b
        assert 0 <= off and off + n <= len(buf), f"access 0x{addr:x}+{n} outside region 0x{b:x}+{len(buf)}"
        return buf, off

    def read(self, addr, n):
        buf, off = self.locate(addr, n)
        return buf[off : off + n].copy()

    def write(self, addr, data):
        data = np.asarray(data, np.uint8).reshape(-1)
        buf, off = self.locate(addr, len(data))
        buf[off : off + len(data)] = data


class _Comm:
    def __init__(self, hub, rank):
        self.hub, self.rank = hub, rank

    def Get_rank(self):
        return self.rank

    def Get_size(self):
        return self.hub.p

    gathers = 0  # allgathers made (the per-call agreement is one here: no buffer collectives)

    def allgather(self, obj):
        self.gathers += 1
        h = self.hub
        h.slots[self.rank] = obj
        h.barrier.wait()
        out = list(h.slots)
        h.barrier.wait()
        return out

    def allreduce(self, v, op=None):
        vals = self.allgather(v)
        from mpi4py import MPI

        return min(vals) if op is MPI.MIN else max(vals) if op is MPI.MAX else sum(vals)


_FUNCS: dict[int, tuple] = {}
#: bytes of each kernel argument (copy.cu): Bases, table, nsegs [, ctl, proto, nranks, ncredit, narrive, nwait, wait, bump]
_ARG_BYTES = {"plain": (8 * (kernels.MAXF + kernels.MAXO), 8, 4)}
_ARG_BYTES["epoch"] = _ARG_BYTES["epoch_unpack"] = _ARG_BYTES["plain"] + (8, 8, 4, 4, 4, 4, 4, 4)


class _Node:
    """A node of a simulated CUDA graph: a kernel (function + a copy of its argument bytes), an
    NVSHMEM or user operation (a host callable), or a child graph (a list of nodes, cloned)."""

    def __init__(self, kind, func=0, grid=0, shm=0, args=None, fn=None, children=None):
        self.kind, self.func, self.grid, self.shm, self.args, self.fn = kind, func, grid, shm, args, fn
        self.children = children
        self.enabled = True

    def clone(self):
        n = _Node(self.kind, self.func, self.grid, self.shm, self.args, self.fn,
                  None if self.children is None else {i: c.clone() for i, c in self.children.items()})
        n.enabled = self.enabled
        return n


class _Graph:
    def __init__(self):
        self.nodes: dict[int, _Node] = {}  # in insertion order
        self.alive = True
        self.execs = 0


class _Driver:
    """The CUDA driver of one simulated rank: kernels run the emulator, graphs record nodes and
    replay them, captures follow CUDA's rules (a cuGraphLaunch into a capture invalidates it)."""

    def __init__(self, hub, rt):
        self.hub, self.rt = hub, rt
        self.launches = 0  # kernels run
        self.graph_launches = 0
        self._ids = (rt.rank + 1) << 32
        self.graphs: dict[int, _Graph] = {}
        self.execs: dict[int, tuple[int, dict[int, _Node]]] = {}  # exec -> (graph, its nodes' copies)
        self.captures: dict[int, dict] = {}  # capturing stream -> {graph, id, deps, status}

    def _new_id(self):
        self._ids += 16
        return self._ids

    def _u64(self, addr):
        return int(self.hub.read(addr, 8).view(np.uint64)[0])

    def _wait(self, addr, e, what):
        t0 = time.monotonic()
        while self._u64(addr) < e:  # another rank's thread posts it
            assert time.monotonic() - t0 < 30, f"rank {self.rt.rank}: {what} never reached epoch {e}"
            time.sleep(0.0005)

    # -- kernels --------------------------------------------------------------------------------

    @staticmethod
    def _snapshot(func, argv):
        """The argument bytes of a launch (what CUDA copies at launch or capture time)."""
        kind = _FUNCS[func][3]
        ptrs = (ctypes.c_void_p * len(_ARG_BYTES[kind])).from_address(argv)
        return tuple(ctypes.string_at(ptrs[i], n) for i, n in enumerate(_ARG_BYTES[kind]))

    def _record(self, stream, node):
        cap = self.captures[stream]
        if cap["status"] != 1:
            return
        g = self.graphs[cap["graph"]]
        nid = self._new_id()
        g.nodes[nid] = node
        cap["deps"] = [nid]

    def cuLaunchKernel(self, func, gx, gy, gz, bx, by, bz, shm, stream, argv, extra):
        assert (gy, gz, by, bz) == (1, 1, 1, 1) and shm in (0, kernels.TILE_SHARED_BYTES) and bx == kernels.BLOCK
        node = _Node("kernel", func, gx, shm, self._snapshot(func, argv))
        if stream in self.captures:
            self._record(stream, node)
        else:
            self._run_node(node)
        return 0

    def _run_node(self, node):
        if not node.enabled:
            return
        if node.kind == "kernel":
            self._run_kernel(node.func, node.grid, node.args)
        elif node.kind == "op":
            node.fn()
        else:
            for child in node.children.values():
                self._run_node(child)

    def _run_kernel(self, func, gx, args):
        run, nout, vec, kind = _FUNCS[func]
        bases = np.frombuffer(args[0], np.int64)  # the Bases argument, by value
        in_base = [int(b) & kernels.ALL_ONES for b in bases[:kernels.MAXF]]
        delta = [int(d) for d in bases[kernels.MAXF:]]
        table = int(np.frombuffer(args[1], np.uint64)[0])
        nsegs = int(np.frombuffer(args[2], np.int32)[0])
        tab = np.frombuffer(self.hub.read(table, max(nsegs, 1) * kernels.SEG_DTYPE.itemsize).tobytes(),
                            dtype=kernels.SEG_DTYPE)[:nsegs]
        hub = self.hub
        if kind != "plain":  # the epoch protocol, as copy.cu runs it (waits spin on other ranks' threads)
            ctl, proto_ptr = (int(np.frombuffer(args[i], np.uint64)[0]) for i in (3, 4))
            P, ncredit, narrive, nwait, wait, bump = (int(np.frombuffer(args[i], np.int32)[0]) for i in range(5, 11))
            proto = hub.read(proto_ptr, 8 * max(ncredit + narrive + nwait, 1)).view(np.uint64)
            e = self._u64(ctl) + 1
            for i in range(ncredit if kind == "epoch" else 0):
                hub.write(int(proto[i]), np.array([e], np.uint64).view(np.uint8))
            for seg in tab:
                peer = int(seg["peer"])
                if peer == kernels.NO_PEER:
                    continue
                if kind == "epoch_unpack":
                    self._wait(ctl + 8 * (kernels.CTL_PEERS + 2 * P + peer), e, f"put signal of {peer}")
                elif wait or int(seg["dst_mask"]) == 0:
                    self._wait(ctl + 8 * (kernels.CTL_PEERS + peer), e, f"credit of {peer}")

        def load(addr, v):
            buf, off = hub.locate(int(addr.min()), int(addr.max() - addr.min()) + v)
            rel = (addr - addr.min()).astype(np.int64) + off
            return buf[rel[:, None] + np.arange(v)[None, :]]

        def store(addr, data):
            v = data.shape[1]
            buf, off = hub.locate(int(addr.min()), int(addr.max() - addr.min()) + v)
            rel = (addr - addr.min()).astype(np.int64) + off
            buf[rel[:, None] + np.arange(v)[None, :]] = data

        if nsegs:
            kernels.emulate(tab, vec=vec, run_bytes=run, nout=nout, grid=gx, in_base=in_base, out_delta=delta, load=load,
                            store=store)
        if kind != "plain":
            if kind == "epoch":
                for j in range(narrive):
                    hub.write(int(proto[ncredit + j]), np.array([e], np.uint64).view(np.uint8))
                for i in range(nwait):
                    src = int(proto[ncredit + narrive + i])
                    self._wait(ctl + 8 * (kernels.CTL_PEERS + P + src), e, f"arrival of {src}")
            if bump:
                hub.write(ctl, np.array([e], np.uint64).view(np.uint8))
        self.launches += 1

    def op(self, stream, fn):
        """An NVSHMEM (or the test's own) stream operation: recorded while capturing, else run."""
        if stream in self.captures:
            self._record(stream, _Node("op", fn=fn))
        else:
            fn()

    # -- streams and captures -------------------------------------------------------------------

    def cuStreamSynchronize(self, s):
        assert s not in self.captures, "cuStreamSynchronize on a capturing stream"
        return 0

    def capture_status(self, stream):
        cap = self.captures.get(stream)
        return 0 if cap is None else cap["status"]

    def begin_capture(self, stream, mode="thread_local"):
        assert stream not in self.captures
        gid = self._new_id()
        self.graphs[gid] = _Graph()
        self.captures[stream] = {"graph": gid, "id": self._new_id(), "deps": [], "status": 1}

    def end_capture(self, stream, *, discard=False):
        cap = self.captures.pop(stream)
        if discard or cap["status"] != 1:
            self.destroy_graph(cap["graph"])
            if not discard:
                raise CudaError("cuStreamEndCapture failed: CUDA_ERROR_STREAM_CAPTURE_INVALIDATED")
            return 0
        return cap["graph"]

    def capture_info(self, stream):
        cap = self.captures[stream]
        return cap["status"], cap["id"], cap["graph"], list(cap["deps"])

    def add_child(self, graph, deps, child):
        nid = self._new_id()
        self.graphs[graph].nodes[nid] = _Node(
            "graph", children={self._new_id(): n.clone() for n in self.graphs[child].nodes.values()})
        return nid

    def child_kernels(self, child_node, funcs):
        for g in self.graphs.values():
            if child_node in g.nodes:
                return {int(np.frombuffer(n.args[1], np.uint64)[0]): i
                        for i, n in g.nodes[child_node].children.items() if n.kind == "kernel" and n.func in funcs}
        raise AssertionError(hex(child_node))

    def kernel_table(self, node, funcs):
        for g in self.graphs.values():
            for n in (g.nodes.get(node), *(c.children.get(node) for c in g.nodes.values() if c.kind == "graph")):
                if n is not None:
                    return int(np.frombuffer(n.args[1], np.uint64)[0]) if n.kind == "kernel" and n.func in funcs else None
        raise AssertionError(hex(node))

    def set_capture_dependencies(self, stream, nodes):
        self.captures[stream]["deps"] = list(nodes)

    def _release(self, gid):
        g = self.graphs[gid]
        if not g.alive and g.execs == 0:
            del self.graphs[gid]

    # -- graphs -----------------------------------------------------------------------------------

    def instantiate(self, graph):
        eid = self._new_id()
        self.execs[eid] = (graph, {nid: n.clone() for nid, n in self.graphs[graph].nodes.items()})
        self.graphs[graph].execs += 1
        return eid

    def upload(self, graph_exec, stream):
        pass

    def destroy_exec(self, graph_exec):
        graph, _ = self.execs.pop(graph_exec)
        self.graphs[graph].execs -= 1
        self._release(graph)

    def destroy_graph(self, graph):
        self.graphs[graph].alive = False
        self._release(graph)

    def graph_nodes(self, graph):
        return list(self.graphs[graph].nodes)

    def node_type(self, node):
        for g in self.graphs.values():
            if node in g.nodes:
                return g.nodes[node].kind
        raise AssertionError(hex(node))

    def set_node_enabled(self, graph_exec, node, enabled):
        self.execs[graph_exec][1][node].enabled = bool(enabled)

    def cuGraphLaunch(self, exec_, stream):
        if stream in self.captures:  # as CUDA: not capturable, and the capture is invalidated
            self.captures[stream]["status"] = 2
            return 900
        for node in self.execs[exec_][1].values():
            self._run_node(node)
        self.graph_launches += 1
        return 0

    def _params(self, pref):
        p = pref.contents
        return p.func, self._snapshot(p.func, p.kernelParams)

    refuse_nested_updates = False  # as a driver that takes no kernel node inside a child graph

    def cuGraphExecKernelNodeSetParams(self, exec_, node, pref):
        nodes = self.execs[exec_][1]
        n = nodes.get(node)
        if n is None and not self.refuse_nested_updates:
            n = next((c.children[node] for c in nodes.values() if c.kind == "graph" and node in c.children), None)
        if n is None or n.kind != "kernel":
            return 1  # CUDA_ERROR_INVALID_VALUE
        n.func, n.args = self._params(pref)
        return 0

    def cuGraphKernelNodeSetParams(self, node, pref):
        for g in self.graphs.values():
            if node in g.nodes:
                g.nodes[node].func, g.nodes[node].args = self._params(pref)
                return 0
        return 400  # CUDA_ERROR_INVALID_HANDLE

    def cuGraphExecChildGraphNodeSetParams(self, exec_, node, child):
        n = self.execs[exec_][1].get(node)
        if n is None or n.kind != "graph":
            return 1  # CUDA_ERROR_INVALID_VALUE
        new = [c.clone() for c in self.graphs[child].nodes.values()]
        if [c.kind for c in new] != [c.kind for c in n.children.values()]:
            return 1  # the topology must match
        n.children = dict(zip(n.children, new))
        return 0

    def call(self, name, *args):
        if name == "cuMemcpyDtoDAsync":  # the landing route's copy: a stream operation
            dst, src, n, stream = args
            self.op(stream, lambda: self.hub.write(dst, self.hub.read(src, n)))
        elif name == "cuMemcpyHtoDAsync":
            dst, src, n, _ = args
            self.hub.write(dst, np.frombuffer(ctypes.string_at(src, n), np.uint8))
        elif name == "cuMemcpyDtoHAsync":
            dst, src, n, _ = args
            data = self.hub.read(src, n)
            ctypes.memmove(dst, data.ctypes.data, n)
        elif name == "cuStreamSynchronize":
            self.cuStreamSynchronize(*args)
        else:
            raise AssertionError(name)


class _NB:
    def __init__(self, hub, rt):
        self.hub, self.rt = hub, rt

    def sync_all_on_stream(self, s):
        self.rt.driver.op(s, lambda: self.hub.barrier.wait())

    barrier_all_on_stream = sync_all_on_stream

    def quiet_on_stream(self, s):
        pass

    def _remote(self, addr, pe):
        return addr - self.rt.heap + ((pe + 1) << 40)  # the symmetric address on PE pe

    def putmem_nbi_on_stream(self, dst, src, n, pe, s):
        self.rt.driver.op(s, lambda: self.hub.write(self._remote(dst, pe), self.hub.read(src, n)))

    def signal_op_on_stream(self, sig, value, op, pe, s):
        assert op == 10, op  # NVSHMEM_SIGNAL_ADD

        def add():
            addr = self._remote(sig, pe)
            old = int(self.hub.read(addr, 8).view(np.uint64)[0])
            self.hub.write(addr, np.array([old + value], np.uint64).view(np.uint8))

        self.rt.driver.op(s, add)

    def putmem_signal_nbi_on_stream(self, dst, src, n, sig, value, op, pe, s):
        self.putmem_nbi_on_stream(dst, src, n, pe, s)  # the data lands before its signal
        self.signal_op_on_stream(sig, value, op, pe, s)


class _MemoryApi:
    """user_memory.DriverMemory of one simulated rank: buffer ids, allocation ranges, CUDA IPC
    (a handle names the region; opening it maps the same bytes at a new address of this rank)."""

    def __init__(self, hub, rank):
        self.hub, self.rank = hub, rank
        self.next = (rank + 1) << 36
        self.private: set[int] = set()  # regions CUDA IPC cannot export (cudaMallocAsync, VMM)
        self.mapped: dict[int, int] = {}  # mapping -> the region it maps
        self.unmappable: set[int] = set()  # regions this rank fails to open
        self.devices: dict[int, int] = {}  # regions on another device than 0: their device
        self.calls = {"export": 0, "open": 0, "close": 0, "buffer_id": 0}

    def buffer_id(self, ptr):
        self.calls["buffer_id"] += 1
        reg = self.hub.region(ptr)
        return 0 if reg is None else reg[2]

    def device_of(self, ptr):
        reg = self.hub.region(ptr)
        return -1 if reg is None else self.devices.get(reg[0], 0)

    def allocation(self, ptr):
        reg = self.hub.region(ptr)
        if reg is None:
            return 0, 0, False, "not device memory"
        ok = reg[0] not in self.private
        return reg[0], reg[1], ok, "" if ok else "the allocation is not CUDA-IPC capable (simulated)"

    def export(self, base):
        self.calls["export"] += 1
        return base.to_bytes(8, "little") + self.hub.ids[base].to_bytes(8, "little") + bytes(48)

    def open(self, handle):
        self.calls["open"] += 1
        base, bid = int.from_bytes(handle[:8], "little"), int.from_bytes(handle[8:16], "little")
        if base in self.unmappable or self.hub.ids.get(base) != bid:
            raise CudaError("cuIpcOpenMemHandle failed: CUDA_ERROR_INVALID_HANDLE (simulated)")
        size = self.hub.region(base)[1]
        ptr, self.next = self.next, self.next + -(-size // 4096) * 4096
        self.hub.add(ptr, size, alias=base)
        self.mapped[ptr] = base
        return ptr

    def close(self, ptr):
        self.calls["close"] += 1
        del self.mapped[ptr]
        self.hub.remove(ptr)


class _Runtime:
    """The parts of engine.cuda.runtime.Runtime that lower() and CudaPath use."""

    def __init__(self, hub, rank, reach_row=None):
        self.hub, self.rank, self.nranks = hub, rank, hub.p
        self.comm = _Comm(hub, rank)
        self.device_id, self.sm_count, self.arch, self.stream, self.stopped = 0, 4, "90", 7, False
        self.shared_gpu = False
        self.driver, self.nb = _Driver(hub, self), _NB(hub, self)
        self.memory_api = _MemoryApi(hub, rank)
        self.heap = (rank + 1) << 40
        self._next, self._dnext = 0, (rank + 1) << 44
        self.reach_row = reach_row
        self.sym: dict[int, list] = {}
        self.anchor = self.sym_alloc(512, owner="runtime")

    def check_alive(self):
        pass

    def retire(self, key, sym, dev, pending=None):
        self.retired = getattr(self, "retired", []) + [(key, sym, dev, pending)]

    def reap(self):
        pass

    def sym_alloc(self, n, *, owner="engine"):
        assert not self.driver.captures, "allocation, copy or synchronisation while a stream captures"
        n = max(int(n), 1)
        ptr = self.heap + self._next
        self._next += -(-n // 512) * 512
        self.hub.add(ptr, n)
        self.sym[ptr] = [n, owner]
        return ptr

    def sym_free(self, ptr):
        del self.sym[ptr]
        self.hub.remove(ptr)

    def sym_lookup(self, ptr):
        for b, (n, o) in self.sym.items():
            if b <= ptr < b + n:
                return b, n, o
        return None

    def sym_set_owner(self, ptr, owner):
        self.sym[ptr][1] = owner

    def is_symmetric(self, ptr):
        return self.sym_lookup(ptr) is not None

    def heap_offset(self, ptr):
        return ptr - self.anchor

    def peer_ptr(self, ptr, pe):
        if self.reach_row is not None and not self.reach_row[pe]:
            return 0
        return ptr - self.heap + ((pe + 1) << 40)

    def dev_alloc(self, n):
        assert not self.driver.captures, "allocation, copy or synchronisation while a stream captures"
        ptr = self._dnext
        self._dnext += -(-max(int(n), 1) // 4096) * 4096
        self.hub.add(ptr, max(int(n), 1))
        return ptr

    def dev_free(self, ptr):
        self.hub.remove(ptr)

    def htod(self, dst, arr):
        assert not self.driver.captures, "allocation, copy or synchronisation while a stream captures"
        self.hub.write(dst, np.ascontiguousarray(arr).reshape(-1).view(np.uint8))

    def synchronize(self):
        assert not self.driver.captures, "allocation, copy or synchronisation while a stream captures"
        pass

    def functions(self, run, nout, kind="plain"):
        out = {}
        for v in kernels.family_widths(run):
            code = 0x1000 + len(_FUNCS)
            _FUNCS[code] = (run, nout, v, kind)
            out[v] = code
        return out


def _run_threads(p, fn):
    hub = _Hub(p)
    errors = [None] * p

    def target(r):
        try:
            fn(hub, r)
        except BaseException as e:  # noqa: BLE001
            errors[r] = e
            hub.barrier.abort()

    ts = [threading.Thread(target=target, args=(r,)) for r in range(p)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    for e in errors:
        if e is not None and not isinstance(e, threading.BrokenBarrierError):
            raise e
    assert not any(errors), errors


def _lower(rt, plan, backend="cuda", **kw):
    from redist.engine.backend import Context, LowerOptions, lower

    return lower(plan, Context(rt.comm, rt), LowerOptions(backend=backend, **kw))


def _device_buffer(ptr, shape, itemsize, order="C"):
    from redist.engine.buffer import Buffer

    return Buffer(ptr, tuple(shape), geo.dense_strides(shape, order), itemsize, "cuda", 0)


@pytest.mark.parametrize("transport", ["auto", "push", "put", "mixed"])
def test_executable_on_a_simulated_job(transport):
    p, gshape, itemsize = 3, (9, 10, 6), 8
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    reach = np.ones((p, p), bool)
    if transport == "mixed":
        reach[0, 2] = reach[2, 0] = False
    G1, G2 = global_bytes(gshape, itemsize, 5), global_bytes(gshape, itemsize, 9)

    def rank(hub, r):
        rt = _Runtime(hub, r, reach[r])
        plan = make_plan(r, ib, ob, itemsize=itemsize)
        exe = _lower(rt, plan, transport="auto" if transport == "mixed" else transport)
        exe.graphs = False  # no CUDA graphs in the simulation
        if transport == "mixed":
            assert (r == 1) == (exe.launch_list.put_to == ())
        ops = []
        for k, G in enumerate((G1, G2)):
            a = operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r])), itemsize)
            ptr = rt.dev_alloc(len(a) + 16) + (4 if k else 0)  # the second operand is only 4-byte aligned
            rt.hub.write(ptr, a)
            ops.append(ptr)
        want = [expected_bytes(G, ob[r], "C") for G in (G1, G2)]
        out = rt.sym_alloc(exe.result_bytes, owner="user")  # an out= buffer, symmetric
        out_buf = _device_buffer(out, plan.out_shape, itemsize)
        assert exe.out_problem(out_buf) is None and exe.out_signature(out_buf) == out - rt.anchor
        for it in range(6):
            k = it % 2
            exe.rebind_input(ops[k])
            exe.bind_output(out_buf if it in (2, 3) else None)
            if it == 4:
                exe.release_workspace()
            exe.execute(0, sync=bool(it % 3))
            rt.comm.allgather(None)  # every rank done writing
            got = rt.hub.read(exe.output_ptr, len(want[k]))
            assert np.array_equal(got, want[k]), (r, it)
            rt.comm.allgather(None)  # every rank done reading
        assert exe._kernels["copy"].launch.vec == 4 or k == 0
        # a problem on rank 1 only: every rank raises the same error, nobody launches
        launches = rt.driver.launches
        with pytest.raises(InvalidValueError, match="rank 1: planted"):
            exe.execute(0, problem=("InvalidValueError", "planted") if r == 1 else None)
        # ranks that disagree on sync_symmetric_memory: refused everywhere
        with pytest.raises(InvalidValueError, match="different arguments"):
            exe.execute(0, sync=r != 0)
        assert rt.driver.launches == launches
        exe.free()
        assert set(rt.sym) == {rt.anchor, out}

    _run_threads(p, rank)


@pytest.mark.parametrize("memory", ["cuda", "cpu"])
def test_backends_on_a_simulated_job(memory):
    """The "cuda" executable (device operand) and the "cuda-mirror" one (host operand)."""
    from redist._operands import RawArray, wrap

    p, gshape = 2, (6, 8, 4)
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 2)
    G = global_bytes(gshape, 4, 3)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        a = operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r])), 4)
        if memory == "cuda":
            ptr = rt.dev_alloc(len(a))
            rt.hub.write(ptr, a)
            obj = RawArray(ptr, geo.box_shape(ib[r]), None, 4, memory="cuda", device_id=0, dtype=np.float32)
        else:
            obj = a.view(np.float32).reshape(geo.box_shape(ib[r]))
        plan = make_plan(r, ib, ob, itemsize=4)
        exe = _lower(rt, plan, "cuda" if memory == "cuda" else "cuda-mirror")
        (exe if memory == "cuda" else exe._inner).graphs = False
        exe.bind_input(wrap(obj).buffer)
        exe.execute(0)
        rt.comm.allgather(None)
        want = expected_bytes(G, ob[r], "C")
        res = exe.result
        assert res.shape == plan.out_shape and res.memory == memory
        if memory == "cuda":
            got = rt.hub.read(res.ptr, len(want))
            assert exe.out_signature(None) == res.ptr - rt.anchor
            assert exe.out_problem(res) is None
            assert exe.out_problem(_device_buffer(rt.dev_alloc(len(want)), plan.out_shape, 4)) is None  # any memory
            assert "not device memory" in exe.out_problem(_device_buffer(1 << 20, plan.out_shape, 4))  # a host one
        else:
            got = np.frombuffer(res.owner, np.uint8)[: len(want)]
            assert exe.out_signature(None) is None and "host memory" in exe.out_problem(
                _device_buffer(0, plan.out_shape, 4))
        assert np.array_equal(got, want)
        exe.release_input()
        with pytest.raises(InvalidStateError, match="released"):
            exe.execute(0)
        exe.free()

    _run_threads(p, rank)


def test_cuda_lowering_without_runtime_raises_not_initialized():
    from redist.engine.backend import Context, LowerOptions, lower
    from redist.engine.errors import NotInitializedError

    plan = make_plan(0, slab_boxes((4, 4), 1, 0), slab_boxes((4, 4), 1, 1), itemsize=4)
    with pytest.raises(NotInitializedError, match="NVSHMEM is not initialised"):
        lower(plan, Context(_Comm(_Hub(1), 0)), LowerOptions(backend="cuda"))


def test_heap_limit_is_checked_before_nvshmem_malloc(monkeypatch):
    """NVSHMEM 3.4 dies on a failed heap growth, so sym_alloc refuses oversize requests up front."""
    from redist.engine.cuda.runtime import Runtime, _env_size

    fake = types.SimpleNamespace(_sym_bytes=1 << 20, device_id=0)
    monkeypatch.setenv("NVSHMEM_MAX_MEMORY_PER_GPU", "2g")
    msg = Runtime._heap_problem(fake, 8 << 30)
    assert "NVSHMEM_MAX_MEMORY_PER_GPU" in msg and "NVSHMEM_SYMMETRIC_SIZE" in msg and "2147483648" in msg
    monkeypatch.setenv("NVSHMEM_DISABLE_CUDA_VMM", "1")
    monkeypatch.setenv("NVSHMEM_SYMMETRIC_SIZE", "256M")
    msg = Runtime._heap_problem(fake, 512 << 20)
    assert "fixed size" in msg and str(256 << 20) in msg
    assert Runtime._heap_problem(fake, 1 << 20) is None
    monkeypatch.setenv("X_SIZE", "3.1M")
    assert _env_size("X_SIZE", 0) == 3250586


def test_dropped_executable_retires_every_layout_variant_under_one_serial():
    """An executable with out= layout variants, garbage-collected without free(): the base retires
    its variants' memory with its own, in one list whatever order the finalizers run in (a rank
    whose list differed would free different symmetric memory than its peers)."""
    import threading
    import types

    from redist.engine.cuda.executable import CudaExecutable
    from redist.engine.cuda.runtime import Runtime

    class FakeRuntime:
        stopped = False
        retire = Runtime.retire

        def __init__(self):
            self._retired, self._retired_lock = {}, threading.Lock()

    def executable(rt, send, recv, ctl, result, shares):
        e = object.__new__(CudaExecutable)
        e.__dict__.update(_freed=False, rt=rt, _bound=True, _check=types.SimpleNamespace(free=lambda: None),
                          _exec=None, _kernels={}, _protos=[], _send=send, _recv=recv, _ctl=ctl, result_ptr=result,
                          _detached=False, _shares_result=shares, serial=7, _variants={}, _copies=[], _held=[True])
        return e

    lists = []
    for variant_first in (True, False):
        rt = FakeRuntime()
        base = executable(rt, 0x100, 0x200, 0x300, 0x400, False)
        variant = executable(rt, 0x500, 0x600, 0x700, 0x400, True)
        base._variants = {((4, 1),): variant}
        for e in (variant, base) if variant_first else (base, variant):
            e.__del__()
        lists.append(rt._retired)
    assert lists[0] == lists[1] == {(7, 0): ([0x500, 0x600, 0x700, 0x100, 0x200, 0x300, 0x400], [], None)}


# --------------------------------------------------------------------------------------------
# fused fields: several arrays of the same boxes in one launch list
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["push", "put", "mixed"])
@pytest.mark.parametrize("seed", range(4))
def test_fused_fields_emulated(transport, seed):
    """Three fields (element sizes 8, 4, 16; one of them strided) in one launch list: every field
    right on every rank, one put per peer, the kernel picking each segment's field bases."""
    from redist.engine.plan import fuse

    rng = np.random.default_rng(seed)
    p = int(rng.integers(1, 5))
    gshape = tuple(int(x) for x in rng.integers(2, 9, 3))
    ib, ob = random_boxes(gshape, p, rng), random_boxes(gshape, p, rng)
    itemsizes = (8, 4, 16)
    padded = [tuple(int(s) for s in geo.dense_strides(tuple(n + 1 for n in geo.box_shape(b)), "C")) for b in ib]
    strides = [None, padded, None]  # field 1: operands padded by one element per axis
    Gs = [global_bytes(gshape, isz, seed + f) for f, isz in enumerate(itemsizes)]
    plans = [fuse([make_plan(r, ib, ob, itemsize=isz, in_strides=st) for isz, st in zip(itemsizes, strides)])
             for r in range(p)]
    inputs = [[operand_bytes(G, ib[r], (st or [geo.dense_strides(geo.box_shape(ib[r]), "C")] * p)[r], isz)
               for G, isz, st in zip(Gs, itemsizes, strides)] for r in range(p)]
    reach = None
    if transport == "mixed":
        reach = rng.random((p, p)) < 0.5
        np.fill_diagonal(reach, True)
    outs, lls = emulate_job(plans, inputs, reach=reach, transport="auto" if transport == "mixed" else transport)
    for r in range(p):
        for f, (G, off) in enumerate(zip(Gs, lls[r].field_offsets)):
            want = expected_bytes(G, ob[r], "C")
            assert np.array_equal(outs[r][off: off + len(want)], want), f"rank {r} field {f} ({transport})"
        puts = [st for st in lls[r].steps if st.op == "put"]
        assert len(puts) == len({st.pe for st in puts}), "one put per peer, every field in it"
        segs = [s for k in lls[r].kernels for s in k.segments]
        assert {s.field for s in segs} <= {0, 1, 2}


def test_fused_fields_limit():
    from redist.engine.errors import NotSupportedError
    from redist.engine.plan import fuse

    boxes = [((0,), (4,))]
    plan = fuse([make_plan(0, boxes, boxes, itemsize=4)] * (kernels.MAXF + 1))
    with pytest.raises(NotSupportedError, match=f"at most {kernels.MAXF} fields"):
        build_launch_list(plan)


@pytest.mark.parametrize("transport", ["push", "put"])
def test_fused_executable_on_a_simulated_job(transport, monkeypatch):
    """Three fields through one CudaExecutable: per-field rebinds (all at once and one alone),
    out= on one field, a strided out= layout on another, a problem on one rank."""
    from redist.engine.buffer import Buffer
    from redist.engine.plan import fuse

    monkeypatch.setenv("REDIST_CUDA_GRAPHS", "0")  # the out= layout variant too: no CUDA graphs in the simulation
    p, gshape, sizes = 3, (7, 6, 5), (8, 4, 16)
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    Gs = [[global_bytes(gshape, isz, 10 * k + f) for f, isz in enumerate(sizes)] for k in range(2)]

    def rank(hub, r):
        rt = _Runtime(hub, r)
        plan = fuse([make_plan(r, ib, ob, itemsize=isz) for isz in sizes])
        exe = _lower(rt, plan, transport=transport)
        exe.graphs = False
        assert exe.nfields == 3 and len(exe.results) == 3
        ops = [[], []]
        for k in range(2):
            for f, isz in enumerate(sizes):
                a = operand_bytes(Gs[k][f], ib[r], geo.dense_strides(geo.box_shape(ib[r])), isz)
                ptr = rt.dev_alloc(len(a) + 16) + (4 if (k, f) == (1, 2) else 0)  # one 4-byte aligned operand
                rt.hub.write(ptr, a)
                ops[k].append(ptr)
        shape = geo.box_shape(ob[r])
        out = rt.sym_alloc(exe.result_bytes, owner="user")
        out_buf = _device_buffer(out + 256, shape, sizes[1])  # field 1's out=
        ghost = tuple(n + 2 for n in shape)
        gstrides = geo.dense_strides(ghost, "C")
        goff = sum(gstrides) * sizes[2]
        grid = rt.sym_alloc(math.prod(ghost) * sizes[2] + 64, owner="user")
        strided = Buffer(grid + goff, shape, gstrides, sizes[2], "cuda", 0)  # field 2: a ghosted interior
        assert exe.out_problem(out_buf, 1) is None and exe.out_problem(strided, 2) is None
        for it in range(5):
            k = it % 2
            if it == 3:
                exe.rebind_input(ops[1][1], field=1)  # one field alone: the others keep iteration 2's
            else:
                exe.rebind_inputs(ops[k], [None] * 3)
            exe.bind_output(out_buf if it >= 1 else None, 1)
            exe.bind_output(strided if it >= 2 else None, 2)
            exe.execute(0)
            rt.comm.allgather(None)
            for f, isz in enumerate(sizes):
                src = int(f == 1) if it == 3 else k
                want = expected_bytes(Gs[src][f], ob[r], "C")
                if f == 1 and it >= 1:
                    got = rt.hub.read(out + 256, len(want))
                elif f == 2 and it >= 2:
                    whole = rt.hub.read(grid, math.prod(ghost) * isz).reshape(ghost + (isz,))
                    got = np.ascontiguousarray(whole[1:-1, 1:-1, 1:-1]).reshape(-1)
                else:
                    got = rt.hub.read(exe.results[f].ptr, len(want))
                assert np.array_equal(got, want), (r, it, f)
            rt.comm.allgather(None)
        with pytest.raises(InvalidValueError, match="rank 2: planted"):
            exe.execute(0, problem=("InvalidValueError", "planted") if r == 2 else None)
        exe.free()

    _run_threads(p, rank)


@pytest.mark.parametrize("transport", ["push", "put"])
@pytest.mark.parametrize("itemsize", [4, 8])
def test_emulate_tiled_transposes_in_groups(transport, itemsize):
    """4- and 8-byte elements transposed with 16-byte accesses (quads and pairs along each
    contiguous side) where every group start is 16-byte aligned, partial groups at the edges
    included (word by word); element accesses where an operand is misaligned."""
    g16 = 16 // itemsize

    def c_order(boxes):
        return [geo.dense_strides(geo.box_shape(b), "C") for b in boxes]

    def padded(boxes):  # operands padded to whole groups per row: ragged extents, 16-byte aligned strides
        return [geo.dense_strides(tuple(-(-n // g16) * g16 for n in geo.box_shape(b)), "C") for b in boxes]

    ragged = []
    for g, p, strides in (((2, 132, 68), 1, c_order), ((3, 72, 100), 3, c_order), ((4, 72, 99), 2, padded),
                          ((4, 72, 130), 2, padded)):
        ib, ob = slab_boxes(g, p, 0), slab_boxes(g, p, 1)
        lls = run_case(ib, ob, itemsize, transport=transport, order=(0, 2, 1), strides=strides(ib), seed=len(g) + p)
        groups = [s for ll in lls for k in ll.kernels if k.vmax == 16
                  for s in k.segments if s.tile_a is not None and s.row_bytes == itemsize]
        assert groups, f"{g} at P={p}: no launch moves {itemsize}-byte tiles in 16-byte groups"
        ragged += [e for s in groups for e in (s.outer[s.tile_a], s.outer[-1]) if e % g16]
        run_case(ib, ob, itemsize, transport=transport, order=(0, 2, 1), strides=strides(ib),
                 in_offsets=[itemsize] * p, seed=3)
    assert ragged, "no partial group at an edge exercised"
    # rows whose 16-byte alignment fails somewhere: no launch may claim groups (the emulator checks
    # every group start, so a vector rule that allowed 16 here would fail this run)
    ib, ob = slab_boxes((2, 130, 66), 1, 0), slab_boxes((2, 130, 66), 1, 1)
    lls = run_case(ib, ob, itemsize, transport=transport, order=(0, 2, 1), seed=7)
    assert all(k.vmax < 16 for ll in lls for k in ll.kernels
               if any(s.tile_a is not None for s in k.segments)), "a misaligned transpose was given 16-byte groups"


@pytest.mark.parametrize("offset", [0, 4, 8])
def test_emulate_grouped_transposes_of_mixed_sizes(offset):
    """Fields of 4- and 8-byte elements transposed in one launch (family run_bytes 0, vector width
    16 allowed): operands 16-, 4- or 8-byte aligned. At 8, the 8-byte tiles could run element by
    element but the 4-byte ones have no 8-byte routine: the launch's width rule (KernelStep.width,
    shared by the executable and the emulator) must drop to 4."""
    from redist.engine.plan import fuse

    g, p, itemsizes = (3, 72, 100), 3, (4, 8)
    ib, ob = slab_boxes(g, p, 0), slab_boxes(g, p, 1)
    Gs = [global_bytes(g, isz, 5 + f) for f, isz in enumerate(itemsizes)]
    c_order = [geo.dense_strides(geo.box_shape(b), "C") for b in ib]
    plans = [fuse([make_plan(r, ib, ob, itemsize=isz, in_strides=c_order, out_order=(0, 2, 1)) for isz in itemsizes])
             for r in range(p)]
    inputs = [[operand_bytes(G, ib[r], c_order[r], isz)
               for G, isz in zip(Gs, itemsizes)] for r in range(p)]
    outs, lls = emulate_job(plans, inputs, transport="push", in_offsets=[offset] * p)
    tiled = [k for ll in lls for k in ll.kernels if any(s.tile_a is not None for s in k.segments)]
    assert tiled and all(k.run_bytes == 0 and k.vmax == 16 for k in tiled)
    assert {k.width(align_of(offset) if offset else 16) for k in tiled} == {16 if offset == 0 else 4}
    for r in range(p):
        for f, (G, off) in enumerate(zip(Gs, lls[r].field_offsets)):
            want = expected_bytes(G, ob[r], (0, 2, 1))
            assert np.array_equal(outs[r][off: off + len(want)], want), f"rank {r} field {f} (offset {offset})"


# --------------------------------------------------------------------------------------------
# the user's own capture: execute() on a capturing stream records the exchange into it
# --------------------------------------------------------------------------------------------

_USER = 99  # the user's stream in the simulation


def _operand(rt, G, box, itemsize):
    a = operand_bytes(G, box, geo.dense_strides(geo.box_shape(box)), itemsize)
    ptr = rt.dev_alloc(len(a) + 16)
    rt.hub.write(ptr, a)
    return ptr, len(a)


@pytest.mark.parametrize("p", [1, 3])
@pytest.mark.parametrize("transport,signal,nested", [("push", "epoch", True), ("put", "epoch", True),
                                                     ("mixed", "epoch", False), ("push", "barrier", False),
                                                     ("put", "barrier", True)])
def test_capture_into_the_users_graph_on_a_simulated_job(p, transport, signal, nested, monkeypatch):
    """The user captures producer -> execute -> consumer on their stream: nothing runs while
    capturing, the capture stays valid, and every replay (interleaved with direct executes) moves
    what the producer wrote; a rebind reaches the copy only through update_captured."""
    gshape, itemsize = (9, 10, 6), 8
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    reach = np.ones((p, p), bool)
    if transport == "mixed" and p > 1:
        reach[0, 2] = reach[2, 0] = False
    Gs = [global_bytes(gshape, itemsize, s) for s in (3, 5, 8)]

    from redist.engine.cuda import captured

    monkeypatch.setattr(captured, "_DIRECT_UPDATES", [True])

    def rank(hub, r):
        rt = _Runtime(hub, r, reach[r])
        drv = rt.driver
        drv.refuse_nested_updates = not nested  # update_captured then rewrites the whole child
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize), signal=signal,
                     transport="auto" if transport == "mixed" else transport)
        srcs = [_operand(rt, G, ib[r], itemsize) for G in Gs]
        live, nbytes = rt.dev_alloc(srcs[0][1] + 16), srcs[0][1]  # the operand the producer fills
        sink = rt.dev_alloc(exe.result_bytes + 16)
        want = [expected_bytes(G, ob[r], "C") for G in Gs]
        n = len(want[0])
        state = {"k": 0}

        def producer():
            rt.hub.write(live, rt.hub.read(srcs[state["k"]][0], nbytes))

        result = exe.output_ptr  # what the user's consumer kernel would have captured

        def consumer():
            rt.hub.write(sink, rt.hub.read(result, n))

        exe.rebind_input(live)
        exe.execute(0)  # a direct execute first (epoch 1)
        launches = drv.launches
        drv.begin_capture(_USER, "global")
        drv.op(_USER, producer)
        exe.execute(_USER)
        drv.op(_USER, consumer)
        assert drv.launches == launches, "nothing may run while the stream captures"
        assert drv.capture_status(_USER) == 1, "the user's capture must stay valid"
        graph = drv.end_capture(_USER)
        child = any(st.op != "kernel" for st in exe.launch_list.steps)  # NVSHMEM steps: one child-graph node
        middle = ["graph"] if child else ["kernel"] * len(exe.launch_list.kernels)
        assert [drv.node_type(nd) for nd in drv.graph_nodes(graph)] == ["op", *middle, "op"]
        gexec = drv.instantiate(graph)
        assert exe.captured_copies() == 1
        for it in range(6):
            state["k"] = it % 2
            if it % 3 == 2:  # a direct execute between replays (the same protocol state)
                producer()
                exe.execute(0)
                consumer()
            else:
                assert drv.cuGraphLaunch(gexec, _USER) == 0
            rt.comm.allgather(None)
            assert np.array_equal(rt.hub.read(sink, n), want[state["k"]]), (r, it)
            rt.comm.allgather(None)
        # a rebind: the copy keeps reading `live` until update_captured
        exe.rebind_input(srcs[2][0])
        state["k"] = 1
        drv.cuGraphLaunch(gexec, _USER)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(sink, n), want[1]), "the copy must keep its old operand"
        rt.comm.allgather(None)
        assert exe.update_captured(graph, gexec) == 1
        if child:  # (the flag is per process: here the rank threads share it)
            assert captured._DIRECT_UPDATES[0] == nested
        drv.cuGraphLaunch(gexec, _USER)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(sink, n), want[2]), "update_captured must rebind the copy"
        rt.comm.allgather(None)
        exe.execute(0)  # and the object's own graph reads the new operand too
        consumer()
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(sink, n), want[2])
        rt.comm.allgather(None)
        # free() while the user's graph holds a copy: memory retired, not freed, until release_captured
        held = set(rt.sym)
        exe.free()
        assert set(rt.sym) == held, "free() must not free memory a captured copy uses"
        (_, sym, _, pending), = rt.retired
        assert pending() and exe.result_ptr == 0 and set(sym) <= held
        drv.cuGraphLaunch(gexec, _USER)  # the copy still runs (its memory is retired, not freed)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(sink, n), want[2])
        rt.comm.allgather(None)
        drv.destroy_exec(gexec)
        drv.destroy_graph(graph)
        assert pending()
        exe.release_captured()
        assert not pending()

    _run_threads(p, rank)


@pytest.mark.parametrize("p", [1, 2])
def test_refused_inside_a_capture_leaves_it_valid(p):
    """What cannot be captured raises on every rank before anything is enqueued: the user ends the
    capture and replays what it holds, correctly. Ranks that disagree on capturing are refused."""
    gshape, itemsize = (6, 8, 4), 4
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 2)
    G = global_bytes(gshape, itemsize, 4)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        drv = rt.driver
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize), transport="put")
        ptr, _ = _operand(rt, G, ib[r], itemsize)
        exe.rebind_input(ptr)
        want = expected_bytes(G, ob[r], "C")
        shape = geo.box_shape(ob[r])
        ghost = tuple(n + 2 for n in shape)
        grid = rt.sym_alloc(math.prod(ghost) * itemsize + 64, owner="user")
        gstrides = geo.dense_strides(ghost, "C")
        from redist.engine.buffer import Buffer

        strided = Buffer(grid + sum(gstrides) * itemsize, shape, gstrides, itemsize, "cuda", 0)
        drv.begin_capture(_USER)
        exe.execute(_USER)  # recorded
        launches = drv.launches
        with pytest.raises(InvalidStateError, match="inside a CUDA graph capture: freeing the staging"):
            exe.execute(_USER, release_workspace=True)
        exe.bind_output(strided)
        with pytest.raises(InvalidStateError, match="strides no execute\\(\\) has used yet"):
            exe.execute(_USER)
        exe.bind_output(None)
        if p > 1:  # rank 0 captures, the others call a direct execute
            s = _USER if r == 0 else 0
            with pytest.raises(InvalidValueError, match="capturing"):
                exe.execute(s)
        assert drv.launches == launches and drv.capture_status(_USER) == 1
        graph = drv.end_capture(_USER)
        gexec = drv.instantiate(graph)
        drv.cuGraphLaunch(gexec, 0)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(exe.result.ptr, len(want)), want)
        rt.comm.allgather(None)
        # a strided out= used once outside the capture can then be captured
        exe.bind_output(strided)
        exe.execute(0)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        graph2 = drv.end_capture(_USER)
        exe.bind_output(None)
        exe.execute(0)
        gexec2 = drv.instantiate(graph2)
        with pytest.raises(InvalidStateError, match="other strides than the last"):
            exe.update_captured(graph2, gexec2)
        with pytest.raises(InvalidValueError, match="holds no copy of this exchange"):
            exe.update_captured(graph2 + 1, gexec)
        # release_workspace refused while a copy may still use the staging
        with pytest.raises(InvalidStateError, match="call release_captured\\(\\) first"):
            exe.execute(0, release_workspace=True)
        for e in (gexec, gexec2):
            drv.destroy_exec(e)
        drv.destroy_graph(graph)
        drv.destroy_graph(graph2)
        assert exe.captured_copies() == 2
        exe.release_captured()
        assert exe.captured_copies() == 0
        exe.execute(0, release_workspace=True)  # no copy left
        if exe.workspace_bytes:  # staging released (P > 1): re-making it cannot be captured
            drv.begin_capture(_USER)
            with pytest.raises(InvalidStateError, match="after release_workspace=True"):
                exe.execute(_USER)
            drv.end_capture(_USER)
        exe.execute(0)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(exe.result.ptr, len(want)), want)
        rt.comm.allgather(None)
        exe.free()

    _run_threads(p, rank)


def test_two_exchanges_in_one_captured_step():
    """x -> y -> x in one capture (two executables): both copies recorded in order, right on replay."""
    p, gshape, itemsize = 2, (5, 7, 3), 8
    bx, by = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    Gs = [global_bytes(gshape, itemsize, s) for s in (1, 2)]

    def rank(hub, r):
        rt = _Runtime(hub, r)
        drv = rt.driver
        fwd = _lower(rt, make_plan(r, bx, by, itemsize=itemsize))
        back = _lower(rt, make_plan(r, by, bx, itemsize=itemsize))
        srcs = [_operand(rt, G, bx[r], itemsize) for G in Gs]
        live, nbytes = rt.dev_alloc(srcs[0][1] + 16), srcs[0][1]
        fwd.rebind_input(live)
        back.rebind_input(fwd.result.ptr)
        state = {"k": 0}
        drv.begin_capture(_USER)
        drv.op(_USER, lambda: rt.hub.write(live, rt.hub.read(srcs[state["k"]][0], nbytes)))
        fwd.execute(_USER)
        back.execute(_USER)
        graph = drv.end_capture(_USER)
        assert [drv.node_type(nd) for nd in drv.graph_nodes(graph)] == ["op", "kernel", "kernel"]  # recorded flat
        gexec = drv.instantiate(graph)
        for it in range(4):
            state["k"] = it % 2
            drv.cuGraphLaunch(gexec, _USER)
            rt.comm.allgather(None)
            mid = expected_bytes(Gs[state["k"]], by[r], "C")
            end = expected_bytes(Gs[state["k"]], bx[r], "C")
            assert np.array_equal(rt.hub.read(fwd.result.ptr, len(mid)), mid)
            assert np.array_equal(rt.hub.read(back.result.ptr, len(end)), end)
            rt.comm.allgather(None)
        drv.destroy_exec(gexec)
        drv.destroy_graph(graph)
        fwd.free()
        back.free()

    _run_threads(p, rank)


def test_legacy_stream_while_a_blocking_stream_captures_is_refused():
    gshape = (4, 4)
    ib, ob = slab_boxes(gshape, 1, 0), slab_boxes(gshape, 1, 1)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        rt.driver.capture_status = lambda s: 3 if s == 0 else 0  # CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on stream 0
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=4))
        exe.rebind_input(_operand(rt, global_bytes(gshape, 4), ib[r], 4)[0])
        launches = rt.driver.launches
        with pytest.raises(InvalidValueError, match="legacy default stream"):
            exe.execute(0)
        assert rt.driver.launches == launches
        exe.free()

    _run_threads(1, rank)


def _ghosted(rt, shape, pad, itemsize):
    """A symmetric buffer of ``shape`` inside an allocation ``pad`` larger on every axis."""
    from redist.engine.buffer import Buffer

    ghost = tuple(n + pad for n in shape)
    base = rt.sym_alloc(math.prod(ghost) * itemsize + 64, owner="user")
    return Buffer(base, shape, geo.dense_strides(ghost, "C"), itemsize, "cuda", 0)


def _two_operand_job(hub, r, gshape, itemsize=8, nranks=1):
    """Rank ``r`` of a simulated Slab.X -> Slab.Y job with two operands (patterns 3 and 7)."""
    ib, ob = slab_boxes(gshape, nranks, 0), slab_boxes(gshape, nranks, 1)
    rt = _Runtime(hub, r)
    exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize))
    Gs = [global_bytes(gshape, itemsize, s) for s in (3, 7)]
    u, v = (_operand(rt, G, ib[r], itemsize)[0] for G in Gs)
    return rt, rt.driver, exe, u, v, [expected_bytes(G, ob[r], "C") for G in Gs]


def test_update_refuses_copies_recorded_with_different_bindings():
    """One object executed for u, then for v, in one captured step: one update cannot rebind both
    (it would give u's copy v); copies recorded with the same binding are updated together."""

    def rank(hub, r):
        rt, drv, exe, u, v, wants = _two_operand_job(hub, r, (6, 8, 4))
        drv.begin_capture(_USER)
        for op in (u, v):
            exe.rebind_input(op)
            exe.execute(_USER)
        g = drv.end_capture(_USER)
        ge = drv.instantiate(g)
        with pytest.raises(InvalidStateError, match="recorded with different operands"):
            exe.update_captured(g, ge)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        exe.execute(_USER)  # twice with v: one binding
        g2 = drv.end_capture(_USER)
        ge2 = drv.instantiate(g2)
        exe.rebind_input(u)
        assert exe.update_captured(g2, ge2) == 2
        drv.cuGraphLaunch(ge2, 0)
        assert np.array_equal(rt.hub.read(exe.result.ptr, len(wants[0])), wants[0])

    _run_threads(1, rank)


def test_update_after_a_refused_out_is_refused():
    """P = 1: execute(out=X) of new strides refused inside a capture leaves X bound but never used;
    update_captured must not push it into the copy (which would write X with the planned strides)."""
    gshape, itemsize = (6, 8, 4), 8
    ib, ob = slab_boxes(gshape, 1, 0), slab_boxes(gshape, 1, 1)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        drv = rt.driver
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize))
        exe.rebind_input(_operand(rt, global_bytes(gshape, itemsize), ib[r], itemsize)[0])
        x = _ghosted(rt, geo.box_shape(ob[r]), 2, itemsize)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        exe.bind_output(x)  # what Redistribute.execute(out=x) does before the call is agreed
        with pytest.raises(InvalidStateError, match="strides no execute"):
            exe.execute(_USER)
        g = drv.end_capture(_USER)
        with pytest.raises(InvalidStateError, match="not used by a successful execute"):
            exe.update_captured(g, drv.instantiate(g))

    _run_threads(1, rank)


def test_a_bad_stream_on_one_rank_is_raised_on_every_rank():
    gshape = (6, 8, 4)
    ib, ob = slab_boxes(gshape, 2, 0), slab_boxes(gshape, 2, 1)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        if r == 0:
            def bad(stream):
                raise CudaError("cuStreamIsCapturing failed with CUresult 400 (CUDA_ERROR_INVALID_HANDLE)")
            rt.driver.capture_status = bad
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=4))
        exe.rebind_input(_operand(rt, global_bytes(gshape, 4), ib[r], 4)[0])
        with pytest.raises(CudaError, match="rank 0: cuStreamIsCapturing failed"):
            exe.execute(5)

    _run_threads(2, rank)


def test_a_second_capture_into_one_graph_keeps_the_first_copies():
    """cuStreamBeginCaptureToGraph twice into one graph: update_captured rebinds both copies."""

    def rank(hub, r):
        rt, drv, exe, u, v, wants = _two_operand_job(hub, r, (6, 8, 4))
        exe.rebind_input(u)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        g = drv.captures.pop(_USER)["graph"]  # the capture ends, the graph is kept...
        drv.captures[_USER] = {"graph": g, "id": drv._new_id(), "deps": [], "status": 1}  # ...and captured into again
        exe.execute(_USER)
        drv.captures.pop(_USER)
        ge = drv.instantiate(g)
        exe.rebind_input(v)
        assert exe.update_captured(g, ge) == 2
        drv.cuGraphLaunch(ge, 0)
        assert np.array_equal(rt.hub.read(exe.result.ptr, len(wants[1])), wants[1])

    _run_threads(1, rank)


def test_capture_after_release_workspace_with_layout_variants():
    """release_workspace frees every variant's staging; one execute() outside the capture re-makes
    the running variant's, and that is all a capture of it needs."""
    p, gshape, itemsize = 2, (6, 8, 4), 4
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 2)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        drv = rt.driver
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize), transport="put")
        assert exe.workspace_bytes
        exe.rebind_input(_operand(rt, global_bytes(gshape, itemsize), ib[r], itemsize)[0])
        exe.bind_output(_ghosted(rt, geo.box_shape(ob[r]), 2, itemsize))
        exe.execute(0)  # a variant
        exe.bind_output(None)
        exe.execute(0, release_workspace=True)
        exe.execute(0)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        drv.end_capture(_USER)
        exe.release_captured()
        exe.free()

    _run_threads(p, rank)


def test_evicted_variant_with_copies_on_one_rank_is_released_everywhere():
    """A layout variant evicted while rank 1 still holds a copy of it: retired on both ranks, pending
    only where a copy was recorded and not released."""
    from redist.engine.cuda.layouts import LAYOUTS

    p, gshape, itemsize = 2, (6, 8, 4), 4
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    pending = {}

    def rank(hub, r):
        rt = _Runtime(hub, r)
        drv = rt.driver
        exe = _lower(rt, make_plan(r, ib, ob, itemsize=itemsize))
        exe.rebind_input(_operand(rt, global_bytes(gshape, itemsize), ib[r], itemsize)[0])
        bufs = [_ghosted(rt, geo.box_shape(ob[r]), k + 1, itemsize) for k in range(LAYOUTS + 2)]
        exe.bind_output(bufs[0])
        exe.execute(0)
        drv.begin_capture(_USER)
        exe.execute(_USER)  # a copy of the first variant
        g = drv.end_capture(_USER)
        if r == 0:
            drv.destroy_graph(g)
            exe.release_captured()
        for b in bufs[1:]:  # the first variant is evicted
            exe.bind_output(b)
            exe.execute(0)
        (_, _, _, held), = rt.retired
        pending[r, "before"] = held is not None and held()
        rt.comm.allgather(None)
        if r == 1:
            drv.destroy_graph(g)
            exe.release_captured()
        pending[r, "after"] = held is not None and held()

    _run_threads(p, rank)
    assert pending == {(0, "before"): False, (1, "before"): True, (0, "after"): False, (1, "after"): False}


def test_reap_frees_retired_memory_once_no_rank_holds_it():
    """Runtime.retire / reap: an entry goes when every rank retired it and none holds it (pending)."""
    from redist.engine.cuda.runtime import Runtime

    freed = {0: [], 1: []}
    flags = {0: [False], 1: [True]}

    def rank(hub, r):
        rt = object.__new__(Runtime)
        rt.comm = _Comm(hub, r)
        rt._retired, rt._retired_lock = {}, threading.Lock()
        rt.synchronize = lambda: None
        rt.sym_free = lambda ptr: freed[r].append(("sym", ptr))
        rt.dev_free = lambda ptr: freed[r].append(("dev", ptr))
        flag = flags[r]
        rt.retire((5, 0), [0x100], [0x200], pending=lambda: flag[0])
        rt.retire((6, 0), [0x300], [], pending=None)
        rt.reap()
        assert freed[r] == [("sym", 0x300)], freed[r]  # (5, 0) is still held on rank 1
        rt.comm.allgather(None)
        flags[1][0] = False
        rt.comm.allgather(None)
        rt.reap()
        assert freed[r] == [("sym", 0x300), ("dev", 0x200), ("sym", 0x100)] and not rt._retired

    _run_threads(2, rank)


@pytest.mark.parametrize("transport", ["push", "put"])
def test_out_and_failed_calls_leave_the_result_alone_on_a_simulated_job(transport):
    """Issue #22 on the CUDA executable: execute with an out= writes the out= only (the engine-owned
    result keeps the previous call's bytes); a call that fails on one rank launches nothing and
    changes neither the result nor any rank's out=."""
    p, gshape, itemsize = 2, (5, 6, 4), 8
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    G1, G2 = global_bytes(gshape, itemsize, 1), global_bytes(gshape, itemsize, 2)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        plan = make_plan(r, ib, ob, itemsize=itemsize)
        exe = _lower(rt, plan, transport=transport)
        exe.graphs = False
        ops = []
        for G in (G1, G2):
            a = operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r])), itemsize)
            ops.append(rt.dev_alloc(len(a)))
            rt.hub.write(ops[-1], a)
        want = [expected_bytes(G, ob[r], "C") for G in (G1, G2)]
        out = rt.sym_alloc(exe.result_bytes, owner="user")
        exe.rebind_input(ops[0])
        exe.execute(0)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(exe.result_ptr, len(want[0])), want[0])
        exe.rebind_input(ops[1])
        exe.bind_output(_device_buffer(out, plan.out_shape, itemsize))
        exe.execute(0)
        rt.comm.allgather(None)
        assert np.array_equal(rt.hub.read(out, len(want[1])), want[1])
        assert np.array_equal(rt.hub.read(exe.result_ptr, len(want[0])), want[0]), "out= wrote the result"
        exe.bind_output(None)
        launches = rt.driver.launches
        with pytest.raises(InvalidValueError, match="rank 1: planted"):
            exe.execute(0, problem=("InvalidValueError", "planted") if r == 1 else None)
        assert rt.driver.launches == launches
        assert np.array_equal(rt.hub.read(exe.result_ptr, len(want[0])), want[0]), "a failed call wrote the result"
        assert np.array_equal(rt.hub.read(out, len(want[1])), want[1]), "a failed call wrote the out="
        rt.comm.allgather(None)
        exe.free()

    _run_threads(p, rank)



@pytest.mark.parametrize("between", ["result", "other out="])
def test_update_captured_keeps_the_recorded_out(between):
    """A copy recorded writing out=X; a direct execute into the engine-owned result (or another
    out=) in between; update_captured refuses (it rebinds the operand only: peers store into the
    out= a copy writes), the graph still writes X; after execute(out=X) it rebinds the operand."""
    p, gshape, itemsize = 2, (6, 8, 4), 8
    seen = {}

    def rank(hub, r):
        rt, drv, exe, u, v, wants = _two_operand_job(hub, r, gshape, itemsize, nranks=p)
        shape = geo.box_shape(slab_boxes(gshape, p, 1)[r])
        x, y = _ghosted(rt, shape, 0, itemsize), _ghosted(rt, shape, 0, itemsize)
        n = len(wants[0])
        exe.rebind_input(u)
        exe.bind_output(x)
        exe.execute(0)
        drv.begin_capture(_USER)
        exe.execute(_USER)
        g = drv.end_capture(_USER)
        ge = drv.instantiate(g)
        exe.bind_output(None if between == "result" else y)
        exe.execute(0)
        exe.rebind_input(v)
        with pytest.raises(InvalidStateError, match="recorded with another out= than the last execute"):
            exe.update_captured(g, ge)
        rt.comm.allgather(None)
        rt.hub.write(x.ptr, np.zeros(n, np.uint8))
        rt.comm.allgather(None)
        drv.cuGraphLaunch(ge, _USER)
        rt.comm.allgather(None)
        seen[r, "still u into x"] = np.array_equal(rt.hub.read(x.ptr, n), wants[0])
        exe.bind_output(x)
        exe.execute(0)  # as captured: now the operand may move
        assert exe.update_captured(g, ge) == 1
        rt.comm.allgather(None)
        drv.cuGraphLaunch(ge, _USER)
        rt.comm.allgather(None)
        seen[r, "v into x"] = np.array_equal(rt.hub.read(x.ptr, n), wants[1])
        exe.release_captured()
        exe.free()

    _run_threads(p, rank)
    assert all(seen.values()), seen


def test_tune_measures_transport_signal_and_kernel_variant_on_a_simulated_job(monkeypatch):
    """tune="measure" on the CUDA backend (issue #47): every candidate (transport x signal x kernel
    variant) is lowered and timed on every rank, the slowest rank decides (ranks that alone
    would pick different winners), and every candidate's result is bit-exact."""
    from redist.engine import tune
    from redist.engine.backend import Context, LowerOptions, lower
    from redist.engine.tune import Candidate

    p, gshape, itemsize = 2, (7, 6, 5), 8
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 2)
    G = global_bytes(gshape, itemsize, 11)
    costs = [{"auto/barrier/v4": 2e-6}, {"put/epoch/v8": 1e-6, "auto/barrier/v4": 4e-6}]  # the others 5 us
    local = threading.local()
    monkeypatch.setattr(tune, "timer", lambda label, dt: costs[local.rank].get(label, 5e-6))
    seen = [None] * p

    def rank(hub, r):
        local.rank = r
        rt = _Runtime(hub, r)
        plan = make_plan(r, ib, ob, itemsize=itemsize)
        a = operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r])), itemsize)
        ptr = rt.dev_alloc(len(a))
        rt.hub.write(ptr, a)
        buf = _device_buffer(ptr, geo.box_shape(ib[r]), itemsize)
        want = expected_bytes(G, ob[r], "C")
        ctx = Context(rt.comm, rt, tune_environment={"nranks": p, "nodes": [0] * p, "mpi": "sim", "redist": "t"})
        exe = lower(plan, ctx, LowerOptions(backend="cuda", tune="measure", signature="f8", inputs=(buf,)))
        seen[r] = exe.tuning
        labels = [label for label, _, _ in exe.tuning.times]
        for cand in [Candidate("chosen", ())] + [Candidate(x, ()) for x in labels]:  # every candidate, bit-exact
            if cand.label != "chosen":
                t, s, v = cand.label.split("/")
                exe = lower(plan, ctx, LowerOptions(backend="cuda", transport=t, signal=s, vector_bytes=int(v[1:])))
                assert all(k.vmax <= int(v[1:]) for k in exe.launch_list.kernels), cand.label  # the variant
            exe.bind_input(buf)
            exe.execute(0)
            rt.comm.allgather(None)
            assert np.array_equal(rt.hub.read(exe.output_ptr, len(want)), want), (r, cand.label)
            rt.comm.allgather(None)
            exe.free()

    _run_threads(p, rank)
    assert seen[0] == seen[1] and seen[0].chosen == "auto/barrier/v4"
    assert len(seen[0].times) == 12 and all(t is not None for _, t, _ in seen[0].times)
