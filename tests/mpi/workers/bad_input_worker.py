# SPDX-License-Identifier: Apache-2.0
"""Run one case of tests/mpi/bad_input_cases.py: ``mpiexec -n P python bad_input_worker.py CASE``.

Every rank runs the case and records what it raised; the outcomes are gathered and checked
against the case's expectation (the same class and message on every rank, or success with the
right data on every rank). Rank 0 prints ALL OK. A hang is caught by the caller's watchdog.
"""

from __future__ import annotations

import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bad_input_cases import CASES, OK, Env  # noqa: E402
from helpers import Report  # noqa: E402

import redist  # noqa: E402


def main() -> int:
    redist.initialize()
    comm = redist.get_context().process_group.mpi_comm
    report = Report(comm)
    case = CASES[sys.argv[1]]
    env = Env(comm)
    got = None
    try:
        case.fn(env)
    except Exception as e:  # noqa: BLE001 -- compared below
        got = e
    outcome = None if got is None else (type(got).__name__, str(got))
    every = comm.allgather(outcome)
    for w in env.wrong:
        report.fail(f"{case.name}: {w}")
    if case.expect == OK:
        report.check(got is None, f"{case.name}: expected success, got {outcome}")
    else:
        cls, pattern = case.expect
        pattern = pattern.replace("{last}", str(env.last)).replace("{P}", str(env.P))
        if got is None:
            report.fail(f"{case.name}: expected {cls.__name__} matching {pattern!r}, nothing raised")
        else:
            report.check(isinstance(got, cls), f"{case.name}: raised {outcome[0]}, expected {cls.__name__}: "
                                                f"{outcome[1]}")
            report.check(re.search(pattern, str(got)) is not None,
                         f"{case.name}: message {str(got)!r} does not match {pattern!r}")
        report.check(len(set(every)) == 1, f"{case.name}: the ranks raised different errors: {every}")
    if comm.Get_rank() == 0:
        print(f"{case.name}: {'success' if outcome is None else outcome[0] + ': ' + outcome[1]}")
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
