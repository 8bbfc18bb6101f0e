# SPDX-License-Identifier: Apache-2.0
"""GPU out= in ordinary device memory (engine/cuda/user_memory.py, issue #44), on the simulated job
of test_cuda_compile (threads as ranks, the kernel emulator, CUDA IPC simulated): the routes, the
mapping cache keyed by buffer id, the landing route, and the refusals (every rank, the same error)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import expected_bytes, global_bytes, operand_bytes, slab_boxes
from redist.engine import geometry as geo
from redist.engine.cuda.user_memory import RESULT, OutDesc, plan_routes, slot_of, slots_fit
from redist.engine.errors import InvalidStateError, InvalidValueError
from redist.engine.plan import make_plan
from test_cuda_compile import _device_buffer, _lower, _run_threads, _Runtime


def test_plan_routes():
    h = OutDesc("private", 0, 7, b"h")
    never = OutDesc("private", 0, 8, None, "not IPC capable")
    sym = OutDesc("symmetric", 512)
    # rank 0 private (mapped by rank 1), rank 1 not exportable, rank 2 nobody stores into it
    got = plan_routes([[h], [never], [never]], [[1], [0], []], [[], [], []], shared=False)
    assert [r[0][0] for r in got] == ["direct", "landing", "direct"] and "IPC" in got[1][0][1]
    got = plan_routes([[h], [sym]], [[1], [0]], [[], [0]], shared=False)  # rank 1 could not map rank 0's
    assert got[0][0] == ("landing", "rank(s) [1] could not map it") and got[1][0][0] == "direct"
    # one output slot per field: only equal symmetric offsets go direct, else every out= lands
    assert plan_routes([[sym], [sym]], [[1], [0]], [[], []], shared=True) == [[("direct", "")]] * 2
    got = plan_routes([[sym], [RESULT]], [[1], [0]], [[], []], shared=True)
    assert [r[0][0] for r in got] == ["landing", "direct"]
    assert slot_of(1, 3, 0, (2, 3), 2) == 1 + 2 * 2 and slot_of(1, 0, 0, (2, 3), 2) == 1
    assert slots_fit(1, 63) and not slots_fit(8, 8)


def _job(p, gshape, itemsize, body, *, transport="push", reach=None):
    """Run ``body(rt, exe, r, check)`` on every rank of a simulated job (Slab.X -> Slab.Y);
    ``check(ptr, k)`` asserts that ``ptr`` holds this rank's result of operand ``k`` (every rank done first)."""
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    globs = [global_bytes(gshape, itemsize, s) for s in (3, 11)]

    def rank(hub, r):
        rt = _Runtime(hub, r, None if reach is None else reach[r])
        plan = make_plan(r, ib, ob, itemsize=itemsize)
        exe = _lower(rt, plan, transport=transport)
        exe.graphs = False
        ops = []
        for G in globs:
            a = operand_bytes(G, ib[r], geo.dense_strides(geo.box_shape(ib[r])), itemsize)
            ops.append(rt.dev_alloc(len(a)))
            rt.hub.write(ops[-1], a)
        want = [expected_bytes(G, ob[r], "C") for G in globs]

        def check(ptr, k, what=""):
            rt.comm.allgather(None)  # every rank done writing
            got = rt.hub.read(ptr, len(want[k]))
            ok = all(rt.comm.allgather(bool(np.array_equal(got, want[k]))))
            assert ok, (r, what)
            rt.comm.allgather(None)  # every rank done reading

        body(rt, exe, r, plan, ops, check)

    _run_threads(p, rank)


