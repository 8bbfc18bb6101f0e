/* SPDX-License-Identifier: Apache-2.0 */
/**
 * @file redist.h
 * @brief C API of redist: redistribute a distributed N-D array across MPI processes.
 *
 * Every process holds one box of a global N-D array. A redist handle changes which box each
 * process holds (slab along X -> slab along Y, pencils, arbitrary boxes): plan once, execute
 * many times, rebind the operand cheaply between executions. One handle may also move several
 * fields (arrays of the same boxes, e.g. u, v, w) in one exchange: redist_create_fields().
 *
 * Conventions
 * -----------
 *  - Every function returns a ::redist_status_t; 0 (::REDIST_SUCCESS) means success. On
 *    failure, redist_get_last_error() gives a detailed message (per thread).
 *  - Boxes are 0-based and half-open, in global coordinates: process p holds the elements
 *    `lower[d] <= i[d] < upper[d]`. Its local shape is `upper - lower`; `lower == upper` on an
 *    axis means it holds nothing. (The Fortran module takes 1-based inclusive bounds.)
 *  - Strides are in elements, not bytes.
 *  - "Collective" functions must be called by every process of the communicator given to
 *    redist_initialize(), in the same order. Errors of collective functions are collective
 *    too: a problem on any process (a bad box, say) is reported on every process, with the
 *    same status and a message that names the process. Errors found before any
 *    communication (a NULL or freed handle, or a handle of the other kind: see
 *    redist_create_fields()) are local.
 *  - The library embeds CPython (cffi): the first call starts the Python environment that
 *    `python -m redist.cabi build` ran in, whatever PATH says (REDIST_PYTHON=/path/to/python
 *    overrides it; PYTHONHOME and PYTHONPATH are honoured). If that environment cannot start,
 *    every function that needs it returns ::REDIST_ERROR_PYTHON_INIT (never a silent 0, never
 *    an abort), and redist_get_last_error() says why.
 *  - MPI: the application and redist must use the same MPI library (with the `mpich` wheel:
 *    compile with its `mpicc`). If MPI is not initialized when redist_initialize() is called,
 *    redist initializes it (MPI_THREAD_MULTIPLE) and redist_finalize() finalizes it.
 *  - Calls from several threads are serialized (one Python interpreter), except the host
 *    redist_execute* calls that repeat a handle's previous call (compiled replays, below);
 *    use one handle from one thread at a time. Every handle uses the communicator given to
 *    redist_initialize(), and an execute is collective over it: as with MPI's collectives, two
 *    threads must not execute (any handles) at the same time.
 */
#ifndef REDIST_H
#define REDIST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque handle of one redistribution (one input box -> one output box per process). */
typedef struct redist_s *redist_t;

/** Status codes. Keep in sync with redist.engine.errors.STATUS. */
typedef enum {
    REDIST_SUCCESS = 0,               /**< success */
    REDIST_ERROR_INVALID_VALUE = 1,   /**< a bad argument: boxes, sizes, NULL pointers, bad handle */
    REDIST_ERROR_INVALID_STATE = 2,   /**< wrong call order: execute before plan, use after free... */
    REDIST_ERROR_NOT_INITIALIZED = 3, /**< redist_initialize() was not called (or a runtime is down) */
    REDIST_ERROR_NOT_SUPPORTED = 4,   /**< valid, but not supported by this build or machine */
    REDIST_ERROR_CUDA = 5,            /**< a CUDA driver, NVRTC or NVSHMEM call failed */
    REDIST_ERROR_COMMUNICATION = 6,   /**< an MPI or NVSHMEM communication step failed */
    REDIST_ERROR_INTERNAL = 7,        /**< a bug in redist: please report the message */
    REDIST_ERROR_PYTHON_INIT = 8      /**< the embedded Python environment could not start */
} redist_status_t;

/** Memory order of dense operands and of the result. */
typedef enum {
    REDIST_ORDER_C = 0, /**< row-major: the last index varies fastest */
    REDIST_ORDER_F = 1  /**< column-major: the first index varies fastest (Fortran) */
} redist_order_t;

/** Where the operand (and the result) live. */
typedef enum {
    REDIST_MEMORY_HOST = 0,  /**< host memory: exchanged over MPI */
    REDIST_MEMORY_DEVICE = 1 /**< CUDA device memory of redist's device: NVSHMEM + CUDA graphs */
} redist_memory_t;

