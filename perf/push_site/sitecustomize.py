# SPDX-License-Identifier: Apache-2.0
"""Push's route knobs for benchmarks of compiled drivers (C, Fortran), which cannot set them.

    PYTHONPATH=perf/push_site REDIST_BENCH_PUSH="LANDING_MAX=0 DIRECT_READ=True" mpiexec ... ./bench_pencils ...

Every Python that starts with this folder on ``PYTHONPATH`` (the C ABI's embedded one too) sets
the ``redist.engine.host.push.tuning`` module variables named in ``REDIST_BENCH_PUSH`` (NAME=VALUE,
space-separated, VALUE a Python literal) before any object is planned. Not part of redist.
"""

import ast
import os

_knobs = os.environ.get("REDIST_BENCH_PUSH", "").split()
if _knobs:
    from redist.engine.host.push import tuning as push

    _settings = {}
    for _knob in _knobs:  # every entry checked before any is set; any error ends the interpreter
        _name, _sep, _value = _knob.partition("=")
        if not _sep or not hasattr(push, _name):
            raise SystemExit(f"REDIST_BENCH_PUSH: {_knob!r} is not NAME=VALUE for a variable of redist.engine.host.push.tuning")
        try:
            _settings[_name] = ast.literal_eval(_value)
        except (ValueError, SyntaxError):
            raise SystemExit(f"REDIST_BENCH_PUSH: {_knob!r}: the value is not a Python literal") from None
    for _name, _value in _settings.items():
        setattr(push, _name, _value)
