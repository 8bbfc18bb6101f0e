# SPDX-License-Identifier: Apache-2.0
"""engine.tune and engine.wisdom without MPI: ranks are threads (helpers.ThreadComm), the clock
is injected (tune.timer), so which candidate wins, ties, the budget, refusals and the wisdom path
are deterministic; wisdom files: round trip, corrupt, stale, foreign, a job killed while writing."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import types

import pytest
from helpers import run_ranks, slab_boxes
from redist.engine import tune, wisdom
from redist.engine.backend import Context, LowerOptions
from redist.engine.errors import NotSupportedError
from redist.engine.plan import make_plan

CANDS = [tune.Candidate(label, (("host_method", label),)) for label in ("push", "hybrid", "datatype", "pack")]
ENV = {"nranks": 3, "nodes": [0, 0, 0], "mpi": "MPICH Version: 4.2.0", "redist": "0.1.0"}


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    monkeypatch.setattr(tune, "timer", None)
    wisdom.forget()
    yield
    wisdom.forget()


def _measure(costs, budget=10.0, refuse=()):
    """Every rank measures CANDS; ``costs[r][label]`` is rank r's time of each of its calls (a list),
    or of its one call (and what it spent)."""

    def rank(comm, r):
        def run(c):
            if c.label in refuse:
                raise NotSupportedError(f"{c.label} cannot run here")
            calls = costs[r][c.label]
            calls = calls if isinstance(calls, list) else [calls]
            return calls, sum(calls)

        return tune.measure(comm, CANDS, run, budget)

    results, excs = run_ranks(len(costs), rank)
    assert not any(excs), excs
    assert all(res == results[0] for res in results), results  # the same answer on every rank
    return results[0]


def test_the_slowest_rank_decides_where_ranks_measure_different_winners():
    costs = [
        {"push": 1, "hybrid": 5, "datatype": 3, "pack": 9},  # rank 0 alone would pick push
        {"push": 6, "hybrid": 2, "datatype": 3, "pack": 9},  # rank 1 hybrid
        {"push": 1, "hybrid": 1, "datatype": 4, "pack": 9},
    ]
    chosen, table, _ = _measure(costs)
    assert chosen == "datatype"
    assert [(label, t) for label, t, _ in table] == [("push", 6), ("hybrid", 5), ("datatype", 4), ("pack", 9)]


def test_each_calls_slowest_rank_counts_not_the_slowest_ranks_median():
    # push's ranks take turns being slow: each rank's median is 1, but every call waits for a slow rank (4);
    # datatype is 2 on every rank in every call. The slowest rank's median would pick push.
    costs = [
        {"push": [4, 1, 1, 4, 1], "hybrid": 9, "datatype": [2] * 5, "pack": 9},
        {"push": [1, 4, 1, 1, 4], "hybrid": 9, "datatype": [2] * 5, "pack": 9},
        {"push": [1, 1, 4, 1, 1], "hybrid": 9, "datatype": [2] * 5, "pack": 9},
    ]
    chosen, table, _ = _measure(costs)
    assert chosen == "datatype"
    assert [(label, t) for label, t, _ in table][::2] == [("push", 4), ("datatype", 2)]


def test_ties_go_to_the_earlier_candidate():
    costs = [{"push": 3, "hybrid": 2, "datatype": 2, "pack": 2}] * 2
    assert _measure(costs)[0] == "hybrid"


def test_the_budget_stops_measuring_between_candidates(monkeypatch):
    monkeypatch.setattr(tune, "timer", lambda label, dt: dt)  # spent = what run() returns
    costs = [
        {"push": 4, "hybrid": 4, "datatype": 1, "pack": 1},
        {"push": 4, "hybrid": 5, "datatype": 1, "pack": 1},
    ]
    chosen, table, spent = _measure(costs, budget=10)
    assert [note for _, _, note in table] == [
        "",
        "",
        "",
        "skipped: budget",
    ]  # max(4, 4) + max(4, 5) + 1 >= 10 before pack
    assert chosen == "datatype" and spent == 10
    chosen, table, _ = _measure(costs, budget=1e-9)  # the first candidate is always measured
    assert chosen == "push" and [t is None for _, t, _ in table] == [False, True, True, True]


def test_refused_candidates_are_recorded_and_skipped():
    costs = [{"push": 1, "hybrid": 2, "datatype": 3, "pack": 4}] * 2
    chosen, table, _ = _measure(costs, refuse=("push",))
    assert chosen == "hybrid" and table[0][1] is None and table[0][2].startswith("refused: push cannot run")
    assert _measure(costs, refuse=tuple(c.label for c in CANDS))[0] is None


def _interleaved(costs, budget=10.0, refuse=(), freed=None):
    """Every rank measures CANDS side by side (tune.measure_interleaved) with the clock injected:
    ``costs[r][label]`` microseconds per call of rank r (a list: its calls' in turn, repeated);
    ``freed`` collects the freed labels."""
    local = threading.local()
    turns = [
        {k: itertools.cycle(v if isinstance(v, list) else [v]) for k, v in mine.items()} for mine in costs
    ]
    tune.timer = lambda label, dt: next(turns[local.rank][label]) * 1e-6

    def rank(comm, r):
        local.rank = r

        def lower_one(c):
            if c.label in refuse:
                raise NotSupportedError(f"{c.label} cannot run here")
            exe = _Exe(c.label, [])
            exe.free = lambda: freed.append(c.label) if freed is not None else None
            return exe

        return tune.measure_interleaved(comm, CANDS, lower_one, [], list, budget)

    results, excs = run_ranks(len(costs), rank)
    assert not any(excs), excs
    assert all(res[:2] == results[0][:2] for res in results), results  # the same answer on every rank
    return results[0]


def test_side_by_side_the_slowest_rank_decides_and_every_executable_is_freed():
    costs = [
        {"push": 1, "hybrid": 5, "datatype": 3, "pack": 9},
        {"push": 6, "hybrid": 2, "datatype": 3, "pack": 9},
    ]
    freed = []
    chosen, table, _ = _interleaved(costs, refuse=("pack",), freed=freed)
    assert chosen == "datatype"  # max(1, 6), max(5, 2), max(3, 3): 3 us
    assert [(label, None if t is None else round(t * 1e6, 6)) for label, t, _ in table] == [
        ("push", 6),
        ("hybrid", 5),
        ("datatype", 3),
        ("pack", None),
    ]
    assert table[3][2].startswith("refused: pack cannot run")
    assert sorted(freed) == sorted(["push", "hybrid", "datatype"] * 2)  # both ranks', after timing


def test_side_by_side_each_calls_slowest_rank_counts():
    costs = [  # push: every call has one rank at 4 us (each rank's median 1); datatype 2 us everywhere
        {"push": [4, 1, 1], "hybrid": 9, "datatype": 2, "pack": 9},
        {"push": [1, 4, 1], "hybrid": 9, "datatype": 2, "pack": 9},
        {"push": [1, 1, 4], "hybrid": 9, "datatype": 2, "pack": 9},
    ]
    chosen, table, _ = _interleaved(costs)
    assert chosen == "datatype" and round(table[0][1] * 1e6, 6) == 4


def test_side_by_side_the_budget_bounds_the_rounds_and_the_lowerings():
    costs = [{"push": 1000, "hybrid": 1000, "datatype": 1000, "pack": 1000}] * 2  # 1 ms per call
    chosen, table, spent = _interleaved(costs, budget=0.02)  # 2 warm-up rounds (8 ms), then 3 rounds
    assert chosen == "push" and all(t is not None for _, t, _ in table)
    assert spent == pytest.approx(0.008 + 0.012)
    chosen, table, spent = _interleaved(costs, budget=1e-9)  # still one round
    assert spent == pytest.approx(0.008 + 0.004)
    assert _interleaved(costs, refuse=tuple(c.label for c in CANDS))[0] is None


class _Exe:
    def __init__(self, label, calls):
        self.label, self.calls = label, calls

    def bind_input(self, buf, field=0):
        assert buf.ptr and field == 0

    def execute(self, stream=0):
        self.calls.append(self.label)

    def replay(self, forget):
        return None  # no compiled replay: every call through execute()

    def free(self):
        pass


def _lower_everywhere(mode, costs, calls, labels=("push", "hybrid", "pack"), listed=None):
    """tune.lower on every rank over a fake backend whose candidates are ``labels`` (any other
    method: refused on every rank, as a backend refuses); ``listed`` counts its candidates() calls."""
    local = threading.local()

    def fake_lower(calls, o):
        if o.host_method not in labels:
            raise NotSupportedError(f"{o.host_method} cannot run here")
        return _Exe(o.host_method, calls)

    def candidates(plan, ctx, o):
        if listed is not None:
            listed.append(1)
        return [tune.Candidate(m, (("host_method", m),)) for m in labels]

    def rank(comm, r):
        local.rank = r
        module = types.SimpleNamespace(
            candidates=candidates, lower=lambda plan, ctx, o: fake_lower(calls[r], o)
        )
        ctx = Context(comm, tune_environment=dict(ENV, nranks=len(costs), nodes=[0] * len(costs)))
        boxes = slab_boxes((6, 5, 4), len(costs), 0)
        plan = make_plan(r, boxes, slab_boxes((6, 5, 4), len(costs), 1), itemsize=8)
        return tune.lower(plan, ctx, LowerOptions(tune=mode, signature="float64"), module)

    tune.timer = lambda label, dt: costs[local.rank][label] * 1e-6  # microseconds: well within the budget
    results, excs = run_ranks(len(costs), rank)
    assert not any(excs), excs
    return results


def test_repetitions_fill_the_slice_within_bounds():
    assert tune.repetitions(1.0) == tune.REPS  # long calls: the minimum
    assert tune.repetitions(tune.SLICE / 40) == 40  # short ones: about SLICE seconds of calls
    assert tune.repetitions(1e-9) == tune.repetitions(0.0) == tune.MAX_REPS


def test_lower_measures_stores_and_wisdom_answers_without_timing():
    costs = [{"push": 3, "hybrid": 2, "pack": 4}, {"push": 3, "hybrid": 5, "pack": 4}]
    calls = [[], []]
    exes = _lower_everywhere("wisdom", costs, calls)
    assert [e.label for e in exes] == ["push", "push"]  # max(3, 3) < max(2, 5)
    # host candidates side by side, one call of each per round, the same rounds on every rank: the
    # repetitions of the slowest candidate's (slowest rank's) warm-up call
    rounds = tune.WARMUP + tune.repetitions(max(max(c.values()) for c in costs) * 1e-6)
    assert calls[0] == calls[1] == ["push", "hybrid", "pack"] * rounds
    rec = exes[0].tuning
    assert rec.source == "measured" and rec.chosen == "push" and "* push" in rec.describe()
    assert len(wisdom.entries()) == 1
    calls[:] = [[], []]
    listed = []
    exes = _lower_everywhere(
        "wisdom", costs, calls, listed=listed
    )  # the stored answer: nothing timed or listed
    assert calls == [[], []] and [e.tuning.source for e in exes] == ["wisdom", "wisdom"] and not listed
    assert exes[1].tuning.chosen == "push" and "from wisdom" in exes[1].tuning.describe()
    exes = _lower_everywhere("measure", costs, calls)  # measure always measures
    assert calls[0] and exes[0].tuning.source == "measured"


def test_a_stored_choice_the_backend_refuses_here_is_measured_again():
    costs = [{"push": 3, "hybrid": 2, "pack": 4}] * 2
    calls = [[], []]
    _lower_everywhere("wisdom", costs, calls)
    ((k, e),) = wisdom.entries()
    wisdom.store(k, dataclasses.replace(e, choice="alltoallw", fields=(("host_method", "alltoallw"),)))
    calls[:] = [[], []]
    exes = _lower_everywhere("wisdom", costs, calls)
    assert exes[0].tuning.source == "measured" and exes[0].label == "hybrid" and calls[0]


def test_cuda_candidates_transport_signal_kernel_variant():
    from redist.engine.cuda.lowering import candidates

    def labels(shared, **kw):
        rt = types.SimpleNamespace(shared_gpu=shared, nranks=2)
        return [
            c.label
            for c in candidates(None, types.SimpleNamespace(cuda=rt), LowerOptions(backend="cuda", **kw))
        ]

    every = labels(False)
    assert every[0] == "auto/epoch/v16" and len(every) == len(set(every)) == 2 * 2 * 3
    assert all(label.split("/")[1] == "epoch" for label in labels(True))  # no barrier with a shared GPU
    assert {label.split("/")[0] for label in labels(False, transport="put")} == {"put"}
    cand = tune.Candidate(
        "put/barrier/v4", (("transport", "put"), ("signal", "barrier"), ("vector_bytes", 4))
    )
    opts = cand.options(LowerOptions(backend="cuda", tune="measure"))
    assert (opts.transport, opts.signal, opts.vector_bytes, opts.tune) == ("put", "barrier", 4, "estimate")


# --- wisdom files ---------------------------------------------------------------------------


def _key(**kw):
    return dict({"problem": {"in_boxes": [[[0], [4]]]}, "backend": "host", "gpu": ""}, **ENV, **kw)


def _stored():
    wisdom.store(
        _key(),
        wisdom.Entry(
            "pack",
            (("push", 2e-5, ""), ("pack", 1e-5, ""), ("hybrid", None, "x")),
            0.1,
            (("host_method", "pack"),),
        ),
    )
    return wisdom.dumps()


def test_wisdom_round_trip():
    text = _stored()
    kept, dropped = wisdom.loads(text, ENV)
    assert dropped == [] and kept == wisdom.entries()
    wisdom.forget()
    assert wisdom.lookup(_key()) is None
    for k, e in kept:
        wisdom.store(k, e)
    assert wisdom.lookup(dict(reversed(list(_key().items())))).choice == "pack"  # key order is irrelevant


@pytest.mark.parametrize(
    "text, why",
    [
        ("", "corrupt"),
        ('{"format": "redist-wisdom", "version": 1, "entr', "corrupt"),
        ("[1, 2]", "not a redist"),
        ('{"format": "fftw"}', "not a redist"),
        ('{"format": "redist-wisdom", "version": 99, "entries": []}', "version 99"),
        ('{"format": "redist-wisdom", "version": 1, "entries": {}}', "corrupt"),
    ],
)
def test_a_corrupt_wisdom_file_gives_nothing_and_a_reason(text, why):
    kept, dropped = wisdom.loads(text, ENV)
    assert kept == [] and len(dropped) == 1 and why in dropped[0]


def test_stale_foreign_and_malformed_entries_are_dropped():
    doc = json.loads(_stored())
    good = doc["entries"][0]
    stale = dict(good, key=dict(good["key"], redist="0.0.9"))
    foreign = dict(good, key=dict(good["key"], mpi="Open MPI v4.1.4"))
    odd = [
        {"key": 3},
        dict(good, times="xx"),
        dict(good, fields=[["logger", "x"]]),
        dict(good, fields=[["vector_bytes", "16"]]),
    ]  # an unknown field, a mistyped one
    doc["entries"] += [stale, foreign, *odd]
    kept, dropped = wisdom.loads(json.dumps(doc), ENV)
    assert len(kept) == 1 and kept[0][1].fields == (("host_method", "pack"),)
    assert "stale" in dropped[0] and "foreign" in dropped[1], dropped
    assert len(dropped) == 6 and all("corrupt" in why for why in dropped[2:]), dropped


def test_write_atomic_replaces_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "w.json"
    path.write_text("old")
    wisdom.write_atomic(str(path), _stored())
    assert wisdom.loads(path.read_text(), ENV)[0] and os.listdir(tmp_path) == ["w.json"]


@pytest.mark.parametrize("where", ["write", "fsync", "replace"])
def test_a_job_killed_while_writing_wisdom_leaves_the_old_file(tmp_path, where):
    """The writer dies (SIGKILL) half-way through its write, before its fsync, or before its rename:
    the file is the old one, whole, and a reader of the directory is not confused by the leftover."""
    path = tmp_path / "w.json"
    old = _stored()
    path.write_text(old)
    code = f"""
import os, signal
from redist.engine import wisdom
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if {where!r} == "write":
    real = os.fdopen
    def fdopen(fd, mode):
        f = real(fd, mode)
        class Half:
            def __enter__(self): return self
            def __exit__(self, *a): return False
            def write(self, text): f.write(text[: len(text) // 2]); f.flush(); die()
        return Half()
    os.fdopen = fdopen
elif {where!r} == "fsync":
    os.fsync = die
else:
    os.replace = die
wisdom.store({{"k": 1}}, wisdom.Entry("hybrid", (("hybrid", 1.0, ""),) * 5000, 1.0))
wisdom.write_atomic({str(path)!r}, wisdom.dumps())
"""
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert path.read_text() == old
    assert len(os.listdir(tmp_path)) == 2  # the dead writer's temporary is left beside it
    kept, dropped = wisdom.loads(path.read_text(), ENV)
    assert len(kept) == 1 and not dropped


def test_the_info_log_shows_the_table(caplog):
    import logging

    logger = logging.getLogger("redist-tune-test")
    local = threading.local()
    costs = {"push": 3, "hybrid": 2}

    def rank(comm, r):
        local.rank = r
        module = types.SimpleNamespace(
            candidates=lambda plan, ctx, o: [tune.Candidate(m, (("host_method", m),)) for m in costs],
            lower=lambda plan, ctx, o: _Exe(o.host_method, []),
        )
        ctx = Context(comm, tune_environment=dict(ENV, nranks=1, nodes=[0]))
        plan = make_plan(0, [((0,), (4,))], [((0,), (4,))], itemsize=8)
        return tune.lower(plan, ctx, LowerOptions(tune="measure", logger=logger), module)

    tune.timer = lambda label, dt: costs[label] * 1e-6
    with caplog.at_level(logging.INFO, logger="redist-tune-test"):
        (exe,), excs = run_ranks(1, rank)
    assert not any(excs) and exe.label == "hybrid"
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "tune='measure': chose hybrid" in text and "* hybrid" in text and "push" in text, text


class _Replays:
    """compiled.Replays as _Caller uses it: ``script`` is what each run returns (then DONE once
    offered, NONE before)."""

    NONE, DONE, RESUME, FAILED = -1, 0, 1, 2

    def __init__(self, script=()):
        self.script, self.offered, self.forgot, self.runs = list(script), [], 0, []

    def run1(self, obj, operand, key):
        self.runs.append((operand, key))
        return self.script.pop(0) if self.script else (self.DONE if self.offered else self.NONE)

    def run(self, objs, operands, keys):
        return self.run1(objs[0], tuple(operands), tuple(keys))

    def offer(self, words, keys):
        self.offered.append(list(keys))
        return True

    def forget(self):
        self.forgot += 1
        self.offered.clear()

    def what_was_heard(self):
        return 0, [2]

    def error(self):
        return "MPI_Startall: MPI_ERR_OTHER"


class _ReplayingExe(_Exe):
    def __init__(self, label, calls, words=True):
        super().__init__(label, calls)
        self.words, self.resumed, self.outs, self.asked = words, [], [], 0

    def bind_input(self, buf, field=0):
        assert buf.ptr

    def bind_output(self, buf, field=0):
        self.outs.append(buf)

    def replay(self, forget):
        self.asked += 1
        return [1, 2, 3] if self.words else None

    def resume(self, code, heard):
        self.resumed.append((code, heard))


def _buf():
    from redist.engine.buffer import Buffer

    return Buffer(4096, (2,), (1,), 8)


def test_a_candidate_is_timed_through_its_replay_after_its_first_call():
    calls, replays = [], _Replays()
    caller = tune._Caller(_ReplayingExe("push", calls), "push", replays)
    caller.bind([_buf()], [_buf()])
    for _ in range(5):
        caller()
    assert calls == ["push"]  # Python once, then the replay
    assert replays.offered == [[1]] and replays.runs == [(4096, 1)] * 5  # the out= binding's key
    caller.free()
    assert replays.forgot == 1


def test_a_route_without_words_stays_in_python():
    calls, replays = [], _Replays()
    caller = tune._Caller(_ReplayingExe("alltoallw", calls, words=False), "alltoallw", replays)
    caller.bind([_buf(), _buf()], [])
    for _ in range(4):
        caller()
    assert calls == ["alltoallw"] * 4 and replays.runs == [((4096, 4096), (0, 0))]  # asked once
    assert caller.replays is None and replays.forgot == 1


def test_a_replay_that_hears_a_peer_resumes_in_python_and_a_failure_raises():
    from redist.engine.errors import CommunicationError

    calls = []
    exe = _ReplayingExe("hybrid", calls)
    caller = tune._Caller(exe, "hybrid", _Replays([_Replays.NONE, _Replays.RESUME]))
    caller.bind([_buf()], [])
    caller()
    caller()
    assert calls == ["hybrid"] and exe.resumed == [(0, [2])]
    caller = tune._Caller(exe, "hybrid", _Replays([_Replays.FAILED]))
    caller.bind([_buf()], [])
    with pytest.raises(CommunicationError, match="MPI_ERR_OTHER"):
        caller()


def test_words_that_keep_going_are_offered_a_bounded_number_of_times():
    calls, replays = [], _Replays()
    exe = _ReplayingExe("pack", calls)
    caller = tune._Caller(exe, "pack", replays)
    caller.bind([_buf()], [])
    for _ in range(10):
        replays.offered.clear()  # the executable forgot its words before every call
        caller()
    assert len(calls) == 10 and exe.asked == tune._OFFERS  # offered _OFFERS times, then Python for good
    assert caller.replays is None and len(replays.runs) == tune._OFFERS + 1
