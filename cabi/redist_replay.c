/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled replays: the steady-state host calls of a handle, run in C without entering Python.
 * redist_shim.c includes this file.
 *
 * A C or Fortran time loop calls redist_execute with the same operands and out= every step, or
 * alternates between a few. Once such a call has run through Python and succeeded, the engine
 * describes what the next identical call does (PushExecutable.replay in engine/host/push/replay.py,
 * HostExecutable.replay in engine/host/executable.py for the message methods and one process) as
 * words (engine/host/replay.py), and _entry.py hands them to _redist_set_replay: a replay, keyed by
 * the operands and the out= it was made for (up to REDIST_REPLAYS_PER_HANDLE per handle). The next
 * redist_execute / redist_execute_fields of that handle with that binding (and no stream, no
 * strides) runs it here:
 *
 *   0. the words this rank publishes for its peers (the out= in host symmetric memory it wants
 *      their data in: its segment's header), written;
 *   1. the status round (engine/host/status.py): start the persistent status receives and
 *      sends of this rank's code, wait for the receives. If every peer said the same code,
 *      go on; otherwise the Python side binds the replay's operands and out= and finishes the
 *      call from what was heard (_redist_py_resume: a failed peer raises there on every rank,
 *      exactly as if the call had run in Python);
 *      The replay's checks come next: words its peers wrote before their status (where a peer
 *      wants its data: the out= in host symmetric memory it published), each compared with the
 *      value the replay was made for; one that differs also hands the call back to Python;
 *   2. start the arrival receives, run the copies into the peers' memory or the packs (each pack's
 *      messages start right after it), the cross-memory copies (process_vm_writev into the peers'
 *      out=, process_vm_readv from their operands into this rank's), start the other arrival sends,
 *      run the local copies, wait for every request of the call, run the copies out of the landing
 *      area or the unpacks;
 *   3. where the call copies across memories: one Allreduce, which tells every rank whether the
 *      kernel refused a copy anywhere (then every rank fails the call with the same message) and
 *      keeps a sender from returning (and changing its operand) before its readers are done.
 *
 * redist_reset_operand(s)_unchecked to operands one of the handle's replays was made for only
 * records them here (where no peer reads the operands' addresses, which the words say); Python
 * is told before its next call of the handle. Any other call of a handle goes through Python and
 * drops its replays first (it may re-plan, rebind or free); the engine drops them too when they
 * stop being valid (_redist_drop_replay: its executable freed, its status codes changed), and so
 * do redist_initialize and redist_finalize.
 *
 * MPI is called through the addresses of MPI_Startall / MPI_Waitall / MPI_Error_string that
 * mpi4py's library resolved, with request handles and status layout as that MPI defines them
 * (widths and the tag's offset come with the words): libredist.so is built without mpi.h and
 * works with any MPI mpi4py was built against.
 *
 * The table of replays is guarded by a mutex, so handles may be used from different threads; one
 * handle is used by one thread at a time (a replay runs outside the lock, and calls MPI without any
 * lock: replays of different handles at once need MPI_THREAD_MULTIPLE, which redist_initialize asks
 * for when it initializes MPI; but every handle uses redist's one communicator and the status round
 * receives any tag, so two rounds at once could take each other's messages: redist.h asks of
 * executes what MPI asks of collectives, one thread at a time).
 */

#define REDIST_REPLAY_VERSION 4
#define REDIST_REPLAY_MAXDIM 32
#define REDIST_REPLAY_BUCKETS 64
#define REDIST_REPLAY_RESUME (-1) /* redist_replay_run: a peer said something else (heard[] holds it) */

typedef int (*redist_mpi_startall_t)(int, void *);
typedef int (*redist_mpi_waitall_t)(int, void *, void *);
typedef int (*redist_mpi_error_string_t)(int, char *, int *);
/* MPI_Allreduce with the handles as words (an int handle's value or a pointer: both go in an integer
   register on the ABIs libredist is built for, where the callee reads what its type takes) */
typedef int (*redist_mpi_allreduce_t)(const void *, void *, int, intptr_t, intptr_t, intptr_t);

#ifdef __linux__
#include <errno.h>
#include <sys/types.h>
#include <sys/uio.h>
/* glibc declares them with _GNU_SOURCE only (libredist's sources do not define it) */
extern ssize_t process_vm_readv(pid_t, const struct iovec *, unsigned long, const struct iovec *, unsigned long,
                                unsigned long);
extern ssize_t process_vm_writev(pid_t, const struct iovec *, unsigned long, const struct iovec *, unsigned long,
                                 unsigned long);
#endif

/* One cross-memory call: `nbytes` from this rank's `local` iovecs into the peer's `remote` ones
   (process_vm_writev) or the other way (process_vm_readv, `read`); `into` is the rank written. */
typedef struct {
    int32_t read, into;
    int32_t pid;
    int64_t nbytes;
    int32_t nlocal, nremote;
    void *local, *remote; /* struct iovec arrays */
} redist_cross_t;

/* One strided copy: `ndim` outer dimensions (byte strides) of contiguous runs of `run` bytes; then
   `starts` of the arrival sends start (a pack's messages; phase 0 only). */
typedef struct {
    uint8_t *dst;
    const uint8_t *src;
    int64_t run;
    int32_t ndim, starts;
    int64_t shape[REDIST_REPLAY_MAXDIM];
    int64_t dst_strides[REDIST_REPLAY_MAXDIM];
    int64_t src_strides[REDIST_REPLAY_MAXDIM];
} redist_copy_t;

/* The three copy phases: into the peers' memory, local, out of the landing area (after the waits). */
enum { REDIST_COPY_PEERS, REDIST_COPY_LOCAL, REDIST_COPY_AFTER, REDIST_COPY_PHASES };

typedef struct redist_replay {
    struct redist_replay *next; /* in its handle's list, the most recently installed first */
    int32_t nfields;
    uintptr_t *operands; /* [nfields]: the operands of the replayed call (its key, with outs) */
    uintptr_t *outs;     /* [nfields]: the out= of the replayed call (0: the engine-owned result) */
    uintptr_t *results;  /* [nfields]: what the call returns */
    redist_mpi_startall_t startall;
    redist_mpi_waitall_t waitall;
    redist_mpi_error_string_t error_string;
    int64_t width, status_size, tag_offset;
    int32_t tag_base, code;
    int32_t nothers; /* the status receives: the first nothers requests of `first` */
    int32_t nfirst, narrival_recvs, narrival_sends, nfinish;
    void *first, *arrival_recvs, *arrival_sends, *finish; /* request handles, the MPI's width each */
    void *statuses;                                        /* max(nothers, nfinish) MPI_Status */
    int32_t *heard;                                        /* [nothers]: the peers' codes */
    int32_t nsets, nchecks;
    volatile uint64_t **set_at;         /* [nsets]: words of this rank's segment ... */
    uint64_t *set_value;                /* ... and what this binding publishes there */
    const volatile uint64_t **check_at; /* [nchecks]: words in the peers' segments ... */
    uint64_t *check_value;              /* ... and what they held when the replay was made */
    int32_t ncopies[REDIST_COPY_PHASES];
    redist_copy_t *copies[REDIST_COPY_PHASES];
    int32_t ncross;
    redist_cross_t *cross;             /* [ncross] */
    redist_mpi_allreduce_t allreduce; /* NULL: no closing Allreduce */
    intptr_t comm, int_type, max_op;
} redist_replay_t;

/*
 * A handle's replays (one per binding: operands and outs, at most REDIST_REPLAYS_PER_HANDLE) and
 * its operand binding. redist_reset_operand(s)_unchecked to operands a replay was made for only
 * moves `bound` here (where the engine allows it: `lazy`); Python learns them (`python`) before
 * its next call of the handle (redist_sync_binding).
 */
typedef struct redist_handle_replays {
    struct redist_handle_replays *next; /* in its bucket */
    intptr_t handle;
    int32_t fields; /* made by redist_create_fields */
    int32_t nfields;
    int32_t lazy;       /* the operands may be rebound without Python (no peer reads their addresses) */
    uintptr_t *python;  /* [nfields]: the operands bound in Python */
    uintptr_t *bound;   /* [nfields]: the operands bound now */
    redist_replay_t *replays;
    int32_t count;
} redist_handle_replays_t;

#define REDIST_REPLAYS_PER_HANDLE 4

static redist_handle_replays_t *redist_replays[REDIST_REPLAY_BUCKETS];
static pthread_mutex_t redist_replay_lock = PTHREAD_MUTEX_INITIALIZER;

static int redist_same(const uintptr_t *a, const uintptr_t *b, int32_t n)
{
    return memcmp(a, b, sizeof(uintptr_t) * (size_t)n) == 0;
}

static void redist_replay_delete(redist_replay_t *rp)
{
    int k;
    free(rp->operands);
    free(rp->outs);
    free(rp->results);
    free(rp->first);
    free(rp->arrival_recvs);
    free(rp->arrival_sends);
    free(rp->finish);
    free(rp->statuses);
    free(rp->heard);
    free((void *)rp->set_at);
    free(rp->set_value);
    free((void *)rp->check_at);
    free(rp->check_value);
    for (k = 0; k < REDIST_COPY_PHASES; k++)
        free(rp->copies[k]);
    for (k = 0; rp->cross != NULL && k < rp->ncross; k++) {
        free(rp->cross[k].local);
        free(rp->cross[k].remote);
    }
    free(rp->cross);
    free(rp);
}

static void redist_replays_delete(redist_replay_t *rp)
{
    while (rp != NULL) {
        redist_replay_t *next = rp->next;
        redist_replay_delete(rp);
        rp = next;
    }
}

static void redist_handle_delete(redist_handle_replays_t *hr)
{
    redist_replays_delete(hr->replays);
    free(hr->python);
    free(hr->bound);
    free(hr);
}

/* The replays of `handle`, or NULL. Under the lock. */
static redist_handle_replays_t *redist_handle_find(intptr_t handle)
{
    redist_handle_replays_t *hr = redist_replays[(uintptr_t)handle % REDIST_REPLAY_BUCKETS];
    while (hr != NULL && hr->handle != handle)
        hr = hr->next;
    return hr;
}

/* Take `handle`'s replays out of the table (the caller deletes them). Under the lock. */
static redist_handle_replays_t *redist_handle_unlink(intptr_t handle)
{
    redist_handle_replays_t **at = &redist_replays[(uintptr_t)handle % REDIST_REPLAY_BUCKETS], *hr;
    while (*at != NULL && (*at)->handle != handle)
        at = &(*at)->next;
    hr = *at;
    if (hr != NULL)
        *at = hr->next;
    return hr;
}

/* Delete `*at`'s replays, and the record itself (unlinked) unless Python has not learnt its operands
   yet and `everything` is 0: then it stays, with no replays, until redist_sync_binding tells Python.
   1 when the record went. Under the lock. */
static int redist_handle_clear(redist_handle_replays_t **at, int everything)
{
    redist_handle_replays_t *hr = *at;
    redist_replays_delete(hr->replays);
    hr->replays = NULL;
    hr->count = 0;
    if (!everything && !redist_same(hr->python, hr->bound, hr->nfields))
        return 0;
    *at = hr->next;
    redist_handle_delete(hr);
    return 1;
}

/* Forget every replay of `handle` (if any), keeping the operands Python has not learnt yet. Called from
   Python too (cdef in _build.py): the engine calls it when the words stop being valid (its executable
   freed, its status codes changed). */
static void _redist_drop_replay(intptr_t handle)
{
    redist_handle_replays_t **at;
    pthread_mutex_lock(&redist_replay_lock);
    at = &redist_replays[(uintptr_t)handle % REDIST_REPLAY_BUCKETS];
    while (*at != NULL && (*at)->handle != handle)
        at = &(*at)->next;
    if (*at != NULL)
        redist_handle_clear(at, 0);
    pthread_mutex_unlock(&redist_replay_lock);
}

/* Every handle's replays (redist_initialize: a second call fails, and the handles live on, so their
   operands not yet told to Python stay); with `everything`, every record too (redist_finalize: the
   handles are gone). */
static void redist_drop_all_replays(int everything)
{
    int b;
    pthread_mutex_lock(&redist_replay_lock);
    for (b = 0; b < REDIST_REPLAY_BUCKETS; b++)
        for (redist_handle_replays_t **at = &redist_replays[b]; *at != NULL;)
            if (!redist_handle_clear(at, everything))
                at = &(*at)->next;
    pthread_mutex_unlock(&redist_replay_lock);
}

/* The replay of `handle` for `operands` ([nfields]; NULL: its operands bound now) and `outs`
   ([nfields], NULL: none), taken out of its list (the caller runs it, then gives it back with
   redist_replay_return or deletes it); NULL where there is none (`fields`: the kind of handle the
   function called is for). */
static redist_replay_t *redist_replay_take(intptr_t handle, int32_t fields, const uintptr_t *operands,
                                           const uintptr_t *outs)
{
    redist_handle_replays_t *hr;
    redist_replay_t **at = NULL, *rp = NULL;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL && hr->fields == fields)
        for (at = &hr->replays; *at != NULL; at = &(*at)->next) {
            int32_t f, same = redist_same((*at)->operands, operands != NULL ? operands : hr->bound, hr->nfields);
            for (f = 0; same && f < hr->nfields; f++)
                same = (*at)->outs[f] == (outs != NULL ? outs[f] : 0);
            if (same) {
                rp = *at;
                *at = rp->next;
                hr->count--;
                break;
            }
        }
    pthread_mutex_unlock(&redist_replay_lock);
    return rp;
}

/* Put `rp` back at the front of its handle's list (deleted if the handle's replays went meanwhile). */
static void redist_replay_return(intptr_t handle, redist_replay_t *rp)
{
    redist_handle_replays_t *hr;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL) {
        rp->next = hr->replays;
        hr->replays = rp;
        hr->count++;
        rp = NULL;
    }
    pthread_mutex_unlock(&redist_replay_lock);
    if (rp != NULL)
        redist_replay_delete(rp);
}

/* Python has bound `operands` now (after its call succeeded; NULL: every operand NULL). */
static void redist_python_bound(intptr_t handle, const uintptr_t *operands)
{
    redist_handle_replays_t *hr;
    size_t n;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL) {
        n = sizeof(uintptr_t) * (size_t)hr->nfields;
        if (operands != NULL)
            memcpy(hr->python, operands, n);
        else
            memset(hr->python, 0, n);
        memcpy(hr->bound, hr->python, n);
    }
    pthread_mutex_unlock(&redist_replay_lock);
}

