/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_execute.c: per-call cost of the C path (perf/bench_cabi.py compares it with Python).
 * One process, a tiny host problem (the same box in and out: a local copy), so the time is
 * the call path, not the data movement. Prints "name us_per_call" lines, best of TRIALS.
 * Usage: bench_execute [ITERS] [TRIALS] [EDGE] [host|device]
 * "device" (built with -DREDIST_BENCH_CUDA and libcudart): cudaMalloc'd operands, CUDA execution;
 * every trial ends with cudaDeviceSynchronize, so keep ITERS below the launch queue depth.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef REDIST_BENCH_CUDA
#include <cuda_runtime.h>
#define DRAIN() cudaDeviceSynchronize()
#else
#define DRAIN() ((void)0)
#endif

#include "redist.h"

#define CHECK(call)                                                                                \
    do {                                                                                           \
        redist_status_t st_ = (call);                                                              \
        if (st_ != REDIST_SUCCESS) {                                                               \
            fprintf(stderr, "%s failed: %s\n  %s\n", #call, redist_get_error_string(st_),         \
                    redist_get_last_error());                                                      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

#define TIME(name, stmt)                                                                           \
    do {                                                                                           \
        double best = 1e30;                                                                        \
        for (int t_ = 0; t_ < trials; t_++) {                                                      \
            double t0 = now();                                                                     \
            for (long i_ = 0; i_ < iters; i_++)                                                    \
                stmt;                                                                              \
            double dt = (now() - t0) / iters;                                                      \
            DRAIN();                                                      \
            if (dt < best)                                                                         \
                best = dt;                                                                         \
        }                                                                                          \
        printf("%s %.4f\n", name, best * 1e6);                                                     \
    } while (0)

int main(int argc, char **argv)
{
    long iters = argc > 1 ? atol(argv[1]) : 100000;
    int trials = argc > 2 ? atoi(argv[2]) : 5;
    int64_t edge = argc > 3 ? atoll(argv[3]) : 4;
    int device = argc > 4 && strcmp(argv[4], "device") == 0;
    int64_t lo[2] = {0, 0}, hi[2] = {edge, edge};
    double *a, *b, *out = calloc(edge * edge, sizeof(double));
    void *res = NULL;
    int32_t rank, nranks;
    redist_t h;

    if (device) {
#ifdef REDIST_BENCH_CUDA
        size_t bytes = (size_t)(edge * edge) * sizeof(double);
        if (cudaMalloc((void **)&a, bytes) != cudaSuccess || cudaMalloc((void **)&b, bytes) != cudaSuccess) {
            fprintf(stderr, "cudaMalloc failed\n");
            return 1;
        }
        cudaMemset(a, 0, bytes);
        cudaMemset(b, 0, bytes);
#else
        fprintf(stderr, "built without REDIST_BENCH_CUDA\n");
        return 1;
#endif
    } else {
        a = calloc(edge * edge, sizeof(double));
        b = calloc(edge * edge, sizeof(double));
    }
    CHECK(redist_initialize(REDIST_COMM_WORLD, device ? REDIST_DEVICE_AUTO : REDIST_DEVICE_NONE));
    CHECK(redist_create(&h, 2, lo, hi, NULL, lo, hi, sizeof(double), REDIST_ORDER_C,
                        device ? REDIST_MEMORY_DEVICE : REDIST_MEMORY_HOST, a));
    CHECK(redist_plan(h, NULL));
    for (long i = 0; i < iters / 10; i++) /* warm up */
        CHECK(redist_execute(h, NULL, NULL, &res));
    DRAIN();

    TIME("execute", redist_execute(h, NULL, NULL, &res));
    if (!device) /* a device out= must be symmetric: not part of this micro-benchmark */
        TIME("execute_out", redist_execute(h, NULL, out, &res));
    TIME("reset_operand_unchecked", redist_reset_operand_unchecked(h, (i_ & 1) ? a : b));
    TIME("bridge_comm_rank", redist_comm_rank(&rank, &nranks));
    TIME("c_only_get_error_string", (void)redist_get_error_string(REDIST_SUCCESS));

    CHECK(redist_free(h));
    CHECK(redist_finalize());
#ifdef REDIST_BENCH_CUDA
    if (device) {
        cudaFree(a);
        cudaFree(b);
    } else
#endif
    {
        free(a);
        free(b);
    }
    free(out);
    return 0;
}
