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

int stk__plan_remainder(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world, int pad,
                        const uint64_t *delivered, uint64_t **out, size_t *n_out)
{
    const uint64_t span = ranges != NULL ? stk__plan_ranges_total(ranges, n_ranges) : total;
    const uint64_t w = (uint64_t)world;
    *out = NULL;
    *n_out = 0;
    /* What the ranks delivered, in positions of the split sequence: each
     * rank's prefix, taken modulo span (padding repeats the sequence's
     * start), so at most two pieces per rank. */
    uint64_t *done = stk__calloc(4 * w + 2, sizeof *done);
    uint64_t *res = stk__calloc(2 * (n_ranges + 2 * w + 2), sizeof *res);
    if (done == NULL || res == NULL) {
        stk__free(done);
        stk__free(res);
        return STK_ENOMEM;
    }
    size_t n_done = 0;
    const uint64_t share = (span + w - 1) / w;
    for (uint64_t r = 0; span > 0 && r < w; r++) {
        const uint64_t begin = pad ? r * share : r * span / w;
        const uint64_t end = pad ? begin + share : (r + 1) * span / w;
        const uint64_t d = delivered[r] < end - begin ? delivered[r] : end - begin;
        const uint64_t lo = begin % span, hi = lo + d; /* d <= share <= span */
        if (d == 0)
            continue;
        done[2 * n_done] = lo;
        done[2 * n_done++ + 1] = hi < span ? hi : span;
        if (hi > span) {
            done[2 * n_done] = 0;
            done[2 * n_done++ + 1] = hi - span;
        }
    }
    qsort(done, n_done, 2 * sizeof *done, by_begin);
    /* The complement of their union within [0, span). */
    size_t n = 0;
    uint64_t at = 0;
    for (size_t i = 0; i < n_done; i++) {
        if (done[2 * i] > at)
            n = map_out(ranges, n_ranges, at, done[2 * i], res, n);
        if (done[2 * i + 1] > at)
            at = done[2 * i + 1];
    }
    if (at < span)
        n = map_out(ranges, n_ranges, at, span, res, n);
    stk__free(done);
    *out = res;
    *n_out = n;
    return 0;
}
