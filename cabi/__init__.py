# SPDX-License-Identifier: Apache-2.0
"""redist's C ABI and Fortran module (cffi embedding).

``python -m redist.cabi build --out DIR`` writes ``DIR/libredist.so``, ``DIR/redist.h`` and
``DIR/redist.f90`` (plus ``redist.mod`` and ``libredist_f.a`` when gfortran is found);
``python -m redist.cabi flags`` prints the compile and link flags. :func:`build` and
:func:`flags` do the same from Python. See ``redist.h`` for the API.
"""

from __future__ import annotations

from typing import Any

__all__ = ["build", "default_dir", "flags"]


def __getattr__(name: str) -> Any:
    # cffi and the build machinery load only when asked for (the embedded library imports
    # redist.cabi._entry, which must stay light)
    if name in __all__:
        from . import _build

        return getattr(_build, name)
    raise AttributeError(f"module 'redist.cabi' has no attribute {name!r}")
