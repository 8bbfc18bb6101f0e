# SPDX-License-Identifier: Apache-2.0
"""The bad-input matrix of the Python API: each case misuses redist, usually on one rank only.

Every case names its expected outcome next to it: ``OK`` (works, with the right data) or
``(exception class, message pattern)`` raised on EVERY rank with the same message, which names
the rank at fault (``{last}`` is P-1, ``{P}`` the number of ranks). tests/mpi/test_bad_input.py
runs each case in its own ``mpiexec`` (P=2 and P=3) under a watchdog, through
tests/mpi/workers/bad_input_worker.py: a hang, a crash or a wrong result fails the case.
"""

from __future__ import annotations

import functools
import gc
import weakref
from dataclasses import dataclass

import numpy as np
from helpers import global_values, push_route, same_bits, sl

import redist
from redist import BlockNonCyclic, ProcessGrid, RawArray, Redistribute, Slab
from redist.engine import errors

OK = "ok"
SHAPE = (8, 6, 5)


@dataclass(frozen=True)
class Case:
    name: str
    fn: object
    expect: object  # OK or (class, pattern)
    needs: tuple[str, ...] = ()  # packages the case imports (test_bad_input.py skips it without them)


CASES: dict[str, Case] = {}


def case(expect, needs: tuple[str, ...] = ()):
    def deco(fn):
        name = fn.__name__
        assert name not in CASES, name
        CASES[name] = Case(name, fn, expect, needs)
        return fn
    return deco


class Env:
    """What a case sees: its rank, the job size, and a place to record wrong data."""

    def __init__(self, comm):
        self.comm, self.rank, self.P = comm, comm.Get_rank(), comm.Get_size()
        self.last = self.P - 1
        self.wrong: list[str] = []

    def check(self, cond, what):
        if not cond:
            self.wrong.append(what)

    def is_last(self) -> bool:
        return self.rank == self.last


def operand(env, dtype=np.float64, shape=SHAPE, dist=Slab.X, salt=0):
    g = global_values(shape, dtype, salt)
    box = dist.box(env.rank, shape, nranks=env.P)
    return np.ascontiguousarray(g[sl(box)]), g


def want(env, g, dist=Slab.Y, shape=SHAPE):
    return g[sl(dist.box(env.rank, shape, nranks=env.P))]


def planned(env, dtype=np.float64, options=None):
    a, g = operand(env, dtype)
    r = Redistribute(a, Slab.X, Slab.Y, options=options)
    r.plan()
    return r, a, g


def right(env, res, g, what="result"):
    env.check(same_bits(np.asarray(res), want(env, g)), f"{what}: wrong data")


# --- construction: boxes and distributions ---------------------------------------------------


def _boxes_with(env, bad):
    """Slab.X boxes, with ``bad(box) -> box`` applied on the last rank."""
    a, g = operand(env)
    box = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    lo, hi = list(box.lower), list(box.upper)
    if env.is_last():
        lo, hi = bad(lo, hi)
        a = np.zeros(tuple(max(0, h - l) for l, h in zip(lo, hi)))
    return a, (tuple(lo), tuple(hi))


@case((errors.InvalidValueError, r"The global number of elements is incompatible .*; rank 0 box .* overlaps rank {last} box .*"
                                 r"need allow_overlap=True"))
def box_overlap_last(env):
    a, box = _boxes_with(env, lambda lo, hi: ([0] + lo[1:], hi))
    Redistribute(a, box, Slab.Y)


@case((errors.InvalidValueError, r"The global number of elements is incompatible with the inferred global shape \(8, 6, 5\): "
                            r".*cover \d+ of the \d+ elements.*element \(\d+, 0, 0\) belongs to no rank"))
def box_gap_last(env):
    a, box = _boxes_with(env, lambda lo, hi: ([lo[0] + 1] + lo[1:], hi))
    Redistribute(a, box, Slab.Y)


@case((errors.InvalidValueError, r"rank {last} input box .* negative coordinate on axis 1"))
def box_negative_last(env):
    a, box = _boxes_with(env, lambda lo, hi: ([lo[0], -1] + lo[2:], [hi[0], hi[1] - 1] + hi[2:]))
    Redistribute(a, box, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: The upper coordinates must be larger than the lower coordinates.*lower > upper on axis 2"))
def box_inverted_last(env):
    a, box = _boxes_with(env, lambda lo, hi: (lo[:2] + [4], hi[:2] + [2]))
    Redistribute(np.zeros((1, 1, 1)) if env.is_last() else a, box, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: The upper coordinates must be larger than the lower coordinates.*lower > upper on axis 2"))
def box_object_inverted_last(env):
    """A Box object (not a tuple) built wrong on one rank: checked inside Redistribute's agreement."""
    a, box = _boxes_with(env, lambda lo, hi: (lo[:2] + [4], hi[:2] + [2]))
    Redistribute(np.zeros((1, 1, 1)) if env.is_last() else a, redist.Box(*box), Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: invalid Box: box coordinates must be integers, got 0.5"))
def box_object_float_output_last(env):
    a, _ = operand(env)
    ob = Slab.Y.box(env.rank, SHAPE, nranks=env.P).as_tuple()
    Redistribute(a, Slab.X, redist.Box((0.5,) + ob[0][1:], ob[1]) if env.is_last() else redist.Box(*ob))


@case((errors.InvalidValueError, r"rank {last} input box .* coordinate >= 2\*\*62"))
def box_huge_coordinate_last(env):
    a, box = _boxes_with(env, lambda lo, hi: (lo[:2] + [2**63], hi[:2] + [2**63 + 5]))
    Redistribute(np.zeros((1, 6, 5)) if env.is_last() else a, box, Slab.Y)


@case((errors.InvalidValueError, r"rank {last} input box .* has 2 dimensions, the operand has 3"))
def box_ndim_mismatch_last(env):
    a, box = _boxes_with(env, lambda lo, hi: (lo[:2], hi[:2]))
    Redistribute(a if not env.is_last() else np.zeros((1, 6, 5)), box, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: invalid Box: box coordinates must be integers, got 0.5"))
def box_float_coordinate_last(env):
    a, box = operand(env)[0], Slab.X.box(env.rank, SHAPE, nranks=env.P).as_tuple()
    Redistribute(a, ((0.5, 0, 0), box[1]) if env.is_last() else box, Slab.Y)


@case((errors.InvalidValueError, r"the input boxes span the global box .* but the output boxes span .*same global array"))
def output_box_outside_last(env):
    a, _ = operand(env)
    ib = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    ob = Slab.Y.box(env.rank, SHAPE, nranks=env.P).as_tuple()
    if env.is_last():
        ob = (ob[0], (ob[1][0] + 3,) + ob[1][1:])
    Redistribute(a, ib, ob)


@case((errors.InvalidValueError, r"same global array"))
def output_global_box_differs(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X.box(env.rank, SHAPE, nranks=env.P), Slab.Y.box(env.rank, (8, 7, 5), nranks=env.P))


@case((errors.InvalidValueError, r"rank {last} operand shape \(1, 6, 5\) does not match its input box"))
def operand_shape_vs_box_last(env):
    a, _ = operand(env)
    box = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    Redistribute(np.zeros((1, 6, 5)) if env.is_last() else a, box, Slab.Y)


@case((errors.InvalidValueError, r"(rank 0 operand shape .* does not fit the input distribution .*axis 1.* is 5, but|"
                            r"extents on axis 1, .* differ between ranks: rank 0 has 5, rank 1 has 6)"))
def slab_shape_wrong_rank0(env):
    a, _ = operand(env)
    Redistribute(a[:, :-1] if env.rank == 0 else a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"Inconsistent input distribution type .* rank {last} uses Box"))
def distribution_kind_differs_last(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X.box(env.rank, SHAPE, nranks=env.P) if env.is_last() else Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"Inconsistent output distribution .* rank {last} uses Slab\(partition_dim=2, ndim=None\)"))
def distribution_differs_last(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, Slab.Z if env.is_last() else Slab.Y)


@case((errors.InvalidTypeError, r"rank {last}: output_distribution must be a redist Distribution"))
def distribution_not_one_last(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, "slab-y" if env.is_last() else Slab.Y)


@case((errors.InvalidValueError, r"Number of grid elements \(7\) must equal the number of processes"))
def process_grid_wrong_size(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, BlockNonCyclic(ProcessGrid((1, 7, 1))))


@case((errors.InvalidValueError, r"Slab\(partition_dim=3, ndim=None\) can't split axis 3 of a 3-D array"))
def slab_axis_beyond_ndim(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, Slab(3))


# --- construction: global_shape= (checked against the global shape the local extents infer) ------


@case(OK)
def global_shape_right_works(env):
    """global_shape= that matches: Slab distributions (the object) and Box ones (the function form)."""
    a, g = operand(env)
    with Redistribute(a, Slab.X, Slab.Y, global_shape=SHAPE) as r:
        r.plan()
        right(env, r.execute(), g)
    boxes = [d.box(env.rank, SHAPE, nranks=env.P) for d in (Slab.X, Slab.Y)]
    right(env, redist.redistribute(a, *boxes, global_shape=list(SHAPE)), g, "redistribute(global_shape=)")


@case((errors.InvalidValueError, r"global_shape=\(8, 6, 5\) was passed, but the inferred global shape is \((\d+), 6, 5\) "
                                 r"\(inferred from the ranks' local extents under the input distribution Slab.*; "
                                 r"for global_shape=\(8, 6, 5\), rank {last} would hold \(\d, 6, 5\), not \(8, 6, 5\)\): "
                                 r"the input boxes are rank 0 Box.*, rank {last} Box\(lower=\(\d+, 0, 0\), upper=\(\1, 6, 5\)\)"))
def global_shape_whole_array_on_last(env):
    """The last rank passes the whole array as its slab: the global array would grow by it."""
    a, g = operand(env)
    Redistribute(g if env.is_last() else a, Slab.X, Slab.Y, global_shape=SHAPE)


@case((errors.InvalidValueError, r"global_shape=\(8, 6, 5\) was passed, but the inferred global shape is \(\d+, \d, 5\).*"
                                 r"rank 0 would hold \(\d, 6, 5\), not \(8, \d, 5\)\): the input boxes are rank 0 Box"))
def global_shape_y_slab_as_x(env):
    """Every rank passes its Y slab as a Slab.X piece (the issue's example): the shapes tile a wrong array."""
    a, g = operand(env, dist=Slab.Y)
    Redistribute(a, Slab.X, Slab.Y, global_shape=SHAPE)


@case((errors.InvalidValueError, r"global_shape differs between ranks: rank 0 passes \(8, 6, 5\), but rank {last} "
                                 r"passes None \(None: not passed\); pass the same global_shape on every rank"))
def global_shape_missing_on_last(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, Slab.Y, global_shape=None if env.is_last() else SHAPE)


@case((errors.InvalidTypeError, r"rank {last}: global_shape must be a sequence of ints, got 8"))
def global_shape_not_a_sequence_last(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, Slab.Y, global_shape=8 if env.is_last() else SHAPE)


# --- construction: dtypes, shapes, packages, layouts -------------------------------------------


@case((errors.InvalidValueError, r"inconsistent dtype across ranks: rank 0 has '<f8', but rank {last} '<f4'"))
def dtype_differs_last(env):
    a, _ = operand(env, np.float32 if env.is_last() else np.float64)
    Redistribute(a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"inconsistent dtype across ranks: rank 0 has '<f8', but rank {last} '>f8'"))
def byte_order_differs_last(env):
    a, _ = operand(env)
    Redistribute(a.astype(">f8") if env.is_last() else a, Slab.X, Slab.Y)


@case(OK)
def byte_order_big_endian_everywhere(env):
    a, g = operand(env, ">f8")
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        res = r.execute()
        env.check(res.dtype == np.dtype(">f8"), f"result dtype {res.dtype}")
        right(env, res, g)


@case((errors.InvalidTypeError, r"rank {last}: dtype object holds Python object pointers"))
def dtype_object_last(env):
    a, _ = operand(env)
    Redistribute(a.astype(object) if env.is_last() else a, Slab.X, Slab.Y)


@case((errors.InvalidTypeError, r"rank 0: dtype object holds Python object pointers"))
def dtype_object_everywhere(env):
    Redistribute(operand(env)[0].astype(object), Slab.X, Slab.Y)


@case((errors.InvalidTypeError, r"rank {last}: dtype StringDType\(\) holds Python object pointers"))
def dtype_string_dtype_last(env):
    a, _ = operand(env)
    if env.is_last():
        a = a.astype(np.dtypes.StringDType())
    Redistribute(a, Slab.X, Slab.Y)


@case((errors.InvalidTypeError, r"rank {last}: dtype .* holds Python object pointers"))
def dtype_struct_with_object_field_last(env):
    a, _ = operand(env)
    if env.is_last():
        b = np.empty(a.shape, [("x", "<f8"), ("o", "O")])
        b["x"] = a
        a = b
    Redistribute(a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"inconsistent dtype across ranks: .* rank {last} \"\[\('x', '<i4'\), \('z', '<f8'\)\]\""))