/* redist_reset_operand(s)_unchecked without Python: only to operands one of the handle's replays was
   made for, where the engine allows it. 1 when done so. */
static int redist_rebind_lazily(intptr_t handle, int32_t fields, const uintptr_t *operands)
{
    redist_handle_replays_t *hr;
    redist_replay_t *rp;
    int done = 0;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL && hr->lazy && hr->fields == fields && operands != NULL)
        for (rp = hr->replays; rp != NULL && !done; rp = rp->next)
            if (redist_same(rp->operands, operands, hr->nfields)) {
                memcpy(hr->bound, operands, sizeof(uintptr_t) * (size_t)hr->nfields);
                done = 1;
            }
    pthread_mutex_unlock(&redist_replay_lock);
    return done;
}

/* The operands bound now where Python has not bound them yet: 1 with them in *operands (malloc'ed,
   [nfields]; the caller frees them) and the kind of handle in *fields; 0 where Python has them
   (or the handle has no replays); -1 without memory. */
static int redist_rebound(intptr_t handle, uintptr_t **operands, int32_t *fields)
{
    redist_handle_replays_t *hr;
    int ahead = 0;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL && !redist_same(hr->python, hr->bound, hr->nfields)) {
        *operands = malloc(sizeof(uintptr_t) * (size_t)hr->nfields);
        ahead = *operands != NULL ? 1 : -1;
        if (ahead == 1)
            memcpy(*operands, hr->bound, sizeof(uintptr_t) * (size_t)hr->nfields);
        *fields = hr->fields;
    }
    pthread_mutex_unlock(&redist_replay_lock);
    return ahead;
}

