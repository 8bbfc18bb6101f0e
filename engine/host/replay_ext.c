/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Python's entry into the compiled replays (cabi/redist_replay.c): the extension module
 * redist.engine.host._replay_ext (engine/host/replay_build.py, built by setup.py; optional).
 *
 * A Python time loop calls Redistribute.execute() with the same operand and out= every step, or
 * alternates between a few, as a C loop calls redist_execute. After such a call has run through
 * Python, the engine's words for the next identical call (engine/host/replay.py) are installed
 * here, keyed by the object's serial, its operands and its out=; the next execute() with that
 * binding runs them in C (engine/host/replay.py's Replays): the status round, the stores, copies and
 * messages, without entering the interpreter. Where a peer says something else, Python finishes the
 * call from what was heard (Redistribute._resume), as the C ABI's shim does.
 *
 * A numpy out= is matched here too (redist_replay_execute_out): the array object's address, read
 * as numpy's C API reads it (its type, data pointer, shape, strides, dtype and writability), against
 * the record Python made after the call that checked it (redist_out_record), so a time loop's
 * execute(out=) reaches its replay without Python reading the array's attributes.
 *
 * This table is this module's own: the C ABI's libredist.so compiles its own copy of
 * redist_replay.c, and an object reached through it is replayed there only.
 */
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define NO_IMPORT_ARRAY /* numpy's function table is never used: only its array struct's accessors */
#include <numpy/ndarraytypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redist.h"

#define REDIST_MSG_SIZE 4096

/* Why the last replay of this thread failed (redist_replay_error). */
static __thread char redist_last_error[REDIST_MSG_SIZE];

#include "redist_replay.c"

/* Whether a numpy operand moved since Python bound it: `objects[f]` (0: not a numpy array, not
   checked) no longer has its data at `operands[f]` (ndarray.__setstate__ replaced its buffer). */
static int redist_operands_moved(int32_t n, const uintptr_t *objects, const uintptr_t *operands)
{
    int32_t f;
    for (f = 0; f < n; f++)
        if (objects[f] != 0 && (uintptr_t)PyArray_DATA((PyArrayObject *)objects[f]) != operands[f])
            return 1;
    return 0;
}

/*
 * Run `handle`'s replay for `operands` and `outs` (`nfields` of each; outs 0: the engine-owned
 * result), where the numpy operand objects `objects` (0: not checked) still have their data there.
 * Returns
 *   -3  an operand moved (Python rebinds it and runs the call);
 *   -1  none (the call goes through Python);
 *    0  done;
 *    1  a peer said something else: nothing was written; heard[0] is this rank's code, heard[1] how
 *       many peers were heard, heard[2...] their codes (Python finishes the call);
 *    2  an MPI call failed (redist_replay_error() says which): no replay of the handle runs again.
 * `heard` has room for `room` values (at least 2 + the number of peers of the status round).
 */
static int redist_replay_execute(intptr_t handle, int32_t fields, int32_t nfields, const uintptr_t *objects,
                                 const uintptr_t *operands, const uintptr_t *outs, int32_t *heard, int32_t room)
{
    redist_replay_t *rp;
    int st;
    if (redist_operands_moved(nfields, objects, operands))
        return -3;
    rp = redist_replay_take(handle, fields, operands, outs);
    if (rp == NULL)
        return -1;
    if (rp->nothers + 2 > room) { /* never: the caller sizes heard for every peer */
        redist_replay_return(handle, rp);
        return -1;
    }
    st = redist_replay_run(rp);
    if (st == REDIST_REPLAY_RESUME) {
        heard[0] = rp->code;
        heard[1] = rp->nothers;
        memcpy(heard + 2, rp->heard, sizeof(int32_t) * (size_t)rp->nothers);
        redist_replay_return(handle, rp);
        return 1;
    }
    if (st != REDIST_SUCCESS) {
        redist_replay_delete(rp);
        _redist_drop_replay(handle);
        return 2;
    }
    redist_replay_return(handle, rp);
    return 0;
}

/* One operand (`object`: the numpy array, or 0) and one out= (the common case, without arrays to fill in). */
static int redist_replay_execute1(intptr_t handle, uintptr_t object, uintptr_t operand, uintptr_t out, int32_t *heard,
                                  int32_t room)
{
    return redist_replay_execute(handle, 0, 1, &object, &operand, &out, heard, room);
}

/*
 * The numpy out= arrays of every handle that Python took again without its checks, as Python
 * recorded them (Redistribute._offer): the array's address, what of it can change in place (shape,
 * strides, dtype, writability; its data pointer, which numpy's __setstate__ moves), the operands it
 * was checked against (a loop alternating operands) and the key of its replays. A full table
 * overwrites its oldest record (that array's calls run in Python until its next record).
 */
#define REDIST_OUT_RECORDS 64
#define REDIST_OUT_DIMS 8
#define REDIST_OUT_OPERANDS 4

typedef struct {
    intptr_t handle; /* 0: unused */
    uintptr_t object;
    PyTypeObject *type; /* a reference the record owns, as descr: no other type or dtype can be */
    void *data;         /* made at its address and pass for it while the record holds it */
    PyArray_Descr *descr;
    int nd;
    npy_intp dims[REDIST_OUT_DIMS], strides[REDIST_OUT_DIMS];
    uintptr_t operands[REDIST_OUT_OPERANDS];
    int32_t noperands;
    uintptr_t key;
} redist_out_record_t;

static redist_out_record_t redist_out_records[REDIST_OUT_RECORDS];
static int redist_out_next; /* the slot a new record overwrites */

/* What a record owns (its type and dtype references), taken out of it as it goes (with the table's
   lock held): released by redist_out_release once the lock is not (the GIL held). */
typedef struct {
    PyObject *refs[2 * REDIST_OUT_RECORDS];
    int n;
} redist_out_owned_t;

static void redist_out_clear(redist_out_record_t *rec, redist_out_owned_t *owned)
{
    if (rec->handle != 0) {
        owned->refs[owned->n++] = (PyObject *)rec->type;
        owned->refs[owned->n++] = (PyObject *)rec->descr;
    }
    rec->handle = 0;
}

static void redist_out_release(redist_out_owned_t *owned)
{
    int k;
    for (k = 0; k < owned->n; k++)
        Py_DECREF(owned->refs[k]);
    owned->n = 0;
}

/* Whether `arr` is now what `rec` recorded (the caller holds a reference to it). */
static int redist_out_same(const redist_out_record_t *rec, PyArrayObject *arr)
{
    int nd = PyArray_NDIM(arr);
    return Py_TYPE((PyObject *)arr) == rec->type && (PyArray_FLAGS(arr) & NPY_ARRAY_WRITEABLE) != 0
           && PyArray_DATA(arr) == rec->data && PyArray_DESCR(arr) == rec->descr && nd == rec->nd
           && memcmp(PyArray_DIMS(arr), rec->dims, sizeof(npy_intp) * (size_t)nd) == 0
           && memcmp(PyArray_STRIDES(arr), rec->strides, sizeof(npy_intp) * (size_t)nd) == 0;
}

/* Record `object` (a numpy array Python holds, as it is now) as `handle`'s out= of replay key `key`,
   checked against `operands` ([n]; at most REDIST_OUT_OPERANDS are kept): 0, or -1 where it cannot be
   recorded (more dimensions than a record holds; its calls then run in Python). */
static int redist_out_record(intptr_t handle, uintptr_t object, uintptr_t key, const uintptr_t *operands,
                             int32_t n)
{
    PyArrayObject *arr = (PyArrayObject *)object;
    redist_out_record_t *rec = NULL;
    redist_out_owned_t owned; /* not zeroed: owned.n counts what it holds */
    PyGILState_STATE gil;
    int k, nd;
    owned.n = 0;
    if (n < 1)
        return -1;
    gil = PyGILState_Ensure(); /* cffi released it: the array is read as the interpreter holds it */
    nd = PyArray_NDIM(arr);
    if (nd > REDIST_OUT_DIMS) {
        PyGILState_Release(gil);
        return -1;
    }
    pthread_mutex_lock(&redist_replay_lock);
    for (k = 0; k < REDIST_OUT_RECORDS && rec == NULL; k++)
        if (redist_out_records[k].handle == handle && redist_out_records[k].object == object)
            rec = &redist_out_records[k];
    if (rec == NULL) {
        rec = &redist_out_records[redist_out_next];
        redist_out_next = (redist_out_next + 1) % REDIST_OUT_RECORDS;
    }
    redist_out_clear(rec, &owned); /* what it recorded before (this array, or the one it overwrites) */
    rec->handle = handle;
    rec->object = object;
    rec->type = Py_TYPE((PyObject *)arr);
    Py_INCREF(rec->type);
    rec->data = PyArray_DATA(arr);
    rec->descr = PyArray_DESCR(arr);
    Py_INCREF(rec->descr);
    rec->nd = nd;
    memcpy(rec->dims, PyArray_DIMS(arr), sizeof(npy_intp) * (size_t)nd);
    memcpy(rec->strides, PyArray_STRIDES(arr), sizeof(npy_intp) * (size_t)nd);
    rec->noperands = n < REDIST_OUT_OPERANDS ? n : REDIST_OUT_OPERANDS;
    memcpy(rec->operands, operands, sizeof(uintptr_t) * (size_t)rec->noperands);
    rec->key = key;
    pthread_mutex_unlock(&redist_replay_lock);
    redist_out_release(&owned);
    PyGILState_Release(gil);
    return 0;
}

/* The out= record of `object` goes (Python's weak reference to the array calls this as the array
   goes, before its address can name another object). */
static void redist_out_drop(intptr_t handle, uintptr_t object)
{
    redist_out_owned_t owned; /* not zeroed: owned.n counts what it holds */
    PyGILState_STATE gil = PyGILState_Ensure(); /* the references it owned are released */
    int k;
    owned.n = 0;
    pthread_mutex_lock(&redist_replay_lock);
    for (k = 0; k < REDIST_OUT_RECORDS; k++)
        if (redist_out_records[k].handle == handle && redist_out_records[k].object == object)
            redist_out_clear(&redist_out_records[k], &owned);
    pthread_mutex_unlock(&redist_replay_lock);
    redist_out_release(&owned);
    PyGILState_Release(gil);
}

/* How many out= records `handle` has. */
static int redist_out_count(intptr_t handle)
{
    int k, n = 0;
    pthread_mutex_lock(&redist_replay_lock);
    for (k = 0; k < REDIST_OUT_RECORDS; k++)
        n += redist_out_records[k].handle == handle;
    pthread_mutex_unlock(&redist_replay_lock);
    return n;
}

/* Every out= record of `handle` (0: of every handle) goes. */
static void redist_out_forget(intptr_t handle)
{
    redist_out_owned_t owned; /* not zeroed: owned.n counts what it holds */
    PyGILState_STATE gil = PyGILState_Ensure();
    int k;
    owned.n = 0;
    pthread_mutex_lock(&redist_replay_lock);
    for (k = 0; k < REDIST_OUT_RECORDS; k++)
        if (handle == 0 || redist_out_records[k].handle == handle)
            redist_out_clear(&redist_out_records[k], &owned);
    pthread_mutex_unlock(&redist_replay_lock);
    redist_out_release(&owned);
    PyGILState_Release(gil);
}

/* One operand (`operand_object`: as in redist_replay_execute1) and a numpy out= (`object`, which the
   caller holds): as redist_replay_execute1 for
   the key of its record, where the array is as recorded and was checked against `operand`; -1
   (none: the call goes through Python) otherwise, -2 where its record exists but the array changed
   in place (reshaped, another dtype, read-only, its buffer moved: the record goes, and Python
   checks the array again). */
static int redist_replay_execute_out(intptr_t handle, uintptr_t operand_object, uintptr_t operand, uintptr_t object,
                                     int32_t *heard, int32_t room)
{
    uintptr_t key = 0;
    redist_out_owned_t owned; /* not zeroed: owned.n counts what it holds */
    int k, f, changed = 0;
    PyGILState_STATE gil = PyGILState_Ensure(); /* as in redist_out_record; released before MPI */
    owned.n = 0;
    pthread_mutex_lock(&redist_replay_lock);
    for (k = 0; k < REDIST_OUT_RECORDS; k++) {
        redist_out_record_t *rec = &redist_out_records[k];
        if (rec->handle != handle || rec->object != object)
            continue;
        if (!redist_out_same(rec, (PyArrayObject *)object)) {
            redist_out_clear(rec, &owned);
            changed = 1;
        } else
            for (f = 0; f < rec->noperands; f++)
                if (rec->operands[f] == operand)
                    key = rec->key;
        break;
    }
    pthread_mutex_unlock(&redist_replay_lock);
    redist_out_release(&owned);
    PyGILState_Release(gil);
    if (key == 0)
        return changed ? -2 : -1;
    return redist_replay_execute(handle, 0, 1, &operand_object, &operand, &key, heard, room);
}

/* The data pointer of the numpy array `object` (the caller holds it): what Python's shortcuts for an
   out= taken again compare, so that one whose buffer moved in place (ndarray.__setstate__) is checked
   again instead of written at its old address; one C call instead of __array_interface__ (2-3 us). */
static uintptr_t redist_array_data(uintptr_t object)
{
    return (uintptr_t)PyArray_DATA((PyArrayObject *)object);
}

static const char *redist_replay_error(void)
{
    return redist_last_error;
}

/* How many replays `handle` holds (what the tests look at). */
static int redist_replay_count(intptr_t handle)
{
    redist_handle_replays_t *hr;
    int n;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    n = hr != NULL ? hr->count : 0;
    pthread_mutex_unlock(&redist_replay_lock);
    return n;
}

/* Every handle's replays (redist.finalize()). */
static void redist_replay_drop_all(void)
{
    redist_drop_all_replays(1);
    redist_out_forget(0);
}