def struct_field_names_differ_last(env):
    dt = [("x", "<i4"), ("z" if env.is_last() else "y", "<f8")]
    Redistribute(operand(env, dt)[0], Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"inconsistent dtype across ranks: rank 0 has '<M8\[s\]', but rank {last} '<M8\[ms\]'"))
def datetime_units_differ_last(env):
    a, _ = operand(env, "M8[ms]" if env.is_last() else "M8[s]")
    Redistribute(a, Slab.X, Slab.Y)


@case(OK)
def datetime_and_structs_work(env):
    for dt in ("M8[s]", [("x", "<i4"), ("y", "<f8")], "S3", "U2", "c16"):
        a, g = operand(env, dt)
        with Redistribute(a, Slab.X, Slab.Y) as r:
            r.plan()
            right(env, r.execute(), g, f"dtype {dt}")


@case((errors.InvalidValueError, r"inconsistent number of dimensions across ranks: rank 0 has 3, but rank {last} 2"))
def ndim_differs_last(env):
    a, _ = operand(env)
    Redistribute(a[:, :, 0] if env.is_last() else a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"at least one dimension"))
def zero_dimensional(env):
    Redistribute(np.array(float(env.rank)), Slab.X, Slab.Y)


@case((errors.InvalidTypeError, r"inconsistent array package across ranks: .*rank {last} 'torch'"),
      needs=("torch",))
def package_differs_last(env):
    import torch

    a, _ = operand(env)
    Redistribute(torch.from_numpy(a) if env.is_last() else a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: output_distribution Slab cannot be sent to the other ranks \(pickling "
                                  r"it raised TypeError"))
def distribution_unpicklable_last(env):
    """A distribution the ranks cannot gather (here a lock hung on it) on one rank: raised on every
    rank, not a bare TypeError on one and a hang on the others."""
    import threading

    a, _ = operand(env)
    out = Slab.Y
    if env.is_last():
        out = Slab.Y.copy()
        out.note = threading.Lock()
    Redistribute(a, Slab.X, out)


@case((errors.InvalidValueError, r"rank {last}: .*torch tensor carries a lazy conjugate .*resolve_conj\(\)"),
      needs=("torch",))
def torch_conjugate_view_last(env):
    """t.conj() of a complex tensor is a flag over unconjugated memory: moving its bytes would give
    the unconjugated values, silently."""
    import torch

    a, _ = operand(env, np.complex128)
    t = torch.from_numpy(a)
    Redistribute(t.conj() if env.is_last() else t, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): .*torch tensor carries a lazy conjugate"),
      needs=("torch",))
def torch_out_conjugate_view_last(env):
    """A conjugated view as out=: what the user reads back would be the conjugate of the result.
    The good ranks' out= keeps its bytes (a refused call writes nothing)."""
    import torch

    a, g = operand(env, np.complex128)
    r = Redistribute(torch.from_numpy(a), Slab.X, Slab.Y)
    r.plan()
    res = r.execute()
    out = torch.full(tuple(res.shape), 7 + 7j, dtype=torch.complex128)
    try:
        r.execute(out=out.conj() if env.is_last() else out)
    finally:
        env.check(bool((out == 7 + 7j).all()), "a refused call wrote out=")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= is refused: the torch tensor spans bytes "
                                 r"\[0, \d+\) of its storage, which holds \d+ bytes"), needs=("torch",))
def torch_out_storage_shrunk_last(env):
    """An out= taken before, whose storage was then shrunk in place on the last rank (the same
    address, layout and version): the exchange would write past its memory. Refused everywhere;
    the good ranks' out= keeps its bytes."""
    import torch

    a, g = operand(env)
    r = Redistribute(torch.from_numpy(a), Slab.X, Slab.Y)
    r.plan()
    res = r.execute()
    out = torch.full(tuple(res.shape), 7.0, dtype=torch.float64)
    for _ in range(2):  # bound now, taken again by the fast path (a copy checked: numpy's view would pin the storage)
        right(env, r.execute(out=out).clone(), g, "out= taken again")
    out.fill_(7.0)
    storage = out.untyped_storage()
    if env.is_last():
        with torch.no_grad():
            storage.resize_(storage.nbytes() // 2)  # may move; where it stays, only its size tells
    try:
        r.execute(out=out)
    finally:  # (the last rank's out= reaches past its storage now: not read)
        env.check(env.is_last() or bool((out == 7.0).all()), "a refused call wrote out=")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has dtype int64, expected float64"),
      needs=("torch",))
def torch_out_retyped_through_data_last(env):
    """The out= bound now, re-typed through ``.data`` on the last rank (same address, shape and
    version): refused everywhere, as a new object of that dtype is."""
    import torch

    a, g = operand(env)
    r = Redistribute(torch.from_numpy(a), Slab.X, Slab.Y)
    r.plan()
    out = torch.full(tuple(r.execute().shape), 7.0, dtype=torch.float64)
    for _ in range(2):
        right(env, r.execute(out=out), g, "out= taken again")
    if env.is_last():  # (nothing in between that would bump its version)
        out.data = out.view(torch.int64)
    r.execute(out=out)


@case(OK, needs=("torch",))
def torch_operand_moved_last(env):
    """The bound torch operand moved on the last rank (``set_`` onto another tensor of its layout;
    its old storage may be freed): read where it points now, replayed calls too."""
    import torch

    a, g = operand(env)
    x = torch.from_numpy(a.copy())
    r = Redistribute(x, Slab.X, Slab.Y)
    r.plan()
    for _ in range(3):  # replayed from the second call on
        right(env, r.execute(), g)
    if env.is_last():
        before = x.view_as(x)  # the old storage, kept alive and overwritten: read there, the result is wrong
        x.set_(torch.from_numpy(a.copy()))
        before.fill_(-1.0)
    for _ in range(3):
        right(env, r.execute(), g, "after the move")


@case((errors.InvalidValueError, r"rank {last}: the operand changed in place since it was bound \(set_\(\) or \.data =\): "
                                 r"The new operand's shape"), needs=("torch",))
def torch_operand_reshaped_by_set_last(env):
    """The bound torch operand moved onto a tensor of another shape on the last rank: refused everywhere."""
    import torch

    a, g = operand(env)
    x = torch.from_numpy(a.copy())
    r = Redistribute(x, Slab.X, Slab.Y)
    r.plan()
    for _ in range(2):
        right(env, r.execute(), g)
    if env.is_last():
        x.set_(torch.zeros(x.numel() + 1, dtype=x.dtype))
    r.execute()


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= is refused: the torch tensor carries a lazy "
                                 r"negation"), needs=("torch",))
def torch_out_negated_through_data_last(env):
    """The out= bound now (a strided view: the imaginary parts) given a lazy negation through
    ``.data = z.conj().imag`` on the last rank (same memory, layout and version): refused everywhere."""
    import torch

    a, g = operand(env)
    r = Redistribute(torch.from_numpy(a), Slab.X, Slab.Y)
    r.plan()
    z = torch.zeros(tuple(r.execute().shape), dtype=torch.complex128)
    out = z.imag
    for _ in range(2):
        right(env, r.execute(out=out), g, "out= taken again")
    if env.is_last():
        out.data = z.conj().imag
    r.execute(out=out)


@case((errors.InvalidValueError, r"rank {last}: the operand changed in place since it was bound and cannot be read now"),
      needs=("torch",))
def torch_operand_swapped_sparse_last(env):
    """The bound torch operand swapped for a sparse tensor (torch.utils.swap_tensors) on the last
    rank: it has no data pointer; refused everywhere, never a hang."""
    import torch

    a, g = operand(env)
    x = torch.from_numpy(a.copy())
    r = Redistribute(x, Slab.X, Slab.Y)
    r.plan()
    right(env, r.execute(), g)
    if env.is_last():
        torch.utils.swap_tensors(x, torch.zeros_like(x).to_sparse())
    r.execute()


@case(OK, needs=("torch",))
def torch_out_inference_rank0(env):
    """An out= made under torch.inference_mode (no version counter) on rank 0, none elsewhere
    (host out= may be given on some ranks only): works, taken again too, with the right data."""
    import torch

    a, g = operand(env)
    r = Redistribute(torch.from_numpy(a), Slab.X, Slab.Y)
    r.plan()
    shape = tuple(r.execute().shape)
    with torch.inference_mode():
        out = torch.empty(shape, dtype=torch.float64)
    for _ in range(3):
        res = r.execute(out=out if env.rank == 0 else None)
        right(env, res, g)
    env.check(env.rank != 0 or res is out, "rank 0's result is not its out=")


@case((errors.InvalidValueError, r"rank {last}: .*torch tensor carries a lazy negation .*resolve_neg\(\)"),
      needs=("torch",))
def torch_negative_view_last(env):
    """x.conj().imag is a view with a lazy negation over the imaginary parts' memory."""
    import torch

    a, _ = operand(env, np.complex128)
    x = torch.from_numpy(a)
    imag = torch.from_numpy(np.ascontiguousarray(a.imag))
    Redistribute(x.conj().imag if env.is_last() else imag, Slab.X, Slab.Y)


@case((errors.InvalidTypeError, r"rank 0: field 0: builtins.float not supported .* \(a tuple or list operand holds several "
                           r"fields, one array each\)"))
