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

/* The MPI calls to put in a replay's words: 0 MPI_Startall, 1 MPI_Waitall, 2 MPI_Error_string. */
void *harness_call(int which)
{
    return which == 0 ? (void *)nothing_started : which == 1 ? (void *)nothing_waited : (void *)no_error_string;
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
    rp = redist_replay_take(1, 0, &out);
    if (rp == NULL)
        return -3;
    st = redist_replay_run(rp);
    redist_replay_return(1, rp);
    _redist_drop_replay(1);
    return st;
}