@pytest.mark.parametrize("p", [2, 3])
def test_private_outputs_are_stored_into_through_mappings(p):
    """Every allocator's memory (here: any device allocation) as out=, one pass: peers store
    through their cached mapping of it; a symmetric out= beside a private one; the first use maps,
    later calls only check the buffer id; free() closes every mapping."""

    def body(rt, exe, r, plan, ops, check):
        api = rt.memory_api
        nbytes = exe.result_bytes
        x = rt.dev_alloc(nbytes + 256) + (64 if r == 1 else 0)  # not at its allocation's start on rank 1
        y = rt.dev_alloc(nbytes)
        sym = rt.sym_alloc(nbytes + 512 * p, owner="user") + 512 * r  # other heap offsets on other ranks
        outs = {"x": x, "y": y, "sym": sym, "result": None}
        for it, (name, k) in enumerate([("x", 0), ("x", 1), ("y", 0), ("x", 1), ("result", 0), ("sym", 1)]):
            if name == "sym" and r == 0:
                name = "x"  # rank 0 private, the others symmetric: must work
            ptr = outs[name]
            exe.rebind_input(ops[k])
            exe.bind_output(None if ptr is None else _device_buffer(ptr, plan.out_shape, 8))
            opened, gathers = api.calls["open"], rt.comm.gathers
            exe.execute(0)
            gathers = rt.comm.gathers - gathers
            check(exe.result_ptr if ptr is None else ptr, k, f"call {it} into {name}")
            if it in (1, 3):  # x again, and back to x after y: nothing mapped, nothing gathered (the
                assert api.calls["open"] == opened  # registry index travels in the per-call agreement)
                assert gathers == 1, (r, it, gathers)  # the agreement itself (an allgather in the simulation)
        assert "out= routes" in exe.describe() and "-> direct" in exe.describe()
        assert len(api.mapped) == 2 * (p - 1)  # every destination's x and y, each mapped once
        other = _lower(rt, plan, transport="push")  # a second executable into the same x: no new mapping
        other.graphs = False
        other.rebind_input(ops[0])
        other.bind_output(_device_buffer(x, plan.out_shape, 8))
        other.execute(0)
        check(x, 0, "second executable")
        other.free()
        assert len(api.mapped) == 2 * (p - 1), "a mapping the first executable uses was closed"
        far = rt.dev_alloc(nbytes)
        api.devices[far] = 1  # memory of another GPU, and a host address: refused (the call's problem)
        assert "CUDA device 1" in exe.out_problem(_device_buffer(far, plan.out_shape, 8))
        assert "not device memory" in exe.out_problem(_device_buffer(1 << 20, plan.out_shape, 8))
        exe.free()
        assert not api.mapped, "free() must close every mapping"

    _job(p, (9, 10, 6), 8, body)


def test_single_rank_private_output_needs_no_mapping():
    """One rank: any device memory is stored into directly, with no driver query, inside a capture too."""

    def body(rt, exe, r, plan, ops, check):
        x = rt.dev_alloc(exe.result_bytes)
        exe.rebind_input(ops[0])
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)
        check(x, 0)
        y = rt.dev_alloc(exe.result_bytes)  # a new allocation, first seen inside a capture
        exe.rebind_input(ops[1])
        exe.bind_output(_device_buffer(y, plan.out_shape, 8))
        drv = rt.driver
        drv.begin_capture(5)
        exe.execute(5)
        g_exec = drv.instantiate(drv.end_capture(5))
        assert drv.cuGraphLaunch(g_exec, 0) == 0
        check(y, 1, "captured")
        assert rt.memory_api.calls == {"export": 0, "open": 0, "close": 0, "buffer_id": 0}
        exe.release_captured()
        exe.free()

    _job(1, (5, 6, 4), 8, body)


@pytest.mark.parametrize("p", [2, 3])
def test_landing_route_and_reallocated_outputs(p):
    """An out= CUDA IPC cannot export lands in the result and is copied (and described so); an
    out= freed and reallocated at the same address is mapped anew (never written through the old
    mapping); one freed and not reallocated is refused on every rank."""

    def body(rt, exe, r, plan, ops, check):
        api = rt.memory_api
        nbytes = exe.result_bytes
        x = rt.dev_alloc(nbytes)
        if r == 1:
            api.private.add(x)  # rank 1's out= is not exportable
        exe.rebind_input(ops[0])
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)
        check(x, 0, "landing")
        assert "rank 1 field 0: private" in exe.describe() and "-> landing" in exe.describe()
        if r == 1:  # its copy is not in the graph a parent would embed
            with pytest.raises(InvalidStateError, match="landing route"):
                exe.graph()
        # another out= in a call refused on rank 0, then x again: routed as before (it lands again)
        exe.bind_output(_device_buffer(rt.dev_alloc(nbytes), plan.out_shape, 8))
        with pytest.raises(InvalidValueError, match="rank 0: planted"):
            exe.execute(0, problem=("InvalidValueError", "planted") if r == 0 else None)
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.rebind_input(ops[1])
        exe.execute(0)
        check(x, 1, "landing again after a refused call")
        exe.rebind_input(ops[0])
        # a strided out= there cannot land: refused locally (the call's problem)
        ghost = _device_buffer(x, plan.out_shape, 8, order="F")
        assert (exe.out_problem(ghost) is not None) == (r == 1 and plan.out_shape[0] > 1)
        # rank 1 (now exportable) frees its out= and allocates another at the same address
        rt.comm.allgather(None)
        if r == 1:
            api.private.discard(x)
            rt.hub.remove(x)
            rt.hub.add(x, nbytes)
        exe.rebind_input(ops[1])
        exe.execute(0)
        check(x, 1, "reallocated")
        assert "-> landing" not in exe.describe()
        # rank 1 frees it for good: every rank raises, nothing is written
        rt.comm.allgather(None)
        if r == 1:
            rt.hub.remove(x)
        launches = rt.driver.launches
        with pytest.raises(InvalidValueError, match="rank 1: out= .*no longer device memory"):
            exe.execute(0)
        assert rt.driver.launches == launches
        if r == 1:
            rt.hub.add(x, nbytes)
        exe.bind_output(None)
        exe.execute(0)
        check(exe.result_ptr, 1, "back to the result")
        exe.free()

    _job(p, (9, 10, 6), 8, body)


