# SPDX-License-Identifier: Apache-2.0
"""redist._jax_build: the XLA FFI handlers compiled at first use, cached per jaxlib and source."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = [
    pytest.mark.slow,  # a compile of the handlers: about 5 s of CPU
    pytest.mark.skipif(
        importlib.util.find_spec("jax") is None, reason="jax is not installed (the [jax] extra)"
    ),
    pytest.mark.skipif(not any(shutil.which(c) for c in ("c++", "g++", "clang++")), reason="no C++ compiler"),
]


def test_compiled_once_then_loaded_from_the_cache(tmp_path, monkeypatch):
    """Two processes compiling into an empty cache at once: one library, named by the jaxlib version,
    with the handlers' symbols; a later load compiles nothing (the file stays as it was)."""
    env = dict(os.environ, REDIST_JAX_CACHE=str(tmp_path))
    code = "from redist import _jax_build as b; lib = b.load(); lib.RedistJaxCpu; lib.RedistJaxCuda; print(b.library_path())"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    import jaxlib

    libs = sorted(tmp_path.glob("*.so"))
    assert len(libs) == 1 and f"jaxlib{jaxlib.__version__}" in libs[0].name, libs
    assert {o.strip() for o, _ in outs} == {str(libs[0])}
    assert not list(tmp_path.glob("*.tmp")), "a temporary file was left behind"
    stamp = libs[0].stat().st_mtime_ns
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert libs[0].stat().st_mtime_ns == stamp


def test_a_failed_compile_says_why(tmp_path, monkeypatch):
    from redist import _jax_build
    from redist.engine.errors import NotSupportedError

    monkeypatch.setenv("REDIST_JAX_CACHE", str(tmp_path))
    monkeypatch.setenv("CXX", "c++ -DREDIST_JAX_BROKEN=1 -include /nonexistent/header.h")
    with pytest.raises(NotSupportedError, match="compiling its XLA FFI handlers failed"):
        _jax_build.load()
    assert not list(tmp_path.glob("*.so")) and not list(tmp_path.glob("*.tmp"))
