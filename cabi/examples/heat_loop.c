/* SPDX-License-Identifier: Apache-2.0 */
/*
 * heat_loop.c: a 3-D heat equation, split into 1-D sweeps, on N processes (host memory).
 *
 * The field u(x, y, z) is split along x (Slab.X): each process holds whole y-z planes, so the
 * y sweep is local. For the x sweep the field is redistributed to a split along y (Slab.Y),
 * swept, and redistributed back:
 *
 *     for each step:   u --fwd--> R (engine-owned, Slab.Y)   x sweep on R
 *                      R --back-> u_next (out=, Slab.X)      y sweep on u_next
 *                      reset_operand_unchecked(fwd, u_next)  (double buffering)
 *
 * Every process also runs the same steps on the whole array and checks every element of
 * both redistributions against it (exact equality: the same arithmetic in the same order).
 *
 * No MPI in this file: redist initializes MPI (REDIST_COMM_WORLD) and finalizes it.
 *
 *   python -m redist.cabi build --out build
 *   cc heat_loop.c $(python -m redist.cabi flags --out build --cflags --libs) -o heat_loop
 *   mpiexec -n 4 ./heat_loop [NX NY NZ STEPS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Slab rule: the first n % p processes get one extra plane. */
static void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/* One explicit diffusion sweep along a periodic line of n values, `stride` apart. */
static void sweep(double *a, int64_t n, int64_t stride, double *tmp)
{
    for (int64_t i = 0; i < n; i++)
        tmp[i] = a[i * stride];
    for (int64_t i = 0; i < n; i++) {
        double left = tmp[(i + n - 1) % n], right = tmp[(i + 1) % n];
        a[i * stride] = tmp[i] + 0.25 * (left - 2.0 * tmp[i] + right);
    }
}

/* Sweep every line along axis `ax` of a C-ordered box of shape s. */
static void sweep_axis(double *a, const int64_t s[3], int ax, double *tmp)
{
    int64_t st[3] = {s[1] * s[2], s[2], 1};
    int o1 = ax == 0 ? 1 : 0, o2 = ax == 2 ? 1 : 2;
    for (int64_t i = 0; i < s[o1]; i++)
        for (int64_t j = 0; j < s[o2]; j++)
            sweep(a + i * st[o1] + j * st[o2], s[ax], st[ax], tmp);
}

