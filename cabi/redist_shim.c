/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The C half of libredist.so. cffi pastes this file into the module it generates (see
 * _build.py), after Python.h and cffi's embedding support, and after the build-time values:
 *
 *   REDIST_BAKED_EXECUTABLE  the Python that ran `python -m redist.cabi build` (a venv's
 *                            bin/python is kept as is, not resolved: that is how the venv is found)
 *   REDIST_BAKED_VERSION     redist.__version__
 *   REDIST_BAKED_PYVERSION   "3.11"
 *
 * Why C at all: cffi's generated entry points return 0 (= REDIST_SUCCESS) when the embedded
 * interpreter fails to start. Every exported function here checks start-up first and returns
 * REDIST_ERROR_PYTHON_INIT instead, then calls its `extern "Python"` twin (_entry.py), whose
 * one exception barrier turns every Python exception into a status and a last-error message.
 * Start-up itself goes through PyConfig (not Py_InitializeEx), so a broken environment is a
 * status, not an abort, and the baked interpreter path is used whatever PATH says.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "redist.h"

#define REDIST_MSG_SIZE 4096

/* The detailed message of this thread's last failure (redist_get_last_error). */
static __thread char redist_last_error[REDIST_MSG_SIZE];
/* Why start-up failed (written once, under redist_start_lock). */
static char redist_init_error[REDIST_MSG_SIZE];
/* 0: not started, 1: ready, -1: failed for good. */
static int redist_py_state = 0;
/* 1 when this library started the interpreter (a C/Fortran application), 0 when it was
   already running (the library was loaded into a Python process, e.g. for tests). */
static int redist_embedded = 0;
static pthread_mutex_t redist_start_lock = PTHREAD_MUTEX_INITIALIZER;

/* --- helpers called from Python (declared in the cdef of _build.py) --------------------- */

static void _redist_set_last_error(const char *msg)
{
    snprintf(redist_last_error, sizeof redist_last_error, "%s", msg ? msg : "");
}

static void _redist_set_init_error(const char *msg)
{
    snprintf(redist_init_error, sizeof redist_init_error, "%s", msg ? msg : "");
}

static int _redist_started_python(void)
{
    return redist_embedded;
}

/* --- the Python side (extern "Python" in the cdef; bodies in _entry.py) ----------------- */

static int32_t _redist_py_resume(intptr_t, int32_t, const int32_t *, int32_t, const uintptr_t *, const uintptr_t *,
                                 const uintptr_t *);

static int32_t _redist_py_initialize(int32_t, int32_t);
static int32_t _redist_py_finalize(void);
static int32_t _redist_py_comm_rank(int32_t *, int32_t *);
static int32_t _redist_py_allocate_symmetric_memory(uintptr_t *, int64_t);
static int32_t _redist_py_free_symmetric_memory(uintptr_t);
static int32_t _redist_py_export_wisdom(const char *, int32_t *);
static int32_t _redist_py_import_wisdom(const char *, int32_t *);
static int32_t _redist_py_forget_wisdom(void);
/* Arrays of pointers (operands, outs, results: void *const *, void **) reach Python as uintptr_t arrays. */
_Static_assert(sizeof(void *) == sizeof(uintptr_t), "pointer arrays are passed as uintptr_t arrays");
typedef int32_t (*redist_py_create_t)(intptr_t *, int32_t, int32_t, const int64_t *, const int64_t *,
                                      const int64_t *, const int64_t *, const int64_t *, const int64_t *, int32_t,
                                      int32_t, const uintptr_t *, const redist_options_t *);
static int32_t _redist_py_create(intptr_t *, int32_t, int32_t, const int64_t *, const int64_t *, const int64_t *,
                                 const int64_t *, const int64_t *, const int64_t *, int32_t, int32_t,
                                 const uintptr_t *, const redist_options_t *);
static int32_t _redist_py_create_fields(intptr_t *, int32_t, int32_t, const int64_t *, const int64_t *,
                                        const int64_t *, const int64_t *, const int64_t *, const int64_t *, int32_t,
                                        int32_t, const uintptr_t *, const redist_options_t *);
