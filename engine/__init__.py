# SPDX-License-Identifier: Apache-2.0
"""redist.engine: pure geometry and the transfer plan, then one folder per backend.

Importing this package (or :mod:`.geometry`, :mod:`.plan`, :mod:`.validate`) touches no MPI,
CUDA or cffi; only the backends :mod:`.host` (MPI) and :mod:`.cuda` (NVSHMEM + CUDA graphs)
do, and only when imported.
"""

from . import errors, geometry
from .geometry import BoxT
from .plan import STAGING_ALIGN, Copy, Plan, Region, Transfer, make_plan, simplify
from .validate import RankSpec, check_specs, consensus_order, raise_first

__all__ = [
    "errors",
    "geometry",
    "BoxT",
    "STAGING_ALIGN",
    "Copy",
    "Plan",
    "Region",
    "Transfer",
    "make_plan",
    "simplify",
    "RankSpec",
    "check_specs",
    "consensus_order",
    "raise_first",
]
