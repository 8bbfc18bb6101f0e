/* SPDX-License-Identifier: Apache-2.0 */
/*
 * checks.h: what the C check programs (api_checks.c, fields_checks.c) share: this process's
 * rank, the check counters, EXPECT (a status, and a text its last error must contain), TRUE,
 * and the slab rule. Each program prints "rank r/n: K ... passed" when nothing failed.
 */
#ifndef REDIST_CHECKS_H
#define REDIST_CHECKS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "redist.h"

static int rank = 0, nranks = 1, nchecks = 0, nfail = 0;

static inline void expect(redist_status_t got, redist_status_t want, const char *contains, const char *what, int line)
{
    const char *msg = redist_get_last_error();
    nchecks++;
    if (got != want || (want != REDIST_SUCCESS && contains != NULL && strstr(msg, contains) == NULL)) {
        nfail++;
        fprintf(stderr, "rank %d: line %d: %s\n  returned %d, expected %d%s%s%s\n  last error: %s\n", rank, line,
                what, (int)got, (int)want, contains ? " with a message containing \"" : "",
                contains ? contains : "", contains ? "\"" : "", msg);
    }
}
#define EXPECT(call, want, contains) expect((call), (want), (contains), #call, __LINE__)

static inline void truth(int cond, const char *what, int line)
{
    nchecks++;
    if (!cond) {
        nfail++;
        fprintf(stderr, "rank %d: line %d: not true: %s\n", rank, line, what);
    }
}
#define TRUE(cond) truth((cond), #cond, __LINE__)

/* Slab rule: [lo, hi) of n split over p processes, the first n % p get one more. */
static inline void split(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, rem = n % p;
    *lo = r * q + (r < rem ? r : rem);
    *hi = *lo + q + (r < rem ? 1 : 0);
}

#endif /* REDIST_CHECKS_H */
