# SPDX-License-Identifier: Apache-2.0
"""The operands and ``out=`` of a :class:`~redist.Redistribute`: wrapping several fields, checking
a new operand or an ``out=`` against the planned ones (locally: every problem goes to the call's
agreement), binding them to the executable, and the caches that let a time loop's few arrays be
taken again without their checks.

:class:`_Binding` is one part of :class:`~redist.Redistribute` (its state is made there).
"""

from __future__ import annotations

import dataclasses
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from ._operands import SIGNATURES, Operand, data_pointer, wrap
from ._state import _PLANNED, _State
from .engine import collective
from .engine.buffer import Buffer
from .engine.errors import InvalidValueError

_READY = _State.READY  # (an enum member read through its class costs a descriptor call per use)

#: address of element 0, per package, read anew (numpy's __setstate__ and torch's set_ move an array's data)
_POINTER = {
    "numpy": data_pointer,
    "torch": lambda obj: obj.data_ptr(),
    "cupy": lambda obj: obj.data.ptr,
    "raw": lambda obj: obj.ptr,
}


#: the packages whose out= objects are also kept by their memory (``Redistribute._out_memory``): their arrays carry
#: no state the checks read beside what their signature holds (numpy's writability and RawArray's read-only flag do)
_BY_MEMORY = frozenset({"torch", "cupy"})


def _weak(out) -> Callable[[], Any]:
    """A reference to an out= that does not keep it alive where the object allows (a RawArray may not)."""
    try:
        return weakref.ref(out)
    except TypeError:
        return lambda: out


def _holds(ref: Callable[[], Any] | None, out) -> bool:
    """Whether ``ref`` (an entry of ``Redistribute._outs``) refers to ``out``."""
    return ref is not None and ref() is out


def _template(op: Operand) -> Operand:
    """``op`` without its array: what later operands are compared with (holds no user memory)."""
    return dataclasses.replace(op, obj=None, buffer=dataclasses.replace(op.buffer, ptr=0, owner=None))


def _is_fields(operand) -> bool:
    """Several fields (a tuple or list of arrays) rather than one array."""
    return isinstance(operand, (tuple, list))


def _wrap_fields(operand, result_layout) -> list[Operand]:
    """The fields of a tuple/list operand, checked against field 0 on this rank (shape, package,
    memory, device; and a common memory layout unless ``result_layout`` forces one)."""
    if not operand:
        raise InvalidValueError("a tuple or list operand needs at least one field (array)")
    ops = []
    for f, obj in enumerate(operand):
        try:
            ops.append(wrap(obj))
        except Exception as e:
            raise type(e)(f"field {f}: {e} (a tuple or list operand holds several fields, one array each)") from e
    first = ops[0]
    for f, op in enumerate(ops[1:], 1):
        for attr, what in (("package", "array package"), ("memory", "memory space"), ("device_id", "device"),
                           ("shape", "shape")):
            if getattr(op, attr) != getattr(first, attr):
                raise InvalidValueError(
                    f"field {f} has {what} {getattr(op, attr)!r} but field 0 has {getattr(first, attr)!r}: the fields "
                    "of one Redistribute must share the shape (the box), package, memory space and device on each rank")
    if result_layout == "auto" and not set.intersection(*(set(op.layouts()) for op in ops)):
        raise InvalidValueError(
            f"the fields have different memory layouts ({', '.join(f'field {f} {op.layouts()}' for f, op in enumerate(ops))}): "
            "their results share one order; pass result_layout='C' or 'F'")
    return ops


