# SPDX-License-Identifier: Apache-2.0
"""Registers per copy-kernel instance (epoch kind, family run_bytes, nout 3, each vector width) of
the tree it runs from, on a GPU (perf/data/copy_kernel_registers.txt):

    python3 perf/kernel_registers.py LABEL
"""

from __future__ import annotations

import sys


def main(label: str) -> None:
    from cuda.core import Device
    from redist.engine.cuda import kernels

    Device(0).set_current()
    cells = []
    for run_bytes in (0, 4, 8, 16):
        code = kernels.compile_family(run_bytes, 3, kind="epoch")
        for vec in kernels.family_widths(run_bytes):
            regs = code.get_kernel(kernels.kernel_name(run_bytes, 3, vec, "epoch")).attributes.num_regs
            cells.append(f"r{run_bytes}v{vec}:{regs() if callable(regs) else regs}")
    print(label, "regs (epoch kernels, nout 3):", " ".join(cells), flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "")