def not_an_array_rank0(env):
    a, _ = operand(env)
    Redistribute([1.0, 2.0] if env.rank == 0 else a, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"The input memory layout is not C or Fortran, or is inconsistent across processes"))
def layout_differs_odd_ranks(env):
    a, _ = operand(env)
    Redistribute(np.asfortranarray(a) if env.rank % 2 else a, Slab.X, Slab.Y)


@case(OK)
def layout_forced_overrides_operands(env):
    a, g = operand(env)
    with Redistribute(np.asfortranarray(a) if env.rank % 2 else a, Slab.X, Slab.Y,
                      options={"result_layout": "F"}) as r:
        r.plan()
        res = r.execute()
        env.check(res.flags.f_contiguous, "result not F-ordered")
        right(env, res, g)


@case((errors.InvalidValueError, r"inconsistent memory space across ranks: .*rank {last} 'cuda'"))
def memory_space_differs_last(env):
    a, _ = operand(env)
    raw = RawArray(a.ctypes.data, a.shape, None, 8, memory="cuda" if env.is_last() else "cpu", device_id=0,
                   dtype=a.dtype, owner=a)
    Redistribute(raw, Slab.X, Slab.Y)


@case((errors.NotInitializedError, r"CUDA execution needs redist initialised with a GPU"))
def device_memory_without_gpu(env):
    a, _ = operand(env)
    Redistribute(RawArray(a.ctypes.data, a.shape, None, 8, memory="cuda", device_id=0, dtype=a.dtype),
                 Slab.X, Slab.Y)


# --- allow_overlap: replication, allgather, halos -----------------------------------------------

OVERLAP = {"allow_overlap": True}
FULL = ((0, 0, 0), SHAPE)


@case(OK)
def overlap_allgather_and_halo_work(env):
    a, g = operand(env)
    with Redistribute(a, Slab.X, FULL, options=OVERLAP) as r:  # every rank gets the global array
        r.plan()
        env.check(same_bits(r.execute(), g), "allgather: wrong data")
    box = Slab.Y.box(env.rank, SHAPE, nranks=env.P)
    halo = ((box.lower[0], max(0, box.lower[1] - 1), 0), (SHAPE[0], min(SHAPE[1], box.upper[1] + 1), SHAPE[2]))
    with Redistribute(a, Slab.X, halo, options=OVERLAP) as r:
        r.plan()
        ghosted = np.zeros((SHAPE[0] + 2, halo[1][1] - halo[0][1] + 2, SHAPE[2] + 2))
        inner = ghosted[1:-1, 1:-1, 1:-1]  # the halo-grown box written into a ghosted array
        r.execute(out=inner)
        env.check(same_bits(inner, g[sl(halo)]), "halo into a ghosted array: wrong data")
        env.check(not ghosted[0].any() and not ghosted[-1].any(), "halo: ghost layer written")


@case(OK)
def overlap_replicated_input_works(env):
    g = global_values(SHAPE, np.float64)
    with Redistribute(g.copy(), FULL, Slab.Y, options=OVERLAP) as r:  # every rank holds the whole array
        r.plan()
        right(env, r.execute(), g, "replicated input")


@case((errors.InvalidValueError, r"rank {last} output box .* is not covered by the input boxes .*element \(8, \d+, \d+\) "
                            r"is held by no input box"))
def overlap_output_outside_last(env):
    a, _ = operand(env)
    out = ((0, 0, 0), (SHAPE[0] + 1,) + SHAPE[1:]) if env.is_last() else FULL
    Redistribute(a, Slab.X, out, options=OVERLAP)


@case((errors.InvalidValueError, r"the output boxes do not tile the global array exactly: rank 0 box .* overlaps rank 1 box"
                                 r".*overlap on purpose .* need allow_overlap=True"))
def overlap_without_the_option(env):
    a, _ = operand(env)
    Redistribute(a, Slab.X, FULL)


@case(OK)
def overlap_input_with_a_hole(env):
    g = global_values(SHAPE, np.float64)
    box = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    if env.rank == 0:  # a notch in the middle of axis 1: what the last rank sends around it is several boxes
        box = redist.Box((0, 1, 0), (box.upper[0], 5, SHAPE[2]))
    elif env.is_last():
        box = redist.Box(*FULL)
    held = np.ascontiguousarray(g[sl(box)]) + (1000.0 * env.rank if env.is_last() else 0.0)  # the last's replica differs
    with Redistribute(held, box, Slab.Y, options={"allow_overlap": True, "host_method": "pack"}) as r:
        r.plan()
        res = r.execute()
        # what rank 0 (or a middle slab) holds comes from it; the rest from the last rank, whose values differ
        out = Slab.Y.box(env.rank, SHAPE, nranks=env.P)
        want = g[sl(out)] + 1000.0 * env.last
        for q in range(env.P - 1):
            qb = Slab.X.box(q, SHAPE, nranks=env.P) if q else redist.Box((0, 1, 0), (Slab.X.box(0, SHAPE, nranks=env.P).upper[0], 5, SHAPE[2]))
            common = redist.Box(tuple(max(a, b) for a, b in zip(qb.lower, out.lower)), tuple(min(a, b) for a, b in zip(qb.upper, out.upper)))
            if all(h > lo for lo, h in zip(common.lower, common.upper)):
                rel = tuple(slice(lo - o, h - o) for lo, h, o in zip(common.lower, common.upper, out.lower))
                want[rel] = g[sl(common)]
        env.check(same_bits(res, want), "replicated input with a hole: wrong data or wrong source")


@case(OK)
def result_layout_spelt_two_ways(env):
    a, g = operand(env)
    with Redistribute(a, Slab.X, Slab.Y, options={"result_layout": (0, 1, 2) if env.is_last() else "C"}) as r:
        r.plan()
        right(env, r.execute(), g)


@case((errors.InvalidValueError, r"rank {last}: result_layout must be 'auto', 'C', 'F' or a permutation of the axes, "
                            r"got \(True, False, 2\)"))
def result_layout_bools_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"result_layout": (True, False, 2)} if env.is_last() else None)


@case((errors.InvalidValueError, r"inconsistent options across ranks.*allow_overlap"))
def overlap_option_differs_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"allow_overlap": env.is_last()})


@case((errors.InvalidTypeError, r"rank {last}: allow_overlap must be True or False, got 'yes'"))
def overlap_option_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"allow_overlap": "yes"} if env.is_last() else None)


# --- construction: options and streams ----------------------------------------------------------


@case((errors.InvalidValueError, r"inconsistent options across ranks"))
def options_differ_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"host_method": "pack" if env.is_last() else "auto"})


@case((errors.InvalidValueError, r"rank {last}: The value specified for 'blocking' must be either True or 'auto'"))
def option_bad_value_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"blocking": False} if env.is_last() else None)


@case((errors.InvalidValueError, r"rank {last}: unknown Redistribute option\(s\) \['blokcing'\]"))
def option_unknown_key_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"blokcing": True} if env.is_last() else None)


@case((errors.InvalidTypeError, r"rank {last}: The Redistribute options must be provided"))
def options_bad_type_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options=5 if env.is_last() else None)


@case((errors.InvalidValueError, r"rank {last}: execution must be 'auto', 'cpu' or 'cuda'"))
def option_execution_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"execution": "gpu"} if env.is_last() else None)


@case((errors.InvalidValueError, r"rank {last}: host_method must be one of"))
def option_host_method_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"host_method": "fast"} if env.is_last() else None)


@case((errors.InvalidValueError, r"rank {last}: tune must be one of \('estimate', 'measure', 'wisdom'\), got 'fast'"))
def option_tune_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"tune": "fast"} if env.is_last() else None)


@case((errors.InvalidValueError, r"inconsistent options across ranks.*tune"))
def option_tune_differs_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"tune": "measure" if env.is_last() else "estimate"})


@case((errors.InvalidTypeError, r"rank {last}: a wisdom path must be a str or os.PathLike, got int"))
def wisdom_import_bad_path_last(env):
    redist.import_wisdom(5 if env.is_last() else "/nonexistent/wisdom.json")


@case((errors.InvalidValueError, r"rank 0: cannot write the wisdom file /nonexistent-dir/w.json"))
def wisdom_export_unwritable(env):
    redist.export_wisdom("/nonexistent-dir/w.json")


@case((errors.InvalidValueError, r"rank {last}: signal must be one of \('epoch', 'barrier'\)"))
def option_signal_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"signal": "none"} if env.is_last() else None)


@case((errors.InvalidValueError, r"inconsistent options across ranks"))
def option_signal_differs_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"signal": "barrier" if env.is_last() else "epoch"})


@case((errors.InvalidTypeError, r"rank {last}: logger must be a logging.Logger"))
def option_logger_bad_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, options={"logger": print} if env.is_last() else None)


@case((errors.InvalidTypeError, r"rank {last}: unsupported stream object builtins.str"))
def stream_bad_object_last(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y, stream="s0" if env.is_last() else None)


# --- strides: what works ----------------------------------------------------------------------


@case(OK)
def negative_strides_everywhere(env):
    g = global_values(SHAPE, np.float64)
    box = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    a = np.ascontiguousarray(g[sl(box)][::-1, :, ::-1])[::-1, :, ::-1]  # same values, reversed memory
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        right(env, r.execute(), g)


@case(OK)
def negative_strides_on_the_last_rank_only(env):
    a, g = operand(env)
    if env.is_last():
        a = np.ascontiguousarray(a[::-1])[::-1]
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        right(env, r.execute(), g)


@case(OK)
def broadcast_operand_zero_strides(env):
    """Zero strides (a broadcast view) as input are read as many times as needed: supported."""
    box = Slab.X.box(env.rank, SHAPE, nranks=env.P)
    row = np.arange(SHAPE[2], dtype=np.float64)
    a = np.broadcast_to(row, box.box_shape)
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        res = r.execute()
        env.check(np.array_equal(res, np.broadcast_to(row, res.shape)), "broadcast operand: wrong data")


@case(OK)
def broadcast_operand_on_one_rank_2d(env):
    """``np.broadcast_to(a[:1], a.shape)`` (strides (0, 8)) on the last rank only, C operands
    elsewhere, result_layout="auto": a zero-stride axis fits either order, the result is C."""
    shape = (7, 5)
    g = global_values(shape, np.float64)
    a = np.ascontiguousarray(g[sl(Slab.X.box(env.rank, shape, nranks=env.P))])
    if env.is_last():
        a = np.broadcast_to(a[:1], a.shape)
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        held = g.copy()
        lo, hi = Slab.X.box(env.last, shape, nranks=env.P)
        held[lo[0]:hi[0]] = g[lo[0]]
        env.check(r.layout == "C" and same_bits(r.execute(), held[sl(Slab.Y.box(env.rank, shape, nranks=env.P))]),
                  "broadcast rows on one rank: wrong data")


@case(OK)
def readonly_operand(env):
    a, g = operand(env)
    a.setflags(write=False)
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        right(env, r.execute(), g)


