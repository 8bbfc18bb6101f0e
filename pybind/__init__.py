# SPDX-License-Identifier: Apache-2.0
"""redist: plan-once, execute-many redistribution of distributed N-D arrays."""

from ._distributions import BlockNonCyclic, Box, Distribution, ProcessGrid, Slab
from .engine.errors import (
    BindDistributionError,
    CommunicationError,
    ConvertDistributionError,
    CudaError,
    InternalError,
    InvalidStateError,
    InvalidTypeError,
    InvalidValueError,
    NotInitializedError,
    NotSupportedError,
    RedistError,
)

__version__ = "0.1.0"

__all__ = [
    "Distribution",
    "Box",
    "Slab",
    "ProcessGrid",
    "BlockNonCyclic",
    "RedistError",
    "InvalidValueError",
    "InvalidTypeError",
    "InvalidStateError",
    "NotInitializedError",
    "NotSupportedError",
    "CudaError",
    "CommunicationError",
    "InternalError",
    "BindDistributionError",
    "ConvertDistributionError",
]
