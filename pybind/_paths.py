# SPDX-License-Identifier: Apache-2.0
"""Execution paths: what :class:`redist.Redistribute` drives once a plan exists.

A path owns one lowered plan (an engine executable), the engine-owned result, and the glue
between user arrays (numpy/torch/cupy/raw) and the engine's pointers. ``HostPath`` runs host
operands on the MPI backend; ``CudaPath`` (in ``_cuda_path``) runs device operands, and host
operands with ``execution="cuda"``, on the NVSHMEM + CUDA-graph backend.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod

from ._operands import Operand, host_result, host_view, wrap
from .engine.strided import HostBuffer

__all__ = ["ExecutionPath", "HostPath"]


def out_format_problem(op: Operand, template: Operand, plan) -> str | None:
    """Why ``op`` does not look like the result (package, dtype, shape, dense strides), or None."""
    if op.package != template.package:
        return f"out= must be a {template.package} array like the operand, got {op.package}"
    if op.dtype_name != template.dtype_name or op.itemsize != template.itemsize:
        return f"out= has dtype {op.dtype_name}, expected {template.dtype_name}"
    if op.shape != plan.out_shape:
        return f"out= has shape {op.shape}, expected {plan.out_shape}"
    if op.size > 1 and op.strides != plan.out_strides:
        return (f"out= has element strides {op.strides}, expected dense {plan.out_order}-order strides "
                f"{plan.out_strides}")
    return None


class ExecutionPath(ABC):
    """Interface the Redistribute state machine uses. Methods marked collective are."""

    #: "cpu" or "cuda": where the exchange runs.
    execution_space: str

    @abstractmethod
    def __init__(self, plan, operand: Operand, ctx, options, logger, stream):
        """Lower ``plan`` (collective) and bind ``operand``."""

    @abstractmethod
    def bind_input(self, op: Operand, stream=None) -> None:
        """Point the executable at a new operand (no checks; the hot path of reset_operand_unchecked)."""

    def rebind(self, obj, stream=None) -> None:
        """``bind_input`` for a raw user array (reset_operand_unchecked); paths may do it faster."""
        self.bind_input(wrap(obj), stream)

    def detach_result(self) -> None:
        """The engine-owned result now belongs to the caller: ``free()`` must not release it."""

    @abstractmethod
    def out_problem(self, op: Operand) -> str | None:
        """Why ``op`` cannot serve as ``out=`` on this rank (None when it can). Local."""

    def out_signature(self, op: Operand):
        """A value that must be equal on every rank for ``op`` to be a valid ``out=`` (symmetric heaps)."""
        return None

    @abstractmethod
    def execute(self, *, stream=None, out: Operand | None = None, release_workspace: bool = False,
                sync_symmetric_memory: bool = True):
        """Collective: run the exchange; return the result array (engine-owned, or ``out``'s object)."""

    def release_operand(self) -> None:
        """Drop references to the operand and any mirror of it."""

    def graph(self, stream=None) -> int:
        from .engine.errors import NotSupportedError

        raise NotSupportedError("graph() is only available for CUDA execution")

    @abstractmethod
    def free(self) -> None:
        """Release everything (collective for symmetric memory). Idempotent."""


class HostPath(ExecutionPath):
    """Host operands on the MPI backend (engine/host)."""

    execution_space = "cpu"

    def __init__(self, plan, operand: Operand, ctx, options, logger, stream):
        from .engine.host import lower

        self._plan, self._logger = plan, logger
        self._template = operand
        self._exe = lower(plan, ctx.process_group.comm, logger=logger)
        self._result = host_result(operand, plan.out_shape, plan.out_order)
        self._result_op = wrap(self._result)
        self._bound_out = None
        self._exe.bind_output(host_view(self._result_op))
        self._bound_out = self._result_op.ptr
        self.bind_input(operand)

    def bind_input(self, op: Operand, stream=None) -> None:
        self._exe.bind_input(host_view(op))

    def rebind(self, obj, stream=None) -> None:
        pkg = self._template.package
        if pkg == "numpy":
            ptr = obj.__array_interface__["data"][0]
        elif pkg == "torch":
            ptr = obj.data_ptr()
        else:
            ptr = obj.ptr
        self._exe.bind_input(HostBuffer(ptr, self._template.itemsize, obj))

    def release_operand(self) -> None:
        self._exe.release_input()

    def out_problem(self, op: Operand) -> str | None:
        if op.memory != "cpu":
            return f"out= must be in host memory like the operand, got a {op.package} array on {op.memory}"
        return out_format_problem(op, self._template, self._plan)

    def execute(self, *, stream=None, out=None, release_workspace=False, sync_symmetric_memory=True):
        target = self._result_op if out is None else out
        if target.ptr != self._bound_out:
            self._exe.bind_output(host_view(target))
            self._bound_out = target.ptr
        log = self._logger
        if log is not None:
            t0 = time.perf_counter()
            self._exe.execute()
            log.info("execute: %.3f ms (host backend, blocking)", (time.perf_counter() - t0) * 1e3)
        else:
            self._exe.execute()
        if release_workspace:
            self._exe.release_workspace()
        return target.obj

    def free(self) -> None:
        exe, self._exe = getattr(self, "_exe", None), None
        if exe is not None:
            exe.free()
        self._result = self._result_op = None