/* `n` request handles from words (int64 each) into an array of the MPI's width. NULL on no memory. */
static void *redist_replay_requests(const int64_t *words, int32_t n, int64_t width)
{
    int32_t i;
    uint8_t *out = calloc((size_t)(n > 0 ? n : 1), (size_t)width);
    if (out == NULL)
        return NULL;
    for (i = 0; i < n; i++) {
        if (width == 4) {
            uint32_t v = (uint32_t)words[i];
            memcpy(out + 4 * (size_t)i, &v, 4);
        } else {
            uint64_t v = (uint64_t)words[i];
            memcpy(out + 8 * (size_t)i, &v, 8);
        }
    }
    return out;
}

/* Add `rp` to the replays of `handle` (replacing one of the same binding, dropping the oldest past
   REDIST_REPLAYS_PER_HANDLE); Python has bound rp's operands. -1 without memory (rp deleted). */
static int redist_replay_add(intptr_t handle, int32_t fields, int32_t lazy, redist_replay_t *rp)
{
    redist_handle_replays_t *hr, *stale = NULL;
    redist_replay_t *gone = NULL, **at;
    size_t n = sizeof(uintptr_t) * (size_t)rp->nfields;
    pthread_mutex_lock(&redist_replay_lock);
    hr = redist_handle_find(handle);
    if (hr != NULL && (hr->fields != fields || hr->nfields != rp->nfields || hr->lazy != lazy)) {
        stale = redist_handle_unlink(handle); /* made for another executable */
        hr = NULL;
    }
    if (hr == NULL) {
        hr = calloc(1, sizeof *hr);
        if (hr != NULL && ((hr->python = malloc(n)) == NULL || (hr->bound = malloc(n)) == NULL)) {
            free(hr->python);
            free(hr);
            hr = NULL;
        }
        if (hr != NULL) {
            size_t b = (uintptr_t)handle % REDIST_REPLAY_BUCKETS;
            hr->handle = handle;
            hr->fields = fields;
            hr->nfields = rp->nfields;
            hr->lazy = lazy;
            hr->next = redist_replays[b];
            redist_replays[b] = hr;
        }
    }
    if (hr != NULL) {
        for (at = &hr->replays; *at != NULL;) { /* one replay per binding */
            if (redist_same((*at)->operands, rp->operands, rp->nfields) && redist_same((*at)->outs, rp->outs, rp->nfields)) {
                redist_replay_t *old = *at;
                *at = old->next;
                old->next = gone;
                gone = old;
                hr->count--;
            } else
                at = &(*at)->next;
        }
        rp->next = hr->replays;
        hr->replays = rp;
        if (++hr->count > REDIST_REPLAYS_PER_HANDLE) { /* the oldest goes */
            for (at = &hr->replays; (*at)->next != NULL; at = &(*at)->next)
                ;
            (*at)->next = gone;
            gone = *at;
            *at = NULL;
            hr->count--;
        }
        memcpy(hr->python, rp->operands, n);
        memcpy(hr->bound, rp->operands, n);
    }
    pthread_mutex_unlock(&redist_replay_lock);
    if (stale != NULL)
        redist_handle_delete(stale);
    while (gone != NULL) {
        redist_replay_t *old = gone;
        gone = old->next;
        redist_replay_delete(old);
    }
    if (hr == NULL) {
        redist_replay_delete(rp);
        return -1;
    }
    return 0;
}

