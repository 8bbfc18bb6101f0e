# SPDX-License-Identifier: Apache-2.0
"""nvmath-python 1.0 parity of the pure API (no MPI): the ``redist.distribution`` namespace,
distributions as nvmath's behave (binding, ``str``/``name``, exception types), BlockCyclic,
conversions, options. Our own tests of the behaviours nvmath's suite checks; the MPI-level
ones are in tests/mpi/test_nvmath_compat.py."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import redist
from redist import distribution as dist
from redist import process_group
from redist.distribution import (
    BindDistributionError,
    BlockCyclic,
    BlockNonCyclic,
    Box,
    ConvertDistributionError,
    ProcessGrid,
    Slab,
)


def test_namespaces_mirror_nvmath():
    for name in ("ProcessGrid", "Distribution", "Slab", "Box", "BlockCyclic", "BlockNonCyclic", "BindDistributionError",
                 "ConvertDistributionError", "RedistributeOptions", "Redistribute", "redistribute"):
        assert hasattr(dist, name), name
    for name in ("initialize", "finalize", "get_context", "ProcessGroup", "MPIProcessGroup", "TorchProcessGroup",
                 "allocate_symmetric_memory", "free_symmetric_memory", "distribution", "DistributedContext"):
        assert hasattr(redist, name), name
    assert [op.name for op in process_group.ReductionOp] == ["SUM", "MIN", "MAX"]
    assert issubclass(BlockNonCyclic, BlockCyclic)
    assert redist.Slab is Slab and redist.Box is Box


def test_result_defaults():
    """redist keeps one persistent result; the nvmath namespace returns fresh ones."""
    assert redist.RedistributeOptions().result == "persistent"
    assert dist.RedistributeOptions().result == "fresh"
    assert issubclass(dist.Redistribute, redist.Redistribute)
    assert dist.Redistribute._options_class.coerce({"blocking": True}).result == "fresh"
    assert dist.Redistribute._options_class.coerce(redist.RedistributeOptions()).result == "persistent"
    with pytest.raises(ValueError, match="result must be 'persistent' or 'fresh'"):
        redist.RedistributeOptions(result="new")


def test_slab_str_name_and_binding():
    assert str(Slab.X) == "Slab(partition_dim=0, ndim=None)" and Slab.X.name == "Slab.X"
    assert Slab(1, ndim=3).name == "Slab.Y" and Slab(4).name == "Slab"
    s = Slab.X.copy()
    assert s is not Slab.X and s == Slab.X and not s._bound
    # in place, as nvmath's private _bind: the shape on "this" rank checked (rank/nranks given here
    # through bind(); _bind asks the runtime, see the MPI tests)
    b = Slab.Y.bind((4, 6))
    assert b._bound and not Slab.Y._bound and b.ndim == 2
    assert str(b) == "Slab(partition_dim=1, ndim=2)[bound: global_shape=(4, 6), shape=None]"
    b._bound = False  # what nvmath's tests do to reuse a bound distribution
    assert not b._bound and str(b) == "Slab(partition_dim=1, ndim=2)"
    with pytest.raises(RuntimeError, match="This distribution is unbound: please specify a global shape"):
        Slab.X.shape(0, nranks=2)
    with pytest.raises(ValueError, match="rank must be an integer, got 0.5"):
        Slab.X.shape(0.5, (4, 4), nranks=2)
    with pytest.raises(ValueError, match="This is not a valid process rank: got rank=2 with nranks=2"):
        Slab.X.shape(2, (4, 4), nranks=2)


def test_box_binding_and_peer_shape():
    b = Box((0, 0), (2, 4))
    assert b._bind((4, 4), shape=(2, 4)) is b and b._bound
    assert str(b) == "Box(lower=(0, 0), upper=(2, 4))[bound: global_shape=(4, 4), shape=(2, 4)]"
    with pytest.raises(BindDistributionError, match="is already bound"):
        b._bind((4, 4))
    with pytest.raises(BindDistributionError, match="don't fit this Box distribution"):
        Box((0, 0), (2, 4))._bind((4, 4), shape=(4, 4))
    with pytest.raises(ValueError, match=r"The upper coordinates must be larger than the lower coordinates, but got "
                                         r"lower=\(2, 2\) upper=\(0, 0\)"):
        Box((2, 2), (0, 0)).shape()  # checked at first use (redist.Redistribute: on every rank)
    assert b.to(Box, ndim=3) == Box((0, 0, 0), (2, 4, 1)) and b.to(Box, ndim=3)._bound
    with pytest.raises(ValueError, match="is not a valid distribution"):
        b.to(int)


def test_block_cyclic_shapes_follow_scalapack():
    """Local extents of a 2x3 grid, blocks 2x2, first process (1, 2): counted element by element."""
    grid = ProcessGrid((2, 3), ProcessGrid.Layout.ROW_MAJOR)
    bc = BlockCyclic(grid, (2, 2), first_process=(1, 2))
    g = (9, 11)
    owner = {}
    for i in range(g[0]):
        for j in range(g[1]):
            pr = ((i // 2) + 1) % 2
            pc = ((j // 2) + 2) % 3
            r = pr * 3 + pc
            owner[r] = owner.get(r, 0) + 1
    for r in range(6):
        shape = bc.shape(r, g, nranks=6)
        assert shape[0] * shape[1] == owner[r], (r, shape, owner[r])
    assert sum(np.prod(bc.shape(r, g, nranks=6)) for r in range(6)) == 99
    assert bc.block_sizes == (2, 2) and bc.first_process == (1, 2)
    assert str(bc).startswith("BlockCyclic(process_grid=ProcessGrid(shape=(2, 3)")


def test_block_cyclic_box_only_without_cycling():
    grid = ProcessGrid((4,))
    one_block = BlockCyclic(grid, (3,))
    assert [one_block.box(r, (10,), nranks=4) for r in range(4)] == [
        Box((0,), (3,)), Box((3,), (6,)), Box((6,), (9,)), Box((9,), (10,))]
    with pytest.raises(TypeError, match="Redistribute requires distributions compatible with Box distribution"):
        BlockCyclic(grid, (2,)).box(0, (10,), nranks=4)


@pytest.mark.parametrize("make, exc, match", [
    (lambda: BlockCyclic(ProcessGrid((2,)), (2.0,)), ValueError, "Must provide a sequence of integer block sizes"),
    (lambda: BlockCyclic(ProcessGrid((2,)), (2, 2)), ValueError, r"Number of block sizes \(2\) doesn't match"),
    (lambda: BlockCyclic(ProcessGrid((2,)), (2,), first_process=(2,)), ValueError, "is not a valid index"),
    (lambda: BlockCyclic(ProcessGrid((2,)), (2,), first_process=("a",)), ValueError, "integer coordinates"),
])
def test_block_cyclic_rejects(make, exc, match):
    with pytest.raises(exc, match=match):
        make()


def test_conversions_between_kinds():
    bc1 = BlockCyclic(ProcessGrid((4,)), (4,), first_process=(0,))
    up = bc1.to(BlockCyclic, ndim=2)
    assert type(up) is BlockCyclic and up.block_sizes == (4, 1) and up.first_process == (0, 0)
    assert up.process_grid.shape == (4, 1)
    with pytest.raises(ValueError, match=r"ndim argument \(1\) must be >= the distribution's dimensionality \(2\)"):
        up.to(BlockCyclic, ndim=1)
    with pytest.raises(NotImplementedError):
        bc1.to(BlockNonCyclic)
    with pytest.raises(ConvertDistributionError, match="Unbound BlockCyclic"):
        bc1.to(Slab)
    assert bc1.bind((16,)).to(Slab) == Slab(0, ndim=1)  # block = extent / processes: a slab
    with pytest.raises(ConvertDistributionError, match="block size in the partition dimension"):
        BlockCyclic(ProcessGrid((4,)), (2,)).bind((16,)).to(Slab)
    # Slab -> the BlockCyclic family is a BlockNonCyclic on a 1-D grid (nranks given: no runtime)
    b = Slab(0).to(BlockCyclic, ndim=2, nranks=4)
    assert type(b) is BlockNonCyclic and b.block_sizes == (-1, -1) and b.first_process == (0, 0)
    bnc = BlockNonCyclic(ProcessGrid((4,)), first_process=(0,)).to(BlockCyclic, ndim=2)
    assert type(bnc) is BlockNonCyclic and bnc.block_sizes == (-1, 1) and bnc.process_grid.shape == (4, 1)
    assert BlockNonCyclic(ProcessGrid((4,))).to(BlockNonCyclic, ndim=3).process_grid.shape == (4, 1, 1)
    with pytest.raises(ValueError, match=r"ndim argument \(1\) must be >= the distribution's dimensionality \(2\)"):
        BlockNonCyclic(ProcessGrid((2, 2))).to(BlockNonCyclic, ndim=1)
    with pytest.raises(ConvertDistributionError, match="Unbound Slab distribution can't be converted to Box"):
        Slab.X.to(Box)
    assert BlockNonCyclic(ProcessGrid((2, 2))).bind((4, 6)).block_sizes == (2, 3)


def test_geometry_helpers_never_start_mpi():
    """Slab/BlockNonCyclic shapes and boxes with rank and nranks given import no MPI at all."""
    code = (
        "import sys, redist\n"
        "from redist import Slab, BlockNonCyclic, ProcessGrid\n"
        "assert Slab.X.shape(1, (9, 4), nranks=2) == (4, 4)\n"
        "assert Slab.Y.box(0, (9, 4), nranks=2).upper == (9, 2)\n"
        "assert BlockNonCyclic(ProcessGrid((2, 2))).shape(3, (5, 5), nranks=4) == (2, 2)\n"
        "assert redist.get_context() is None and not redist.is_initialized()\n"
        "assert 'mpi4py.MPI' not in sys.modules, 'mpi4py.MPI was imported'\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