/* Count elements of the local box [lo, hi) (C order) that differ from the global array g. */
static long compare(const double *local, const int64_t lo[3], const int64_t hi[3], const double *g,
                    const int64_t gs[3], double *maxdiff)
{
    long bad = 0;
    const double *p = local;
    for (int64_t i = lo[0]; i < hi[0]; i++)
        for (int64_t j = lo[1]; j < hi[1]; j++)
            for (int64_t k = lo[2]; k < hi[2]; k++, p++) {
                double want = g[(i * gs[1] + j) * gs[2] + k];
                if (*p != want) {
                    double d = *p > want ? *p - want : want - *p;
                    if (d > *maxdiff)
                        *maxdiff = d;
                    if (bad++ < 3)
                        fprintf(stderr, "rank %d: element (%lld,%lld,%lld) is %.17g, expected %.17g\n", rank,
                                (long long)i, (long long)j, (long long)k, *p, want);
                }
            }
    return bad;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

int main(int argc, char **argv)
{
    int64_t gs[3] = {13, 10, 7};
    int steps = 20;
    for (int a = 1; a < argc && a <= 3; a++)
        gs[a - 1] = atoll(argv[a]);
    if (argc > 4)
        steps = atoi(argv[4]);

    CHECK(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE));
    CHECK(redist_comm_rank(&rank, &nranks));

    /* Slab.X (x split) and Slab.Y (y split) boxes of this process. */
    int64_t xlo[3] = {0, 0, 0}, xhi[3] = {0, gs[1], gs[2]};
    int64_t ylo[3] = {0, 0, 0}, yhi[3] = {gs[0], 0, gs[2]};
    split(gs[0], nranks, rank, &xlo[0], &xhi[0]);
    split(gs[1], nranks, rank, &ylo[1], &yhi[1]);
    int64_t xs[3] = {xhi[0] - xlo[0], gs[1], gs[2]}, ys[3] = {gs[0], yhi[1] - ylo[1], gs[2]};
    int64_t nx = xs[0] * xs[1] * xs[2], ntot = gs[0] * gs[1] * gs[2];

    double *u[2] = {malloc((nx + 1) * sizeof(double)), malloc((nx + 1) * sizeof(double))};
    double *g = malloc(ntot * sizeof(double));
    double *tmp = malloc((gs[0] + gs[1] + gs[2]) * sizeof(double));
    if (!u[0] || !u[1] || !g || !tmp) {
        fprintf(stderr, "rank %d: out of memory\n", rank);
        return 1;
    }
    /* u(i,j,k) = its global linear index: any misplaced element shows. */
    for (int64_t n = 0; n < ntot; n++)
        g[n] = (double)n;
    for (int64_t n = 0; n < nx; n++)
        u[0][n] = (double)(xlo[0] * gs[1] * gs[2] + n);

    redist_t fwd, back;
    /* fwd: Slab.X -> Slab.Y, operand u[0] (dense, C order), with options: the host method pack
       (numpy pack/unpack through staging) and a C-ordered result. */
    redist_options_t opts;
    redist_options_init(&opts);
    opts.order = REDIST_ORDER_C;
    opts.host_method = REDIST_HOST_METHOD_PACK;
    opts.transport = REDIST_TRANSPORT_AUTO; /* device memory only; ignored on the host */
    CHECK(redist_create_ex(&fwd, 3, xlo, xhi, NULL, ylo, yhi, sizeof(double), REDIST_MEMORY_HOST, u[0], &opts));
    /* back: Slab.Y -> Slab.X; its real operand is fwd's result, bound in the loop. */
    double *scratch = malloc((ys[0] * ys[1] * ys[2] + 1) * sizeof(double));
    CHECK(redist_create(&back, 3, ylo, yhi, NULL, xlo, xhi, sizeof(double), REDIST_ORDER_C, REDIST_MEMORY_HOST,
                        scratch));
    CHECK(redist_plan(fwd, NULL));
    CHECK(redist_plan(back, NULL));

    long bad = 0;
    double maxdiff = 0.0, t_exec = 0.0;
    for (int s = 0; s < steps; s++) {
        double *cur = u[s % 2], *nxt = u[(s + 1) % 2];
        void *r = NULL, *res = NULL;
        double t0;
        CHECK(redist_reset_operand_unchecked(fwd, cur));

        t0 = now();
        CHECK(redist_execute(fwd, NULL, NULL, &r)); /* engine-owned, valid until the next execute */
        t_exec += now() - t0;
        bad += compare(r, ylo, yhi, g, gs, &maxdiff);
        sweep_axis(r, ys, 0, tmp);
        sweep_axis(g, gs, 0, tmp);

        CHECK(redist_reset_operand_unchecked(back, r));
        t0 = now();
        CHECK(redist_execute(back, NULL, nxt, &res));
        t_exec += now() - t0;
        if (res != nxt) {
            fprintf(stderr, "rank %d: execute with out= returned %p, expected %p\n", rank, res, (void *)nxt);
            bad++;
        }
        sweep_axis(nxt, xs, 1, tmp);
        sweep_axis(g, gs, 1, tmp);
        bad += compare(nxt, xlo, xhi, g, gs, &maxdiff);
    }

    CHECK(redist_free(fwd));
    CHECK(redist_free(back));
    CHECK(redist_finalize());

    if (bad) {
        printf("rank %d/%d: FAILED, %ld wrong elements (max diff %g)\n", rank, nranks, bad, maxdiff);
        return 1;
    }
    printf("rank %d/%d: OK, %d steps, every element of %lld x %lld x %lld checked (%.1f us per execute)\n", rank,
           nranks, steps, (long long)gs[0], (long long)gs[1], (long long)gs[2], 1e6 * t_exec / (2.0 * steps));
    free(u[0]);
    free(u[1]);
    free(g);
    free(tmp);
    free(scratch);
    return 0;
}
