# SPDX-License-Identifier: Apache-2.0
"""redist.engine.cuda: the NVSHMEM + CUDA-graph backend for GPU memory.

``runtime.start(comm, device_id)`` (collective) brings up the device and NVSHMEM;
``lower(plan, rt, *, transport="auto", logger=None)`` (collective) returns a
:class:`CudaExecutable` with ``result_ptr`` / ``bind_input`` / ``bind_output`` / ``execute`` /
``graph`` / ``release_workspace`` / ``free`` / ``describe``. ``build_launch_list`` and the
kernel compiler work without a GPU (CI). See DESIGN.md here and engine/DESIGN.md.
nvshmem4py is imported by ``runtime.start`` only.
"""

from . import kernels, runtime
from .lower import TRANSPORTS, CudaExecutable, LaunchList, build_launch_list, emulate_job, lower

__all__ = [
    "TRANSPORTS",
    "CudaExecutable",
    "LaunchList",
    "build_launch_list",
    "emulate_job",
    "kernels",
    "lower",
    "runtime",
]
