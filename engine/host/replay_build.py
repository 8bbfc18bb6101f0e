# SPDX-License-Identifier: Apache-2.0
"""The cffi definition of ``redist.engine.host._replay_ext`` (engine/host/replay_ext.c, which
includes cabi/redist_replay.c): Python's calls replayed in C. setup.py builds it as an optional
extension (a machine without a C compiler installs redist without it, and every call runs in
Python); it reads numpy arrays through numpy's C headers, so numpy is a build requirement. Paths are relative to the project root, where the build runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

import cffi
import numpy

if TYPE_CHECKING:
    from setuptools import Extension

MODULE = "redist.engine.host._replay_ext"

CDEF = r"""
int _redist_set_replay(intptr_t, int32_t, int32_t, const uintptr_t *, const uintptr_t *, const int64_t *, int64_t);
void _redist_drop_replay(intptr_t);
int redist_replay_execute(intptr_t, int32_t, const uintptr_t *, const uintptr_t *, int32_t *, int32_t);
int redist_replay_execute1(intptr_t, uintptr_t, uintptr_t, int32_t *, int32_t);
int redist_replay_execute_out(intptr_t, uintptr_t, uintptr_t, int32_t *, int32_t);
int redist_out_record(intptr_t, uintptr_t, uintptr_t, const uintptr_t *, int32_t);
void redist_out_forget(intptr_t);
void redist_out_drop(intptr_t, uintptr_t);
int redist_out_count(intptr_t);
uintptr_t redist_array_data(uintptr_t);
const char *redist_replay_error(void);
int redist_replay_count(intptr_t);
void redist_replay_drop_all(void);
"""


def ffi() -> cffi.FFI:
    """The FFI of the extension, its source set (``#include "replay_ext.c"``)."""
    builder = cffi.FFI()
    builder.cdef(CDEF)
    # py_limited_api=False: the module reads numpy's array struct (not in the limited API), and numpy's
    # headers need declarations that cffi's default Py_LIMITED_API hides (numpy 2.5: PyExc_ModuleNotFoundError)
    builder.set_source(MODULE, '#include "replay_ext.c"', py_limited_api=False,
                       include_dirs=["engine/host", "cabi", numpy.get_include()],
                       depends=["engine/host/replay_ext.c", "cabi/redist_replay.c", "cabi/redist_replay_table.c",
                                "cabi/redist_replay_words.c", "cabi/redist.h"],
                       extra_compile_args=["-O2", "-pthread", "-Wno-unused-function"], extra_link_args=["-pthread"])
    return builder


def extension(tmpdir: str = "build/cffi") -> Extension:
    """The setuptools Extension of the module (its C source generated into ``tmpdir``), optional:
    a failed compile leaves redist without it."""
    ext = ffi().distutils_extension(tmpdir=tmpdir, verbose=False)
    ext.optional = True
    return ext
