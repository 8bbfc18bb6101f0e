/* SPDX-License-Identifier: Apache-2.0 */
/*
 * comm_split.c: an MPI application that owns MPI and gives redist a sub-communicator.
 *
 * The application calls MPI_Init, splits MPI_COMM_WORLD into two groups (even and odd
 * ranks) and hands its group to redist as a Fortran handle (MPI_Comm_c2f). Each group
 * redistributes its own 2-D column-major array (REDIST_ORDER_F) from a split along the first
 * axis to a split along the second, then back, and checks every element. MPI is the
 * application's: it may re-initialize redist after redist_finalize, and it calls
 * MPI_Finalize itself.
 *
 * Build with the mpicc of the MPI that mpi4py uses (the `mpich` wheel's, in its venv):
 *   mpicc comm_split.c $(python -m redist.cabi flags --out build --cflags --libs) -o comm_split
 *   mpiexec -n 4 ./comm_split
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "redist.h"

static int wrank = 0;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        redist_status_t st_ = (call);                                                              \
        if (st_ != REDIST_SUCCESS) {                                                               \
            fprintf(stderr, "world rank %d: %s failed: %s\n  %s\n", wrank, #call,                  \
                    redist_get_error_string(st_), redist_get_last_error());                        \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

static void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/* Redistribute an M x N column-major array (group `color`) rows-split -> columns-split -> back. */
static long round_trip(int color, int rank, int nranks)
{
    const int64_t M = 11 + color, N = 6 + 2 * color; /* each group its own global shape */
    int64_t alo[2] = {0, 0}, ahi[2] = {0, N}, blo[2] = {0, 0}, bhi[2] = {M, 0};
    split(M, nranks, rank, &alo[0], &ahi[0]);
    split(N, nranks, rank, &blo[1], &bhi[1]);
    int64_t am = ahi[0] - alo[0], bn = bhi[1] - blo[1];
    double *a = malloc((am * N + 1) * sizeof(double)), *a2 = malloc((am * N + 1) * sizeof(double));
    long bad = 0;

    /* column-major: a(i, j) at a[i + j * am]; value = global column-major index + group offset */
    for (int64_t j = 0; j < N; j++)
        for (int64_t i = 0; i < am; i++)
            a[i + j * am] = (double)((alo[0] + i) + j * M) + 1000.0 * color;

    redist_t to_cols, to_rows;
    void *b = NULL, *res = NULL;
    CHECK(redist_create(&to_cols, 2, alo, ahi, NULL, blo, bhi, sizeof(double), REDIST_ORDER_F,
                        REDIST_MEMORY_HOST, a));
    CHECK(redist_plan(to_cols, NULL));
    CHECK(redist_execute(to_cols, NULL, NULL, &b));
    for (int64_t j = 0; j < bn; j++) /* b: M x bn, column-major */
        for (int64_t i = 0; i < M; i++)
            bad += ((double *)b)[i + j * M] != (double)(i + (blo[1] + j) * M) + 1000.0 * color;

    CHECK(redist_create(&to_rows, 2, blo, bhi, NULL, alo, ahi, sizeof(double), REDIST_ORDER_F,
                        REDIST_MEMORY_HOST, b));
    CHECK(redist_plan(to_rows, NULL));
    CHECK(redist_execute(to_rows, NULL, a2, &res));
    for (int64_t n = 0; n < am * N; n++)
        bad += a2[n] != a[n];
    bad += res != (void *)a2;
    CHECK(redist_free(to_rows));
    CHECK(redist_free(to_cols));
    free(a);
    free(a2);
    return bad;
}

int main(int argc, char **argv)
{
    int wsize, rank, nranks, color;
    int32_t rrank = -1, rsize = -1;
    long bad = 0, allbad = 0;
    MPI_Comm group;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &wsize);
    color = wrank % 2;
    MPI_Comm_split(MPI_COMM_WORLD, color, wrank, &group);
    MPI_Comm_rank(group, &rank);
    MPI_Comm_size(group, &nranks);

    CHECK(redist_initialize((int32_t)MPI_Comm_c2f(group), REDIST_DEVICE_NONE));
    CHECK(redist_comm_rank(&rrank, &rsize));
    if (rrank != rank || rsize != nranks) {
        fprintf(stderr, "world rank %d: redist_comm_rank gave %d/%d, expected %d/%d\n", wrank, rrank, rsize, rank,
                nranks);
        bad++;
    }
    bad += round_trip(color, rank, nranks);
    CHECK(redist_finalize());

    /* The application owns MPI, so redist can start again, here on the whole world. */
    CHECK(redist_initialize((int32_t)MPI_Comm_c2f(MPI_COMM_WORLD), REDIST_DEVICE_NONE));
    CHECK(redist_comm_rank(&rrank, &rsize));
    bad += rrank != wrank || rsize != wsize;
    bad += round_trip(0, wrank, wsize);
    CHECK(redist_finalize());

    MPI_Allreduce(&bad, &allbad, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    printf("world rank %d: group %d rank %d/%d: %s\n", wrank, color, rank, nranks, bad ? "FAILED" : "OK");
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (wrank == 0 && allbad)
        printf("FAILED: %ld wrong values\n", allbad);
    else if (wrank == 0)
        printf("ALL OK\n");
    MPI_Comm_free(&group);
    MPI_Finalize();
    return allbad != 0;
}
