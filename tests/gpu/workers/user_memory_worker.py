# SPDX-License-Identifier: Apache-2.0
"""GPU out= in ordinary device memory (issue #44): ``mpiexec -n P python user_memory_worker.py MODE``.

Modes (tests/gpu/test_user_memory_gpu.py):

* ``allocators``: execute(out=X) bit-exact for X from torch's caching allocator, cupy's default
  pool, cudaMalloc and cudaMallocAsync (its default pool: not IPC capable, the landing route), a
  symmetric out= on rank 0 beside private ones elsewhere, strided (the interior of a ghosted torch
  tensor), permuted (result_layout) and several fields; each checked over many calls;
* ``capture``: a step captured by torch (operand += 1, execute(out=torch tensor), acc += out)
  replayed USER_MEMORY_REPLAYS (1,000) times, checked after replays 1, 2 and the last against the
  same float64 operations on the host; the same for the cudaMallocAsync (landing) out=;
* ``bad``: one rank wrong: a host array as out=, out= overlapping the operand, a read-only out=
  (raw pointers, as from C), a cudaMalloc'd out=
  freed and another allocated (at the same address when CUDA gives it) between calls (must be
  right), one freed and not reallocated (refused everywhere), a new allocation inside a capture
  (refused everywhere, the capture stays valid), memory of another GPU (with two or more GPUs);
* ``expandable``: torch with ``expandable_segments:True`` (cuMem memory: the landing route unless
  it can be mapped), run with PYTORCH_CUDA_ALLOC_CONF set by the test.

One rank per GPU, or several on one under REDIST_SHARED_GPU=1. Failures are reduced across ranks;
rank 0 prints ALL OK.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import Report, global_values, run_report_mode, sl  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
last = P - 1
SHAPE = (12, 10, 6)  # uneven over 3 and 4 ranks
CALLS = int(os.environ.get("USER_MEMORY_CALLS", "50"))
REPLAYS = int(os.environ.get("USER_MEMORY_REPLAYS", "1000"))


def start() -> int:
    import cupy as cp
    import redist
    import torch

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    dev = node.Get_rank() % cp.cuda.runtime.getDeviceCount()
    node.Free()
    cp.cuda.Device(dev).use()
    torch.cuda.set_device(dev)
    redist.initialize(device_id=dev)
    return dev


def problem(salt: int = 0, dtype=np.float64):
    """(this rank's Slab.X part, its expected Slab.Y part) of the global array, on the host."""
    from redist import Slab

    g = global_values(SHAPE, dtype, salt)
    return (
        np.ascontiguousarray(g[sl(Slab.X.box(rank, SHAPE, nranks=P))]),
        g[sl(Slab.Y.box(rank, SHAPE, nranks=P))],
    )


def raw_device(nbytes: int, kind: str):
    """(RawArray-ready pointer, free function) of cudaMalloc / cudaMallocAsync memory."""
    import cupy as cp

    rt = cp.cuda.runtime
    if kind == "malloc":
        ptr = rt.malloc(nbytes)
        return ptr, lambda: rt.free(ptr)
    stream = cp.cuda.get_current_stream().ptr
    ptr = rt.mallocAsync(nbytes, stream)
    return ptr, lambda: rt.freeAsync(ptr, stream)


def raw_array(ptr: int, shape, dtype=np.float64):
    """A cupy array over raw device memory (not cupy's: cudaMalloc, cudaMallocAsync, freed even);
    the C ABI passes such pointers as they are (cabi/examples/device_loop.c)."""
    import cupy as cp

    nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
    mem = cp.cuda.UnownedMemory(ptr, nbytes, None, device_id=cp.cuda.Device().id)  # no pointer query
    return cp.ndarray(tuple(shape), dtype, cp.cuda.MemoryPointer(mem, 0))


def diff(got, want) -> str:
    """Where ``got`` differs from ``want``, for a failure message: how many elements, the first
    one (index, got, want, got - want); "" when equal."""
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return f" (shape {got.shape}, expected {want.shape})"
    bad = np.argwhere(got != want)
    if not len(bad):
        return ""
    i = tuple(int(v) for v in bad[0])
    g, w = got[i].item(), want[i].item()
    return f" ({len(bad)} of {got.size} elements differ; first at {i}: got {g!r}, expected {w!r}, difference {g - w!r})"


def torch_host(t) -> np.ndarray:
    import torch

    torch.cuda.synchronize()
    return t.cpu().numpy()


def cupy_host(ptr: int, shape, dtype=np.float64) -> np.ndarray:
    import cupy as cp

    cp.cuda.runtime.deviceSynchronize()
    out = np.empty(shape, dtype)
    cp.cuda.runtime.memcpy(out.ctypes.data, ptr, out.nbytes, cp.cuda.runtime.memcpyDeviceToHost)
    return out


def run_allocators(report: Report) -> None:
    import cupy as cp
    import redist
    import torch
    from redist import Redistribute, Slab

    start()
    a_h, want = problem()
    a_h2, want2 = problem(7)
    # torch operands: torch out=; cupy operands: cupy and raw (cudaMalloc, cudaMallocAsync) out=
    ta, ta2 = torch.from_numpy(a_h).cuda(), torch.from_numpy(a_h2).cuda()
    with Redistribute(ta, Slab.X, Slab.Y) as r:
        r.plan()
        outs = {"torch": torch.empty(want.shape, dtype=torch.float64, device="cuda")}
        sym = redist.allocate_symmetric_memory(want.shape, torch, dtype=torch.float64, make_symmetric=True)
        # a symmetric out= on rank 0, private ones elsewhere: must work
        outs["torch-sym-on-0"] = (
            sym if rank == 0 else torch.empty(want.shape, dtype=torch.float64, device="cuda")
        )
        ghost = torch.full(
            (want.shape[0] + 2, want.shape[1] + 2, want.shape[2] + 2),
            -1.0,
            dtype=torch.float64,
            device="cuda",
        )
        outs["torch-strided"] = ghost[1:-1, 1:-1, 1:-1]
        for name, x in outs.items():
            for k in range(CALLS):
                r.reset_operand_unchecked(ta if k % 2 else ta2)
                got = r.execute(out=x)
                if k in (0, 1, CALLS - 1):
                    h, w = torch_host(x), want if k % 2 else want2
                    report.check(got is x and np.array_equal(h, w), f"{name}: call {k} wrong{diff(h, w)}")
            if name == "torch-strided":
                h = torch_host(ghost)
                report.check(int((h == -1.0).sum()) == h.size - x.numel(), f"{name}: ghost cells written")
        report.check("out= routes" in r._exe.describe(), "describe() names no routes")
        if rank == 0:
            print(r._exe.describe().splitlines()[-1][:300], flush=True)
        r.execute()  # nothing bound to sym any more
        torch.cuda.synchronize()
    redist.free_symmetric_memory(sym)  # collective
    ca, ca2 = cp.asarray(a_h), cp.asarray(a_h2)
    with Redistribute(ca, Slab.X, Slab.Y) as r:
        r.plan()
        pool_out = cp.empty(want.shape, np.float64)
        for name in ("cupy-pool", "cudaMalloc", "cudaMallocAsync"):
            free = None
            if name == "cupy-pool":
                x, ptr = pool_out, pool_out.data.ptr
            else:
                ptr, free = raw_device(want.nbytes, "malloc" if name == "cudaMalloc" else "async")
                x = raw_array(ptr, want.shape)
            for k in range(CALLS):
                r.reset_operand_unchecked(ca if k % 2 else ca2)
                r.execute(out=x)
                if k in (0, 1, CALLS - 1):
                    h, w = cupy_host(ptr, want.shape), want if k % 2 else want2
                    report.check(np.array_equal(h, w), f"{name}: call {k} wrong{diff(h, w)}")
            if rank == 0:
                print(f"{name}: {r._exe._outputs.text[:200]}", flush=True)
            r.execute()  # unbind x before it goes
            if free is not None:
                cp.cuda.runtime.deviceSynchronize()
                free()
    # permuted result, and several fields (torch)
    with Redistribute(ta, Slab.X, Slab.Y, options={"result_layout": (0, 2, 1)}) as r:
        r.plan()
        x = torch.empty(
            (want.shape[0], want.shape[2], want.shape[1]), dtype=torch.float64, device="cuda"
        ).permute(0, 2, 1)
        for k in range(3):
            r.execute(out=x)
        report.check(np.array_equal(torch_host(x.contiguous()), want), "permuted out= wrong")
    with Redistribute((ta, ta2), Slab.X, Slab.Y) as r:
        r.plan()
        xs = (torch.empty(want.shape, dtype=torch.float64, device="cuda"), None)
        for k in range(3):
            got = r.execute(out=xs)
        report.check(
            np.array_equal(torch_host(xs[0]), want) and np.array_equal(torch_host(got[1]), want2),
            "fields: out= wrong",
        )


def run_capture(report: Report) -> None:
    """The captured step ``a += 1; execute(out=x); acc += x`` replayed REPLAYS times, checked after
    replays 1, 2 and REPLAYS against the same float64 operations done on the host: the values have
    fractional parts, so ``a + 1`` repeated is not ``a + n`` (rounded again each time a value
    crosses a power of two), nor is the sum of the replays its closed form (what this check first compared
    with, failing on a correct result). A failure prints the evidence: the first element that
    differs, whether out= holds the values of the replay before (a stale or missing replay), those
    before any replay (the recorded exchange never wrote it), whether the operand and the
    engine-owned result are right, and the routes (describe())."""
    import torch
    from redist import Redistribute, Slab

    start()
    a_h, want = problem()
    marks = sorted({k for k in (1, 2, REPLAYS) if k >= 1})
    for name in ("torch", "cudaMallocAsync"):
        a = torch.from_numpy(a_h).cuda()
        with Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            free = None
            if name == "torch":
                x = torch.empty(want.shape, dtype=torch.float64, device="cuda")
                xr = x
            else:
                ptr, free = raw_device(want.nbytes, "async")
                x = xr = torch.as_tensor(raw_array(ptr, want.shape), device="cuda")
            acc = torch.zeros(want.shape, dtype=torch.float64, device="cuda")
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                r.execute(out=x, stream=s)  # first use outside the capture: maps it (collective)
            torch.cuda.synchronize()
            h = torch_host(x)
            report.check(
                np.array_equal(h, want),
                f"{name}: the eager execute(out=) before the capture is wrong{diff(h, want)}",
            )
            routes = r._exe._outputs.text or "every output is the engine-owned result"
            if rank == 0:
                where = (
                    ""
                    if free is None
                    else f" (torch's view is the cudaMallocAsync memory itself: {x.data_ptr() == ptr})"
                )
                print(f"capture {name}: routes: {routes[:400]}{where}", flush=True)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                a.add_(1.0)
                r.execute(out=x, stream=s)
                acc.add_(xr)
            torch.cuda.synchronize()
            if rank == 0:
                print(
                    f"capture {name}: {r._exe.captured_copies()} copy(ies) recorded; "
                    f"{'flat (kernel nodes)' if r._exe._flat else 'child graph'}",
                    flush=True,
                )
            # the replays' float64 operations, done on the host
            a_sim, x_sim, acc_sim = a_h.copy(), want.copy(), np.zeros_like(want)
            done, failed = 0, False
            for k in marks:
                x_prev = x_sim.copy()
                while done < k:
                    g.replay()
                    done += 1
                    a_sim += 1.0
                    x_sim += 1.0
                    acc_sim += x_sim
                torch.cuda.synchronize()
                hx, hacc, ha = torch_host(x), torch_host(acc), torch_host(a)
                ok_x = report.check(
                    np.array_equal(hx, x_sim), f"{name}: out= after {k} replay(s) wrong{diff(hx, x_sim)}"
                )
                ok_acc = report.check(
                    np.array_equal(hacc, acc_sim),
                    f"{name}: the sum over {k} replay(s) is wrong (a stale or partial replay){diff(hacc, acc_sim)}",
                )
                ok_a = report.check(
                    np.array_equal(ha, a_sim),
                    f"{name}: the operand after {k} replay(s) is wrong "
                    f"(the captured a += 1){diff(ha, a_sim)}",
                )
                if not (ok_x and ok_acc and ok_a) and not failed:
                    failed = True
                    try:
                        hres = torch_host(r._result)
                    except Exception as e:  # noqa: BLE001 -- evidence only
                        print(f"[rank {rank}] the engine-owned result could not be read: {e}", flush=True)
                        hres = np.full_like(want, np.nan)
                    print(
                        f"[rank {rank}] capture {name} after {k} replay(s): out= == the replay before: "
                        f"{np.array_equal(hx, x_prev)}; out= == before any replay: {np.array_equal(hx, want)}; "
                        f"engine-owned result == expected: {np.array_equal(hres, x_sim)}"
                        f"{diff(hres, x_sim)}; out= == engine-owned result: {np.array_equal(hx, hres)}; "
                        f"operand right: {ok_a}\n[rank {rank}] {r._exe.describe()}",
                        flush=True,
                    )
            del g
            r.release_captured()
            r.execute()
            if free is not None:
                torch.cuda.synchronize()
                free()


def run_bad(report: Report) -> None:
    import cupy as cp
    import redist
    from redist import Redistribute, Slab

    dev = start()
    a_h, want = problem()
    ca = cp.asarray(a_h)
    with Redistribute(ca, Slab.X, Slab.Y) as r:
        r.plan()
        b = r.execute()
        kept = cp.asnumpy(b)
        ok_out = cp.full(want.shape, 7.0)
        # a host array as out= on the last rank
        x = np.empty(want.shape) if rank == last else ok_out
        report.expect_error(lambda: r.execute(out=x), redist.InvalidValueError, rf"rank {last}", "host out=")
        report.check(
            np.array_equal(cp.asnumpy(b), kept) and (cp.asnumpy(ok_out) == 7.0).all(), "host out=: wrote"
        )
        # out= overlapping the operand on the last rank
        x = raw_array(ca.data.ptr, want.shape) if rank == last and ca.nbytes >= want.nbytes else ok_out
        if comm.allreduce(x is not ok_out, MPI.LOR):
            report.expect_error(
                lambda: r.execute(out=x),
                redist.InvalidValueError,
                rf"rank {last}.*overlaps",
                "out= over the operand",
            )
        report.check(np.array_equal(cp.asnumpy(ca), a_h), "overlap: the operand changed")
        # cudaMalloc'd out= freed and another allocated between calls (the same address when CUDA gives it)
        ptr, free = raw_device(want.nbytes, "malloc")
        r.execute(out=raw_array(ptr, want.shape))
        h = cupy_host(ptr, want.shape)
        report.check(np.array_equal(h, want), f"cudaMalloc out= wrong{diff(h, want)}")
        cp.cuda.runtime.deviceSynchronize()
        free()
        ptr2, free2 = raw_device(want.nbytes, "malloc")
        same = comm.allgather(ptr2 == ptr)
        if rank == 0:
            print(
                f"reallocated at the same address on ranks {[i for i, s in enumerate(same) if s]}", flush=True
            )
        ca *= 2  # exact in float64 (undone by /= 2 below)
        x2 = raw_array(ptr2, want.shape)
        r.execute(out=x2)
        h = cupy_host(ptr2, want.shape)
        report.check(np.array_equal(h, want * 2), f"reallocated out= wrong{diff(h, want * 2)}")
        # freed for good on the last rank (the object is passed again): refused on every rank
        cp.cuda.runtime.deviceSynchronize()
        if rank == last:
            free2()
        report.expect_error(
            lambda: r.execute(out=x2),
            redist.InvalidValueError,  # the same object: the
            rf"rank {last}",
            "freed out=",
        )  # per-call buffer-id check
        if rank != last:
            free2()
        report.check(np.array_equal(cp.asnumpy(b), kept), "freed out=: the result was written")
        # a new allocation inside a capture: refused on every rank, the capture stays valid
        ptr3, free3 = raw_device(want.nbytes, "malloc")
        t = raw_array(ptr3, want.shape)
        s = cp.cuda.Stream(non_blocking=True)
        with s:
            s.begin_capture()
            report.expect_error(
                lambda: r.execute(out=t, stream=s.ptr),
                redist.InvalidStateError,
                "capture",
                "new out= in a capture",
            )
            graph = s.end_capture()
        report.check(graph is not None, "the capture was invalidated")
        free3()
        # memory of another GPU
        if cp.cuda.runtime.getDeviceCount() > 1:
            other = (dev + 1) % cp.cuda.runtime.getDeviceCount()
            with cp.cuda.Device(other):
                far = cp.empty(want.shape, np.float64)
            x = far if rank == last else ok_out
            report.expect_error(
                lambda: r.execute(out=x), redist.InvalidValueError, rf"rank {last}", "other GPU out="
            )
        elif rank == 0:
            print("one GPU: the other-GPU case is not run", flush=True)
        ca /= 2  # exact; (//= floors: the operand's values have fractional parts, the check failed on that)
        report.check(
            np.array_equal(cp.asnumpy(ca), a_h), f"the operand after *= 2, /= 2{diff(cp.asnumpy(ca), a_h)}"
        )
        h = cp.asnumpy(r.execute())
        report.check(np.array_equal(h, want), f"the result after the refusals{diff(h, want)}")
        if not np.array_equal(h, want):
            print(f"[rank {rank}] {r._exe.describe()}", flush=True)
    # raw pointers, as the C ABI passes them: a read-only out= on the last rank, then a writable one
    from redist._operands import RawArray

    op = RawArray(ca.data.ptr, ca.shape, None, 8, memory="cuda", device_id=dev, dtype=np.float64)
    with Redistribute(op, Slab.X, Slab.Y) as r:
        r.plan()
        ptr, free = raw_device(want.nbytes, "malloc")
        ro = RawArray(
            ptr, want.shape, None, 8, memory="cuda", device_id=dev, dtype=np.float64, readonly=rank == last
        )
        report.expect_error(
            lambda: r.execute(out=ro), redist.InvalidValueError, rf"rank {last}.*read-only", "read-only out="
        )
        rw = RawArray(ptr, want.shape, None, 8, memory="cuda", device_id=dev, dtype=np.float64)
        r.execute(out=rw)
        h = cupy_host(ptr, want.shape)
        report.check(np.array_equal(h, want), f"raw cudaMalloc out= wrong{diff(h, want)}")
        if not np.array_equal(h, want):
            print(f"[rank {rank}] {r._exe.describe()}", flush=True)
        r.execute()
        cp.cuda.runtime.deviceSynchronize()
        free()


def run_expandable(report: Report) -> None:
    import torch
    from redist import Redistribute, Slab

    start()
    a_h, want = problem()
    a = torch.from_numpy(a_h).cuda()
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        x = torch.empty(want.shape, dtype=torch.float64, device="cuda")
        for k in range(CALLS):
            r.execute(out=x)
        h = torch_host(x)
        report.check(np.array_equal(h, want), f"expandable_segments out= wrong{diff(h, want)}")
        if rank == 0:
            print(f"expandable_segments: {r._exe._outputs.text[:200]}", flush=True)


MODES = {"allocators": run_allocators, "capture": run_capture, "bad": run_bad, "expandable": run_expandable}


if __name__ == "__main__":
    sys.exit(run_report_mode(comm, MODES))