def test_unmappable_strided_output_is_refused_everywhere():
    """Rank 0 cannot open rank 1's out= (e.g. not P2P-reachable for IPC): it lands; strided, every rank raises."""

    def body(rt, exe, r, plan, ops, check):
        x = rt.dev_alloc(exe.result_bytes + 4096)
        shape = plan.out_shape
        bases = rt.comm.allgather(x)
        if r == 0:
            rt.memory_api.unmappable = {bases[1]}
        strides = tuple(s + (shape[-1] if i == 1 else 0) for i, s in enumerate(geo.dense_strides(shape)))
        from redist.engine.buffer import Buffer

        buf = Buffer(x, shape, strides, 8, "cuda", 0) if r == 1 else _device_buffer(x, shape, 8)
        exe.rebind_input(ops[0])
        exe.bind_output(buf)
        with pytest.raises(InvalidValueError, match="rank 1: out= .*cannot be mapped"):
            exe.execute(0)
        exe.bind_output(_device_buffer(x, shape, 8))  # laid out like the result: it lands
        exe.execute(0)
        check(x, 0, "landed")
        exe.free()

    _job(2, (6, 8, 4), 8, body)


def test_new_private_output_inside_a_capture_is_refused():
    """Mapping a new allocation is collective: refused inside a capture on every rank; once used
    outside, the capture records the exchange into it (and the landing copy), and replays are right."""

    def body(rt, exe, r, plan, ops, check):
        drv = rt.driver
        x = rt.dev_alloc(exe.result_bytes)
        if r == 0:
            rt.memory_api.private.add(x)  # rank 0 lands: its copy is recorded too
        exe.rebind_input(ops[0])
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        stream = 99
        drv.begin_capture(stream)
        with pytest.raises(InvalidStateError, match="inside a CUDA graph capture with an out= in memory"):
            exe.execute(stream)
        drv.end_capture(stream, discard=True)
        exe.execute(0)  # outside: maps it
        check(x, 0, "outside")
        exe.rebind_input(ops[1])
        drv.begin_capture(stream)
        exe.execute(stream)
        graph = drv.end_capture(stream)
        g_exec = drv.instantiate(graph)
        for _ in range(3):
            assert drv.cuGraphLaunch(g_exec, 0) == 0
            check(x, 1, "replayed")
        y = rt.dev_alloc(exe.result_bytes)  # used once outside, then back to x, then y again inside a capture
        exe.bind_output(_device_buffer(y, plan.out_shape, 8))
        exe.execute(0)
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)
        exe.rebind_input(ops[0])
        exe.bind_output(_device_buffer(y, plan.out_shape, 8))
        drv.begin_capture(stream)
        exe.execute(stream)  # mapped already: re-routed inside the capture, nothing collective allocated
        g_exec = drv.instantiate(drv.end_capture(stream))
        assert drv.cuGraphLaunch(g_exec, 0) == 0
        check(y, 0, "a mapped allocation again, inside a capture")
        exe.release_captured()
        exe.free()

    _job(2, (6, 8, 4), 8, body)


