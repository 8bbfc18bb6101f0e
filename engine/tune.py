# SPDX-License-Identifier: Apache-2.0
"""Measured choice of a backend's route (``RedistributeOptions.tune``, issue #47).

:func:`lower` is what :func:`redist.engine.backend.lower` calls when ``options.tune`` is not
"estimate". The backend module names its *candidates* (``candidates(plan, ctx, options)``: the
same list in the same order on every rank, the heuristic's own pick first); each candidate is a
set of :class:`~redist.engine.backend.LowerOptions` fields (the host method; on GPUs transport x
signal x kernel variant). Every candidate is lowered, warmed up (:data:`WARMUP` calls) and timed
(:data:`REPS` calls) on every rank, in order; the candidate's time is the *slowest rank's median*
(every rank gathers every rank's median), the minimum wins (ties: the earlier candidate), and the
choice every rank lowers is rank 0's, so ranks never pick different routes. A candidate the
backend refuses (raised on every rank by its lowering) is recorded as refused. The time spent is
bounded by ``options.tune_budget`` seconds (the slowest rank's, checked between candidates: the
first candidate is always measured); candidates left when it runs out are recorded as skipped.

"wisdom" first asks :mod:`.wisdom` for a stored answer (rank 0's, broadcast) and measures only
when none matches; "measure" and "wisdom" both store what they measured. The executable carries
the record as ``exe.tuning`` (a :class:`Tuning`: what was measured and chosen, ``describe()``).

Nothing here imports MPI: the communicator is anything with ``Get_rank()`` and ``allgather``.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from . import collective, wisdom
from .backend import TUNE_MODES
from .buffer import Buffer, byte_extent
from .errors import InvalidValueError, NotSupportedError
from .plan import FusedPlan, Plan

if TYPE_CHECKING:
    from .backend import Context, Executable, LowerOptions

__all__ = ["Candidate", "REPS", "TUNE_MODES", "Tuning", "WARMUP", "lower", "measure"]

WARMUP = 2  # untimed calls per candidate (first-call set-up: graphs, replays, request caches)
REPS = 5  # timed calls per candidate; its time is the median of these (the slowest rank's)
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
    the order measured, the slowest rank's median in seconds (None when not measured) and a note
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
        return "\n".join([head, "    candidate        slowest rank's median"] + rows)


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


def _time_candidate(exe: Executable, inputs: Sequence[Buffer], outs: Sequence[Buffer],
                    label: str) -> tuple[float, float]:
    """Collective: warm up and time ``exe`` (every call agreed as execute() agrees), into ``outs``
    where given: (this rank's median, seconds this rank counts as spent)."""
    for f, buf in enumerate(inputs):
        exe.bind_input(buf, f)
    for f, buf in enumerate(outs):
        exe.bind_output(buf, f)
    spent = 0.0
    for _ in range(WARMUP):
        t0 = time.perf_counter()
        exe.execute(0)
        dt = time.perf_counter() - t0
        spent += dt if timer is None else timer(label, dt)
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        exe.execute(0)
        dt = time.perf_counter() - t0
        times.append(dt if timer is None else timer(label, dt))
    return statistics.median(times), spent + sum(times)


def measure(comm: Any, candidates: Sequence[Candidate], run: Callable[[Candidate], tuple[float, float]],
            budget: float) -> tuple[str | None, tuple[tuple[str, float | None, str], ...], float]:
    """Collective: time every candidate in order with ``run`` (-> this rank's median, seconds
    spent; a refusal raises the same redist error on every rank) until the slowest rank has spent
    ``budget`` seconds. Returns (rank 0's choice or None when nothing could be measured, the table,
    the slowest rank's seconds spent), the same on every rank."""
    table: list[tuple[str, float | None, str]] = []
    spent = 0.0
    for i, cand in enumerate(candidates):
        if i > 0 and spent >= budget:
            table += [(c.label, None, "skipped: budget") for c in candidates[i:]]
            break
        t0 = time.perf_counter()
        try:
            median, used = run(cand)
        except (NotSupportedError, InvalidValueError) as e:  # raised on every rank by the agreement
            spent_here = time.perf_counter() - t0
            table.append((cand.label, None, f"refused: {str(e).splitlines()[0][:120]}"))
            spent += max(collective.agree(comm, None, spent_here if timer is None else 0.0))
            continue
        every = collective.agree(comm, None, (median, used if timer is not None else time.perf_counter() - t0))
        table.append((cand.label, max(m for m, _ in every), ""))
        spent += max(s for _, s in every)
    timed = [(t, k) for k, (_, t, _) in enumerate(table) if t is not None]
    mine = table[min(timed)[1]][0] if timed else None  # ties: the earlier candidate
    chosen = collective.agree(comm, None, mine)[0]  # rank 0 decides
    return chosen, tuple(table), spent


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
        outs = _host_arrays(plan, "out") if options.tune_out and options.backend == "host" else []

        def run(cand: Candidate) -> tuple[float, float]:
            exe = module.lower(plan, ctx, cand.options(options, blocking=True, logger=None))
            try:
                return _time_candidate(exe, inputs, outs, cand.label)
            finally:
                exe.free()

        candidates = module.candidates(plan, ctx, options)  # the same list on every rank
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
