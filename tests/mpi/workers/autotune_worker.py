# SPDX-License-Identifier: Apache-2.0
"""RedistributeOptions(tune=...) and wisdom on the host backend (run under mpiexec by
tests/mpi/test_autotune.py), with an injected clock (redist.engine.tune.timer) so that the winner is
chosen by the test: every candidate wins once on fuzzed problems and stays bit-exact; ranks that
alone would pick different winners pick the slowest rank's; wisdom export / import / forget, rank
0's wisdom deciding, a corrupt file, and REDIST_WISDOM across finalize()/initialize()."""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
import helpers  # noqa: E402
from helpers import Report, global_values, same_bits, sl  # noqa: E402

import redist
from redist import Box, Redistribute
from redist.engine import tune, wisdom

redist.initialize(device_id="cpu")
comm = redist.get_context().process_group.mpi_comm
rank, P = comm.Get_rank(), comm.Get_size()
calls: list[str] = []


def clock(costs):
    """tune.timer: candidate ``label`` counts ``costs(label)`` microseconds (and is logged in ``calls``)."""

    def timer(label, dt):
        calls.append(label)
        return costs(label) * 1e-6

    tune.timer = timer


def problem(rng):
    """A fuzzed problem: (global shape, dtype, input boxes, output boxes, result layout, fields)."""
    g = tuple(int(n) for n in rng.integers(3, 9, 3))
    dtype = rng.choice([np.float64, np.complex128, np.int32])
    ib = helpers.random_boxes(g, P, rng)
    ob = helpers.random_boxes(g, P, rng)
    layout = tuple(int(a) for a in rng.permutation(3)) if rng.random() < 0.5 else "auto"
    return g, dtype, ib, ob, layout, int(rng.integers(1, 3))


def run(report, prob, options, label):
    """Plan ``prob`` with ``options`` and check every field's result and an out= bit for bit."""
    g, dtype, ib, ob, layout, nfields = prob
    gs = [global_values(g, dtype, salt) for salt in range(nfields)]
    ops = [np.ascontiguousarray(G[sl(ib[rank])]) for G in gs]
    with Redistribute(
        tuple(ops) if nfields > 1 else ops[0],
        Box(*ib[rank]),
        Box(*ob[rank]),
        options=dict(options, result_layout=layout),
    ) as r:
        r.plan()
        res = r.execute()
        res = res if nfields > 1 else (res,)
        for f, G in enumerate(gs):
            report.check(same_bits(res[f], G[sl(ob[rank])]), f"{label}: field {f} differs")
        if nfields == 1:
            out = np.empty_like(res[0])
            report.check(same_bits(r.execute(out=out), gs[0][sl(ob[rank])]), f"{label}: out= differs")
        return r._exe.tuning, r.plan_description


def every_candidate_wins_once(report):
    rng = np.random.default_rng(47 + P)
    for k in range(3):
        prob = problem(rng)
        options = {"tune": "measure", "tune_out": k == 0}  # timed into an out=: push's out= routes take part
        if k == 0:
            prob = (*prob[:5], 1)
        clock(lambda label: 5)
        first, _ = run(report, prob, options, f"problem {k}")
        labels = [label for label, t, _ in first.times if t is not None]
        if k == 0 and P > 1:
            report.check({"push/land", "push/no-landing"} <= set(labels), f"no push out= routes: {labels}")
        report.check(
            first.chosen == first.times[0][0], f"problem {k}: a tie goes to the first candidate {first}"
        )
        for label in labels:
            clock(lambda x, label=label: 1 if x == label else 5)
            got, text = run(report, prob, options, f"problem {k} {label}")
            report.check(got.chosen == label, f"problem {k}: chose {got.chosen}, {label} was fastest")
            report.check(f"* {label}" in text, f"problem {k}: describe() does not mark {label}:\n{text}")


def slowest_rank_decides(report):
    prob = (
        (9, 8, 7),
        np.float64,
        helpers.slab_boxes((9, 8, 7), P, 0),
        helpers.slab_boxes((9, 8, 7), P, 1),
        "auto",
        1,
    )
    clock(lambda label: 5)
    labels = [
        label for label, t, _ in run(report, prob, {"tune": "measure"}, "labels")[0].times if t is not None
    ]
    winner = labels[-1]
    mine = labels[rank % (len(labels) - 1)]  # what this rank alone would pick (1 us)
    clock(lambda x: 1 if x == mine else 3 if x == winner else 5)
    got = run(report, prob, {"tune": "measure"}, "agreement")[0]
    every = comm.allgather(got.chosen)
    report.check(every == [winner] * P, f"ranks chose {every}, the slowest rank says {winner}")


