# SPDX-License-Identifier: Apache-2.0
"""The cache of out= objects checked before (pybind/_binding.py ``_out_checked``): an out= taken
again skips the checks of what cannot change, yet an operand rebound onto its bytes, or an out=
changed in place, is still refused; for torch also the out= bound now taken again by its version
counter (host backend, one rank, in a plain process: no launcher)."""

from __future__ import annotations

import subprocess
import sys

import pytest

_CODE = """
import numpy as np, redist
from redist import Redistribute, Slab
pkg = {pkg!r}
if pkg == "torch":
    import torch
    big = torch.arange(48, dtype=torch.float64)
else:
    big = np.arange(48, dtype=np.float64)
a = big[:24].reshape(4, 6)
with Redistribute(a, Slab.X, Slab.Y) as r:
    r.plan()
    ref = np.asarray(r.execute()).copy()
    out = big[24:].reshape(4, 6)  # beside the operand, not overlapping it
    for _ in range(3):
        assert np.array_equal(np.asarray(r.execute(out=out)), ref)
    r.reset_operand_unchecked(big[24:].reshape(4, 6))  # the operand is now out='s bytes
    try:
        r.execute(out=out)
        raise SystemExit("an out= overlapping the operand rebound since was taken")
    except redist.InvalidValueError as e:
        assert "overlaps the operand" in str(e), e
    r.reset_operand_unchecked(a)
    assert np.array_equal(np.asarray(r.execute(out=out)), ref)  # clear of it again
    if pkg == "torch":
        out.resize_(3, 8)  # changed in place: checked anew
    else:
        out.shape = (3, 8)
    try:
        r.execute(out=out)
        raise SystemExit("an out= reshaped in place was taken")
    except redist.InvalidValueError as e:
        assert "shape" in str(e), e
    if pkg == "torch":  # the out= bound now, taken again (its version counter): what still sends it to the checks
        out = torch.empty(4, 6, dtype=torch.float64)
        for _ in range(2):
            r.execute(out=out)
        out.mul_(2)  # written in place (a new version): still taken
        assert np.array_equal(r.execute(out=out).numpy(), ref)
        elsewhere = torch.zeros(4, 6, dtype=torch.float64)
        out.set_(elsewhere)  # moved in place: written where it points now
        r.execute(out=out)
        assert np.array_equal(elsewhere.numpy(), ref)
        out.data = elsewhere.view(3, 8)  # .data assigned (no new version): the same address, another shape
        try:
            r.execute(out=out)
            raise SystemExit("an out= given another shape through .data was taken")
        except redist.InvalidValueError as e:
            assert "shape" in str(e), e
print("cache ok")
"""


@pytest.mark.parametrize("pkg", ["numpy", "torch"])
def test_cached_out_is_checked_against_a_rebound_operand(pkg):
    if pkg == "torch":
        pytest.importorskip("torch")
    res = subprocess.run([sys.executable, "-c", _CODE.format(pkg=pkg)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "cache ok" in res.stdout, res.stdout + res.stderr


_FRESH = """
import numpy as np, torch, redist
from redist import Redistribute, Slab
big = torch.arange(96, dtype=torch.float64).to(torch.complex128)
a = big[:24].reshape(4, 6)
with Redistribute(a, Slab.X, Slab.Y) as r:
    r.plan()
    ref = r.execute().numpy().copy()

    def over(view):  # a new tensor object over the same memory as view (what torch.empty hands back per call)
        return torch.as_strided(big, view.shape, view.stride(), view.storage_offset())

    spot = big[48:72].reshape(4, 6)
    for _ in range(3):  # a new object each call, the same memory: bound without the checks after the first
        out = over(spot)
        got = r.execute(out=out)
        assert got is out and np.array_equal(spot.numpy(), ref)
        spot.zero_()
    assert len(r._out_memory) == 1, r._out_memory
    for bad, word in ((lambda: over(spot).conj(), "conjugate"), (lambda: over(spot)._neg_view(), "negation"),
                      (lambda: over(spot).view(torch.float64), "dtype"),
                      (lambda: over(big[48:72]).reshape(6, 4), "shape")):
        try:
            r.execute(out=bad())
            raise SystemExit("an out= over checked memory but unlike it was taken: " + word)
        except redist.InvalidValueError as e:
            assert word in str(e), e
    r.reset_operand_unchecked(over(spot))  # the operand is now that memory: a new object over it is refused
    try:
        r.execute(out=over(spot))
        raise SystemExit("an out= over memory the operand was rebound onto was taken")
    except redist.InvalidValueError as e:
        assert "overlaps the operand" in str(e), e
    r.reset_operand_unchecked(a)
    assert np.array_equal(r.execute(out=over(spot)).numpy(), ref)
sq = torch.arange(36, dtype=torch.float64).reshape(6, 6)
with Redistribute(sq, Slab.X, Slab.Y) as r:  # the out= bound now, transposed through .data (no new version)
    r.plan()
    out = torch.empty(6, 6, dtype=torch.float64)
    for _ in range(2):
        r.execute(out=out)
    out.data = out.t()
    assert np.array_equal(r.execute(out=out).numpy(), sq.numpy()), "written with the strides it had"
    with torch.inference_mode():  # no version counter: taken, and taken again
        inf = torch.empty(6, 6, dtype=torch.float64)
    for _ in range(2):
        assert r.execute(out=inf) is inf and np.array_equal(inf.numpy(), sq.numpy())
print("memory ok")
"""


def test_new_out_object_over_checked_memory():
    """A new torch tensor each call over memory an out= was checked in (a caching allocator's block
    handed back) is bound without the checks, yet one laid out otherwise (conjugate or negation bit,
    dtype, shape) or overlapping an operand rebound since is still refused."""
    pytest.importorskip("torch")
    res = subprocess.run([sys.executable, "-c", _FRESH], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0 and "memory ok" in res.stdout, res.stdout + res.stderr