static int32_t _redist_py_plan(intptr_t, uintptr_t);
static int32_t _redist_py_execute(intptr_t, uintptr_t, uintptr_t, const int64_t *, uintptr_t *);
static int32_t _redist_py_execute_fields(intptr_t, uintptr_t, const uintptr_t *, const int64_t *, uintptr_t *);
static int32_t _redist_py_reset_operand(intptr_t, uintptr_t);
static int32_t _redist_py_reset_operand_unchecked(intptr_t, uintptr_t);
static int32_t _redist_py_reset_operands(intptr_t, const uintptr_t *);
static int32_t _redist_py_reset_operands_unchecked(intptr_t, const uintptr_t *);
static int32_t _redist_py_reset_operand_field(intptr_t, int32_t, uintptr_t);
static int32_t _redist_py_reset_operand_field_unchecked(intptr_t, int32_t, uintptr_t);
static int32_t _redist_py_get_nfields(intptr_t, int32_t *);
static int32_t _redist_py_release_operand(intptr_t);
static int32_t _redist_py_free(intptr_t);
static int32_t _redist_py_graph(intptr_t, uintptr_t, uintptr_t *);
static int32_t _redist_py_update_graph_exec(intptr_t, uintptr_t, uintptr_t, int32_t *);
static int32_t _redist_py_release_captured(intptr_t);

/* --- compiled replays (redist_replay.c) --------------------------------------------------- */

#include "redist_replay.c"

/* Python learns the operands that redist_reset_operand(s)_unchecked bound without it, before a
   Python call of the handle. */
static redist_status_t redist_sync_binding(redist_t handle)
{
    int32_t fields = 0, st;
    uintptr_t *ops = NULL;
    int ahead = redist_rebound((intptr_t)handle, &ops, &fields);
    if (ahead == 0)
        return REDIST_SUCCESS;
    if (ahead < 0) {
        _redist_set_last_error("redist: out of memory");
        return REDIST_ERROR_INTERNAL;
    }
    st = fields ? _redist_py_reset_operands_unchecked((intptr_t)handle, ops)
                : _redist_py_reset_operand_unchecked((intptr_t)handle, ops[0]);
    if (st == REDIST_SUCCESS)
        redist_python_bound((intptr_t)handle, ops);
    else
        _redist_drop_replay((intptr_t)handle);
    free(ops);
    return (redist_status_t)st;
}

/* Before any other Python call of a handle: Python learns its operands, and its replays go (the call
   may rebind, re-plan or free). */
#define REDIST_LEAVE_REPLAYS(handle)                                                            \
    do {                                                                                        \
        redist_status_t synced_ = redist_sync_binding(handle);                                  \
        _redist_drop_replay((intptr_t)(handle));                                                \
        if (synced_ != REDIST_SUCCESS)                                                          \
            return synced_;                                                                     \
    } while (0)

/* Run `rp` (taken from `handle`'s replays; its results into `results` [nfields] on success) and give
   it back. Where a peer said something else, Python finishes the call, bound as the replay was. */
static redist_status_t redist_replay_call(redist_t handle, redist_replay_t *rp, uintptr_t *results)
{
    int st = redist_replay_run(rp), mpi_failed = st != REDIST_SUCCESS && st != REDIST_REPLAY_RESUME;
    if (st == REDIST_REPLAY_RESUME) {
        st = _redist_py_resume((intptr_t)handle, rp->code, rp->heard, rp->nothers, rp->operands, rp->outs,
                               rp->results);
        redist_python_bound((intptr_t)handle, rp->operands); /* bound there first, whatever followed */
    }
    if (st == REDIST_SUCCESS)
        memcpy(results, rp->results, sizeof(uintptr_t) * (size_t)rp->nfields);
    else /* as the Python side does: NULL on failure */
        memset(results, 0, sizeof(uintptr_t) * (size_t)rp->nfields);
    if (mpi_failed) { /* nothing of this handle is replayed again */
        redist_replay_delete(rp);
        _redist_drop_replay((intptr_t)handle);
    } else
        redist_replay_return((intptr_t)handle, rp);
    return (redist_status_t)st;
}

/* --- start-up ----------------------------------------------------------------------------- */

static void redist_init_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(redist_init_error, sizeof redist_init_error, fmt, ap);
    va_end(ap);
}

/* The pending Python exception as "Type: message", then cleared. Needs the GIL. */
static void redist_format_py_error(char *buf, size_t n)
{
    PyObject *type = NULL, *value = NULL, *tb = NULL, *text = NULL;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value != NULL)
        text = PyObject_Str(value);
    snprintf(buf, n, "%s: %s", type ? ((PyTypeObject *)type)->tp_name : "error",
             text && PyUnicode_Check(text) ? PyUnicode_AsUTF8(text) : "?");
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

