# SPDX-License-Identifier: Apache-2.0
"""Wisdom: the routes ``tune`` measured, kept per process and saved to / loaded from JSON files.

An entry's *key* (:func:`key`) is the problem's signature (every rank's boxes, the element sizes
and dtypes, every rank's operand strides, the result order, the fields, the options that change
the exchange), the backend, the number of ranks and their node layout, the MPI library and its
version, the GPU model and redist's version; its value the chosen candidate and the table that
chose it. The table lives in this process (:func:`store`, :func:`lookup`, :func:`forget`); the API
(``redist.export_wisdom`` ...) reads and writes files on rank 0 and broadcasts what it read, so
every rank holds rank 0's wisdom.

Files (:func:`dumps`, :func:`loads`, :func:`write_atomic`) are JSON: ``{"format": "redist-wisdom",
"version": 1, "entries": [{"key": {...}, "choice": ..., "times": [[label, seconds, note], ...],
"spent": seconds, "fields": [[name, value], ...]}, ...]}``. :func:`loads` never raises on content: a corrupt file, an entry of
another redist version (stale) or of another MPI library (foreign) is dropped with a reason the
caller logs. :func:`write_atomic` writes a temporary file beside the target and renames it over
the target (``os.replace``): a job that dies while writing leaves the old file or the new one.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .plan import FusedPlan, Plan

if TYPE_CHECKING:
    from .backend import Context, LowerOptions

__all__ = ["Entry", "FORMAT", "VERSION", "dumps", "environment", "forget", "key", "loads", "lookup", "store",
           "write_atomic"]

FORMAT = "redist-wisdom"
VERSION = 1
#: the LowerOptions fields an entry may set, and their types (what a file may not go beyond)
FIELDS: dict[str, type] = {"host_method": str, "transport": str, "signal": str, "vector_bytes": int, "push_landing_max": int}

Times = tuple[tuple[str, "float | None", str], ...]


@dataclass(frozen=True)
class Entry:
    """A stored answer: the chosen candidate's label, the table that chose it, seconds measured, and
    the chosen candidate's :class:`~redist.engine.backend.LowerOptions` fields (what a hit lowers)."""

    choice: str
    times: Times
    spent: float
    fields: tuple[tuple[str, Any], ...] = ()


_table: dict[str, tuple[dict[str, Any], Entry]] = {}  # canonical key -> (key, entry)


def _canonical(k: dict[str, Any]) -> str:
    return json.dumps(k, sort_keys=True, separators=(",", ":"))


def store(k: dict[str, Any], entry: Entry) -> None:
    """Remember ``entry`` for key ``k`` (local; replaces an older answer)."""
    _table[_canonical(k)] = (k, entry)


def lookup(k: dict[str, Any]) -> Entry | None:
    """The answer stored for key ``k``, or None (local)."""
    hit = _table.get(_canonical(k))
    return None if hit is None else hit[1]


def forget() -> None:
    """Drop every stored answer (local)."""
    _table.clear()


def entries() -> list[tuple[dict[str, Any], Entry]]:
    return list(_table.values())


def _redist_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("redist")
    except metadata.PackageNotFoundError:
        return "unknown"


def _mpi_version() -> str:
    try:
        from mpi4py import MPI
    except ImportError:
        return "none"
    return " ".join(MPI.Get_library_version().split())[:200]


def environment(ctx: Context) -> dict[str, Any]:
    """Collective the first time per context (the node layout is gathered): what an entry of this
    job is measured on, less the problem: ranks, nodes (each rank's node index, nodes numbered in
    order of first rank), MPI library, redist version. Every rank gets the same."""
    env = ctx.tune_environment
    if env is None:
        hosts = ctx.comm.allgather(socket.gethostname())
        node = {h: n for n, h in enumerate(dict.fromkeys(hosts))}
        env = {"nranks": len(hosts), "nodes": [node[h] for h in hosts], "mpi": _mpi_version(),
               "redist": _redist_version()}
        env = ctx.comm.allgather(env)[0]  # rank 0's MPI string and version: the same everywhere
        ctx.tune_environment = env
    return env