@case(OK)
def empty_boxes_on_some_ranks(env):
    shape = (2, 5, 3)  # fewer planes than ranks at P=3
    g = global_values(shape, np.int32)
    a = np.ascontiguousarray(g[sl(Slab.X.box(env.rank, shape, nranks=env.P))])
    with Redistribute(a, Slab.X, Slab.Z) as r:
        r.plan()
        env.check(same_bits(r.execute(), g[sl(Slab.Z.box(env.rank, shape, nranks=env.P))]), "empty boxes")


@case(OK, needs=("torch",))
def torch_empty_output_boxes(env):
    """torch operands of 4-byte elements where some ranks' output boxes are empty (Slab.Y of 1
    column; gather onto rank 0): the empty results are typed torch tensors."""
    import torch

    shape = (4, 1)
    g = global_values(shape, np.float32)
    a = torch.from_numpy(np.ascontiguousarray(g[sl(Slab.X.box(env.rank, shape, nranks=env.P))]))
    res = redist.redistribute(a, Slab.X, Slab.Y)
    env.check(isinstance(res, torch.Tensor) and res.dtype == torch.float32, f"result {type(res)}")
    env.check(same_bits(res.numpy(), g[sl(Slab.Y.box(env.rank, shape, nranks=env.P))]), "Slab.Y of one column")
    full = ((0, 0), shape)
    root = full if env.rank == 0 else ((0, 0), (0, 0))
    res = redist.redistribute(a, Slab.X, root, options=OVERLAP)
    env.check(same_bits(res.numpy(), g if env.rank == 0 else g[:0, :0]), "gather onto rank 0")


@case((errors.NotSupportedError, r"'alltoallw'"))
def alltoallw_negative_strides_last(env):
    a, _ = operand(env)
    if env.is_last():
        a = np.ascontiguousarray(a[::-1])[::-1]
    with Redistribute(a, Slab.X, Slab.Y, options={"host_method": "alltoallw"}) as r:
        r.plan()


@case(OK)
def every_host_method_works(env):
    for m in host_methods():
        r, a, g = planned_with(env, m)
        right(env, r.execute(), g, m)
        r.free()


def host_methods():
    """Every host method; push four times: calls with an out= as planned (landing in shared memory:
    small exchanges, like these), copied into across memories below LANDING_MAX, as messages, and
    stored straight into out= at any size (helpers.push_route). ("auto" is push on one node.)"""
    from redist.engine.host import available_methods

    return ("push", "push-copies", "push-messages", "push-direct") + available_methods()


def planned_with(env, method, dtype=np.float64):
    """``planned`` with host_method ``method`` (one of :func:`host_methods`)."""
    with push_route(method):
        return planned(env, dtype, options={"host_method": method.split("-")[0]})


def _refused(env, call, cls, text, what):
    """``call()`` raises ``cls`` mentioning ``text`` (the last rank at fault), on this rank."""
    try:
        call()
        env.check(False, f"{what}: nothing raised")
    except cls as e:
        env.check(f"rank {env.last}" in str(e) and text in str(e), f"{what}: {e}")


@case(OK)
def failed_calls_change_no_byte(env):
    """A call that raises (the last rank's out= is read-only; the last rank's operand is
    released) changes no byte of any rank's out= or engine-owned result, with every host
    method; the operand was rebound to new data first, so any write would show."""
    for m in host_methods():
        r, a, g = planned_with(env, m)
        res = r.execute()
        kept = res.copy()
        r.reset_operand(a * 2)
        out = np.full(res.shape, 7.0)
        if env.is_last():
            out.setflags(write=False)
        _refused(env, lambda: r.execute(out=out), errors.InvalidValueError, "read-only", f"{m}, read-only out=")
        env.check((out == 7.0).all(), f"{m}: a refused call wrote into out=")
        env.check(same_bits(res, kept), f"{m}: a refused call wrote into the result")
        if env.is_last():
            r.release_operand()
        _refused(env, r.execute, errors.InvalidStateError, "released", f"{m}, released operand")
        env.check(same_bits(res, kept), f"{m}: a refused execute() wrote into the result")
        if env.is_last():
            r.reset_operand_unchecked(a * 2)
        right(env, r.execute() / 2, g, f"{m}, after the refused calls")
        r.free()


@case(OK)
def out_never_touches_the_result(env):
    """``b = r.execute(); r.reset_operand(a2); r.execute(out=X)`` leaves b as it was (every host
    method; out= on every rank, then on rank 0 only); the next plain execute() updates b."""
    for m in host_methods():
        r, a, g = planned_with(env, m)
        b = r.execute()
        kept = b.copy()
        for k, who in ((2, range(env.P)), (4, (0,))):  # powers of two: exact
            r.reset_operand(a * k)
            x = np.full(b.shape, -1.0)
            got = r.execute(out=x if env.rank in who else None)
            right(env, got / k, g, f"{m}: out= on ranks {list(who)}")
            env.check(same_bits(b, kept) if env.rank in who else got is b, f"{m}: execute(out=) changed the result")
        right(env, r.execute() / 4, g, f"{m}: the result after")
        r.free()


# --- execute: state ---------------------------------------------------------------------------


@case((errors.InvalidStateError, r"before plan\(\) has been called"))
def execute_before_plan(env):
    Redistribute(operand(env)[0], Slab.X, Slab.Y).execute()


@case((errors.InvalidStateError, r"cannot be called after free\(\)"))
def execute_after_free(env):
    r, _, _ = planned(env)
    r.free()
    r.execute()


@case((errors.InvalidStateError, r"rank {last}: Execution cannot be performed after the operand has been released"))
def execute_after_release_last(env):
    r, _, _ = planned(env)
    if env.is_last():
        r.release_operand()
    r.execute()


@case((errors.InvalidStateError, r"rank 0: Execution cannot be performed after the operand has been released"))
def execute_after_release_everywhere(env):
    r, _, _ = planned(env)
    r.release_operand()
    r.execute()


@case(OK)
def execute_again_after_a_failed_call(env):
    """A failed execute (released operand on the last rank) leaves every rank able to go on."""
    r, a, g = planned(env)
    if env.is_last():
        r.release_operand()
    try:
        r.execute()
        env.check(False, "execute did not raise")
    except errors.InvalidStateError:
        pass
    if env.is_last():
        r.reset_operand_unchecked(a)
    right(env, r.execute(), g, "after the failed call")


# --- execute: out= -----------------------------------------------------------------------------


