/* SPDX-License-Identifier: Apache-2.0 */
/*
 * device_loop.c: device memory from C, and redist's CUDA graph inside the application's graph.
 *
 * Each process holds a Slab.X box of a 3-D array in cudaMalloc'd memory (no symmetric heap
 * needed for operands) and redistributes it to Slab.Y on its GPU:
 *
 *   1. redist_execute on a stream -> the engine-owned result (device memory), checked on host;
 *   2. redist_graph exports the CUgraph that execute launches; the application puts it in
 *      its own graph as a child node between an upload and a download memcpy node:
 *
 *          [memcpy host->d_in] -> [child: redist] -> [memcpy result->host]
 *
 *      and launches that graph every step with new input, checking every element;
 *   3. the application captures a whole step on its stream (cudaStreamBeginCapture): an upload,
 *      redist_execute (recorded into the capture: redist's kernel nodes, nothing runs), a
 *      download; it instantiates and launches the step; after redist_reset_operand to another
 *      device array, redist_update_graph_exec makes the captured copy read the new operand;
 *   4. redist_execute with `out` in cudaMalloc'd memory (no symmetric heap either): the peers store
 *      straight into it through CUDA IPC mappings of the allocation (made on first use, cached);
 *      then that memory is freed and another cudaMalloc'd (maybe at the same address): redist maps
 *      the new allocation (its buffer id changed), never the old one.
 *
 * Needs CUDA (headers + libcudart) and a GPU per process; without the headers this file
 * compiles to a stub that says so. Device: the launcher's local rank (MPICH, Open MPI, Slurm) modulo
 * the visible GPUs, passed to redist_initialize and cudaSetDevice alike.
 *
 *   cc device_loop.c -I$CUDA_HOME/include -L$CUDA_HOME/lib64 -lcudart \
 *      $(python -m redist.cabi flags --out build --cflags --libs) -o device_loop
 *   (with nvcc: nvcc device_loop.c -Ibuild -Lbuild -lredist -Xlinker -rpath,$PWD/build -o device_loop)
 *   mpiexec -n 2 ./device_loop [NX NY NZ STEPS]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "redist.h"

#if defined(__has_include) && !defined(REDIST_EXAMPLE_NO_CUDA)
#if __has_include(<cuda_runtime.h>)
#define REDIST_HAVE_CUDA 1
#endif
#endif

#ifndef REDIST_HAVE_CUDA
int main(void)
{
    printf("device_loop: built without CUDA headers (cuda_runtime.h); nothing to run\n");
    return 0;
}
#else
#include <cuda_runtime.h>

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

#define CUDA_CHECK(call)                                                                           \
    do {                                                                                           \
        cudaError_t e_ = (call);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

/* Count elements of the Slab.Y result (C order) that differ from value(global index, step). */
static long check_result(const double *res, const int64_t lo[3], const int64_t hi[3], const int64_t gs[3], int step)
{
    long bad = 0;
    for (int64_t i = lo[0]; i < hi[0]; i++)
        for (int64_t j = lo[1]; j < hi[1]; j++)
            for (int64_t k = lo[2]; k < hi[2]; k++, res++)
                bad += *res != (double)((i * gs[1] + j) * gs[2] + k) + 1e6 * step;
    return bad;
}

