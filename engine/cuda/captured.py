# SPDX-License-Identifier: Apache-2.0
"""Copies of the exchange in the user's CUDA graphs: what ``execute()`` records into a capture
under way on its stream, and ``update_captured``, which rebinds those copies in the user's exec.

:class:`CapturedCopies` is one part of :class:`~.executable.CudaExecutable` (its state is made
there). An exchange of kernels only is launched into the capture as kernel nodes; one with NVSHMEM
stream operations goes in as one child-graph node, a copy of our graph. See DESIGN.md beside this file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .. import collective
from ..errors import CudaError, InvalidStateError, InvalidValueError

if TYPE_CHECKING:
    from .executable import CudaExecutable
    from .graph import KernelLaunch

_CAPTURE_NONE, _CAPTURE_ACTIVE, _CAPTURE_INVALIDATED, _CAPTURE_IMPLICIT = 0, 1, 2, 3  # graph.CAPTURE_*

__all__ = ["CapturedCopies"]


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


class CapturedCopies:
    """Recording into the user's captures and updating the copies, of :class:`~.executable.CudaExecutable`."""

    _active: CudaExecutable

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