/** How a GPU exchange reaches its peers (device memory only). */
typedef enum {
    REDIST_TRANSPORT_AUTO = 0, /**< push to every NVLink/P2P-reachable peer, put to the others */
    REDIST_TRANSPORT_PUSH = 1, /**< one kernel stores into peers' results (every pair must be reachable) */
    REDIST_TRANSPORT_PUT = 2   /**< pack, NVSHMEM put, unpack (works between nodes) */
} redist_transport_t;

/** How the MPI host backend moves strided regions (host memory only). */
typedef enum {
    REDIST_HOST_METHOD_AUTO = 0,     /**< PUSH on one node, else HYBRID */
    REDIST_HOST_METHOD_HYBRID = 1,   /**< per message: MPI datatype or pack, whichever measured faster */
    REDIST_HOST_METHOD_DATATYPE = 2, /**< MPI derived datatypes, no staging */
    REDIST_HOST_METHOD_PACK = 3,     /**< pack / unpack through engine-owned staging */
    REDIST_HOST_METHOD_ALLTOALLW = 4, /**< one persistent MPI-4 Alltoallw_init */
    REDIST_HOST_METHOD_PUSH = 5       /**< one node: peers store into each other's results (shared memory) */
} redist_host_method_t;

/** How the CUDA graphs of ranks order one another (RedistributeOptions.signal). */
typedef enum redist_signal_e {
    REDIST_SIGNAL_EPOCH = 0,   /**< no NVSHMEM barrier: device epoch counters, credits, arrivals */
    REDIST_SIGNAL_BARRIER = 1  /**< NVSHMEM team barriers at entry and exit */
} redist_signal_t;

/** The version of ::redist_options_t this header describes (2 added `result_ndim`/`result_order`
 * and `allow_overlap`, 3 `global_shape`, 4 `tune`, `tune_out` and `tune_budget`; the library still
 * reads the structs of every earlier version). */
#define REDIST_OPTIONS_VERSION (4)

/** How redist_plan() picks the route (RedistributeOptions.tune; docs/tuning.md). */
typedef enum redist_tune_e {
    REDIST_TUNE_ESTIMATE = 0, /**< the heuristic, nothing timed (default) */
    REDIST_TUNE_MEASURE = 1,  /**< time every candidate route collectively, the fastest wins */
    REDIST_TUNE_WISDOM = 2    /**< the stored answer (redist_import_wisdom, REDIST_WISDOM), else measure */
} redist_tune_t;
/** Most axes `result_order` can name. */
#define REDIST_MAX_NDIM (16)

/**
 * Options of redist_create_ex(). Always start from redist_options_init(), which sets
 * `struct_size` and `version` (so a library built from a newer header still reads a program
 * built against this one), then change the fields you need. Every field must be equal on
 * every process. A wrong `struct_size` or `version` is ::REDIST_ERROR_INVALID_VALUE (on
 * every process, as redist_create_ex is collective).
 */
typedef struct redist_options_s {
    size_t struct_size;  /**< sizeof(redist_options_t), set by redist_options_init() */
    int32_t version;     /**< ::REDIST_OPTIONS_VERSION, set by redist_options_init() */
    int32_t order;       /**< ::redist_order_t of the result (and of a dense operand); default C */
    int32_t transport;   /**< ::redist_transport_t; default AUTO */
    int32_t host_method; /**< ::redist_host_method_t; default AUTO */
    int32_t blocking;    /**< 1: device execution waits for the result; 0 (default): returns once launched */
    int32_t signal;      /**< ::redist_signal_t of the CUDA graphs; default EPOCH */
    /** 0 (default): the result is dense in `order`. Else the number of axes (= ndim) in
     *  `result_order`: the result's axes from slowest- to fastest-varying in memory, 0-based
     *  ({0, 1, ..., n-1} is C order, {n-1, ..., 0} F order; e.g. {0, 2, 1} makes axis 1
     *  contiguous). The result (and `out`) is then dense in that order. (version 2) */
    int32_t result_ndim;
    int32_t result_order[REDIST_MAX_NDIM];
    /** 0 (default): input boxes and output boxes each tile the global array exactly. 1: boxes
     *  may overlap and outputs need not cover the global array (the bounding box of the input
     *  boxes); every element of every output box must be held by some input box and comes from
     *  the lowest rank holding it: allgather, broadcast, gather, halos, replicated input
     *  (RedistributeOptions.allow_overlap). (version 2) */
    int32_t allow_overlap;
    /** NULL (default): the global shape is the bounding box of the input boxes. Else `ndim`
     *  extents, in the axis order of the create call's bounds: the global array's shape, checked
     *  on every process (the same on every process); a mismatch is ::REDIST_ERROR_INVALID_VALUE
     *  on every process, naming the inferred shape and each process's box. Read during the create
     *  call only. (version 3) */
    const int64_t *global_shape;
    /** ::redist_tune_t; default ESTIMATE. (version 4) */
    int32_t tune;
    /** 1: `tune` times calls into an `out` (as redist_execute with `out` does; on one node the
     *  `push` routes into `out` are candidates too); 0 (default): into the result. (version 4) */
    int32_t tune_out;
    /** Seconds of measuring one redist_plan() may spend; 0 (default): 10. (version 4) */
    double tune_budget;
} redist_options_t;