/*
 * Add a replay of `handle` for `outs` (the call just made, with `results`). `words` (engine/host/replay.py):
 *   version, startall, waitall, error_string, request width, status size, tag offset, tag base, code,
 *   nothers, nfirst, narrival_recvs, narrival_sends, nfinish, lazy, nsets, nchecks; the operands
 *   [nfields]; then that many request handles of first, arrival_recvs, arrival_sends, finish; nsets
 *   and then nchecks pairs (address, value); then per copy phase: its count, then per copy dst, src,
 *   run, ndim, shape[ndim], dst_strides[ndim], src_strides[ndim], starts (how many of the arrival
 *   sends start after it, in order: phase 0 only; the rest start after phase 0); then the count of
 *   cross-memory calls and per call read, into, pid, bytes, nlocal, nremote, nlocal and then nremote
 *   pairs (address, length); then MPI_Allreduce's address (0: none), the communicator, MPI_INT and
 *   MPI_MAX (handles as words).
 * Returns 0, or -1 (malformed words, no memory: nothing added; such calls go through Python).
 */
#define REDIST_REPLAY_HEADER 17
static int _redist_set_replay(intptr_t handle, int32_t fields, int32_t nfields, const uintptr_t *outs,
                              const uintptr_t *results, const int64_t *words, int64_t nwords)
{
    redist_replay_t *rp;
    int64_t at, width;
    int32_t k, i, d, f, nstat, lazy;
    int64_t starts = 0;
#define REDIST_WORD(var)                                                                            \
    do {                                                                                            \
        if (at >= nwords)                                                                           \
            goto bad;                                                                               \
        (var) = words[at++];                                                                        \
    } while (0)
    if (nfields < 1 || nwords < REDIST_REPLAY_HEADER + nfields || words[0] != REDIST_REPLAY_VERSION)
        return -1;
    rp = calloc(1, sizeof *rp);
    if (rp == NULL)
        return -1;
    rp->nfields = nfields;
    rp->operands = malloc(sizeof(uintptr_t) * (size_t)nfields);
    rp->outs = malloc(sizeof(uintptr_t) * (size_t)nfields);
    rp->results = malloc(sizeof(uintptr_t) * (size_t)nfields);
    if (rp->operands == NULL || rp->outs == NULL || rp->results == NULL)
        goto bad;
    memcpy(rp->outs, outs, sizeof(uintptr_t) * (size_t)nfields);
    memcpy(rp->results, results, sizeof(uintptr_t) * (size_t)nfields);
    rp->startall = (redist_mpi_startall_t)(uintptr_t)words[1];
    rp->waitall = (redist_mpi_waitall_t)(uintptr_t)words[2];
    rp->error_string = (redist_mpi_error_string_t)(uintptr_t)words[3];
    width = rp->width = words[4];
    rp->status_size = words[5];
    rp->tag_offset = words[6];
    rp->tag_base = (int32_t)words[7];
    rp->code = (int32_t)words[8];
    rp->nothers = (int32_t)words[9];
    rp->nfirst = (int32_t)words[10];
    rp->narrival_recvs = (int32_t)words[11];
    rp->narrival_sends = (int32_t)words[12];
    rp->nfinish = (int32_t)words[13];
    lazy = words[14] != 0;
    rp->nsets = (int32_t)words[15];
    rp->nchecks = (int32_t)words[16];
    for (f = 0; f < nfields; f++)
        rp->operands[f] = (uintptr_t)words[REDIST_REPLAY_HEADER + f];
    at = REDIST_REPLAY_HEADER + nfields;
    if (rp->startall == NULL || rp->waitall == NULL || rp->error_string == NULL || (width != 4 && width != 8) ||
        rp->status_size < 4 || rp->tag_offset < 0 || rp->tag_offset + 4 > rp->status_size || rp->nothers < 0 ||
        rp->nfirst < rp->nothers || rp->narrival_recvs < 0 || rp->narrival_sends < 0 || rp->nfinish < 0 ||
        words[15] < 0 || words[15] > nwords || words[16] < 0 || words[16] > nwords ||
        nwords - at < (int64_t)rp->nfirst + rp->narrival_recvs + rp->narrival_sends + rp->nfinish +
                          2 * (words[15] + words[16]))
        goto bad;
    rp->first = redist_replay_requests(words + at, rp->nfirst, width);
    at += rp->nfirst;
    rp->arrival_recvs = redist_replay_requests(words + at, rp->narrival_recvs, width);
    at += rp->narrival_recvs;
    rp->arrival_sends = redist_replay_requests(words + at, rp->narrival_sends, width);
    at += rp->narrival_sends;
    rp->finish = redist_replay_requests(words + at, rp->nfinish, width);
    at += rp->nfinish;
    rp->set_at = calloc((size_t)(rp->nsets > 0 ? rp->nsets : 1), sizeof *rp->set_at);
    rp->set_value = calloc((size_t)(rp->nsets > 0 ? rp->nsets : 1), sizeof *rp->set_value);
    rp->check_at = calloc((size_t)(rp->nchecks > 0 ? rp->nchecks : 1), sizeof *rp->check_at);
    rp->check_value = calloc((size_t)(rp->nchecks > 0 ? rp->nchecks : 1), sizeof *rp->check_value);
    if (rp->set_at == NULL || rp->set_value == NULL || rp->check_at == NULL || rp->check_value == NULL)
        goto bad;
    for (i = 0; i < rp->nsets; i++) {
        rp->set_at[i] = (volatile uint64_t *)(uintptr_t)words[at++];
        rp->set_value[i] = (uint64_t)words[at++];
        if (rp->set_at[i] == NULL)
            goto bad;
    }
    for (i = 0; i < rp->nchecks; i++) {
        rp->check_at[i] = (const volatile uint64_t *)(uintptr_t)words[at++];
        rp->check_value[i] = (uint64_t)words[at++];
        if (rp->check_at[i] == NULL)
            goto bad;
    }
    nstat = rp->nothers > rp->nfinish ? rp->nothers : rp->nfinish;
    rp->statuses = calloc((size_t)(nstat > 0 ? nstat : 1), (size_t)rp->status_size);
    rp->heard = calloc((size_t)(rp->nothers > 0 ? rp->nothers : 1), sizeof(int32_t));
    if (!rp->first || !rp->arrival_recvs || !rp->arrival_sends || !rp->finish || !rp->statuses || !rp->heard)
        goto bad;
    for (k = 0; k < REDIST_COPY_PHASES; k++) {
        int64_t n;
        REDIST_WORD(n);
        if (n < 0 || n > nwords)
            goto bad;
        rp->ncopies[k] = (int32_t)n;
        rp->copies[k] = calloc((size_t)(n > 0 ? n : 1), sizeof(redist_copy_t));
        if (rp->copies[k] == NULL)
            goto bad;
        for (i = 0; i < rp->ncopies[k]; i++) {
            redist_copy_t *c = &rp->copies[k][i];
            int64_t v, nd;
            REDIST_WORD(v);
            c->dst = (uint8_t *)(uintptr_t)v;
            REDIST_WORD(v);
            c->src = (const uint8_t *)(uintptr_t)v;
            REDIST_WORD(c->run);
            REDIST_WORD(nd);
            if (nd < 0 || nd > REDIST_REPLAY_MAXDIM || c->run < 1)
                goto bad;
            c->ndim = (int32_t)nd;
            for (d = 0; d < c->ndim; d++)
                REDIST_WORD(c->shape[d]);
            for (d = 0; d < c->ndim; d++)
                REDIST_WORD(c->dst_strides[d]);
            for (d = 0; d < c->ndim; d++)
                REDIST_WORD(c->src_strides[d]);
            for (d = 0; d < c->ndim; d++)
                if (c->shape[d] < 1)
                    goto bad;
            REDIST_WORD(v);
            if (v < 0 || (k != REDIST_COPY_PEERS && v != 0) || (starts += v) > rp->narrival_sends)
                goto bad;
            c->starts = (int32_t)v;
        }
    }
    {
        int64_t n, v;
        REDIST_WORD(n);
        if (n < 0 || n > nwords)
            goto bad;
        rp->ncross = (int32_t)n;
        rp->cross = calloc((size_t)(n > 0 ? n : 1), sizeof(redist_cross_t));
        if (rp->cross == NULL)
            goto bad;
        for (i = 0; i < rp->ncross; i++) {
            redist_cross_t *c = &rp->cross[i];
            int64_t nl, nr, sum = 0;
            REDIST_WORD(v);
            c->read = v != 0;
            REDIST_WORD(v);
            c->into = (int32_t)v;
            REDIST_WORD(v);
            c->pid = (int32_t)v;
            REDIST_WORD(c->nbytes);
            REDIST_WORD(nl);
            REDIST_WORD(nr);
            if (c->pid <= 0 || c->nbytes < 0 || nl < 1 || nr < 1 || nl > 1024 || nr > 1024 ||
                nwords - at < 2 * (nl + nr))
                goto bad;
            c->nlocal = (int32_t)nl;
            c->nremote = (int32_t)nr;
#ifdef __linux__
            {
                struct iovec *lv = calloc((size_t)nl, sizeof *lv), *rv = calloc((size_t)nr, sizeof *rv);
                c->local = lv;
                c->remote = rv;
                if (lv == NULL || rv == NULL)
                    goto bad;
                for (d = 0; d < nl; d++) {
                    lv[d].iov_base = (void *)(uintptr_t)words[at++];
                    lv[d].iov_len = (size_t)words[at++];
                    sum += (int64_t)lv[d].iov_len;
                }
                for (d = 0; d < nr; d++) {
                    rv[d].iov_base = (void *)(uintptr_t)words[at++];
                    rv[d].iov_len = (size_t)words[at++];
                    sum -= (int64_t)rv[d].iov_len;
                }
                if (sum != 0)
                    goto bad;
            }
#else
            goto bad; /* no cross-memory attach here: the engine never makes such words */
#endif
        }
        REDIST_WORD(v);
        rp->allreduce = (redist_mpi_allreduce_t)(uintptr_t)v;
        REDIST_WORD(v);
        rp->comm = (intptr_t)v;
        REDIST_WORD(v);
        rp->int_type = (intptr_t)v;
        REDIST_WORD(v);
        rp->max_op = (intptr_t)v;
        if (rp->ncross > 0 && rp->allreduce == NULL)
            goto bad;
    }
    if (at != nwords)
        goto bad;
#undef REDIST_WORD
    return redist_replay_add(handle, fields, lazy, rp);
bad:
    redist_replay_delete(rp);
    return -1;
}