def _gpu_model(ctx: Context, backend: str) -> str:
    if backend == "host" or ctx.cuda is None:
        return ""
    device = getattr(ctx.cuda, "device", None)
    name = getattr(device, "name", None)
    return str(name) if name else f"sm_{getattr(ctx.cuda, 'arch', '?')}"


def key(plan: Plan | FusedPlan, ctx: Context, options: LowerOptions) -> dict[str, Any]:
    """Collective the first time per context: the wisdom key of ``plan`` lowered with ``options``
    (``options.signature`` carries what the plan does not: dtypes, every rank's strides)."""
    first = plan.first if isinstance(plan, FusedPlan) else plan
    fields = plan.fields if isinstance(plan, FusedPlan) else (plan,)
    problem = {
        "in_boxes": [[list(lo), list(hi)] for lo, hi in first.in_boxes],
        "out_boxes": [[list(lo), list(hi)] for lo, hi in first.out_boxes],
        "itemsizes": [p.itemsize for p in fields],
        "out_order": first.out_order if isinstance(first.out_order, str) else list(first.out_order),
        "signature": options.signature,
        "fixed": {"host_method": options.host_method, "transport": options.transport},
    }
    return {"problem": problem, "backend": options.backend, "gpu": _gpu_model(ctx, options.backend),
            **environment(ctx)}


def dumps() -> str:
    """This process's wisdom as the text of a wisdom file."""
    rows = [{"key": k, "choice": e.choice, "times": [list(t) for t in e.times], "spent": e.spent,
             "fields": [list(f) for f in e.fields]} for k, e in entries()]
    return json.dumps({"format": FORMAT, "version": VERSION, "entries": rows}, indent=1, sort_keys=True) + "\n"


def _entry(row: Any) -> tuple[dict[str, Any], Entry]:
    k, choice, times, spent, fields = row["key"], row["choice"], row["times"], row["spent"], row["fields"]
    if not (isinstance(k, dict) and isinstance(choice, str) and isinstance(spent, (int, float))):
        raise TypeError("malformed entry")
    table = tuple((str(label), None if t is None else float(t), str(note)) for label, t, note in times)
    chosen = tuple((name, value) for name, value in fields)
    if not all(name in FIELDS and isinstance(value, FIELDS[name]) for name, value in chosen):
        raise TypeError("an unknown or mistyped field")
    return k, Entry(choice, table, float(spent), chosen)


def loads(text: str, here: dict[str, Any]) -> tuple[list[tuple[dict[str, Any], Entry]], list[str]]:
    """The entries of a wisdom file's ``text`` that may be trusted by a job whose
    :func:`environment` is ``here``, and why the others were dropped (a corrupt file: no entries,
    one reason). Never raises on content."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            return [], ["not a redist wisdom file"]
        if doc.get("version") != VERSION:
            return [], [f"wisdom format version {doc.get('version')!r}, this redist reads {VERSION}"]
        rows = doc["entries"]
        if not isinstance(rows, list):
            raise TypeError("entries is not a list")
    except (ValueError, KeyError, TypeError) as e:
        return [], [f"corrupt ({type(e).__name__}: {str(e)[:100]})"]
    kept, dropped = [], []
    for i, row in enumerate(rows):
        try:
            k, entry = _entry(row)
        except (KeyError, TypeError, ValueError) as e:
            dropped.append(f"entry {i}: corrupt ({type(e).__name__})")
            continue
        if k.get("redist") != here["redist"]:
            dropped.append(f"entry {i}: stale (redist {k.get('redist')!r}, this is {here['redist']!r})")
        elif k.get("mpi") != here["mpi"]:
            dropped.append(f"entry {i}: foreign (MPI {str(k.get('mpi'))[:60]!r}, this is {here['mpi'][:60]!r})")
        else:
            kept.append((k, entry))
    return kept, dropped


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same directory, flushed to disk,
    then renamed over ``path``: readers see the old file or the new one, never half of one."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
