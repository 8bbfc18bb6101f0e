/* SPDX-License-Identifier: Apache-2.0 */
/*
 * init_probe.c: what a C program sees when the embedded Python can or cannot start.
 * Prints one "name: status" line per call and the last error; exits 0 unless it crashes
 * (tests/cabi/test_cabi.py runs it with broken environments and checks for
 * REDIST_ERROR_PYTHON_INIT, never 0 and never a crash).
 */
#include <stdio.h>

#include "redist.h"

int main(void)
{
    int32_t rank = -1, nranks = -1;
    redist_status_t st;

    printf("version: %s\n", redist_version());
    st = redist_initialize(REDIST_COMM_WORLD, REDIST_DEVICE_NONE);
    printf("initialize: %d (%s)\n", (int)st, redist_get_error_string(st));
    printf("last error: %s\n", redist_get_last_error());
    st = redist_comm_rank(&rank, &nranks); /* start-up failure is sticky: the same status again */
    printf("comm_rank: %d rank=%d nranks=%d\n", (int)st, (int)rank, (int)nranks);
    st = redist_finalize();
    printf("finalize: %d\n", (int)st);
    return 0;
}
