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
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import collective
from ..buffer import Buffer
from ..errors import CudaError, InvalidStateError
from ..plan import FusedPlan, Plan, fuse
from . import kernels
from .binding import Bindings
from .captured import CapturedCopies
from .launch_list import KernelStep, LaunchList, Step, align_of, protocol_rows, table_rows
from .layouts import OutLayouts
from .user_memory import Outputs, slot_of

if TYPE_CHECKING:
    from .captured import _Copy
    from .graph import Capture, GraphExec, KernelLaunch
    from .runtime import Runtime

_SIGNAL_ADD = 10  # NVSHMEM_SIGNAL_ADD (nvshmem.bindings.Signal_op.SIGNAL_ADD)

__all__ = ["CudaExecutable"]


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


class CudaExecutable(Bindings, OutLayouts, CapturedCopies):
    """A lowered plan: engine-owned symmetric result, optional staging, kernels, one graph.

    Its parts: :class:`~.binding.Bindings` (operands, out=), :class:`~.layouts.OutLayouts` (out= of
    other strides), :class:`~.captured.CapturedCopies` (copies recorded into the user's captures).
    """

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
                 relower: tuple[Any, ...] | None = None, shared_result: int = 0) -> None:
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
        self._relower = relower  # (reach, transport, signal, base_align) of lower(): variants are lowered alike
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

    def replay(self, forget: Callable[[], None]) -> None:
        """No compiled replay: a CUDA execute is one graph launch already."""

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

    def _held_memory(self) -> tuple[list[int], list[int]]:
        """This variant's (or base's) symmetric and device memory, the result excluded, in allocation order."""
        sym = [p for p in (self._send, self._recv, self._ctl) if p]
        dev = [k.table_ptr for k in self._kernels.values()] + self._protos
        self._send = self._recv = self._ctl = 0
        self._kernels, self._protos = {}, []
        return sym, dev

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