/* repr(sys.<name>) into buf. Needs the GIL. */
static void redist_sys_repr(const char *name, char *buf, size_t n)
{
    PyObject *obj = PySys_GetObject(name); /* borrowed */
    PyObject *r = obj ? PyObject_Repr(obj) : NULL;
    snprintf(buf, n, "%s", r && PyUnicode_Check(r) ? PyUnicode_AsUTF8(r) : "?");
    Py_XDECREF(r);
    PyErr_Clear();
}

/* Start the interpreter of the environment the library was built in. 0 or -1. */
static int redist_boot_interpreter(void)
{
    const char *exe = getenv("REDIST_PYTHON");
    const char *home = getenv("PYTHONHOME");
    int from_env = exe != NULL && exe[0] != '\0';
    PyConfig config;
    PyStatus status;

    if (!from_env)
        exe = REDIST_BAKED_EXECUTABLE;
    if (access(exe, X_OK) != 0 && !(home != NULL && home[0] != '\0')) {
        redist_init_errorf(
            "cannot start the embedded Python: %s%s is gone (%s). libredist.so runs the Python "
            "environment it was built in; rebuild it (python -m redist.cabi build) from a Python "
            "%s environment with redist installed, or set REDIST_PYTHON to such a python executable",
            from_env ? "REDIST_PYTHON=" : "the interpreter libredist.so was built with, ", exe,
            strerror(errno), REDIST_BAKED_PYVERSION);
        return -1;
    }

    PyConfig_InitPythonConfig(&config); /* still honours PYTHONHOME, PYTHONPATH... */
    config.install_signal_handlers = 0; /* the application owns signals (as Py_InitializeEx(0)) */
    config.parse_argv = 0;
    /* The executable path is what locates a venv (its pyvenv.cfg) and the stdlib. */
    status = PyConfig_SetBytesString(&config, &config.executable, exe);
    {
        const char *pp = getenv("PYTHONPATH");
        if (!PyStatus_Exception(status) && !(pp != NULL && pp[0] != '\0') && REDIST_BAKED_PYTHONPATH[0] != '\0')
            status = PyConfig_SetBytesString(&config, &config.pythonpath_env, REDIST_BAKED_PYTHONPATH);
    }
    if (!PyStatus_Exception(status))
        status = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(status)) {
        if (PyStatus_IsExit(status))
            redist_init_errorf("cannot start the embedded Python (%s): it asked to exit with code %d", exe,
                               status.exitcode);
        else
            redist_init_errorf("cannot start the embedded Python (%s, PYTHONHOME=%s): %s%s%s", exe,
                               home ? home : "(unset)", status.func ? status.func : "",
                               status.func ? ": " : "", status.err_msg ? status.err_msg : "unknown error");
        return -1;
    }
    redist_embedded = 1;

    /* cffi imports _cffi_backend first and only prints why it failed: look for ourselves. */
    {
        PyObject *mod = PyImport_ImportModule("_cffi_backend");
        int ok = mod != NULL;
        Py_XDECREF(mod);
        if (!ok) {
            char err[1024], prefix[1024], path[2048];
            redist_format_py_error(err, sizeof err);
            redist_sys_repr("prefix", prefix, sizeof prefix);
            redist_sys_repr("path", path, sizeof path);
            redist_init_errorf("the embedded Python (%s) started but cannot import cffi's backend (%s); "
                               "sys.prefix=%s, sys.path=%s",
                               exe, err, prefix, path);
        }
        PyEval_SaveThread(); /* release the GIL: cffi takes it per call */
        return ok ? 0 : -1;
    }
}

static int redist_start_python_slow(void)
{
    int state;
    pthread_mutex_lock(&redist_start_lock);
    if (redist_py_state == 0) {
        int rc = 0;
        if (!Py_IsInitialized())
            rc = redist_boot_interpreter();
        if (rc == 0 && cffi_start_python() != 0) {
            rc = -1;
            if (redist_init_error[0] == '\0')
                redist_init_errorf("the embedded Python started, but redist's start-up code failed "
                                   "(its traceback was printed on stderr)");
        }
        __atomic_store_n(&redist_py_state, rc == 0 ? 1 : -1, __ATOMIC_RELEASE);
    }
    state = redist_py_state;
    pthread_mutex_unlock(&redist_start_lock);
    if (state != 1)
        _redist_set_last_error(redist_init_error);
    return state == 1 ? 0 : -1;
}

