# SPDX-License-Identifier: Apache-2.0
"""Several fields in one exchange: u, v, w (float64) and p (float32) move together every step.

A tuple operand makes one plan and one exchange for all four fields (host: one round of
messages, the small parts of every field packed into one message per peer). Each step the
fields get new values on X-slabs, move to Y-slabs, and every element of every field is checked
against the value the whole array would have there. Even steps use the engine-owned results
(persistent: overwritten by the next ``execute()``), odd steps ``execute(out=(...))``, which
writes every field into an array of your own (a None entry would leave that field to the engine).

    mpiexec -n 4 python examples/several_fields.py              # 48 x 40 x 32, 5 steps
    mpiexec -n 3 python examples/several_fields.py --shape 9 7 5 --steps 2
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

import redist
from redist import Redistribute, Slab

DTYPES = {"u": np.float64, "v": np.float64, "w": np.float64, "p": np.float32}


def field(name: str, shape: tuple[int, ...], box: redist.Box, step: int) -> np.ndarray:
    """``box`` of field ``name`` at ``step``: each element holds its global index, field and step."""
    index = np.indices(shape)[(slice(None),) + tuple(slice(a, b) for a, b in zip(box.lower, box.upper))]
    flat = np.ravel_multi_index(tuple(index), shape)
    return (flat + 1000.0 * list(DTYPES).index(name) + 0.5 * step).astype(DTYPES[name])


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=3, default=[48, 40, 32])
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args()
    shape = tuple(args.shape)

    redist.initialize()
    comm = MPI.COMM_WORLD  # the processes redist.initialize() runs on by default
    rank = comm.Get_rank()
    x_box, y_box = Slab.X.box(rank, shape), Slab.Y.box(rank, shape)
    fields = tuple(field(name, shape, x_box, 0) for name in DTYPES)
    outs = tuple(np.empty(y_box.shape(), dtype) for dtype in DTYPES.values())  # arrays of my own

    wrong = 0
    with Redistribute(fields, Slab.X, Slab.Y) as move:  # collective; every field validated on every rank
        move.plan()
        for step in range(args.steps):
            fields = tuple(field(name, shape, x_box, step) for name in DTYPES)  # the solver's new values
            move.reset_operand_unchecked(fields)  # every field at once: no checks
            u, v, w, p = move.execute(out=outs) if step % 2 else move.execute()  # odd steps: into outs
            for name, got in zip(DTYPES, (u, v, w, p)):
                wrong += int(not np.array_equal(got, field(name, shape, y_box, step)))
    wrong = comm.allreduce(wrong)
    if rank == 0:
        print(
            f"several_fields: {comm.Get_size()} ranks, global {shape}, {len(DTYPES)} fields, {args.steps} steps, "
            f"{wrong} wrong results"
        )
    if wrong:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
