/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pencil_boxes.c: the pencil boxes perf/bench_pencils.c times, printed from its own pencil() (its main
 * renamed away), as "rank R X|Y|Z lo0 lo1 lo2 hi0 hi1 hi2"; perf/bench_2decomp.sh compares them with
 * what 2DECOMP&FFT gives (bench_2decomp N P_ROW P_COL 1 boxes).
 *
 *   mpicc -ffunction-sections -Iperf -Icabi -c perf/pencil_boxes.c && mpicc pencil_boxes.o -Wl,--gc-sections
 *   ./a.out N P_ROW P_COL
 */
#define main bench_pencils_main
#include "bench_pencils.c"
#undef main
int main(int argc, char **argv)
{
    n = atoll(argv[1]);
    int prow = atoi(argv[2]), pcol = atoi(argv[3]);
    const char *pn = "XYZ";
    for (int r = 0; r < prow * pcol; r++)
        for (int p = 0; p < 3; p++) {
            int64_t lo[3], hi[3];
            pencil(p, r / pcol, r % pcol, prow, pcol, lo, hi);
            printf("rank %d %c %lld %lld %lld %lld %lld %lld\n", r, pn[p], (long long)lo[0], (long long)lo[1],
                   (long long)lo[2], (long long)hi[0], (long long)hi[1], (long long)hi[2]);
        }
    return 0;
}
