# SPDX-License-Identifier: Apache-2.0
"""redist.engine.host: the MPI (mpi4py) backend for host memory.

``lower(plan, comm, *, logger=None, method="auto")`` -> :class:`HostExecutable` with
``bind_input`` / ``bind_output`` / ``execute`` / ``release_workspace`` / ``free`` / ``describe``
and ``method`` (plus ``release_input`` to drop the operand). See :mod:`.executable` for the
strategies and engine/DESIGN.md for the contract.
mpi4py is imported on first use (lowering), not at import.
"""

from .executable import AUTO_METHOD, METHODS, HostExecutable, available_methods, lower

__all__ = ["AUTO_METHOD", "METHODS", "HostExecutable", "available_methods", "lower"]
