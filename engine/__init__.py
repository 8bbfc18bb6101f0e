# SPDX-License-Identifier: Apache-2.0
"""redist.engine: pure geometry and the transfer plan, the backend boundary, then one folder per backend.

Importing this package (or :mod:`.geometry`, :mod:`.plan`, :mod:`.validate`, :mod:`.backend`,
:mod:`.collective`) touches no MPI, CUDA or cffi; only the backends :mod:`.host` (MPI) and
:mod:`.cuda` (NVSHMEM + CUDA graphs) do, and only when imported. engine/DESIGN.md has the map.
"""

from . import backend, collective, errors, geometry
from .backend import Context, Executable, LowerOptions, lower, select_backend
from .buffer import Buffer
from .geometry import BoxT
from .plan import STAGING_ALIGN, Copy, Plan, Region, Transfer, make_plan, simplify
from .validate import RankSpec, check_specs, consensus_order, raise_first

__all__ = [
    "backend",
    "collective",
    "errors",
    "geometry",
    "Buffer",
    "BoxT",
    "Context",
    "Executable",
    "LowerOptions",
    "STAGING_ALIGN",
    "Copy",
    "Plan",
    "Region",
    "Transfer",
    "lower",
    "make_plan",
    "select_backend",
    "simplify",
    "RankSpec",
    "check_specs",
    "consensus_order",
    "raise_first",
]
