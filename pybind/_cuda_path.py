# SPDX-License-Identifier: Apache-2.0
"""CudaPath: GPU execution on the NVSHMEM + CUDA-graph backend (engine/cuda).

Device operands (cupy, torch CUDA, ``RawArray(memory="cuda")``) are read in place: they need
**not** be on the symmetric heap (unlike nvmath-python), because the kernel reads the operand
locally and writes peers' results through NVSHMEM peer pointers. The result is engine-owned,
symmetric and persistent (the same memory every ``execute``), returned as an array of the
operand's package; ``out=`` must be a symmetric buffer at the same heap offset on every rank.

Host operands (numpy, torch CPU, raw host) with ``execution="cuda"`` go through an engine-owned
device mirror: copy in, run, copy out into a host result, blocking (as nvmath-python does).

Streams: a cupy/torch/cuda.core stream object or a raw ``cudaStream_t`` int; None means the
current stream of the operand's package (0, the legacy stream, for numpy/raw). The graph is
captured on an internal stream (the legacy stream cannot be captured) and launched on yours.
"""

from __future__ import annotations

import time

from ._operands import Operand, host_result
from ._paths import ExecutionPath, out_format_problem
from .engine.errors import CudaError, InvalidTypeError, InvalidValueError, NotSupportedError

__all__ = ["CudaPath", "stream_handle"]


def stream_handle(stream) -> int:
    """``cudaStream_t`` of a cupy / torch / cuda.core stream object, or of an int."""
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream
    for attr in ("ptr", "cuda_stream"):  # cupy, torch
        v = getattr(stream, attr, None)
        if isinstance(v, int):
            return v
    f = getattr(stream, "__cuda_stream__", None)  # cuda.core and the CUDA stream protocol
    if f is not None:
        v = f() if callable(f) else f
        return int(v[1])
    h = getattr(stream, "handle", None)
    if h is not None:
        return int(h)
    raise InvalidTypeError(
        f"unsupported stream object {type(stream).__module__}.{type(stream).__name__}: pass a cupy, torch or "
        "cuda.core stream, or a cudaStream_t as int"
    )


