# SPDX-License-Identifier: Apache-2.0
"""Property test of the contract under mpiexec: ``mpiexec -n P python property_worker.py [EXAMPLES]``.

Each example draws a valid problem (global shape, an input and an output decomposition, an
element type, one or two fields, an ``out=`` or not, the host method: every one) and, on one
rank (the *victim*), at most one corruption of the operand, the boxes, the options, the
``out=``, a field index or the call sequence. Then every rank builds, plans, executes once with
the first operand, rebinds a second one (other values, so that any write would show) and executes
with the corruption. The invariant, checked on every rank:

* every rank raises the same exception (class and message, naming the victim) or none does;
* when the corrupted call raises, no byte a user can see changed on any rank: the operand, the
  previous engine-owned result, and every rank's ``out=`` are bit for bit what they were;
* when nothing raises, every rank's result (or ``out=``) is right.

Hypothesis draws the same examples on every rank (``derandomize``, no database), and every
check is agreed across ranks before it fails, so all ranks follow the same search; shrinking is
off (a failing example is printed as drawn).
"""

from __future__ import annotations

import os
import sys
from collections import Counter

import numpy as np
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from mpi4py import MPI

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
from helpers import PUSH_ROUTES, Report, global_values, push_route, random_boxes, same_bits, sl  # noqa: E402

import redist  # noqa: E402
from redist import Box, Redistribute  # noqa: E402
from redist.engine.host import available_methods  # noqa: E402

comm = MPI.COMM_WORLD
rank, P = comm.Get_rank(), comm.Get_size()
METHODS = ("auto", "push") + available_methods()
DTYPES = (np.float64, np.int32, np.complex64, np.dtype([("a", "<i2"), ("b", "<f8")]))
#: (stage, name): where a corruption strikes. "construct": Redistribute(...) on the victim's
#: arguments; "execute": the second execute; "reset": reset_operand before it
CORRUPTIONS = (
    ("none", "none"),
    ("construct", "operand dtype"), ("construct", "operand shape"), ("construct", "box inverted"),
    ("construct", "box shifted"), ("construct", "box float"), ("construct", "options"),
    ("construct", "bad option"),
    ("reset", "reset dtype"), ("reset", "reset strides"), ("reset", "reset field index"),
    ("execute", "out dtype"), ("execute", "out shape"), ("execute", "out read-only"),
    ("execute", "out over operand"), ("execute", "out tuple length"), ("execute", "released"),
)


SEEN: Counter = Counter()  # (corruption, raised?) over the examples run


def agreed(ok: bool) -> bool:
    return comm.allreduce(bool(ok), MPI.LAND)


@st.composite
def problems(draw):
    """A valid problem and a corruption. The shape comes from hypothesis, the rest from a seed it
    draws (uniform over the methods and corruptions: hypothesis favours the first of a list)."""
    nd = draw(st.integers(1, 3))
    gshape = tuple(draw(st.integers(1, 5)) for _ in range(nd))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    ins, outs = random_boxes(gshape, P, rng), random_boxes(gshape, P, rng)
    method = METHODS[rng.integers(len(METHODS))]
    if method == "push":  # as planned (landing, small), messages, or stored straight into out=
        method = PUSH_ROUTES[rng.integers(len(PUSH_ROUTES))]
    nfields = 1 if method == "alltoallw" else int(rng.integers(1, 3))
    dtypes = [DTYPES[rng.integers(len(DTYPES))] for _ in range(nfields)]
    use_out = bool(rng.integers(2))
    stage, name = CORRUPTIONS[rng.integers(len(CORRUPTIONS))]
    victim = int(rng.integers(P))
    if name in ("out tuple length", "reset field index") and nfields == 1:
        name = "out dtype" if stage == "execute" else "reset dtype"
    empty_in = any(h <= l for l, h in zip(*ins[victim]))
    if name == "box shifted" and empty_in:  # an empty box moved stays a valid empty box
        name = "box inverted"
    return gshape, ins, outs, method, dtypes, use_out, stage, name, victim


def other(dt) -> np.dtype:
    return np.dtype(np.float32 if np.dtype(dt) != np.float32 else np.float64)


def corrupt_box(name, box, gshape):
    lo, hi = list(box[0]), list(box[1])
    if name == "box inverted":
        lo[-1], hi[-1] = hi[-1] + 1, lo[-1]
    elif name == "box shifted":
        lo[0], hi[0] = lo[0] + 1, hi[0] + 1
    else:  # box float
        lo[0] = lo[0] + 0.5
    return Box(tuple(lo), tuple(hi))


