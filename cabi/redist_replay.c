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

/* The parts of this file (never compiled on their own): the table of replays per handle, and the
   words that make a replay. */
#include "redist_replay_table.c"
#include "redist_replay_words.c"

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