def _out_case(env, bad_out):
    r, a, g = planned(env)
    res = r.execute()
    out = bad_out(r, a, res) if env.is_last() else np.empty_like(res)
    r.execute(out=out)


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has shape .*expected .* \(the output box"))
def out_wrong_shape_last(env):
    _out_case(env, lambda r, a, res: np.empty(res.shape[:-1] + (res.shape[-1] + 1,)))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has dtype float32, expected float64"))
def out_wrong_dtype_last(env):
    _out_case(env, lambda r, a, res: np.empty(res.shape, np.float32))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has dtype >f8, expected float64"))
def out_wrong_byte_order_last(env):
    _out_case(env, lambda r, a, res: np.empty(res.shape, ">f8"))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= is read-only .*output box is Box"))
def out_read_only_last(env):
    frozen = {}

    def bad(r, a, res):
        o = np.full(res.shape, 7.0)
        o.setflags(write=False)
        frozen["o"] = o
        return o

    try:
        _out_case(env, bad)
    finally:
        if env.is_last():
            env.check((frozen["o"] == 7.0).all(), "a read-only out= was written")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= is read-only"))
def out_over_immutable_bytes_last(env):
    keep = {}

    def bad(r, a, res):
        keep["b"] = bytes(res.nbytes)
        return np.frombuffer(keep["b"], np.float64).reshape(res.shape)

    try:
        _out_case(env, bad)
    finally:
        if env.is_last():
            env.check(keep["b"] == bytes(len(keep["b"])), "an immutable bytes object was modified")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= overlaps the operand"))
def out_aliases_operand_last(env):
    r, a, g = planned(env)
    res = r.execute()
    big = np.empty(a.size + res.size)  # the operand and out= in one buffer, overlapping
    op = big[: a.size].reshape(a.shape)
    op[...] = a
    r.reset_operand(op)
    r.execute(out=big[a.size // 2: a.size // 2 + res.size].reshape(res.shape) if env.is_last() else
              np.empty_like(res))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= overlaps the operand"))
def out_again_after_operand_moved_onto_it_last(env):
    """A time loop's out= (the same object every call), then the last rank rebinds its operand to
    bytes that overlap it: the next call with that out= is checked anew, not taken as already bound."""
    r, a, g = planned(env)
    res = r.execute()
    big = np.zeros(a.size + res.size)
    out = big[a.size // 2: a.size // 2 + res.size].reshape(res.shape)
    for it in range(3):
        right(env, r.execute(out=out), g, f"iteration {it}")
    if env.is_last():
        op = big[: a.size].reshape(a.shape)
        op[...] = a
        r.reset_operand_unchecked(op)
    r.execute(out=out)


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has strides .* overlap in memory"))
def out_self_overlapping_last(env):
    _out_case(env, lambda r, a, res: np.lib.stride_tricks.as_strided(np.empty(res.shape[-1]), res.shape,
                                                                      (0, 0, 8)))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= must be a numpy array like the operand, got torch"),
      needs=("torch",))
def out_wrong_package_last(env):
    import torch

    _out_case(env, lambda r, a, res: torch.empty(res.shape, dtype=torch.float64))


@case((errors.InvalidTypeError, r"rank {last}: builtins.list not supported"))
def out_not_an_array_last(env):
    _out_case(env, lambda r, a, res: [0.0] * res.size)


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= must be in host memory"))
def out_device_memory_for_host_operand_last(env):
    a, g = operand(env)
    r = Redistribute(RawArray(a.ctypes.data, a.shape, None, 8, dtype=a.dtype, owner=a), Slab.X, Slab.Y)
    r.plan()
    res = np.empty(want(env, g).shape)
    r.execute(out=RawArray(res.ctypes.data, res.shape, None, 8, memory="cuda" if env.is_last() else "cpu",
                           device_id=0, dtype=res.dtype, owner=res))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=...\): out= has shape \(5, \d, 8\), expected \(8, \d, 5\)"))
def out_reshaped_in_place_last(env):
    """The same out= object, reshaped in place (``out.shape = ...``) after its first use on the last
    rank: checked anew, not taken from the per-object cache."""
    r, a, g = planned(env)
    out = np.empty_like(r.execute())
    r.execute(out=out)
    if env.is_last():
        out.shape = out.shape[::-1]
    r.execute(out=out)


@case(OK)
def out_reshaped_and_back(env):
    """An out= reshaped in place and back, and one re-typed in place and back: right data every time."""
    r, a, g = planned(env)
    out = np.empty_like(r.execute())
    for it in range(3):
        out[...] = -1
        right(env, r.execute(out=out), g, f"iteration {it}")
        out.shape = out.shape[::-1]
        out.shape = out.shape[::-1]
        out.dtype = np.int64
        out.dtype = np.float64


@case(OK)
def out_strided_ghosted_interior(env):
    r, a, g = planned(env)
    res = r.execute()
    ghosted = np.full(tuple(n + 2 for n in res.shape), -1.0)
    inner = ghosted[1:-1, 1:-1, 1:-1]
    env.check(r.execute(out=inner) is inner, "execute(out=) did not return out")
    right(env, inner, g, "ghosted interior")
    env.check((ghosted[0] == -1).all() and (ghosted[:, :, -1] == -1).all(), "ghost layer written")


@case(OK)
def out_negative_strides(env):
    r, a, g = planned(env)
    res = r.execute()
    out = np.empty_like(res)[::-1, :, ::-1]
    right(env, r.execute(out=out), g, "reversed out=")


@case(OK)
def out_on_some_ranks_only(env):
    r, a, g = planned(env)
    res = r.execute()
    for it in range(4):
        o = np.empty_like(res) if env.rank == 0 else None
        right(env, r.execute(out=o), g, f"iteration {it}")


@case(OK)
def out_new_view_of_the_same_buffer_every_call(env):
    r, a, g = planned(env)
    res = r.execute()
    buf = np.empty_like(res)
    for it in range(5):  # rank 0: a new view object each call; the others: the same object
        o = buf[...] if env.rank == 0 else buf
        right(env, r.execute(out=o), g, f"iteration {it}")


@case(OK)
def out_double_buffered_on_one_rank(env):
    r, a, g = planned(env)
    res = r.execute()
    bufs = [np.empty_like(res), np.empty_like(res)]
    for it in range(6):
        o = bufs[it % 2] if env.is_last() else None
        right(env, r.execute(out=o), g, f"iteration {it}")


@case(OK)
def out_is_the_result_itself(env):
    r, a, g = planned(env)
    res = r.execute()
    right(env, r.execute(out=res), g)


@case(OK)
def out_made_read_only_later_is_refused_then_fine(env):
    r, a, g = planned(env)
    res = r.execute()
    o = np.empty_like(res)
    right(env, r.execute(out=o), g)
    if env.is_last():
        o.setflags(write=False)
    try:
        r.execute(out=o)
        env.check(False, "a read-only out= passed")
    except errors.InvalidValueError as e:
        env.check(f"rank {env.last}" in str(e) and "read-only" in str(e), str(e))
    o2 = np.empty_like(res)
    right(env, r.execute(out=o2), g, "after the refused call")


@case(OK)
def sync_and_release_workspace_flags_on_host(env):
    """Host executions ignore sync_symmetric_memory; release_workspace only frees local staging."""
    r, a, g = planned(env, options={"host_method": "pack"})
    right(env, r.execute(sync_symmetric_memory=env.rank % 2 == 0, release_workspace=env.is_last()), g)
    right(env, r.execute(), g, "after release_workspace")


# --- reset_operand ------------------------------------------------------------------------------


def _reset_case(env, bad):
    r, a, g = planned(env)
    r.reset_operand(bad(a) if env.is_last() else a.copy())


@case((errors.InvalidValueError, r"rank {last}: The new operand's data type \(float32\) doesn't match .* input box is Box"))
def reset_dtype_last(env):
    _reset_case(env, lambda a: a.astype(np.float32))


@case((errors.InvalidValueError, r"rank {last}: The new operand's data type \(>f8\) doesn't match"))
def reset_byte_order_last(env):
    _reset_case(env, lambda a: a.astype(">f8"))


@case((errors.InvalidValueError, r"rank {last}: The new operand's shape"))
def reset_shape_last(env):
    _reset_case(env, lambda a: np.zeros((a.shape[0] + 1,) + a.shape[1:]))


@case((errors.InvalidValueError, r"rank {last}: The new operand's strides"))
def reset_strides_last(env):
    _reset_case(env, lambda a: np.asfortranarray(a))


@case((errors.InvalidValueError, r"rank {last}: The new operand's package \(torch\)"),
      needs=("torch",))
def reset_package_last(env):
    import torch

    _reset_case(env, lambda a: torch.from_numpy(a.copy()))


@case((errors.InvalidValueError, r"rank {last}: reset_operand\(\) requires a valid operand"))
def reset_none_last(env):
    _reset_case(env, lambda a: None)


@case((errors.InvalidTypeError, r"rank {last}: builtins.tuple not supported"))
def reset_not_an_array_last(env):
    _reset_case(env, lambda a: (1, 2))


@case((errors.InvalidTypeError, r"rank {last}: dtype object holds Python object pointers"))
def reset_object_dtype_last(env):
    _reset_case(env, lambda a: a.astype(object))


@case((errors.InvalidValueError, r"rank {last}: the new operand overlaps this object's own result"))
def reset_to_own_result_last(env):
    r, a, g = planned(env)
    res = r.execute()
    if env.is_last():  # the operand's layout, in the result's memory (the last rank's box is the smallest)
        r.reset_operand(res.reshape(-1)[: a.size].reshape(a.shape))
    else:
        r.reset_operand(a.copy())


@case(OK)
def reset_then_execute_and_release_then_reset(env):
    r, a, g = planned(env)
    a2, g2 = operand(env, salt=1000)
    r.reset_operand(a2)
    right(env, r.execute(), g2, "after reset_operand")
    r.release_operand()
    r.release_operand()  # a no-op
    r.reset_operand(a)
    right(env, r.execute(), g, "after release + reset")
    r.reset_operand_unchecked(a2)
    env.check(r.operand is a2, "the object does not hold the new operand")
    right(env, r.execute(), g2, "after reset_operand_unchecked")


@case((errors.InvalidStateError, r"cannot be called after free\(\)"))
def reset_after_free(env):
    r, a, _ = planned(env)
    r.free()
    r.reset_operand(a)


def _rotated(env):
    """Rank r's slab of (6, 4, 5) goes to rank r - 1 (equal slabs at P = 2 and 3): an out= has the
    operand's shape, so it can become the next operand. ``moved(x)`` is what the call returns on
    this rank when every rank's operand is ``x`` (the next rank's)."""
    shape = (6, 4, 5)
    g = global_values(shape, np.float64)
    boxes = [Slab.X.box(q, shape, nranks=env.P) for q in range(env.P)]
    mine, theirs = boxes[env.rank], boxes[(env.rank + 1) % env.P]
    a = g[sl(mine)].copy()  # its own memory: the loops write into it
    r = Redistribute(a, (mine.lower, mine.upper), (theirs.lower, theirs.upper))
    r.plan()
    return r, a, g, boxes


@case(OK)
def out_refused_then_reset_operand_to_it(env):
    """A refused execute(out=C) (the last rank's out= read-only) keeps no C bound on the good ranks:
    reset_operand(C) then works everywhere, and C is still untouched."""
    r, a, g, boxes = _rotated(env)
    r.execute()
    c = np.full(a.shape, 7.0)
    if env.is_last():
        c.setflags(write=False)
    _refused(env, lambda: r.execute(out=c), errors.InvalidValueError, "read-only", "a read-only out=")
    env.check((c == 7.0).all(), "a refused call wrote out=")
    r.reset_operand(c)
    env.check((np.asarray(r.execute()) == 7.0).all(), "result of the all-7 operands: wrong data")


@case(OK)
def out_refused_with_released_operand_is_not_kept_last(env):
    """A call refused because the last rank released its operand keeps no out= bound on any rank
    (that rank's object is not ready, and still lets go of it): once the caller drops it, it is gone."""
    r, a, g, boxes = _rotated(env)
    r.execute()
    if env.is_last():
        r.release_operand()
    c = np.full(a.shape, 7.0)
    ref = weakref.ref(c)
    _refused(env, functools.partial(r.execute, out=c), errors.InvalidStateError, "operand has been released",
             "a call with a released operand")  # (no closure over c: it is deleted below)
    env.check((c == 7.0).all(), "a refused call wrote out=")
    del c
    gc.collect()
    env.check(ref() is None, "the refused call's out= is still held by the object")
    r.reset_operand(a)
    env.check(np.array_equal(r.execute(), g[sl(boxes[(env.rank + 1) % env.P])]), "after reset_operand: wrong data")


@case(OK)
def out_becomes_the_next_operand(env):
    """Ping-pong: execute(out=B), then reset_operand(B) and execute() again, B -> A -> B."""
    r, a, g, boxes = _rotated(env)
    b = np.full(a.shape, -1.0)
    for step in range(4):
        dst = b if step % 2 == 0 else a
        r.execute(out=dst)
        src_rank = (env.rank + step + 1) % env.P  # whose slab the data is after step + 1 moves
        env.check(same_bits(dst, g[sl(boxes[src_rank])]), f"step {step}: wrong data")
        r.reset_operand(dst)


# --- the rest of the state machine --------------------------------------------------------------


@case(OK)
def plan_twice_free_twice_context_manager(env):
    a, g = operand(env)
    with Redistribute(a, Slab.X, Slab.Y) as r:
        r.plan()
        r.plan()
        right(env, r.execute(), g)
    r.free()
    r.free()


@case((errors.InvalidStateError, r"Redistribute.plan\(\) cannot be called after free\(\)"))
def plan_after_free(env):
    r, _, _ = planned(env)
    r.free()
    r.plan()


@case((errors.NotSupportedError, r"graph\(\) is only available for CUDA execution"))
def graph_on_host(env):
    r, _, _ = planned(env)
    r.graph()


@case((errors.InvalidStateError, r"Redistribute.release_operand\(\) cannot be called after free\(\)"))
def release_after_free(env):
    r, _, _ = planned(env)
    r.free()
    r.release_operand()


@case((errors.InvalidValueError, r"rank {last} input box .* negative coordinate"))
def function_form_bad_box_last(env):
    a, box = _boxes_with(env, lambda lo, hi: ([lo[0] - 100] + lo[1:], [hi[0] - 100] + hi[1:]))
    redist.redistribute(a, box, Slab.Y)


@case(OK)
def function_form_result_belongs_to_the_caller(env):
    a, g = operand(env)
    res = redist.redistribute(a, Slab.X, Slab.Y)
    right(env, res, g)


@case(OK)
def objects_dropped_without_free(env):
    """300 planned objects dropped without free(): their memory and requests go with them."""
    import gc

    a, g = operand(env)
    for _ in range(300):
        r = Redistribute(a, Slab.X, Slab.Y)
        r.plan()
        r.execute()
        del r
    gc.collect()
    r = Redistribute(a, Slab.X, Slab.Y)
    r.plan()
    right(env, r.execute(), g, "after 300 dropped objects")


# --- several fields in one exchange (a tuple operand) ----------------------------------------

FIELD_DTYPES = (np.float64, np.float32, np.complex128)


def fields(env, dtypes=FIELD_DTYPES):
    """One operand per field (salted differently) and their global arrays."""
    got = [operand(env, dt, salt=f) for f, dt in enumerate(dtypes)]
    return tuple(a for a, _ in got), [g for _, g in got]


def planned_fields(env, options=None):
    ops, gs = fields(env)
    r = Redistribute(ops, Slab.X, Slab.Y, options=options)
    r.plan()
    return r, ops, gs


def right_fields(env, res, gs, what="result"):
    env.check(isinstance(res, tuple) and len(res) == len(gs), f"{what}: not a tuple of {len(gs)} results")
    for f, (x, g) in enumerate(zip(res, gs)):
        right(env, x, g, f"{what}, field {f}")


@case(OK)
def fields_every_kind_of_call(env):
    """Mixed dtypes; out= on some fields and some ranks only, strided; reset_operand of every
    field and of one; reset_operand_unchecked of every field and of one; release and reset."""
    r, ops, gs = planned_fields(env)
    right_fields(env, r.execute(), gs)
    ghost = np.zeros(tuple(n + 2 for n in want(env, gs[2]).shape), FIELD_DTYPES[2])
    o = ghost[1:-1, 1:-1, 1:-1] if env.rank == 0 else None
    res = r.execute(out=(None, None, o))
    right_fields(env, res, gs, "out= on field 2 of rank 0")
    env.check(env.rank != 0 or res[2] is o, "out= not returned")
    twice = tuple(a * 2 for a in ops)
    r.reset_operand(twice)
    right_fields(env, r.execute(), [g * 2 for g in gs], "reset_operand of every field")
    r.reset_operand(ops[1], field=1)
    right_fields(env, r.execute(), [gs[0] * 2, gs[1], gs[2] * 2], "reset_operand(field=1)")
    r.reset_operand_unchecked(ops)
    right_fields(env, r.execute(), gs, "reset_operand_unchecked of every field")
    r.reset_operand_unchecked(twice[0], field=0)
    right_fields(env, r.execute(), [gs[0] * 2, gs[1], gs[2]], "reset_operand_unchecked(field=0)")
    r.release_operand()
    r.reset_operand(ops)
    right_fields(env, r.execute(), gs, "after release_operand")
    r.free()


@case(OK)
def fields_every_kind_of_call_push_messages(env):
    """The same calls with push sending the data of out= calls as messages."""
    with push_route("push-messages"):
        fields_every_kind_of_call(env)


@case(OK)
def push_direct_stores_into_out(env):
    """Push's peers store straight into every out= laid out like the result (cross-memory attach;
    this machine's kernel must allow it): all ranks with an out=, one without, ping-pong between two
    out=, a strided out= on the last rank (that call goes as messages); a rank's engine-owned result
    changes only by its own execute() without out=."""
    with push_route("push-direct"):
        r, a, g = planned(env, options={"host_method": "push"})
    env.check("cross-memory attach" in r.plan_description, "push-direct: not planned with direct stores "
              "(process_vm_writev refused between the ranks? Yama ptrace_scope, seccomp)")
    owned = r.execute()
    last = owned.copy()
    w = want(env, g)
    outs = [np.full(w.shape, -1.0), np.full(w.shape, -2.0)]
    for it in range(4):
        r.reset_operand(a + 1000 * (it + 1))
        if env.rank == it % env.P:  # a different rank without out= each call (at it = 3 with P = 2, ...)
            right(env, r.execute(), g + 1000 * (it + 1), f"call {it}: engine-owned")
            last = owned.copy()
        else:
            right(env, r.execute(out=outs[it % 2]), g + 1000 * (it + 1), f"call {it}: out=")
        env.check(same_bits(owned, last), f"call {it}: the engine-owned result changed under out=")
    wide = np.full((w.shape[0], w.shape[1], 2 * w.shape[2]), -3.0)
    strided = wide[:, :, ::2] if env.is_last() else outs[0]
    right(env, r.execute(out=strided), g + 4000, "a strided out= on the last rank (messages)")
    r.free()
    # x-slabs -> z-slabs of a C-order (64, 48, 40): 160-byte runs in the operand, long stretches in the
    # destination, over 1024 of them per peer: several system calls, the two sides cut differently
    shape = (64, 48, 40)
    big = global_values(shape, np.float64)
    ib = Slab.X.box(env.rank, shape, nranks=env.P)
    ob = Slab(2).box(env.rank, shape, nranks=env.P)
    with push_route("push-direct"):
        r = Redistribute(np.ascontiguousarray(big[sl(ib)]), ib, ob, options={"host_method": "push"})
        r.plan()
    wz = big[sl(ob)]
    for it in range(2):
        got = r.execute(out=np.full(wz.shape, -1.0))
        env.check(same_bits(got, wz), f"x-slabs -> z-slabs, call {it}: wrong data")
    r.free()
    # the reverse, z-slabs -> x-slabs: long stretches in the operand, 160-byte runs in the destination,
    # so every receiver reads (process_vm_readv); each sender overwrites its operand in place right
    # after its call returns (a reader still at work would copy the new values), and a different rank
    # takes the engine-owned result each call (its peers store into it)
    part = np.ascontiguousarray(big[sl(ob)])
    with push_route("push-direct"):
        r = Redistribute(part, ob, ib, options={"host_method": "push"})
        r.plan()
    env.check("process_vm_readv" in r.plan_description, "z-slabs -> x-slabs: the receivers do not read")
    wx = big[sl(ib)]
    outs = [np.full(wx.shape, -1.0), np.full(wx.shape, -2.0)]
    for it in range(4):
        part[...] = big[sl(ob)] + 1000 * it
        got = r.execute() if env.rank == it % env.P else r.execute(out=outs[it % 2])
        part[...] = -5.0
        env.check(same_bits(got, wx + 1000 * it), f"z-slabs -> x-slabs, call {it}: wrong data")
    r.free()


@case((errors.CommunicationError, r"cross-memory copies into rank\(s\) {last} failed \(Bad address\); their out= may be "
                                   r"incomplete"))
def push_direct_out_the_kernel_refuses(env):
    """The last rank's out= is read-only memory that numpy believes writable: redist cannot see it
    before the peers store, the kernel refuses their stores, and every rank raises -- also the last
    rank, which stored nothing itself (it receives its whole box from a peer: reversed slabs, no
    local part there)."""
    with push_route("push-direct"):
        a, g = operand(env)
        out_box = Slab.X.box(env.P - 1 - env.rank, SHAPE, nranks=env.P)
        r = Redistribute(a, Slab.X, out_box, options={"host_method": "push"})
        r.plan()
    w = g[sl(out_box)]
    r.execute(out=_read_only_like(w) if env.is_last() else np.full(w.shape, -1.0))


def _read_only_like(w, pages_from=None):
    """An array like ``w`` in memory that numpy believes writable but that is read-only (a view of an
    mprotect'ed mapping, which redist cannot tell from writable memory). ``pages_from``: only the
    pages starting at these byte offsets are read-only."""
    import ctypes
    import mmap

    pages = mmap.mmap(-1, w.nbytes + mmap.PAGESIZE)
    arr = np.frombuffer(pages, np.float64, w.size).reshape(w.shape)  # holds the mapping
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    for at, size in [(0, len(pages))] if pages_from is None else [(at, mmap.PAGESIZE) for at in pages_from]:
        assert libc.mprotect(ctypes.c_void_p(arr.ctypes.data + at), size, mmap.PROT_READ) == 0
    return arr


@case((errors.CommunicationError, r"cross-memory copies into rank\(s\) {last} failed \(Bad address\); their out= may be "
                                   r"incomplete"))
def push_direct_read_into_out_the_kernel_refuses(env):
    """The same with the last rank reading: y-slabs of a (4P, P, 512) float64 -> x-slabs, so every
    row of the last rank's out= holds one page of every rank (the peers' a stretch each in their
    operands: it reads them, process_vm_readv); the pages its peers' data goes to are read-only, the
    kernel refuses its reads, and every rank raises -- the peers, which copied nothing, too. (Its own
    page of each row is writable: the local part is copied by numpy.)"""
    import mmap

    P = env.P
    shape = (4 * P, P, mmap.PAGESIZE // 8)
    big = global_values(shape, np.float64)
    ib, ob = Slab(1).box(env.rank, shape, nranks=P), Slab.X.box(env.rank, shape, nranks=P)
    with push_route("push-direct"):
        r = Redistribute(np.ascontiguousarray(big[sl(ib)]), ib, ob, options={"host_method": "push"})
        r.plan()
    env.check(not env.is_last() or "read <-0" in r.plan_description, "the last rank does not read")
    w = big[sl(ob)]
    if env.is_last():  # the page of row x from rank y starts at (x * P + y) pages
        theirs = [(x * P + y) * mmap.PAGESIZE for x in range(w.shape[0]) for y in range(P) if y != env.rank]
        out = _read_only_like(w, theirs)
    else:
        out = np.full(w.shape, -1.0)
    r.execute(out=out)


@case((errors.CommunicationError, r"cross-memory copies into rank\(s\) {last} failed \(Bad address\); their out= may be "
                                   r"incomplete"))
def push_small_copy_refused_in_a_replay(env):
    """Below LANDING_MAX a private out= laid out like the result is copied into across memories, and
    the loop's calls are replayed in C: the last rank's out= turns read-only (mprotect: numpy still
    believes it writable, and the C match takes it) after three good calls, its peer's store into it
    (or its own read) is refused inside the replay, and every rank raises the same error (the one the
    Python path raises) after the replay's closing Allreduce. Reversed slabs: the last rank receives
    its whole box from rank 0 in one contiguous block (no local part)."""
    from redist.engine.host import compiled

    shape = (2 * env.P, 8, 512)  # 64 KiB x-slabs: one stretch each way, above DIRECT_SMALL_MIN, below LANDING_MAX
    big = global_values(shape, np.float64)
    ib, ob = Slab.X.box(env.rank, shape, nranks=env.P), Slab.X.box(env.P - 1 - env.rank, shape, nranks=env.P)
    r = Redistribute(np.ascontiguousarray(big[sl(ib)]), ib, ob, options={"host_method": "push"})
    r.plan()
    env.check("copied straight into it when laid out like its result" in r.plan_description,
              "not planned with small cross-memory copies (the kernel refused them between the ranks?)")
    replayed = compiled.unavailable_reason() is None
    out = _replayed_then_read_only(env, r, big[sl(ob)], replayed)
    try:
        r.execute(out=out)
    finally:  # a replay that fails is dropped (the next call runs in Python); one that did not run stays
        env.check(not replayed or r._replays.count() == 0, "the call that failed was not replayed")


def _replayed_then_read_only(env, r, w, replayed):
    """A page-aligned out= for ``r`` (its result ``w``), taken by three good calls (Python, Python and
    the offer of its replay, the replay), then read-only on the last rank behind numpy's back
    (mprotect: numpy still believes it writable, and the C match takes it)."""
    import ctypes
    import mmap

    pages = mmap.mmap(-1, max(w.nbytes, mmap.PAGESIZE))
    out = np.frombuffer(pages, np.float64, w.size).reshape(w.shape)  # holds the mapping
    for it in range(3):
        out[...] = -1.0
        env.check(same_bits(r.execute(out=out), w), f"call {it}: wrong data")
    env.check(not replayed or r._replays is not None and r._replays.count() > 0, "no replay was made")
    if env.is_last():
        libc = ctypes.CDLL(None)
        libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        assert libc.mprotect(ctypes.c_void_p(out.ctypes.data), len(pages), mmap.PROT_READ) == 0
    return out


@case(OK)
def push_direct_describe_counts_every_field(env):
    """describe() of push with several fields of different dtypes: each peer's line counts every field's
    bytes (they add up to the totals); X -> Y slabs store, Y -> X slabs read, and they say so."""
    import re

    ops, gs = fields(env)
    with push_route("push-direct"):
        there = Redistribute(ops, Slab.X, Slab.Y, options={"host_method": "push"})
        there.plan()
        back = Redistribute(tuple(np.ascontiguousarray(want(env, g)) for g in gs), Slab.Y, Slab.X,
                            options={"host_method": "push"})
        back.plan()
    for name, r, reads in (("X -> Y", there, False), ("Y -> X", back, True)):
        text = r.plan_description
        stores, receives = map(int, re.search(r"stores (\d+) B into \d+ peer\(s\), receives (\d+) B", text).groups())
        env.check(sum(int(n) for n in re.findall(r"store ->\d+: (\d+) B", text)) == stores, f"{name}: {text}")
        read = [int(n) for n in re.findall(r"read <-\d+: (\d+) B", text)]
        env.check(bool(read) == reads and (not read or sum(read) == receives), f"{name}: {text}")
        got = r.execute(out=tuple(np.full_like(x, -1) for x in r.execute()))
        for f, (x, g) in enumerate(zip(got, gs)):
            env.check(same_bits(x, want(env, g, Slab.X if reads else Slab.Y)), f"{name}, field {f}: wrong data")
        r.free()


@case(OK)
def fields_every_kind_of_call_push_direct(env):
    """The same calls with push's peers storing straight into every out= (cross-memory attach)."""
    with push_route("push-direct"):
        fields_every_kind_of_call(env)


@case(OK)
def fields_every_host_method(env):
    from redist.engine.host import available_methods

    for method in ("push",) + tuple(m for m in available_methods() if m != "alltoallw"):
        r, ops, gs = planned_fields(env, {"host_method": method})
        for it in range(2):
            right_fields(env, r.execute(), gs, f"{method} iteration {it}")
        r.free()


@case((errors.InvalidValueError, r"inconsistent number of fields .*: rank 0 has 3, but rank {last} 2"))
def fields_count_differs_last(env):
    ops, _ = fields(env)
    Redistribute(ops[:2] if env.is_last() else ops, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"inconsistent number of fields .*: rank 0 has 3, but rank {last} 0"))
def fields_array_instead_of_tuple_last(env):
    ops, _ = fields(env)
    Redistribute(ops[0] if env.is_last() else ops, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: a tuple or list operand needs at least one field"))
def fields_empty_tuple_last(env):
    ops, _ = fields(env)
    Redistribute(() if env.is_last() else ops, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"field 1: inconsistent dtype across ranks: rank 0 has float32, but rank {last} int32"))
def fields_dtype_differs_last(env):
    ops, _ = fields(env)
    if env.is_last():
        ops = (ops[0], ops[1].astype(np.int32), ops[2])
    Redistribute(ops, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: field 2 has shape \(\d+, 6, 4\) but field 0 has \(\d+, 6, 5\)"))
def fields_shape_differs_last(env):
    ops, _ = fields(env)
    if env.is_last():
        ops = (ops[0], ops[1], np.ascontiguousarray(ops[2][:, :, :4]))
    Redistribute(ops, Slab.X, Slab.Y)


@case((errors.InvalidValueError, r"rank {last}: the fields have different memory layouts"))
def fields_layouts_differ_last(env):
    ops, _ = fields(env)
    if env.is_last():
        ops = (ops[0], np.asfortranarray(ops[1]), ops[2])
    Redistribute(ops, Slab.X, Slab.Y)


@case((errors.NotSupportedError, r"host method 'alltoallw' moves one field"))
def fields_alltoallw(env):
    from redist.engine.host import available_methods

    if "alltoallw" not in available_methods():
        raise errors.NotSupportedError("host method 'alltoallw' moves one field (this MPI lacks it anyway)")
    planned_fields(env, {"host_method": "alltoallw"})


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): out= must be a tuple of 3 arrays \(one per field\), "
                            r"got 2 entries"))