/** @brief Default options, with `struct_size` and `version` set (no Python needed). */
static inline void redist_options_init(redist_options_t *options)
{
    redist_options_t defaults = {sizeof(redist_options_t), REDIST_OPTIONS_VERSION, REDIST_ORDER_C,
                                 REDIST_TRANSPORT_AUTO, REDIST_HOST_METHOD_AUTO, 0, REDIST_SIGNAL_EPOCH, 0, {0}, 0,
                                 NULL, REDIST_TUNE_ESTIMATE, 0, 0.0};
    *options = defaults;
}

/** redist_initialize(): use MPI_COMM_WORLD (initializing MPI if the application did not). */
#define REDIST_COMM_WORLD (-1)
/** redist_initialize(): local rank modulo visible GPUs; CPU only when some rank has none. */
#define REDIST_DEVICE_AUTO (-1)
/** redist_initialize(): never touch a GPU (host memory only). */
#define REDIST_DEVICE_NONE (-2)

/**
 * @brief Start redist on a communicator. Collective.
 *
 * @param fortran_comm  the communicator as a Fortran handle: `MPI_Comm_c2f(comm)` in C,
 *                      the integer handle in Fortran, or ::REDIST_COMM_WORLD.
 * @param device_id     a CUDA device ordinal, ::REDIST_DEVICE_AUTO or ::REDIST_DEVICE_NONE.
 * @return ::REDIST_ERROR_INVALID_STATE if redist is already initialized;
 *         ::REDIST_ERROR_PYTHON_INIT if the embedded Python cannot start.
 */
redist_status_t redist_initialize(int32_t fortran_comm, int32_t device_id);

/**
 * @brief Free every live handle (in creation order), then shut redist down. Collective.
 * A no-op when redist is not initialized. If redist initialized MPI, MPI is finalized here
 * (so redist cannot be initialized again); if the application initialized MPI, it may call
 * redist_initialize() again, and calls MPI_Finalize() itself after redist_finalize().
 */
redist_status_t redist_finalize(void);

/**
 * @brief This process's rank and the number of processes in redist's communicator.
 * @param rank    out: 0 <= rank < nranks (may be NULL)
 * @param nranks  out: size of the communicator (may be NULL)
 */
redist_status_t redist_comm_rank(int32_t *rank, int32_t *nranks);

/**
 * @brief Describe one redistribution. Collective.
 *
 * @param handle        out: the new handle (NULL on failure).
 * @param ndim          number of dimensions (1..64), the same on every process.
 * @param in_lower      [ndim] this process's input box, lower corner (inclusive).
 * @param in_upper      [ndim] this process's input box, upper corner (exclusive).
 * @param in_strides    [ndim] element strides of the operand, or NULL: dense in `order`.
 * @param out_lower     [ndim] the box this process receives, lower corner (inclusive).
 * @param out_upper     [ndim] the box this process receives, upper corner (exclusive).
 * @param element_size  bytes per element (any positive size: 1, 4, 8, 16, structs...).
 * @param order         order of the result (dense), and of the operand when in_strides is NULL.
 * @param memory        where operand and result live (device: redist's CUDA device).
 * @param operand       this process's input data (may be NULL when its box is empty). It must
 *                      stay valid until replaced (redist_reset_operand...) or released.
 *
 * The input boxes must tile one global box without overlap, and so must the output boxes;
 * every problem is reported on every process (::REDIST_ERROR_INVALID_VALUE).
 */
redist_status_t redist_create(redist_t *handle, int32_t ndim,
                              const int64_t *in_lower, const int64_t *in_upper,
                              const int64_t *in_strides,
                              const int64_t *out_lower, const int64_t *out_upper,
                              int64_t element_size, redist_order_t order, redist_memory_t memory,
                              void *operand);

