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
 * This table is this module's own: the C ABI's libredist.so compiles its own copy of
 * redist_replay.c, and an object reached through it is replayed there only.
 */
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

/*
 * Run `handle`'s replay for `operands` and `outs` (as many as its fields; outs 0: the engine-owned
 * result). Returns
 *   -1  none (the call goes through Python);
 *    0  done;
 *    1  a peer said something else: nothing was written; heard[0] is this rank's code, heard[1] how
 *       many peers were heard, heard[2...] their codes (Python finishes the call);
 *    2  an MPI call failed (redist_replay_error() says which): no replay of the handle runs again.
 * `heard` has room for `room` values (at least 2 + the number of peers of the status round).
 */
static int redist_replay_execute(intptr_t handle, int32_t fields, const uintptr_t *operands, const uintptr_t *outs,
                                 int32_t *heard, int32_t room)
{
    redist_replay_t *rp = redist_replay_take(handle, fields, operands, outs);
    int st;
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

/* One operand and one out= (the common case, without arrays to fill in). */
static int redist_replay_execute1(intptr_t handle, uintptr_t operand, uintptr_t out, int32_t *heard, int32_t room)
{
    return redist_replay_execute(handle, 0, &operand, &out, heard, room);
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
}
