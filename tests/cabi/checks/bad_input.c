/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bad_input.c: one misuse of the C API per run, usually on the last rank only.
 * Usage: mpiexec -n P bad_input CASE. Every rank prints
 *     rank r: status S: <last error>
 *     rank r: data ok|wrong|-
 * and tests/cabi/test_bad_input_c.py checks the status (the same on every rank, or the
 * documented local outcome), the message (it names the rank at fault) and the data.
 * Global array: M x N doubles, element (i, j) = i * N + j; rows split -> columns split.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "redist.h"

static int rank = 0, nranks = 1;
static int64_t M = 9, N = 7;

static void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

static int last(void) { return rank == nranks - 1; }

/* the default problem: this rank's rows and columns, its operand and an out= buffer */
static int64_t lo[2], hi[2], olo[2], ohi[2], am, bn;
static double *a, *out, *out2;
/* a second field for redist_create_fields: floats, element (i, j) = -(i * N + j) - 0.5 */
static float *b, *bout;

static void setup(void)
{
    lo[1] = 0;
    hi[1] = N;
    olo[0] = 0;
    ohi[0] = M;
    split(M, nranks, rank, &lo[0], &hi[0]);
    split(N, nranks, rank, &olo[1], &ohi[1]);
    am = hi[0] - lo[0];
    bn = ohi[1] - olo[1];
    a = malloc((am * N + 1) * sizeof(double));
    out = malloc((M * bn + 1) * sizeof(double));
    out2 = malloc((M * bn + 1) * sizeof(double));
    b = malloc((am * N + 1) * sizeof(float));
    bout = malloc((M * bn + 1) * sizeof(float));
    for (int64_t i = 0; i < am; i++)
        for (int64_t j = 0; j < N; j++) {
            a[i * N + j] = (double)((lo[0] + i) * N + j);
            b[i * N + j] = -(float)((lo[0] + i) * N + j) - 0.5f;
        }
}

/* 1: the result holds this rank's columns (C order), 0 otherwise */
static int columns_ok(const double *res)
{
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < bn; j++)
            if (res[i * bn + j] != (double)(i * N + olo[1] + j))
                return 0;
    return 1;
}

/* 1: both fields' results hold this rank's columns, 0 otherwise */
static int fields_ok(void *const *res)
{
    const float *r1 = res[1];
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < bn; j++)
            if (r1[i * bn + j] != -(float)(i * N + olo[1] + j) - 0.5f)
                return 0;
    return columns_ok(res[0]);
}

#define RUN(call) (st = (call))

/* With BAD_INPUT_WARM set, a planned handle first runs good calls into its results and into out=
   (bout for the second field), each twice: the good ranks then replay them (compiled replays) when
   the case's call comes. */
static void warm(redist_t h, int fields)
{
    void *res[2], *outs[2] = {out, bout};
    if (getenv("BAD_INPUT_WARM") == NULL)
        return;
    for (int it = 0; it < 4; it++)
        if (fields)
            redist_execute_fields(h, NULL, it < 2 ? NULL : outs, res);
        else
            redist_execute(h, NULL, it < 2 ? NULL : out, res);
}

