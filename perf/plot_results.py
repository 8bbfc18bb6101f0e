# SPDX-License-Identifier: Apache-2.0
"""Plot bandwidth vs size from the JSON that perf/bench_cuda.py writes (perf/data/*.md).

    python perf/plot_results.py perf/data/bench_p2.md perf/data/bench_p1.md -o perf/gpu_bandwidth.png

Bandwidth = bytes of the whole global array / time per redistribution (what a user's time step
sees), for every method present in each file.
"""

from __future__ import annotations

import argparse
import json

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

SERIES = [("redist_us", "redist", "-o"), ("torch_graph_us", "PyTorch+NCCL (CUDA graph)", "--s"),
          ("torch_eager_us", "PyTorch+NCCL (eager)", ":s"), ("nvshmem_put_us", "raw NVSHMEM put (remote part)", "-.^"),
          ("d2d_copy_us", "local D2D copy (one rank's bytes)", ":x")]


def load(path):
    text = open(path).read()
    return json.loads(text[text.index("["):])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="+")
    ap.add_argument("-o", "--out", default="gpu_bandwidth.png")
    args = ap.parse_args()
    fig, axes = plt.subplots(1, len(args.files), figsize=(6.5 * len(args.files), 4.6), squeeze=False)
    for ax, path in zip(axes[0], args.files):
        rows = load(path)
        P = rows[0]["P"]
        x = [r["MB"] * 1e6 for r in rows]
        for key, label, style in SERIES:
            pts = [(xx, xx / (r[key] * 1e-6) / 1e9) for xx, r in zip(x, rows) if isinstance(r.get(key), (int, float))]
            if pts:
                ax.plot(*zip(*pts), style, label=label)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("global array bytes (complex64 n³, n = 32 … 1024)")
        ax.set_ylabel("global bytes / time per redistribution (GB/s)")
        ax.set_title(f"Slab.X → Slab.Y, P = {P} (H200, NVLink NV18)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)


if __name__ == "__main__":
    main()
