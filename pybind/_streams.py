# SPDX-License-Identifier: Apache-2.0
"""CUDA streams of every kind (cupy, torch, cuda.core, raw ``cudaStream_t``) as one integer, and the
(graph, exec) handles of the user's instantiated CUDA graphs (torch, cupy, raw)."""

from __future__ import annotations

from .engine.errors import InvalidStateError, InvalidTypeError, InvalidValueError

__all__ = ["current_stream", "graph_handles", "stream_handle"]


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


def current_stream(package: str, device_id: int | None) -> int | None:
    """The current stream of ``package`` on ``device_id`` (None for packages that have none)."""
    if package == "cupy":
        import cupy

        return cupy.cuda.get_current_stream().ptr
    if package == "torch" and device_id is not None:
        import torch

        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # the handle without a Stream object per call
        if raw is not None:
            return raw(device_id)
        return torch.cuda.current_stream(device_id).cuda_stream
    return None


def graph_handles(graph) -> tuple[int, int]:
    """``(cudaGraph_t, cudaGraphExec_t)`` of an instantiated graph of the user's.

    ``torch.cuda.CUDAGraph`` (made with ``keep_graph=True``: torch destroys the cudaGraph_t after
    instantiating it otherwise, and the copies' nodes with it), ``cupy.cuda.Graph`` (cupy 13+:
    ``.graph`` and ``.graphExec``), or a pair ``(graph, graph_exec)`` of ints or cuda.bindings
    handles.
    """
    if isinstance(graph, (tuple, list)) and len(graph) == 2:
        try:
            return int(graph[0]), int(graph[1])
        except (TypeError, ValueError) as e:
            raise InvalidTypeError(f"a (graph, graph_exec) pair must hold two handles (ints), got {graph!r}") from e
    if hasattr(graph, "graphExec"):  # cupy.cuda.Graph
        g, ge = int(graph.graph), int(graph.graphExec)
        if not g:
            raise InvalidValueError("this cupy Graph no longer holds its cudaGraph_t (cupy < 13 destroys it after "
                                    "instantiating): update_captured needs cupy 13 or newer")
        return g, ge
    name = f"{type(graph).__module__}.{type(graph).__qualname__}"
    if hasattr(graph, "raw_cuda_graph"):  # torch.cuda.CUDAGraph
        try:
            g = int(graph.raw_cuda_graph())
        except RuntimeError as e:
            raise InvalidValueError(
                "update_captured needs the graph the exchange was recorded into, which torch destroys after "
                "instantiating it unless the graph is made with torch.cuda.CUDAGraph(keep_graph=True)") from e
        if not hasattr(graph, "raw_cuda_graph_exec"):
            raise InvalidValueError(f"this torch ({name}) has no CUDAGraph.raw_cuda_graph_exec(): pass the pair "
                                    "(graph, graph_exec) of the exec you launch")
        try:
            ge = int(graph.raw_cuda_graph_exec())
        except RuntimeError as e:
            raise InvalidStateError("the torch graph is not instantiated yet: call instantiate() (or replay() once) "
                                    "before update_captured") from e
        return g, ge
    raise InvalidTypeError(f"unsupported graph object {name}: pass a torch.cuda.CUDAGraph, a cupy.cuda.Graph or a "
                           "(cudaGraph_t, cudaGraphExec_t) pair")
