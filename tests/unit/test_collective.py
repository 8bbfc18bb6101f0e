# SPDX-License-Identifier: Apache-2.0
"""engine.collective (agreement on failures) and engine.errors (one class, one C status), on a
thread-simulated communicator: a failure on some ranks is raised identically on every rank."""

from __future__ import annotations

import threading

import pytest
from helpers import ThreadComm, run_ranks
from redist.engine import collective, errors


def same_error_everywhere(excs, cls, text):
    assert all(type(e) is cls for e in excs), excs
    assert len({str(e) for e in excs}) == 1 and text in str(excs[0]), [str(e) for e in excs]


@pytest.mark.parametrize("raised, cls", [
    (ValueError("bad box"), errors.InvalidValueError),
    (TypeError("a list"), errors.InvalidTypeError),
    (OverflowError("2**63"), errors.InvalidValueError),
    (NotImplementedError("no"), errors.NotSupportedError),
    (errors.CudaError("nvrtc"), errors.CudaError),
    (KeyError("k"), errors.InvalidValueError),
    (ZeroDivisionError("bug"), errors.InternalError),
])
def test_one_failing_rank_raises_the_same_class_everywhere(raised, cls):
    def rank(comm, r):
        with collective.attempt(comm) as step:
            step.payload = r
            if r == 2:
                raise raised
        return step.gathered

    res, excs = run_ranks(4, rank)
    same_error_everywhere(excs, cls, "rank 2: ")
    assert errors.status_of(raised) == cls.status  # the C ABI's status is the class's


def test_attempt_gathers_payloads_and_runs_rollback_on_every_rank():
    rolled = []

    def ok(comm, r):
        with collective.attempt(comm) as step:
            step.payload = r * 10
        return step.gathered

    res, excs = run_ranks(3, ok)
    assert excs == [None] * 3 and res == [[0, 10, 20]] * 3

    def bad(comm, r):
        with collective.attempt(comm, on_failure=lambda: rolled.append(r)):
            if r in (1, 2):  # two ranks fail: the first one's problem wins
                raise errors.InvalidValueError(f"problem of rank {r}")

    _, excs = run_ranks(3, bad)
    same_error_everywhere(excs, errors.InvalidValueError, "rank 1: problem of rank 1")
    assert sorted(rolled) == [0, 1, 2]


def test_messages_that_name_ranks_are_kept():
    e = collective.exception(("InvalidValueError", "rank 3 input box ... overlaps"), 0)
    assert str(e) == "rank 3 input box ... overlaps"
    assert str(collective.exception(("InvalidValueError", "bad"), 2)) == "rank 2: bad"


def test_call_check_flags_failures_and_signature_mismatches():
    def rank(comm, r):
        check = collective.CallCheck(comm)
        assert check.check(None, signature=7, flag=r) == 2  # max of the flags
        out = []
        for problem, sig in ((("InvalidStateError", "released") if r == 1 else None, 7), (None, 7 + (r == 2))):
            try:
                check.check(problem, signature=sig, what=("out=", sig))
                out.append(None)
            except errors.RedistError as e:
                out.append((type(e).__name__, str(e)))
        return out

    res, excs = run_ranks(3, rank)
    assert excs == [None] * 3
    assert all(r[0] == ("InvalidStateError", "rank 1: released") for r in res)
    assert all(r[1][0] == "InvalidValueError" and "different arguments" in r[1][1] and "rank 2" in r[1][1]
               for r in res)


def test_call_check_per_rank_values():
    """Each rank's value reaches every rank in the same agreement (the CUDA out= registry index)."""

    def rank(comm, r):
        check = collective.CallCheck(comm, per_rank=True)
        got = []
        for k in range(3):
            check.check(None, signature=1, value=10 * r + k)
            got.append(list(check.values))
        return got

    res, excs = run_ranks(3, rank)
    assert excs == [None] * 3
    assert all(r == [[10 * q + k for q in range(3)] for k in range(3)] for r in res)


def test_call_check_on_one_rank_raises_directly():
    comm = ThreadComm({"p": 1, "slots": [None], "barrier": threading.Barrier(1)}, 0)
    check = collective.CallCheck(comm)
    assert check.check(None, 5) == 0
    with pytest.raises(errors.InvalidValueError, match="^rank 0: x$"):
        check.check(("InvalidValueError", "x"))


def test_problem_encoding_is_small_and_picklable():
    import pickle

    p = collective.problem(ValueError("v"))
    assert p == ("InvalidValueError", "v") and pickle.loads(pickle.dumps(p)) == p
    assert collective.problem(None) is None and collective.problem(p) is p
    assert collective.problem(ZeroDivisionError("z")) == ("InternalError", "ZeroDivisionError: z")
