# SPDX-License-Identifier: Apache-2.0
"""The C ABI's compiled replays (cabi/redist_replay.c, engine/host/replay.py): at P = 2 and 3 through
libredist.so, and the replay's own parser and copy loop against numpy (tests/cabi/checks/replay_harness.c)."""

from __future__ import annotations

import ctypes
import math
import os
import sys

import numpy as np
import pytest

import helpers
from redist.engine.host import replay

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "unit"))
import test_replay_words  # noqa: E402 -- its region generator

pytestmark = [pytest.mark.cabi]


@pytest.mark.parametrize("nprocs", [1, 2, 3])
def test_replays(cabi, mpirun, nprocs):
    """Repeated C calls run without Python and stay right, on push and the message methods (one rank:
    its local copy); disagreeing ranks, one rank's bad out=, rebinding, fields, free and finalize
    (tests/cabi/workers/replay_worker.py)."""
    mpirun(nprocs, "replay_worker.py", cabi.dir, timeout=240)


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """tests/cabi/checks/replay_harness.c (cabi/redist_replay.c with MPI calls that do nothing), loaded."""
    if helpers.c_compiler() is None:
        pytest.skip("no C compiler")
    lib = tmp_path_factory.mktemp("replay") / "libreplay_harness.so"
    built = helpers.run([helpers.c_compiler(), "-O2", "-Wall", "-Werror", "-Wno-unused-function", "-fPIC", "-shared",
                         "-pthread", f"-I{helpers.cabi_dir()}", helpers.CABI_CHECKS / "replay_harness.c", "-o", lib])
    assert built.returncode == 0, built.stdout + built.stderr
    h = ctypes.CDLL(str(lib))
    h.harness_call.restype = ctypes.c_void_p
    h.harness_run.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_size_t]
    return h


def header(h, operand: int) -> list[int]:
    """A replay's words up to its copies: no status round, no requests, one field at ``operand``."""
    return [replay.VERSION, h.harness_call(0), h.harness_call(1), h.harness_call(2), 8, 24, 4, 0, 1, 0, 0, 0, 0, 0,
            0, 0, 0, operand]


#: the words after the copies of a replay that copies nothing across memories and ends without an Allreduce
TAIL = [*replay.cross_words(()), 0, 0, 0, 0]


@pytest.mark.parametrize("seed", range(60))
def test_the_c_copies_do_what_copyto_does(harness, seed):
    """The real copy loop of cabi/redist_replay.c (redist_copy), from words made by copy_words: random
    permuted, sliced, reversed and broadcast (zero-stride) regions of 1- to 16-byte items, in each of
    the three phases, copy exactly the bytes np.copyto copies."""
    rng = np.random.default_rng(1000 + seed)
    itemsize = int(rng.choice([1, 2, 4, 8, 12, 16]))
    dims = tuple(int(rng.integers(1, 7)) for _ in range(int(rng.integers(1, 5))))
    dtype = np.dtype(f"V{itemsize}")
    src_base = np.frombuffer(rng.integers(0, 256, math.prod(dims) * itemsize, dtype=np.uint8).tobytes(),
                             dtype).reshape(dims)
    dst_base = np.zeros(dims, dtype)
    dst, src = test_replay_words.void_views(rng, dst_base, src_base)
    if rng.random() < 0.25:  # a broadcast source: one axis of stride 0
        ax = int(rng.integers(0, len(dims)))
        src = np.lib.stride_tricks.as_strided(src, strides=src.strides[:ax] + (0,) + src.strides[ax + 1:])
    expected = dst_base.copy()
    np.copyto(np.ndarray(dst.shape, dtype, expected, dst.ctypes.data - dst_base.ctypes.data, dst.strides), src)
    phase = int(rng.integers(0, 3))
    phases = [[(dst, src)] if k == phase else [] for k in range(3)]
    words = header(harness, src_base.ctypes.data) + [w for pairs in phases for w in replay.copy_words(pairs)] + TAIL
    arr = np.array(words, np.int64)
    assert harness.harness_run(arr.ctypes.data, len(arr), 0) == 0
    assert dst_base.tobytes() == expected.tobytes()