def fields_out_wrong_length_last(env):
    r, ops, gs = planned_fields(env)
    res = r.execute()
    outs = tuple(np.empty_like(x) for x in res)
    r.execute(out=outs[:2] if env.is_last() else outs)


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): field 1: out= has dtype float64, expected float32"))
def fields_out_dtype_wrong_last(env):
    r, ops, gs = planned_fields(env)
    res = r.execute()
    outs = [np.empty_like(x) for x in res]
    if env.is_last():
        outs[1] = outs[1].astype(np.float64)
    r.execute(out=tuple(outs))


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): field 1: out= overlaps field 0's operand"))
def fields_out_is_another_fields_operand_last(env):
    r, ops, gs = planned_fields(env, {"host_method": "hybrid"})
    res = r.execute()
    outs = [np.empty_like(x) for x in res]
    if env.is_last():  # field 1's float32 out= over field 0's float64 operand bytes (the last rank's is big enough)
        outs[1] = ops[0].reshape(-1).view(np.float32)[: res[1].size].reshape(res[1].shape)
    r.execute(out=tuple(outs))
    right_fields(env, r.execute(), gs, "after the refused call")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): field 1's out= overlaps field 0's"))
def fields_outs_overlap_each_other_last(env):
    r, ops, gs = planned_fields(env)
    res = r.execute()
    outs = [np.empty_like(x) for x in res]
    if env.is_last():
        outs[1] = outs[0].view(np.float32)[..., : res[1].shape[-1]]
    r.execute(out=tuple(outs))


