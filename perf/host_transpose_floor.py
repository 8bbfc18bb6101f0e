# SPDX-License-Identifier: Apache-2.0
"""The host's floor for a permuted result: what a transposing copy costs on this CPU.

    python perf/host_transpose_floor.py --n 256
    mpiexec -n 4 python perf/host_transpose_floor.py --in-situ --n 256 --iters 7

A permuted result ``(0, 2, 1)`` of bench_permuted.py's pencil transpose turns every copy of the
host backend into a transpose of 8-byte elements. This script measures that copy against a
contiguous one, with numpy (what redist uses) and with a hand-written reference kernel: 8 x 8
blocks moved through AVX-512 registers (plain blocked loops without AVX-512), compiled here with
the system C compiler. The kernel is not part of redist; it answers whether a native transpose
would take the permuted result to the dense one's cost.

* default: one process, a piece of ``(n/2)³`` complex64 elements (bench_permuted's piece at P = 4):
  contiguous copy, numpy's transposing copy, the reference kernel at several block edges.
* ``--in-situ``: bench_permuted.py's run (same arguments), with every transposing 8-byte copy of
  the host backend done by the reference kernel instead of numpy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

import numpy as np

_SOURCE = r"""
#include <stdint.h>
#ifdef __AVX512F__
#include <immintrin.h>
static inline void block8(const double *s, long ss, double *d, long ds) {
    __m512d r[8], t[8], u[8];
    for (int k = 0; k < 8; ++k) r[k] = _mm512_loadu_pd(s + k * ss);
    for (int k = 0; k < 8; k += 2) { t[k] = _mm512_unpacklo_pd(r[k], r[k + 1]); t[k + 1] = _mm512_unpackhi_pd(r[k], r[k + 1]); }
    for (int h = 0; h < 8; h += 4)
        for (int k = 0; k < 2; ++k) {
            u[h + k] = _mm512_shuffle_f64x2(t[h + k], t[h + k + 2], 0x88);
            u[h + k + 2] = _mm512_shuffle_f64x2(t[h + k], t[h + k + 2], 0xdd);
        }
    for (int k = 0; k < 4; ++k) {
        _mm512_storeu_pd(d + k * ds, _mm512_shuffle_f64x2(u[k], u[k + 4], 0x88));
        _mm512_storeu_pd(d + (k + 4) * ds, _mm512_shuffle_f64x2(u[k], u[k + 4], 0xdd));
    }
}
#else
static inline void block8(const double *s, long ss, double *d, long ds) {
    for (int i = 0; i < 8; ++i)
        for (int j = 0; j < 8; ++j) d[j * ds + i] = s[i * ss + j];
}
#endif
/* d[i][k][j] = s[i][j][k] for j < nj, k < nk (multiples of the block edge), strides in elements */
void transpose8(const double *s, double *d, long ni, long nj, long nk, long s0, long s1, long d0, long d1, long edge) {
    for (long i = 0; i < ni; ++i)
        for (long jj = 0; jj < nj; jj += edge)
            for (long kk = 0; kk < nk; kk += edge)
                for (long j = jj; j < jj + edge; j += 8)
                    for (long k = kk; k < kk + edge; k += 8)
                        block8(s + i * s0 + j * s1 + k, s1, d + i * d0 + k * d1 + j, d1);
}
"""


def _kernel():
    """The reference kernel (cffi, ABI mode), built with the system C compiler."""
    import cffi

    ffi = cffi.FFI()
    ffi.cdef("void transpose8(const double *, double *, long, long, long, long, long, long, long, long);")
    tmp = tempfile.mkdtemp(prefix="redist_floor_")
    c, so = os.path.join(tmp, "floor.c"), os.path.join(tmp, "floor.so")
    with open(c, "w") as f:
        f.write(_SOURCE)
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    flags = ["-O3", "-shared", "-fPIC"]
    native = subprocess.run([cc, *flags, "-mavx512f", c, "-o", so], capture_output=True)
    if native.returncode != 0:
        subprocess.run([cc, *flags, c, "-o", so], check=True)
    return ffi, ffi.dlopen(so), "AVX-512" if native.returncode == 0 else "scalar blocks"


def _median_ms(fn, reps: int = 9) -> float:
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def standalone(n: int) -> None:
    ffi, lib, kind = _kernel()
    m = n // 2
    src = (np.arange(m ** 3, dtype=np.float32).reshape(m, m, m) * (1 + 1j)).astype(np.complex64)
    flat = np.empty_like(src)
    dst = np.empty_like(src)
    view = dst.transpose(0, 2, 1)  # view[i, j, k] = dst[i, k, j]: axis 1 contiguous
    ps, pd = ffi.cast("double *", src.ctypes.data), ffi.cast("double *", dst.ctypes.data)
    rows = {"contiguous copy (numpy)": _median_ms(lambda: np.copyto(flat, src)),
            "transposing copy (numpy)": _median_ms(lambda: np.copyto(view, src))}
    for edge in (16, 32, 64):
        rows[f"transposing copy ({kind}, {edge}x{edge} blocks)"] = _median_ms(
            lambda: lib.transpose8(ps, pd, m, m, m, m * m, m, m * m, m, edge))
        assert np.array_equal(view, src)
    base = rows["contiguous copy (numpy)"]
    print(f"# one process, {m}³ complex64 ({src.nbytes / 1e6:.1f} MB), median of 9")
    print("| copy | ms | / contiguous |\n|---|---|---|")
    for k, v in rows.items():
        print(f"| {k} | {v:.3f} | {v / base:.2f} |")


def in_situ(argv: list[str]) -> None:
    ffi, lib, _ = _kernel()
    edge = 64
    numpy_copyto = np.copyto

    def copyto(dst, src, casting="same_kind"):
        # the host backend's transposing views: dst contiguous along axis 2, src along axis 1
        if (dst.ndim == 3 and dst.itemsize == 8 and dst.strides[2] == 8 and src.strides[1] == 8
                and dst.shape[1] % edge == 0 and dst.shape[2] % edge == 0):
            ni, nj, nk = dst.shape
            lib.transpose8(ffi.cast("double *", src.ctypes.data), ffi.cast("double *", dst.ctypes.data),
                           ni, nk, nj, src.strides[0] // 8, src.strides[2] // 8, dst.strides[0] // 8,
                           dst.strides[1] // 8, edge)
            return
        numpy_copyto(dst, src, casting=casting)

    np.copyto = copyto
    import bench_permuted

    sys.argv = ["bench_permuted.py", *argv]
    bench_permuted.main()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--in-situ", action="store_true")
    args, rest = ap.parse_known_args()
    if args.in_situ:
        in_situ(rest)
    else:
        sub = argparse.ArgumentParser()
        sub.add_argument("--n", type=int, default=256)
        standalone(sub.parse_args(rest).n)


if __name__ == "__main__":
    main()
