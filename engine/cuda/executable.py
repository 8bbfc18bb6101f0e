# SPDX-License-Identifier: Apache-2.0
"""The CUDA executable: a lowered plan with its symmetric result, kernels and one CUDA graph.

Made by :func:`.lower.lower` (collective). It implements the engine's
:class:`~redist.engine.backend.Executable` protocol: the graph is captured on the first execute
and rebound by kernel-node updates (``bind_input`` / ``rebind_input`` / ``bind_output``), never
re-captured. ``execute`` agrees on the call first (one small Allreduce when P > 1: failures,
the flags and each rank's ``out=`` as an index into a registry every rank keeps, user_memory.py),
so a rank with a problem never leaves its peers spinning on a barrier the failed rank will not
reach. See DESIGN.md beside this file.

An ``out=`` of other strides than the planned dense ones (the interior of a ghosted array, a
reversed view) needs other copies on every rank that writes into it, so it is a *layout*: the
ranks agree on every rank's out= strides (flagged in the same Allreduce, gathered only when one
changed), and the executable lowers the plan retargeted to them once (:meth:`Plan.retarget_all`:
a variant with its own kernels, control block and graph, sharing this one's result), then
switches between the variants it has by the agreed layout.

Several fields (a :class:`~..plan.FusedPlan`) share one graph, one protocol round and one
symmetric allocation holding every field's result (``launch_list.field_offsets``); the kernels
take every field's operand address and output offset in one by-value argument, so rebinding every
field is one node update per kernel.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from ..buffer import Buffer, self_overlapping
from ..errors import CudaError, InvalidStateError, InvalidValueError
from ..plan import FusedPlan, Plan, fuse
from . import kernels
from .launch_list import KernelStep, LaunchList, Step, align_of, protocol_rows, table_rows
from .user_memory import Outputs, slot_of

if TYPE_CHECKING:
    from .graph import Capture, GraphExec, KernelLaunch
    from .runtime import Runtime

_SIGNAL_ADD = 10  # NVSHMEM_SIGNAL_ADD (nvshmem.bindings.Signal_op.SIGNAL_ADD)
#: out= layout variants kept per executable (least recently used ones beyond are freed, collectively)
LAYOUTS = 4
_CAPTURE_NONE, _CAPTURE_ACTIVE, _CAPTURE_INVALIDATED, _CAPTURE_IMPLICIT = 0, 1, 2, 3  # graph.CAPTURE_*

__all__ = ["CudaExecutable"]


class _Copy:
    """One copy of the exchange that execute() recorded into a capture of the user's: the capture
    (its id), the child node in the user's graph (0: recorded flat), the variant (out= layout) it
    is a copy of, and our kernels' nodes in the user's graph."""

    __slots__ = ("binding", "capture_id", "kernels", "node", "variant")

    def __init__(self, capture_id: int, node: int, variant: CudaExecutable,
                 kernels: list[tuple[KernelLaunch, int]]) -> None:
        self.capture_id, self.node, self.variant = capture_id, node, variant
        self.kernels = kernels  # (our kernel, its node in the user's graph): what update_captured rewrites
        self.binding = variant._binding()  # what the copy reads and writes (the operands, out= offsets, wait)


#: whether the driver takes cuGraphExecKernelNodeSetParams for a kernel node inside a child graph
#: (else update_captured rewrites the whole child: cuGraphExecChildGraphNodeSetParams)
_DIRECT_UPDATES = [True]


class _Kernel:
    """A KernelStep made real: table in device memory + KernelLaunch (args, node params, nodes)."""

    def __init__(self, step: KernelStep, launch: KernelLaunch, table_ptr: int) -> None:
        self.step = step
        self.launch = launch
        self.table_ptr = table_ptr
        self.in_align = 16
        self.out_align = 16

    def bound_align(self) -> int:
        """The alignment of the pointers bound to this launch (operand, out= delta), at most 16."""
        v = 16
        if self.step.reads_input:
            v = min(v, self.in_align)
        if self.step.writes_output:
            v = min(v, self.out_align)
        return v


class CudaExecutable:
    """A lowered plan: engine-owned symmetric result, optional staging, kernels, one graph."""

    backend = "cuda"
    plan: Plan | FusedPlan
    results: tuple[Buffer, ...]
    rt: Runtime
    launch_list: LaunchList
    serial: int
    blocking: bool
    result_ptr: int
    result_bytes: int
    graphs: bool
    result: Buffer

    def __init__(self, plan: Plan | FusedPlan, rt: Runtime, ll: LaunchList, funcs: dict[str, dict[int, int]], *,
                 serial: int, blocking: bool = False, logger: logging.Logger | None = None,
                 relower: tuple | None = None, shared_result: int = 0) -> None:
        self.plan, self.rt, self.launch_list, self._logger = plan, rt, ll, logger
        self._fields = (plan if isinstance(plan, FusedPlan) else fuse([plan])).fields
        self.nfields: int = len(self._fields)
        nf = self.nfields
        self.serial = serial
        self.blocking = bool(blocking)
        self._drv = rt.driver
        self._funcs = funcs
        self._kernels: dict[str, _Kernel] = {}
        self._exec: GraphExec | None = None
        self._freed = False
        self._detached = False
        self._need_workspace = False
        self.result_ptr = 0
        self._send = self._recv = 0
        self._in_ptrs = [0] * nf  # per field: the bound operand, the object keeping it alive, the out= delta
        self._in_owners: list = [None] * nf
        self._bound = False
        self._out_deltas = [0] * nf  # per field: this rank's own output slot
        self._peer_deltas: dict[int, int] = {}  # output slot of a push destination -> its out= offset (user_memory)
        self._in_aligns = [16] * nf
        self._out_aligns = [16] * nf
        self._check = collective.CallCheck(rt.comm, per_rank=True)  # values: every rank's out= (user_memory)
        self._agree = self._check.nranks > 1  # P = 1: nothing to agree on, errors are raised directly
        self._launch = self._drv.cuGraphLaunch
        self.result_bytes = ll.result_bytes
        self.graphs = os.environ.get("REDIST_CUDA_GRAPHS", "1") != "0"
        # out= layouts (see the module docstring): the variant that runs, by agreed layout key
        self._active: CudaExecutable = self
        self._variants: dict[tuple, CudaExecutable] = {}
        self._wants: list = [None] * nf  # per field: this rank's out= strides when not the planned ones
        self._want: tuple | None = None  # those, or None when every field has the planned strides
        self._mine: tuple | None = None  # this rank's entry in the active layout
        self._relower = relower  # (reach, transport, signal) of lower(): variants are lowered alike
        self._shares_result = bool(shared_result)  # a variant: its base owns the result and retires it all
        # copies of this exchange in the user's captures: {the user's CUgraph: [_Copy...]} (the base holds them)
        self._captured: dict[int, list[_Copy]] = {}  # what update_captured finds, by the graph they are in
        self._copies: list[_Copy] = []  # every copy that may still run (what free() must wait for)
        # (graph, exec) -> (its copies, found in the graph; the kernel-node updates that rebind them)
        self._updates: dict[tuple[int, int], tuple[list[_Copy], list | None]] = {}
        self._out_unagreed = False  # an out= was bound after the last execute that succeeded
        self._retirements = 0  # variants evicted while copies of them may run
        self._held = [True]  # shared with the retired memory of copies recorded so far: False once released
        self._capture_status = rt.driver.capture_status
        self._outputs: Outputs | None = None  # out= in any device memory, routed (user_memory.py; the base's)
        # kernels only (one rank; push with the epoch protocol): recorded flat into a user's capture
        self._flat = all(st.op == "kernel" for st in ll.steps)
        # collective allocations first (each agreed inside sym_alloc; same sizes and order on every
        # rank), then the local set-up, agreed as a whole, then NVSHMEM's warm-up (collective)
        self.result_ptr = shared_result or rt.sym_alloc(ll.result_bytes, owner="engine")
        self.results = tuple(Buffer(self.result_ptr + off, p.out_shape, p.out_strides, p.itemsize, "cuda",
                                    rt.device_id, owner=self) for p, off in zip(self._fields, ll.field_offsets))
        self.result = self.results[0]
        if ll.any_put:
            self._alloc_staging()
        self._epoch = ll.signal == "epoch"
        self._ctl = 0  # the epoch protocol's control block (symmetric), zeroed
        self._protos: list[int] = []  # device arrays of the epoch kernels' peer addresses
        self._wait = True  # the copy kernel's credit wait (sync_symmetric_memory)
        if self._epoch:
            self._ctl = rt.sym_alloc(8 * kernels.ctl_words(rt.nranks), owner="engine")
        with collective.attempt(rt.comm, on_failure=self.free):
            if self._ctl:
                rt.htod(self._ctl, np.zeros(kernels.ctl_words(rt.nranks), np.uint64))
            self._peer_out = {
                d: (self.result_ptr if d == rt.rank else rt.peer_ptr(self.result_ptr, d))
                for d in range(rt.nranks)
            }
            for d in ll.push_to:
                if not self._peer_out[d]:
                    raise CudaError(f"nvshmem_ptr(result, {d}) is NULL although peer {d} was found reachable")
            self._outputs = Outputs(rt, nf, ll.push_to, ll.push_from, self.results, self._peer_out, ll.field_offsets)
            self._base_align = min([align_of(a) for a in (self.result_ptr, *self._peer_out.values()) if a] or [16])
            from .graph import KernelLaunch

            for k in ll.kernels:
                table = self._table(k)
                tptr = rt.dev_alloc(table.nbytes)
                rt.htod(tptr, table)
                widths = {v: f for v, f in funcs[k.name].items() if v <= k.vmax}
                protocol = self._protocol(k) if k.kind != "plain" else ()
                kern = _Kernel(k, KernelLaunch(self._drv, widths, k.grid, kernels.BLOCK, tptr, len(k.segments), protocol,
                                               k.shared_bytes),
                               tptr)
                self._kernels[k.name] = kern
                kern.launch.set_vec(self._pick(kern))
            self._in_kernels = [x for x in self._kernels.values() if x.step.reads_input]
            self._out_kernels = [x for x in self._kernels.values() if x.step.writes_output]
            self._puts_resolve()
        self._warm_up()
        with collective.attempt(rt.comm, on_failure=self.free):  # our graph, at plan time (what a capture copies)
            self._instantiate()

    # -- set-up helpers -----------------------------------------------------------------------

    def _alloc_staging(self) -> None:
        ll = self.launch_list
        self._send = self.rt.sym_alloc(ll.send_staging_bytes, owner="engine")
        self._recv = self.rt.sym_alloc(ll.recv_staging_bytes, owner="engine")

    def _table(self, k: KernelStep) -> np.ndarray:
        push_to, me, nf = self.launch_list.push_to, self.rt.rank, self.nfields
        rows = table_rows(k, output=lambda d: self._peer_out[d], send=self._send, recv=self._recv,
                          slot=lambda f, d: slot_of(f, d, me, push_to, nf))
        return kernels.pack_table(rows)

    def _peer_ctl(self, pe: int) -> int:
        rt = self.rt
        ptr = self._ctl if pe == rt.rank else rt.peer_ptr(self._ctl, pe)
        if not ptr:
            raise CudaError(f"nvshmem_ptr(control block, {pe}) is NULL although peer {pe} was found reachable")
        return ptr

    def _protocol(self, k: KernelStep) -> tuple[int, ...]:
        """The epoch kernel's protocol arguments (its peer-address array goes to device memory)."""
        rt = self.rt
        proto = protocol_rows(k, ctl=self._peer_ctl, me=rt.rank, nranks=rt.nranks)
        ptr = rt.dev_alloc(proto.nbytes)
        rt.htod(ptr, proto)
        self._protos.append(ptr)
        return (self._ctl, ptr, rt.nranks, len(k.credit_to), len(k.arrive_to), len(k.wait_for), 1, int(k.bump))

    def _signal_slot(self, which: int) -> int:
        """This rank's slot in a control block (symmetric address): 0 credit, 1 arrival, 2 put signal."""
        return self._ctl + 8 * (kernels.CTL_PEERS + which * self.rt.nranks + self.rt.rank)

    def _pick(self, kern: _Kernel) -> int:
        return kern.step.width(min(kern.bound_align(), self._base_align))

    def _puts_resolve(self) -> None:
        self._puts = [
            (self._recv + st.dst_offset, self._send + st.src_offset, st.nbytes, st.pe)
            for st in self.launch_list.steps
            if st.op == "put"
        ]

    def _nvshmem_step(self, st: Step, stream: int, puts: Iterator[tuple[int, int, int, int]],
                      warm: bool = False) -> None:
        """Enqueue one NVSHMEM step. Signals add 1 per execute (replay-safe; 0 when warming up)."""
        nb, op = self.rt.nb, st.op
        if op == "sync_all":
            nb.sync_all_on_stream(stream)
        elif op == "barrier_all":
            nb.barrier_all_on_stream(stream)
        elif op == "quiet":
            nb.quiet_on_stream(stream)
        elif op == "put":
            dst, src, n, pe = next(puts)
            if st.signal:
                nb.putmem_signal_nbi_on_stream(dst, src, n, self._signal_slot(2), 0 if warm else 1, _SIGNAL_ADD,
                                               pe, stream)
            else:
                nb.putmem_nbi_on_stream(dst, src, n, pe, stream)
        elif op == "credit":  # a source this rank cannot store into: NVSHMEM signal +1 into its credit slot
            nb.signal_op_on_stream(self._signal_slot(0), 0 if warm else 1, _SIGNAL_ADD, st.pe, stream)

    def _warm_up(self) -> None:
        """NVSHMEM's on-stream ops run once uncaptured before any capture (lazy set-up inside)."""
        ll = self.launch_list
        if not any(st.op != "kernel" for st in ll.steps):
            return
        s = self.rt.stream
        puts = iter(self._puts)
        for st in ll.steps:
            if st.op != "kernel":
                self._nvshmem_step(st, s, puts, warm=True)
        self._drv.call("cuStreamSynchronize", s)

    # -- binding (the hot path of reset_operand_unchecked / out=) -------------------------------

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

    # -- execution ------------------------------------------------------------------------------

    def _enqueue(self, stream: int, sync: bool, cap: Capture | None = None) -> None:
        puts = iter(self._puts)
        for st in self.launch_list.steps:
            op = st.op
            if op == "kernel":
                kern = self._kernels[st.kernel.name]
                kern.launch.launch(stream)
                if cap is not None:
                    nodes = cap.mark()
                    if len(nodes) != 1:
                        raise CudaError(f"expected one captured node for the {st.kernel.name} kernel, got {len(nodes)}")
                    self._captured_kernels.append((kern, nodes[0]))
            elif op == "sync_all" and st.toggle:
                if not sync and cap is None:
                    continue
                self.rt.nb.sync_all_on_stream(stream)
                if cap is not None:
                    self._captured_toggles.extend(cap.mark())
            else:
                self._nvshmem_step(st, stream, puts)

    def _instantiate(self) -> GraphExec:
        """Capture the exchange on the runtime's stream, instantiate and upload it (plan time, and
        again after release_workspace). The captured graph stays: it is what a user's capture copies."""
        from .graph import Capture, GraphExec

        self._captured_kernels, self._captured_toggles = [], []
        s = self.rt.stream
        with Capture(self._drv, s) as cap:
            self._enqueue(s, True, cap)
        ge = GraphExec(self._drv, cap.graph, upload_stream=s)
        toggles = []
        for nd in self._captured_toggles:
            if self._drv.node_type(nd) != "kernel":
                toggles = []  # cannot disable it: sync_symmetric_memory=False then still syncs
                break
            toggles.append(nd)
        ge.toggle_nodes = toggles
        for kern, nd in self._captured_kernels:
            kern.launch.nodes = [(ge.handle, int(nd))]
            kern.launch.template_node = int(nd)
        self._captured_kernels = self._captured_toggles = None
        self._drv.call("cuStreamSynchronize", s)
        self._exec = ge
        if self._logger is not None:
            self._logger.info(
                "cuda graph captured: %s; nodes %s; entry sync toggle %s",
                " -> ".join(self.launch_list.node_labels()), ge.count_nodes(), "yes" if toggles else "no",
            )
        return ge

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: collective.Problem | None = None, *, graph: bool | None = None) -> None:
        """Collective: agree on the call, then run the redistribution on ``stream`` (one cuGraphLaunch),
        or, when ``stream`` is capturing, record it into that capture (its kernel nodes when the
        launch list is kernels only, else one child-graph node).

        ``graph=None`` follows ``self.graphs`` (default True; REDIST_CUDA_GRAPHS=0 makes every
        execute eager: the same kernels and NVSHMEM calls, enqueued directly, for debugging).
        """
        try:
            capture = self._capture_status(stream)
        except CudaError as e:  # a bad stream: raised on every rank by the agreement below
            capture, problem = 0, problem or collective.problem(e)
        if problem is None and not self._bound:
            problem = ("InvalidStateError", "this CUDA executable has been freed" if self._freed else
                       "no operand is bound (it was released): call reset_operand() first")
        if problem is None and (capture or release_workspace):
            problem = self._capture_problem(stream, capture, release_workspace)
        outputs = self._outputs
        if problem is None and outputs.watch:  # an out= peers store into freed (and another allocated there)?
            problem = outputs.recheck()
        if self._agree or problem is not None:
            changed = self._check.check(problem, hash((bool(sync), bool(release_workspace), bool(capture))),
                                        flag=int(self._want != self._mine or outputs.changed),
                                        what=(outputs.where, bool(sync), bool(release_workspace),
                                              "capturing" if capture else "not capturing"), value=outputs.index)
            if changed:  # some rank's out= strides or memory are new: every rank learns every rank's
                every = self.rt.comm.allgather((self._want, outputs.payload(bool(capture))))
                self._switch(tuple(w for w, _ in every), lower=not capture)
                self._route(outputs.register([x for _, x in every], bool(capture)))
            else:  # every rank's out= is registered: switched to another one it used before?
                indices = [v - 1 for v in self._check.values]
                if indices != outputs.current:
                    self._route(outputs.select(indices))
        else:  # one rank: nobody else to ask
            if self._want != self._mine:
                self._switch((self._want,), lower=not capture)
            if outputs.changed:
                self._route(outputs.register([outputs.payload(True)], bool(capture)))  # no peer: no export
            elif outputs.index - 1 != outputs.current[0]:
                self._route(outputs.select([outputs.index - 1]))
        exe = self._active
        if capture and exe._need_workspace:  # the same variant, so the same answer, on every rank
            raise InvalidStateError(
                "execute() inside a CUDA graph capture after release_workspace=True: re-making the staging of "
                "this out= layout is collective and synchronises the GPU; call execute() with this out= once "
                "outside the capture first")
        self._out_unagreed = False
        sync = sync or outputs.landing_anywhere  # a landed result is read by its owner's copy: writers wait
        if capture:
            self._record(exe, stream, sync)
        else:
            exe._run(stream, sync, release_workspace, graph, outputs.landing())

    def _route(self, offsets: tuple[list[int], dict[int, int]]) -> None:
        """Set the output offsets routed by user_memory.Outputs (this rank's own, the push destinations')."""
        own, peer = offsets
        exe = self._active
        for f, delta in enumerate(own):
            exe._set_delta(f, delta)
        exe._set_peer_deltas(peer)
        if self._logger is not None:
            self._logger.info("cuda out= routes: %s", self._outputs.text or "every output is the engine-owned result")

    def _capture_problem(self, stream: int, capture: int, release_workspace: bool) -> collective.Problem | None:
        """Why this execute cannot run as asked, found before anything is enqueued (so the user's
        capture stays valid), or None."""
        if capture == _CAPTURE_IMPLICIT:
            return ("InvalidValueError", ("execute() on the legacy default stream (stream 0) while a blocking stream is "
                    "capturing: the exchange would join that capture implicitly, which CUDA forbids; pass the "
                    "capturing stream (stream=...), or capture on a non-blocking stream"))
        if capture == _CAPTURE_INVALIDATED:
            return ("InvalidStateError", (f"the capture on stream 0x{stream:x} has been invalidated by an earlier "
                    "error: end it (cuStreamEndCapture fails) and capture again"))
        if capture and release_workspace:
            return ("InvalidStateError", ("execute(release_workspace=True) inside a CUDA graph capture: freeing the "
                    "staging is collective and synchronises the GPU, which a capture cannot hold; pass "
                    "release_workspace=True outside the capture"))
        if release_workspace and self._copies:
            return ("InvalidStateError", ("execute(release_workspace=True): copies of this exchange recorded into your "
                    "CUDA graphs use its staging; destroy those graphs and call release_captured() first"))
        if capture and not self._flat:  # joining the capture as a child needs its dependencies: ask now
            try:
                self._drv.capture_info(stream)
            except CudaError as e:
                return collective.problem(e)
        return None

    def _record(self, exe: CudaExecutable, stream: int, sync: bool) -> None:
        """Add variant ``exe``'s exchange, with the bindings of now, to the capture under way on ``stream``.

        An exchange of kernels only (one rank; push with the epoch protocol: the usual case) is
        launched straight into the capture, one kernel node each, as the user's own kernels are;
        one with NVSHMEM stream operations (puts, barriers) goes in as one child-graph node, a copy
        of our graph (NVSHMEM is never called inside the user's capture).
        """
        from .graph import join_capture

        drv = self._drv
        if bool(sync) != exe._wait:
            exe._set_wait(bool(sync))
        node, kernels = 0, []
        if exe._flat:
            for st in exe.launch_list.steps:
                kern = exe._kernels[st.kernel.name]
                kern.launch.launch(stream)
                _, cid, user_graph, deps = drv.capture_info(stream)
                if len(deps) != 1:
                    raise CudaError(f"expected one captured node for the {st.kernel.name} kernel, got {len(deps)}")
                kernels.append((kern.launch, deps[0]))
        else:
            for kern in exe._kernels.values():
                kern.launch.update_template()
            user_graph, cid, node = join_capture(drv, stream, exe._exec.graph)
            try:  # our kernels' nodes inside the copy, found by their segment tables
                funcs = {f for kern in exe._kernels.values() for f in kern.launch.funcs.values()}
                inside = drv.child_kernels(node, funcs)
                kernels = [(kern.launch, inside[kern.table_ptr]) for kern in exe._kernels.values()]
            except (CudaError, KeyError):  # then update_captured rewrites the whole child
                kernels = []
        for dst, src, n in self._outputs.landing() or ():  # the landing route's copies, recorded after the exchange
            drv.call("cuMemcpyDtoDAsync", dst, src, n, stream)
        copy = _Copy(cid, node, exe, kernels)
        self._copies.append(copy)
        copies = self._captured.get(user_graph) or []
        if any(c.capture_id != cid for c in copies):
            # another capture into this handle: a second capture into one graph (cuStreamBeginCaptureToGraph),
            # or the old graph is gone and its handle reused (its copies stay in _copies until release_captured)
            nodes = set(drv.graph_nodes(user_graph))
            copies = [c for c in copies if c.capture_id == cid or self._holds(c, nodes)]
        self._captured[user_graph] = [*copies, copy]
        self._forget_updates(user_graph)
        if self._logger is not None:
            self._logger.info("cuda: exchange recorded into the capture on stream 0x%x (graph 0x%x, %s)", stream,
                              user_graph, f"child node 0x{node:x}" if node else f"{len(kernels)} kernel node(s)")

    def _forget_updates(self, graph: int) -> None:
        self._updates = {k: v for k, v in self._updates.items() if k[0] != graph}

    def captured_copies(self) -> int:
        """How many copies of this exchange execute() recorded into the user's captures, since the
        last :meth:`release_captured` (local)."""
        return len(self._copies)

    def release_captured(self) -> None:
        """The caller declares that no graph holding a copy of this exchange will be launched again
        (local). Until then the memory the copies use outlives free() (retired until finalize) and
        release_workspace is refused; memory already retired so is freed at the next collective point."""
        self._copies, self._captured, self._updates = [], {}, {}
        self._held[0] = False
        self._held = [True]

    def replay(self, forget: Callable[[], None]) -> None:
        """No compiled replay: a CUDA execute is one graph launch already."""

    def update_captured(self, graph: int, graph_exec: int) -> int:
        """Push the operand bound now into every copy of this exchange that execute() recorded into
        ``graph``, in ``graph_exec`` (an exec instantiated from ``graph``). Local; returns how many
        copies. The copies keep the out= and sync_symmetric_memory they were recorded with: when the
        last execute() used others, this raises (peers store into a copy's out=).

        The copies keep their bindings until this is called: it rewrites their kernel nodes in
        ``graph_exec`` (``cuGraphExecKernelNodeSetParams``, one call per kernel; launches already
        enqueued are not affected).
        """
        if self._freed:
            raise InvalidStateError("update_captured: this CUDA executable has been freed")
        if not self._bound:
            raise InvalidStateError("update_captured: no operand is bound (it was released): call reset_operand() "
                                    "first")
        prepared = self._updates.get((graph, graph_exec)) or self._prepare_update(graph, graph_exec)
        copies, calls = prepared
        active = self._active
        if self._want != self._mine or self._out_unagreed:
            raise InvalidStateError("update_captured: the out= bound now was not used by a successful execute() (the "
                                    "execute() that bound it failed); call execute() first")
        first = copies[0].binding
        for c in copies:
            if c.variant is not active:
                raise InvalidStateError(
                    "update_captured: a copy in this graph was captured with an out= of other strides than the last "
                    "execute()'s (another out= layout); execute() once with an out= of those strides, or capture again")
            if c.binding != first:
                raise InvalidStateError(
                    f"update_captured: graph 0x{graph:x} holds {len(copies)} copies of this exchange recorded with "
                    "different operands, out= or sync_symmetric_memory (e.g. one Redistribute executed for u, then for v, "
                    "in one step); one "
                    "update would give them all the operand bound now. Capture again, or use one Redistribute per "
                    "operand")
        binding = active._binding()
        if binding[1:] != first[1:]:  # only the operand is local: peers store into the out=
            what = "out=" if binding[1] != first[1] else "sync_symmetric_memory"
            raise InvalidStateError(
                f"update_captured: the copies in graph 0x{graph:x} were recorded with another {what} than the last "
                "execute() used; update_captured rebinds the operand only (peers store into the out= a copy writes, "
                "so changing it on one rank would desynchronise the job). Call execute() once with the out= and "
                "sync_symmetric_memory the graph was captured with, or capture again")
        if calls is not None:  # the copies' kernel nodes, in place: one call per kernel
            fn = self._drv.cuGraphExecKernelNodeSetParams
            for nd, pref in calls:
                if fn(graph_exec, nd, pref):
                    break
            else:
                for c in copies:
                    c.binding = binding
                return len(copies)
        self._update_children(copies, graph, graph_exec, direct_failed=calls is not None)
        for c in copies:
            c.binding = binding
        return len(copies)

    def _binding(self) -> tuple:
        """What this variant's kernels read and write now: the operands, the out= offsets, the wait flag."""
        return tuple(self._in_ptrs), (tuple(self._out_deltas), tuple(sorted(self._peer_deltas.items()))), self._wait

    def _holds(self, c: _Copy, nodes: set[int]) -> bool:
        """Whether copy ``c``'s nodes are among ``nodes`` (those of the graph it was recorded into)."""
        return c.node in nodes if c.node else all(nd in nodes for _, nd in c.kernels)

    def _prepare_update(self, graph: int, graph_exec: int) -> tuple[list[_Copy], list | None]:
        """The copies recorded into ``graph`` (checked to be in it, once per (graph, exec)) and the
        kernel-node updates that rebind them (None: a copy needs its whole child rewritten)."""
        copies = list(self._captured.get(graph, ()))
        if not copies:
            raise InvalidValueError(
                f"update_captured: graph 0x{graph:x} holds no copy of this exchange (execute() records one when "
                "it runs on a capturing stream; pass the graph that capture produced, not a clone)")
        nodes = set(self._drv.graph_nodes(graph))
        missing = [c for c in copies if not self._holds(c, nodes) or not self._ours(c)]
        if missing:
            raise InvalidValueError(
                f"update_captured: {len(missing)} of the {len(copies)} copies of this exchange recorded into graph "
                f"0x{graph:x} are no longer in it (nodes removed, or the graph was destroyed and the handle reused)")
        nested = _DIRECT_UPDATES[0]
        calls = None
        if all(c.kernels and (nested or not c.node) for c in copies):
            calls = [(nd, launch._pref) for c in copies for launch, nd in c.kernels]
        self._updates[(graph, graph_exec)] = (copies, calls)
        return copies, calls

    def _ours(self, c: _Copy) -> bool:
        """Whether copy ``c``'s nodes still are what was recorded (a graph destroyed without
        release_captured may have given its handle and node addresses to a new one): a child graph,
        or kernel nodes running one of our kernels on its segment table."""
        drv = self._drv
        if c.node:
            return drv.node_type(c.node) == "graph"
        for launch, nd in c.kernels:
            if drv.node_type(nd) != "kernel" or drv.kernel_table(nd, set(launch.funcs.values())) != launch.a_table.value:
                return False
        return True

    def _update_children(self, copies: list[_Copy], graph: int, graph_exec: int, *, direct_failed: bool) -> None:
        """update_captured's slow path: rewrite each copy's whole child graph from ours (brought up
        to date first); kernel nodes recorded flat are rewritten one by one."""
        from .graph import _err_name

        drv, active, templated = self._drv, self._active, False
        for c in copies:
            if not c.node:  # recorded flat: its kernel nodes are the user's graph's own
                for launch, nd in c.kernels:
                    rc = drv.cuGraphExecKernelNodeSetParams(graph_exec, nd, launch._pref)
                    if rc:
                        raise CudaError(f"update_captured: cuGraphExecKernelNodeSetParams failed with CUresult {rc}"
                                        f"{_err_name(rc)} (is graph_exec instantiated from graph 0x{graph:x}?)")
                continue
            if not templated:
                for kern in active._kernels.values():
                    kern.launch.update_template()
                templated = True
            rc = drv.cuGraphExecChildGraphNodeSetParams(graph_exec, c.node, active._exec.graph)
            if rc:
                raise CudaError(f"update_captured: cuGraphExecChildGraphNodeSetParams failed with CUresult {rc}"
                                f"{_err_name(rc)} (is graph_exec instantiated from graph 0x{graph:x}?)")
            if direct_failed and c.kernels and _DIRECT_UPDATES[0]:  # the exec is fine: the driver refused nodes
                _DIRECT_UPDATES[0] = False                             # inside a child graph
                self._updates.clear()

    def _run(self, stream: int, sync: bool, release_workspace: bool, graph: bool | None,
             land: list[tuple[int, int, int]] | None = None) -> None:
        """The agreed execute on this variant: the graph launch (or the slow path), then the landed
        outputs' copies (``land``: the base's landing fields, user_memory.py)."""
        if sync is not self._wait and bool(sync) != self._wait:
            self._set_wait(bool(sync))
        ge = self._exec
        if graph is None:
            graph = self.graphs
        if ge is not None and graph and not self._need_workspace:  # the usual call
            if sync is not ge.toggle_enabled and ge.toggle_nodes and bool(sync) != ge.toggle_enabled:
                ge.set_toggle(bool(sync))
            rc = self._launch(ge.handle, stream)
            if rc:
                from .graph import _err_name

                raise CudaError(f"cuGraphLaunch failed with CUresult {rc}{_err_name(rc)}")
        else:
            self._execute_slow(stream, sync, graph)
        for dst, src, n in land or ():
            self._drv.call("cuMemcpyDtoDAsync", dst, src, n, stream)
        if self.blocking:
            self._drv.call("cuStreamSynchronize", stream)
        if release_workspace:
            self.release_workspace()

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

    def _held_memory(self) -> tuple[list[int], list[int]]:
        """This variant's (or base's) symmetric and device memory, the result excluded, in allocation order."""
        sym = [p for p in (self._send, self._recv, self._ctl) if p]
        dev = [k.table_ptr for k in self._kernels.values()] + self._protos
        self._send = self._recv = self._ctl = 0
        self._kernels, self._protos = {}, []
        return sym, dev

    def _variant(self, layout: tuple) -> CudaExecutable:
        """Collective: this plan lowered with every rank's output at its strides in ``layout``."""
        from .launch_list import build_launch_list

        plan, rt = self.plan, self.rt
        if self._relower is None:
            raise InvalidStateError("this CUDA executable was not made by lower(): it cannot take strided out=")
        reach, transport, signal = self._relower
        fields = self._fields
        strides = [[st[f] if st is not None and st[f] is not None else p.out_strides_of(r) for r, st in enumerate(layout)]
                   for f, p in enumerate(fields)]  # per field, per rank
        funcs = {}
        with collective.attempt(rt.comm):
            moved = plan.retarget_all(strides) if isinstance(plan, FusedPlan) else plan.retarget_all(strides[0])
            ll = build_launch_list(moved, reach, transport=transport, signal=signal, sm_count=rt.sm_count)
            for k in ll.kernels:
                funcs[k.name] = rt.functions(*k.family, k.kind)
        exe = CudaExecutable(moved, rt, ll, funcs, serial=self.serial, blocking=self.blocking, logger=self._logger,
                             relower=self._relower, shared_result=self.result_ptr)
        if self._logger is not None:
            self._logger.info("cuda out= layout %s: lowered a variant (%d in all)", layout, len(self._variants) + 1)
        return exe

    def _set_wait(self, wait: bool) -> None:
        """sync_symmetric_memory in epoch mode: the copy kernel's credit wait (a node update)."""
        self._wait = wait
        for kern in self._kernels.values():
            if kern.launch.a_wait is not None:
                kern.launch.a_wait.value = int(wait)
                kern.launch.update()

    def _execute_slow(self, stream: int, sync: bool, graph: bool) -> None:
        """An execute after release_workspace (staging and graph re-made first), or an eager one."""
        if self._need_workspace:
            self._restore_workspace()
        if graph:
            ge = self._exec
            if ge.toggle_nodes and bool(sync) != ge.toggle_enabled:
                ge.set_toggle(bool(sync))
            rc = self._launch(ge.handle, stream)
            if rc:
                from .graph import _err_name

                raise CudaError(f"cuGraphLaunch failed with CUresult {rc}{_err_name(rc)}")
        else:
            self._enqueue(stream, sync)

    def graph(self, stream: int = 0) -> int:
        """The CUgraph (int) that execute() launches, with the bindings of now.

        A parent graph that embeds it as a child node gets a copy: later rebinds don't reach it.
        """
        if self._want != self._mine:
            raise InvalidStateError("graph(): an out= of other strides is bound but not yet agreed on: call execute() "
                                    "once first (it lowers the exchange for that layout)")
        if self._outputs is not None and self._outputs.landing():
            raise InvalidStateError("graph(): this rank's out= takes the landing route (peers cannot map it, see "
                                    "describe()): its copy from the result is not part of the exported graph; record "
                                    "execute() into your capture instead, or pass an out= the peers can map")
        if self._active is not self:
            return self._active.graph(stream)
        if self._freed:
            raise InvalidStateError("this CUDA executable has been freed")
        if self._need_workspace:
            self._restore_workspace()
        for kern in self._kernels.values():  # rebinds update our exec only: bring the graph up to date
            kern.launch.update_template()
        return int(self._exec.graph)

    # -- workspace and lifetime -----------------------------------------------------------------

    def _destroy_exec(self) -> None:
        ge, self._exec = self._exec, None
        for kern in self._kernels.values():
            kern.launch.nodes = []
        if ge is not None:
            ge.destroy()

    def release_workspace(self) -> None:
        """Collective: free the symmetric staging (put transport) of every layout variant too;
        re-made by the next execute that needs it."""
        for v in self._variants.values():  # the same variants, in the same order, on every rank
            v.release_workspace()
        if self._freed or not (self._send or self._recv):
            return
        self.rt.synchronize()  # no in-flight graph may still use the staging
        self._destroy_exec()
        send, recv, self._send, self._recv = self._send, self._recv, 0, 0
        self.rt.sym_free(send)
        self.rt.sym_free(recv)
        self._need_workspace = True

    def _restore_workspace(self) -> None:
        self._alloc_staging()
        for kern in self._kernels.values():
            if any(s.dst_space == "send" or s.src_space == "recv" for s in kern.step.segments):
                self.rt.htod(kern.table_ptr, self._table(kern.step))
        self._puts_resolve()
        self._need_workspace = False
        self._instantiate()

    @property
    def workspace_bytes(self) -> int:
        return self.launch_list.send_staging_bytes + self.launch_list.recv_staging_bytes

    def detach_result(self) -> None:
        """The caller owns the result now (function form): free() leaves it on the heap."""
        if not self._detached and self.result_ptr:
            self._detached = True
            self.rt.sym_set_owner(self.result_ptr, "user")

    def free(self) -> None:
        """Collective: wait for in-flight work, destroy the graph, free tables, staging, result.

        Where execute() recorded copies of this exchange into the user's graphs (on any rank) and
        :meth:`release_captured` was not called since, the memory the copies use is retired to the
        runtime instead (the copies stay correct), and freed collectively at a later collective point
        once every rank has released its copies, or at finalize.
        """
        if self._freed:
            return
        self._freed = True
        self._bound = False
        self._in_owners = [None] * self.nfields
        self._check.free()
        variants, self._variants, self._active = list(self._variants.values()), {}, self
        rt = self.rt
        if rt.stopped:
            return
        if any(collective.agree(rt.comm, None, bool(self._copies))):  # the same decision on every rank
            self._retire_with_copies(variants)
            return
        for v in variants:  # lowered in the same order on every rank: freed so too
            v.free()
        try:
            rt.synchronize()
        finally:
            if self._outputs is not None:  # no graph of ours can store through its mappings any more
                self._outputs.close()
            self._destroy_exec()
            sym, dev = self._held_memory()
            for p in dev:
                rt.dev_free(p)
            for p in sym:  # the order of allocation: the same on every rank
                rt.sym_free(p)
            if self.result_ptr and not self._detached and not self._shares_result:
                rt.sym_free(self.result_ptr)
            self.result_ptr = 0

    def _retire_with_copies(self, variants: list[CudaExecutable]) -> None:
        """free() while copies may run (or a finalizer): our own graphs go now; the memory at the
        runtime's next collective point, once :meth:`release_captured` was called where copies were
        recorded (else at finalize)."""
        sym: list[int] = []
        dev: list[int] = []
        for exe in (*variants, self):  # the same order on every rank
            exe._freed, exe._bound = True, False
            exe._check.free()
            exe._destroy_exec()
            memory = exe._held_memory()
            sym += memory[0]
            dev += memory[1]
        if self.result_ptr and not self._detached:
            sym.append(self.result_ptr)
        self.result_ptr = 0
        held = self._held
        self.rt.retire((self.serial, 0), sym, dev, pending=(lambda: held[0]) if self._copies else None)

    def __del__(self) -> None:
        # Garbage-collected without free(): what is local goes now (the graph exec: the driver
        # defers its destruction while it runs); symmetric memory and tables, whose release must
        # wait for the GPU and (symmetric) for every rank, go to the runtime, which frees them
        # at its next collective point once every rank has dropped this executable (at finalize
        # when copies were recorded into a user's graph and not released).
        # A layout variant leaves all of that to its base, which retires the variants' memory with its
        # own under one serial (finalizers in a garbage cycle run in no agreed order).
        try:
            if getattr(self, "_freed", True) or self.rt.stopped or self._shares_result:
                return
            self._freed = True
            self._retire_with_copies(list(self._variants.values()))
        except Exception:  # noqa: BLE001, S110 -- never raise from a finalizer
            pass

    def describe(self) -> str:
        vecs = ", ".join(f"{n}: {k.launch.vec} B" for n, k in self._kernels.items())
        state = "captured" if self._exec is not None else "not captured (staging released)"
        more = f"; {len(self._variants)} out= layout variant(s), one active" if self._variants else ""
        if self._copies:
            more = f"{more}; {len(self._copies)} copy(ies) recorded into user captures"
        if self._outputs is not None and self._outputs.text:
            more = f"{more}\n  out= routes: {self._outputs.text}"
        if self._active is not self:
            more = f"{more}\n  active out= layout:\n{self._active.describe()}"
        return f"{self.launch_list.describe()}\n  graph {state}; vector widths now {vecs or '-'}{more}"

    @property
    def transports(self) -> dict[int, str]:
        ll = self.launch_list
        return {**{d: "push" for d in ll.push_to}, **{d: "put" for d in ll.put_to}}