class _Binding:
    """Operand and out= binding of :class:`~redist.Redistribute`."""

    def _bind_call(self, out) -> tuple[Any, collective.Problem | None]:
        """Bind ``out`` (None: the engine-owned results) for a call: (what the call returns, this
        rank's problem with it)."""
        if self._fields:
            if out is None and not self._outs_bound:  # the time loop's call: every field's own result
                return self._result, None
            return self._bind_outs(out)
        if out is None:
            if self._outs[0] is not None:
                self._exe.bind_output(None)
                self._outs[0] = None
            return self._result, None
        fast = self._out_fast  # the out= bound now, taken again unchanged against the same operand (not numpy)
        if fast is not None and fast[0] is self._outs[0] and fast[0]() is out and fast[2] == self._operand_ptrs[0]:
            try:
                if fast[1] == fast[3](out):
                    return out, None
            except Exception:  # noqa: BLE001 -- whatever its signature cannot read, the checks below say
                pass
            self._out_fast = None
        again = self._again_hit(out) if self._out_again else None  # numpy only (_again)
        if again is not None:
            if not _holds(self._outs[0], out):  # a time loop's out= again, unchanged since a call took it: bind it
                try:
                    self._exe.bind_output(again[3])
                except Exception as e:  # noqa: BLE001 -- agreed on by the call
                    return out, collective.problem(e)
                self._outs[0] = _weak(out)
            return out, None
        problem = self._bind_out(out, 0)
        hit = self._out_checked.get((id(out), 0)) if problem is None and self._state is _READY else None
        if hit is not None and hit[0]() is out and self._template.package != "numpy":  # (numpy: writability, _again)
            self._out_fast = (self._outs[0], hit[1], self._operand_ptrs[0], hit[5])  # the signature _bind_out just read
        return out, problem

    def _execute_fresh(self, outs: Sequence) -> None:
        """Collective: :meth:`execute` into ``outs`` (torch tensors, one per field) that the caller
        has just allocated for this call in the result's shape, dtype, layout and device: the
        framework adapters' fresh outputs. They are bound without ``out=``'s checks, which such
        memory passes by construction (private to the call, writable, new, so overlapping neither
        the operand nor a result): a few microseconds per call less on the host; on GPUs (device
        operands) tens, and an output at the address bound already (torch's caching allocator hands
        the same block back) is not bound again. Nothing here keeps an output alive: torch's
        allocator orders reuse on the stream the exchange runs on. Elsewhere (host operands on a
        GPU, result="fresh", DEBUG logging, not ready) as ``execute(out=...)``."""
        gpu = self._streams
        if ((gpu and self._template.memory != "cuda") or self._fresh or self._state is not _READY
                or self._logger.isEnabledFor(logging.DEBUG)):
            if gpu:  # an empty box's tensor (address 0) is no device memory: nothing to write, the result stays
                outs = [o if o.data_ptr() else None for o in outs]
            try:
                self.execute(out=tuple(outs) if self._fields else outs[0])
            finally:
                if gpu:  # execute(out=) keeps a GPU out= alive until the next call (an in-flight graph writes it)
                    self._unbind_outs()
            return
        exe = self._exe
        problem, stream = None, 0
        self._outs_bound = self._fields  # (before binding: a bind that fails part way is undone whole)
        try:
            for f, out in enumerate(outs):
                res = exe.results[f]
                ptr = out.data_ptr()
                strides = tuple(s if n > 1 else 0 for n, s in zip(res.shape, out.stride()))
                if not gpu:
                    exe.bind_output(Buffer(ptr, res.shape, strides, res.itemsize), f)
                elif not ptr:  # an empty box: nothing to write (0 is no device memory)
                    if exe.bound_output(f) is not None:
                        exe.bind_output(None, f)
                else:
                    bound = exe.bound_output(f)
                    if bound is None or bound.ptr != ptr or bound.strides != strides:
                        exe.bind_output(Buffer(ptr, res.shape, strides, res.itemsize, "cuda", res.device_id), f)
                self._outs[f] = _weak(out)
            if gpu:
                stream = self._stream(None)
        except Exception as e:  # noqa: BLE001 -- agreed on by the call: every rank raises it
            problem = collective.problem(e)
        try:
            exe.execute(stream, True, False, problem)
        except BaseException:
            self._unbind_outs()  # as execute() does
            raise

    def _unbind_outs(self) -> None:
        """Bind every field back to its engine-owned result (what a call without out= does); also
        where the operand is released (a call refused for that took its out= first)."""
        if self._exe is None or self._state not in _PLANNED:
            return
        for f, o in enumerate(self._outs):
            if o is not None:
                self._exe.bind_output(None, f)
                self._outs[f] = None
        self._outs_bound = False

    def _bind_outs(self, out) -> tuple[tuple, collective.Problem | None]:
        """Several fields: bind each field's out= (None: its engine-owned result); (targets, problem)."""
        n = self._nfields
        if out is None:
            out = (None,) * n
        elif not _is_fields(out) or len(out) != n:
            got = f"{len(out)} entries" if _is_fields(out) else type(out).__name__
            return self._result, self._out_failed(f"out= must be a tuple of {n} arrays (one per field), got {got}", None)
        problem, ranges = None, []
        for f, o in enumerate(out):
            if o is None:
                if self._outs[f] is not None:
                    self._exe.bind_output(None, f)
                    self._outs[f] = None
                continue
            problem = problem or self._bind_out(o, f, ranges)
        self._outs_bound = any(o is not None for o in self._outs)
        for i, (f, lo, hi) in enumerate(ranges):  # two fields written into the same bytes
            for g, lo2, hi2 in ranges[i + 1:]:
                if lo < hi2 and lo2 < hi and problem is None:
                    problem = self._out_failed(f"field {g}'s out= overlaps field {f}'s", None)
        return tuple(r if o is None else o for r, o in zip(self._result, out)), problem

    def _bind_out(self, out, field: int, ranges: list | None = None) -> collective.Problem | None:
        """Check field ``field``'s ``out`` locally and bind it; its problem (None if fine) for the
        call's agreement. ``ranges`` (several fields) receives ``(field, lo, hi)``, the bytes it spans.

        Objects checked before are kept (weakly) with their buffer and layout signature (and the
        signature function of their package, checked then: no dispatch per call), so a loop
        that alternates between a few out= arrays re-checks only what can change: writability and
        overlap with the operands (not again while the operand addresses are those it was last found
        clear of: its bytes and the operands' extents are fixed); an object reshaped (or re-typed) in
        place since is checked anew.
        """
        try:
            hit = self._out_checked.get((id(out), field))
            checked = hit is not None and hit[0]() is out and hit[1] == hit[5](out)
            if checked:
                buf, lo, hi, clear = hit[2], hit[3], hit[4], hit[6]
            elif (same := self._same_memory(out, field))[0] is not None:  # another object over memory checked before
                buf, lo, hi, clear = same[0]
            else:
                try:
                    op = wrap(out)
                except InvalidValueError as e:  # e.g. strides, a lazy torch flag: said of the out=
                    return self._out_failed(f"out= is refused: {e}", field)
                t = self._templates[field]
                if op.package != t.package:
                    return self._out_failed(f"out= must be a {t.package} array like the operand, got {op.package}",
                                            field)
                if op.dtype_key != t.dtype_key:
                    return self._out_failed(f"out= has dtype {op.dtype_name}, expected {t.dtype_name}", field)
                msg = self._exe.out_problem(op.buffer, field)
                if msg is not None:
                    return self._out_failed(msg, field)
                buf = op.buffer
                for g, res in enumerate(self._exe.results):  # another field's engine-owned result: peers write it
                    if g != field and buf.overlaps(res):
                        return self._out_failed(f"out= overlaps field {g}'s engine-owned result (the exchange writes "
                                                "it too)", field)
                lo, hi = buf.address_range()
                if len(self._out_checked) >= 8 * self._nfields:
                    self._out_checked.clear()
                signature = SIGNATURES[op.package]
                clear = [None]  # [the operand addresses it was last found not to overlap]
                kept = dataclasses.replace(buf, owner=None)
                key = same[1]  # (its memory's key, None where not kept by memory)
                try:
                    self._out_checked[(id(out), field)] = (weakref.ref(out), signature(out) if key is None else key[2],
                                                           kept, lo, hi, signature, clear)
                except TypeError:  # an object without weak references: checked every time
                    pass
                if key is not None:
                    if len(self._out_memory) >= 8 * self._nfields:
                        self._out_memory.clear()
                    self._out_memory[key] = (kept, lo, hi, clear)
            if ranges is not None:
                ranges.append((field, lo, hi))
            numpy = self._template.package == "numpy"
            if numpy and not out.flags.writeable:
                return self._out_failed("out= is read-only", field)
            if self._state is _READY and clear[0] != self._operand_ptrs:
                for g, (p, (before, after)) in enumerate(zip(self._operand_ptrs, self._extents)):
                    if p is not None and lo < p + after and p + before < hi:
                        what = "the operand" if not self._fields else f"field {g}'s operand"
                        return self._out_failed(f"out= overlaps {what} (the exchange would read what it overwrites)",
                                                field)
                clear[0] = list(self._operand_ptrs)
            if not _holds(self._outs[field], out) or not checked:  # a new object, or this one changed in place
                # host: the executable keeps the address only (the caller's object may go between calls)
                self._exe.bind_output(buf if self._streams or buf.owner is None else dataclasses.replace(buf, owner=None),
                                      field)
                self._outs[field] = _weak(out)
            if ranges is None and numpy and self._state is _READY:
                self._again(out, buf)
            return None
        except Exception as e:  # noqa: BLE001 -- agreed on by the call
            return collective.problem(e)

    def _same_memory(self, out, field: int) -> tuple[tuple | None, tuple | None]:
        """``((Buffer owned by out, lo, hi, clear), key)`` where ``out`` (torch or cupy, a new
        object) lays out the memory of an ``out=`` checked before exactly as that one did: what the
        checks found holds for it too (its signature is the key: address, layout, dtype, device,
        and for torch its place in its storage, the storage's size and the lazy bits; such an
        object's memory lies in its own live allocation, and neither package has read-only arrays).
        A time loop's fresh ``torch.empty`` per call, given the same block by the caching allocator,
        is bound without the checks. ``(None, key)``: checked in full, then kept under ``key``
        (None: not kept by its memory)."""
        package = self._templates[field].package
        if package not in _BY_MEMORY:
            return None, None
        try:
            key = (field, type(out), SIGNATURES[package](out))
        except Exception:  # noqa: BLE001 -- not the package's array: the full check says why
            return None, None
        same = self._out_memory.get(key)
        if same is None:
            return None, key
        kept, lo, hi, clear = same
        # GPUs: the executable keeps the out= alive until the next call (an in-flight graph writes it); host: not
        buf = Buffer(kept.ptr, kept.shape, kept.strides, kept.itemsize, kept.memory, kept.device_id, False, out) \
            if self._streams else kept
        if len(self._out_checked) >= 8 * self._nfields:
            self._out_checked.clear()
        try:  # the next call with this object hits by its id
            self._out_checked[(id(out), field)] = (weakref.ref(out), key[2], kept, lo, hi, SIGNATURES[package], clear)
        except TypeError:
            pass
        return (buf, lo, hi, clear), key

    def _again_hit(self, out) -> tuple | None:
        """``out``'s record in ``_out_again`` where it may be taken again without its checks: the
        same object, still writable, with the layout (a record dtype's names too), data and against an
        operand it was checked with."""
        again = self._out_again.get(id(out))
        if (again is None or again[0]() is not out or not out.flags.writeable
                or again[1] != (out.shape, out.strides, out.dtype, out.dtype.names)
                or self._operand_ptrs[0] not in again[2]
                or data_pointer(out) != again[3].ptr):  # moved in place by __setstate__: checked again
            return None
        return again

    def _again(self, out, buf) -> None:
        """Keep ``out`` (numpy, one field, just accepted with the operand bound now) for calls that
        take it again without the checks: its layout, the operands it was checked against (up to
        4: a loop alternating operands), its buffer and its key (the key of its compiled replays,
        the same while the object and its layout are)."""
        layout = (out.shape, out.strides, out.dtype, out.dtype.names)  # a record dtype's names are settable
        op = self._operand_ptrs[0]
        hit = self._out_again.get(id(out))
        if hit is not None and hit[0]() is out and hit[1] == layout and hit[3].ptr == buf.ptr:
            self._out_again[id(out)] = (hit[0], layout, (op, *hit[2][:3]) if op not in hit[2] else hit[2], hit[3],
                                        hit[4])
            return
        if len(self._out_again) >= 8:
            self._out_again.clear()
        self._out_keys += 1
        try:
            self._out_again[id(out)] = (weakref.ref(out), layout, (op,), dataclasses.replace(buf, owner=None),
                                        self._out_keys)
        except TypeError:  # no weak references
            pass

    def _out_failed(self, msg: str, field: int | None = 0) -> collective.Problem:
        where = f"field {field}: " if self._fields and field is not None else ""
        return "InvalidValueError", f"execute(out=...): {where}{msg} (this rank's output box is {self.output_box})"

    def _compat_problem(self, op: Operand, field: int = 0) -> str | None:
        t = self._templates[field]
        for attr, what in (("package", "package"), ("memory", "memory space"), ("device_id", "device"),
                           ("dtype_key", "data type"), ("shape", "shape")):
            if getattr(op, attr) != getattr(t, attr):
                name = "dtype_name" if attr == "dtype_key" else attr
                return (f"The new operand's {what} ({getattr(op, name)}) doesn't match the original operand's "
                        f"({getattr(t, name)})")
        if op.size > 1 and op.strides != t.strides:
            return f"The new operand's strides ({op.strides}) don't match the original operand's ({t.strides})"
        return None

    def _alias_problem(self, op: Operand) -> str | None:
        """Why ``op`` cannot be read while this object writes its outputs, or None. The engine-owned
        results only: an out= is checked against the operand by the execute() that passes it, so
        the out= of the last call may become the next operand (a ping-pong loop)."""
        if self._exe is None:
            return None
        for f, written in enumerate(self._exe.results):
            if op.buffer.overlaps(written):
                where = f" of field {f}" if self._fields else ""
                return f"the new operand overlaps this object's own result{where} (the exchange would read what it overwrites)"
        return None

    def _operand_moved(self) -> bool:
        """Whether a torch operand's data moved since it was bound (``set_``, ``.data =``: its old
        storage may be freed): the call then goes through :meth:`_operands_moved`, not a replay."""
        if self._state is not _READY:
            return False
        try:
            if not self._fields:
                return self._operand_obj.data_ptr() != self._operand_ptrs[0]
            return [obj.data_ptr() for obj in self._operand_obj] != self._operand_ptrs
        except Exception:  # noqa: BLE001 -- no data pointer now (swapped for a sparse tensor): _operands_moved says why
            return True

    def _operands_moved(self) -> collective.Problem | None:
        """Rebind each numpy or torch operand whose data moved since it was bound (numpy's
        ``__setstate__`` replaces an array's buffer in place, torch's ``set_`` and ``.data =`` a
        tensor's storage), as :meth:`reset_operand_unchecked` would, where it still fits the plan;
        this rank's problem where it does not (shape, dtype or strides changed too). One read of
        each data pointer, before the call's agreement. Local."""
        pointer = _POINTER[self._template.package]
        for f, obj in enumerate(self._objects()):
            try:
                if pointer(obj) == self._operand_ptrs[f]:
                    continue
                op = wrap(obj)
                msg = self._compat_problem(op, f) or self._alias_problem(op)
                if msg is None:
                    self._exe.bind_input(op.buffer, f)
                    self._operand_ptrs[f] = op.ptr
                    continue
            except Exception as e:  # noqa: BLE001 -- agreed on by the call
                where = f"field {f}: " if self._fields else ""
                return ("InvalidValueError", f"{where}the operand changed in place since it was bound and cannot be "
                        f"read now ({type(e).__name__}: {e}); pass an array of the planned layout to reset_operand() "
                        f"(this rank's input box is {self.input_box})")
            where = f"field {f}: " if self._fields else ""
            how = "ndarray.__setstate__" if self._template.package == "numpy" else "set_() or .data ="
            return ("InvalidValueError", f"{where}the operand changed in place since it was bound ({how}): {msg}; "
                    f"pass it to reset_operand() (this rank's input box is {self.input_box})")
        return None

    def _objects(self) -> tuple:
        """The operand objects bound now, one per field."""
        return self._operand_obj if self._fields else (self._operand_obj,)

    def _field_index(self, field: int | None) -> int | None:
        if field is None:
            return None
        if not self._fields:
            raise InvalidValueError("field= needs a Redistribute of several fields (a tuple operand)")
        if not isinstance(field, int) or isinstance(field, bool) or not 0 <= field < self._nfields:
            raise InvalidValueError(f"field must be an int in [0, {self._nfields}), got {field!r}")
        return field

    def _bind(self, ops: list[Operand], fields: list[int]) -> None:
        if self._state in _PLANNED:
            for f, op in zip(fields, ops):
                self._exe.bind_input(op.buffer, f)
            self._state = _State.READY
        else:
            self._state = _State.NEW
        if self._fields:
            objs = list(self._operand_obj) if self._operand_obj is not None else [None] * self._nfields
            for f, op in zip(fields, ops):
                objs[f] = op.obj
                self._operand_ptrs[f] = op.ptr
            self._operand_obj = tuple(objs)
        else:
            self._operand_obj = ops[0].obj
            self._operand_ptrs[0] = ops[0].ptr
