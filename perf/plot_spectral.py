# SPDX-License-Identifier: Apache-2.0
"""Plots for the spectral examples (perf/RESULTS.md, "Spectral examples").

    python perf/plot_spectral.py energy perf/data/taylor_green_n32.txt [more runs...] -o perf/taylor_green_energy.png
    python perf/plot_spectral.py timing perf/data/bench_spectral_p2_quiet.json perf/data/bench_spectral_p4_quiet.json \
        perf/data/taylor_green_time_per_step.txt -o perf/spectral_time_per_step.png

energy: E(t) and eps(t) from the printed output of examples/taylor_green.py (one curve per file),
with Taylor & Green's early-time series. timing: forward + backward ms against N from
perf/bench_spectral.py's JSON (one panel per file), redist fft3d variants and mpi4py-fft's PFFT;
a .txt input is a list of taylor_green.py step times ("P=2 N=32: time per step: median ... ms").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))


def read_run(path):
    """(label, nu, t, E, eps) of one taylor_green.py output."""
    with open(path) as f:
        text = f.read()
    head = re.search(r"(\d+) rank\(s\), (\d+)\^3, nu ([^,\s]+), dt ([^,\s]+)", text)
    rows = np.array([[float(v) for v in m.groups()] for m in
                     re.finditer(r"^\s*\d+\s+(\S+)\s+(\S+)\s+(\S+)$", text, re.MULTILINE)])
    label = f"{head.group(2)}$^3$, P={head.group(1)}, dt {head.group(4)}{', GPU' if ', GPU' in text else ''}"
    return label, float(head.group(3)), rows[:, 0], rows[:, 1], rows[:, 2]


def energy(paths, out):
    from taylor_green import series

    fig, (ax_e, ax_d) = plt.subplots(1, 2, figsize=(11, 4.2))
    for path in paths:
        label, nu, t, e, eps = read_run(path)
        ax_e.plot(t, e, label=label)
        ax_d.plot(t, eps, label=label)
    early = t[t <= 1.5]
    ax_e.plot(early, [series(x, nu)[0] for x in early], "k--", lw=1, label="Taylor & Green series")
    ax_d.plot(early, [series(x, nu)[1] for x in early], "k--", lw=1, label="Taylor & Green series")
    ax_e.set(xlabel="t", ylabel="kinetic energy E", title=f"Taylor-Green vortex, nu = {nu:g} (Re = {1 / nu:g})")
    ax_d.set(xlabel="t", ylabel="dissipation eps = nu <|grad u|^2>", title="dissipation")
    for ax in (ax_e, ax_d):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


STYLE = {"redist fft3d, FFTW, natural": "-o", "redist fft3d, numpy.fft, natural": "-s",
         "redist fft3d, FFTW, contiguous": ":o", "redist fft3d, numpy.fft, contiguous": ":s",
         "mpi4py-fft PFFT": "--^", "mpi4py-fft PFFT, slab collapse": "--v"}


def steps_panel(ax, path):
    """Taylor-Green time per RK4 step against N, one curve per label (lines 'LABEL N=32: ... median X ms',
    e.g. 'P=2 N=32: ...' or 'GPU P=1 captured N=64: ...')."""
    with open(path) as f:
        rows = re.findall(r"^(.+?) N=(\d+): time per step: median (\S+) ms", f.read(), re.MULTILINE)
    for label in dict.fromkeys(r[0] for r in rows):
        pts = [(int(n), float(ms)) for q, n, ms in rows if q == label]
        ax.plot([n for n, _ in pts], [ms for _, ms in pts], ":s" if "GPU" in label else "-o", label=label)
    ns = sorted({int(r[1]) for r in rows})
    ax.set(xscale="log", yscale="log", xlabel="N (N^3 grid)", ylabel="ms per RK4 step",
           title="taylor_green.py: host (2 cores, numpy.fft), one H200 (cupy)")
    ax.set_xticks(ns, [str(n) for n in ns])
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def timing(paths, out):
    fig, axes = plt.subplots(1, len(paths), figsize=(5.5 * len(paths), 4.2), squeeze=False)
    for ax, path in zip(axes[0], paths):
        if path.endswith(".txt"):
            steps_panel(ax, path)
            continue
        with open(path) as f:
            rows = json.load(f)
        ns = [r["n"] for r in rows]
        for name, style in STYLE.items():
            if name in rows[0]["medians_ms"]:
                ax.plot(ns, [r["medians_ms"][name] for r in rows], style, label=name)
        p, grid = rows[0]["nranks"], rows[0]["grid"]
        ax.set(xscale="log", yscale="log", xlabel="N (float64 N^3)", ylabel="forward + backward, ms",
               title=f"P = {p}, grid {grid[0]}x{grid[1]} (2-core container)")
        ax.set_xticks(ns, [str(n) for n in ns])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=["energy", "timing"])
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("-o", "--out", required=True)
    args = ap.parse_args()
    (energy if args.what == "energy" else timing)(args.inputs, args.out)


if __name__ == "__main__":
    main()