/* Copy a run of `n` bytes (the common element and run sizes as constants, so they are inlined). */
static inline void redist_copy_run(uint8_t *dst, const uint8_t *src, int64_t n)
{
    switch (n) {
    case 4: memcpy(dst, src, 4); break;
    case 8: memcpy(dst, src, 8); break;
    case 16: memcpy(dst, src, 16); break;
    default: memcpy(dst, src, (size_t)n);
    }
}

static void redist_copy(const redist_copy_t *c)
{
    int64_t index[REDIST_REPLAY_MAXDIM] = {0};
    int32_t last = c->ndim - 1, d;
    uint8_t *dst = c->dst;
    const uint8_t *src = c->src;
    if (c->ndim == 0) {
        memcpy(dst, src, (size_t)c->run);
        return;
    }
    for (;;) {
        int64_t i, n = c->shape[last], ds = c->dst_strides[last], ss = c->src_strides[last];
        uint8_t *dp = dst;
        const uint8_t *sp = src;
        for (i = 0; i < n; i++, dp += ds, sp += ss) /* the innermost outer dimension */
            redist_copy_run(dp, sp, c->run);
        for (d = last - 1; d >= 0; d--) { /* the next index of the others (an odometer) */
            dst += c->dst_strides[d];
            src += c->src_strides[d];
            if (++index[d] < c->shape[d])
                break;
            dst -= c->dst_strides[d] * c->shape[d];
            src -= c->src_strides[d] * c->shape[d];
            index[d] = 0;
        }
        if (d < 0)
            return;
    }
}

