# SPDX-License-Identifier: Apache-2.0
"""Build libredist.so (cffi embedding), and install redist.h and the Fortran module next to it.

The library is CPython embedded behind a C shim (``redist_shim.c``): the exported functions
are plain C that make sure the interpreter is up (else ``REDIST_ERROR_PYTHON_INIT``) and then
call ``extern "Python"`` functions implemented in ``_entry.py``. The interpreter is the one
that ran the build: its path is compiled in, and start-up uses it whatever the caller's PATH
(``REDIST_PYTHON`` overrides it; PYTHONHOME/PYTHONPATH are honoured as usual).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

__all__ = ["HERE", "build", "default_dir", "find_fortran_compiler", "flags", "fortran_built"]

HERE = Path(__file__).resolve().parent
MODULE = "_redist_cabi"  # the name cffi gives the embedded extension module

# What the C shim calls (extern "Python", bodies in _entry.py) and what Python calls in C.
_CDEF = r"""
extern "Python" int32_t _redist_py_initialize(int32_t, int32_t);
extern "Python" int32_t _redist_py_finalize(void);
extern "Python" int32_t _redist_py_comm_rank(int32_t *, int32_t *);
extern "Python" int32_t _redist_py_allocate_symmetric_memory(uintptr_t *, int64_t);
extern "Python" int32_t _redist_py_free_symmetric_memory(uintptr_t);
extern "Python" int32_t _redist_py_export_wisdom(const char *, int32_t *);
extern "Python" int32_t _redist_py_import_wisdom(const char *, int32_t *);
extern "Python" int32_t _redist_py_forget_wisdom(void);
typedef struct redist_options_s {
    size_t struct_size;
    int32_t version;
    int32_t order;
    int32_t transport;
    int32_t host_method;
    int32_t blocking;
    int32_t signal;
    int32_t result_ndim;
    int32_t result_order[16];
    int32_t allow_overlap;
    const int64_t *global_shape;
    int32_t tune;
    int32_t tune_out;
    double tune_budget;
} redist_options_t;
extern "Python" int32_t _redist_py_create(intptr_t *, int32_t, int32_t, const int64_t *, const int64_t *,
                                          const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                                          int32_t, int32_t, const uintptr_t *, const redist_options_t *);
extern "Python" int32_t _redist_py_create_fields(intptr_t *, int32_t, int32_t, const int64_t *, const int64_t *,
                                                 const int64_t *, const int64_t *, const int64_t *, const int64_t *,
                                                 int32_t, int32_t, const uintptr_t *, const redist_options_t *);
extern "Python" int32_t _redist_py_plan(intptr_t, uintptr_t);
extern "Python" int32_t _redist_py_execute(intptr_t, uintptr_t, uintptr_t, const int64_t *, uintptr_t *);
extern "Python" int32_t _redist_py_execute_fields(intptr_t, uintptr_t, const uintptr_t *, const int64_t *,
                                                  uintptr_t *);
extern "Python" int32_t _redist_py_reset_operand(intptr_t, uintptr_t);
extern "Python" int32_t _redist_py_reset_operand_unchecked(intptr_t, uintptr_t);
extern "Python" int32_t _redist_py_reset_operands(intptr_t, const uintptr_t *);
extern "Python" int32_t _redist_py_reset_operands_unchecked(intptr_t, const uintptr_t *);
extern "Python" int32_t _redist_py_reset_operand_field(intptr_t, int32_t, uintptr_t);
extern "Python" int32_t _redist_py_reset_operand_field_unchecked(intptr_t, int32_t, uintptr_t);
extern "Python" int32_t _redist_py_get_nfields(intptr_t, int32_t *);
extern "Python" int32_t _redist_py_release_operand(intptr_t);
extern "Python" int32_t _redist_py_free(intptr_t);
extern "Python" int32_t _redist_py_graph(intptr_t, uintptr_t, uintptr_t *);
extern "Python" int32_t _redist_py_update_graph_exec(intptr_t, uintptr_t, uintptr_t, int32_t *);
extern "Python" int32_t _redist_py_release_captured(intptr_t);
extern "Python" int32_t _redist_py_resume(intptr_t, int32_t, const int32_t *, int32_t, const uintptr_t *,
                                          const uintptr_t *, const uintptr_t *);
