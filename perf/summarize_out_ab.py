# SPDX-License-Identifier: Apache-2.0
"""Summarize a ``perf/device_run.sh out-ab`` run: per P, size and variant, each tag's median time per
call (µs) over the rounds and the range of its ``out=/result`` ratios.

    python perf/summarize_out_ab.py DIR > DIR/summary.md

DIR holds ``out_ab_p{P}_{tag}_r{round}.txt`` (bench_out.py's tables).
"""

from __future__ import annotations

import collections
import glob
import re
import statistics
import sys


def main(folder: str) -> None:
    rows = collections.defaultdict(list)
    for path in sorted(glob.glob(f"{folder}/out_ab_p*_*_r*.txt")):
        p, tag, _ = re.search(r"out_ab_p(\d+)_(\w+)_r(\d+)", path).groups()
        for line in open(path):
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 4 and cells[1].isdigit():
                rows[(p, cells[1], cells[2], tag)].append((float(cells[3]) * 1000, float(cells[4])))
    keys = sorted({k[:3] for k in rows}, key=lambda k: (int(k[0]), int(k[1]), k[2]))
    tags = sorted({k[3] for k in rows})
    print("| P | N³ | variant | " + " | ".join(f"{t}: µs (median) / out=/result range" for t in tags) + " |")
    print("|---|---|---|" + "---|" * len(tags))
    for key in keys:
        cells = []
        for tag in tags:
            got = rows.get((*key, tag), [])
            ratios = [r for _, r in got]
            cells.append(f"{statistics.median(t for t, _ in got):.1f} / {min(ratios):.2f}–{max(ratios):.2f}" if got else "–")
        print(f"| {key[0]} | {key[1]}³ | {key[2]} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1])