static void redist_copies(const redist_replay_t *rp, int phase)
{
    int32_t i;
    for (i = 0; i < rp->ncopies[phase]; i++)
        redist_copy(&rp->copies[phase][i]);
}

/* The cross-memory calls: into *refused the rank whose memory the first refused one was to write,
   plus one, and its errno (zeros where the kernel took every call). */
static void redist_cross_copies(const redist_replay_t *rp, int32_t *refused)
{
#ifdef __linux__
    int32_t i;
    for (i = 0; i < rp->ncross; i++) {
        const redist_cross_t *c = &rp->cross[i];
        ssize_t got;
        errno = 0;
        got = c->read ? process_vm_readv(c->pid, c->local, (unsigned long)c->nlocal, c->remote,
                                         (unsigned long)c->nremote, 0)
                      : process_vm_writev(c->pid, c->local, (unsigned long)c->nlocal, c->remote,
                                          (unsigned long)c->nremote, 0);
        if (got != (ssize_t)c->nbytes && refused[0] == 0) { /* every other destination still gets its data */
            refused[0] = c->into + 1;
            refused[1] = got < 0 ? errno : 0;
        }
    }
#else
    (void)rp;
    (void)refused;
#endif
}

/* Phase 0's copies, each followed by the arrival sends it made (a pack's messages go while the next
   pack is made), the cross-memory calls, then the arrival sends no copy started. 0 or an MPI error
   code. */
