# SPDX-License-Identifier: Apache-2.0
"""Why redist puts no CUDA user object into the user's graph: the same captured step with and
without one (perf/history/issue21.md).

    mpiexec -n 1 python perf/bench_user_object.py

A step (producer ``a[...] += 1`` -> redist's copy kernel launched straight into the capture ->
consumer copy; P = 1, n³ complex64) is captured twice per variant, once plain and once with a user
object moved into the graph (``cuUserObjectCreate`` with libc's ``free`` on a NULL pointer as its
no-op destructor, ``cuGraphRetainUserObject(..., CU_GRAPH_USER_OBJECT_MOVE)``: what tracking the
graph's lifetime would need). Prints, per variant, the GPU µs per replay (CUDA events, median of 9
x 100) and the host ms of 1000 back-to-back ``Graph.launch`` calls (a launch that waits for the
previous one shows as the GPU time).
"""

from __future__ import annotations

import ctypes
import time

from cuda_timing import per_iteration_us, start_gpu  # perf/cuda_timing.py (the script's folder is on sys.path)


def attach_user_object(graph: int) -> None:
    """A user object with a no-op destructor, its one reference moved into ``graph``."""
    from cuda.bindings import driver

    libc = ctypes.CDLL(None)
    cuda = ctypes.CDLL("libcuda.so.1")
    obj = ctypes.c_void_p(0)
    noop = ctypes.cast(libc.free, ctypes.c_void_p)  # free(NULL) does nothing
    rc = cuda.cuUserObjectCreate(ctypes.byref(obj), ctypes.c_void_p(0), noop, 1,
                                 int(driver.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC))
    assert rc == 0, rc
    rc = cuda.cuGraphRetainUserObject(ctypes.c_void_p(graph), obj, 1,
                                      int(driver.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE))
    assert rc == 0, rc


def main():
    import cupy as cp

    import redist
    from redist import Slab

    ctx, _, _, _, stream = start_gpu()
    drv = ctx.cuda.driver
    for n in (32, 256):
        a = cp.ones((n, n, n), dtype=cp.complex64)
        out = cp.empty_like(a)
        r = redist.Redistribute(a, Slab.X, Slab.Y)
        r.plan()

        def step():
            with stream:
                a[...] += 1
                for kern in r._exe._kernels.values():  # P = 1: the launch list is one copy kernel
                    kern.launch.launch(stream.ptr)
                out[...] = r._result

        res = {}
        for name in ("plain", "user object", "plain", "user object"):
            with stream:
                stream.begin_capture()
                step()
                if name == "user object":
                    attach_user_object(drv.capture_info(stream.ptr)[2])
                graph = stream.end_capture()
            gpu = per_iteration_us(lambda: graph.launch(stream=stream), stream, iters=100, reps=9, warm=10)
            t0 = time.perf_counter()
            for _ in range(1000):
                graph.launch(stream=stream)
            host = (time.perf_counter() - t0) * 1e3
            stream.synchronize()
            res.setdefault(name, []).append(f"{gpu:.2f} µs/replay, {host:.2f} ms/1000 launches")
        print(n, res, flush=True)
        r.free()


if __name__ == "__main__":
    main()
