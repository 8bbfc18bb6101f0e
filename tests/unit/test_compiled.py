# SPDX-License-Identifier: Apache-2.0
"""engine/host/compiled.py: the extension of the compiled replays is built, and its table refuses
what it cannot run (the replays themselves: tests/mpi/test_compiled.py)."""

from __future__ import annotations

import itertools

import numpy as np

from redist.engine.host import compiled
from redist.engine.host.replay import VERSION

_serials = itertools.count(10**9)  # far from the serials of objects made in this process


def test_extension_is_built():
    # an install whose compile failed runs every call in Python: said here, not left unnoticed
    assert compiled._replay_ext is not None, compiled.unavailable_reason()


def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("REDIST_COMPILED_REPLAY", "0")
    assert not compiled.available()
    assert compiled.unavailable_reason() == "REDIST_COMPILED_REPLAY=0"
    monkeypatch.setenv("REDIST_COMPILED_REPLAY", "1")
    assert compiled.available()


def test_table_refuses_words_it_cannot_run():
    replays = compiled.Replays(next(_serials), False, 1, 2)
    header = [VERSION] + [0] * 16 + [0x1000]  # the 17 header words and one operand: no MPI calls given
    assert not replays.offer(np.array(header, np.int64), [0])
    assert not replays.offer(np.array([VERSION + 1] + header[1:], np.int64), [0])  # another version
    assert not replays.offer(np.array([VERSION], np.int64), [0])  # truncated
    assert replays.count() == 0


def test_no_replay_runs_for_an_unknown_binding():
    replays = compiled.Replays(next(_serials), False, 1, 3)
    assert replays.run1(0x1000, 0) == replays.NONE
    assert replays.run([0x1000], [7]) == replays.NONE
    replays.forget()  # nothing held: a no-op
    assert replays.count() == 0