def test_malformed_words_are_refused(harness):
    """Words cut short, of another version, or with a copy of no extent install nothing."""
    a, b = np.zeros(4, "V8"), np.ones(4, "V8")
    good = header(harness, b.ctypes.data) + [0, *replay.copy_words([(a, b)]), 0] + TAIL
    no_extent = good[:-11] + [a.ctypes.data, b.ctypes.data, 0, 0, 0] + [0] + TAIL  # phase 1: a copy of run 0
    starts_late = good[:-7] + [1, 0] + TAIL  # phase 1's copy starts a send (phase 0 only), of none there are
    for bad in (good[:-1], [replay.VERSION + 1, *good[1:]], no_extent, starts_late):
        arr = np.array(bad, np.int64)
        assert harness.harness_run(arr.ctypes.data, len(arr), 0) == -2
    arr = np.array(good, np.int64)
    assert harness.harness_run(arr.ctypes.data, len(arr), 0) == 0
    assert a.tobytes() == b.tobytes()


def test_a_packs_sends_start_after_it(harness):
    """Phase 0's copies with ``starts`` (the message methods' packs): each copy's sends are started
    right after it, with its bytes written (not before, not only after every pack), and the sends no
    copy names after the phase."""
    harness.harness_log.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int64),
                                    ctypes.POINTER(ctypes.c_int)]
    a, b = np.zeros((3, 4), "V8"), np.ones((3, 4), "V8")
    head = header(harness, b.ctypes.data)
    head[1], head[12] = harness.harness_call(3), 4  # the recording MPI_Startall; four arrival sends
    packs = [(a[0], b[0]), (a[1], b[1]), (a[2], b[2])]
    words = np.array(head + [101, 102, 103, 104] + replay.copy_words(packs, [1, 0, 2]) + [0, 0] + TAIL, np.int64)
    harness.harness_record(ctypes.c_void_p(a[2:].ctypes.data))  # the last pack's first byte
    assert harness.harness_run(words.ctypes.data, len(words), 0) == 0
    seen = []
    for k in range(8):
        count, first, probed = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int()
        if harness.harness_log(k, ctypes.byref(count), ctypes.byref(first), ctypes.byref(probed)) != 0:
            break
        seen.append((count.value, first.value, probed.value))
    # the status round (no requests), the first pack's send before the last pack is made, the last
    # pack's two once it is, the fourth (no pack's) after the phase
    assert seen == [(0, 0, 0), (1, 101, 0), (2, 102, 1), (1, 104, 1)]
    assert a.tobytes() == b.tobytes()


def test_checks_hand_the_call_back_when_a_published_word_changed(harness):
    """A replay's checks (the words its peers published: where they want their data): while every
    word holds the value the replay was made for, the copies run; one changed word hands the call
    back (REDIST_REPLAY_RESUME, -1) with nothing written; a check of address 0 installs nothing."""
    a, b = np.zeros(4, "V8"), np.ones(4, "V8")
    published = np.array([7, 9], np.uint64)
    head = header(harness, b.ctypes.data)
    head[16] = 2  # nchecks
    checks = [published.ctypes.data, 7, published.ctypes.data + 8, 9]
    words = np.array(head + checks + [0, *replay.copy_words([(a, b)]), 0] + TAIL, np.int64)
    published[1] = 10
    assert harness.harness_run(words.ctypes.data, len(words), 0) == -1
    assert not a.tobytes().strip(b"\0"), "a call handed back wrote"
    published[1] = 9
    assert harness.harness_run(words.ctypes.data, len(words), 0) == 0
    assert a.tobytes() == b.tobytes()
    bad = np.array(head + [0, 7, published.ctypes.data, 9] + [0, *replay.copy_words([(a, b)]), 0] + TAIL, np.int64)
    assert harness.harness_run(bad.ctypes.data, len(bad), 0) == -2


def test_sets_are_written_before_the_round(harness):
    """A replay's sets (what this rank publishes: where it wants its peers' data) are written when it
    runs, before the status round, also where a check then hands the call back."""
    a, b = np.zeros(4, "V8"), np.ones(4, "V8")
    mine, theirs = np.zeros(2, np.uint64), np.array([5], np.uint64)
    head = header(harness, b.ctypes.data)
    head[15], head[16] = 2, 1  # nsets, nchecks
    pairs = [mine.ctypes.data, 11, mine.ctypes.data + 8, 12, theirs.ctypes.data, 6]
    words = np.array(head + pairs + [0, *replay.copy_words([(a, b)]), 0] + TAIL, np.int64)
    assert harness.harness_run(words.ctypes.data, len(words), 0) == -1  # the peer's word differs
    assert mine.tolist() == [11, 12] and not a.tobytes().strip(b"\0")


