# SPDX-License-Identifier: Apache-2.0
"""redist_options_t of the C ABI, read from C memory (cffi) into :class:`redist.RedistributeOptions`
values: every version of the struct a program may have been built against (``struct_size``,
``version``), never reading past an older struct. Part of libredist.so's Python half (``_entry.py``)."""

from __future__ import annotations

_TRANSPORTS = ("auto", "push", "put")
_HOST_METHODS = ("auto", "hybrid", "datatype", "pack", "alltoallw", "push")
_SIGNALS = ("epoch", "barrier")  # redist_signal_t order
_TUNES = ("estimate", "measure", "wisdom")  # redist_tune_t order
#: the first field of redist_options_t that each version added (version 1: struct_size .. signal); a new
#: version appends its fields and a line here
_ADDED = {2: "result_ndim", 3: "global_shape", 4: "tune"}
_OPTIONS_VERSION = max(_ADDED)


def options_size(ffi, version: int) -> int:
    """sizeof(redist_options_t) in a program built against ``version`` of redist.h."""
    if version == _OPTIONS_VERSION:
        return ffi.sizeof("redist_options_t")
    align = ffi.alignof("redist_options_t")
    return -(-ffi.offsetof("redist_options_t", _ADDED[version + 1]) // align) * align


def has(ffi, ptr, field: str) -> bool:
    """Whether ``ptr``'s version of the struct has ``field`` (never read past an older struct)."""
    added = max((v for v, first in _ADDED.items()
                 if ffi.offsetof("redist_options_t", first) <= ffi.offsetof("redist_options_t", field)), default=1)
    return int(ptr.version) >= added


def decode(ffi, ptr, order: int) -> dict:
    """The Redistribute options of redist_create (``order``) or redist_create_ex (``ptr``)."""
    if order >= 0:  # redist_create: only the order
        if order not in (0, 1):
            raise ValueError(f"order must be REDIST_ORDER_C (0) or REDIST_ORDER_F (1), got {order}")
        return {"result_layout": "CF"[order]}
    if not ptr:
        return {"result_layout": "C"}
    size = int(ptr.struct_size)
    version = int(ptr.version)
    if not 1 <= version <= _OPTIONS_VERSION:
        raise ValueError(f"options->version is {version}; this library knows versions 1 to {_OPTIONS_VERSION} "
                         "(initialize the options with redist_options_init())")
    if size != options_size(ffi, version):
        raise ValueError(f"options->struct_size is {size}, but redist_options_t version {version} has "
                         f"{options_size(ffi, version)} bytes: initialize the options with redist_options_init()")
    if ptr.order not in (0, 1):
        raise ValueError(f"options->order must be REDIST_ORDER_C (0) or REDIST_ORDER_F (1), got {ptr.order}")
    if not 0 <= ptr.transport < len(_TRANSPORTS):
        raise ValueError(f"options->transport must be a redist_transport_t (0..2), got {ptr.transport}")
    if not 0 <= ptr.host_method < len(_HOST_METHODS):
        raise ValueError(f"options->host_method must be a redist_host_method_t (0..5), got {ptr.host_method}")
    if ptr.blocking not in (0, 1):
        raise ValueError(f"options->blocking must be 0 or 1, got {ptr.blocking}")
    if not 0 <= ptr.signal < len(_SIGNALS):
        raise ValueError(f"options->signal must be a redist_signal_t (0..1), got {ptr.signal}")
    layout: str | tuple[int, ...] = "CF"[ptr.order]
    if has(ffi, ptr, "result_ndim") and ptr.result_ndim != 0:
        n = int(ptr.result_ndim)
        if not 0 < n <= 16:
            raise ValueError(f"options->result_ndim must be 0 or 1..REDIST_MAX_NDIM (16), got {n}"
                             + (" (redist_options_result_order_f sets -1 for an empty or over-long axis list)"
                                if n == -1 else ""))
        layout = tuple(int(ptr.result_order[i]) for i in range(n))
        if sorted(layout) != list(range(n)):
            raise ValueError(f"options->result_order {list(layout)} is not a permutation of the axes 0..{n - 1}")
    overlap = int(ptr.allow_overlap) if has(ffi, ptr, "allow_overlap") else 0
    if overlap not in (0, 1):
        raise ValueError(f"options->allow_overlap must be 0 or 1, got {overlap}")
    tune, budget = (int(ptr.tune), float(ptr.tune_budget)) if has(ffi, ptr, "tune") else (0, 0.0)  # never read past older structs
    if not 0 <= tune < len(_TUNES):
        raise ValueError(f"options->tune must be a redist_tune_t (0..2), got {tune}")
    if not (budget == 0 or budget > 0):  # NaN too
        raise ValueError(f"options->tune_budget must be 0 (the default) or seconds > 0, got {budget}")
    tune_out = int(ptr.tune_out) if has(ffi, ptr, "tune_out") else 0
    if tune_out not in (0, 1):
        raise ValueError(f"options->tune_out must be 0 or 1, got {tune_out}")
    return {"result_layout": layout, "allow_overlap": bool(overlap), "transport": _TRANSPORTS[ptr.transport],
            "host_method": _HOST_METHODS[ptr.host_method], "blocking": True if ptr.blocking else "auto",
            "signal": _SIGNALS[ptr.signal], "tune": _TUNES[tune], "tune_budget": budget or 10.0,
            "tune_out": bool(tune_out)}
