/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay_harness.c: cabi/redist_replay.c on its own, with MPI calls that do nothing, so that
 * tests/cabi/test_replay.py can run the real parser and copy loop of a replay on any words
 * (engine/host/replay.py) and compare with numpy. Built as a shared library; not part of redist.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "redist.h"

static __thread char redist_last_error[4096];

#include "redist_replay.c"

static int nothing_started(int n, void *requests)
{
    (void)n;
    (void)requests;
    return 0;
}

static int nothing_waited(int n, void *requests, void *statuses)
{
    (void)n;
    (void)requests;
    (void)statuses;
    return 0;
}

static int no_error_string(int code, char *text, int *len)
{
    *len = snprintf(text, 64, "error %d", code);
    return 0;
}

/* What recorded_start saw: per MPI_Startall, its count, its first request and the byte at `probe`. */
#define HARNESS_LOG 16
static int64_t log_count[HARNESS_LOG], log_first[HARNESS_LOG];
static int log_probe[HARNESS_LOG], log_length;
static const volatile uint8_t *probe;

static int recorded_start(int n, void *requests)
{
    if (log_length < HARNESS_LOG) {
        log_count[log_length] = n;
        log_first[log_length] = 0;
        if (n > 0)
            memcpy(&log_first[log_length], requests, sizeof(int64_t));
        log_probe[log_length++] = probe != NULL ? *probe : -1;
    }
    return 0;
}

/* An MPI_Allreduce (MAX of ints) of one rank with a peer whose contribution harness_peer sets; it
   records what this rank contributed. */
static int32_t peer_value[2], sent_value[2];

static int fake_allreduce(const void *send, void *recv, int count, intptr_t type, intptr_t op, intptr_t comm)
{
    const int32_t *in = send;
    int32_t *out = recv;
    int i;
    (void)type;
    (void)op;
    (void)comm;
    for (i = 0; i < count && i < 2; i++) {
        sent_value[i] = in[i];
        out[i] = in[i] > peer_value[i] ? in[i] : peer_value[i];
    }
    return 0;
}

/* What the peer of fake_allreduce contributes from now on. */
void harness_peer(int32_t into, int32_t err)
{
    peer_value[0] = into;
    peer_value[1] = err;
}

/* What this rank contributed to the last fake_allreduce, and the message of the last failure. */
const char *harness_sent(int32_t *into, int32_t *err)
{
    *into = sent_value[0];
    *err = sent_value[1];
    return redist_last_error;
}

/* The MPI calls to put in a replay's words: 0 MPI_Startall, 1 MPI_Waitall, 2 MPI_Error_string,
   3 an MPI_Startall that records its calls (harness_record, harness_log), 4 MPI_Allreduce
   (fake_allreduce). */
void *harness_call(int which)
{
    return which == 0   ? (void *)nothing_started
           : which == 1 ? (void *)nothing_waited
           : which == 2 ? (void *)no_error_string
           : which == 3 ? (void *)recorded_start
                        : (void *)fake_allreduce;
}

/* Forget the calls recorded so far; from now on record the byte at `at` with each. */
void harness_record(const uint8_t *at)
{
    probe = at;
    log_length = 0;
}

/* Recorded call `k`: 0 and its count, first request and probed byte; -1 if there is none. */
int harness_log(int k, int64_t *count, int64_t *first, int *probed)
{
    if (k < 0 || k >= log_length)
        return -1;
    *count = log_count[k];
    *first = log_first[k];
    *probed = log_probe[k];
    return 0;
}

/* Install `words` as the replay of handle 1 (operands and out as the words say), run it once, drop
   it: 0, -2 when _redist_set_replay refused the words, -3 when no replay matched. */
int harness_run(const int64_t *words, int64_t nwords, uintptr_t out)
{
    uintptr_t result = 0;
    redist_replay_t *rp;
    int st;
    if (_redist_set_replay(1, 0, 1, &out, &result, words, nwords) != 0)
        return -2;
    rp = redist_replay_take(1, 0, NULL, &out);
    if (rp == NULL)
        return -3;
    st = redist_replay_run(rp);
    redist_replay_return(1, rp);
    _redist_drop_replay(1);
    return st;
}
