# SPDX-License-Identifier: Apache-2.0
"""Measured choice of a backend's route (``RedistributeOptions.tune``, issue #47).

:func:`lower` is what :func:`redist.engine.backend.lower` calls when ``options.tune`` is not
"estimate". The backend module names its *candidates* (``candidates(plan, ctx, options)``: the
same list in the same order on every rank, the heuristic's own pick first); each candidate is a
set of :class:`~redist.engine.backend.LowerOptions` fields (the host method; on GPUs transport x
signal x kernel variant). Every candidate is lowered, warmed up (:data:`WARMUP` calls) and timed
(:func:`repetitions`: :data:`REPS` calls, more for short calls, about :data:`SLICE` seconds of them)
on every rank, each call as a user's repeated call of that route runs (host routes: their
compiled replays in C where they have them, :class:`_Caller`) -- host candidates side by side, one call of each per round
(:func:`measure_interleaved`, while their results fit :data:`INTERLEAVE_BYTES`), device ones in
order (:func:`measure`); the candidate's time is the *median of its calls' slowest rank* (every
rank gathers every rank's times: a collective call takes as long as its slowest rank, and the
median over calls of that is what perf/bench_tune.py's loop and a user's loop see, where the
slowest rank's own median ranks a route whose ranks take turns being slow as faster than its
calls are), the minimum wins (ties: the earlier candidate), and the
choice every rank lowers is rank 0's, so ranks never pick different routes. A candidate the
backend refuses (raised on every rank by its lowering) is recorded as refused. The time spent is
bounded by ``options.tune_budget`` seconds (the slowest rank's, checked between candidates -- the
first candidate is always measured -- and, side by side, bounding the rounds after the warm-up:
at least one); candidates left when it runs out are recorded as skipped.

"wisdom" first asks :mod:`.wisdom` for a stored answer (rank 0's, broadcast) and measures only
when none matches; "measure" and "wisdom" both store what they measured. The executable carries
the record as ``exe.tuning`` (a :class:`Tuning`: what was measured and chosen, ``describe()``).

Nothing here imports MPI: the communicator is anything with ``Get_rank()`` and ``allgather``.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from . import backend, collective, wisdom
from .backend import TUNE_MODES
from .buffer import Buffer, byte_extent
from .errors import CommunicationError, InvalidValueError, NotSupportedError
from .plan import FusedPlan, Plan

if TYPE_CHECKING:
    from .backend import Context, Executable, LowerOptions
    from .host.compiled import Replays

__all__ = ["Candidate", "INTERLEAVE_BYTES", "MAX_REPS", "REPS", "SLICE", "TUNE_MODES", "Tuning", "WARMUP", "lower",
           "measure", "measure_interleaved", "repetitions"]

WARMUP = 2  # untimed calls per candidate (first-call set-up: graphs, replays, request caches)
REPS = 9  # timed calls per candidate at least; its time is the median of these (each call's slowest rank's)
MAX_REPS = 200  # and at most: short calls are timed over about SLICE seconds each (repetitions)
SLICE = 2e-3  # seconds of timed calls a short candidate gets (its median is noise below that)
INTERLEAVE_BYTES = 1 << 28  # host candidates are timed side by side while all their results fit this (per rank;
#: each also holds staging, up to about twice its results, and push's shared segments)
_OFFERS = 3  # words offered per candidate (as Redistribute offers its bindings')
DEFAULT_BUDGET = 10.0  # seconds of measuring per plan() (RedistributeOptions.tune_budget)

#: tests inject a deterministic clock here: ``timer(label, seconds) -> seconds`` is what one timed
#: call of candidate ``label`` counts for (``seconds``: what it took); None: the measured time
timer: Callable[[str, float], float] | None = None


@dataclass(frozen=True)
class Candidate:
    """One route a backend can take: a label (``"push"``, ``"put/epoch/v16"``) and the
    :class:`~redist.engine.backend.LowerOptions` fields that select it."""

    label: str
    fields: tuple[tuple[str, Any], ...]

    def options(self, base: LowerOptions, **more: Any) -> LowerOptions:
        return dataclasses.replace(base, **dict(self.fields), tune="estimate", inputs=(), tune_out=False, **more)


@dataclass(frozen=True)
class Tuning:
    """What ``tune`` measured and chose (the same on every rank): ``times`` gives, per candidate in
    the order measured, the median of its calls' slowest rank in seconds (None when not measured) and a note
    ("refused: ...", "skipped: budget"); ``source`` is "measured" or "wisdom"."""

    mode: str
    source: str
    chosen: str
    times: tuple[tuple[str, float | None, str], ...]
    spent: float
    budget: float

    def describe(self) -> str:
        head = (f"tune={self.mode!r}: chose {self.chosen} "
                + (f"from wisdom (measured {self.spent * 1e3:.1f} ms when stored)" if self.source == "wisdom"
                   else f"after {self.spent * 1e3:.1f} ms of measuring (budget {self.budget:g} s)"))
        rows = [f"  {'*' if label == self.chosen else ' '} {label:<16} "
                + (f"{t * 1e6:12.1f} us" if t is not None else f"{'-':>15}") + (f"  {note}" if note else "")
                for label, t, note in self.times]
        return "\n".join([head, "    candidate        median of the slowest rank per call"] + rows)


def _host_arrays(plan: Plan | FusedPlan, side: str) -> list[Buffer]:
    """Engine-owned host arrays laid out as each field's operand (``side="in"``: what the candidates
    are timed with where the caller has none bound) or result (``"out"``: the ``out=`` of ``tune_out``)."""
    bufs = []
    for p in plan.fields if isinstance(plan, FusedPlan) else (plan,):
        shape, strides = (p.in_shape, p.in_strides) if side == "in" else (p.out_shape, p.out_strides)
        lo, hi = byte_extent(shape, strides, p.itemsize)
        arr = np.zeros(max(hi - lo, 1), np.uint8)
        bufs.append(Buffer(arr.ctypes.data - lo, tuple(shape), tuple(strides), p.itemsize, "cpu", owner=arr))
    return bufs


def _result_bytes(plan: Plan | FusedPlan) -> int:
    """The bytes of this rank's results (every field's), as each executable of ``plan`` holds them."""
    spans = (byte_extent(p.out_shape, p.out_strides, p.itemsize) for p in
             (plan.fields if isinstance(plan, FusedPlan) else (plan,)))
    return sum(hi - lo for lo, hi in spans)


def repetitions(call: float) -> int:
    """Timed calls for a candidate whose (slowest rank's) warm-up call took ``call`` seconds: enough
    to fill :data:`SLICE`, within [:data:`REPS`, :data:`MAX_REPS`]."""
    if call <= 0:
        return MAX_REPS
    return max(REPS, min(MAX_REPS, math.ceil(SLICE / call)))


_serials = itertools.count(-1, -1)  # the keys of tune's replays in the extension's table (objects' are > 0)


class _Caller:
    """One candidate's timed calls, made as a user's repeated call of its route runs: where the
    host backend's compiled replays are built (engine/host/compiled.py) and the executable gives
    words for the binding, its replay in C after the first call in Python (push's calls are cheaper
    there), else :meth:`Executable.execute` through Python (alltoallw, which never replays, and
    every device route) -- timed through Python alone, routes of near-equal cost were ranked by
    an overhead their users' calls do not pay (perf/probe_tune_paths.py)."""

    def __init__(self, exe: Executable, label: str, replays: Replays | None) -> None:
        self.exe, self.label, self.replays = exe, label, replays
        self.offers = 0  # words offered (a binding whose replays keep going stays in Python after _OFFERS)
        self.ptrs: list[int] = []
        self.keys: list[int] = []

    def bind(self, inputs: Sequence[Buffer], outs: Sequence[Buffer]) -> None:
        for f, buf in enumerate(inputs):
            self.exe.bind_input(buf, f)
        for f, buf in enumerate(outs):
            self.exe.bind_output(buf, f)
        self.ptrs = [buf.ptr for buf in inputs]
        self.keys = [1 if outs else 0] * len(inputs)  # the replay's key of its out= (0: the engine-owned result)

    def __call__(self) -> float:
        """Collective: one call; the seconds it counts for (:data:`timer`)."""
        replays = self.replays
        t0 = time.perf_counter()
        if replays is None:
            self.exe.execute(0)
        else:
            rc = (replays.run1(0, self.ptrs[0], self.keys[0]) if len(self.ptrs) == 1 else
                  replays.run([0] * len(self.ptrs), self.ptrs, self.keys))
            if rc == replays.RESUME:  # a peer said something else: the call finishes in Python, on every rank
                self.exe.resume(*replays.what_was_heard())
            elif rc == replays.FAILED:
                raise CommunicationError(f"redist tune: MPI error in a compiled replay: {replays.error()}")
            elif rc != replays.DONE:  # no replay of this binding (yet, or its words went): Python, then offer
                self.exe.execute(0)
                self._offer(replays)
        dt = time.perf_counter() - t0
        return dt if timer is None else timer(self.label, dt)

    def _offer(self, replays: Replays) -> None:
        self.offers += 1
        words = self.exe.replay(replays.forget) if self.offers <= _OFFERS else None
        if words is None or not replays.offer(words, self.keys):
            replays.forget()
            self.replays = None  # this route's calls run in Python, as a user's would

    def free(self) -> None:
        if self.replays is not None:
            self.replays.forget()
        self.exe.free()


def _time_candidate(comm: Any, caller: _Caller, inputs: Sequence[Buffer],
                    outs: Sequence[Buffer]) -> tuple[list[float], float]:
    """Collective: warm up and time one candidate (every call agreed as execute() agrees), into
    ``outs`` where given: (this rank's time of each call, seconds this rank counts as spent). Every
    rank makes the same number of calls: :func:`repetitions` of the slowest rank's last warm-up call."""
    caller.bind(inputs, outs)
    spent = dt = 0.0
    for _ in range(WARMUP):
        dt = caller()
        spent += dt
    times = [caller() for _ in range(repetitions(max(collective.agree(comm, None, dt))))]
    return times, spent + sum(times)


Table = tuple[tuple[str, float | None, str], ...]  # per candidate: label, _slowest_per_call's time, note


def _slowest_per_call(per_rank: Sequence[Sequence[float]]) -> float:
    """The median over calls of each call's slowest rank (every rank made the same calls, the
    same collective ones in the same order): ``per_rank[r][i]`` is rank r's time of call i."""
    return statistics.median(map(max, zip(*per_rank, strict=True)))


class _Record:
    """What a measurement has so far: the table's rows and the slowest rank's seconds spent."""

    def __init__(self, budget: float) -> None:
        self.rows: list[tuple[str, float | None, str]] = []
        self.spent, self.budget = 0.0, budget

    def admitted(self, candidates: Sequence[Candidate]) -> Iterator[Candidate]:
        """The candidates in order while the budget lasts (the first always); the rest recorded as skipped."""
        for i, cand in enumerate(candidates):
            if i > 0 and self.spent >= self.budget:
                self.rows += [(c.label, None, "skipped: budget") for c in candidates[i:]]
                return
            yield cand

    def refused(self, cand: Candidate, e: Exception) -> None:
        self.rows.append((cand.label, None, f"refused: {str(e).splitlines()[0][:120]}"))

    def answer(self, comm: Any) -> tuple[str | None, Table, float]:
        """Collective: (rank 0's choice -- the fastest, ties to the earlier -- or None, the table, spent)."""
        timed = [(t, k) for k, (_, t, _) in enumerate(self.rows) if t is not None]
        mine = self.rows[min(timed)[1]][0] if timed else None
        return collective.agree(comm, None, mine)[0], tuple(self.rows), self.spent


def measure_interleaved(comm: Any, candidates: Sequence[Candidate], lower_one: Callable[[Candidate], Executable],
                        inputs: Sequence[Buffer], make_outs: Callable[[], Sequence[Buffer]],
                        budget: float, replays: Callable[[], Replays | None] = lambda: None
                        ) -> tuple[str | None, Table, float]:
    """Collective: :func:`measure`'s answer, with every candidate lowered at once and timed in rounds
    (one call of each per round): each then runs with the caches as the others leave them, as a
    time step's exchange does, rather than warm from its own previous call (which favours other
    routes: perf/RESULTS.md, #47). The budget is checked between lowerings, then bounds the rounds
    (at least one); :data:`WARMUP` rounds first, then :func:`repetitions` of the slowest
    candidate's (slowest rank's) last warm-up call -- every candidate gets that many calls, so a
    fast one beside a slow one gets fewer than :data:`SLICE` would give it alone. Every candidate
    holds its buffers at once: a route that needs node-shared memory (push) is checked for space
    with the others' held, and refused (in the table) where it only fits alone. ``replays()``
    gives each candidate its compiled replays (:class:`_Caller`; None: Python's calls)."""
    record = _Record(budget)
    live: list[tuple[int, Candidate, _Caller]] = []
    try:
        for cand in record.admitted(candidates):
            t0 = time.perf_counter()
            try:
                exe = lower_one(cand)
            except (NotSupportedError, InvalidValueError) as e:  # raised on every rank by the agreement
                record.refused(cand, e)
            else:
                caller = _Caller(exe, cand.label, replays())
                live.append((len(record.rows), cand, caller))  # freed below whatever happens next
                record.rows.append((cand.label, None, ""))
                caller.bind(inputs, make_outs())  # its own out= (another's would be in cache)
            record.spent += max(collective.agree(comm, None, time.perf_counter() - t0 if timer is None else 0.0))
        if live:
            warm = [[caller() for _, _, caller in live] for _ in range(WARMUP)]
            every = collective.agree(comm, None, (warm[-1], sum(map(sum, warm))))
            slowest = [max(last[k] for last, _ in every) for k in range(len(live))]  # per candidate, last call
            record.spent += max(used for _, used in every)
            rounds = repetitions(max(slowest))
            if sum(slowest) > 0:  # the budget left, in rounds (the slowest rank's warm-up as the estimate)
                rounds = max(1, min(rounds, int((budget - record.spent) / sum(slowest))))
            times: list[list[float]] = [[] for _ in live]
            for _ in range(rounds):
                for k, (_, _, caller) in enumerate(live):
                    times[k].append(caller())
            every = collective.agree(comm, None, (times, sum(map(sum, times))))
            record.spent += max(used for _, used in every)
            for k, (row, cand, _) in enumerate(live):
                record.rows[row] = (cand.label, _slowest_per_call([mine[k] for mine, _ in every]), "")
    finally:
        for _, _, caller in live:
            caller.free()
    return record.answer(comm)


def measure(comm: Any, candidates: Sequence[Candidate], run: Callable[[Candidate], tuple[Sequence[float], float]],
            budget: float) -> tuple[str | None, Table, float]:
    """Collective: time every candidate in order with ``run`` (-> this rank's time of each call, seconds
    spent; a refusal raises the same redist error on every rank) until the slowest rank has spent
    ``budget`` seconds. Returns (rank 0's choice or None when nothing could be measured, the table,
    the slowest rank's seconds spent), the same on every rank."""
    record = _Record(budget)
    for cand in record.admitted(candidates):
        t0 = time.perf_counter()
        try:
            calls, used = run(cand)
        except (NotSupportedError, InvalidValueError) as e:  # raised on every rank by the agreement
            spent_here = time.perf_counter() - t0
            record.refused(cand, e)
            record.spent += max(collective.agree(comm, None, spent_here if timer is None else 0.0))
            continue
        every = collective.agree(comm, None, (calls, used if timer is not None else time.perf_counter() - t0))
        record.rows.append((cand.label, _slowest_per_call([mine for mine, _ in every]), ""))
        record.spent += max(s for _, s in every)
    return record.answer(comm)


def _from_wisdom(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions, module: ModuleType,
                 key: dict[str, Any]) -> Executable | None:
    """Collective: the executable of rank 0's stored answer for ``key``, or None (nothing stored, or
    the backend refuses the stored route here: logged, then measured). Nothing is timed, and the
    candidates are not listed: a hit costs one lookup, one small allgather and the lowering."""
    stored = collective.agree(ctx.comm, None, wisdom.lookup(key))[0]  # rank 0's wisdom
    if stored is None:
        return None
    try:
        exe = module.lower(plan, ctx, Candidate(stored.choice, stored.fields).options(options))
    except (NotSupportedError, InvalidValueError) as e:  # raised on every rank alike
        if options.logger is not None:
            options.logger.warning("redist tune: ignoring the stored choice %r (%s); measuring", stored.choice, e)
        return None
    exe.tuning = Tuning(options.tune, "wisdom", stored.choice, stored.times, stored.spent, options.tune_budget)
    return exe


def lower(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions, module: ModuleType) -> Executable:
    """Collective: lower ``plan`` with the candidate of ``module`` that ``options.tune`` picks (see the
    module docstring); the executable carries the record as ``exe.tuning``."""
    comm = ctx.comm
    logger = options.logger
    key = wisdom.key(plan, ctx, options)
    exe = _from_wisdom(plan, ctx, options, module, key) if options.tune == "wisdom" else None
    if exe is None:
        inputs = list(options.inputs)
        if not inputs:
            if options.backend != "host":  # device operands are the caller's to give
                if logger is not None:
                    logger.warning("redist tune: no operand bound at plan(): the heuristic's route, unmeasured")
                return module.lower(plan, ctx, dataclasses.replace(options, tune="estimate", inputs=()))
            inputs = _host_arrays(plan, "in")
        into_out = options.tune_out and options.backend == "host"

        def make_outs() -> list[Buffer]:
            return _host_arrays(plan, "out") if into_out else []

        def lower_one(cand: Candidate) -> Executable:
            return module.lower(plan, ctx, cand.options(options, blocking=True, logger=None))

        def replays() -> Replays | None:  # host routes are timed through their compiled replays (_Caller)
            if options.backend != "host":
                return None
            return backend.replays(next(_serials), len(inputs) > 1, len(inputs), comm.Get_size())

        candidates = module.candidates(plan, ctx, options)  # the same list on every rank
        # host routes side by side while their results fit INTERLEAVE_BYTES (device ones, one at a time)
        held = len(candidates) * _result_bytes(plan) * (2 if into_out else 1)
        if options.backend == "host" and max(collective.agree(comm, None, held)) <= INTERLEAVE_BYTES:
            chosen, times, spent = measure_interleaved(comm, candidates, lower_one, inputs, make_outs,
                                                       options.tune_budget, replays)
        else:
            outs = make_outs()  # one set, every candidate's in turn

            def run(cand: Candidate) -> tuple[list[float], float]:
                caller = _Caller(lower_one(cand), cand.label, replays())
                try:
                    return _time_candidate(comm, caller, inputs, outs)
                finally:
                    caller.free()

            chosen, times, spent = measure(comm, candidates, run, options.tune_budget)
        if chosen is None:  # every candidate refused: the heuristic's route raises what it raises
            return module.lower(plan, ctx, dataclasses.replace(options, tune="estimate", inputs=()))
        winner = next(c for c in candidates if c.label == chosen)
        wisdom.store(key, wisdom.Entry(chosen, times, spent, winner.fields))
        exe = module.lower(plan, ctx, winner.options(options))
        exe.tuning = Tuning(options.tune, "measured", chosen, times, spent, options.tune_budget)
    if logger is not None and logger.isEnabledFor(logging.INFO):
        logger.info("redist %s: %s", options.backend, exe.tuning.describe().replace("\n", "\n    "))
    return exe
