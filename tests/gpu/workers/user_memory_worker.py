# SPDX-License-Identifier: Apache-2.0
"""GPU out= in ordinary device memory (issue #44): ``mpiexec -n P python user_memory_worker.py MODE``.

Modes (tests/gpu/test_user_memory_gpu.py):

* ``allocators``: execute(out=X) bit-exact for X from torch's caching allocator, cupy's default
  pool, cudaMalloc and cudaMallocAsync (its default pool: not IPC capable, the landing route), a
  symmetric out= on rank 0 beside private ones elsewhere, strided (the interior of a ghosted torch
  tensor), permuted (result_layout) and several fields; each checked over many calls;
* ``capture``: a step captured by torch (operand += 1, execute(out=torch tensor), acc += out)
  replayed 1,000 times: acc checks every replay; the same for the cudaMallocAsync (landing) out=;
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
from helpers import Report, global_values, sl  # noqa: E402

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
                    ok = got is x and np.array_equal(torch_host(x), want if k % 2 else want2)
                    report.check(ok, f"{name}: call {k} wrong")
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
                    report.check(
                        np.array_equal(cupy_host(ptr, want.shape), want if k % 2 else want2),
                        f"{name}: call {k} wrong",
                    )
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
    import torch
    from redist import Redistribute, Slab

    start()
    a_h, want = problem()
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
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, stream=s):
                a.add_(1.0)
                r.execute(out=x, stream=s)
                acc.add_(xr)
            torch.cuda.synchronize()
            for _ in range(REPLAYS):
                g.replay()
            torch.cuda.synchronize()
            n = REPLAYS
            report.check(np.array_equal(torch_host(x), want + n), f"{name}: out= after {n} replays wrong")
            report.check(
                np.array_equal(torch_host(acc), n * want + n * (n + 1) / 2),
                f"{name}: the sum over {n} replays is wrong (a stale or partial replay)",
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
        report.check(np.array_equal(cupy_host(ptr, want.shape), want), "cudaMalloc out= wrong")
        cp.cuda.runtime.deviceSynchronize()
        free()
        ptr2, free2 = raw_device(want.nbytes, "malloc")
        same = comm.allgather(ptr2 == ptr)
        if rank == 0:
            print(
                f"reallocated at the same address on ranks {[i for i, s in enumerate(same) if s]}", flush=True
            )
        ca *= 2
        x2 = raw_array(ptr2, want.shape)
        r.execute(out=x2)
        report.check(np.array_equal(cupy_host(ptr2, want.shape), want * 2), "reallocated out= wrong")
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
        ca //= 2
        report.check(np.array_equal(cp.asnumpy(r.execute()), want), "the result after the refusals")
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
        report.check(np.array_equal(cupy_host(ptr, want.shape), want), "raw cudaMalloc out= wrong")
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
        report.check(np.array_equal(torch_host(x), want), "expandable_segments out= wrong")
        if rank == 0:
            print(f"expandable_segments: {r._exe._outputs.text[:200]}", flush=True)


MODES = {"allocators": run_allocators, "capture": run_capture, "bad": run_bad, "expandable": run_expandable}


def main() -> int:
    report = Report(comm)
    try:
        MODES[sys.argv[1]](report)
    except Exception:  # noqa: BLE001
        report.exception(sys.argv[1])
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
