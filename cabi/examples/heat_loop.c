/* SPDX-License-Identifier: Apache-2.0 */
/*
 * heat_loop.c: a 3-D heat equation, split into 1-D sweeps, on N processes (host memory).
 *
 * Two fields, a temperature u(x, y, z) and a second one v (a concentration, say), are split
 * along x (Slab.X): each process holds whole y-z planes, so the y sweep is local. For the x
 * sweep both are redistributed to a split along y (Slab.Y) in ONE exchange (a fields handle:
 * one message per peer for both), swept, and redistributed back:
 *
 *     for each step:   (u, v) --fwd--> (Ru, Rv) (engine-owned, Slab.Y)   x sweep on both
 *                      (Ru, Rv) --back-> (u, v)_next (out=, Slab.X)       y sweep on both
 *                      reset_operands_unchecked(fwd, (u, v)_next)         (double buffering)
 *
 * Every process also runs the same steps on the whole arrays and checks every element of
 * both fields after both redistributions (exact equality: the same arithmetic in the same order).
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

    /* u[f][b]: field f (0: u, 1: v), buffer b (double buffering); g[f]: the whole field */
    double *u[2][2], *g[2];
    double *tmp = malloc((gs[0] + gs[1] + gs[2]) * sizeof(double));
    double *scratch[2];
    int64_t sizes[2] = {sizeof(double), sizeof(double)};
    for (int f = 0; f < 2; f++) {
        u[f][0] = malloc((nx + 1) * sizeof(double));
        u[f][1] = malloc((nx + 1) * sizeof(double));
        g[f] = malloc(ntot * sizeof(double));
        scratch[f] = malloc((ys[0] * ys[1] * ys[2] + 1) * sizeof(double));
        if (!u[f][0] || !u[f][1] || !g[f] || !scratch[f] || !tmp) {
            fprintf(stderr, "rank %d: out of memory\n", rank);
            return 1;
        }
        /* u(i,j,k) = its global linear index n, v = -n - 0.5: any misplaced element shows */
        for (int64_t n = 0; n < ntot; n++)
            g[f][n] = f ? -0.5 - (double)n : (double)n;
        for (int64_t n = 0; n < nx; n++)
            u[f][0][n] = g[f][xlo[0] * gs[1] * gs[2] + n];
    }

    redist_t fwd, back;
    /* fwd: Slab.X -> Slab.Y, both fields (dense, C order) in one exchange, with options: the
       host method pack (numpy pack/unpack through staging) and a C-ordered result. */
    redist_options_t opts;
    redist_options_init(&opts);
    opts.order = REDIST_ORDER_C;
    opts.host_method = REDIST_HOST_METHOD_PACK;
    opts.transport = REDIST_TRANSPORT_AUTO; /* device memory only; ignored on the host */
    void *ops[2] = {u[0][0], u[1][0]};
    CHECK(redist_create_fields(&fwd, 2, 3, xlo, xhi, NULL, ylo, yhi, sizes, REDIST_MEMORY_HOST, ops, &opts));
    /* back: Slab.Y -> Slab.X; its real operands are fwd's results, bound in the loop. */
    void *sops[2] = {scratch[0], scratch[1]};
    CHECK(redist_create_fields(&back, 2, 3, ylo, yhi, NULL, xlo, xhi, sizes, REDIST_MEMORY_HOST, sops, NULL));
    CHECK(redist_plan(fwd, NULL));
    CHECK(redist_plan(back, NULL));

    long bad = 0;
    double maxdiff = 0.0, t_exec = 0.0;
    for (int s = 0; s < steps; s++) {
        void *cur[2] = {u[0][s % 2], u[1][s % 2]}, *nxt[2] = {u[0][(s + 1) % 2], u[1][(s + 1) % 2]};
        void *r[2] = {NULL, NULL}, *res[2] = {NULL, NULL};
        double t0;
        CHECK(redist_reset_operands_unchecked(fwd, cur));

        t0 = now();
        CHECK(redist_execute_fields(fwd, NULL, NULL, r)); /* engine-owned, valid until the next execute */
        t_exec += now() - t0;
        for (int f = 0; f < 2; f++) {
            bad += compare(r[f], ylo, yhi, g[f], gs, &maxdiff);
            sweep_axis(r[f], ys, 0, tmp);
            sweep_axis(g[f], gs, 0, tmp);
        }

        CHECK(redist_reset_operands_unchecked(back, r));
        t0 = now();
        CHECK(redist_execute_fields(back, NULL, nxt, res));
        t_exec += now() - t0;
        for (int f = 0; f < 2; f++) {
            if (res[f] != nxt[f]) {
                fprintf(stderr, "rank %d: execute with out= returned %p, expected %p\n", rank, res[f], nxt[f]);
                bad++;
            }
            sweep_axis(nxt[f], xs, 1, tmp);
            sweep_axis(g[f], gs, 1, tmp);
            bad += compare(nxt[f], xlo, xhi, g[f], gs, &maxdiff);
        }
    }

    CHECK(redist_free(fwd));
    CHECK(redist_free(back));
    CHECK(redist_finalize());

    if (bad) {
        printf("rank %d/%d: FAILED, %ld wrong elements (max diff %g)\n", rank, nranks, bad, maxdiff);
        return 1;
    }
    printf("rank %d/%d: OK, %d steps, every element of both %lld x %lld x %lld fields checked (%.1f us per "
           "execute)\n", rank, nranks, steps, (long long)gs[0], (long long)gs[1], (long long)gs[2],
           1e6 * t_exec / (2.0 * steps));
    for (int f = 0; f < 2; f++) {
        free(u[f][0]);
        free(u[f][1]);
        free(g[f]);
        free(scratch[f]);
    }
    free(tmp);
    return 0;
}