def wisdom_round_trip(report):
    prob = (
        (8, 7, 6),
        np.complex128,
        helpers.slab_boxes((8, 7, 6), P, 2),
        helpers.slab_boxes((8, 7, 6), P, 0),
        "auto",
        1,
    )
    folder = comm.bcast(tempfile.mkdtemp(prefix="redist-wisdom-") if rank == 0 else None)
    path = os.path.join(folder, "w.json")
    redist.forget_wisdom()
    clock(lambda label: 2 if label == "pack" else 5)
    got = run(report, prob, {"tune": "wisdom"}, "wisdom, none stored")[0]
    report.check(got.source == "measured" and got.chosen == "pack", f"nothing stored: {got}")
    report.check(redist.export_wisdom(path) >= 1, "export_wisdom wrote nothing")
    redist.forget_wisdom()
    report.check(wisdom.entries() == [], "forget_wisdom left entries")
    report.check(redist.import_wisdom(path) >= 1, "import_wisdom read nothing")
    del calls[:]
    got = run(report, prob, {"tune": "wisdom"}, "wisdom, stored")[0]
    report.check(
        got.source == "wisdom" and got.chosen == "pack" and not calls, f"from wisdom: {got}, timed {calls}"
    )
    if rank == P - 1:  # this rank's wisdom says otherwise: rank 0's decides
        for k, e in wisdom.entries():
            wisdom.store(k, wisdom.Entry("datatype", e.times, e.spent, (("host_method", "datatype"),)))
    got = run(report, prob, {"tune": "wisdom"}, "rank 0's wisdom")[0]
    report.check(comm.allgather(got.chosen) == ["pack"] * P, f"rank 0's wisdom says pack, got {got.chosen}")
    if rank == 0:
        with open(path, "w") as f:
            f.write('{"format": "redist-wisdom", "version": 1, "entries": [{"key": ')
    report.check(redist.import_wisdom(path) == 0, "a corrupt file gave entries")
    redist.forget_wisdom()
    # REDIST_WISDOM: written by finalize(), read by initialize()
    os.environ["REDIST_WISDOM"] = path
    clock(lambda label: 2 if label == "datatype" else 5)
    run(report, prob, {"tune": "measure"}, "before finalize")
    redist.finalize()
    wisdom.forget()  # (local) nothing kept in memory: only the file
    redist.initialize(device_id="cpu")
    del calls[:]
    got = run(report, prob, {"tune": "wisdom"}, "after initialize")[0]
    report.check(got.source == "wisdom" and got.chosen == "datatype" and not calls, f"REDIST_WISDOM: {got}")
    del os.environ["REDIST_WISDOM"]


def released_before_plan(report):
    """An operand released before plan(): the candidates are timed on scratch operands, the same key."""
    g = (10, 9, 8)
    G = global_values(g, np.float64)
    ib, ob = helpers.slab_boxes(g, P, 0), helpers.slab_boxes(g, P, 1)
    a = np.ascontiguousarray(G[sl(ib[rank])])
    clock(lambda label: 5)
    with Redistribute(a, Box(*ib[rank]), Box(*ob[rank]), options={"tune": "measure"}) as r:
        r.release_operand()
        r.plan()
        r.reset_operand(a)
        report.check(same_bits(r.execute(), G[sl(ob[rank])]), "released before plan: result differs")
        report.check(r.tuning.source == "measured" and len(calls) > 0, f"released before plan: {r.tuning}")
    del calls[:]
    with Redistribute(a, Box(*ib[rank]), Box(*ob[rank]), options={"tune": "wisdom"}) as r:
        r.plan()  # the same key as with the operand bound
        report.check(
            r.tuning.source == "wisdom" and not calls, f"the released object's key differs: {r.tuning}"
        )


def timed_as_users_calls(report):
    """Host candidates are timed as a user's repeated calls run: through their compiled replays where
    the route has them (every route but alltoallw here), in Python otherwise; one and two fields."""
    from redist.engine.host import compiled

    if not compiled.available():
        print(f"timed_as_users_calls: skipped ({compiled.unavailable_reason()})", flush=True)
        return
    labels: dict[int, str] = {}
    replayed: dict[str, int] = {}
    saved = tune._Caller.__init__, compiled.Replays.run1, compiled.Replays.run

    def init(self, exe, label, replays):
        saved[0](self, exe, label, replays)
        if replays is not None:
            labels[replays.serial] = label

    def counted(run):
        def wrapped(self, *args):
            rc = run(self, *args)
            if rc == self.DONE:
                replayed[labels[self.serial]] = replayed.get(labels[self.serial], 0) + 1
            return rc

        return wrapped

    tune._Caller.__init__, compiled.Replays.run1, compiled.Replays.run = (
        init,
        counted(saved[1]),
        counted(saved[2]),
    )
    try:
        g = (9, 7, 6)
        for nfields in (1, 2):
            replayed.clear()
            prob = (g, np.float64, helpers.slab_boxes(g, P, 0), helpers.slab_boxes(g, P, 1), "auto", nfields)
            clock(lambda label: 5)
            got, _ = run(report, prob, {"tune": "measure"}, f"timed as users' calls, {nfields} field(s)")
            timed = [label for label, t, _ in got.times if t is not None]
            report.check(
                replayed.get("alltoallw", 0) == 0, f"{nfields} field(s): alltoallw replayed: {replayed}"
            )
            others = [label for label in timed if label != "alltoallw"]
            report.check(
                others and all(replayed.get(label, 0) > 0 for label in others),
                f"{nfields} field(s): candidates {timed} timed without their replays: {replayed}",
            )
    finally:
        tune._Caller.__init__, compiled.Replays.run1, compiled.Replays.run = saved


def main() -> int:
    report = Report(comm)
    for part in (
        every_candidate_wins_once,
        slowest_rank_decides,
        released_before_plan,
        wisdom_round_trip,
        timed_as_users_calls,
    ):
        try:
            part(report)
        except Exception:  # noqa: BLE001
            report.exception(part.__name__)
    tune.timer = None
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