int _redist_set_replay(intptr_t, int32_t, int32_t, const uintptr_t *, const uintptr_t *, const int64_t *, int64_t);
void _redist_drop_replay(intptr_t);
void _redist_set_last_error(const char *);
void _redist_set_init_error(const char *);
int _redist_started_python(void);
"""

# Runs once, in the embedded interpreter, at the first call (cffi's embedding_init_code).
_INIT_CODE = r"""
from _redist_cabi import ffi, lib
try:
    from redist.cabi import _entry
    _entry.install(ffi, lib)
except BaseException as exc:
    import sys, traceback
    msg = "redist start-up failed in the embedded Python (%s): %s" % (
        sys.executable, "".join(traceback.format_exception_only(type(exc), exc)).strip())
    lib._redist_set_init_error(msg.encode("utf-8", "replace")[:4095])
    raise
"""


def default_dir() -> Path:
    """Where ``build`` and ``flags`` work without ``--out``: $REDIST_CABI_DIR or <sys.prefix>/lib/redist-cabi."""
    env = os.environ.get("REDIST_CABI_DIR")
    return Path(env) if env else Path(sys.prefix) / "lib" / "redist-cabi"


def _c_string(s: str) -> str:
    out = []
    for b in s.encode("utf-8"):
        c = chr(b)
        if c in '\\"':
            out.append("\\" + c)
        elif 32 <= b < 127 and c != "?":  # '?' avoids trigraphs
            out.append(c)
        else:
            out.append(f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def find_fortran_compiler(fc: str | None = None) -> str | None:
    """``fc`` if given, else $FC, else gfortran on PATH (None if there is none)."""
    if fc:
        return fc
    return os.environ.get("FC") or shutil.which("gfortran")


def _build_pythonpath() -> str:
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join(os.path.abspath(p) for p in parts)


def _executable() -> str:
    exe = sys.executable
    if not exe or not os.access(exe, os.X_OK):
        raise RuntimeError(f"cannot tell which Python runs this build (sys.executable={exe!r})")
    return os.path.abspath(exe)  # absolute, but symlinks kept: a venv's bin/python locates the venv


def build(out_dir: str | os.PathLike | None = None, *, fortran: bool | str = True, verbose: bool = False) -> dict:
    """Build ``libredist.so`` into ``out_dir`` and copy ``redist.h`` and ``redist.f90`` there.

    ``fortran``: True compiles the Fortran module (``redist.mod`` + ``libredist_f.a``) with
    gfortran (or $FC) when one is found; a string names the compiler; False skips it.
    Returns the paths written (keys "lib", "header", "fortran_source", and "fortran_mod",
    "fortran_lib" when the module was compiled).
    """
    import cffi
    import redist

    out = Path(out_dir if out_dir is not None else default_dir()).resolve()
    out.mkdir(parents=True, exist_ok=True)
    shim = (HERE / "redist_shim.c").read_text()
    preamble = "\n".join([
        f"#define REDIST_BAKED_EXECUTABLE {_c_string(_executable())}",
        f"#define REDIST_BAKED_VERSION {_c_string(redist.__version__)}",
        f"#define REDIST_BAKED_PYVERSION {_c_string('{}.{}'.format(*sys.version_info[:2]))}",
        # An environment that reaches redist through PYTHONPATH (e.g. pip install --target DIR)
        # is part of "the environment it was built in": used when the caller sets no PYTHONPATH.
        f"#define REDIST_BAKED_PYTHONPATH {_c_string(_build_pythonpath())}",
        '#line 1 "redist_shim.c"',
        shim,
    ])
    if not sysconfig.get_config_var("Py_ENABLE_SHARED") and sys.platform.startswith("linux"):
        raise RuntimeError(
            f"{sys.executable} has no shared libpython (Py_ENABLE_SHARED=0), which libredist.so embeds: "
            "use a Python built with --enable-shared (pyenv: PYTHON_CONFIGURE_OPTS=--enable-shared; "
            "Debian/Ubuntu: install python3-dev)"
        )
    link = ["-pthread", "-Wl,-soname,libredist.so"]
    libdir = sysconfig.get_config_var("LIBDIR")
    if libdir:
        link.append(f"-Wl,-rpath,{libdir}")  # libpythonX.Y.so, wherever the caller runs from
    ffi = cffi.FFI()
    ffi.cdef(_CDEF)
    ffi.embedding_init_code(_INIT_CODE)
    ffi.set_source(MODULE, preamble, include_dirs=[str(HERE)],
                   extra_compile_args=["-O2", "-fvisibility=hidden", "-pthread"], extra_link_args=link)
    written = {}
    with tempfile.TemporaryDirectory(prefix="redist-cabi-") as tmp:
        so = ffi.compile(tmpdir=tmp, target="libredist.so", verbose=verbose)
        staged = out / ".libredist.so.tmp"
        shutil.copyfile(so, staged)
        os.chmod(staged, 0o755)
        os.replace(staged, out / "libredist.so")  # atomic: running programs keep the old file
        written["lib"] = str(out / "libredist.so")
        for name, key in (("redist.h", "header"), ("redist.f90", "fortran_source")):
            shutil.copyfile(HERE / name, out / name)
            written[key] = str(out / name)
        fc = find_fortran_compiler(fortran if isinstance(fortran, str) else None) if fortran else None
        if fc:
            obj = Path(tmp) / "redist_f.o"
            cmd = [fc, "-c", "-O2", "-fPIC", f"-J{out}", str(out / "redist.f90"), "-o", str(obj)]
            res = subprocess.run(cmd, check=False, capture_output=True, text=True)
            if res.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} failed:\n{res.stdout}{res.stderr}")
            if (out / "libredist_f.a").exists():
                (out / "libredist_f.a").unlink()
            subprocess.run(["ar", "rcs", str(out / "libredist_f.a"), str(obj)], check=True)
            written["fortran_mod"] = str(out / "redist.mod")
            written["fortran_lib"] = str(out / "libredist_f.a")
    return written


def flags(out_dir: str | os.PathLike | None = None) -> dict[str, str]:
    """Compile and link flags for C and Fortran programs using the library in ``out_dir``.

    Raises FileNotFoundError when ``out_dir`` holds no built library (``libredist.so`` and
    ``redist.h``): flags for it would only fail later, at link time. The Fortran flags also need
    ``redist.mod`` and ``libredist_f.a`` there (:func:`fortran_built`).
    """
    d = str(Path(out_dir if out_dir is not None else default_dir()).resolve())
    missing = [name for name in ("libredist.so", "redist.h") if not os.path.isfile(os.path.join(d, name))]
    if missing:
        raise FileNotFoundError(
            f"no redist C ABI built in {d} ({' and '.join(missing)} missing): run "
            f"python -m redist.cabi build --out {d}")
    libs = f"-L{d} -lredist -Wl,-rpath,{d}"
    return {
        "cflags": f"-I{d}",
        "libs": libs,
        "fflags": f"-I{d}",
        "flibs": f"-L{d} -lredist_f -lredist -Wl,-rpath,{d}",
        "dir": d,
    }


def fortran_built(out_dir: str | os.PathLike) -> bool:
    """Whether ``out_dir`` holds the compiled Fortran module (``redist.mod`` and ``libredist_f.a``)."""
    return all(os.path.isfile(os.path.join(out_dir, name)) for name in ("redist.mod", "libredist_f.a"))
