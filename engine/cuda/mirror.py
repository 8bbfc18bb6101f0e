# SPDX-License-Identifier: Apache-2.0
"""Host operands on the GPU (``execution="cuda"``): an engine-owned device mirror around a
:class:`~.executable.CudaExecutable`.

Each execute copies the operand's bytes into the mirror, runs the GPU exchange into the inner
executable's symmetric result and copies that back into the host result (or ``out=``), then
waits: blocking, as nvmath-python's host path is. The agreement of the call is the inner
executable's, so a rank with a problem copies nothing and every rank raises.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import collective
from ..buffer import Buffer, byte_extent
from ..errors import CudaError, NotSupportedError
from ..plan import FusedPlan, Plan
from .executable import CudaExecutable
from .lowering import candidates
from .lowering import lower as lower_cuda

if TYPE_CHECKING:
    from ..backend import Context, LowerOptions
    from .runtime import Runtime

__all__ = ["MirrorExecutable", "candidates", "lower"]


class MirrorExecutable:
    """A host-memory executable that runs on the GPU (see the module docstring)."""

    backend = "cuda-mirror"
    rt: Runtime
    result: Buffer

    def __init__(self, inner: CudaExecutable) -> None:
        plan = inner.plan
        self.plan: Plan = plan
        self.rt = inner.rt
        self._inner = inner
        self._lo, hi = byte_extent(plan.in_shape, plan.in_strides, plan.itemsize)
        self._span = hi - self._lo
        self._mirror = 0
        self._host_src = 0
        self._owner = None
        self._bound = False
        self._out_bytes = plan.out_elements * plan.itemsize
        self._result_bytes = np.empty(max(self._out_bytes, 1), np.uint8)
        self.result = Buffer(self._result_bytes.ctypes.data, plan.out_shape, plan.out_strides, plan.itemsize, "cpu",
                             owner=self._result_bytes)
        self.results: tuple[Buffer, ...] = (self.result,)
        self._out_ptr = self.result.ptr

    # -- binding ---------------------------------------------------------------------------------

    nfields: int = 1  # lower() refuses several fields

    def bind_input(self, buf: Buffer, field: int = 0) -> None:
        self.rebind_input(buf.ptr, buf.owner)

    def rebind_inputs(self, ptrs: Sequence[int], owners: Sequence[object]) -> None:
        self.rebind_input(ptrs[0], owners[0])

    def rebind_input(self, ptr: int, owner: object = None, field: int = 0) -> None:
        self._host_src, self._owner, self._bound = ptr, owner, True
        if not self._mirror:
            self._mirror = self.rt.dev_alloc(max(self._span, 1))
            self._inner.rebind_input(self._mirror - self._lo)

    def bind_output(self, buf: Buffer | None, field: int = 0) -> None:
        self._out_ptr = self.result.ptr if buf is None else buf.ptr

    def out_problem(self, buf: Buffer, field: int = 0) -> str | None:
        p = self.plan
        if buf.memory != "cpu":
            return f"out= must be in host memory like the operand, got memory {buf.memory!r}"
        if buf.itemsize != p.itemsize:
            return f"out= has {buf.itemsize}-byte elements, expected {p.itemsize}"
        if buf.shape != p.out_shape:
            return f"out= has shape {buf.shape}, expected {p.out_shape} (the output box {p.out_box})"
        if not buf.is_dense(p.out_strides):
            return (f"out= has element strides {buf.strides}, expected dense {p.out_order}-order strides "
                    f"{p.out_strides} (execution='cuda' copies the result back in one piece)")
        if buf.readonly:
            return "out= is read-only"
        return None

    def out_signature(self, buf: Buffer | None, field: int = 0) -> None:
        return None

    def release_input(self) -> None:
        self._host_src, self._owner, self._bound = 0, None, False
        if self._mirror:
            self.rt.synchronize()  # in-flight copies may still read the mirror
            self.rt.dev_free(self._mirror)
            self._mirror = 0

    # -- execution -------------------------------------------------------------------------------

    def execute(self, stream: int = 0, sync: bool = True, release_workspace: bool = False,
                problem: collective.Problem | None = None) -> None:
        drv = self.rt.driver
        if problem is None and not self._bound:
            problem = ("InvalidStateError", "no operand is bound (it was released): call reset_operand() first")
        try:
            capture = drv.capture_status(stream)
        except CudaError as e:  # a bad stream: raised on every rank by the inner agreement
            capture, problem = 0, problem or collective.problem(e)
        if problem is None and capture:
            problem = ("NotSupportedError", ("execute() on a capturing stream with host operands (execution='cuda'): "
                       "they move through a device mirror with host copies and a stream synchronisation, which a CUDA "
                       "graph cannot capture; pass GPU operands to capture the exchange"))
        if problem is None and self._span:
            drv.call("cuMemcpyHtoDAsync", self._mirror, self._host_src + self._lo, self._span, stream)
        self._inner.execute(stream, sync=sync, release_workspace=release_workspace, problem=problem)
        if self._out_bytes:
            drv.call("cuMemcpyDtoHAsync", self._out_ptr, self._inner.result_ptr, self._out_bytes, stream)
        drv.call("cuStreamSynchronize", stream)

    def graph(self, stream: int = 0) -> int:
        return self._inner.graph(stream)

    def update_captured(self, graph: int, graph_exec: int) -> int:
        raise NotSupportedError("update_captured(): host operands (execution='cuda') move through a device mirror, "
                                "which is never recorded into a CUDA graph")

    def release_captured(self) -> None:
        """Nothing to release: the mirror path is never recorded into a CUDA graph."""

    def replay(self, forget: Callable[[], None]) -> None:
        """No compiled replay: the mirror path runs in Python."""

    # -- lifetime ----------------------------------------------------------------------------------

    def release_workspace(self) -> None:
        self._inner.release_workspace()

    def detach_result(self) -> None:
        """The host result is a numpy buffer: whoever holds ``result.owner`` keeps it."""

    def free(self) -> None:
        inner, self._inner = self._inner, None
        try:
            if inner is not None:
                inner.free()
        finally:
            if self._mirror and not self.rt.stopped:
                self.rt.dev_free(self._mirror)
            self._mirror = 0
            self._owner = None

    def describe(self) -> str:
        inner = self._inner.describe() if self._inner is not None else "(freed)"
        return f"host operand through a {self._span}-byte device mirror (execution='cuda')\n{inner}"


def lower(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> MirrorExecutable:
    """Collective: the CUDA executable of ``plan`` wrapped in a host mirror (one field)."""
    if isinstance(plan, FusedPlan):
        if plan.nfields > 1:  # the plan is the same on every rank: every rank raises here, before any collective
            raise NotSupportedError(
                f"execution='cuda' on host operands mirrors one array; these {plan.nfields} fields run on the host "
                "(execution='auto') or from GPU arrays")
        plan = plan.first
    return MirrorExecutable(lower_cuda(plan, ctx, options))