@case((errors.InvalidValueError, r"rank {last}: field 1: The new operand's data type \(float64\) doesn't match"))
def fields_reset_one_field_wrong_dtype_last(env):
    r, ops, gs = planned_fields(env)
    r.reset_operand(ops[1].astype(np.float64) if env.is_last() else ops[1], field=1)


@case((errors.InvalidValueError, r"rank {last}: reset_operand\(\) needs a tuple of 3 arrays"))
def fields_reset_wrong_count_last(env):
    r, ops, gs = planned_fields(env)
    r.reset_operand(ops[:2] if env.is_last() else ops)


@case((errors.InvalidValueError, r"rank {last}: field must be an int in \[0, 3\), got 3"))
def fields_reset_field_out_of_range_last(env):
    r, ops, gs = planned_fields(env)
    r.reset_operand(ops[0], field=3 if env.is_last() else 0)


@case(OK)
def fields_of_other_strides(env):
    """Fields with other strides than field 0's: padded, reversed, F-ordered (result_layout='C')."""
    ops, gs = fields(env)
    pad = np.zeros(tuple(n + 2 for n in ops[1].shape), ops[1].dtype)
    pad[1:-1, 1:-1, 1:-1] = ops[1]
    rev = ops[2][::-1].copy()[::-1]
    mixed = (np.asfortranarray(ops[0]), pad[1:-1, 1:-1, 1:-1], rev)
    for opts in ({"result_layout": "C"}, {"result_layout": "C", "host_method": "hybrid"}):
        r = Redistribute(mixed, Slab.X, Slab.Y, options=opts)
        r.plan()
        for it in range(2):
            right_fields(env, r.execute(), gs, f"{opts} iteration {it}")
        r.free()


BIG = (48, 32, 24)  # a field's part to a peer is 32 KiB or more: its own message (host messages path)
BIG_DTYPES = (np.float64, np.int8, np.complex128, np.float32)


def big_fields(env, options):
    got = [operand(env, dt, shape=BIG, salt=f) for f, dt in enumerate(BIG_DTYPES)]
    r = Redistribute(tuple(a for a, _ in got), Slab.X, Slab.Y, options=options)
    r.plan()
    return r, [g for _, g in got]


def right_big(env, res, gs, what):
    for f, (x, g) in enumerate(zip(res, gs)):
        env.check(same_bits(np.asarray(x), want(env, g, shape=BIG)), f"{what}, field {f}: wrong data")


@case(OK)
def fields_large_parts_every_host_method(env):
    """Large parts go as messages of their own beside one packed message of the small ones: every
    message method, strided out= on one field, alternating calls."""
    from redist.engine.host import available_methods

    for method in tuple(m for m in available_methods() if m != "alltoallw"):
        r, gs = big_fields(env, {"host_method": method})
        shape = want(env, gs[2], shape=BIG).shape
        ghost = np.zeros(tuple(n + 2 for n in shape), BIG_DTYPES[2])
        for it in range(3):
            out = (None, None, ghost[1:-1, 1:-1, 1:-1], None) if it == 1 else None
            right_big(env, r.execute(out=out), gs, f"{method} iteration {it}")
        r.free()


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): field 3: out= has dtype float64, expected float32"))
def fields_large_parts_bad_out_last(env):
    """A failed call with several messages per pair leaves every message matched: the next call is right."""
    r, gs = big_fields(env, {"host_method": "pack"})
    res = r.execute()
    outs = [np.empty_like(x) for x in res]
    if env.is_last():
        outs[3] = outs[3].astype(np.float64)
    try:
        r.execute(out=tuple(outs))
    finally:
        right_big(env, r.execute(), gs, "the call after the refused one")


@case((errors.InvalidValueError, r"rank {last}: execute\(out=\.\.\.\): field 1: out= overlaps field 0's engine-owned result"))
def fields_out_is_another_fields_result_last(env):
    """Field 1 written into field 0's engine-owned result (which the exchange writes too): refused,
    with every host method (push writes results first, then copies into out=)."""
    ops, gs = fields(env, (np.float64, np.float64))
    r = Redistribute(ops, Slab.X, Slab.Y)
    r.plan()
    res = r.execute()
    r.execute(out=(None, res[0] if env.is_last() else None))


@case((errors.InvalidStateError, r"reset_operand_unchecked\(field=\.\.\.\) needs every field bound"))
def fields_unchecked_field_after_release(env):
    r, ops, gs = planned_fields(env)
    r.release_operand()
    r.reset_operand_unchecked(ops[1], field=1)


@case(OK)
def fields_unchecked_field_out_of_range_last(env):
    """reset_operand_unchecked(field=-1 / 3 / True) on the last rank: refused there (it is local, as the
    C ABI's range check), nothing rebound; the next execute is right on every rank."""
    r, ops, gs = planned_fields(env)
    if env.is_last():
        for bad in (-1, 3, True, 1.0):
            try:
                r.reset_operand_unchecked(np.zeros_like(ops[2]), field=bad)
                env.check(False, f"field={bad!r} accepted")
            except errors.InvalidValueError as e:
                env.check(f"field must be an int in [0, 3), got {bad!r}" in str(e), str(e))
        env.check(len(r.operand) == 3 and all(x is o for x, o in zip(r.operand, ops)), "the operand tuple changed")
    right_fields(env, r.execute(), gs, "after the refused rebinds")


@case(OK)
def fields_in_the_nvmath_namespace(env):
    """redist.distribution's Redistribute (result="fresh") refuses several fields with advice that
    works there: result="persistent" (or redist.Redistribute), which then moves them."""
    ops, gs = fields(env)
    try:
        redist.distribution.Redistribute(ops, Slab.X, Slab.Y)
        env.check(False, "fields accepted with result='fresh'")
    except errors.NotSupportedError as e:
        env.check("pass out=" not in str(e) and 'result="persistent"' in str(e), str(e))
    with redist.distribution.Redistribute(ops, Slab.X, Slab.Y, options={"result": "persistent"}) as r:
        r.plan()
        right_fields(env, r.execute(), gs, "the advice followed")