static int redist_copies_and_sends(const redist_replay_t *rp, int32_t *refused)
{
    int32_t i, started = 0;
    int rc;
    uint8_t *sends = rp->arrival_sends;
    for (i = 0; i < rp->ncopies[REDIST_COPY_PEERS]; i++) {
        const redist_copy_t *c = &rp->copies[REDIST_COPY_PEERS][i];
        redist_copy(c);
        if (c->starts > 0) {
            if ((rc = rp->startall(c->starts, sends + (size_t)rp->width * (size_t)started)) != 0)
                return rc;
            started += c->starts;
        }
    }
    redist_cross_copies(rp, refused);
    if (rp->narrival_sends > started)
        return rp->startall(rp->narrival_sends - started, sends + (size_t)rp->width * (size_t)started);
    return 0;
}

static redist_status_t redist_replay_mpi_failed(const redist_replay_t *rp, const char *call, int rc)
{
    char text[1024];
    int len = 0;
    text[0] = '\0';
    if (rp->error_string(rc, text, &len) != 0 || len < 0 || len >= (int)sizeof text)
        snprintf(text, sizeof text, "error code %d", rc);
    else
        text[len] = '\0';
    snprintf(redist_last_error, sizeof redist_last_error,
             "redist host backend: MPI error in execute (compiled replay): %s: %s", call, text);
    return REDIST_ERROR_COMMUNICATION;
}

