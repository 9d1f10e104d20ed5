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

/* Append to done (pairs) what ranks of one sequence of span positions,
 * placed at offset, delivered when rank r delivered delivered[r]: the
 * prefix of its run (pad: [r * share, + share), wrapping: padding repeats
 * the sequence's start; else [r * span / ranks, (r + 1) * span / ranks)),
 * taken modulo span: at most two pieces a rank. Returns the new count. */
static size_t add_done(uint64_t offset, uint64_t span, uint64_t ranks, uint64_t share, int pad,
                       const uint64_t *delivered, uint64_t *done, size_t n)
{
    for (uint64_t r = 0; span > 0 && r < ranks; r++) {
        const uint64_t begin = pad ? r * share : r * span / ranks;
        const uint64_t end = pad ? begin + share : (r + 1) * span / ranks;
        const uint64_t d = delivered[r] < end - begin ? delivered[r] : end - begin;
        const uint64_t lo = begin % span, hi = lo + d;
        if (d == 0)
            continue;
        if (d >= span) { /* a node's run longer than its sequence: all of it */
            done[2 * n] = offset;
            done[2 * n++ + 1] = offset + span;
            continue;
        }
        done[2 * n] = offset + lo;
        done[2 * n++ + 1] = offset + (hi < span ? hi : span);
        if (hi > span) {
            done[2 * n] = offset;
            done[2 * n++ + 1] = offset + hi - span;
        }
    }
    return n;
}

/* The complement of done's n_done pieces within [0, span), mapped through
 * ranges, into *out (*n_out pairs). Frees done. 0 or STK_ENOMEM. */
static int complement(uint64_t *done, size_t n_done, uint64_t span, const uint64_t *ranges,
                      size_t n_ranges, uint64_t **out, size_t *n_out)
{
    uint64_t *res = stk__calloc(2 * (n_ranges + n_done + 2), sizeof *res);
    if (res == NULL) {
        stk__free(done);
        return STK_ENOMEM;
    }
    qsort(done, n_done, 2 * sizeof *done, by_begin);
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

int stk__plan_remainder(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world, int pad,
                        const uint64_t *delivered, uint64_t **out, size_t *n_out)
{
    const uint64_t span = ranges != NULL ? stk__plan_ranges_total(ranges, n_ranges) : total;
    const uint64_t w = (uint64_t)world;
    *out = NULL;
    *n_out = 0;
    /* What the ranks delivered, in positions of the split sequence. */
    uint64_t *done = stk__calloc(4 * w + 2, sizeof *done);
    if (done == NULL)
        return STK_ENOMEM;
    const size_t n_done = add_done(0, span, w, (span + w - 1) / w, pad, delivered, done, 0);
    return complement(done, n_done, span, ranges, n_ranges, out, n_out);
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
    if (pieces == NULL)
        return STK_ENOMEM;
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
    return complement(pieces, n_pieces, span, ranges, n_ranges, out, n_out);
}

int stk__plan_node_remainder(const uint64_t *lengths, int nodes, int ranks_per_node, uint64_t share,
                             int pad, const uint64_t *delivered, uint64_t **out, size_t *n_out)
{
    const uint64_t rpn = (uint64_t)ranks_per_node;
    *out = NULL;
    *n_out = 0;
    uint64_t *done = stk__calloc(4 * rpn * (uint64_t)nodes + 2, sizeof *done);
    if (done == NULL)
        return STK_ENOMEM;
    size_t n_done = 0;
    uint64_t offset = 0; /* of node g's sequence in the concatenation */
    for (int g = 0; g < nodes; g++) {
        n_done = add_done(offset, lengths[g], rpn, share, pad, delivered + (uint64_t)g * rpn, done,
                          n_done);
        offset += lengths[g];
    }
    return complement(done, n_done, offset, NULL, 0, out, n_out);
}
