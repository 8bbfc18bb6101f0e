# SPDX-License-Identifier: Apache-2.0
"""CUDA streams of every kind (cupy, torch, cuda.core, raw ``cudaStream_t``) as one integer."""

from __future__ import annotations

from .engine.errors import InvalidTypeError

__all__ = ["current_stream", "stream_handle"]


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

        return torch.cuda.current_stream(device_id).cuda_stream
    return None
