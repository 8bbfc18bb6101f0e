# SPDX-License-Identifier: Apache-2.0
"""The XLA FFI handlers of :mod:`redist.jax` (``_jax_ffi.cc``), compiled at first use.

The handlers include ``xla/ffi/api/ffi.h`` from the installed jaxlib (``jax.ffi.include_dir()``),
which a build-isolation environment does not have, and whose ABI follows jaxlib: so the library
is compiled the first time ``redist.jax`` is imported with a given jaxlib and kept in a cache
(``$REDIST_JAX_CACHE``, else ``$XDG_CACHE_HOME/redist/jax`` or ``~/.cache/redist/jax``), one file
per (jaxlib version, source digest, Python ABI). A C++17 compiler is needed (``$CXX``, else
``c++``/``g++``); about 10 s. The ranks of a job share the cache: one compiles (a lock file), the
others wait and load it. The file is written under a temporary name and renamed, so a reader never
sees a partial library.
"""

from __future__ import annotations

import ctypes
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .engine.errors import NotSupportedError

__all__ = ["SOURCE", "cache_dir", "library_path", "load"]

SOURCE = Path(__file__).resolve().with_name("_jax_ffi.cc")


def cache_dir() -> Path:
    """Where compiled handlers are kept ($REDIST_JAX_CACHE, else the user's cache directory)."""
    env = os.environ.get("REDIST_JAX_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "redist" / "jax"


def _compiler() -> str:
    for cxx in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if cxx and shutil.which(cxx.split()[0]):
            return cxx
    raise NotSupportedError("redist.jax: no C++ compiler found to build its XLA FFI handlers (set CXX, or install "
                            "g++); they are compiled once per jaxlib version")


def library_path() -> Path:
    """The cached library for this jaxlib and this source (it may not exist yet)."""
    import jaxlib

    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    abi = f"{sys.implementation.cache_tag}-{sys.platform}"
    return cache_dir() / f"redist_jax_ffi-jaxlib{jaxlib.__version__}-{abi}-{digest}.so"


def _compile(target: Path) -> None:
    import jax.ffi

    cmd = [*_compiler().split(), "-std=c++17", "-O2", "-fPIC", "-shared", "-I", str(jax.ffi.include_dir()),
           str(SOURCE)]
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        proc = subprocess.run([*cmd, "-o", tmp], capture_output=True, text=True)
        if proc.returncode != 0:
            raise NotSupportedError(f"redist.jax: compiling its XLA FFI handlers failed ({' '.join(cmd)}):\n"
                                    f"{proc.stderr[-3000:]}")
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def load() -> ctypes.CDLL:
    """The handlers' library, compiled first where the cache has none for this jaxlib (local)."""
    target = library_path()
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target.parent / (target.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one process of the job compiles, the others wait for it
            try:
                if not target.exists():
                    _compile(target)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    return ctypes.CDLL(str(target))
