#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# 2DECOMP&FFT's transposes beside redist's, both from compiled code on Debian's Open MPI.
#
#   perf/bench_2decomp.sh SRC OUT ITERS "P:P_ROW:P_COL ..." "N ..."
#   e.g. perf/bench_2decomp.sh /tmp/2decomp-src perf/data/issue22 20 "2:1:2 2:2:1 4:2:2 4:1:4" "64 128 256"
#
# SRC: a 2DECOMP&FFT source tree (not part of redist; built here in a temporary directory and never
# kept). OUT: a folder for the raw outputs: peer.txt (perf/bench_2decomp.f90's PEER_TIMINGS lines),
# redist_N_PxQ.md (perf/bench_pencils.c's tables with the ratios: redist from C), fortran.txt (the
# same program's redist lines: redist from Fortran, timed beside 2DECOMP&FFT in one program) and
# fortran_vs_2decomp.md (their ratios), layout_check.txt, load.txt. Run
# it from the repository root inside a venv whose mpi4py is built on Open MPI (docs/install.md, "Using your
# cluster's MPI").
#
# MPI wrappers and launcher: Debian's Open MPI names unless MPIFC, MPICC, MPIEXEC say otherwise (the
# GPU machines' image: MPIFC=mpif90 MPICC=mpicc MPIEXEC="mpiexec --oversubscribe").
#
# BENCH_BETWEEN (poison, evict or nothing; default poison) and BENCH_EVICT_MIB: what both drivers do,
# untimed, before every timed call of either library (perf/bench_2decomp.f90).
#
# D2D_BUILD_ONLY=DIR builds 2DECOMP&FFT and the Fortran driver into DIR (with its libgfortran) and stops;
# D2D_BIN=DIR then times them on a machine without gfortran (the same MPI's ABI; redist's library is
# built there). D2D_ARCH replaces -march=native (e.g. D2D_ARCH= for a binary that runs elsewhere).
#
# 2DECOMP&FFT: CMake, generic FFT, double precision, gfortran through $MPIFC, at -O2
# -march=native: its own Release flags (-O3 -march=native) build a library whose transposes crash
# in MPI_Alltoallv whenever P_ROW > 1 on this machine (gfortran 12.2, Open MPI 4.1.4), -O2 does not.
set -euo pipefail
src=$1 out=$2 iters=$3 grids=$4 sizes=$5
py=$(command -v python || command -v python3)  # a venv's python, before /usr/bin goes first
export PATH=/usr/bin:$PATH OMPI_MCA_btl=${OMPI_MCA_btl:-self,vader} OMPI_MCA_rmaps_base_oversubscribe=1
fc=${MPIFC:-mpif90.openmpi} cc=${MPICC:-mpicc.openmpi}
read -r -a launch <<< "${MPIEXEC:-mpiexec.openmpi}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1  # containers run as root
# what both drivers do, untimed, before every timed call of either library (bench_2decomp.f90)
export BENCH_BETWEEN=${BENCH_BETWEEN:-poison}
mkdir -p "$out"
out=$(realpath "$out")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$py" -m redist.cabi build --out "$tmp/cabi" > /dev/null
arch=${D2D_ARCH--march=native}
if [ -n "${D2D_BIN:-}" ]; then  # 2DECOMP&FFT and the Fortran driver built elsewhere (D2D_BUILD_ONLY)
    cp "$D2D_BIN/bench_2decomp" "$tmp/"
    export LD_LIBRARY_PATH=$tmp/cabi:$(realpath "$D2D_BIN")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}  # this libredist
else
    FC=$fc cmake -S "$src" -B "$tmp/d2d" -DCMAKE_BUILD_TYPE=Release -DBUILD_TARGET=mpi \
        -DFFT_Choice=generic -DDOUBLE_PRECISION=ON -DBUILD_TESTING=OFF > "$tmp/cmake.log"
    sed -i "s/-O3 -march=native/-O2 $arch/" "$tmp/d2d/src/CMakeFiles/decomp2d.dir/flags.make"
    cmake --build "$tmp/d2d" -j "$(nproc)" > "$tmp/build.log"
    # shellcheck disable=SC2046,SC2086
    "$fc" -O2 $arch -I"$tmp/d2d/include" perf/bench_2decomp.f90 "$tmp/d2d/lib/libdecomp2d.a" \
        $("$py" -m redist.cabi flags --out "$tmp/cabi" --fflags --flibs) -o "$tmp/bench_2decomp"