def run_example(report: Report, ex) -> None:
    gshape, ins, outs, method, dtypes, use_out, stage, name, victim = ex
    me = rank == victim
    label = f"{ex}"
    gs = [global_values(gshape, dt, salt=3 * f) for f, dt in enumerate(dtypes)]
    ops = [np.ascontiguousarray(g[sl(ins[rank])]) for g in gs]
    ops2 = [np.ascontiguousarray(global_values(gshape, dt, salt=3 * f + 1)[sl(ins[rank])])
            for f, dt in enumerate(dtypes)]
    wants = [g[sl(outs[rank])] for g in gs]
    wants2 = [global_values(gshape, dt, salt=3 * f + 1)[sl(outs[rank])] for f, dt in enumerate(dtypes)]
    fields = len(dtypes) > 1
    options = {"host_method": method.split("-")[0]}
    in_box, out_box = Box(*ins[rank]), Box(*outs[rank])
    operand = list(ops)
    if me and stage == "construct":
        if name == "operand dtype":
            operand[0] = np.zeros(operand[0].shape, other(dtypes[0]))
        elif name == "operand shape":
            operand[0] = np.zeros(tuple(n + 1 for n in operand[0].shape), operand[0].dtype)
        elif name.startswith("box"):
            in_box = corrupt_box(name, ins[rank], gshape)
        elif name == "options":
            options = {"host_method": "pack" if not method.startswith("pack") else "hybrid"}
        elif name == "bad option":
            options = {"host_method": "pish"}
    frozen = [(o, o.copy()) for o in operand + ops2]
    r = got = None
    outcome = None
    snap = []
    try:
        r = Redistribute(tuple(operand) if fields else operand[0], in_box, out_box, options=options)
        with push_route(method):
            r.plan()
        res = r.execute()
        res = res if fields else (res,)
        for x, w in zip(res, wants):
            report.check(same_bits(x, w), f"{label}: first execute wrong")
        r.reset_operand(tuple(ops2) if fields else ops2[0])
        xs = [np.full(w.shape, 0, w.dtype) for w in wants]
        for x in xs:
            x.view(np.uint8)[...] = 0x5A  # a sentinel pattern, seen in no result
        if stage == "reset":  # collective: every rank resets, the victim wrongly
            snap = [(x, x.copy()) for x in res + tuple(xs)]
            if me:
                o = ops2[0]
                axes = [ax for ax, n in enumerate(o.shape) if n > 1 and o.size]  # (an empty box has no strides)
                if name == "reset strides" and axes:  # reversed along an axis that has strides
                    bad = np.flip(o, axes[0])
                else:
                    bad = np.zeros(o.shape, other(dtypes[0]))
                field = len(dtypes) if name == "reset field index" else (0 if fields else None)
                r.reset_operand(o if name == "reset field index" else bad, field=field)
            else:
                r.reset_operand(tuple(ops2) if fields else ops2[0])
        out = tuple(xs) if fields else xs[0]
        if me and stage == "execute":
            flat = ops2[0].reshape(-1).view(np.uint8)
            nbytes = xs[0].nbytes
            if name == "out dtype":
                xs[0] = np.zeros(wants[0].shape, other(dtypes[0]))
            elif name == "out shape":
                xs[0] = np.zeros(wants[0].shape + (2,), dtypes[0])
            elif name == "out read-only":
                xs[0].setflags(write=False)
            elif name == "out over operand" and 0 < nbytes <= flat.nbytes:  # out= a view of the operand's bytes
                xs[0] = flat[:nbytes].view(dtypes[0]).reshape(wants[0].shape)
            elif name.startswith("out"):  # nothing to overlap (an empty box, a smaller operand)
                xs[0].setflags(write=False)
            elif name == "released":
                r.release_operand()
            out = tuple(xs) if fields else xs[0]
            if name == "out tuple length":
                out = tuple(xs) + (xs[0],)
        if not snap:
            snap = [(x, x.copy()) for x in res + tuple(xs)]
        got = r.execute(out=out if use_out or (me and stage == "execute" and name.startswith("out")) else None)
    except Exception as e:  # noqa: BLE001 -- compared across ranks below
        outcome = (type(e).__name__, str(e))
    every = comm.allgather(outcome)
    SEEN[(name, every[0][0] if every[0] else "ok")] += 1
    if not report.check(len(set(every)) == 1, f"{label}: the ranks disagree: {every}"):
        return
    if stage != "none" and every[0] is None:
        report.fail(f"{label}: the corruption {name!r} on rank {victim} raised nothing")
    if every[0] is not None:
        report.check(stage != "none", f"{label}: a valid problem raised {every[0]}")
        report.check(f"rank {victim}" in every[0][1], f"{label}: the message does not name rank {victim}: {every[0][1]}")
        for x, before in snap:  # nothing a user can see changed
            report.check(same_bits(x, before), f"{label}: a failed call changed a result or out= of rank {rank}")
    else:
        got = got if fields else (got,)
        for x, w in zip(got, wants2):
            report.check(same_bits(x, w), f"{label}: wrong result")
    for o, before in frozen:
        report.check(same_bits(o, before), f"{label}: an operand was written")
    if r is not None:
        r.free()


def main() -> int:
    examples = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    redist.initialize()
    report = Report(comm)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              phases=[Phase.explicit, Phase.generate], print_blob=False,
              suppress_health_check=list(HealthCheck))
    @given(ex=problems())
    def invariant(ex):
        run_example(report, ex)
        if not agreed(not report.items):  # agreed: every rank stops at the same example
            raise AssertionError(f"contract broken at {ex}")

    try:
        invariant()
    except AssertionError:
        pass
    if rank == 0 and not report.items:
        print(f"P={P}: {sum(SEEN.values())} examples, every rank raised the same error or none did, failed calls "
              f"changed nothing; {dict(sorted(SEEN.items()))}", flush=True)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