/**
 * @brief redist_create() with options (see ::redist_options_t). Collective.
 *
 * The arguments are those of redist_create(), but the result order comes from
 * `options->order`; `options` NULL means redist_options_init()'s defaults.
 */
redist_status_t redist_create_ex(redist_t *handle, int32_t ndim,
                                 const int64_t *in_lower, const int64_t *in_upper,
                                 const int64_t *in_strides,
                                 const int64_t *out_lower, const int64_t *out_upper,
                                 int64_t element_size, redist_memory_t memory, void *operand,
                                 const redist_options_t *options);

/**
 * @brief Several fields moved in ONE exchange (one handle, one message per peer). Collective.
 *
 * Like redist_create_ex(), for `nfields` arrays that share this process's boxes (u, v, w of
 * one velocity; a double and a float field...): each field may have its own element size and
 * strides, and every execution moves all of them at once. A handle made here takes the fields
 * functions below (redist_execute_fields, redist_reset_operands...); the one-array functions
 * (redist_execute, redist_reset_operand...) refuse it, and the fields functions refuse a handle
 * of redist_create(), with ::REDIST_ERROR_INVALID_VALUE (local, like a bad handle: the same on
 * every process that passes the handle). redist_plan, redist_release_operand (every field),
 * redist_free and redist_graph take both kinds. Fields are numbered from 0 (messages say
 * "field f: ...").
 *
 * @param nfields        number of fields, 1..1024 (device memory: at most 8, the copy kernel's
 *                       argument), the same on every process.
 * @param in_strides     [nfields][ndim] element strides (field f's at in_strides + f * ndim), or
 *                       NULL: every field dense in `options->order`.
 * @param element_sizes  [nfields] bytes per element of each field; field f's the same on every process.
 * @param operands       [nfields] this process's input data per field (an entry may be NULL when
 *                       its box is empty; `operands` itself too).
 * The other arguments are those of redist_create_ex(). A problem with any field on any process
 * is reported on every process, naming the process and the field.
 */
redist_status_t redist_create_fields(redist_t *handle, int32_t nfields, int32_t ndim,
                                     const int64_t *in_lower, const int64_t *in_upper,
                                     const int64_t *in_strides,
                                     const int64_t *out_lower, const int64_t *out_upper,
                                     const int64_t *element_sizes, redist_memory_t memory,
                                     void *const *operands, const redist_options_t *options);

/**
 * @brief The number of fields of a handle of redist_create_fields(); 0 for a handle of
 * redist_create() / redist_create_ex() (one array: use the one-array functions). Local.
 */
redist_status_t redist_get_nfields(redist_t handle, int32_t *nfields);

/**
 * @brief Build the transfer plan and lower it (host: MPI; device: CUDA graph). Collective.
 * @param stream  cudaStream_t for device execution, or NULL (the default stream / host).
 */
redist_status_t redist_plan(redist_t handle, void *stream);

/**
 * @brief Redistribute the current operand. Collective.
 *
 * @param stream  cudaStream_t (device execution) or NULL. Host execution blocks until done;
 *                device execution returns once the graph is launched on `stream`.
 * @param out     NULL: write the engine-owned result and return it in *result; it stays
 *                valid until the next redist_execute() or redist_free() of this handle.
 *                Non-NULL: write there instead (dense in `order`, the output box's shape;
 *                device memory: any memory of the process's GPU -- cudaMalloc, cudaMallocAsync,
 *                a framework's allocator; peers store into it through CUDA IPC mappings, made
 *                on first use of an allocation and cached; memory IPC cannot export lands in
 *                the engine-owned result first and is copied on `stream`).
 *                Host memory: processes may differ in whether they pass `out` (a process
 *                with an empty output box may pass NULL); `out` must not overlap the operand.
 * @param result  out: the result's address (`out` when given); may be NULL.
 * @return ::REDIST_ERROR_INVALID_STATE before redist_plan(), after redist_release_operand()
 *         (until a new operand is set) and after redist_free().
 *
 * Host memory, `push` method: once a call has succeeded, the next call of the handle with the same
 * operand and `out` is a compiled replay: it runs in C, without the embedded Python (a few
 * microseconds of fixed cost; up to four bindings per handle, and redist_reset_operand_unchecked
 * back to one of their operands stays in C too). Its semantics are the same: where any process
 * calls differently, or fails, the call continues in Python on every process.
 */