def _field_operands(rt, globs, box, sizes) -> list[int]:
    """Each field's operand (this rank's ``box`` of ``globs[f]``, elements of ``sizes[f]`` bytes) in device memory."""
    ops = []
    for glob, isz in zip(globs, sizes):
        a = operand_bytes(glob, box, geo.dense_strides(geo.box_shape(box)), isz)
        ops.append(rt.dev_alloc(len(a)))
        rt.hub.write(ops[-1], a)
    return ops


@pytest.mark.parametrize("transport", ["push", "mixed"])
def test_fused_fields_into_private_strided_outputs(transport, monkeypatch):
    """Three fields: field 1 into private memory (not exportable on rank 2: it lands), field 2 into
    the interior of a private ghosted allocation (strided, each rank's at its own place), field 0
    the result; with a pair that cannot reach each other (put) beside the pushes."""
    import math

    from helpers import global_bytes as gbytes
    from redist.engine.buffer import Buffer
    from redist.engine.plan import fuse

    monkeypatch.setenv(
        "REDIST_CUDA_GRAPHS", "0"
    )  # the out= layout variant too: no CUDA graphs in the simulation
    p, gshape, sizes = 3, (7, 6, 5), (8, 4, 16)
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    reach = np.ones((p, p), bool)
    if transport == "mixed":
        reach[0, 2] = reach[2, 0] = False
    Gs = [gbytes(gshape, isz, 20 + f) for f, isz in enumerate(sizes)]

    def rank(hub, r):
        rt = _Runtime(hub, r, reach[r])
        plan = fuse([make_plan(r, ib, ob, itemsize=isz) for isz in sizes])
        exe = _lower(rt, plan, transport="auto")
        exe.graphs = False
        ops = _field_operands(rt, Gs, ib[r], sizes)
        shape = geo.box_shape(ob[r])
        x1 = rt.dev_alloc(math.prod(shape) * sizes[1] + 512 * r) + 512 * r
        if r == 2:
            rt.memory_api.private.add(x1 - 512 * r)
        ghost = tuple(n + 2 for n in shape)
        gstrides = geo.dense_strides(ghost, "C")
        grid = rt.dev_alloc(math.prod(ghost) * sizes[2])
        strided = Buffer(grid + sum(gstrides) * sizes[2], shape, gstrides, sizes[2], "cuda", 0)
        rt.hub.write(grid, np.full(math.prod(ghost) * sizes[2], 0xEE, np.uint8))
        exe.rebind_inputs(ops, [None] * 3)
        exe.bind_output(_device_buffer(x1, shape, sizes[1]), 1)
        exe.bind_output(strided, 2)
        for _ in range(2):
            exe.execute(0)
            rt.comm.allgather(None)
            want = [expected_bytes(Gs[f], ob[r], "C") for f in range(3)]
            whole = rt.hub.read(grid, math.prod(ghost) * sizes[2]).reshape(ghost + (sizes[2],))
            got = [
                rt.hub.read(exe.results[0].ptr, len(want[0])),
                rt.hub.read(x1, len(want[1])),
                np.ascontiguousarray(whole[1:-1, 1:-1, 1:-1]).reshape(-1),
            ]
            ok = [np.array_equal(g, w) for g, w in zip(got, want)]
            ghosts = int((whole != 0xEE).any(axis=-1).sum()) - math.prod(shape)
            assert all(rt.comm.allgather(all(ok) and ghosts == 0)), (r, ok, ghosts)
            rt.comm.allgather(None)
        text = exe.describe()
        assert (
            "rank 2 field 1: private" in text and "-> landing" in text and "rank 0 field 2: private" in text
        )
        exe.free()
        assert not rt.memory_api.mapped

    _run_threads(p, rank)


def test_registry_starts_again_when_full(monkeypatch):
    """More outputs than the registry holds: it starts again on every rank alike, data stay right."""
    from redist.engine.cuda.user_memory import Outputs

    monkeypatch.setattr(Outputs, "REGISTRY", 3)

    def body(rt, exe, r, plan, ops, check):
        xs = [rt.dev_alloc(exe.result_bytes) for _ in range(5)]
        for it in range(12):
            x = xs[(it * 2) % 5]
            exe.rebind_input(ops[it % 2])
            exe.bind_output(_device_buffer(x, plan.out_shape, 8))
            exe.execute(0)
            check(x, it % 2, f"call {it}")
            assert max(len(reg) for reg in exe._outputs._reg) <= 3
        exe.free()
        assert not rt.memory_api.mapped

    _job(3, (9, 10, 6), 8, body)


