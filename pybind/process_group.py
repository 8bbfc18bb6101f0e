# SPDX-License-Identifier: Apache-2.0
"""Process groups: who takes part, and the small collectives redist needs to set itself up.

The interface is nvmath-python 1.0's (``nvmath.distributed.process_group``): a
:class:`ProcessGroup` has ``rank``, ``nranks``, ``broadcast_buffer``, ``allreduce_buffer`` and
``allreduce_object``. They carry set-up data only; redistributions move over redist's own
duplicate of the MPI communicator behind the group (MPI on CPUs, NVSHMEM bootstrapped over it
on GPUs).

* :class:`MPIProcessGroup` wraps an mpi4py intra-communicator (``_mpi_comm``).
* :class:`TorchProcessGroup` wraps a ``torch.distributed`` group. redist still needs MPI
  underneath: it runs when the processes were started by ``mpiexec`` too (its ranks must equal
  ``MPI.COMM_WORLD``'s, which :func:`redist.initialize` checks).
* Subclass :class:`ProcessGroup` for anything else; the same rule applies.
"""

from __future__ import annotations

import enum
import functools
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np

from .engine.errors import InvalidTypeError, InvalidValueError, NotInitializedError

if TYPE_CHECKING:
    from mpi4py import MPI

__all__ = ["ReductionOp", "ProcessGroup", "MPIProcessGroup", "TorchProcessGroup"]

T = TypeVar("T")
Reducer = Callable[[T, T], T]


class ReductionOp(enum.IntEnum):
    """Element-wise reductions of :meth:`ProcessGroup.allreduce_buffer`."""

    SUM = 0
    MIN = 1
    MAX = 2




class ProcessGroup(ABC):
    """The processes taking part (abstract): rank, size and three set-up collectives."""

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's index in the group, ``0 <= rank < nranks``."""

    @property
    @abstractmethod
    def nranks(self) -> int:
        """Number of processes in the group."""

    @abstractmethod
    def broadcast_buffer(self, array: np.ndarray, *, root: int = 0) -> None:
        """Collective: overwrite ``array`` (in place) with root's."""

    @abstractmethod
    def allreduce_buffer(self, array: np.ndarray, *, op: ReductionOp) -> None:
        """Collective: reduce ``array`` element-wise across the group, in place."""

    @abstractmethod
    def allreduce_object(self, obj: T, *, op: Reducer[T]) -> T:
        """Collective: ``op`` folded over every rank's ``obj``; the same result on every rank."""

    # -- redist's helpers (built on the three collectives; subclasses may do better) -------------

    def allgather(self, obj: Any) -> list[Any]:
        """Collective: every rank's ``obj`` in rank order (small set-up data only)."""
        mine = {self.rank: obj}
        every = self.allreduce_object(mine, op=lambda a, b: {**a, **b})
        return [every[r] for r in range(self.nranks)]

    def bcast(self, obj: Any, root: int = 0) -> Any:
        """Collective: root's ``obj`` on every rank."""
        return self.allgather(obj if self.rank == root else None)[root]

    @property
    def mpi_comm(self) -> MPI.Intracomm | None:
        """The mpi4py communicator behind this group, or None (then redist uses ``MPI.COMM_WORLD``
        if it has the same processes in the same order)."""
        return None