@case((errors.InvalidValueError, r"field= needs a Redistribute of several fields"))
def field_given_for_one_array(env):
    r, a, g = planned(env)
    r.reset_operand_unchecked(a, field=0)


@case(OK)
def fields_function_form(env):
    ops, gs = fields(env)
    right_fields(env, redist.redistribute(ops, Slab.X, Slab.Y), gs, "redistribute((...))")


# --- host symmetric memory, and buffers moved or protected behind redist's back (#49) --------


def _replays_on_and_off(env, fn):
    """``fn(replayed)`` for objects made with compiled replays (where built) and then without
    (``REDIST_COMPILED_REPLAY=0``); what they raise must be the same; the last error is raised."""
    import os

    from redist.engine.host import compiled

    got, saved = [], os.environ.get("REDIST_COMPILED_REPLAY")
    for setting in ("1", "0"):
        os.environ["REDIST_COMPILED_REPLAY"] = setting
        try:
            fn(compiled.available())
            got.append(None)
        except errors.RedistError as e:
            got.append(e)
        finally:
            if saved is None:
                os.environ.pop("REDIST_COMPILED_REPLAY", None)
            else:
                os.environ["REDIST_COMPILED_REPLAY"] = saved
    outcome = [None if e is None else (type(e), str(e)) for e in got]
    env.check(outcome[0] == outcome[1], f"replays on and off differ: {outcome}")
    if got[-1] is not None:
        raise got[-1]


@case((errors.NotInitializedError, r"rank {last}: symmetric memory needs redist initialised with a GPU"))
def symmetric_gpu_package_on_one_rank_last(env):
    """A CPU-only job where the last rank asks for torch memory and the others for numpy: every rank
    raises (the last rank used to raise alone, the others waited in the allocation forever)."""
    redist.allocate_symmetric_memory(4, "torch" if env.is_last() else np)


@case((errors.InvalidValueError, r"rank {last}: The package must be one of \('cupy', 'torch', 'numpy'\)\. Got None"))
def symmetric_package_none_last(env):
    redist.allocate_symmetric_memory(4, None if env.is_last() else np)


@case((errors.InvalidTypeError, r"rank {last}: dtype .* holds Python object pointers"))
def symmetric_pointer_dtypes_last(env):
    """object, a record with an object field and StringDType on the last rank: refused as for
    operands (a pointer means nothing in the peers' mappings), on every rank; the last is raised."""
    bad = [np.dtype(object), np.dtype([("x", "f8"), ("o", object)]), np.dtypes.StringDType()]
    for dt in bad[:-1]:
        _refused(env, lambda dt=dt: redist.allocate_symmetric_memory(4, np, dtype=dt if env.is_last() else None),
                 errors.InvalidTypeError, "holds Python object pointers", str(dt))
    redist.allocate_symmetric_memory(4, np, dtype=bad[-1] if env.is_last() else None)


@case((errors.InvalidValueError, r"rank {last}: shape must be an int or a sequence of ints, got \(2\.7, 3\)"))
def symmetric_float_shape_last(env):
    """A float extent is refused, not truncated (2.7 made 2 rows)."""
    redist.allocate_symmetric_memory((2.7, 3) if env.is_last() else (2, 3), np)


@case((errors.InvalidValueError, r"rank {last}: pass the array returned by allocate_symmetric_memory, not a view of "
                                 r"it"))
def symmetric_free_whole_views_last(env):
    """Views of a whole allocation (S.view(), S.T, S[:]) are refused like views of part of it, on
    every rank; nothing is freed anywhere (the array itself is freed afterwards)."""
    s = redist.allocate_symmetric_memory((2, 3), np)
    for view in (s.view(), s.T):
        _refused(env, lambda v=view: redist.free_symmetric_memory(v if env.is_last() else s), errors.InvalidValueError,
                 "not a view of it", "a whole view")
    try:
        redist.free_symmetric_memory(s[:] if env.is_last() else s)
    finally:
        redist.free_symmetric_memory(s)  # still live on every rank: the refused calls freed nothing


@case(OK)
def symmetric_out_freed_and_dropped_goes(env):
    """An out= in host symmetric memory, taken by replayed calls, then freed and dropped: the
    Redistribute keeps no reference to it (its mapping goes at once), and its next calls are right."""
    from helpers import shm_mapped

    def run(replayed):
        r, a, g = planned(env, options={"host_method": "push"})
        before = shm_mapped()
        s = redist.allocate_symmetric_memory(want(env, g).shape, np, make_symmetric=True)
        for it in range(4):
            s[...] = -1.0
            right(env, r.execute(out=s), g, f"call {it} into symmetric memory")
        env.check(not replayed or r._replays.count() > 0, "no replay was made")
        redist.free_symmetric_memory(s)
        gone = weakref.ref(s)
        del s
        gc.collect()
        env.check(gone() is None, "the Redistribute keeps a freed and dropped out= alive")
        env.check(shm_mapped() == before, f"the freed out='s mapping is still there ({shm_mapped() - before} B)")
        right(env, r.execute(), g, "the result after")
        right(env, r.execute(out=np.full(want(env, g).shape, -1.0)), g, "a private out= after")
        r.free()

    _replays_on_and_off(env, run)


@case(OK)
def symmetric_many_live_allocations_hold_no_descriptors(env):
    """200 live host symmetric allocations under a limit of 64 descriptors more than the process
    holds: each used to hold one per rank of the node, in every rank (31 arrays at P=3 under 128;
    perf/symmetric_descriptors.py counts 1000)."""
    import resource

    from helpers import open_fds

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    fds = open_fds()
    resource.setrlimit(resource.RLIMIT_NOFILE, (fds + 64, hard))
    try:
        arrays = [redist.allocate_symmetric_memory(3, np) for _ in range(200)]
        env.check(open_fds() <= fds + 2, f"{open_fds() - fds} descriptors more with 200 live allocations")
        arrays[-1][...] = env.rank
        redist.free_symmetric_memory(*arrays)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _movable(a):
    """``a``'s values in an array whose buffer a kept base holds (numpy's ``__setstate__`` then cannot
    hand the new buffer the old one's address): (the array, its base)."""
    base = a.ravel().copy()
    return base.reshape(a.shape), base


def _moved(a, values):
    """Replace ``a``'s buffer in place (``ndarray.__setstate__``, pickle's hook, the one way numpy
    moves the data of an array that has weak references): ``values`` at a new address."""
    c = np.ascontiguousarray(values)
    a.__setstate__((1, c.shape, c.dtype, False, c.tobytes()))


@case(OK)
def operand_moved_in_place_last(env):
    """After three calls (the third replayed), the last rank's operand gets a new buffer with new values
    in place (``a.__setstate__``): execute() with no rebind reads the new buffer (its data pointer is
    compared at every call, in C where replayed), into the result and into an out=; so does
    reset_operand_unchecked(a) of the same object after such a move (no address cached); fields too."""
    def run(replayed):
        r, a0, g = planned(env, options={"host_method": "push"})
        out = np.full(want(env, g).shape, -1.0)
        for scale, how in enumerate(("execute", "out=", "unchecked"), start=2):
            a, base = _movable(a0 * (scale - 1))
            r.reset_operand(a)
            for it in range(3):
                got = r.execute(out=out) if how == "out=" else r.execute()
                env.check(same_bits(np.asarray(got), want(env, g) * (scale - 1)), f"{how}, call {it}: wrong data")
            if env.is_last():
                _moved(a, a0 * scale)
                env.check(a.ctypes.data != base.ctypes.data, f"{how}: __setstate__ did not move the buffer")
            else:
                a[...] = a0 * scale
            if how == "unchecked":
                r.reset_operand_unchecked(a)
            got = r.execute(out=out) if how == "out=" else r.execute()
            env.check(same_bits(np.asarray(got), want(env, g) * scale), f"{how}: the old buffer was read")
        env.check(not replayed or r._replays.count() > 0, "no replay was made")
        r.free()
        ops, gs = fields(env)
        ops = tuple(_movable(o)[0] for o in ops)
        keep = [o.base for o in ops]
        rf = Redistribute(ops, Slab.X, Slab.Y, options={"host_method": "push"})
        rf.plan()
        for it in range(3):
            right_fields(env, rf.execute(), gs, f"fields, call {it}")
        if env.is_last():
            _moved(ops[1], ops[1] * 3)
            env.check(ops[1].ctypes.data != keep[1].ctypes.data, "fields: __setstate__ did not move the buffer")
        else:
            ops[1][...] *= 3
        env.check(same_bits(rf.execute()[1], want(env, gs[1]) * 3), "fields: field 1's old buffer was read")
        rf.free()

    _replays_on_and_off(env, run)


@case((errors.InvalidValueError, r"rank {last}: the operand changed in place since it was bound \(ndarray.__setstate__\): "
                                 r"The new operand's shape \(\(\d+, 6, 4\)\) doesn't match"))
def operand_reshaped_in_place_last(env):
    """The last rank's operand gets a buffer of another shape in place after replayed calls: every
    rank raises, no rank's result changes (it said so before any data moved), and after
    reset_operand() with a fitting array the calls are right again."""
    def run(replayed):
        r, a, g = planned(env, options={"host_method": "push"})
        for it in range(3):
            res = r.execute()
        kept = res.copy()
        if env.is_last():
            _moved(a, a[:, :, :4])
            env.check(a.shape[2] == 4, "__setstate__ did not reshape")
        try:
            r.execute()
        finally:
            env.check(same_bits(res, kept), "a refused call wrote into the result")
            r.reset_operand(np.ascontiguousarray(global_values(SHAPE, np.float64)[sl(Slab.X.box(env.rank, SHAPE,
                                                                                                  nranks=env.P))]))
            right(env, r.execute(), g, "after reset_operand")
            r.free()

    _replays_on_and_off(env, run)


@case((errors.CommunicationError, r"cross-memory copies into rank\(s\) {last} failed \(Bad address\); their out= may be "
                                   r"incomplete"))
def push_direct_out_read_only_with_a_local_part_last(env):
    """The last rank's out= is mapped read-only behind numpy's back (mprotect) after three good
    calls (the third replayed), and the rank keeps part of its own data (x-slabs -> y-slabs): its
    local part goes through the kernel too, which refuses it, and every rank raises the same
    CommunicationError (it used to die of SIGSEGV in its local copy), replayed or not."""
    def run(replayed):
        shape = (4 * env.P, 4 * env.P, 512)  # every rank keeps a local block, every run 4 KiB long
        big = global_values(shape, np.float64)
        ib, ob = Slab.X.box(env.rank, shape, nranks=env.P), Slab.Y.box(env.rank, shape, nranks=env.P)
        with push_route("push-direct"):
            r = Redistribute(np.ascontiguousarray(big[sl(ib)]), ib, ob, options={"host_method": "push"})
            r.plan()
        out = _replayed_then_read_only(env, r, big[sl(ob)], replayed)
        try:
            r.execute(out=out)
        finally:
            r.free()

    _replays_on_and_off(env, run)
