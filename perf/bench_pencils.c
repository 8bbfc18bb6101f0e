/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench_pencils.c: redist's pencil transposes from C, as a Fortran pencil code calls them.
 *
 *   mpicc perf/bench_pencils.c $(python -m redist.cabi flags --out DIR --cflags --libs) -o bench_pencils
 *   mpiexec -n P ./bench_pencils N P_ROW P_COL ITERS [PEER_TIMINGS]
 *
 * An N^3 array, column-major (x fastest), in the pencils of a P_ROW x P_COL process grid as
 * 2DECOMP&FFT lays them out (rank = row * P_COL + col; X-pencils split y over the rows and z over
 * the columns, Y-pencils x and z, Z-pencils x and y; of a split extent the first ranks get the
 * smaller parts). Four handles move X->Y, Y->Z, Z->Y and Y->X, for real(8) and complex(8)
 * elements, each timed two ways: into the caller's own arrays (out=, what a Fortran code does)
 * and into the engine-owned result. Timing as a peer's driver does it: per iteration and
 * transpose MPI_Barrier, MPI_Wtime around the call, the slowest rank's time; the median (and the
 * minimum) over ITERS iterations after 3 warm-up ones. Every iteration's results are checked
 * (element value = global index). PEER_TIMINGS (optional) is a text file of lines
 *   <library> <real8|complex8> N P_ROW P_COL <x2y|y2z|z2y|y2x> <median ms> <min ms> <T|F>
 * measured separately (the peer library is not part of redist); its rows for this N and grid are
 * printed beside redist's, with the ratios.
 *
 * BENCH_BETWEEN (environment) says what each rank does, untimed, before every timed call, as
 * perf/bench_2decomp.f90 does for both libraries: unset or "poison" (write -1 into the call's
 * destination: it is dirty in its owner's cache), "evict" (poison, then write BENCH_EVICT_MIB,
 * default 32, MiB of a buffer of its own: its private caches hold none of the exchange's data, as
 * after other work), or "nothing" (a tight loop of transposes, caches warm). BENCH_HOST_METHOD
 * (environment) picks the host method of every handle: auto (unset), push, hybrid, datatype or pack.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redist.h"

/* a redist call that must succeed: else print why and end the job */
static void need(redist_status_t st, const char *call)
{
    if (st == REDIST_SUCCESS)
        return;
    fprintf(stderr, "%s: %s\n  %s\n", call, redist_get_error_string(st), redist_get_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
}
#define NEED(call) need((call), #call)

static const char *NAMES[4] = {"x2y", "y2z", "z2y", "y2x"};
static int64_t n;

/* [lo, hi) of part `k` of `extent` split in `parts`: the first parts get the smaller share */
static void part(int64_t extent, int parts, int k, int64_t *lo, int64_t *hi)
{
    int64_t size = extent / parts, nu = extent - size * parts, nl = parts - nu;
    *lo = k < nl ? k * size : nl * size + (k - nl) * (size + 1);
    *hi = *lo + (k < nl ? size : size + 1);
}

/* the box of pencil `p` (0: X, 1: Y, 2: Z) of this rank, axes (x, y, z) */
static void pencil(int p, int row, int col, int prow, int pcol, int64_t lo[3], int64_t hi[3])
{
    for (int a = 0; a < 3; a++) {
        lo[a] = 0;
        hi[a] = n;
    }
    int first = p == 0 ? 1 : 0, second = p == 2 ? 1 : 2; /* axes split over rows, over columns */
    part(n, prow, row, &lo[first], &hi[first]);
    part(n, pcol, col, &lo[second], &hi[second]);
}

static int64_t volume(const int64_t lo[3], const int64_t hi[3])
{
    return (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]);
}

/* element value = global (column-major) index; complex: (i, -i - 0.5) */
static void fill(void *a, int cplx, const int64_t lo[3], const int64_t hi[3])
{
    int64_t e = 0;
    for (int64_t k = lo[2]; k < hi[2]; k++)
        for (int64_t j = lo[1]; j < hi[1]; j++)
            for (int64_t i = lo[0]; i < hi[0]; i++, e++) {
                double g = (double)(i + n * (j + n * k));
                if (cplx) {
                    ((double *)a)[2 * e] = g;
                    ((double *)a)[2 * e + 1] = -g - 0.5;
                } else {
                    ((double *)a)[e] = g;
                }
            }
}

