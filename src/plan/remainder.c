/* SPDX-License-Identifier: MIT */
/*
 * remainder.c - what an interrupted epoch has left to deliver (remainder.h).
 */
#include "plan/remainder.h"

#include <stdlib.h>

#include "base/alloc.h"
#include "stoker.h"

uint64_t stk__plan_ranges_total(const uint64_t *ranges, size_t n)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += ranges[2 * i + 1] - ranges[2 * i];
    return sum;
}

int stk__plan_ranges_check(const uint64_t *ranges, size_t n, uint64_t total)
{
    uint64_t at = 0;
    for (size_t i = 0; i < n; i++) {
        if (ranges[2 * i] < at || ranges[2 * i + 1] <= ranges[2 * i] || ranges[2 * i + 1] > total)
            return -1;
        at = ranges[2 * i + 1];
    }
    return 0;
}

static int by_begin(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Append the sequence positions of remainder positions [from, to) (of the
 * ranges, or the positions themselves without) to out. */
static size_t map_out(const uint64_t *ranges, size_t n_ranges, uint64_t from, uint64_t to,
                      uint64_t *out, size_t n)
{
    if (ranges == NULL) {
        out[2 * n] = from;
        out[2 * n + 1] = to;
        return n + 1;
    }
    uint64_t acc = 0; /* remainder position of range i's start */
    for (size_t i = 0; i < n_ranges && acc < to; i++) {
        const uint64_t len = ranges[2 * i + 1] - ranges[2 * i];
        const uint64_t lo = from > acc ? from : acc, hi = to < acc + len ? to : acc + len;
        if (lo < hi) {
            out[2 * n] = ranges[2 * i] + (lo - acc);
            out[2 * n + 1] = ranges[2 * i] + (hi - acc);
            n++;
        }
        acc += len;
    }
    return n;
}

int stk__plan_remainder_runs(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world,
                             int pad, const uint64_t *const *done, const size_t *n_done,
                             uint64_t **out, size_t *n_out)
{
    const uint64_t span = ranges != NULL ? stk__plan_ranges_total(ranges, n_ranges) : total;
    const uint64_t w = (uint64_t)world, share = (span + w - 1) / w;
    *out = NULL;
    *n_out = 0;
    /* Every piece a rank delivered, in positions of the split sequence:
     * taken modulo span (padding repeats the sequence's start), so one
     * piece of a run at most share / span + 2 pieces of the sequence. */
    const uint64_t cuts = span > 0 ? share / span + 2 : 1;
    size_t room = 1;
    for (int r = 0; r < world; r++)
        room += n_done[r] * cuts;
    uint64_t *pieces = stk__calloc(2 * room, sizeof *pieces);
    uint64_t *res = stk__calloc(2 * (n_ranges + room + 1), sizeof *res);
    if (pieces == NULL || res == NULL) {
        stk__free(pieces);
        stk__free(res);
        return STK_ENOMEM;
    }
    size_t n_pieces = 0;
    for (uint64_t r = 0; span > 0 && r < w; r++) {
        const uint64_t begin = pad ? r * share : r * span / w;
        const uint64_t end = pad ? begin + share : (r + 1) * span / w;
        for (size_t i = 0; i < n_done[r]; i++) {
            /* More than the run counts as the run. */
            uint64_t at = begin + done[r][2 * i];
            const uint64_t upto = done[r][2 * i + 1];
            const uint64_t stop = upto < end - begin ? begin + upto : end;
            while (at < stop) {
                const uint64_t base = at / span * span;
                const uint64_t to = stop < base + span ? stop : base + span;
                pieces[2 * n_pieces] = at - base;
                pieces[2 * n_pieces++ + 1] = to - base;
                at = to;
            }
        }
    }
    qsort(pieces, n_pieces, 2 * sizeof *pieces, by_begin);
    /* The complement of their union within [0, span). */
    size_t n = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < n_pieces; i++) {
        if (pieces[2 * i] > at)
            n = map_out(ranges, n_ranges, at, pieces[2 * i], res, n);
        if (pieces[2 * i + 1] > at)
            at = pieces[2 * i + 1];
    }
    if (at < span)
        n = map_out(ranges, n_ranges, at, span, res, n);
    stk__free(pieces);
    *out = res;
    *n_out = n;
    return 0;
}

int stk__plan_remainder(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world, int pad,
                        const uint64_t *delivered, uint64_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    /* Each rank delivered the front of its run. */
    uint64_t *fronts = stk__calloc(2 * (size_t)world, sizeof *fronts);
    const uint64_t **done = stk__calloc((size_t)world, sizeof *done);
    size_t *n_done = stk__calloc((size_t)world, sizeof *n_done);
    int rc = fronts == NULL || done == NULL || n_done == NULL ? STK_ENOMEM : 0;
    for (int r = 0; rc == 0 && r < world; r++) {
        fronts[2 * r + 1] = delivered[r];
        done[r] = &fronts[2 * r];
        n_done[r] = delivered[r] > 0;
    }
    if (rc == 0)
        rc = stk__plan_remainder_runs(total, ranges, n_ranges, world, pad, done, n_done, out,
                                      n_out);
    stk__free(fronts);
    stk__free(done);
    stk__free(n_done);
    return rc;
}