redist_status_t redist_execute(redist_t handle, void *stream, void *out, void **result);

/**
 * @brief redist_execute() into an `out` of any element strides. Collective.
 *
 * Writes the output box into `out` with `out_strides[k]` elements between neighbours along axis
 * k (the axes of redist_create's boxes; any sign: `out` is the address of the box's first
 * element, index (0, ..., 0)), e.g. the interior of an array with ghost layers: the exchange
 * writes there directly. `out_strides` NULL: dense, as redist_execute(). Strides that map two
 * elements to one address are ::REDIST_ERROR_INVALID_VALUE on every process. Device memory: any
 * memory of the process's GPU that peers can map (CUDA IPC: cudaMalloc), as for redist_execute();
 * a new stride pattern is lowered once (collectively) and kept.
 */
redist_status_t redist_execute_strided(redist_t handle, void *stream, void *out, const int64_t *out_strides,
                                       void **result);

/**
 * @brief Replace the operand by another buffer of the same shape, strides and memory.
 * Collective: the new operand is checked on every process.
 */
redist_status_t redist_reset_operand(redist_t handle, void *operand);

/**
 * @brief Replace the operand with no checks (the hot path of a time loop). Local.
 * The caller guarantees the new buffer matches the old one (shape, strides, memory).
 */
redist_status_t redist_reset_operand_unchecked(redist_t handle, void *operand);

/**
 * @brief redist_execute() for a handle of redist_create_fields(): every field in one exchange. Collective.
 *
 * @param outs     NULL: every field into its engine-owned result. Else [nfields] addresses, each
 *                 as redist_execute()'s `out` (dense in the result order), or NULL: that field's
 *                 engine-owned result. Two fields' `out` must not overlap.
 * @param results  out: [nfields] the results' addresses (NULL on failure; left alone when the
 *                 handle itself is bad); may be NULL.
 */
redist_status_t redist_execute_fields(redist_t handle, void *stream, void *const *outs, void **results);

/**
 * @brief redist_execute_fields() into `outs` of any element strides (see redist_execute_strided()). Collective.
 * @param out_strides  [nfields][ndim] (field f's at out_strides + f * ndim; ignored for a NULL
 *                     `outs[f]`), or NULL: every `out` dense.
 */
redist_status_t redist_execute_fields_strided(redist_t handle, void *stream, void *const *outs,
                                              const int64_t *out_strides, void **results);

/**
 * @brief redist_reset_operand() for every field: `operands` [nfields], each of the same shape,
 * strides and memory as that field's first operand. Collective: checked on every process.
 */
redist_status_t redist_reset_operands(redist_t handle, void *const *operands);

/**
 * @brief redist_reset_operands() with no checks (the hot path of a time loop). Local.
 * On device memory one kernel-node update per kernel for all fields.
 */
redist_status_t redist_reset_operands_unchecked(redist_t handle, void *const *operands);

/**
 * @brief Replace the operand of field `field` (0-based) only. Collective: checked on every
 * process (a `field` out of range on one process fails every process). After
 * redist_release_operand() every field must come back at once (redist_reset_operands();
 * ::REDIST_ERROR_INVALID_STATE here).
 */
redist_status_t redist_reset_operand_field(redist_t handle, int32_t field, void *operand);

/** @brief redist_reset_operand_field() with no checks but the field's range. Local. */
redist_status_t redist_reset_operand_field_unchecked(redist_t handle, int32_t field, void *operand);

/** @brief Drop redist's reference to the operand; set a new one before the next execute. */
redist_status_t redist_release_operand(redist_t handle);

/**
 * @brief Release everything the handle owns, including the engine-owned result. Collective.
 * Any later use of the handle returns ::REDIST_ERROR_INVALID_STATE (a second free too).
 */
redist_status_t redist_free(redist_t handle);

/**
 * @brief The CUDA graph (`CUgraph`) redist executes on `stream`, for use as a child-graph node
 * (cudaGraphAddChildGraphNode). Device execution only (::REDIST_ERROR_NOT_SUPPORTED otherwise).
 * The graph belongs to the handle; it is valid until redist_free().
 */
redist_status_t redist_graph(redist_t handle, void *stream, void **cuda_graph);

