# SPDX-License-Identifier: Apache-2.0
"""Permuted results on one GPU for several element sizes: (0, 2, 1) / dense, P = 1.

    python3 perf/bench_permuted_sizes.py LABEL

float32, complex64 (256³, 512³, and 255 x 257 x 253, whose rows are not 16-byte aligned) and
complex128 (256³); medians of 3 x 9 repetitions of 20 calls (CUDA events), the permuted result
checked against the operand. LABEL names the tree in the output (perf/history/issue15.md, "4-byte elements
in quads", ran it from the root of each tree compared).
"""

from __future__ import annotations

import math
import sys

import numpy as np
from cuda_timing import per_iteration_us

CASES = ((np.float32, [(256,) * 3, (512,) * 3, (255, 257, 253)]),
         (np.complex64, [(256,) * 3, (512,) * 3, (255, 257, 253)]),
         (np.complex128, [(256,) * 3]))


def main(label: str) -> None:
    import cupy as cp
    import redist
    from redist import BlockNonCyclic, ProcessGrid

    redist.initialize(0)
    stream = cp.cuda.get_current_stream()
    one = BlockNonCyclic(ProcessGrid((1, 1, 1)))
    for dtype, shapes in CASES:
        cells = []
        for shape in shapes:
            index = cp.arange(math.prod(shape), dtype=cp.float64).reshape(shape)
            g = (index + 1j * index[::-1]).astype(dtype) if np.dtype(dtype).kind == "c" else index.astype(dtype)
            dense = redist.Redistribute(g, one, one)
            perm = redist.Redistribute(g, one, one, options={"result_layout": (0, 2, 1)})
            dense.plan()
            perm.plan()
            t_dense, t_perm = [], []
            for _ in range(3):
                t_dense.append(per_iteration_us(dense.execute, stream, iters=20, reps=9, warm=5))
                t_perm.append(per_iteration_us(perm.execute, stream, iters=20, reps=9, warm=5))
            td, tp = sorted(t_dense)[1], sorted(t_perm)[1]
            res = perm.execute()
            stream.synchronize()
            ok = bool((res == g).all()) and res.strides[1] == g.itemsize
            cells.append(f"{'x'.join(map(str, shape))}: {td:.1f}/{tp:.1f} us {tp / td:.3f} ok={ok}")
            dense.free()
            perm.free()
        print(f"{label:4s} {np.dtype(dtype).name:10s}", "; ".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
