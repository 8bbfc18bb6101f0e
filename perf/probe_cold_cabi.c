/* SPDX-License-Identifier: Apache-2.0 */
/*
 * probe_cold_cabi.c: what a C ABI call costs warm and after the caches were flushed.
 *
 *   mpicc -O2 perf/probe_cold_cabi.c $(python -m redist.cabi flags --out DIR --cflags --libs) -o probe_cold_cabi
 *   mpiexec -n P ./probe_cold_cabi
 *
 * Each of: nothing (the timer), redist_comm_rank (a call into the embedded Python that does
 * nothing), redist_execute into the engine-owned result and into an out= of a 1-D array of 64
 * float64 per rank (a local copy), and the same call's work written by hand in C (a zero-byte
 * message to and from every other rank, then a memcpy of the 512 bytes: what a compiled executor
 * would do), and a double-buffered loop's step (redist_reset_operand_unchecked to the other of two
 * operands, redist_execute into the other of two out= arrays), 60 times back to back ("warm") and
 * 60 times after each rank wrote 32 MiB of its own, untimed ("evicted"); the median of the last 50,
 * the slowest rank.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redist.h"

static double median(double *t, int n)
{
    for (int i = 1; i < n; i++) {
        double v = t[i];
        int j = i - 1;
        while (j >= 0 && t[j] > v) {
            t[j + 1] = t[j];
            j--;
        }
        t[j + 1] = v;
    }
    return t[n / 2];
}

int main(int argc, char **argv)
{
    static const char *names[6] = {"nothing (timer)", "redist_comm_rank", "redist_execute, result",
                                   "redist_execute, out=", "by hand: status + memcpy", "rebind + execute, out="};
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    MPI_Request *reqs = malloc(sizeof(MPI_Request) * 2 * (size_t)nranks);
    if (redist_initialize(MPI_Comm_c2f(MPI_COMM_WORLD), REDIST_DEVICE_NONE) != REDIST_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    size_t junk_bytes = (size_t)32 << 20;
    unsigned char *junk = malloc(junk_bytes);
    int64_t lo[1] = {rank * 64}, hi[1] = {rank * 64 + 64};
    double *a = calloc(64, 8), *a2 = calloc(64, 8), *o = calloc(64, 8), *o2 = calloc(64, 8), t[60];
    redist_t h;
    if (redist_create(&h, 1, lo, hi, NULL, lo, hi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a) != REDIST_SUCCESS
        || redist_plan(h, NULL) != REDIST_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 1);
    for (int which = 0; which < 6; which++) {
        for (int evicted = 0; evicted < 2; evicted++) {
            for (int i = 0; i < 60; i++) {
                if (evicted) {
                    memset(junk, i, junk_bytes);
                    __asm__ volatile("" : : "r"(junk) : "memory"); /* the stores happen */
                }
                MPI_Barrier(MPI_COMM_WORLD);
                int32_t r, nr;
                void *res;
                double t0 = MPI_Wtime();
                if (which == 1)
                    redist_comm_rank(&r, &nr);
                else if (which == 2)
                    redist_execute(h, NULL, NULL, &res);
                else if (which == 3)
                    redist_execute(h, NULL, o, &res);
                else if (which == 4) {
                    int k = 0;
                    for (int p = 0; p < nranks; p++)
                        if (p != rank) {
                            MPI_Irecv(NULL, 0, MPI_BYTE, p, 7, MPI_COMM_WORLD, &reqs[k++]);
                            MPI_Isend(NULL, 0, MPI_BYTE, p, 7, MPI_COMM_WORLD, &reqs[k++]);
                        }
                    MPI_Waitall(k, reqs, MPI_STATUSES_IGNORE);
                    memcpy(o, a, 64 * sizeof(double));
                } else if (which == 5) { /* a double-buffered loop: operand and out= swap every call */
                    redist_reset_operand_unchecked(h, i % 2 ? a2 : a);
                    redist_execute(h, NULL, i % 2 ? o2 : o, &res);
                }
                t[i] = MPI_Wtime() - t0;
            }
            double us = median(t + 10, 50) * 1e6;
            MPI_Allreduce(MPI_IN_PLACE, &us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            if (rank == 0)
                printf("%-24s %-7s %6.1f us\n", names[which], evicted ? "evicted" : "warm", us);
        }
    }
    redist_free(h);
    free(junk);
    free(reqs);
    free(a);
    free(a2);
    free(o);
    free(o2);
    redist_finalize();
    MPI_Finalize();
    return 0;
}
