/* SPDX-License-Identifier: Apache-2.0 */
/*
 * halo_transpose.c: halos and a permuted transpose through redist_options_t (host memory).
 *
 * A 2-D field u(x, y) of NX x NY doubles is split along x (each process holds whole rows).
 *
 * 1. Halo exchange (allow_overlap = 1). The output box of each process is its own rows grown
 *    by one row on each side (clipped at the edges): output boxes overlap, so this is not a
 *    redistribution in the strict sense, and `allow_overlap` says so. Every step executes the
 *    exchange (engine-owned result = the ghosted rows) and applies a Jacobi smoother to the
 *    process's own rows, in place: the operand pointer never changes, so no rebind is needed.
 *
 * 2. Permuted transpose (result_ndim / result_order). The smoothed field is moved to a split
 *    along y with result_order = {1, 0}: axis 0 (x) varies fastest in the result, so the
 *    x lines a following sweep or FFT reads are contiguous, written directly by the exchange.
 *
 * Every process runs the same steps on the whole array and checks every element (exactly:
 * the same arithmetic in the same order).
 *
 *   python -m redist.cabi build --out build
 *   cc halo_transpose.c $(python -m redist.cabi flags --out build --cflags --libs) -o halo_transpose
 *   mpiexec -n 4 ./halo_transpose [NX NY STEPS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redist.h"

static int rank = 0, nranks = 1;

#define CHECK(call)                                                                                \
    do {                                                                                           \
        redist_status_t st_ = (call);                                                              \
        if (st_ != REDIST_SUCCESS) {                                                               \
            fprintf(stderr, "rank %d: %s failed: %s\n  %s\n", rank, #call,                         \
                    redist_get_error_string(st_), redist_get_last_error());                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

/* Slab rule: the first n % p processes get one extra row. */
static void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/* Jacobi update of rows [lo, hi) of an ny-wide field: `src` holds rows [slo, ...), `dst` rows
   [lo, hi). The edges of the global NX x ny field stay fixed. */
static void smooth(const double *src, int64_t slo, double *dst, int64_t lo, int64_t hi, int64_t nx, int64_t ny)
{
    for (int64_t i = lo; i < hi; i++)
        for (int64_t j = 0; j < ny; j++) {
            const double *c = src + (i - slo) * ny + j;
            double v = *c;
            if (i > 0 && i < nx - 1 && j > 0 && j < ny - 1)
                v = 0.25 * ((c[-ny] + c[ny]) + (c[-1] + c[1]));
            dst[(i - lo) * ny + j] = v;
        }
}

int main(int argc, char **argv)
{
    int64_t nx = 11, ny = 9;
    int steps = 10;
    if (argc > 1)
        nx = atoll(argv[1]);
    if (argc > 2)
        ny = atoll(argv[2]);
    if (argc > 3)
        steps = atoi(argv[3]);

    CHECK(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE));
    CHECK(redist_comm_rank(&rank, &nranks));

    int64_t lo[2] = {0, 0}, hi[2] = {0, ny};
    split(nx, nranks, rank, &lo[0], &hi[0]);
    int64_t rows = hi[0] - lo[0];
    /* the halo box: own rows +- 1, clipped; a process without rows needs nothing */
    int64_t glo[2] = {lo[0], 0}, ghi[2] = {lo[0], 0};
    if (rows > 0) {
        glo[0] = lo[0] > 0 ? lo[0] - 1 : 0;
        ghi[0] = hi[0] < nx ? hi[0] + 1 : nx;
        ghi[1] = ny;
    }

    double *u = malloc((rows * ny + 1) * sizeof(double)), *next = malloc((rows * ny + 1) * sizeof(double));
    double *g = malloc(nx * ny * sizeof(double)), *gn = malloc(nx * ny * sizeof(double));
    if (!u || !next || !g || !gn) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    for (int64_t n = 0; n < nx * ny; n++)
        g[n] = (double)((n * 7919) % 1009); /* distinct enough to show any misplaced element */
    memcpy(u, g + lo[0] * ny, rows * ny * sizeof(double));

    redist_options_t opts;
    redist_options_init(&opts);
    opts.allow_overlap = 1;
    redist_t halo;
    CHECK(redist_create_ex(&halo, 2, lo, hi, NULL, glo, ghi, sizeof(double), REDIST_MEMORY_HOST, u, &opts));
    CHECK(redist_plan(halo, NULL));

    long bad = 0;
    for (int s = 0; s < steps; s++) {
        void *r = NULL;
        CHECK(redist_execute(halo, NULL, NULL, &r)); /* the ghosted rows [glo, ghi) */
        const double *ghosted = r;
        for (int64_t i = glo[0]; i < ghi[0]; i++) /* the halo rows are the neighbours' current rows */
            for (int64_t j = 0; j < ny; j++)
                bad += ghosted[(i - glo[0]) * ny + j] != g[i * ny + j];
        smooth(ghosted, glo[0], next, lo[0], hi[0], nx, ny);
        memcpy(u, next, rows * ny * sizeof(double)); /* in place: the operand pointer stays */
        smooth(g, 0, gn, 0, nx, nx, ny);
        memcpy(g, gn, nx * ny * sizeof(double));
        for (int64_t n = 0; n < rows * ny; n++)
            bad += u[n] != g[lo[0] * ny + n];
    }

    /* x-split -> y-split with x contiguous: result_order lists the axes slowest first */
    int64_t ylo[2] = {0, 0}, yhi[2] = {nx, 0};
    split(ny, nranks, rank, &ylo[1], &yhi[1]);
    redist_options_init(&opts);
    opts.result_ndim = 2;
    opts.result_order[0] = 1;
    opts.result_order[1] = 0;
    redist_t tr;
    void *t = NULL;
    CHECK(redist_create_ex(&tr, 2, lo, hi, NULL, ylo, yhi, sizeof(double), REDIST_MEMORY_HOST, u, &opts));
    CHECK(redist_plan(tr, NULL));
    CHECK(redist_execute(tr, NULL, NULL, &t));
    const double *yt = t;
    for (int64_t j = ylo[1]; j < yhi[1]; j++)
        for (int64_t i = 0; i < nx; i++) /* element (i, j) at (j - ylo) * nx + i: x fastest */
            bad += yt[(j - ylo[1]) * nx + i] != g[i * ny + j];

    CHECK(redist_free(halo));
    CHECK(redist_free(tr));
    CHECK(redist_finalize());
    if (bad) {
        printf("rank %d/%d: FAILED, %ld wrong elements\n", rank, nranks, bad);
        return 1;
    }
    printf("rank %d/%d: OK, %d halo steps and a permuted transpose of %lld x %lld, every element checked\n", rank,
           nranks, steps, (long long)nx, (long long)ny);
    free(u);
    free(next);
    free(g);
    free(gn);
    return 0;
}