/* The fields cases ("fields_..."): {a, b} (double, float) in one exchange, one thing wrong. */
static redist_status_t fields_case(const char *name, redist_t *h, const char **data)
{
    int64_t sizes[3] = {8, 4, 4};
    void *ops[3] = {a, b, b}, *outs[2] = {NULL, NULL}, *res[2] = {NULL, NULL};
    int32_t nfields = 2;
    redist_status_t st;
    int wrong_here = last() && strstr(name, "_last") != NULL;

    if (wrong_here && strcmp(name, "fields_nfields_differs_last") == 0)
        nfields = 3;
    if (wrong_here && strcmp(name, "fields_nfields_zero_last") == 0)
        nfields = 0;
    if (wrong_here && strcmp(name, "fields_nfields_negative_last") == 0)
        nfields = -2;
    if (wrong_here && strcmp(name, "fields_create_operand_null_last") == 0)
        ops[1] = NULL;
    if (wrong_here && strcmp(name, "fields_item_size_differs_last") == 0)
        sizes[1] = 8;
    if (wrong_here && strcmp(name, "fields_item_size_zero_last") == 0)
        sizes[1] = 0;
    int null_sizes = wrong_here && strcmp(name, "fields_sizes_null_last") == 0;
    int null_ops = wrong_here && strcmp(name, "fields_operands_null_last") == 0;
    RUN(redist_create_fields(h, nfields, 2, lo, hi, NULL, olo, ohi, null_sizes ? NULL : sizes, REDIST_MEMORY_HOST,
                             null_ops ? NULL : ops, NULL));
    if (st != REDIST_SUCCESS || RUN(redist_plan(*h, NULL)) != REDIST_SUCCESS)
        return st;
    warm(*h, 1);
    ops[1] = wrong_here ? NULL : b; /* for the rebinding cases */
    if (strcmp(name, "fields_reset_operands_null_last") == 0)
        return redist_reset_operands(*h, ops);
    if (strcmp(name, "fields_reset_operands_unchecked_null_last") == 0) /* local by design */
        return redist_reset_operands_unchecked(*h, ops);
    if (strcmp(name, "fields_reset_field_out_of_range_last") == 0)
        return redist_reset_operand_field(*h, wrong_here ? 2 : 1, b);
    if (strcmp(name, "fields_reset_field_null_last") == 0)
        return redist_reset_operand_field(*h, 1, ops[1]);
    if (strcmp(name, "fields_after_release_last") == 0 && wrong_here)
        redist_release_operand(*h);
    if (strcmp(name, "fields_out_aliases_operand_last") == 0)
        outs[1] = wrong_here ? (void *)a : (void *)bout;
    if (strcmp(name, "fields_one_array_function") == 0) /* every rank: a fields handle to redist_execute */
        return redist_execute(*h, NULL, NULL, res);
    for (int it = 0; it < 4; it++) {
        if (strcmp(name, "fields_out_some_ranks_ok") == 0) { /* out= on rank 0 only, every other step */
            outs[0] = rank == 0 && it % 2 ? out : NULL;
            outs[1] = rank == 0 && it % 2 ? bout : NULL;
        }
        if (RUN(redist_execute_fields(*h, NULL, outs, res)) != REDIST_SUCCESS)
            return st;
        if (!fields_ok(res) || (outs[0] != NULL && res[0] != outs[0])) {
            *data = "wrong";
            return st;
        }
    }
    *data = "ok";
    return st;
}

static redist_status_t create(redist_t *h) /* the plain problem */
{
    return redist_create(h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a);
}

