# SPDX-License-Identifier: Apache-2.0
"""GPU worker for tests/gpu/test_cuda_tune.py (issue #47): ``mpiexec -n P python cuda_tune_worker.py``.

``RedistributeOptions(tune="measure")`` on cupy operands: every candidate (transport x signal x
kernel variant) is measured on the real GPU, then, with an injected clock (redist.engine.tune.timer),
each one is made the winner in turn and its results (engine-owned and a symmetric out=) are checked
bit for bit; a wisdom round trip answers without timing. Failures are reduced across ranks; rank 0
prints ALL OK. One rank per GPU, or several on one under REDIST_SHARED_GPU=1.
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


def main() -> int:
    import cupy as cp

    import redist
    from redist import Box, Redistribute, Slab
    from redist.engine import tune

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    dev = node.Get_rank() % cp.cuda.runtime.getDeviceCount()
    node.Free()
    cp.cuda.Device(dev).use()
    redist.initialize(device_id=dev)
    report = Report(comm)
    g = (24, 20, 16)
    for dtype in (np.float64, np.complex128):
        G = global_values(g, dtype)
        ib, ob = Slab.X.box(rank, g), Slab.Y.box(rank, g)
        a = cp.asarray(G[sl((ib.lower, ib.upper))])
        want = G[sl((ob.lower, ob.upper))]

        def planned(options, label):
            r = Redistribute(a, Box(ib.lower, ib.upper), Box(ob.lower, ob.upper), options=options)
            r.plan()
            got = cp.asnumpy(r.execute(sync_symmetric_memory=True))
            cp.cuda.runtime.deviceSynchronize()
            report.check(np.array_equal(got, want), f"{dtype.__name__} {label}: result differs")
            out = redist.allocate_symmetric_memory(want.shape, cp, dtype=dtype, make_symmetric=True)
            r.execute(out=out)
            cp.cuda.runtime.deviceSynchronize()
            report.check(np.array_equal(cp.asnumpy(out), want), f"{dtype.__name__} {label}: out= differs")
            tuning = r.tuning
            r.free()
            redist.free_symmetric_memory(out)
            return tuning

        tune.timer = None
        real = planned({"tune": "measure", "blocking": True}, "measured")
        if rank == 0:
            print(real.describe(), flush=True)
        labels = [label for label, t, _ in real.times if t is not None]
        report.check(len(labels) >= 3, f"too few candidates measured: {real.times}")
        for label in labels if dtype is np.float64 else labels[-1:]:  # every one wins once (float64)
            tune.timer = lambda x, dt, label=label: 1e-6 if x == label else 5e-6
            got = planned({"tune": "measure", "blocking": True}, label)
            report.check(got.chosen == label, f"chose {got.chosen}, {label} was fastest")
        redist.forget_wisdom()
        tune.timer = lambda x, dt: 1e-6 if x == labels[-1] else 5e-6
        planned({"tune": "wisdom", "blocking": True}, "wisdom: measured")
        tune.timer = None
        hit = planned({"tune": "wisdom", "blocking": True}, "wisdom: stored")
        report.check(hit.source == "wisdom" and hit.chosen == labels[-1], f"wisdom: {hit}")
    tune.timer = None
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