def _agree(comm, err: BaseException | None, what: str) -> None:
    """Collective: every rank raises the first rank's error (its own if it has one)."""
    from .engine import errors as E

    every = comm.allgather(None if err is None else (type(err).__name__, str(err)))
    for r, e in enumerate(every):
        if e is None:
            continue
        if err is not None:
            raise err
        cls = getattr(E, e[0], None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = CudaError
        raise cls(f"rank {r}: {what}: {e[1]}")


def _span_bytes(shape, strides, itemsize) -> int:
    if any(n == 0 for n in shape):
        return 0
    return (sum((n - 1) * s for n, s in zip(shape, strides)) + 1) * itemsize


class CudaPath(ExecutionPath):
    """GPU execution of one plan (see the module docstring)."""

    execution_space = "cuda"

    def __init__(self, plan, operand: Operand, ctx, options, logger, stream):
        self._exe = None
        self._mirror = 0
        self._plan, self._logger = plan, logger
        self._template = operand
        self._pkg = operand.package
        self._host = operand.memory != "cuda"
        self._blocking = getattr(options, "blocking", "auto") is True
        self._last_stream = self._last_handle = None
        self._in_obj = None
        self._host_src = 0
        self._result = None
        pg = ctx.process_group
        rt = getattr(ctx, "cuda", None)
        err = None
        try:
            if rt is None:
                from .engine.cuda import runtime

                rt = runtime.current()
            dev = operand.device_id
            if not self._host and dev is not None and dev != rt.device_id:
                raise InvalidValueError(
                    f"the operand is on CUDA device {dev} but redist runs on device {rt.device_id} on this rank"
                )
            if self._host and self._pkg not in ("numpy", "torch", "raw"):
                raise NotSupportedError(f"host operands of package {self._pkg} cannot run on the GPU")
            self._ctor_stream = None if stream is None else stream_handle(stream)
        except Exception as e:  # noqa: BLE001 -- raised on every rank by _agree
            err = e
        _agree(pg.comm, err, "CUDA execution")
        self._rt = rt
        self._dev = rt.device_id
        from .engine.cuda.lower import lower

        self._exe = lower(plan, rt, transport=getattr(options, "transport", "auto"), logger=logger)
        err = None
        try:
            self._make_result()
            if self._host:
                self._span = _span_bytes(operand.shape, operand.strides, operand.itemsize)
            if operand.ptr or operand.size == 0 and operand.obj is not None:
                self.bind_input(operand)
        except Exception as e:  # noqa: BLE001
            err = e
        try:
            _agree(pg.comm, err, "binding the CUDA executable")
        except Exception:
            self.free()
            raise

    # -- results ---------------------------------------------------------------------------------

    def _make_result(self) -> None:
        p, t, exe = self._plan, self._template, self._exe
        self._result_ptr = exe.result_ptr
        if self._host:
            self._result = host_result(t, p.out_shape, p.out_order)
            from ._operands import wrap

            self._result_host_ptr = wrap(self._result).ptr
            return
        if t.package in ("cupy", "torch"):
            from ._symmetric import wrap_device

            self._result = wrap_device(
                exe.result_ptr,
                exe.result_bytes,
                p.out_shape,
                p.out_strides,
                t.dtype,
                t.package,
                self._dev,
                owner=self,
            )
        else:
            from ._operands import RawArray

            self._result = RawArray(
                exe.result_ptr,
                p.out_shape,
                p.out_strides,
                t.itemsize,
                memory="cuda",
                device_id=self._dev,
                owner=self,
                dtype=t.dtype,
            )

    # -- streams -----------------------------------------------------------------------------------

    def _stream(self, stream) -> int:
        if stream is None:
            pkg = self._pkg
            if pkg == "cupy":
                import cupy

                return cupy.cuda.get_current_stream().ptr
            if pkg == "torch" and not self._host:
                import torch

                return torch.cuda.current_stream(self._dev).cuda_stream
            return 0 if self._ctor_stream is None else self._ctor_stream
        if stream is self._last_stream:
            return self._last_handle
        h = stream_handle(stream)
        self._last_stream, self._last_handle = stream, h
        return h

    # -- binding ---------------------------------------------------------------------------------

    def bind_input(self, op: Operand, stream=None) -> None:
        if self._host:
            self._in_obj, self._host_src = op.obj, op.ptr
            if not self._mirror:
                self._mirror = self._rt.dev_alloc(max(self._span, 1))
            self._exe.bind_input(self._mirror)
            return
        self._in_obj = op.obj
        self._exe.bind_input(op.ptr)

    def rebind(self, obj, stream=None) -> None:
        pkg = self._pkg
        if pkg == "cupy":
            ptr = obj.data.ptr
        elif pkg == "torch":
            ptr = obj.data_ptr()
        elif pkg == "numpy":
            ptr = obj.__array_interface__["data"][0]
        else:
            ptr = obj.ptr
        if self._host:
            self._in_obj, self._host_src = obj, ptr
            if not self._mirror:
                self._mirror = self._rt.dev_alloc(max(self._span, 1))
                self._exe.bind_input(self._mirror)
            return
        self._in_obj = obj
        self._exe.bind_input(ptr)

    def out_problem(self, op: Operand) -> str | None:
        p, t = self._plan, self._template
        if self._host:
            if op.memory != "cpu":
                return (
                    f"out= must be in host memory like the operand, got a {op.package} array on {op.memory}"
                )
        else:
            if op.memory != "cuda":
                return f"out= must be in GPU memory like the operand, got a {op.package} array in host memory"
            if op.device_id is not None and op.device_id != self._dev:
                return f"out= is on CUDA device {op.device_id}, expected device {self._dev}"
        problem = out_format_problem(op, t, p)
        if problem is not None or self._host:
            return problem
        rt, exe = self._rt, self._exe
        nbytes = op.size * op.itemsize
        ent = rt.sym_lookup(op.ptr)
        if ent is None and not rt.is_symmetric(op.ptr):
            return (
                "out= must be on the NVSHMEM symmetric heap (peers write into it): allocate it with "
                "redist.allocate_symmetric_memory"
            )
        if ent is not None and op.ptr + nbytes > ent[0] + ent[1]:
            return f"out= ({nbytes} bytes) runs past the end of its symmetric allocation ({ent[1]} bytes)"
        delta = op.ptr - exe.result_ptr
        for d in exe.launch_list.push_to:
            if rt.peer_ptr(op.ptr, d) != rt.peer_ptr(exe.result_ptr, d) + delta:
                return (
                    f"out= is not mapped like the symmetric heap for peer {d} (externally registered memory?)"
                )
        return None

    def out_signature(self, op: Operand):
        if self._host:
            return None
        return self._rt.heap_offset(op.ptr)

    # -- execution -------------------------------------------------------------------------------

    def execute(
        self,
        *,
        stream=None,
        out: Operand | None = None,
        release_workspace: bool = False,
        sync_symmetric_memory: bool = True,
    ):
        exe = self._exe
        s = self._stream(stream)
        log = self._logger
        t0 = time.perf_counter() if log is not None else 0.0
        if self._host:
            target = self._execute_host(s, out, sync_symmetric_memory)
        else:
            if out is None:
                exe.bind_output(self._result_ptr)
                target = self._result
            else:
                exe.bind_output(out.ptr)
                target = out.obj
            exe.execute(s, sync_symmetric_memory=sync_symmetric_memory, blocking=self._blocking)
        if release_workspace:
            exe.release_workspace()
        if log is not None:
            log.info(
                "execute: %.3f ms host time (cuda, stream 0x%x, %s)",
                (time.perf_counter() - t0) * 1e3,
                s,
                "blocking" if (self._blocking or self._host) else "asynchronous",
            )
        return target

    def _execute_host(self, s: int, out, sync: bool):
        exe, drv = self._exe, self._rt.driver
        if self._in_obj is None and self._host_src == 0 and self._span:
            raise InvalidValueError("no operand is bound")
        if self._span:
            drv.call("cuMemcpyHtoDAsync", self._mirror, self._host_src, self._span, s)
        exe.bind_output(self._result_ptr)
        exe.execute(s, sync_symmetric_memory=sync, blocking=False)
        p = self._plan
        nbytes = p.out_elements * self._template.itemsize
        dst = self._result_host_ptr if out is None else out.ptr
        if nbytes:
            drv.call("cuMemcpyDtoHAsync", dst, self._result_ptr, nbytes, s)
        drv.call("cuStreamSynchronize", s)
        return self._result if out is None else out.obj

    def graph(self, stream=None) -> int:
        return self._exe.graph(self._stream(stream))

    def release_operand(self) -> None:
        self._in_obj = None
        self._host_src = 0
        if self._mirror:
            self._rt.synchronize()  # in-flight copies may still read the mirror
            self._rt.dev_free(self._mirror)
            self._mirror = 0

    def detach_result(self) -> None:
        if not self._host and self._exe is not None:
            self._exe.detach_result()

    @property
    def executable(self):
        """The engine executable (redist.engine.cuda.CudaExecutable), for describe() and tests."""
        return self._exe

    def free(self) -> None:
        exe, self._exe = self._exe, None
        try:
            if exe is not None:
                exe.free()
        finally:
            if self._mirror:
                try:
                    self._rt.dev_free(self._mirror)
                except CudaError:
                    pass
                self._mirror = 0
            self._result = None
            self._in_obj = None
