# SPDX-License-Identifier: Apache-2.0
"""engine/host/replay.py: the copies of a compiled replay, run as cabi/redist_replay.c runs them."""

from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from redist.engine.host.replay import MAXDIM, copy_words


def run_words(words: list[int]) -> int:
    """Every copy of ``words`` as redist_copy() does it (an odometer over the outer dimensions, one
    memmove per run); how many copies (their sends started after them: checked by the callers)."""
    count, at = words[0], 1
    for _ in range(count):
        dst, src, run, ndim = words[at:at + 4]
        at += 4
        shape, dstrides, sstrides = (words[at + k * ndim:at + (k + 1) * ndim] for k in range(3))
        at += 3 * ndim + 1  # then how many sends start after it
        for index in itertools.product(*(range(n) for n in shape)):
            ctypes.memmove(dst + sum(i * s for i, s in zip(index, dstrides)),
                           src + sum(i * s for i, s in zip(index, sstrides)), run)
    assert at == len(words)
    return count


def void_views(rng, dst_base, src_base):
    """(dst, src): one random region of each base, the same shape: a permuted, sliced and sometimes
    reversed sub-array."""
    nd = dst_base.ndim
    shape = tuple(int(rng.integers(1, n + 1)) for n in dst_base.shape)
    views = []
    for base in (dst_base, src_base):
        perm = rng.permutation(nd)
        v = np.transpose(base, perm)[tuple(slice(0, shape[p]) for p in perm)]
        v = np.transpose(v, np.argsort(perm))
        for ax in range(nd):
            if rng.random() < 0.3:
                v = np.flip(v, ax)
        views.append(v)
    return views


@pytest.mark.parametrize("seed", range(40))
def test_copy_words_do_what_copyto_does(seed):
    """Random strided, permuted and reversed regions of 1- to 16-byte items: the words copy exactly
    the bytes np.copyto copies, and nothing else."""
    rng = np.random.default_rng(seed)
    itemsize = int(rng.choice([1, 4, 8, 12, 16]))
    dims = tuple(int(rng.integers(1, 6)) for _ in range(int(rng.integers(1, 5))))
    dtype = np.dtype(f"V{itemsize}")
    src_base = np.frombuffer(rng.integers(0, 256, np.prod(dims) * itemsize, dtype=np.uint8).tobytes(),
                             dtype).reshape(dims)
    dst_base = np.zeros(dims, dtype)
    dst, src = void_views(rng, dst_base, src_base)
    expected = dst_base.copy()  # what copyto does, into a copy of the destination's base
    np.copyto(np.ndarray(dst.shape, dtype, expected, dst.ctypes.data - dst_base.ctypes.data, dst.strides), src)
    assert run_words(copy_words([(dst, src)])) == 1
    assert dst_base.tobytes() == expected.tobytes()


def test_contiguous_regions_are_one_run_and_empty_ones_dropped():
    a, b = np.zeros((4, 6), "V8"), np.ones((4, 6), "V8")
    words = copy_words([(a, b), (a[:0], b[:0]), (a[:, 1:2], b[:, 1:2])])
    assert words[0] == 2  # the empty copy is dropped
    assert words[1:6] == [a.ctypes.data, b.ctypes.data, 4 * 6 * 8, 0, 0]  # one run, no outer dimension
    assert words[6:] == [a.ctypes.data + 8, b.ctypes.data + 8, 8, 1, 4, 48, 48, 0]  # the size-1 axis dropped


def test_sends_start_after_their_pack_and_an_empty_packs_with_the_next():
    """starts[k] sends follow copy k; an empty copy's go with the next copy made; those of empty
    copies at the end are left for after the phase (not in any copy's count)."""
    a, b = np.zeros((4, 6), "V8"), np.ones((4, 6), "V8")
    words = copy_words([(a[:1], b[:1]), (a[:0], b[:0]), (a[1:2], b[1:2]), (a[:0], b[:0])], [2, 1, 3, 4])
    assert words[0] == 2
    assert words[5] == 2 and words[10] == 1 + 3  # each copy: dst, src, run, ndim 0, starts


def test_too_many_dimensions_are_refused():
    """Axes that no merge joins, one more than the C side takes (views only: nothing is copied)."""
    shape = (2,) * (MAXDIM + 1)
    strides = tuple(16 * 3**k for k in range(len(shape)))
    base = np.zeros(1, "V8")
    a = np.lib.stride_tricks.as_strided(base, shape, strides)
    with pytest.raises(ValueError, match="dimensions"):
        copy_words([(a, a)])