def _iovecs(*pairs) -> np.ndarray:
    return np.array(pairs, np.uint64).reshape(-1, 2)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="cross-memory attach is Linux's")
def test_cross_memory_calls_and_the_closing_allreduce(harness):
    """The cross-memory calls of a replay (process_vm_readv / process_vm_writev, here with this
    process as the peer) move their bytes, iovec by iovec; the closing Allreduce gets zeros where the
    kernel took every call. A refused call (a remote iovec on a read-only page) still lets the other
    calls run, contributes the rank it was to write (plus one) and its errno, and fails the call with
    engine/host/push/cross_memory.py's refused_message; so does a refusal only a peer saw."""
    import errno
    import mmap

    from redist.engine.host.push import cross_memory

    harness.harness_peer.argtypes = [ctypes.c_int32, ctypes.c_int32]
    harness.harness_sent.restype = ctypes.c_char_p
    harness.harness_sent.argtypes = [ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int32)]
    pid = os.getpid()
    src = np.arange(64, dtype=np.uint8)
    got, put = np.zeros(64, np.uint8), np.zeros(64, np.uint8)
    page = mmap.mmap(-1, mmap.PAGESIZE)
    frozen = np.frombuffer(page, np.uint8)  # made read-only below
    reduce = [harness.harness_call(4), 0, 0, 0]

    def run(calls, peer=(0, 0)):
        harness.harness_peer(*peer)
        words = np.array(header(harness, src.ctypes.data) + [0, 0, 0] + replay.cross_words(calls) + reduce, np.int64)
        rc = harness.harness_run(words.ctypes.data, len(words), 0)
        into, err = ctypes.c_int32(), ctypes.c_int32()
        message = harness.harness_sent(ctypes.byref(into), ctypes.byref(err)).decode()
        return rc, (into.value, err.value), message

    base, at = src.ctypes.data, got.ctypes.data
    read = (True, 0, pid, _iovecs(at, 16, at + 32, 32), _iovecs(base + 8, 40, base + 56, 8))  # into got, from src
    write = (False, 1, pid, _iovecs(base, 24), _iovecs(put.ctypes.data + 40, 24))  # from src, into put
    rc, sent, _ = run([read, write])
    assert rc == 0 and sent == (0, 0)
    assert got[:16].tolist() == src[8:24].tolist() and got[16:32].tolist() == [0] * 16
    assert got[32:64].tolist() == [*src[24:48], *src[56:64]]
    assert put[40:64].tolist() == src[:24].tolist() and not put[:40].any()

    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(ctypes.c_void_p(frozen.ctypes.data), mmap.PAGESIZE, mmap.PROT_READ) == 0
    put[:] = 0
    refused = (False, 2, pid, _iovecs(base, 8), _iovecs(frozen.ctypes.data, 8))
    rc, sent, message = run([refused, write])
    assert rc == 6 and sent == (3, errno.EFAULT)  # REDIST_ERROR_COMMUNICATION; rank 2 + 1
    assert message == cross_memory.refused_message(2, errno.EFAULT)
    assert put[40:64].tolist() == src[:24].tolist(), "the call after the refused one did not run"

    rc, sent, message = run([write], peer=(5, errno.EPERM))  # only a peer's copy was refused
    assert rc == 6 and sent == (0, 0) and message == cross_memory.refused_message(4, errno.EPERM)

    bad_sum = (True, 0, pid, _iovecs(at, 16), _iovecs(base, 8))
    for calls, tail in (([bad_sum], reduce), ([read], [0, 0, 0, 0]),  # bytes that differ; no Allreduce after copies
                        ([(True, 0, pid, _iovecs(at, 0)[:0], _iovecs(base, 8))], reduce)):  # no local iovec
        words = np.array(header(harness, src.ctypes.data) + [0, 0, 0] + replay.cross_words(calls) + tail, np.int64)
        assert harness.harness_run(words.ctypes.data, len(words), 0) == -2
