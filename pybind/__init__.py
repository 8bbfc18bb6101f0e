# SPDX-License-Identifier: Apache-2.0
"""redist: plan-once, execute-many redistribution of distributed N-D arrays.

Every process holds one box of a global N-D array; :class:`Redistribute` changes which box each
process holds (slab along X -> slab along Y, pencils, arbitrary boxes). Host arrays move over
MPI; GPU arrays move over NVSHMEM inside one CUDA graph per stream.

>>> import numpy as np, redist
>>> redist.initialize()                  # collective: MPI (and the GPU, if any)
>>> rank = redist.get_context().process_group.rank
>>> a = np.ones(redist.Slab.X.shape(rank, (64, 64, 64)))
>>> with redist.Redistribute(a, redist.Slab.X, redist.Slab.Y) as r:
...     r.plan()
...     b = r.execute()      # this rank's Slab.Y box
"""

from typing import Any

from ._blocks import BlockCyclic, BlockNonCyclic, ProcessGrid
from ._distributions import Box, Distribution, Slab
from ._operands import RawArray
from ._options import RedistributeOptions
from ._redistribute import Redistribute, redistribute
from ._runtime import DistributedContext, finalize, get_context, initialize, is_initialized
from ._wisdom import export_wisdom, forget_wisdom, import_wisdom
from .process_group import MPIProcessGroup, ProcessGroup, TorchProcessGroup
from . import distribution, process_group  # nvmath-python's namespaces
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

#: nvmath-python's name for the state error.
InvalidRedistributeState = InvalidStateError

__all__ = [
    "Redistribute",
    "redistribute",
    "RedistributeOptions",
    "Distribution",
    "Box",
    "Slab",
    "ProcessGrid",
    "BlockNonCyclic",
    "BlockCyclic",
    "distribution",
    "process_group",
    "RawArray",
    "initialize",
    "finalize",
    "get_context",
    "is_initialized",
    "DistributedContext",
    "export_wisdom",
    "import_wisdom",
    "forget_wisdom",
    "ProcessGroup",
    "MPIProcessGroup",
    "TorchProcessGroup",
    "allocate_symmetric_memory",
    "free_symmetric_memory",
    "RedistError",
    "InvalidValueError",
    "InvalidTypeError",
    "InvalidStateError",
    "InvalidRedistributeState",
    "NotInitializedError",
    "NotSupportedError",
    "CudaError",
    "CommunicationError",
    "InternalError",
    "BindDistributionError",
    "ConvertDistributionError",
]


def __getattr__(name: str) -> Any:
    # The symmetric-memory API imports CUDA packages: load it on first use only.
    if name in ("allocate_symmetric_memory", "free_symmetric_memory"):
        from . import _symmetric

        return getattr(_symmetric, name)
    raise AttributeError(f"module 'redist' has no attribute {name!r}")
