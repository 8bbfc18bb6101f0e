# SPDX-License-Identifier: Apache-2.0
"""Benchmark: what the C ABI adds per call, against the same calls made from Python.

    python perf/bench_cabi.py [--iters 100000] [--trials 5] [--edge 4] [--lib DIR] [--csv FILE]

One process (no mpiexec), a tiny host problem: a ``EDGE x EDGE`` float64 array whose input and
output boxes are the same (a local copy), so the time is the call path, not data movement.

* C path: ``perf/bench_execute.c`` linked to libredist.so (built into a temporary
  directory unless ``--lib`` names one), calling ``redist_execute`` etc. in a loop;
* Python path: a fresh interpreter calling ``Redistribute.execute`` etc. on the same problem
  (a :class:`redist.RawArray` operand, as the C ABI uses).

Each row is the best of ``--trials`` loops of ``--iters`` calls, in microseconds per call;
``added`` = C - Python is the cost of crossing the ABI (target: <= 1 us). ``bridge_comm_rank``
(C) vs ``get_context`` (Python) is the floor: a call that does next to nothing.
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

PY_SIDE = r"""
import sys, time
import numpy as np
import redist
from redist._operands import RawArray

iters, trials, edge = map(int, sys.argv[1:4])
device = sys.argv[4] == "device"
if device:
    import cupy as cp
    redist.initialize()
    dev = redist.get_context().device_id
    a, b = (cp.zeros((edge, edge)) for _ in range(2))
    raw = lambda x: RawArray(x.data.ptr, x.shape, None, 8, memory="cuda", device_id=dev, order="C")
    drain = cp.cuda.Device(dev).synchronize
    ra, rb = raw(a), raw(b)
else:
    redist.initialize(device_id="cpu")
    a, b, out = (np.zeros((edge, edge)) for _ in range(3))
    raw = lambda x: RawArray(x.ctypes.data, x.shape, None, 8, memory="cpu", order="C")
    drain = lambda: None
    ra, rb, rout = raw(a), raw(b), raw(out)
r = redist.Redistribute(ra, ((0, 0), (edge, edge)), ((0, 0), (edge, edge)))
r.plan()
for _ in range(iters // 10):
    r.execute()
drain()

def best(fn):
    t = 1e30
    for _ in range(trials):
        t0 = time.perf_counter()
        fn()
        t = min(t, (time.perf_counter() - t0) / iters)
        drain()
    return t * 1e6

def loop_execute():
    for _ in range(iters):
        r.execute()

def loop_execute_out():
    for _ in range(iters):
        r.execute(out=rout)

def loop_reset():
    ops = (ra, rb)
    for i in range(iters):
        r.reset_operand_unchecked(ops[i & 1])

def loop_context():
    for _ in range(iters):
        redist.get_context().process_group

print("execute %.4f" % best(loop_execute))
if not device:
    print("execute_out %.4f" % best(loop_execute_out))
print("reset_operand_unchecked %.4f" % best(loop_reset))
print("bridge_comm_rank %.4f" % best(loop_context))
r.free()
redist.finalize()
"""


def parse(out: str) -> dict[str, float]:
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2:
            try:
                rows[parts[0]] = float(parts[1])
            except ValueError:
                pass
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=100_000)
    p.add_argument("--trials", type=int, default=5)
    p.add_argument("--edge", type=int, default=4)
    p.add_argument("--lib", default=None, help="an existing build directory (python -m redist.cabi build --out DIR)")
    p.add_argument("--csv", default=None, help="also write the table here")
    p.add_argument("--device", action="store_true",
                   help="device memory + CUDA execution (needs a GPU, CUDA headers and libcudart); "
                        "use a small --iters (below the launch queue depth), e.g. 256")
    a = p.parse_args(argv)

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the C ABI test helpers
    import helpers

    with tempfile.TemporaryDirectory(prefix="bench-cabi-") as tmp:
        built = helpers.build_once(Path(a.lib) if a.lib else Path(tmp) / "lib")
        extra = []
        if a.device:
            cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
            libdir = next(p for p in (cuda / "lib64", cuda / "lib") if (p / "libcudart.so").exists())
            extra = ["-DREDIST_BENCH_CUDA", f"-I{cuda / 'include'}", f"-L{libdir}", "-lcudart", f"-Wl,-rpath,{libdir}"]
        exe = helpers.compile_c(Path(__file__).resolve().parent / "bench_execute.c", Path(tmp) / "bench_execute", built, extra=extra)
        keep = ("PYTHONPATH",) if a.device else ()  # the GPU image installs redist under PYTHONPATH
        env = {k: v for k, v in os.environ.items() if k in keep or k not in ("PYTHONHOME", "PYTHONPATH", "REDIST_PYTHON")}
        args = [str(a.iters), str(a.trials), str(a.edge), "device" if a.device else "host"]
        c = subprocess.run([str(exe), *args], check=False, capture_output=True, text=True, env=env,
                           timeout=600)
        if c.returncode != 0:
            print(c.stdout, c.stderr, file=sys.stderr)
            return 1
        py = subprocess.run([sys.executable, "-c", PY_SIDE, *args], check=False, capture_output=True, text=True,
                            env=env, timeout=600)
        if py.returncode != 0:
            print(py.stdout, py.stderr, file=sys.stderr)
            return 1
    cr, pr = parse(c.stdout), parse(py.stdout)

    where = "device memory, CUDA graph execution" if a.device else "host memory"
    print(f"# redist C ABI call overhead: {a.edge}x{a.edge} float64 ({where}), 1 process, "
          f"best of {a.trials} x {a.iters} calls")
    print(f"# {platform.processor() or platform.machine()}, Python {platform.python_version()}, {platform.system()}")
    header = ("call", "C (us)", "Python (us)", "added (us)")
    rows = []
    for name in ("execute", "execute_out", "reset_operand_unchecked", "bridge_comm_rank"):
        if name in cr and name in pr:
            rows.append((name, cr[name], pr[name], cr[name] - pr[name]))
    if "c_only_get_error_string" in cr:
        rows.append(("c_only_get_error_string", cr["c_only_get_error_string"], float("nan"), float("nan")))
    print(f"{header[0]:26s} {header[1]:>9s} {header[2]:>12s} {header[3]:>11s}")
    for name, cv, pv, dv in rows:
        print(f"{name:26s} {cv:9.3f} {pv:12.3f} {dv:11.3f}")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["call", "c_us", "python_us", "added_us"])
            w.writerows(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