static int right(const void *a, int cplx, const int64_t lo[3], const int64_t hi[3])
{
    int64_t e = 0;
    for (int64_t k = lo[2]; k < hi[2]; k++)
        for (int64_t j = lo[1]; j < hi[1]; j++)
            for (int64_t i = lo[0]; i < hi[0]; i++, e++) {
                double g = (double)(i + n * (j + n * k));
                if (cplx ? ((const double *)a)[2 * e] != g || ((const double *)a)[2 * e + 1] != -g - 0.5
                         : ((const double *)a)[e] != g)
                    return 0;
            }
    return 1;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *t, int m)
{
    qsort(t, m, sizeof(double), cmp);
    return m % 2 ? t[m / 2] : 0.5 * (t[m / 2 - 1] + t[m / 2]);
}

/* the peer's median for this case, or NAN */
static double peer(const char *path, const char *prec, int prow, int pcol, const char *name, char *lib)
{
    double med = NAN;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f)
        return med;
    char l[64], p[32], nm[8], ok[4];
    long nn;
    int r, c;
    double m, mn;
    while (fscanf(f, "%63s %31s %ld %d %d %7s %lf %lf %3s", l, p, &nn, &r, &c, nm, &m, &mn, ok) == 9)
        if (!strcmp(p, prec) && nn == n && r == prow && c == pcol && !strcmp(nm, name) && ok[0] == 'T') {
            med = m;
            strcpy(lib, l);
        }
    fclose(f);
    return med;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 5) {
        fprintf(stderr, "usage: bench_pencils N P_ROW P_COL ITERS [PEER_TIMINGS]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    n = atoll(argv[1]);
    int prow = atoi(argv[2]), pcol = atoi(argv[3]), iters = atoi(argv[4]);
    const char *peer_file = argc > 5 ? argv[5] : NULL;
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    if (prow * pcol != nranks)
        MPI_Abort(MPI_COMM_WORLD, 2);
    NEED(redist_initialize(MPI_Comm_c2f(MPI_COMM_WORLD), REDIST_DEVICE_NONE));
    int row = rank / pcol, col = rank % pcol;
    int64_t lo[3][3], hi[3][3];
    for (int p = 0; p < 3; p++)
        pencil(p, row, col, prow, pcol, lo[p], hi[p]);
    const int from[4] = {0, 1, 2, 1}, to[4] = {1, 2, 1, 0};
    const char *between = getenv("BENCH_BETWEEN") ? getenv("BENCH_BETWEEN") : "poison";
    int evict = !strcmp(between, "evict"), poison = evict || !strcmp(between, "poison");
    if (!poison && strcmp(between, "nothing")) {
        if (rank == 0)
            fprintf(stderr, "BENCH_BETWEEN must be poison, evict or nothing, not %s\n", between);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    size_t junk_bytes = (size_t)(getenv("BENCH_EVICT_MIB") ? atoi(getenv("BENCH_EVICT_MIB")) : 32) << 20;
    unsigned char *junk = evict ? malloc(junk_bytes) : NULL;
    double *t = malloc(sizeof(double) * iters);
    /* BENCH_SYMMETRIC=1: the pencils in host symmetric memory (the peers store straight into out=) */
    int symmetric = getenv("BENCH_SYMMETRIC") && !strcmp(getenv("BENCH_SYMMETRIC"), "1");
    redist_options_t options;
    redist_options_init(&options);
    options.order = REDIST_ORDER_F;
    const char *method = getenv("BENCH_HOST_METHOD") ? getenv("BENCH_HOST_METHOD") : "auto";
    const struct { const char *name; int32_t value; } methods[] = {
        {"auto", REDIST_HOST_METHOD_AUTO}, {"hybrid", REDIST_HOST_METHOD_HYBRID},
        {"datatype", REDIST_HOST_METHOD_DATATYPE}, {"pack", REDIST_HOST_METHOD_PACK},
        {"alltoallw", REDIST_HOST_METHOD_ALLTOALLW}, {"push", REDIST_HOST_METHOD_PUSH}};
    options.host_method = -1;
    for (size_t m = 0; m < sizeof methods / sizeof methods[0]; m++)
        if (!strcmp(method, methods[m].name))
            options.host_method = methods[m].value;
    if (options.host_method < 0) {
        if (rank == 0)
            fprintf(stderr, "BENCH_HOST_METHOD must be auto, hybrid, datatype, pack, alltoallw or push, not %s\n", method);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    if (rank == 0)
        printf("# redist pencil transposes from C: N=%lld, %d x %d grid (P=%d), median (min) ms of %d iterations, "
               "slowest rank; host method %s; before each call: %s%s\n| elements | transpose | into out= | engine-owned | out= / owned | %s |\n"
               "|---|---|---|---|---|---|\n", (long long)n, prow, pcol, nranks, iters,
               method, between, symmetric ? "; out= in host symmetric memory" : "", peer_file ? "peer | out= / peer" : "-");
    for (int cplx = 0; cplx < 2; cplx++) {
        int64_t isz = cplx ? 16 : 8;
        void *arr[3];
        for (int p = 0; p < 3; p++)
            if (symmetric)
                NEED(redist_allocate_symmetric_memory(&arr[p], (volume(lo[p], hi[p]) + 1) * isz));
            else
                arr[p] = calloc((size_t)volume(lo[p], hi[p]) + 1, (size_t)isz);
        fill(arr[0], cplx, lo[0], hi[0]);
        redist_t h[4];
        for (int k = 0; k < 4; k++) {
            NEED(redist_create_ex(&h[k], 3, lo[from[k]], hi[from[k]], NULL, lo[to[k]], hi[to[k]], isz,
                                  REDIST_MEMORY_HOST, arr[from[k]], &options));
            NEED(redist_plan(h[k], NULL));
        }
        double med[2][4], mn[2][4];
        for (int owned = 0; owned < 2; owned++) {
            double *times = malloc(sizeof(double) * 4 * iters);
            int bad = 0;
            void *last[4] = {NULL, NULL, NULL, NULL};
            for (int it = -3; it < iters; it++) {
                for (int k = 0; k < 4; k++) {
                    void *res;
                    if (poison && (!owned || last[k])) {  /* owned: the result of this handle's last call */
                        double *d = owned ? last[k] : arr[to[k]];
                        for (int64_t i = 0; i < volume(lo[to[k]], hi[to[k]]) * (isz / 8); i++)
                            d[i] = -1.0;
                    }
                    if (evict) {
                        memset(junk, it & 0xff, junk_bytes);
                        __asm__ volatile("" : : "r"(junk) : "memory"); /* the stores happen */
                    }
                    MPI_Barrier(MPI_COMM_WORLD);
                    double t0 = MPI_Wtime();
                    NEED(redist_execute(h[k], NULL, owned ? NULL : arr[to[k]], &res));
                    double dt = MPI_Wtime() - t0;
                    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                    if (it >= 0)
                        times[k * iters + it] = dt;
                    last[k] = res;
                    if (!right(res, cplx, lo[to[k]], hi[to[k]]))
                        bad = 1;
                }
            }
            MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
            if (bad) {
                if (rank == 0)
                    fprintf(stderr, "wrong results (%s, %s)\n", cplx ? "complex8" : "real8", owned ? "owned" : "out=");
                MPI_Abort(MPI_COMM_WORLD, 3);
            }
            for (int k = 0; k < 4; k++) {
                memcpy(t, times + k * iters, sizeof(double) * iters);
                med[owned][k] = median(t, iters) * 1e3;
                mn[owned][k] = t[0] * 1e3;
            }
            free(times);
        }
        for (int k = 0; k < 4 && rank == 0; k++) {
            char lib[64] = "";
            double pm = peer(peer_file, cplx ? "complex8" : "real8", prow, pcol, NAMES[k], lib);
            printf("| %s | %s | %.4f (%.4f) | %.4f (%.4f) | %.2f |", cplx ? "complex(8)" : "real(8)", NAMES[k],
                   med[0][k], mn[0][k], med[1][k], mn[1][k], med[0][k] / med[1][k]);
            if (isnan(pm))
                printf(" - |\n");
            else
                printf(" %s %.4f | %.2f |\n", lib, pm, med[0][k] / pm);
        }
        for (int k = 0; k < 4; k++)
            NEED(redist_free(h[k]));
        for (int p = 0; p < 3; p++)
            if (symmetric)
                NEED(redist_free_symmetric_memory(arr[p]));
            else
                free(arr[p]);
    }
    free(t);
    free(junk);
    NEED(redist_finalize());
    MPI_Finalize();
    return 0;
}
