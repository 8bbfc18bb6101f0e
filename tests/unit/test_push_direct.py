# SPDX-License-Identifier: Apache-2.0
"""Push's direct copies (engine/host/push/cross_memory.py, cross-memory attach): how a send's runs become the
iovec lists of ``process_vm_writev`` (or ``process_vm_readv``) calls, and who copies. No MPI: the
lists are checked against the runs they came from; the copies themselves run in tests/mpi
(bad-input case ``push_direct_stores_into_out``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from redist.engine.host.push import cross_memory, tuning


def _bytes(field, offsets, lengths):
    """The (field, byte address) of every byte the list covers, in order."""
    return [(int(f), int(o) + k) for f, o, n in zip(field, offsets, lengths) for k in range(int(n))]


@st.composite
def runs(draw):
    """Runs of a send: each continues the previous one on the source side, the destination side,
    both or neither (a field change starts afresh)."""
    n = draw(st.integers(1, 60))
    field, src, dst, length = [0], [0], [0], [draw(st.integers(1, 9))]
    for _ in range(n - 1):
        nxt = draw(st.integers(1, 9))
        f = field[-1] + draw(st.sampled_from([0, 0, 0, 1]))
        joined_src, joined_dst = draw(st.booleans()), draw(st.booleans())
        src.append(src[-1] + length[-1] + (0 if joined_src and f == field[-1] else draw(st.integers(1, 5))))
        dst.append(dst[-1] + length[-1] + (0 if joined_dst and f == field[-1] else draw(st.integers(1, 5))))
        field.append(f)
        length.append(nxt)
    return (np.array(field, np.intp), np.array(src, np.uint64), np.array(dst, np.uint64), np.array(length, np.uint64))


@settings(max_examples=200, deadline=None)
@given(runs(), st.integers(1, 4), st.integers(1, 30))
def test_calls_cover_the_runs_in_order(case, iov_max, call_bytes):
    """Every call takes at most IOV_MAX iovecs a side, at most CALL_BYTES (Linux moves at most
    2 GiB - 4 KiB in one) and the same bytes on both; together the calls move every run's bytes,
    in order, to where the run says."""
    field, src, dst, length = case
    saved = cross_memory.IOV_MAX, cross_memory.CALL_BYTES
    cross_memory.IOV_MAX, cross_memory.CALL_BYTES = iov_max, call_bytes
    try:
        store = cross_memory._DirectCopy(field, src, dst, length)
    finally:
        cross_memory.IOV_MAX, cross_memory.CALL_BYTES = saved
    local = list(zip(store._lfield, store._mine, store._local[:, 1]))
    remote = list(zip(store._rfield, store._theirs, store._remote[:, 1]))
    assert sum(c[4] for c in store._chunks) == int(length.sum())
    for lstart, lcount, rstart, rcount, nbytes in store._chunks:
        assert 1 <= lcount <= iov_max and 1 <= rcount <= iov_max and nbytes <= call_bytes
        assert sum(int(n) for *_, n in local[lstart:lstart + lcount]) == nbytes
        assert sum(int(n) for *_, n in remote[rstart:rstart + rcount]) == nbytes
    assert _bytes(*zip(*local)) == _bytes(field, src, length)  # source bytes, in the runs' order
    assert _bytes(*zip(*remote)) == _bytes(field, dst, length)  # their destinations, in the same order


def test_each_side_merges_its_own_stretches():
    """Runs contiguous only in the destination: many source iovecs, one destination iovec."""
    length = np.full(6, 8, np.uint64)
    src = np.arange(6, dtype=np.uint64) * 16  # a gap of 8 bytes after every run
    dst = np.arange(6, dtype=np.uint64) * 8
    store = cross_memory._DirectCopy(np.zeros(6, np.intp), src, dst, length)
    assert len(store._local) == 6 and len(store._remote) == 1 and store._remote[0, 1] == 48
    assert store._chunks == [(0, 6, 0, 1, 48)]


def test_fit_needs_long_stretches_on_both_sides(monkeypatch):
    """Short stretches on either side (a pin per remote iovec; an iovec per element of a permuted or
    negative-stride operand) make the direct copies not worth it."""
    monkeypatch.setattr(tuning, "DIRECT_MIN_RUN", 64)
    gaps, dense, runs = np.arange(4, dtype=np.uint64) * 64, np.arange(4, dtype=np.uint64) * 32, np.full(4, 32, np.uint64)
    fields = np.zeros(4, np.intp)
    assert cross_memory._who_copies([(fields, dense, dense, runs)])[0]
    assert not cross_memory._who_copies([(fields, gaps, dense, runs)])[0]  # short in the operand
    assert not cross_memory._who_copies([(fields, dense, gaps, runs)])[0]  # short in the destination
    assert not cross_memory._who_copies([(fields, dense, dense, runs), (fields, gaps, dense, runs)])[0]  # one send is enough


def test_the_receiver_reads_where_the_destination_has_more_stretches():
    """The kernel pins the remote side's pages per iovec: the side with fewer stretches is the remote
    one -- the destination's for a store, the operand's for a read."""
    fields, runs = np.zeros(4, np.intp), np.full(4, 8, np.uint64)
    dense, gaps = np.arange(4, dtype=np.uint64) * 8, np.arange(4, dtype=np.uint64) * 16
    fit, read = cross_memory._who_copies([(fields, gaps, dense, runs), (fields, dense, gaps, runs), (fields, dense, dense, runs)])
    assert read == [False, True, False]  # short in the operand: store; short in the destination: read; even: store


@pytest.mark.parametrize("forced", [True, False])
def test_direct_read_overrides_the_rule(monkeypatch, forced):
    """``DIRECT_READ`` (the benchmarks' knob) makes every pair read, or every pair store, whatever the
    stretches; whether direct copies are worth it is still the stretch rule's call."""
    monkeypatch.setattr(tuning, "DIRECT_READ", forced)
    monkeypatch.setattr(tuning, "DIRECT_MIN_RUN", 8)
    fields, runs = np.zeros(4, np.intp), np.full(4, 8, np.uint64)
    dense, gaps = np.arange(4, dtype=np.uint64) * 8, np.arange(4, dtype=np.uint64) * 16
    fit, read = cross_memory._who_copies([(fields, gaps, dense, runs), (fields, dense, gaps, runs), (fields, dense, dense, runs)])
    assert fit and read == [forced] * 3
    monkeypatch.setattr(tuning, "DIRECT_MIN_RUN", 64)
    assert not cross_memory._who_copies([(fields, gaps, dense, runs)])[0]