fi
if [ -n "${D2D_BUILD_ONLY:-}" ]; then  # for a machine without gfortran: the driver and its Fortran runtime
    mkdir -p "$D2D_BUILD_ONLY"
    cp "$tmp/bench_2decomp" "$D2D_BUILD_ONLY/"
    ldd "$tmp/bench_2decomp" | awk '/libgfortran|libquadmath/ {print $3}' | xargs -r cp -t "$D2D_BUILD_ONLY/"
    exit 0
fi
# shellcheck disable=SC2046
"$cc" -O2 perf/bench_pencils.c $("$py" -m redist.cabi flags --out "$tmp/cabi" --cflags --libs) \
    -o "$tmp/bench_pencils"

: > "$out/peer.txt"
: > "$out/fortran.txt"
: > "$out/layout_check.txt"
"$cc" -ffunction-sections -Iperf -Icabi -c perf/pencil_boxes.c -o "$tmp/pencil_boxes.o"
"$cc" "$tmp/pencil_boxes.o" -Wl,--gc-sections -o "$tmp/pencil_boxes"
for g in $grids; do  # the two layouts agree box for box, on uneven sizes too, or nothing is timed
    IFS=: read -r p prow pcol <<< "$g"
    for n in 13 $sizes; do
        "$tmp/pencil_boxes" "$n" "$prow" "$pcol" | sort > "$tmp/ours.txt"
        (cd "$tmp" && "${launch[@]}" -n "$p" ./bench_2decomp "$n" "$prow" "$pcol" 1 boxes) \
            | sort > "$tmp/peer_boxes.txt"
        diff "$tmp/ours.txt" "$tmp/peer_boxes.txt"
        echo "N=$n ${prow}x$pcol: the $(wc -l < "$tmp/ours.txt") boxes agree" >> "$out/layout_check.txt"
    done
done
for g in $grids; do
    IFS=: read -r p prow pcol <<< "$g"
    for n in $sizes; do
        echo "# load before P=$p ${prow}x$pcol N=$n: $(cut -d' ' -f1-3 /proc/loadavg)" \
            | tee -a "$out/load.txt"
        (cd "$tmp" && "${launch[@]}" -n "$p" ./bench_2decomp "$n" "$prow" "$pcol" "$iters") | tee "$tmp/both.txt"
        grep '^2DECOMP' "$tmp/both.txt" >> "$out/peer.txt"
        grep '^redist-f90' "$tmp/both.txt" >> "$out/fortran.txt"
        "${launch[@]}" -n "$p" "$tmp/bench_pencils" "$n" "$prow" "$pcol" "$iters" "$out/peer.txt" \
            | tee "$out/redist_${n}_${prow}x$pcol.md"
    done
done
"$py" - "$out" <<'EOF'
import pathlib, sys
out = pathlib.Path(sys.argv[1])
def cases(name):
    rows = [line.split() for line in (out / name).read_text().splitlines() if line.strip()]
    return {tuple(r[1:6]): (float(r[6]), r[8]) for r in rows}
peer, ours = cases("peer.txt"), cases("fortran.txt")
lines = ["| elements | N | grid | transpose | redist from Fortran, out= (ms) | 2DECOMP&FFT (ms) | redist / 2DECOMP&FFT |",
         "|---|---|---|---|---|---|---|"]
for key, (ms, ok) in ours.items():
    prec, n, prow, pcol, name = key
    if key in peer and ok == "T" and peer[key][1] == "T":
        lines.append(f"| {prec} | {n} | {prow}x{pcol} | {name} | {ms:.4f} | {peer[key][0]:.4f} | {ms / peer[key][0]:.2f} |")
(out / "fortran_vs_2decomp.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
EOF
