# SPDX-License-Identifier: Apache-2.0
"""``out=`` layouts of the CUDA executable: an ``out=`` of other strides than the planned dense
ones needs other copies on every rank that writes into it, so the executable lowers the plan
retargeted to every rank's agreed ``out=`` strides once (a *variant*, with its own kernels, control
block and graph, sharing the base's result) and switches between the variants it has.

:class:`OutLayouts` is one part of :class:`~.executable.CudaExecutable` (its state is made there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import collective
from ..errors import InvalidStateError
from ..plan import FusedPlan

if TYPE_CHECKING:
    from .executable import CudaExecutable

#: out= layout variants kept per executable (least recently used ones beyond are freed, collectively)
LAYOUTS = 4

__all__ = ["LAYOUTS", "OutLayouts"]


class OutLayouts:
    """Switching, lowering and evicting the out= layout variants of :class:`~.executable.CudaExecutable`."""

    _active: CudaExecutable

    def _switch(self, layout: tuple, *, lower: bool = True) -> None:
        """Collective (every rank, the same ``layout``): run the variant lowered for ``layout``,
        every rank's out= strides (None: the planned ones), lowering it the first time (refused
        when ``lower`` is False: inside a capture). The one that ran so far holds the current
        operand and out= offset: the next one takes them over."""
        old = self._active
        ptrs, owners, deltas = list(old._in_ptrs), list(old._in_owners), list(old._out_deltas)
        peer = dict(old._peer_deltas)
        if all(st is None for st in layout):
            exe = self
        else:
            exe = self._variants.pop(layout, None)
            if exe is None:
                if not lower:  # the same history, so the same answer, on every rank
                    raise InvalidStateError(
                        "execute(out=...) inside a CUDA graph capture with an out= of strides no execute() has used "
                        f"yet (out= strides of every rank: {layout}): lowering the exchange for them is collective "
                        "and allocates; call execute(out=...) with such an out= once outside the capture first")
                exe = self._variant(layout)
            self._variants[layout] = exe  # most recently used last
            if len(self._variants) > LAYOUTS:  # the same history, so the same eviction, on every rank
                self._evict(self._variants.pop(next(iter(self._variants))))
        self._active = exe
        exe.rebind_inputs(ptrs, owners)
        for f, delta in enumerate(deltas):
            exe._set_delta(f, delta)
        exe._set_peer_deltas(peer)
        exe._bound = self._bound
        if old is not exe:
            old._in_owners = [None] * self.nfields  # an inactive variant (or base) keeps no operand alive
        self._mine = layout[self.rt.rank]

    def _evict(self, exe: CudaExecutable) -> None:
        """Collective: free an out= layout variant, or, while a user's graph may still run a copy of
        it, retire its memory to the runtime (freed once every rank's copies are gone)."""
        mine = any(c.variant is exe for c in self._copies)
        if not any(collective.agree(self.rt.comm, None, mine)):  # the same decision everywhere
            exe.free()
            return
        self._retirements += 1
        exe._freed, exe._bound = True, False
        exe._check.free()
        exe._destroy_exec()
        sym, dev = exe._held_memory()
        held = self._held
        self.rt.retire((self.serial, self._retirements), sym, dev, pending=(lambda: held[0]) if mine else None)

    def _variant(self, layout: tuple) -> CudaExecutable:
        """Collective: this plan lowered with every rank's output at its strides in ``layout``."""
        from .launch_list import build_launch_list

        plan, rt = self.plan, self.rt
        if self._relower is None:
            raise InvalidStateError("this CUDA executable was not made by lower(): it cannot take strided out=")
        reach, transport, signal, base_align = self._relower
        fields = self._fields
        strides = [[st[f] if st is not None and st[f] is not None else p.out_strides_of(r) for r, st in enumerate(layout)]
                   for f, p in enumerate(fields)]  # per field, per rank
        funcs = {}
        with collective.attempt(rt.comm):
            moved = plan.retarget_all(strides) if isinstance(plan, FusedPlan) else plan.retarget_all(strides[0])
            ll = build_launch_list(moved, reach, transport=transport, signal=signal, sm_count=rt.sm_count,
                                   base_align=base_align)
            for k in ll.kernels:
                funcs[k.name] = rt.functions(*k.family, k.kind)
        exe = type(self)(moved, rt, ll, funcs, serial=self.serial, blocking=self.blocking, logger=self._logger,
                             relower=self._relower, shared_result=self.result_ptr)
        if self._logger is not None:
            self._logger.info("cuda out= layout %s: lowered a variant (%d in all)", layout, len(self._variants) + 1)
        return exe