int main(int argc, char **argv)
{
    int64_t gs[3] = {64, 48, 40};
    int steps = 10, ndev = 0, device;
    /* the launcher's local rank: MPICH/Hydra, Open MPI, Slurm */
    const char *local = getenv("MPI_LOCALRANKID");
    if (!local)
        local = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    if (!local)
        local = getenv("SLURM_LOCALID");
    for (int a = 1; a < argc && a <= 3; a++)
        gs[a - 1] = atoll(argv[a]);
    if (argc > 4)
        steps = atoi(argv[4]);

    CUDA_CHECK(cudaGetDeviceCount(&ndev));
    device = (local ? atoi(local) : 0) % ndev;
    CUDA_CHECK(cudaSetDevice(device));
    CHECK(redist_initialize(REDIST_COMM_WORLD, device));
    CHECK(redist_comm_rank(&rank, &nranks));

    int64_t xlo[3] = {0, 0, 0}, xhi[3] = {0, gs[1], gs[2]};
    int64_t ylo[3] = {0, 0, 0}, yhi[3] = {gs[0], 0, gs[2]};
    split(gs[0], nranks, rank, &xlo[0], &xhi[0]);
    split(gs[1], nranks, rank, &ylo[1], &yhi[1]);
    size_t nin = (size_t)((xhi[0] - xlo[0]) * gs[1] * gs[2]);
    size_t nout = (size_t)(gs[0] * (yhi[1] - ylo[1]) * gs[2]);

    double *h_in, *h_out, *d_in;
    void *d_res = NULL;
    cudaStream_t stream;
    CUDA_CHECK(cudaMallocHost((void **)&h_in, (nin + 1) * sizeof(double)));
    CUDA_CHECK(cudaMallocHost((void **)&h_out, (nout + 1) * sizeof(double)));
    CUDA_CHECK(cudaMalloc((void **)&d_in, (nin + 1) * sizeof(double)));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (size_t n = 0; n < nin; n++)
        h_in[n] = (double)(xlo[0] * gs[1] * gs[2] + (int64_t)n);
    CUDA_CHECK(cudaMemcpy(d_in, h_in, nin * sizeof(double), cudaMemcpyHostToDevice));

    redist_t h;
    CHECK(redist_create(&h, 3, xlo, xhi, NULL, ylo, yhi, sizeof(double), REDIST_ORDER_C, REDIST_MEMORY_DEVICE,
                        d_in));
    CHECK(redist_plan(h, stream));

    /* 1. plain execute on the stream: the engine-owned result stays valid until the next execute */
    CHECK(redist_execute(h, stream, NULL, &d_res));
    CUDA_CHECK(cudaMemcpyAsync(h_out, d_res, nout * sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    long bad = check_result(h_out, ylo, yhi, gs, 0);

    /* 2. redist's graph as a child node of the application's graph */
    void *child = NULL;
    cudaGraph_t app;
    cudaGraphNode_t up, mid, down;
    cudaGraphExec_t exec;
    CHECK(redist_graph(h, stream, &child));
    CUDA_CHECK(cudaGraphCreate(&app, 0));
    CUDA_CHECK(cudaGraphAddMemcpyNode1D(&up, app, NULL, 0, d_in, h_in, nin * sizeof(double),
                                        cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaGraphAddChildGraphNode(&mid, app, &up, 1, (cudaGraph_t)child)); /* cloned: redist keeps its graph */
    CUDA_CHECK(cudaGraphAddMemcpyNode1D(&down, app, &mid, 1, h_out, d_res, nout * sizeof(double),
                                        cudaMemcpyDeviceToHost));
    CUDA_CHECK(cudaGraphInstantiate(&exec, app, 0));
    for (int s = 1; s <= steps; s++) {
        for (size_t n = 0; n < nin; n++)
            h_in[n] = (double)(xlo[0] * gs[1] * gs[2] + (int64_t)n) + 1e6 * s;
        CUDA_CHECK(cudaGraphLaunch(exec, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        bad += check_result(h_out, ylo, yhi, gs, s);
    }

    CUDA_CHECK(cudaGraphExecDestroy(exec));
    CUDA_CHECK(cudaGraphDestroy(app));

    /* 3. the whole step captured by the application */
    cudaGraph_t step_graph;
    cudaGraphExec_t step_exec;
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    CUDA_CHECK(cudaMemcpyAsync(d_in, h_in, nin * sizeof(double), cudaMemcpyHostToDevice, stream));
    CHECK(redist_execute(h, stream, NULL, &d_res)); /* recorded into the capture */
    CUDA_CHECK(cudaMemcpyAsync(h_out, d_res, nout * sizeof(double), cudaMemcpyDeviceToHost, stream));
    CUDA_CHECK(cudaStreamEndCapture(stream, &step_graph));
    CUDA_CHECK(cudaGraphInstantiate(&step_exec, step_graph, 0));
    for (int s = steps + 1; s <= 2 * steps; s++) {
        for (size_t n = 0; n < nin; n++)
            h_in[n] = (double)(xlo[0] * gs[1] * gs[2] + (int64_t)n) + 1e6 * s;
        CUDA_CHECK(cudaGraphLaunch(step_exec, stream));
        CUDA_CHECK(cudaStreamSynchronize(stream));
        bad += check_result(h_out, ylo, yhi, gs, s);
    }
    /* rebind: the captured copy keeps reading d_in until redist_update_graph_exec */
    double *d_in2;
    int32_t ncopies = 0, s2 = 2 * steps + 1;
    CUDA_CHECK(cudaMalloc((void **)&d_in2, (nin + 1) * sizeof(double)));
    for (size_t n = 0; n < nin; n++)
        h_in[n] = (double)(xlo[0] * gs[1] * gs[2] + (int64_t)n) + 1e6 * s2;
    CUDA_CHECK(cudaMemcpy(d_in2, h_in, nin * sizeof(double), cudaMemcpyHostToDevice));
    for (size_t n = 0; n < nin; n++) /* what the captured upload still writes into d_in */
        h_in[n] = -1.0;
    CHECK(redist_reset_operand(h, d_in2));
    CHECK(redist_update_graph_exec(h, step_graph, step_exec, &ncopies));
    bad += ncopies != 1;
    CUDA_CHECK(cudaGraphLaunch(step_exec, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));
    bad += check_result(h_out, ylo, yhi, gs, s2);
    CUDA_CHECK(cudaGraphExecDestroy(step_exec));
    CUDA_CHECK(cudaGraphDestroy(step_graph));
    CHECK(redist_release_captured(h)); /* no graph holds a copy any more: redist_free may free it all */

    /* 4. out= in ordinary device memory (cudaMalloc), twice, the second after a free + malloc */
    int s4 = s2;
    for (int round = 0; round < 2; round++) {
        double *d_out;
        CUDA_CHECK(cudaMalloc((void **)&d_out, (nout + 1) * sizeof(double)));
        CUDA_CHECK(cudaMemsetAsync(d_out, 0, nout * sizeof(double), stream));
        for (int k = 0; k < steps; k++) {
            void *written = NULL;
            CHECK(redist_execute(h, stream, d_out, &written)); /* the peers store into d_out */
            bad += written != (void *)d_out;
            CUDA_CHECK(cudaMemcpyAsync(h_out, d_out, nout * sizeof(double), cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            bad += check_result(h_out, ylo, yhi, gs, s4);
        }
        CUDA_CHECK(cudaDeviceSynchronize());
        CUDA_CHECK(cudaFree(d_out)); /* not bound any more once the next call binds another out */
        if (round == 0) { /* a new operand value, so stale data would show */
            s4 = s2 + 1;
            for (size_t n = 0; n < nin; n++)
                h_in[n] = (double)(xlo[0] * gs[1] * gs[2] + (int64_t)n) + 1e6 * s4;
            CUDA_CHECK(cudaMemcpy(d_in2, h_in, nin * sizeof(double), cudaMemcpyHostToDevice));
        }
    }

    CHECK(redist_free(h));
    CHECK(redist_finalize());
    CUDA_CHECK(cudaFree(d_in));
    CUDA_CHECK(cudaFree(d_in2));
    CUDA_CHECK(cudaFreeHost(h_in));
    CUDA_CHECK(cudaFreeHost(h_out));
    CUDA_CHECK(cudaStreamDestroy(stream));
    if (bad) {
        printf("rank %d/%d: FAILED, %ld wrong elements\n", rank, nranks, bad);
        return 1;
    }
    printf("rank %d/%d: OK on GPU %d, execute + %d child-graph launches + %d launches of a captured step (and one "
           "after redist_update_graph_exec), %d executes into cudaMalloc'd out (two allocations), every element of "
           "%lld x %lld x %lld checked\n",
           rank, nranks, device, steps, steps, 2 * steps, (long long)gs[0], (long long)gs[1], (long long)gs[2]);
    return 0;
}
#endif