def test_allocations_forgotten_keep_those_bound(monkeypatch):
    """Two fields into two private allocations, with room to keep one allocation's description:
    binding the second forgets others but not the first's, which the call's gather sends."""
    import math

    from helpers import global_bytes as gbytes
    from redist.engine.cuda.user_memory import Outputs
    from redist.engine.plan import fuse

    monkeypatch.setattr(Outputs, "EXPORTED", 1)
    p, gshape, sizes = 2, (5, 6, 4), (8, 16)
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)
    Gs = [gbytes(gshape, isz, 30 + f) for f, isz in enumerate(sizes)]

    def rank(hub, r):
        rt = _Runtime(hub, r)
        exe = _lower(rt, fuse([make_plan(r, ib, ob, itemsize=isz) for isz in sizes]), transport="push")
        exe.graphs = False
        ops = _field_operands(rt, Gs, ib[r], sizes)
        shape = geo.box_shape(ob[r])
        exe.rebind_inputs(ops, [None] * 2)
        for it in range(3):  # new allocations each time: every bind forgets the others
            xs = [rt.dev_alloc(math.prod(shape) * isz) for isz in sizes]
            for f, (x, isz) in enumerate(zip(xs, sizes)):
                exe.bind_output(_device_buffer(x, shape, isz), f)
            exe.execute(0)
            rt.comm.allgather(None)
            ok = all(
                np.array_equal(rt.hub.read(x, math.prod(shape) * isz), expected_bytes(G, ob[r], "C"))
                for x, isz, G in zip(xs, sizes, Gs)
            )
            assert all(rt.comm.allgather(ok)), (r, it)
            rt.comm.allgather(None)
        exe.free()

    _run_threads(p, rank)


@pytest.mark.parametrize(
    ("p", "transport", "landing"),
    [(1, "push", False), (2, "push", False), (2, "push", True), (3, "push", True), (3, "put", False)],
)
def test_captured_step_into_private_output_replayed(p, transport, landing):
    """The GPU worker's captured step (tests/gpu/workers/user_memory_worker.py, mode capture):
    ``a += 1; execute(out=x); acc += x`` in the user's capture, replayed, float64 data with
    fractional parts. The expected values are those of the same float operations on the host
    (``a + 1`` repeated is not ``a + n``: rounded again each time a value crosses a power of two; a
    sum of 1,000 such terms is not its closed form), the check the worker got wrong."""
    from helpers import global_values

    gshape, replays = (12, 10, 6), 40
    G = global_values(gshape, np.float64) + 1000.0  # crosses 1024 and 2048 within a few replays
    ib, ob = slab_boxes(gshape, p, 0), slab_boxes(gshape, p, 1)

    def rank(hub, r):
        rt = _Runtime(hub, r)
        plan = make_plan(r, ib, ob, itemsize=8)
        exe = _lower(rt, plan, transport=transport)
        exe.graphs = False
        drv = rt.driver
        sub = lambda box: np.ascontiguousarray(G[tuple(slice(lo, hi) for lo, hi in zip(*box))])  # noqa: E731
        a_h, want = sub(ib[r]), sub(ob[r])
        a = rt.dev_alloc(max(a_h.nbytes, 8))
        rt.hub.write(a, a_h.view(np.uint8))
        x = rt.dev_alloc(exe.result_bytes)
        acc = rt.dev_alloc(exe.result_bytes)
        rt.hub.write(acc, np.zeros(want.size, np.float64).view(np.uint8))
        if landing and r == 1:
            rt.memory_api.private.add(x)  # not exportable: peers store into the result, rank 1 copies it
        exe.rebind_input(a)
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)  # the first use, outside the capture: maps x on the ranks storing into it
        rt.comm.allgather(None)

        def read(ptr, n):
            return rt.hub.read(ptr, 8 * n).view(np.float64).copy()

        def add_one():  # the user's producer, a.add_(1.0)
            rt.hub.write(a, (read(a, a_h.size) + 1.0).view(np.uint8))

        def accumulate():  # the user's consumer, acc.add_(x)
            rt.hub.write(acc, (read(acc, want.size) + read(x, want.size)).view(np.uint8))

        stream = 99
        drv.begin_capture(stream)
        drv.op(stream, add_one)
        exe.execute(stream)
        drv.op(stream, accumulate)
        g_exec = drv.instantiate(drv.end_capture(stream))
        sim_x, sim_acc = want.copy(), np.zeros_like(want)
        for k in range(1, replays + 1):
            assert drv.cuGraphLaunch(g_exec, 0) == 0
            sim_x += 1.0
            sim_acc += sim_x
            if k in (1, 2, replays):
                rt.comm.allgather(None)  # every rank's replay k done
                got_x, got_acc = read(x, want.size), read(acc, want.size)
                ok = np.array_equal(got_x, sim_x.reshape(-1)) and np.array_equal(got_acc, sim_acc.reshape(-1))
                assert all(rt.comm.allgather(ok)), (r, k, exe.describe())
                rt.comm.allgather(None)
        if r == 0 and want.size:  # the worker's old closed forms are not what float64 gives
            assert not np.array_equal(sim_x, want + replays) or not np.array_equal(
                sim_acc, replays * want + replays * (replays + 1) / 2
            )
        if landing:  # (put: nobody stores into another rank's out=, the unpack writes it)
            assert "rank 1 field 0: private" in exe.describe() and "-> landing" in exe.describe()
        exe.release_captured()
        exe.free()

    _run_threads(p, rank)