#define REDIST_ENSURE_PYTHON()                                                                  \
    do {                                                                                        \
        if (__builtin_expect(__atomic_load_n(&redist_py_state, __ATOMIC_ACQUIRE) != 1, 0) &&  \
            redist_start_python_slow() != 0)                                                    \
            return REDIST_ERROR_PYTHON_INIT;                                                    \
    } while (0)

/* --- the C API ------------------------------------------------------------------------------ */

CFFI_DLLEXPORT redist_status_t redist_initialize(int32_t fortran_comm, int32_t device_id)
{
    REDIST_ENSURE_PYTHON();
    redist_drop_all_replays(0);
    return (redist_status_t)_redist_py_initialize(fortran_comm, device_id);
}

CFFI_DLLEXPORT redist_status_t redist_finalize(void)
{
    int32_t st;
    REDIST_ENSURE_PYTHON();
    redist_drop_all_replays(0); /* before the requests go */
    st = _redist_py_finalize();
    redist_drop_all_replays(1); /* every handle is gone */
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_comm_rank(int32_t *rank, int32_t *nranks)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_comm_rank(rank, nranks);
}

CFFI_DLLEXPORT redist_status_t redist_allocate_symmetric_memory(void **ptr, int64_t nbytes)
{
    uintptr_t got = 0;
    int32_t st;
    if (ptr != NULL)
        *ptr = NULL;
    REDIST_ENSURE_PYTHON();
    st = _redist_py_allocate_symmetric_memory(ptr != NULL ? &got : NULL, nbytes);
    if (ptr != NULL && st == REDIST_SUCCESS)
        *ptr = (void *)got;
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_free_symmetric_memory(void *ptr)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_free_symmetric_memory((uintptr_t)ptr);
}

CFFI_DLLEXPORT redist_status_t redist_export_wisdom(const char *path, int32_t *entries)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_export_wisdom(path, entries);
}

CFFI_DLLEXPORT redist_status_t redist_import_wisdom(const char *path, int32_t *entries)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_import_wisdom(path, entries);
}

CFFI_DLLEXPORT redist_status_t redist_forget_wisdom(void)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_forget_wisdom();
}

/* The one body of redist_create, redist_create_ex (one array: nfields 1) and redist_create_fields
   (`create` picks the Python twin, so errors name the function called). */
static redist_status_t redist_create_any(redist_py_create_t create, redist_t *handle, int32_t nfields, int32_t ndim,
                                         const int64_t *in_lower, const int64_t *in_upper, const int64_t *in_strides,
                                         const int64_t *out_lower, const int64_t *out_upper,
                                         const int64_t *element_sizes, int32_t order, int32_t memory,
                                         const uintptr_t *operands, const redist_options_t *options)
{
    intptr_t h = 0;
    int32_t st;
    if (handle != NULL)
        *handle = NULL;
    REDIST_ENSURE_PYTHON();
    st = create(handle != NULL ? &h : NULL, nfields, ndim, in_lower, in_upper, in_strides, out_lower, out_upper,
                element_sizes, order, memory, operands, options);
    if (handle != NULL && st == REDIST_SUCCESS)
        *handle = (redist_t)h;
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_create(redist_t *handle, int32_t ndim, const int64_t *in_lower,
                                             const int64_t *in_upper, const int64_t *in_strides,
                                             const int64_t *out_lower, const int64_t *out_upper,
                                             int64_t element_size, redist_order_t order,
                                             redist_memory_t memory, void *operand)
{
    uintptr_t op = (uintptr_t)operand;
    return redist_create_any(_redist_py_create, handle, 1, ndim, in_lower, in_upper, in_strides, out_lower,
                             out_upper, &element_size, (int32_t)order, (int32_t)memory, &op, NULL);
}

/* order -1: the order comes from the options (NULL options: the defaults). */
CFFI_DLLEXPORT redist_status_t redist_create_ex(redist_t *handle, int32_t ndim, const int64_t *in_lower,
                                                const int64_t *in_upper, const int64_t *in_strides,
                                                const int64_t *out_lower, const int64_t *out_upper,
                                                int64_t element_size, redist_memory_t memory, void *operand,
                                                const redist_options_t *options)
{
    uintptr_t op = (uintptr_t)operand;
    return redist_create_any(_redist_py_create, handle, 1, ndim, in_lower, in_upper, in_strides, out_lower,
                             out_upper, &element_size, -1, (int32_t)memory, &op, options);
}

CFFI_DLLEXPORT redist_status_t redist_create_fields(redist_t *handle, int32_t nfields, int32_t ndim,
                                                    const int64_t *in_lower, const int64_t *in_upper,
                                                    const int64_t *in_strides, const int64_t *out_lower,
                                                    const int64_t *out_upper, const int64_t *element_sizes,
                                                    redist_memory_t memory, void *const *operands,
                                                    const redist_options_t *options)
{
    return redist_create_any(_redist_py_create_fields, handle, nfields, ndim, in_lower, in_upper, in_strides,
                             out_lower, out_upper, element_sizes, -1, (int32_t)memory,
                             (const uintptr_t *)operands, options);
}

CFFI_DLLEXPORT redist_status_t redist_plan(redist_t handle, void *stream)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_plan((intptr_t)handle, (uintptr_t)stream);
}