/* Run the replay: REDIST_SUCCESS, REDIST_REPLAY_RESUME (not a status: heard[] says what the peers
   said; nothing was written), or REDIST_ERROR_COMMUNICATION (an MPI call failed, or the kernel
   refused a cross-memory copy on some rank: the same message on every rank). */
static int redist_replay_run(redist_replay_t *rp)
{
    int rc, same = 1;
    int32_t i, refused[2] = {0, 0}, anywhere[2] = {0, 0};
    for (i = 0; i < rp->nsets; i++) /* read by the peers after my status (MPI orders it); a word that */
        if (*rp->set_at[i] != rp->set_value[i]) /* holds its value already is not written: the peers' */
            *rp->set_at[i] = rp->set_value[i];  /* copies of its cache line stay valid */
    if ((rc = rp->startall(rp->nfirst, rp->first)) != 0)
        return redist_replay_mpi_failed(rp, "MPI_Startall", rc);
    if ((rc = rp->waitall(rp->nothers, rp->first, rp->statuses)) != 0)
        return redist_replay_mpi_failed(rp, "MPI_Waitall", rc);
    for (i = 0; i < rp->nothers; i++) {
        int32_t tag;
        memcpy(&tag, (const uint8_t *)rp->statuses + rp->status_size * i + rp->tag_offset, sizeof tag);
        rp->heard[i] = tag - rp->tag_base;
        same &= rp->heard[i] == rp->code;
    }
    for (i = 0; same && i < rp->nchecks; i++) /* the peers wrote these before their status */
        same = *rp->check_at[i] == rp->check_value[i];
    if (!same)
        return REDIST_REPLAY_RESUME;
    if (rp->narrival_recvs && (rc = rp->startall(rp->narrival_recvs, rp->arrival_recvs)) != 0)
        return redist_replay_mpi_failed(rp, "MPI_Startall", rc);
    if ((rc = redist_copies_and_sends(rp, refused)) != 0)
        return redist_replay_mpi_failed(rp, "MPI_Startall", rc);
    redist_copies(rp, REDIST_COPY_LOCAL);
    if ((rc = rp->waitall(rp->nfinish, rp->finish, rp->statuses)) != 0)
        return redist_replay_mpi_failed(rp, "MPI_Waitall", rc);
    redist_copies(rp, REDIST_COPY_AFTER);
    if (rp->allreduce != NULL) {
        if ((rc = rp->allreduce(refused, anywhere, 2, rp->int_type, rp->max_op, rp->comm)) != 0)
            return redist_replay_mpi_failed(rp, "MPI_Allreduce", rc);
        if (anywhere[0] != 0) {
            /* engine/host/push/cross_memory.py's refused_message: the same text whichever path a rank took */
            snprintf(redist_last_error, sizeof redist_last_error,
                     "redist host backend (push): cross-memory copies into rank(s) %d failed (%s); their out= may "
                     "be incomplete",
                     anywhere[0] - 1, anywhere[1] > 0 ? strerror(anywhere[1]) : "a short copy");
            return REDIST_ERROR_COMMUNICATION;
        }
    }
    return REDIST_SUCCESS;
}
