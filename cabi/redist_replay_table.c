/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled replays, part of redist_replay.c (which includes this file; never compiled on its own):
 * the table of replays, per handle and binding, guarded by redist_replay_lock; the operands a
 * handle was rebound to without Python (redist_rebind_lazily, redist_rebound).
 */

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