CFFI_DLLEXPORT redist_status_t redist_execute(redist_t handle, void *stream, void *out, void **result)
{
    return redist_execute_strided(handle, stream, out, NULL, result); /* NULL strides: dense */
}

CFFI_DLLEXPORT redist_status_t redist_execute_strided(redist_t handle, void *stream, void *out,
                                                      const int64_t *out_strides, void **result)
{
    uintptr_t res = 0, want = (uintptr_t)out;
    int32_t st;
    redist_replay_t *rp;
    REDIST_ENSURE_PYTHON();
    rp = stream == NULL && out_strides == NULL ? redist_replay_take((intptr_t)handle, 0, NULL, &want) : NULL;
    if (rp != NULL)
        st = redist_replay_call(handle, rp, &res);
    else if ((st = redist_sync_binding(handle)) == REDIST_SUCCESS)
        st = _redist_py_execute((intptr_t)handle, (uintptr_t)stream, (uintptr_t)out, out_strides, &res);
    if (result != NULL)
        *result = st == REDIST_SUCCESS ? (void *)res : NULL;
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_reset_operand(redist_t handle, void *operand)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_reset_operand((intptr_t)handle, (uintptr_t)operand);
}

/* To an operand one of the handle's replays was made for: no Python (redist_rebind_lazily). */
CFFI_DLLEXPORT redist_status_t redist_reset_operand_unchecked(redist_t handle, void *operand)
{
    uintptr_t op = (uintptr_t)operand;
    int32_t st;
    REDIST_ENSURE_PYTHON();
    if (operand != NULL && redist_rebind_lazily((intptr_t)handle, 0, &op))
        return REDIST_SUCCESS;
    st = _redist_py_reset_operand_unchecked((intptr_t)handle, op);
    if (st == REDIST_SUCCESS) /* a failed one bound nothing: what C had bound stays */
        redist_python_bound((intptr_t)handle, &op);
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_execute_fields(redist_t handle, void *stream, void *const *outs, void **results)
{
    return redist_execute_fields_strided(handle, stream, outs, NULL, results); /* NULL strides: dense */
}

/* The Python side writes results[] (NULL first, then each field's address on success). */
CFFI_DLLEXPORT redist_status_t redist_execute_fields_strided(redist_t handle, void *stream, void *const *outs,
                                                             const int64_t *out_strides, void **results)
{
    redist_replay_t *rp;
    redist_status_t synced;
    REDIST_ENSURE_PYTHON();
    rp = stream == NULL && out_strides == NULL && results != NULL
             ? redist_replay_take((intptr_t)handle, 1, NULL, (const uintptr_t *)outs) : NULL;
    if (rp != NULL)
        return redist_replay_call(handle, rp, (uintptr_t *)results);
    if ((synced = redist_sync_binding(handle)) != REDIST_SUCCESS)
        return synced;
    return (redist_status_t)_redist_py_execute_fields((intptr_t)handle, (uintptr_t)stream, (const uintptr_t *)outs,
                                                      out_strides, (uintptr_t *)results);
}

CFFI_DLLEXPORT redist_status_t redist_reset_operands(redist_t handle, void *const *operands)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_reset_operands((intptr_t)handle, (const uintptr_t *)operands);
}

