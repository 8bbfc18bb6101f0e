# SPDX-License-Identifier: Apache-2.0
"""redist.engine.cuda: the NVSHMEM + CUDA-graph backend for GPU memory.

``runtime.start(comm, device_id)`` (collective) brings up the device and NVSHMEM;
``lower(plan, ctx, options)`` (collective, see :mod:`redist.engine.backend`) returns a
:class:`CudaExecutable`. :mod:`.launch_list` (pure), :mod:`.emulator` and the kernel compiler
work without a GPU (CI). :mod:`.mirror` runs host operands through a device mirror. See
DESIGN.md here and engine/DESIGN.md. nvshmem4py is imported by ``runtime.start`` only.
"""

from . import kernels, runtime
from .emulator import emulate_job
from .executable import CudaExecutable
from .launch_list import TRANSPORTS, LaunchList, build_launch_list
from .lowering import candidates, lower

__all__ = [
    "TRANSPORTS",
    "CudaExecutable",
    "LaunchList",
    "build_launch_list",
    "candidates",
    "emulate_job",
    "kernels",
    "lower",
    "runtime",
]
