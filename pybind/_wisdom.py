# SPDX-License-Identifier: Apache-2.0
"""Wisdom files: :func:`export_wisdom`, :func:`import_wisdom`, :func:`forget_wisdom`, ``REDIST_WISDOM``.

What ``RedistributeOptions(tune="measure" | "wisdom")`` measured is kept per process
(:mod:`redist.engine.wisdom`); these functions save it to a JSON file and load it back, as
FFTW's wisdom does. Every one is collective: rank 0 reads or writes the file, the others get
what rank 0 read, so every rank decides from the same wisdom. A file that cannot be read, is
corrupt, or holds entries of another redist version (stale) or another MPI library (foreign) is
a warning on the ``"redist"`` logger and its bad entries are ignored, never trusted. Writes are
atomic (a temporary file renamed over the target).

With the environment variable ``REDIST_WISDOM`` set to a path, :func:`redist.initialize` imports
that file (when it exists) and :func:`redist.finalize` exports to it.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from . import _runtime
from .engine import collective, wisdom
from .engine.errors import InvalidTypeError, InvalidValueError

__all__ = ["export_wisdom", "forget_wisdom", "import_wisdom"]

_log = logging.getLogger("redist")


def _path(path: Any) -> str:
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidTypeError(f"a wisdom path must be a str or os.PathLike, got {type(path).__name__}")
    if not os.fspath(path):
        raise InvalidValueError("a wisdom path must not be empty (NULL from C)")
    return os.fspath(path)


def _comm():
    return _runtime.context().engine


def import_wisdom(path: str | os.PathLike[str], /) -> int:
    """Collective: add the entries of the wisdom file ``path`` (read on rank 0) to every rank's
    wisdom; how many were added. A missing, unreadable or corrupt file, and stale or foreign entries,
    are logged as warnings and ignored (0 entries from a bad file); never an error on content."""
    ctx = _comm()
    comm = ctx.comm
    text, failure = None, None
    try:
        path = _path(path)
    except (InvalidTypeError, InvalidValueError) as e:
        failure = e
    env = wisdom.environment(ctx)  # collective the first time
    if failure is None and comm.Get_rank() == 0:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except (OSError, UnicodeDecodeError) as e:
            _log.warning("redist: wisdom file %s not read (%s); ignored", path, e)
    kept: list = []
    if text is not None:
        kept, dropped = wisdom.loads(text, env)
        for why in dropped:
            _log.warning("redist: wisdom file %s: %s; ignored", path, why)
    kept = collective.agree(comm, failure, kept)[0]  # rank 0's
    for k, entry in kept:
        wisdom.store(k, entry)
    return len(kept)


def export_wisdom(path: str | os.PathLike[str], /) -> int:
    """Collective: write this job's wisdom (rank 0's) to ``path`` atomically; how many entries.
    A path that cannot be written raises InvalidValueError on every rank."""
    comm = _comm().comm
    with collective.attempt(comm):  # a bad path anywhere: nothing is written
        path = _path(path)
    failure, n = None, 0
    if comm.Get_rank() == 0:
        try:
            n = len(wisdom.entries())
            wisdom.write_atomic(path, wisdom.dumps())
        except OSError as e:
            failure = InvalidValueError(f"cannot write the wisdom file {path}: {e}")
    return collective.agree(comm, failure, n)[0]


def forget_wisdom() -> None:
    """Collective: drop every rank's wisdom (what was measured or imported)."""
    comm = _comm().comm
    wisdom.forget()
    collective.agree(comm, None, None)


def _on_initialize() -> None:
    path = os.environ.get("REDIST_WISDOM", "").strip()
    if not path:
        return
    ctx = _runtime.get_context().engine
    exists = collective.agree(ctx.comm, None, os.path.exists(path) if ctx.comm.Get_rank() == 0 else None)[0]
    if exists:
        import_wisdom(path)


def _on_finalize() -> None:
    path = os.environ.get("REDIST_WISDOM", "").strip()
    if not path:
        return
    try:
        export_wisdom(path)
    except InvalidValueError as e:  # finalize goes on: the same on every rank
        _log.warning("redist: REDIST_WISDOM: %s", e)


_runtime.add_runtime_hooks(on_initialize=_on_initialize, on_finalize=_on_finalize)


def tune_options(options: Any, templates: list, all_strides: list, objects: tuple) -> dict[str, Any]:
    """The :class:`~redist.engine.backend.LowerOptions` fields of ``tune``: the mode, the budget,
    the key's signature beyond the plan (dtypes, every rank's operand strides per field, the options
    that change the exchange) and the operands to time the candidates with (none when released:
    host backends time with scratch operands)."""
    from ._operands import wrap

    if options.tune == "estimate":
        return {}

    fixed = ", ".join(f"{k}={getattr(options, k)!r}" for k in ("execution", "result_layout", "result",
                                                              "allow_overlap", "blocking", "signal", "tune_out"))
    signature = (f"dtypes={[t.dtype_name for t in templates]}; strides={[list(map(list, s)) for s in all_strides]}; "
                 f"{fixed}")
    return {"tune": options.tune, "tune_budget": options.tune_budget, "tune_out": options.tune_out,
            "signature": signature,
            "inputs": tuple(wrap(obj).buffer for obj in objects)}