/**
 * @brief Rebind the copies of this exchange recorded into the application's CUDA graph. Local.
 *
 * redist_execute() on a stream that is capturing (cudaStreamBeginCapture, any mode) records the
 * exchange into that capture (kernel nodes or a child-graph node) instead of running it; every launch of the
 * instantiated graph then runs it. Such a copy keeps the bindings it was recorded with: after
 * redist_reset_operand*(), call this to push the operand bound now into every copy in
 * `cuda_graph_exec`. Launches already enqueued are unaffected. The copies keep the `out` and
 * `sync_symmetric_memory` they were recorded with (peers store into that `out`):
 * ::REDIST_ERROR_INVALID_STATE when the last redist_execute used others (execute once as
 * captured, or capture again).
 * @param cuda_graph      the `cudaGraph_t` the capture produced (still alive: the copies' nodes live in it)
 * @param cuda_graph_exec a `cudaGraphExec_t` instantiated from `cuda_graph`
 * @param ncopies         out (may be NULL): how many copies were updated
 * ::REDIST_ERROR_INVALID_VALUE when `cuda_graph` holds no copy of this exchange;
 * ::REDIST_ERROR_NOT_SUPPORTED for host memory.
 */
redist_status_t redist_update_graph_exec(redist_t handle, void *cuda_graph, void *cuda_graph_exec, int32_t *ncopies);

/**
 * @brief Declare that no graph of the application holding a copy of this exchange (recorded by
 * redist_execute during a capture) will be launched again: the application destroyed them. Local.
 * Until then redist_free keeps the memory the copies use (freed at redist_finalize) and
 * `release_workspace` is refused. Call it before redist_free. Host memory: does nothing.
 */
redist_status_t redist_release_captured(redist_t handle);

/**
 * @brief `nbytes` of host symmetric memory: shared memory of this process that the other processes
 * of its node map. Collective (every process calls it, the same number of times in the same order).
 *
 * Host memory, `push` method: an `out` there, dense in the handle's result order (as
 * redist_execute() writes it; redist_execute_strided() with the result's strides too), is stored
 * into straight by the other processes, one copy per element as into the engine-owned result, at
 * every size and with every MPI; its calls replay in C like the others. Any other host memory works
 * as `out` as well, through slower routes. The memory is zeroed and page-aligned; it stays valid
 * until redist_free_symmetric_memory() or redist_finalize().
 * @param ptr     out: the memory (NULL on failure).
 * @param nbytes  this process's size (processes may ask for different sizes; 0 is allowed).
 * @return ::REDIST_ERROR_INVALID_VALUE on every process when one passes a negative size or a
 *         NULL `ptr`; ::REDIST_ERROR_NOT_SUPPORTED when the shared-memory file system is full.
 */
redist_status_t redist_allocate_symmetric_memory(void **ptr, int64_t nbytes);

/**
 * @brief Free memory of redist_allocate_symmetric_memory(). Collective: every process frees its
 * part of the same allocation (the same calls in the same order).
 * @return ::REDIST_ERROR_INVALID_VALUE on every process when one passes memory not allocated so
 *         (or already freed), or another allocation than the others; nothing is freed then.
 */
redist_status_t redist_free_symmetric_memory(void *ptr);

/**
 * @brief Write the wisdom of this job (what `tune` measured or imported; rank 0's) to the file
 * `path`, atomically (a temporary file renamed over it). Collective; rank 0 writes.
 * @param entries  if not NULL: how many entries were written.
 * @return ::REDIST_ERROR_INVALID_VALUE on every process when `path` is NULL or empty on some
 *         process, or rank 0 cannot write it.
 */
redist_status_t redist_export_wisdom(const char *path, int32_t *entries);

/**
 * @brief Add the entries of the wisdom file `path` (read by rank 0, given to every process).
 * Collective. A missing, unreadable or corrupt file, and entries of another redist version or
 * MPI library, are logged warnings and ignored (never an error, never trusted).
 * @param entries  if not NULL: how many entries were added.
 */
redist_status_t redist_import_wisdom(const char *path, int32_t *entries);

/** @brief Forget every process's wisdom. Collective. */
redist_status_t redist_forget_wisdom(void);

/** @brief Static text describing a status code ("unknown status" for others). */
const char *redist_get_error_string(redist_status_t status);

/**
 * @brief The detailed message of this thread's last failed call ("" if none yet).
 * Not cleared by successful calls. The text stays valid until this thread's next failure.
 */
const char *redist_get_last_error(void);

/** @brief The redist version the library was built from, e.g. "0.1.0". */
const char *redist_version(void);

#ifdef __cplusplus
}
#endif

#endif /* REDIST_H */
