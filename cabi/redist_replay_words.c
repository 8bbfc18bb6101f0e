/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Compiled replays, part of redist_replay.c (which includes this file; never compiled on its own):
 * a replay made from the engine's words (engine/host/replay.py), checked word by word, and added
 * to the table (_redist_set_replay).
 */

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
