/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fields_checks.c: fused fields through the C API (redist_create_fields and its functions), run
 * by tests/cabi/test_cabi.py under mpiexec (any number of processes). Three fields of different
 * element sizes (double, float, int16_t) move in one exchange, M x N rows split -> columns split;
 * every element of every result is checked (element (i, j) holds its global index i * N + j,
 * as val() writes it for that field). Rebinding every field and one field, checked and not,
 * out= per field (dense and strided), per-field operand strides, a column-major result, and the
 * refusals (a one-array handle given to a fields function and the reverse, a released operand).
 * Prints "rank r/n: K fields checks passed". Usage: fields_checks [M N]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"

#define NF 3
static const int64_t SIZES[NF] = {sizeof(double), sizeof(float), sizeof(int16_t)};
static int64_t M = 9, N = 7;

/* Element (i, j) of field f, shifted by salt (0 or 1000: which operand was bound shows). */
static double val(int f, int64_t i, int64_t j, int salt)
{
    double k = (double)(i * N + j + salt);
    return f == 0 ? k : f == 1 ? -k - 0.5 : k + 3.0;
}

static double get(int f, const void *p, int64_t k)
{
    return f == 0 ? ((const double *)p)[k] : f == 1 ? ((const float *)p)[k] : ((const int16_t *)p)[k];
}

static void put(int f, void *p, int64_t k, double v)
{
    if (f == 0)
        ((double *)p)[k] = v;
    else if (f == 1)
        ((float *)p)[k] = (float)v;
    else
        ((int16_t *)p)[k] = (int16_t)v;
}

/* Wrong elements of field f's result at p: all M rows of bn columns from c0, element strides st. */
static long wrong(int f, const void *p, const int64_t st[2], int64_t c0, int64_t bn, int salt)
{
    long bad = 0;
    if (bn > 0 && p == NULL)
        return M * bn;
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < bn; j++)
            bad += get(f, p, i * st[0] + j * st[1]) != val(f, i, c0 + j, salt);
    return bad;
}

int main(int argc, char **argv)
{
    int64_t lo[2] = {0, 0}, hi[2] = {0, 0}, olo[2] = {0, 0}, ohi[2] = {0, 0};
    redist_t h = NULL, hs = NULL;
    void *a[NF], *a2[NF], *out[NF], *res[NF];
    int32_t nf = -1;

    if (argc > 2) {
        M = atoll(argv[1]);
        N = atoll(argv[2]);
    }
    EXPECT(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE), REDIST_SUCCESS, NULL);
    EXPECT(redist_comm_rank(&rank, &nranks), REDIST_SUCCESS, NULL);
    split(M, nranks, rank, &lo[0], &hi[0]);
    hi[1] = N;
    ohi[0] = M;
    split(N, nranks, rank, &olo[1], &ohi[1]);
    int64_t am = hi[0] - lo[0], bn = ohi[1] - olo[1];
    const int64_t out_c[2] = {bn, 1}, out_f[2] = {1, M}; /* dense C and F result strides */
    for (int f = 0; f < NF; f++) {
        a[f] = malloc((am * N + 1) * SIZES[f]);
        a2[f] = malloc((am * N + 1) * SIZES[f]);
        out[f] = malloc((M * bn + 1) * SIZES[f]);
        for (int64_t i = 0; i < am; i++)
            for (int64_t j = 0; j < N; j++) {
                put(f, a[f], i * N + j, val(f, lo[0] + i, j, 0));
                put(f, a2[f], i * N + j, val(f, lo[0] + i, j, 1000));
            }
    }