static redist_status_t planned(redist_t *h)
{
    redist_status_t st = create(h);
    if (st == REDIST_SUCCESS && (st = redist_plan(*h, NULL)) == REDIST_SUCCESS)
        warm(*h, 0);
    return st;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "";
    redist_status_t st = REDIST_SUCCESS;
    const char *data = "-";
    redist_t h = NULL;
    void *res = NULL;

    if (strcmp(name, "plan_before_initialize") == 0) {
        RUN(redist_plan((redist_t)1, NULL));
        printf("rank 0: status %d: %s\nrank 0: data -\n", (int)st, redist_get_last_error());
        return 0; /* no MPI, no rank: the test runs it on one process */
    }
    if (strcmp(name, "initialize_bad_device") == 0) {
        RUN(redist_initialize(REDIST_COMM_WORLD, -9));
        printf("rank 0: status %d: %s\nrank 0: data -\n", (int)st, redist_get_last_error());
        return 0;
    }
    if (redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE) != REDIST_SUCCESS) {
        fprintf(stderr, "initialize failed: %s\n", redist_get_last_error());
        return 2;
    }
    redist_comm_rank(&rank, &nranks);
    if (strcmp(name, "out_null_on_an_empty_box_ok") == 0)
        N = nranks - 1; /* the last rank gets no column */
    setup();

    if (strcmp(name, "create_null_handle_last") == 0) {
        RUN(redist_create(last() ? NULL : &h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_ndim_zero_last") == 0) {
        RUN(redist_create(&h, last() ? 0 : 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_ndim_huge_last") == 0) {
        RUN(redist_create(&h, last() ? 100 : 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_lower_null_last") == 0) {
        RUN(redist_create(&h, 2, last() ? NULL : lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_item_size_zero_last") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, last() ? 0 : 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_item_size_negative_last") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, last() ? -8 : 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_operand_null_last") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, last() ? NULL : a));
    } else if (strcmp(name, "create_order_garbage_last") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, last() ? (redist_order_t)7 : REDIST_ORDER_C,
                          REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_memory_garbage_last") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C,
                          last() ? (redist_memory_t)9 : REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_order_differs_last") == 0) {
        int64_t st_c[2] = {N, 1};
        RUN(redist_create(&h, 2, lo, hi, st_c, olo, ohi, 8, last() ? REDIST_ORDER_F : REDIST_ORDER_C,
                          REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_box_negative_last") == 0) {
        int64_t bad[2] = {last() ? -1 : lo[0], 0};
        RUN(redist_create(&h, 2, bad, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, a));
    } else if (strcmp(name, "create_box_overlap_last") == 0) {
        int64_t bad[2] = {last() ? 0 : lo[0], 0};
        double *big = calloc(M * N + 1, sizeof(double));
        RUN(redist_create(&h, 2, bad, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, last() ? big : a));
    } else if (strncmp(name, "create_ex_", 10) == 0) {
        redist_options_t o;
        redist_options_init(&o);
        if (strcmp(name, "create_ex_struct_size_last") == 0 && last())
            o.struct_size -= 4;
        int64_t gs[2] = {M, N}, gs_wrong[2] = {M, N + 1};
        if (strcmp(name, "create_ex_version_last") == 0 && last())
            o.version = 99;
        /* every rank passes global_shape, the last a wrong one (a right one, a wrong one on every rank
           and a version-2 struct: api_checks.c) */
        if (strcmp(name, "create_ex_global_shape_last") == 0)
            o.global_shape = last() ? gs_wrong : gs;
        if (strcmp(name, "create_ex_v1_struct_ok") == 0) { /* a program built against version 1 */
            o.struct_size = offsetof(redist_options_t, result_ndim);
            o.version = 1;
        }
        if (strcmp(name, "create_ex_result_order_last") == 0 && last()) {
            o.result_ndim = 2;
            o.result_order[0] = o.result_order[1] = 0;
        }
        if (strcmp(name, "create_ex_result_ndim_last") == 0 && last()) {
            o.result_ndim = 3;
            o.result_order[0] = 2, o.result_order[1] = 1, o.result_order[2] = 0;
        }
        if (strcmp(name, "create_ex_allow_overlap_garbage_last") == 0 && last())
            o.allow_overlap = 5;
        if (strcmp(name, "create_ex_allow_overlap_differs_last") == 0 && last())
            o.allow_overlap = 1;
        if (strcmp(name, "create_ex_transport_garbage_last") == 0 && last())
            o.transport = 11;
        if (strcmp(name, "create_ex_signal_last") == 0 && last())
            o.signal = 7;
        if (strcmp(name, "create_ex_tune_garbage_last") == 0 && last())
            o.tune = 3;
        if (strcmp(name, "create_ex_tune_measure_ok") == 0) {
            o.tune = REDIST_TUNE_MEASURE;
            o.tune_out = 1;
            o.tune_budget = 2.0;
        }
        if (strcmp(name, "create_ex_v2_struct_ok") == 0) { /* a program built against version 2 */
            o.struct_size = (offsetof(redist_options_t, allow_overlap) + sizeof(int32_t) + 7) / 8 * 8;
            o.version = 2;
            o.tune = 99; /* past a version-2 struct: never read */
        }
        RUN(redist_create_ex(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_MEMORY_HOST, a,
                             strcmp(name, "create_ex_null_options_ok") == 0 ? NULL : &o));
        if (st == REDIST_SUCCESS && RUN(redist_plan(h, NULL)) == REDIST_SUCCESS &&
            RUN(redist_execute(h, NULL, NULL, &res)) == REDIST_SUCCESS)
            data = columns_ok(res) ? "ok" : "wrong";
    } else if (strncmp(name, "fields_", 7) == 0) {
        st = fields_case(name, &h, &data);
    } else if (strcmp(name, "execute_fields_one_array_handle") == 0) { /* every rank */
        void *fres[2];
        planned(&h);
        RUN(redist_execute_fields(h, NULL, NULL, fres));
    } else if (strcmp(name, "reset_operands_one_array_handle") == 0) { /* every rank */
        void *ops[2] = {a, b};
        planned(&h);
        RUN(redist_reset_operands(h, ops));
    } else if (strcmp(name, "create_device_memory_without_gpu") == 0) {
        RUN(redist_create(&h, 2, lo, hi, NULL, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_DEVICE, a));
    } else if (strcmp(name, "execute_garbage_handle") == 0) {
        RUN(redist_execute((redist_t)0xdeadbeef, NULL, NULL, &res));
    } else if (strcmp(name, "execute_null_handle") == 0) {
        RUN(redist_execute(NULL, NULL, NULL, &res));
    } else if (strcmp(name, "execute_after_free") == 0) {
        planned(&h);
        redist_free(h);
        RUN(redist_execute(h, NULL, NULL, &res));
    } else if (strcmp(name, "execute_before_plan") == 0) {
        create(&h);
        RUN(redist_execute(h, NULL, NULL, &res));
    } else if (strcmp(name, "execute_after_release_last") == 0) {
        planned(&h);
        if (last())
            redist_release_operand(h);
        RUN(redist_execute(h, NULL, NULL, &res));
    } else if (strcmp(name, "out_on_some_ranks_ok") == 0) {
        int good = 1;
        planned(&h);
        for (int it = 0; it < 4 && st == REDIST_SUCCESS; it++) {
            void *o = rank == 0 ? (it % 2 ? out : out2) : NULL;
            if (RUN(redist_execute(h, NULL, o, &res)) == REDIST_SUCCESS)
                good &= columns_ok(res) && (o == NULL || res == o);
        }
        data = good ? "ok" : "wrong";
    } else if (strcmp(name, "out_null_on_an_empty_box_ok") == 0) {
        planned(&h);
        if (RUN(redist_execute(h, NULL, last() ? NULL : out, &res)) == REDIST_SUCCESS)
            data = columns_ok(res) ? "ok" : "wrong";
    } else if (strcmp(name, "out_aliases_operand_last") == 0) {
        planned(&h);
        RUN(redist_execute(h, NULL, last() ? (void *)a : (void *)out, &res));
    } else if (strcmp(name, "reset_operand_null_last") == 0) {
        planned(&h);
        RUN(redist_reset_operand(h, last() ? NULL : a));
    } else if (strcmp(name, "reset_operand_unchecked_null_last") == 0) { /* local by design */
        planned(&h);
        RUN(redist_reset_operand_unchecked(h, last() ? NULL : a));
    } else if (strcmp(name, "free_twice") == 0) {
        planned(&h);
        redist_free(h);
        RUN(redist_free(h));
    } else if (strcmp(name, "negative_strides_ok") == 0) {
        /* the rows in memory backwards: the operand pointer is element (0, 0), strides {-N, 1} */
        int64_t st_r[2] = {-N, 1};
        double *rev = malloc((am * N + 1) * sizeof(double));
        for (int64_t i = 0; i < am; i++)
            memcpy(rev + (am - 1 - i) * N, a + i * N, N * sizeof(double));
        RUN(redist_create(&h, 2, lo, hi, st_r, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST,
                          am ? rev + (am - 1) * N : rev));
        if (st == REDIST_SUCCESS && RUN(redist_plan(h, NULL)) == REDIST_SUCCESS &&
            RUN(redist_execute(h, NULL, NULL, &res)) == REDIST_SUCCESS)
            data = columns_ok(res) ? "ok" : "wrong";
    } else if (strcmp(name, "zero_strides_input_ok") == 0) {
        /* every row of the operand is the same memory (a broadcast view): column j holds j */
        int64_t st_b[2] = {0, 1};
        double row[64];
        for (int64_t j = 0; j < N; j++)
            row[j] = (double)j;
        RUN(redist_create(&h, 2, lo, hi, st_b, olo, ohi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, row));
        if (st == REDIST_SUCCESS && RUN(redist_plan(h, NULL)) == REDIST_SUCCESS &&
            RUN(redist_execute(h, NULL, NULL, &res)) == REDIST_SUCCESS) {
            int good = 1;
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < bn; j++)
                    good &= ((double *)res)[i * bn + j] == (double)(olo[1] + j);
            data = good ? "ok" : "wrong";
        }
    } else if (strcmp(name, "initialize_twice") == 0) {
        RUN(redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE));
    } else if (strcmp(name, "comm_rank_null_ok") == 0) {
        RUN(redist_comm_rank(NULL, NULL));
    } else if (strcmp(name, "symmetric_null_ptr_last") == 0) {
        RUN(redist_allocate_symmetric_memory(last() ? NULL : &res, 64));
    } else if (strcmp(name, "symmetric_negative_size_last") == 0) {
        RUN(redist_allocate_symmetric_memory(&res, last() ? -8 : 64));
    } else if (strcmp(name, "symmetric_free_private_last") == 0) {
        void *mem = NULL;
        redist_allocate_symmetric_memory(&mem, 64);
        RUN(redist_free_symmetric_memory(last() ? (void *)a : mem));
        if (st != REDIST_SUCCESS) /* nothing was freed anywhere: free it now, on every rank */
            data = redist_free_symmetric_memory(mem) == REDIST_SUCCESS ? "ok" : "wrong";
    } else if (strcmp(name, "symmetric_free_twice") == 0) {
        void *mem = NULL;
        redist_allocate_symmetric_memory(&mem, 64);
        redist_free_symmetric_memory(mem);
        RUN(redist_free_symmetric_memory(mem));
    } else if (strcmp(name, "symmetric_out_ok") == 0) { /* the peers store straight into it; replayed */
        void *mem = NULL;
        planned(&h);
        RUN(redist_allocate_symmetric_memory(&mem, (int64_t)(M * bn * sizeof(double))));
        int good = st == REDIST_SUCCESS;
        for (int step = 0; good && step < 4; step++) {
            memset(mem, 0xff, (size_t)(M * bn) * sizeof(double));
            good = redist_execute(h, NULL, mem, &res) == REDIST_SUCCESS && res == mem && columns_ok(mem);
        }
        data = good ? "ok" : "wrong";
        redist_free(h);
        RUN(redist_free_symmetric_memory(mem));
    } else if (strcmp(name, "protected_out_with_a_local_part_last") == 0) {
        /* rows -> rows shifted by 8 (4 KiB rows): each rank keeps most of its rows and receives 32 KiB from the
           previous rank, copied across memories; the last rank's out= turns read-only behind redist's back
           (mprotect): first before any call (the call runs in Python), then after three good calls (replayed) */
        int64_t q = 16, s = 8, W = 512, ilo[2], ihi[2], xlo[2], xhi[2], rows;
        double *in;
        int good = 1;
        ilo[0] = rank * q, ihi[0] = ilo[0] + q, ilo[1] = xlo[1] = 0, ihi[1] = xhi[1] = W;
        xlo[0] = rank == 0 ? 0 : rank * q - s, xhi[0] = rank == nranks - 1 ? nranks * q : (rank + 1) * q - s;
        rows = xhi[0] - xlo[0];
        in = malloc((size_t)(q * W) * sizeof(double));
        for (int64_t i = 0; i < q * W; i++)
            in[i] = (double)(ilo[0] * W + i);
        size_t bytes = (size_t)(rows * W) * sizeof(double);
        for (int replayed = 0; replayed < 2; replayed++) {
            double *o = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            redist_t hh = NULL;
            void *r = NULL;
            redist_create(&hh, 2, ilo, ihi, NULL, xlo, xhi, 8, REDIST_ORDER_C, REDIST_MEMORY_HOST, in);
            redist_plan(hh, NULL);
            for (int step = 0; replayed && step < 3; step++) {
                memset(o, 0xff, bytes);
                good &= redist_execute(hh, NULL, o, &r) == REDIST_SUCCESS && r == o;
                for (int64_t i = 0; good && i < rows * W; i++)
                    good = o[i] == (double)(xlo[0] * W + i);
            }
            if (last())
                mprotect(o, bytes, PROT_READ);
            RUN(redist_execute(hh, NULL, o, &r));
            good &= st == REDIST_ERROR_COMMUNICATION;
            redist_free(hh);
            munmap(o, bytes);
        }
        data = good ? "ok" : "wrong";
        free(in);
    } else if (strcmp(name, "wisdom_import_null_last") == 0) {
        RUN(redist_import_wisdom(last() ? NULL : "/nonexistent/redist-wisdom.json", NULL));
    } else if (strcmp(name, "wisdom_export_null_last") == 0) {
        RUN(redist_export_wisdom(last() ? NULL : "/nonexistent/redist-wisdom.json", NULL)); /* rank 0 writes nothing */
    } else if (strcmp(name, "wisdom_import_missing_ok") == 0) { /* a warning, 0 entries */
        int32_t n = -1;
        RUN(redist_import_wisdom("/nonexistent/redist-wisdom.json", &n));
        data = n == 0 ? "ok" : "wrong";
    } else if (strcmp(name, "wisdom_forget_ok") == 0) {
        RUN(redist_forget_wisdom());
        data = "ok";
    } else if (strcmp(name, "graph_on_host") == 0) {
        void *g = NULL;
        planned(&h);
        RUN(redist_graph(h, NULL, &g));
    } else if (strcmp(name, "update_graph_exec_on_host") == 0) {
        int32_t n = -1;
        planned(&h);
        RUN(redist_update_graph_exec(h, (void *)0x1000, (void *)0x2000, &n));
        data = n == 0 ? "ok" : "wrong";
    } else if (strcmp(name, "release_captured_on_host_ok") == 0) {
        planned(&h);
        RUN(redist_release_captured(h));
    } else if (strcmp(name, "update_graph_exec_null") == 0) {
        planned(&h);
        RUN(redist_update_graph_exec(h, NULL, NULL, NULL));
    } else {
        fprintf(stderr, "unknown case %s\n", name);
        return 2;
    }
    printf("rank %d: status %d: %s\n", rank, (int)st, st ? redist_get_last_error() : "");
    printf("rank %d: data %s\n", rank, data);
    fflush(stdout);
    redist_finalize();
    return 0;
}
