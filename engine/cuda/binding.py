# SPDX-License-Identifier: Apache-2.0
"""The CUDA executable's bindings: operands and ``out=`` as kernel-node updates (the hot path of
``reset_operand_unchecked`` and ``out=``), and the checks on an ``out=``.

:class:`Bindings` is one part of :class:`~.executable.CudaExecutable` (its state is made there);
a rebind changes the kernel arguments of the graph's nodes in place, never re-captures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..buffer import Buffer, self_overlapping

if TYPE_CHECKING:
    from .executable import CudaExecutable

__all__ = ["Bindings"]


class Bindings:
    """Operand and out= binding of :class:`~.executable.CudaExecutable`."""

    _active: CudaExecutable

    def bind_input(self, buf: Buffer, field: int = 0) -> None:
        """Read field ``field``'s operand from ``buf`` (device memory, the planned layout)."""
        self.rebind_input(buf.ptr, buf.owner, field)

    def rebind_input(self, ptr: int, owner: object = None, field: int = 0) -> None:
        """Point every kernel that reads field ``field``'s operand at ``ptr`` (kernel-node update; never re-capture)."""
        if self._active is not self:  # a layout variant runs: only its nodes change (this one's on a switch back)
            self._active.rebind_input(ptr, owner, field)
            self._bound = not self._freed
            return
        self._in_owners[field] = owner
        self._bound = not self._freed
        if ptr != self._in_ptrs[field]:
            self._set_inputs(((field, ptr),))

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        """Every field's operand at once: one node update per kernel that reads the operands."""
        if self._active is not self:
            self._active.rebind_inputs(ptrs, owners)
            self._bound = not self._freed
            return
        self._in_owners = list(owners)
        self._bound = not self._freed
        changed = [(f, ptr) for f, ptr in enumerate(ptrs) if ptr != self._in_ptrs[f]]
        if changed:
            self._set_inputs(changed)

    def _set_inputs(self, changed) -> None:
        """New operand addresses ``(field, address)`` in every kernel that reads them (vector width
        follows the narrowest alignment), one node update per kernel."""
        for f, ptr in changed:
            self._in_ptrs[f] = ptr
            self._in_aligns[f] = min(ptr & -ptr, 16) if ptr else 16
        a = min(self._in_aligns)
        for kern in self._in_kernels:
            launch = kern.launch
            for f, ptr in changed:
                launch.set_in(f, ptr)
            if a != kern.in_align:
                kern.in_align = a
                launch.set_vec(self._pick(kern))
            launch.update()

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        """Write field ``field`` into ``buf``, device memory of this GPU (symmetric or not, see
        user_memory.py); None: the result.

        Strides other than the planned ones, and an output other ranks have not seen yet, take
        effect at the next execute, once agreed.
        """
        planned = self._fields[field].out_strides
        dense = buf is None or buf.is_dense(planned)
        self._wants[field] = None if dense else tuple(buf.strides)
        self._want = None if all(w is None for w in self._wants) else tuple(self._wants)
        landing = self._outputs.bind(field, buf, dense)
        delta = 0 if buf is None or landing else buf.ptr - self.results[field].ptr
        self._active._set_delta(field, delta)  # the running one's nodes only
        self._out_unagreed = True

    def bound_output(self, field: int = 0) -> Buffer | None:
        """Field ``field``'s output as bound now (None: its engine-owned result)."""
        return self._outputs.bufs[field]

    def _set_delta(self, field: int, delta: int) -> None:
        if delta == self._out_deltas[field]:
            return
        self._out_deltas[field] = delta
        self._out_aligns[field] = min(delta & -delta, 16) if delta else 16
        self._set_deltas(((field, delta),))

    def _set_deltas(self, slots) -> None:
        """New output offsets ``(slot, delta)`` in every kernel that writes outputs (one node update each)."""
        a = min([*self._out_aligns, *(min(d & -d, 16) for d in self._peer_deltas.values() if d)])
        for kern in self._out_kernels:
            launch = kern.launch
            for slot, delta in slots:
                launch.set_delta(slot, delta)
            if a != kern.out_align:
                kern.out_align = a
                launch.set_vec(self._pick(kern))
            launch.update()

    def _set_peer_deltas(self, deltas: dict[int, int]) -> None:
        """The push destinations' output offsets (slot -> delta), as routed (user_memory)."""
        changed = [(k, v) for k, v in deltas.items() if self._peer_deltas.get(k, 0) != v]
        changed += [(k, 0) for k in self._peer_deltas if k not in deltas]
        self._peer_deltas = dict(deltas)
        if changed:
            self._set_deltas(changed)

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        p, rt = self._fields[field], self.rt
        if buf.memory != "cuda":
            return f"out= must be in GPU memory like the operand, got memory {buf.memory!r}"
        if buf.device_id is not None and buf.device_id != rt.device_id:
            return f"out= is on CUDA device {buf.device_id}, expected device {rt.device_id}"
        if buf.itemsize != p.itemsize:
            return f"out= has {buf.itemsize}-byte elements, expected {p.itemsize}"
        if buf.shape != p.out_shape:
            return f"out= has shape {buf.shape}, expected {p.out_shape} (the output box {p.out_box})"
        if buf.readonly:
            return "out= is read-only"
        if self_overlapping(buf.shape, buf.strides):
            return f"out= has strides {buf.strides} (elements) that make elements overlap in memory"
        ent = rt.sym_lookup(buf.ptr)
        if ent is None and not rt.is_symmetric(buf.ptr):
            return self._outputs.problem(buf, p.out_strides)
        lo, hi = buf.address_range()
        if ent is not None and buf.size and (lo < ent[0] or hi > ent[0] + ent[1]):
            return (f"out= (bytes [{lo - ent[0]}, {hi - ent[0]}) of its allocation) reaches outside its symmetric "
                    f"allocation ({ent[1]} bytes)")
        result = self.results[field].ptr
        delta = buf.ptr - result
        for d in self.launch_list.push_to:
            if rt.peer_ptr(buf.ptr, d) != rt.peer_ptr(result, d) + delta:
                return f"out= is not mapped like the symmetric heap for peer {d} (externally registered memory?)"
        return None

    def out_signature(self, buf: Buffer | None, field: int = 0) -> int:
        """The output's offset on the symmetric heap, or its address (private device memory). Ranks
        need not agree on it: each rank's output is routed to (user_memory.py)."""
        if buf is None:
            return self.rt.heap_offset(self.results[field].ptr)
        return self.rt.heap_offset(buf.ptr) if self.rt.is_symmetric(buf.ptr) else buf.ptr

    def release_input(self) -> None:
        for v in self._variants.values():
            v.release_input()
        self._in_owners = [None] * self.nfields
        self._bound = False

    @property
    def output_ptr(self) -> int:
        """Field 0's output now (its engine-owned result, or the bound out=)."""
        return self.result_ptr + self._active._out_deltas[0]
