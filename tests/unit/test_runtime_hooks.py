# SPDX-License-Identifier: Apache-2.0
"""The runtime's hooks: what redist's own modules (plan caches, wisdom) run at initialize/finalize."""

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import redist
    from redist import _runtime

    seen = []

    def first_finalize():
        assert redist.is_initialized()  # the context is still up while finalize hooks run
        seen.append("finalize 1")

    _runtime.add_runtime_hooks(on_initialize=lambda: seen.append("initialize"), on_finalize=first_finalize)
    _runtime.add_runtime_hooks(on_finalize=lambda: seen.append("finalize 2"))
    _runtime.add_runtime_hooks(on_finalize=first_finalize)  # the same callable twice: no-op
    for _ in range(2):
        redist.initialize(device_id="cpu")
        redist.finalize()
        redist.finalize()  # not initialized: no hook runs
    assert seen == ["initialize", "finalize 1", "finalize 2"] * 2, seen
    print("OK")
    """
)


def test_hooks_run_in_order_once_per_cycle():
    # In a fresh process: this one must not start MPI.
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "OK", done.stdout + done.stderr
