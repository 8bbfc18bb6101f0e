# SPDX-License-Identifier: Apache-2.0
"""User arrays on the NVSHMEM symmetric heap: collective allocation and free, with their checks.

The API layer (``redist.allocate_symmetric_memory`` / ``free_symmetric_memory``) wraps the
addresses into cupy arrays or torch tensors; everything that looks at the heap is here.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .. import collective
from ..errors import InvalidValueError

if TYPE_CHECKING:
    from .runtime import Runtime

__all__ = ["allocate", "free"]


def allocate(rt: Runtime, nbytes: int, *, make_symmetric: bool = False, skip_symmetric_check: bool = False,
             failure: BaseException | None = None, logger: logging.Logger | None = None, what: str = "") -> int:
    """Collective: the address of a new user allocation of ``nbytes`` on every rank.

    ``failure``: this rank's problem met before (bad shape or dtype), raised on every rank.
    Sizes must be equal on every rank unless ``make_symmetric`` (every rank then allocates the
    largest); ``skip_symmetric_check`` trusts the caller (no size agreement).
    """
    if skip_symmetric_check:
        if failure is not None:
            raise failure
        alloc = nbytes
    else:
        sizes = collective.agree(rt.comm, failure, int(nbytes))
        if len(set(sizes)) > 1 and not make_symmetric:
            raise InvalidValueError(
                f"symmetric allocations must have the same size on every process, got {sizes} bytes; pass "
                "make_symmetric=True to pad every process to the largest"
            )
        alloc = max(sizes)
    ptr = rt.sym_alloc(alloc, owner="user")
    if logger is not None:
        logger.debug("allocate_symmetric_memory: %s at heap offset %d (%d bytes)", what, rt.heap_offset(ptr), alloc)
    return ptr


def _free_problem(rt: Runtime, ptrs: list[int]) -> None:
    seen = set()
    for ptr in ptrs:
        ent = rt.sym_lookup(ptr)
        if ent is None:
            if rt.was_freed(ptr):
                raise InvalidValueError(
                    f"double free: the symmetric array at 0x{ptr:x} was already freed by free_symmetric_memory"
                )
            raise InvalidValueError(
                f"the array at 0x{ptr:x} is not on the symmetric heap (it was not allocated by "
                "redist.allocate_symmetric_memory)"
            )
        base, _, owner = ent
        if base != ptr:
            raise InvalidValueError("pass the array returned by allocate_symmetric_memory, not a view into it")
        if owner == "engine":
            raise InvalidValueError(
                "this array is the persistent result of a live Redistribute object; Redistribute.free() frees it"
            )
        if owner != "user":
            raise InvalidValueError("this symmetric allocation belongs to the redist runtime")
        if ptr in seen:
            raise InvalidValueError("the same array is passed twice")
        seen.add(ptr)


def free(rt: Runtime, ptrs: list[int], *, failure: BaseException | None = None) -> None:
    """Collective: free user allocations (same order on every rank), after the GPU is idle."""
    if failure is None:
        try:
            _free_problem(rt, ptrs)
        except InvalidValueError as e:
            failure = e
    collective.agree(rt.comm, failure)
    rt.synchronize()
    for p in ptrs:
        rt.sym_free(p)
