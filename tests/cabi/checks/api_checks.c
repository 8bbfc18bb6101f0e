/* SPDX-License-Identifier: Apache-2.0 */
/*
 * api_checks.c: the C API's error paths and corner cases, run by tests/cabi/test_cabi.py under
 * mpiexec (any number of processes). Exits 0 and prints "rank r/n: K checks passed" when all
 * pass. Usage: api_checks [EXPECTED_VERSION]
 */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checks.h"

/* In a new thread: its last error starts empty, and its failures do not touch the caller's. */
static void *thread_last_error(void *arg)
{
    char *seen = arg; /* [2][256] */
    snprintf(seen, 256, "%s", redist_get_last_error());
    redist_execute((redist_t)0, NULL, NULL, NULL);
    snprintf(seen + 256, 256, "%s", redist_get_last_error());
    return NULL;
}

enum { M = 9, N = 7 }; /* global M x N, rows split -> columns split */

/* Element (i, j) of the global array. */
static double val(int64_t i, int64_t j, double base) { return base + (double)(i * N + j); }

int main(int argc, char **argv)
{
    int64_t lo[2] = {0, 0}, hi[2] = {0, N}, olo[2] = {0, 0}, ohi[2] = {M, 0};
    redist_t h = NULL, h2 = NULL, hs = NULL;
    void *res = NULL, *g = NULL;
    char want[64];

    /* --- no Python needed ------------------------------------------------------------------- */
    TRUE(strstr(redist_get_error_string(REDIST_SUCCESS), "SUCCESS") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_INVALID_VALUE), "INVALID_VALUE") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_INVALID_STATE), "INVALID_STATE") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_NOT_INITIALIZED), "NOT_INITIALIZED") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_NOT_SUPPORTED), "NOT_SUPPORTED") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_CUDA), "CUDA") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_COMMUNICATION), "COMMUNICATION") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_INTERNAL), "INTERNAL") != NULL);
    TRUE(strstr(redist_get_error_string(REDIST_ERROR_PYTHON_INIT), "PYTHON_INIT") != NULL);
    TRUE(strstr(redist_get_error_string((redist_status_t)99), "unknown") != NULL);
    TRUE(strcmp(redist_get_last_error(), "") == 0);
    TRUE(argc < 2 || strcmp(redist_version(), argv[1]) == 0);

    /* --- before redist_initialize ----------------------------------------------------------- */
    EXPECT(redist_comm_rank(&rank, &nranks), REDIST_ERROR_NOT_INITIALIZED, "redist_initialize");
    EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, NULL),
           REDIST_ERROR_NOT_INITIALIZED, "redist_initialize");
    TRUE(h == NULL);
    EXPECT(redist_finalize(), REDIST_SUCCESS, NULL); /* no-op */
    EXPECT(redist_initialize(REDIST_COMM_WORLD, -7), REDIST_ERROR_INVALID_VALUE, "device_id");

    /* --- initialize ----------------------------------------------------------------------------- */
    EXPECT(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), REDIST_SUCCESS, NULL);
    EXPECT(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), REDIST_ERROR_INVALID_STATE, "already");
    EXPECT(redist_comm_rank(&rank, &nranks), REDIST_SUCCESS, NULL);
    EXPECT(redist_comm_rank(NULL, NULL), REDIST_SUCCESS, NULL);

    split(M, nranks, rank, &lo[0], &hi[0]);
    split(N, nranks, rank, &olo[1], &ohi[1]);
    int64_t am = hi[0] - lo[0], bn = ohi[1] - olo[1];
    double *a = malloc((am * N + 1) * sizeof(double)), *a2 = malloc((am * N + 1) * sizeof(double));
    double *out = malloc((M * bn + 1) * sizeof(double));
    for (int64_t i = 0; i < am; i++)
        for (int64_t j = 0; j < N; j++) {
            a[i * N + j] = val(lo[0] + i, j, 0.0);
            a2[i * N + j] = val(lo[0] + i, j, 1000.0);
        }

    /* --- collective errors: a problem on the last rank fails every rank, naming it ------------ */
    snprintf(want, sizeof want, "rank %d", nranks - 1);
    {
        int64_t badlo[2] = {lo[0], lo[1]};
        if (rank == nranks - 1)
            badlo[0] = -1; /* negative coordinates: invalid */
        h = (redist_t)0x1;
        EXPECT(redist_create(&h, 2, badlo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a),
               REDIST_ERROR_INVALID_VALUE, want);
        TRUE(h == NULL);
        if (rank == 0)
            printf("bad box on rank %d -> rank 0 got: %s\n", nranks - 1, redist_get_last_error());
    }
    EXPECT(redist_create(&h, 2, lo, rank == nranks - 1 ? NULL : hi, NULL, olo, ohi, 8, REDIST_ORDER_C,
                         REDIST_MEMORY_HOST, a),
           REDIST_ERROR_INVALID_VALUE, want);
    if (rank == 0)
        printf("NULL in_upper on rank %d -> rank 0 got: %s\n", nranks - 1, redist_get_last_error());
    EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, rank == nranks - 1 ? 0 : 8, REDIST_ORDER_C,
                         REDIST_MEMORY_HOST, a),
           REDIST_ERROR_INVALID_VALUE, want);
    if (nranks > 1)
        EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, rank == nranks - 1 ? REDIST_ORDER_F : REDIST_ORDER_C,
                             REDIST_MEMORY_HOST, a),
               REDIST_ERROR_INVALID_VALUE, "same on every rank");
    EXPECT(redist_create(NULL, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a),
           REDIST_ERROR_INVALID_VALUE, "NULL");
    EXPECT(redist_create(&h, 0, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a),
           REDIST_ERROR_INVALID_VALUE, "ndim");
    EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, (redist_order_t)5, REDIST_MEMORY_HOST, a),
           REDIST_ERROR_INVALID_VALUE, "order");

    /* device memory, but redist runs CPU-only (REDIST_DEVICE_NONE): every rank is told */
    EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_DEVICE, a),
           REDIST_ERROR_NOT_INITIALIZED, "GPU");

    /* --- the state machine ---------------------------------------------------------------------- */
    EXPECT(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a), REDIST_SUCCESS,
           NULL);
    TRUE(h != NULL);
    res = (void *)0x1;
    EXPECT(redist_execute(h, NULL, NULL, &res), REDIST_ERROR_INVALID_STATE, "plan");
    if (rank == 0)
        printf("execute before plan: %s\n", redist_get_last_error());
    TRUE(res == NULL);
    EXPECT(redist_plan(h, NULL), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h, NULL, NULL, &res), REDIST_SUCCESS, NULL);
    {
        long bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += ((double *)res)[i * bn + j] != val(i, olo[1] + j, 0.0);
        TRUE(bad == 0);
    }
    EXPECT(redist_execute(h, NULL, NULL, NULL), REDIST_SUCCESS, NULL); /* result may be NULL */
    EXPECT(redist_graph(h, NULL, &g), REDIST_ERROR_NOT_SUPPORTED, "CUDA");
    TRUE(g == NULL);

    /* the last error survives successful calls, and is per thread */
    EXPECT(redist_comm_rank(&rank, &nranks), REDIST_SUCCESS, NULL);
    TRUE(strstr(redist_get_last_error(), "CUDA") != NULL);
    {
        char seen[2][256];
        pthread_t t;
        pthread_create(&t, NULL, thread_last_error, seen);
        pthread_join(t, NULL);
        TRUE(strcmp(seen[0], "") == 0);
        TRUE(strstr(seen[1], "NULL") != NULL);
        TRUE(strstr(redist_get_last_error(), "CUDA") != NULL);
    }

    EXPECT(redist_release_operand(h), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h, NULL, NULL, &res), REDIST_ERROR_INVALID_STATE, "released");
    /* a NULL operand for a non-empty box (every box is, up to M = 9 ranks) on the last rank */
    EXPECT(redist_reset_operand(h, rank == nranks - 1 ? NULL : a2), REDIST_ERROR_INVALID_VALUE, want);
    EXPECT(redist_reset_operand_unchecked(h, NULL), REDIST_ERROR_INVALID_VALUE, "NULL"); /* local */
    EXPECT(redist_reset_operand(h, a2), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h, NULL, out, &res), REDIST_SUCCESS, NULL);
    TRUE(res == out);
    {
        long bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += out[i * bn + j] != val(i, olo[1] + j, 1000.0);
        TRUE(bad == 0);
    }
    EXPECT(redist_reset_operand_unchecked(h, a), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h, NULL, NULL, &res), REDIST_SUCCESS, NULL);
    TRUE(((double *)res)[0] == val(0, olo[1], 0.0) || bn == 0);

    /* --- a strided operand (one ghost cell around each side) and a column-major result ------ */
    {
        int64_t ld = N + 2, st[2] = {ld, 1};
        double *pad = calloc((am + 2) * ld, sizeof(double)), *f;
        for (int64_t i = 0; i < am; i++)
            for (int64_t j = 0; j < N; j++)
                pad[(i + 1) * ld + (j + 1)] = val(lo[0] + i, j, 0.0);
        EXPECT(redist_create(&hs, 2, lo, hi, st, olo, ohi, 8, REDIST_ORDER_F, REDIST_MEMORY_HOST, pad + ld + 1),
               REDIST_SUCCESS, NULL);
        EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
        f = res;
        long bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += f[i + j * M] != val(i, olo[1] + j, 0.0); /* column-major */
        TRUE(bad == 0);
        EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        free(pad);
    }

    /* --- one row per rank: the operand fits C and F alike; the result must still be F ---------- */
    {
        int64_t rlo[2] = {rank, 0}, rhi[2] = {rank + 1, 5}, clo[2] = {0, 0}, chi[2] = {nranks, 0};
        double row[5], *f;
        long bad = 0;
        split(5, nranks, rank, &clo[1], &chi[1]);
        for (int j = 0; j < 5; j++)
            row[j] = 10.0 * rank + j;
        EXPECT(redist_create(&hs, 2, rlo, rhi, NULL, clo, chi, 8, REDIST_ORDER_F, REDIST_MEMORY_HOST, row),
               REDIST_SUCCESS, NULL);
        EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
        f = res;
        for (int64_t j = clo[1]; j < chi[1]; j++)
            for (int64_t i = 0; i < nranks; i++)
                bad += f[i + (j - clo[1]) * nranks] != 10.0 * i + j; /* column-major nranks x (chi-clo) */
        TRUE(bad == 0);
        EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
    }

    /* --- options: redist_create_ex ------------------------------------------------------------- */
    {
        redist_options_t opts;
        double *f;
        long bad = 0;
        redist_options_init(&opts);
        TRUE(opts.struct_size == sizeof(redist_options_t) && opts.version == REDIST_OPTIONS_VERSION);
        int64_t cst[2] = {N, 1}; /* the operand is C-ordered; NULL strides would mean dense in opts.order */
        opts.order = REDIST_ORDER_F;
        opts.host_method = REDIST_HOST_METHOD_DATATYPE;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, cst, olo, ohi, 8, REDIST_MEMORY_HOST, a, &opts), REDIST_SUCCESS,
               NULL);
        EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
        f = res;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += f[i + j * M] != val(i, olo[1] + j, 0.0); /* the result is column-major */
        TRUE(bad == 0);
        EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        /* result_order {1, 0}: axis 0 fastest (column-major), named as a permutation; the operand
           stays C-ordered (opts.order = C: a dense operand given without strides is C) */
        redist_options_init(&opts);
        opts.result_ndim = 2;
        opts.result_order[0] = 1;
        opts.result_order[1] = 0;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &opts), REDIST_SUCCESS,
               NULL);
        EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
        f = res;
        bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += f[i + j * M] != val(i, olo[1] + j, 0.0);
        TRUE(bad == 0);
        /* out= is dense in the result order too */
        EXPECT(redist_execute(hs, NULL, out, &res), REDIST_SUCCESS, NULL);
        bad = 0;
        for (int64_t i = 0; i < M; i++)
            for (int64_t j = 0; j < bn; j++)
                bad += out[i + j * M] != val(i, olo[1] + j, 0.0);
        TRUE(res == out && bad == 0);
        /* redist_execute_strided: into the interior of an array with one ghost cell on each side
           (C-ordered, (M + 2) x (bn + 2)), then into a row-reversed view (negative stride) */
        {
            int64_t gw = bn + 2, st[2] = {gw, 1}, rev[2] = {-bn, 1}, same[2] = {0, 1};
            double *ghosted = malloc((M + 2) * gw * sizeof(double)), *flip = malloc((M * bn + 1) * sizeof(double));
            for (int64_t k = 0; k < (M + 2) * gw; k++)
                ghosted[k] = -1.0;
            EXPECT(redist_execute_strided(hs, NULL, ghosted + gw + 1, st, &res), REDIST_SUCCESS, NULL);
            bad = 0;
            for (int64_t i = 0; i < M + 2; i++)
                for (int64_t j = 0; j < gw; j++) {
                    int inside = i >= 1 && i <= M && j >= 1 && j <= bn;
                    bad += ghosted[i * gw + j] != (inside ? val(i - 1, olo[1] + j - 1, 0.0) : -1.0);
                }
            TRUE(res == ghosted + gw + 1 && bad == 0);
            EXPECT(redist_execute_strided(hs, NULL, flip + (M - 1) * bn, rev, &res), REDIST_SUCCESS, NULL);
            bad = 0;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < bn; j++)
                    bad += flip[(M - 1 - i) * bn + j] != val(i, olo[1] + j, 0.0);
            TRUE(bad == 0);
            /* NULL strides: dense, as redist_execute */
            EXPECT(redist_execute_strided(hs, NULL, out, NULL, &res), REDIST_SUCCESS, NULL);
            /* strides that put two elements at one address, on the last rank only: every rank fails */
            EXPECT(redist_execute_strided(hs, NULL, rank == nranks - 1 ? flip : out, rank == nranks - 1 ? same : NULL,
                                          &res),
                   REDIST_ERROR_INVALID_VALUE, want); /* M > 1 rows, and N >= nranks: the last box is not empty */
            free(ghosted);
            free(flip);
        }
        EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        opts.order = REDIST_ORDER_F;
        opts.result_ndim = 0;
        /* NULL options: the defaults (C order) */
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, NULL), REDIST_SUCCESS,
               NULL);
        EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
        TRUE(bn == 0 || ((double *)res)[0] == val(0, olo[1], 0.0));
        EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        /* global_shape (version 3): checked against the bounding box of the input boxes (M x N) */
        {
            int64_t gs[2] = {M, N}, wrong[2] = {M + 1, N};
            redist_options_t gopts;
            redist_options_init(&gopts);
            gopts.global_shape = gs;
            EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &gopts), REDIST_SUCCESS,
                   NULL);
            EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
            EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
            TRUE(bn == 0 || ((double *)res)[0] == val(0, olo[1], 0.0));
            EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
            gopts.global_shape = wrong; /* on every rank: the inferred shape and every box named */
            EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &gopts),
                   REDIST_ERROR_INVALID_VALUE, "global_shape=(10, 7) was passed, but the inferred global shape is (9, 7)");
            if (rank == 0)
                printf("global_shape {M + 1, N} -> %s\n", redist_get_last_error());
            snprintf(want, sizeof want, "rank %d Box(lower=(%d, 0)", nranks - 1, M - M / nranks);
            TRUE(strstr(redist_get_last_error(), want) != NULL);
            snprintf(want, sizeof want, "rank %d", nranks - 1);
            /* a program built against version 2 (no global_shape field): read as before */
            redist_options_init(&gopts);
            gopts.struct_size = offsetof(redist_options_t, global_shape);
            gopts.version = 2;
            EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &gopts), REDIST_SUCCESS,
                   NULL);
            EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        }
        /* a wrong struct_size, or version, or field, on the last rank only: INVALID_VALUE everywhere */
        redist_options_t bad_opts = opts;
        if (rank == nranks - 1)
            bad_opts.struct_size = sizeof(redist_options_t) + 8;
        hs = (redist_t)0x1;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &bad_opts),
               REDIST_ERROR_INVALID_VALUE, want);
        TRUE(hs == NULL);
        if (rank == 0)
            printf("bad struct_size on rank %d -> rank 0 got: %s\n", nranks - 1, redist_get_last_error());
        TRUE(strstr(redist_get_last_error(), "struct_size") != NULL);
        bad_opts = opts;
        if (rank == nranks - 1)
            bad_opts.version = 99;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &bad_opts),
               REDIST_ERROR_INVALID_VALUE, "version");
        bad_opts = opts;
        if (rank == nranks - 1)
            bad_opts.host_method = 17;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &bad_opts),
               REDIST_ERROR_INVALID_VALUE, "host_method");
        bad_opts = opts;
        if (rank == nranks - 1)
            bad_opts.tune = 7;
        EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &bad_opts),
               REDIST_ERROR_INVALID_VALUE, "tune");
        /* tune (version 4): measured, exported, forgotten, imported and used; a version-2 struct still read */
        {
            char path[256];
            int32_t n = -1;
            snprintf(path, sizeof path, "%s/redist-api-checks-%ld.json", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp",
                     (long)getpid()); /* rank 0's is the file */
            redist_options_t topts;
            for (int mode = REDIST_TUNE_MEASURE; mode <= REDIST_TUNE_WISDOM; mode++) {
                redist_options_init(&topts);
                topts.tune = mode;
                topts.tune_budget = 5.0;
                EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &topts),
                       REDIST_SUCCESS, NULL);
                EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
                EXPECT(redist_execute(hs, NULL, NULL, &res), REDIST_SUCCESS, NULL);
                bad = 0;
                for (int64_t i = 0; i < M; i++)
                    for (int64_t j = 0; j < bn; j++)
                        bad += ((double *)res)[i * bn + j] != val(i, olo[1] + j, 0.0);
                TRUE(bad == 0);
                EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
                if (mode == REDIST_TUNE_MEASURE) {
                    EXPECT(redist_export_wisdom(path, &n), REDIST_SUCCESS, NULL);
                    TRUE(n >= 1);
                    EXPECT(redist_forget_wisdom(), REDIST_SUCCESS, NULL);
                    n = -1;
                    EXPECT(redist_import_wisdom(path, &n), REDIST_SUCCESS, NULL);
                    TRUE(n >= 1);
                }
            }
            EXPECT(redist_export_wisdom(rank == nranks - 1 ? NULL : path, NULL), REDIST_ERROR_INVALID_VALUE,
                   "wisdom path");
            if (rank == 0)
                remove(path);
            redist_options_init(&topts);
            topts.version = 2;
            topts.struct_size = (offsetof(redist_options_t, allow_overlap) + sizeof(int32_t) + 7) / 8 * 8;
            EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &topts), REDIST_SUCCESS,
                   NULL);
            EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
        }
        if (nranks > 1) { /* options that differ between ranks */
            bad_opts = opts;
            bad_opts.host_method = rank % 2 ? REDIST_HOST_METHOD_PACK : REDIST_HOST_METHOD_HYBRID;
            EXPECT(redist_create_ex(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a, &bad_opts),
                   REDIST_ERROR_INVALID_VALUE, "options");
        }
    }

    /* --- use after free, bad handles -------------------------------------------------------------- */
    EXPECT(redist_free(h), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h, NULL, NULL, &res), REDIST_ERROR_INVALID_STATE, "freed");
    if (rank == 0)
        printf("execute after free: %s\n", redist_get_last_error());
    EXPECT(redist_plan(h, NULL), REDIST_ERROR_INVALID_STATE, "freed");
    EXPECT(redist_reset_operand_unchecked(h, a), REDIST_ERROR_INVALID_STATE, "freed");
    EXPECT(redist_free(h), REDIST_ERROR_INVALID_STATE, "freed");
    EXPECT(redist_execute((redist_t)0x7654321, NULL, NULL, &res), REDIST_ERROR_INVALID_VALUE, "not a redist_t");
    EXPECT(redist_plan(NULL, NULL), REDIST_ERROR_INVALID_VALUE, "NULL");

    /* --- finalize frees live handles; redist started MPI, so it cannot start again ----------- */
    EXPECT(redist_create(&h2, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a), REDIST_SUCCESS,
           NULL);
    EXPECT(redist_plan(h2, NULL), REDIST_SUCCESS, NULL);
    EXPECT(redist_finalize(), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute(h2, NULL, NULL, &res), REDIST_ERROR_INVALID_STATE, "freed");
    EXPECT(redist_comm_rank(&rank, &nranks), REDIST_ERROR_NOT_INITIALIZED, "redist_initialize");
    EXPECT(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), REDIST_ERROR_INVALID_STATE, "MPI");
    EXPECT(redist_finalize(), REDIST_SUCCESS, NULL);

    free(a);
    free(a2);
    free(out);
    if (nfail) {
        printf("rank %d/%d: %d of %d checks FAILED\n", rank, nranks, nfail, nchecks);
        return 1;
    }
    printf("rank %d/%d: %d checks passed\n", rank, nranks, nchecks);
    return 0;
}