@pytest.mark.parametrize("p", [2, 3])
def test_bad_input_sequence_leaves_nothing_behind(p):
    """The GPU worker's bad-input sequence (mode bad), as the executable sees it (a refused call
    binds every out= back to the result, as Redistribute does): a call refused on the last rank
    while the others bound a new private out=, a private out= used, freed and reallocated at its
    address, freed for good (refused), a new allocation inside a capture (refused, the capture
    stays valid); then the engine-owned result and a private out= must be right."""

    def body(rt, exe, r, plan, ops, check):
        last, nbytes, drv = p - 1, exe.result_bytes, rt.driver

        def refused(cls, match, **kw):
            with pytest.raises(cls, match=match):
                exe.execute(**kw)
            exe.bind_output(None)  # Redistribute._unbind_outs

        exe.rebind_input(ops[0])
        exe.execute(0)
        check(exe.result_ptr, 0, "result")
        before = rt.hub.read(exe.result_ptr, nbytes)
        exe.bind_output(_device_buffer(rt.dev_alloc(nbytes), plan.out_shape, 8))  # bound, never routed
        refused(
            InvalidValueError,
            f"rank {last}: planted",
            stream=0,
            problem=("InvalidValueError", "planted") if r == last else None,
        )
        x = rt.dev_alloc(nbytes)
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)
        check(x, 0, "private out=")
        rt.comm.allgather(None)
        if r == last:  # freed, another allocation at its address
            rt.hub.remove(x)
            rt.hub.add(x, nbytes)
        exe.rebind_input(ops[1])
        exe.bind_output(_device_buffer(x, plan.out_shape, 8))
        exe.execute(0)
        check(x, 1, "reallocated")
        rt.comm.allgather(None)
        if r == last:  # freed for good
            rt.hub.remove(x)
        refused(InvalidValueError, f"rank {last}: out= .*no longer device memory", stream=0)
        assert np.array_equal(rt.hub.read(exe.result_ptr, nbytes), before), "a refused call wrote the result"
        z = rt.dev_alloc(nbytes)  # a new allocation inside a capture
        exe.bind_output(_device_buffer(z, plan.out_shape, 8))
        drv.begin_capture(5)
        refused(InvalidStateError, "inside a CUDA graph capture with an out= in memory", stream=5)
        assert drv.capture_status(5) == 1, "the capture was invalidated"
        drv.end_capture(5, discard=True)
        exe.execute(0)
        check(exe.result_ptr, 1, "the result after the refusals")
        y = rt.dev_alloc(nbytes)
        exe.rebind_input(ops[0])
        exe.bind_output(_device_buffer(y, plan.out_shape, 8))
        exe.execute(0)
        check(y, 0, "a new private out= after the refusals")
        exe.bind_output(None)
        exe.execute(0)
        exe.free()

    _job(p, (12, 10, 6), 8, body)