class MPIProcessGroup(ProcessGroup):
    """A :class:`ProcessGroup` over an mpi4py intra-communicator."""

    def __init__(self, mpi_comm: MPI.Intracomm) -> None:
        from mpi4py import MPI

        if not isinstance(mpi_comm, MPI.Intracomm):
            raise InvalidTypeError(
                f"MPIProcessGroup needs an mpi4py intra-communicator, got {type(mpi_comm).__name__}")
        self._mpi_comm = mpi_comm

    @property
    def rank(self) -> int:
        return self._mpi_comm.Get_rank()

    @property
    def nranks(self) -> int:
        return self._mpi_comm.Get_size()

    @property
    def mpi_comm(self) -> MPI.Intracomm:
        return self._mpi_comm

    def broadcast_buffer(self, array: np.ndarray, *, root: int = 0) -> None:
        self._mpi_comm.Bcast(array, root=root)

    def allreduce_buffer(self, array: np.ndarray, *, op: ReductionOp) -> None:
        from mpi4py import MPI

        mpi_op = {ReductionOp.SUM: MPI.SUM, ReductionOp.MIN: MPI.MIN, ReductionOp.MAX: MPI.MAX}[ReductionOp(op)]
        self._mpi_comm.Allreduce(MPI.IN_PLACE, array, op=mpi_op)

    def allreduce_object(self, obj: T, *, op: Reducer[T]) -> T:
        # folded in rank order on every rank: deterministic, and the same everywhere
        return functools.reduce(op, self._mpi_comm.allgather(obj))

    def allgather(self, obj: Any) -> list[Any]:
        return self._mpi_comm.allgather(obj)

    def bcast(self, obj: Any, root: int = 0) -> Any:
        return self._mpi_comm.bcast(obj, root=root)

    def __repr__(self) -> str:
        return f"MPIProcessGroup(rank {self.rank} of {self.nranks})"


class TorchProcessGroup(ProcessGroup):
    """A :class:`ProcessGroup` over ``torch.distributed`` (already initialised).

    ``device_id``: where the torch collectives' buffers live: ``"cpu"`` (gloo) or a CUDA device
    ordinal (nccl). ``torch_process_group``: a group handle, None for the default group.
    """

    def __init__(self, *, device_id: int | Literal["cpu"], torch_process_group: Any = None,
                 logger: logging.Logger | None = None) -> None:
        import torch.distributed as dist

        if device_id != "cpu" and (isinstance(device_id, bool) or not isinstance(device_id, int) or device_id < 0):
            raise InvalidValueError(f"device_id must be int or 'cpu', got {device_id!r}")
        if not dist.is_available() or not dist.is_initialized():
            raise NotInitializedError("torch.distributed is not initialized (call torch.distributed.init_process_group)")
        backend = dist.get_backend(torch_process_group)
        if device_id == "cpu" and backend == "nccl":
            raise InvalidValueError(
                "This process group is using a GPU-only backend (nccl), but the provided device_id is 'cpu'")
        self._device_id = device_id
        self._group = torch_process_group
        self._logger = logger

    @property
    def device_id(self) -> int | Literal["cpu"]:
        return self._device_id

    @property
    def rank(self) -> int:
        import torch.distributed as dist

        return dist.get_rank(self._group)

    @property
    def nranks(self) -> int:
        import torch.distributed as dist

        return dist.get_world_size(self._group)

    def _device(self):
        import torch

        return torch.device("cpu") if self._device_id == "cpu" else torch.device("cuda", self._device_id)

    def broadcast_buffer(self, array: np.ndarray, *, root: int = 0) -> None:
        import torch
        import torch.distributed as dist

        t = torch.from_numpy(np.ascontiguousarray(array)).to(self._device())
        dist.broadcast(t, src=dist.get_global_rank(self._group, root) if self._group is not None else root,
                       group=self._group)
        array[...] = t.cpu().numpy().reshape(array.shape)

    def allreduce_buffer(self, array: np.ndarray, *, op: ReductionOp) -> None:
        import torch
        import torch.distributed as dist

        red = {ReductionOp.SUM: dist.ReduceOp.SUM, ReductionOp.MIN: dist.ReduceOp.MIN,
               ReductionOp.MAX: dist.ReduceOp.MAX}[ReductionOp(op)]
        t = torch.from_numpy(np.ascontiguousarray(array)).to(self._device())
        dist.all_reduce(t, op=red, group=self._group)
        array[...] = t.cpu().numpy().reshape(array.shape)

    def allreduce_object(self, obj: T, *, op: Reducer[T]) -> T:
        import torch.distributed as dist

        every: list = [None] * self.nranks
        dist.all_gather_object(every, obj, group=self._group)
        return functools.reduce(op, every)

    def __repr__(self) -> str:
        return f"TorchProcessGroup(rank {self.rank} of {self.nranks}, device {self._device_id!r})"