#define ALL_FIELDS_OK(strides, salt_of)                                                            \
    for (int f = 0; f < NF; f++)                                                                   \
    TRUE(wrong(f, res[f], (strides), olo[1], bn, (salt_of)) == 0)

    /* --- dense operands, C-ordered results (NULL strides, NULL options) ---------------------- */
    EXPECT(redist_create_fields(&h, NF, 2, lo, hi, NULL, olo, ohi, SIZES, REDIST_MEMORY_HOST, a, NULL),
           REDIST_SUCCESS, NULL);
    EXPECT(redist_get_nfields(h, &nf), REDIST_SUCCESS, NULL);
    TRUE(nf == NF);
    res[0] = res[1] = res[2] = (void *)0x1;
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_ERROR_INVALID_STATE, "plan");
    TRUE(res[0] == NULL && res[1] == NULL && res[2] == NULL); /* NULL on failure */
    EXPECT(redist_plan(h, NULL), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, 0);
    EXPECT(redist_execute_fields(h, NULL, NULL, NULL), REDIST_SUCCESS, NULL); /* results may be NULL */

    /* out= per field: fields 0 and 2 into the caller's buffers, field 1 its engine-owned result */
    {
        void *outs[NF] = {out[0], NULL, out[2]}, *engine1 = res[1];
        EXPECT(redist_execute_fields(h, NULL, outs, res), REDIST_SUCCESS, NULL);
        TRUE(res[0] == out[0] && res[1] == engine1 && res[2] == out[2]);
        ALL_FIELDS_OK(out_c, 0);
        for (int it = 0; it < 3; it++) /* alternating out= and engine-owned results */
            EXPECT(redist_execute_fields(h, NULL, it % 2 ? NULL : outs, res), REDIST_SUCCESS, NULL);
        ALL_FIELDS_OK(out_c, 0);
        /* two fields written into the same bytes: refused on every rank */
        void *same[NF] = {NULL, out[1], out[1]};
        EXPECT(redist_execute_fields(h, NULL, same, res), REDIST_ERROR_INVALID_VALUE,
               "field 2's out= overlaps field 1's");
    }

    /* --- rebinding every field (checked), back (unchecked), one field (checked, unchecked) ------ */
    EXPECT(redist_reset_operands(h, a2), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, 1000);
    EXPECT(redist_reset_operands_unchecked(h, a), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, out, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, 0);
    EXPECT(redist_reset_operand_field(h, 1, a2[1]), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, f == 1 ? 1000 : 0);
    EXPECT(redist_reset_operand_field_unchecked(h, 1, a[1]), REDIST_SUCCESS, NULL);
    EXPECT(redist_reset_operand_field_unchecked(h, 2, a2[2]), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, f == 2 ? 1000 : 0);
    EXPECT(redist_reset_operand_field_unchecked(h, 2, a[2]), REDIST_SUCCESS, NULL);
    EXPECT(redist_reset_operand_field_unchecked(h, NF, a[0]), REDIST_ERROR_INVALID_VALUE, "field must be in 0..2");
    EXPECT(redist_reset_operand_field_unchecked(h, -1, a[0]), REDIST_ERROR_INVALID_VALUE, "got -1");

    /* --- strided outs: field 0 into the interior of a ghosted (M + 2) x (bn + 2) array, field 2
           into a row-reversed view, field 1 its engine-owned result (its strides are ignored) ---- */
    {
        int64_t gw = bn + 2, st[NF * 2] = {gw, 1, -7, -7, -bn, 1}, ghost = 0;
        const int64_t st0[2] = {gw, 1}, st2[2] = {-bn, 1};
        double *ghosted = malloc((M + 2) * gw * sizeof(double));
        int16_t *flip = malloc((M * bn + 1) * sizeof(int16_t));
        for (int64_t k = 0; k < (M + 2) * gw; k++)
            ghosted[k] = -1.0;
        void *outs[NF] = {ghosted + gw + 1, NULL, flip + (M - 1) * bn};
        EXPECT(redist_execute_fields_strided(h, NULL, outs, st, res), REDIST_SUCCESS, NULL);
        TRUE(res[0] == outs[0] && res[2] == outs[2]);
        TRUE(wrong(0, res[0], st0, olo[1], bn, 0) == 0);
        TRUE(wrong(1, res[1], out_c, olo[1], bn, 0) == 0);
        TRUE(wrong(2, res[2], st2, olo[1], bn, 0) == 0);
        for (int64_t i = 0; i < M + 2; i++)
            for (int64_t j = 0; j < gw; j++)
                ghost += (i == 0 || i == M + 1 || j == 0 || j == gw - 1) && ghosted[i * gw + j] != -1.0;
        TRUE(ghost == 0);
        EXPECT(redist_execute_fields_strided(h, NULL, out, NULL, res), REDIST_SUCCESS, NULL); /* NULL: dense */
        ALL_FIELDS_OK(out_c, 0);
        free(ghosted);
        free(flip);
    }

    /* --- the one-array functions refuse a fields handle, the fields functions a one-array one
           (local, like a bad handle: the same on every rank) --------------------------------- */
    EXPECT(redist_execute(h, NULL, NULL, res), REDIST_ERROR_INVALID_VALUE, "redist_create_fields");
    EXPECT(redist_execute_strided(h, NULL, out[0], out_c, res), REDIST_ERROR_INVALID_VALUE, "redist_create_fields");
    EXPECT(redist_reset_operand(h, a[0]), REDIST_ERROR_INVALID_VALUE, "redist_create_fields");
    EXPECT(redist_reset_operand_unchecked(h, a[0]), REDIST_ERROR_INVALID_VALUE, "redist_create_fields");
    EXPECT(redist_create(&hs, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a[0]),
           REDIST_SUCCESS, NULL);
    EXPECT(redist_get_nfields(hs, &nf), REDIST_SUCCESS, NULL);
    TRUE(nf == 0);
    EXPECT(redist_plan(hs, NULL), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(hs, NULL, NULL, res), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_execute_fields_strided(hs, NULL, out, NULL, res), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_reset_operands(hs, a), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_reset_operands_unchecked(hs, a), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_reset_operand_field(hs, 0, a[0]), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_reset_operand_field_unchecked(hs, 0, a[0]), REDIST_ERROR_INVALID_VALUE, "one array");
    EXPECT(redist_execute(hs, NULL, NULL, res), REDIST_SUCCESS, NULL); /* and both still work */
    TRUE(wrong(0, res[0], out_c, olo[1], bn, 0) == 0);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, 0);
    EXPECT(redist_free(hs), REDIST_SUCCESS, NULL);
    EXPECT(redist_get_nfields(hs, &nf), REDIST_ERROR_INVALID_STATE, "freed");
    EXPECT(redist_get_nfields(h, NULL), REDIST_ERROR_INVALID_VALUE, "NULL");

    /* --- release every field: one field cannot come back alone; every field can ------------- */
    EXPECT(redist_release_operand(h), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_ERROR_INVALID_STATE, "released");
    EXPECT(redist_reset_operand_field(h, 0, a[0]), REDIST_ERROR_INVALID_STATE, "every field");
    EXPECT(redist_reset_operands(h, a2), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    ALL_FIELDS_OK(out_c, 1000);
    EXPECT(redist_free(h), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_ERROR_INVALID_STATE, "freed");

    /* --- per-field operand strides and a column-major result: field 0 is the interior of a
           ghosted (am + 2) x (N + 2) array, fields 1 and 2 dense C (an empty box passes NULL) -- */
    {
        int64_t ld = N + 2, st[NF * 2] = {ld, 1, N, 1, N, 1};
        double *pad = calloc((am + 2) * ld, sizeof(double));
        void *ops[NF] = {pad + ld + 1, a[1], a[2]};
        redist_options_t o;
        for (int64_t i = 0; i < am; i++)
            for (int64_t j = 0; j < N; j++)
                pad[(i + 1) * ld + j + 1] = val(0, lo[0] + i, j, 0);
        redist_options_init(&o);
        o.order = REDIST_ORDER_F;
        o.host_method = REDIST_HOST_METHOD_DATATYPE;
        EXPECT(redist_create_fields(&h, NF, 2, lo, hi, st, olo, ohi, SIZES, REDIST_MEMORY_HOST, am ? ops : NULL, &o),
               REDIST_SUCCESS, NULL);
        EXPECT(redist_plan(h, NULL), REDIST_SUCCESS, NULL);
        EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
        ALL_FIELDS_OK(out_f, 0);
        EXPECT(redist_execute_fields(h, NULL, out, res), REDIST_SUCCESS, NULL); /* out= dense F too */
        ALL_FIELDS_OK(out_f, 0);
        EXPECT(redist_free(h), REDIST_SUCCESS, NULL);
        free(pad);
    }

    /* --- one field is a fields handle too; redist_finalize frees live fields handles ---------- */
    EXPECT(redist_create_fields(&h, 1, 2, lo, hi, NULL, olo, ohi, &SIZES[1], REDIST_MEMORY_HOST, &a[1], NULL),
           REDIST_SUCCESS, NULL);
    EXPECT(redist_get_nfields(h, &nf), REDIST_SUCCESS, NULL);
    TRUE(nf == 1);
    EXPECT(redist_plan(h, NULL), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_SUCCESS, NULL);
    TRUE(wrong(1, res[0], out_c, olo[1], bn, 0) == 0);
    EXPECT(redist_execute(h, NULL, NULL, res), REDIST_ERROR_INVALID_VALUE, "redist_create_fields");
    EXPECT(redist_finalize(), REDIST_SUCCESS, NULL);
    EXPECT(redist_execute_fields(h, NULL, NULL, res), REDIST_ERROR_INVALID_STATE, "freed");

    for (int f = 0; f < NF; f++) {
        free(a[f]);
        free(a2[f]);
        free(out[f]);
    }
    if (nfail) {
        printf("rank %d/%d: %d of %d fields checks FAILED\n", rank, nranks, nfail, nchecks);
        return 1;
    }
    printf("rank %d/%d: %d fields checks passed\n", rank, nranks, nchecks);
    return 0;
}
