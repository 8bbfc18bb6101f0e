# SPDX-License-Identifier: Apache-2.0
"""``redist.distribution``: the namespace of nvmath-python's ``nvmath.distributed.distribution``.

Code written for nvmath-python 1.0 runs with ``nvmath.distributed`` replaced by ``redist`` in
its imports. The names are redist's own classes, with one difference that keeps ported code
correct: :class:`Redistribute`, :func:`redistribute` and :class:`RedistributeOptions` here
default to ``result="fresh"`` -- every ``execute()`` returns a new array that the caller owns
(on GPUs a symmetric allocation the caller frees with :func:`redist.free_symmetric_memory`),
as nvmath-python's do. ``redist.Redistribute`` returns one persistent result instead (faster;
see docs/nvmath.md, "Coming from nvmath-python").
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, TypeVar

from . import _redistribute
from ._blocks import BlockCyclic, BlockNonCyclic, ProcessGrid
from ._distributions import Box, Distribution, Slab
from ._options import RedistributeOptions as _PersistentOptions
from .engine.errors import BindDistributionError, ConvertDistributionError

__all__ = ["ProcessGrid", "Distribution", "Slab", "Box", "BlockCyclic", "BlockNonCyclic", "BindDistributionError",
           "ConvertDistributionError", "RedistributeOptions", "Redistribute", "redistribute"]


@dataclasses.dataclass
class RedistributeOptions(_PersistentOptions):
    """:class:`redist.RedistributeOptions` with nvmath-python's default ``result="fresh"``."""

    result: Literal["persistent", "fresh"] = "fresh"


class Redistribute(_redistribute.Redistribute[_redistribute.ArrayT]):
    """:class:`redist.Redistribute` with nvmath-python's results: each ``execute()`` returns a
    new array the caller owns (options default to ``result="fresh"``)."""

    _options_class = RedistributeOptions


ArrayT = TypeVar("ArrayT")


def redistribute(operand: ArrayT, /, input_distribution: Any, output_distribution: Any, *,
                 sync_symmetric_memory: bool = True, options: RedistributeOptions | dict[str, Any] | None = None,
                 stream: Any = None) -> ArrayT:
    """Collective: :func:`redist.redistribute` (the result belongs to the caller, as always)."""
    return _redistribute.redistribute(operand, input_distribution, output_distribution,
                                      sync_symmetric_memory=sync_symmetric_memory, options=options, stream=stream)