CFFI_DLLEXPORT redist_status_t redist_reset_operands_unchecked(redist_t handle, void *const *operands)
{
    int32_t st;
    REDIST_ENSURE_PYTHON();
    if (operands != NULL && redist_rebind_lazily((intptr_t)handle, 1, (const uintptr_t *)operands))
        return REDIST_SUCCESS;
    st = _redist_py_reset_operands_unchecked((intptr_t)handle, (const uintptr_t *)operands);
    if (st == REDIST_SUCCESS) /* a failed one bound nothing: what C had bound stays */
        redist_python_bound((intptr_t)handle, (const uintptr_t *)operands);
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_reset_operand_field(redist_t handle, int32_t field, void *operand)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_reset_operand_field((intptr_t)handle, field, (uintptr_t)operand);
}

CFFI_DLLEXPORT redist_status_t redist_reset_operand_field_unchecked(redist_t handle, int32_t field, void *operand)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_reset_operand_field_unchecked((intptr_t)handle, field, (uintptr_t)operand);
}

CFFI_DLLEXPORT redist_status_t redist_get_nfields(redist_t handle, int32_t *nfields)
{
    REDIST_ENSURE_PYTHON();
    return (redist_status_t)_redist_py_get_nfields((intptr_t)handle, nfields);
}

CFFI_DLLEXPORT redist_status_t redist_release_operand(redist_t handle)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_release_operand((intptr_t)handle);
}

CFFI_DLLEXPORT redist_status_t redist_free(redist_t handle)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_free((intptr_t)handle);
}

CFFI_DLLEXPORT redist_status_t redist_graph(redist_t handle, void *stream, void **cuda_graph)
{
    uintptr_t g = 0;
    int32_t st;
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    st = _redist_py_graph((intptr_t)handle, (uintptr_t)stream, &g);
    if (cuda_graph != NULL)
        *cuda_graph = st == REDIST_SUCCESS ? (void *)g : NULL;
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_update_graph_exec(redist_t handle, void *cuda_graph, void *cuda_graph_exec,
                                                       int32_t *ncopies)
{
    int32_t n = 0, st;
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    st = _redist_py_update_graph_exec((intptr_t)handle, (uintptr_t)cuda_graph, (uintptr_t)cuda_graph_exec, &n);
    if (ncopies != NULL)
        *ncopies = st == REDIST_SUCCESS ? n : 0;
    return (redist_status_t)st;
}

CFFI_DLLEXPORT redist_status_t redist_release_captured(redist_t handle)
{
    REDIST_ENSURE_PYTHON();
    REDIST_LEAVE_REPLAYS(handle);
    return (redist_status_t)_redist_py_release_captured((intptr_t)handle);
}

/* No Python needed below: these work even when start-up failed. */

CFFI_DLLEXPORT const char *redist_get_error_string(redist_status_t status)
{
    switch (status) {
    case REDIST_SUCCESS: return "REDIST_SUCCESS: success";
    case REDIST_ERROR_INVALID_VALUE: return "REDIST_ERROR_INVALID_VALUE: an argument has an invalid value";
    case REDIST_ERROR_INVALID_STATE: return "REDIST_ERROR_INVALID_STATE: the call is not allowed in this state";
    case REDIST_ERROR_NOT_INITIALIZED: return "REDIST_ERROR_NOT_INITIALIZED: redist (or a runtime it needs) is not initialized";
    case REDIST_ERROR_NOT_SUPPORTED: return "REDIST_ERROR_NOT_SUPPORTED: not supported by this build or machine";
    case REDIST_ERROR_CUDA: return "REDIST_ERROR_CUDA: a CUDA, NVRTC or NVSHMEM call failed";
    case REDIST_ERROR_COMMUNICATION: return "REDIST_ERROR_COMMUNICATION: an MPI or NVSHMEM communication failed";
    case REDIST_ERROR_INTERNAL: return "REDIST_ERROR_INTERNAL: internal error in redist";
    case REDIST_ERROR_PYTHON_INIT: return "REDIST_ERROR_PYTHON_INIT: the embedded Python environment could not start";
    }
    return "unknown redist status";
}

CFFI_DLLEXPORT const char *redist_get_last_error(void)
{
    return redist_last_error;
}

CFFI_DLLEXPORT const char *redist_version(void)
{
    return REDIST_BAKED_VERSION;
}
