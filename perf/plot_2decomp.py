# SPDX-License-Identifier: Apache-2.0
"""redist (into out=) / 2DECOMP&FFT per transpose, size and grid, from perf/bench_2decomp.sh's outputs.

    python perf/plot_2decomp.py [--cores N] perf/data/issue22 perf/data/issue22/round2 perf/issue22_vs_2decomp.png

Reads every ``redist_N_PxQ.md`` table in each folder (one folder per run), prints one markdown
table of every case (each run's medians, the ratios, the target and whether every run meets it)
and draws one panel per grid of out= / 2DECOMP&FFT: a bar per transpose and element type, grouped
by N (the mean over the runs, whiskers from the lowest to the highest run), with the targets (0.6 where the
transpose crosses ranks in 2DECOMP&FFT, 1.0 where it is a local copy there) as black marks.
``--cores``: the cores of the machine that ran them (default 2); more ranks are marked oversubscribed.
"""

from __future__ import annotations

import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = ["x2y", "y2z", "z2y", "y2x"]
CORES = 2  # of the machine that ran the benchmark (--cores)


def local_copy(name: str, prow: int, pcol: int) -> bool:
    """The transpose is a local copy in 2DECOMP&FFT: X<->Y on one row, Y<->Z on one column."""
    return (prow == 1 and name in ("x2y", "y2x")) or (pcol == 1 and name in ("y2z", "z2y"))


def read(folders: list[pathlib.Path]) -> dict:
    """{(prow, pcol): {(n, elements, name): [(out= ms, engine-owned ms, peer ms) of each run]}}"""
    grids: dict = {}
    for f in sorted(f for folder in folders for f in folder.glob("redist_*_*x*.md")):
        n, prow, pcol = map(int, re.match(r"redist_(\d+)_(\d+)x(\d+)\.md", f.name).groups())
        for line in f.read_text().splitlines():
            cells = [c.strip() for c in line.strip("|").split("|")]
            if len(cells) == 7 and cells[1] in NAMES and cells[6] != "-":
                ms = (float(cells[2].split()[0]), float(cells[3].split()[0]), float(cells[5].split()[1]))
                grids.setdefault((prow, pcol), {}).setdefault((n, cells[0], cells[1]), []).append(ms)
    return grids


def table(grids: dict) -> None:
    """Every case, every run: the medians, out= / engine-owned, out= / 2DECOMP&FFT, the target."""
    print(
        "| P | grid | N | elements | transpose | in 2DECOMP&FFT | redist out= ms | redist engine-owned ms "
        "| 2DECOMP&FFT ms | out= / owned | out= / 2DECOMP&FFT | target | met |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    met = total = 0
    for (prow, pcol), cases in sorted(grids.items(), key=lambda g: (g[0][0] * g[0][1], -g[0][0])):
        order = sorted(cases.items(), key=lambda c: (c[0][0], c[0][1] != "real(8)", NAMES.index(c[0][2])))
        for (n, elements, name), runs in order:
            copy = local_copy(name, prow, pcol)
            target = 1.0 if copy else 0.6
            ok = all(out / peer <= target for out, _, peer in runs)
            met, total = met + ok, total + 1
            cols = [" / ".join(f"{run[i]:.3f}" for run in runs) for i in range(3)]
            own = " / ".join(f"{out / owned:.2f}" for out, owned, _ in runs)
            peer = " / ".join(f"{out / peer:.2f}" for out, _, peer in runs)
            oversub = "*" if prow * pcol > CORES else ""
            print(
                f"| {prow * pcol}{oversub} | {prow}×{pcol} | {n}³ | {elements} | {name} | "
                f"{'local copy' if copy else 'crosses ranks'} | {' | '.join(cols)} | {own} | {peer} | "
                f"≤ {target:.1f} | {'yes' if ok else '**no**'} |"
            )
    print(f"\nmet in every run: {met} of {total}")


def main() -> None:
    global CORES
    args = sys.argv[1:]
    if args[0] == "--cores":
        CORES, args = int(args[1]), args[2:]
    grids = read([pathlib.Path(f) for f in args[:-1]])
    png = args[-1]
    table(grids)
    fig, axes = plt.subplots(1, len(grids), figsize=(4.2 * len(grids), 3.8), sharey=True, squeeze=False)
    for ax, ((prow, pcol), ratios) in zip(axes[0], sorted(grids.items())):
        sizes = sorted({n for n, _, _ in ratios})
        cases = [(e, name) for e in ("real(8)", "complex(8)") for name in NAMES]
        width = 0.8 / len(cases)
        for c, (elements, name) in enumerate(cases):
            xs = [i + (c - len(cases) / 2 + 0.5) * width for i in range(len(sizes))]
            runs = [[out / peer for out, _, peer in ratios[(n, elements, name)]] for n in sizes]
            ys = [sum(r) / len(r) for r in runs]
            spread = [[y - min(r) for y, r in zip(ys, runs)], [max(r) - y for y, r in zip(ys, runs)]]
            target = 1.0 if local_copy(name, prow, pcol) else 0.6
            ax.bar(
                xs,
                ys,
                width,
                yerr=spread,
                label=f"{name} {elements}",
                color=f"C{NAMES.index(name)}",
                alpha=1.0 if elements == "real(8)" else 0.55,
                error_kw={"lw": 0.8},
            )
            ax.scatter(xs, [target] * len(xs), marker="_", color="black", s=60, zorder=3)
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_xticks(range(len(sizes)), [f"{n}³" for n in sizes])
        ax.set_title(f"{prow}×{pcol} grid (P={prow * pcol}{', oversubscribed' if prow * pcol > CORES else ''})")
        ax.set_yscale("log")
    axes[0][0].set_ylabel("redist out= / 2DECOMP&FFT, medians\n(bar: mean of the runs; black: #22 target)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=8, fontsize=7)
    fig.suptitle(f"Pencil transposes into the caller's arrays, from C on Open MPI, {CORES} cores")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    fig.savefig(png, dpi=110)


if __name__ == "__main__":
    main()
