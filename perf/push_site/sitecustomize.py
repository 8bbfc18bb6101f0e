# SPDX-License-Identifier: Apache-2.0
"""Push's route knobs for benchmarks of compiled drivers (C, Fortran), which cannot set them.

    PYTHONPATH=perf/push_site REDIST_BENCH_PUSH="LANDING_MAX=0 DIRECT_READ=True" mpiexec ... ./bench_pencils ...

Every Python that starts with this folder on ``PYTHONPATH`` (the C ABI's embedded one too) sets
the ``redist.engine.host.push`` module variables named in ``REDIST_BENCH_PUSH`` (NAME=VALUE,
space-separated, VALUE a Python literal) before any object is planned. Not part of redist.
"""

import ast
import os

_knobs = os.environ.get("REDIST_BENCH_PUSH", "").split()
if _knobs:
    from redist.engine.host import push

    for _knob in _knobs:
        _name, _value = _knob.split("=", 1)
        if not hasattr(push, _name):
            raise SystemExit(f"REDIST_BENCH_PUSH: redist.engine.host.push has no {_name}")
        setattr(push, _name, ast.literal_eval(_value))
