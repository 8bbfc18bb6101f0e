# SPDX-License-Identifier: Apache-2.0
"""redist.engine.host: the MPI (mpi4py) backend for host memory.

``lower(plan, ctx, options)`` (collective, see :mod:`redist.engine.backend`) ->
:class:`HostExecutable`, implementing the engine's Executable protocol. See :mod:`.executable`
for the strategies (``options.host_method``) and engine/DESIGN.md for the contract. mpi4py is
imported on first use (lowering), not at import.
"""

from .executable import AUTO_METHOD, METHODS, HostExecutable
from .lowering import available_methods, candidates, lower

__all__ = ["AUTO_METHOD", "METHODS", "HostExecutable", "available_methods", "candidates", "lower"]
