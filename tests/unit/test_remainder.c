/* SPDX-License-Identifier: MIT */
/*
 * test_remainder.c - what an interrupted epoch has left (plan/remainder.h),
 * checked against a brute-force replay of the ranks' runs, and the split of
 * such a remainder over new ranks (plan.c with spec.ranges); under a
 * shuffle window, what a rank delivered (seek_plan.h) checked against the
 * live shuffle driven as the sequencer drives it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "plan/interleave.h"
#include "plan/plan.h"
#include "plan/remainder.h"
#include "plan/seek_plan.h"
#include "plan/shuffle.h"
#include "stoker.h"
#include "tar/sample.h"

#define MAX_TOTAL 200

/* fn(args..., &out, &n) with its 1st, 2nd, ... allocation failing until
 * it succeeds: every failure is STK_ENOMEM and leaves out NULL. */
#define FAIL_EACH_ALLOCATION(fn, ...)                                                              \
    do {                                                                                           \
        for (unsigned long fail = 1;; fail++) {                                                    \
            uint64_t *out;                                                                         \
            size_t n;                                                                              \
            stk__alloc_fail_after(fail);                                                           \
            int rc = fn(__VA_ARGS__, &out, &n);                                                    \
            stk__alloc_fail_after(0);                                                              \
            if (rc == 0) {                                                                         \
                stk__free(out);                                                                    \
                break;                                                                             \
            }                                                                                      \
            assert_int_equal(rc, STK_ENOMEM);                                                      \
            assert_null(out);                                                                      \
        }                                                                                          \
    } while (0)

/* The remainder of the positions in ranges (NULL: all of [0, total)) as
 * flags, by replaying each old rank's run one position at a time. */
static void brute_force(uint64_t total, const uint64_t *ranges, size_t n_ranges, int world, int pad,
                        const uint64_t *delivered, int *left)
{
    uint64_t seq[MAX_TOTAL], span = 0;
    memset(left, 0, MAX_TOTAL * sizeof *left);
    for (uint64_t p = 0; p < total; p++) {
        int in = ranges == NULL;
        for (size_t i = 0; !in && i < n_ranges; i++)
            in = p >= ranges[2 * i] && p < ranges[2 * i + 1];
        if (in) {
            seq[span++] = p;
            left[p] = 1;
        }
    }
    for (int r = 0; r < world; r++) {
        const uint64_t share = (span + (uint64_t)world - 1) / (uint64_t)world;
        const uint64_t begin = pad ? r * share : r * span / (uint64_t)world;
        const uint64_t end = pad ? begin + share : (r + 1) * span / (uint64_t)world;
        for (uint64_t k = 0; k < delivered[r] && begin + k < end; k++)
            left[seq[(begin + k) % span]] = 0;
    }
}

static void check_against_brute_force(uint64_t total, const uint64_t *ranges, size_t n_ranges,
                                      int world, int pad, const uint64_t *delivered)
{
    int want[MAX_TOTAL], got[MAX_TOTAL] = {0};
    brute_force(total, ranges, n_ranges, world, pad, delivered, want);
    uint64_t *out;
    size_t n;
    assert_int_equal(stk__plan_remainder(total, ranges, n_ranges, world, pad, delivered, &out, &n),
                     0);
    assert_true(n <= n_ranges + 2 * (size_t)world + 1);
    assert_int_equal(stk__plan_ranges_check(out, n, total), 0);
    for (size_t i = 0; i < n; i++)
        for (uint64_t p = out[2 * i]; p < out[2 * i + 1]; p++)
            got[p] = 1;
    assert_memory_equal(got, want, sizeof got);
    stk__free(out);
}

static void test_two_ranks_stopped_apart(void **state)
{
    (void)state;
    const uint64_t delivered[] = {12, 20};
    uint64_t *out;
    size_t n;
    assert_int_equal(stk__plan_remainder(63, NULL, 0, 2, 1, delivered, &out, &n), 0);
    assert_int_equal(n, 2);
    const uint64_t want[] = {12, 32, 52, 63};
    assert_memory_equal(out, want, sizeof want);
    stk__free(out);
}

/* Rank 3's padding repeats positions 0 and 1: delivered there, they are not
 * left for the new ranks even though rank 0 had not reached them. */
static void test_padding_counts_as_delivered(void **state)
{
    (void)state;
    const uint64_t delivered[] = {0, 0, 0, 3};
    uint64_t *out;
    size_t n;
    assert_int_equal(stk__plan_remainder(10, NULL, 0, 4, 1, delivered, &out, &n), 0);
    assert_int_equal(n, 1);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 9);
    stk__free(out);
}

/* A remainder resumed and interrupted again: the old ranks split its
 * ranges' positions, and what is left is still ranges of the epoch's. */
static void test_remainder_of_a_remainder(void **state)
{
    (void)state;
    const uint64_t ranges[] = {12, 32, 52, 63};
    const uint64_t delivered[] = {11, 0, 5};
    uint64_t *out;
    size_t n;
    assert_int_equal(stk__plan_remainder(63, ranges, 2, 3, 1, delivered, &out, &n), 0);
    const uint64_t want[] = {23, 32, 52, 54, 59, 63};
    assert_int_equal(n, 3);
    assert_memory_equal(out, want, sizeof want);
    stk__free(out);
}

/* Many shapes: worlds 1-5, padded and uneven, counts past the share. */
static void test_matches_brute_force(void **state)
{
    (void)state;
    const uint64_t ranges[] = {3, 9, 20, 21, 40, 77, 90, 100};
    for (uint64_t total = 1; total <= 100; total += 7)
        for (int world = 1; world <= 5; world++)
            for (int pad = 0; pad <= 1; pad++)
                for (uint64_t seed = 0; seed < 4; seed++) {
                    uint64_t delivered[5];
                    for (int r = 0; r < world; r++)
                        delivered[r] = (seed * 7 + (uint64_t)r * 13) % (total / 2 + 3);
                    check_against_brute_force(total, NULL, 0, world, pad, delivered);
                    if (total == 100)
                        check_against_brute_force(total, ranges, 4, world, pad, delivered);
                }
}

/* New ranks split a remainder as a fresh epoch splits the whole sequence:
 * each position once over equal shares, the padding counted. */
static void test_new_ranks_split_the_remainder(void **state)
{
    (void)state;
    const uint64_t counts[] = {7, 19, 4, 13, 11, 9}; /* 63 samples */
    const uint64_t ranges[] = {12, 32, 52, 63};      /* 31 left */
    for (int global = 0; global <= 1; global++) {
        int seen[6][19] = {{0}};
        uint64_t padded = 0, sum = 0;
        for (int rank = 0; rank < 3; rank++) {
            struct stk__plan_spec spec = {
                .n_shards = 6,
                .seed = 3,
                .epoch = 1,
                .rank = rank,
                .world = 3,
                .shuffle = 1,
                .unbounded = 1,
                .counts = counts,
                .by_sample = 1,
                .pad = 1,
                .global = global,
                .ranges = ranges,
                .n_ranges = 2,
            };
            struct stk__plan_cursor c;
            assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
            uint64_t mine = 0;
            struct stk__plan_segment seg;
            for (uint64_t g = 0; g < c.count && stk__plan_cursor_segment(&c, g, &seg); g++) {
                for (uint64_t k = 0; k < seg.count; k++)
                    seen[seg.shard][seg.first + k]++;
                mine += seg.count;
            }
            assert_int_equal(mine, 11); /* ceil(31 / 3) */
            padded += c.padded;
            sum += mine;
            stk__plan_cursor_free(&c);
        }
        assert_int_equal(padded, 2);
        assert_int_equal(sum, 33);
        /* The positions of the ranges, mapped to samples by the whole
         * epoch's plan (one rank of one), are the ones seen. */
        struct stk__plan_spec whole = {
            .n_shards = 6,
            .seed = 3,
            .epoch = 1,
            .rank = 0,
            .world = 1,
            .shuffle = 1,
            .counts = counts,
            .by_sample = 1,
            .pad = 1,
            .global = global,
        };
        struct stk__plan_cursor c;
        assert_int_equal(stk__plan_cursor_open(&c, &whole), 0);
        uint64_t pos = 0, twice = 0;
        struct stk__plan_segment seg;
        for (uint64_t g = 0; g < c.count && stk__plan_cursor_segment(&c, g, &seg); g++)
            for (uint64_t k = 0; k < seg.count; k++, pos++) {
                const int in = (pos >= 12 && pos < 32) || pos >= 52;
                const int n = seen[seg.shard][seg.first + k];
                assert_true(in ? n >= 1 : n == 0);
                twice += n > 1;
            }
        assert_int_equal(pos, 63);
        assert_int_equal(twice, 2); /* the padding */
        stk__plan_cursor_free(&c);
    }
}

/* ---- Under a shuffle window ---- */

#define MAX_RUN 4096
#define MAX_SLOTS 16

static const uint64_t window_counts[] = {7, 19, 4, 13, 11, 9, 6, 10}; /* 79 samples */

static struct stk__plan_spec window_spec(const uint64_t *counts, size_t n_shards, int rank,
                                         int world)
{
    return (struct stk__plan_spec){
        .n_shards = n_shards,
        .seed = 3,
        .epoch = 1,
        .rank = rank,
        .world = world,
        .shuffle = 1,
        .counts = counts,
        .by_sample = 1,
        .pad = 1,
    };
}

/* The run positions of a rank's outputs in order (returns how many), from
 * the live shuffle, pushed and popped as the sequencer drives it over the
 * interleave: each sample pushed is fake[its run position]. */
static size_t live_outputs(struct stk__plan_cursor *c, const uint64_t *counts, unsigned n_slots,
                           size_t window, uint64_t *order)
{
    static struct stk__sample fake[MAX_RUN];
    uint64_t first[MAX_RUN + 1] = {0}, left[MAX_SLOTS] = {0}, taken[MAX_SLOTS] = {0};
    int opened[MAX_SLOTS] = {0};
    struct stk__plan_segment seg;
    for (size_t g = 0; g < c->count && stk__plan_cursor_segment(c, g, &seg); g++)
        first[g + 1] = first[g] + (seg.count != STK__PLAN_WHOLE ? seg.count : counts[seg.shard]);
    struct stk__interleave il;
    struct stk__shuffle sh;
    assert_int_equal(stk__interleave_init(&il, n_slots, c->count, 1, 11), 0);
    assert_int_equal(stk__shuffle_init(&sh, window, 12, NULL), 0);
    size_t n = 0;
    struct stk__sample *s;
    for (;;) {
        while ((s = stk__shuffle_pop(&sh)) != NULL)
            order[n++] = (uint64_t)(s - fake);
        const int j = stk__interleave_pick(&il);
        if (j < 0)
            break;
        if (!opened[j]) {
            if (!stk__plan_cursor_segment(c, il.slot_position[j], &seg)) {
                if (stk__interleave_stream_end(&il))
                    break;
                continue;
            }
            opened[j] = 1;
            left[j] = seg.count;
            taken[j] = 0;
        }
        if (left[j] > 0) {
            stk__shuffle_push(&sh, &fake[first[il.slot_position[j]] + taken[j]++]);
            left[j]--;
            stk__interleave_sample(&il);
            continue;
        }
        opened[j] = 0;
        assert_int_equal(stk__interleave_shard_end(&il, (unsigned)j), 0);
    }
    stk__shuffle_finish(&sh);
    while ((s = stk__shuffle_pop(&sh)) != NULL)
        order[n++] = (uint64_t)(s - fake);
    stk__shuffle_free(&sh);
    stk__interleave_free(&il);
    return n;
}

static struct stk__seek_request window_request(struct stk__plan_cursor *c, const uint64_t *counts,
                                               unsigned n_slots, size_t window, uint64_t output)
{
    return (struct stk__seek_request){
        .cursor = c,
        .shard_samples = counts,
        .n_slots = n_slots,
        .shuffle = 1,
        .interleave_seed = 11,
        .shuffle_seed = 12,
        .window = window,
        .output_position = output,
        .target = UINT64_MAX,
    };
}

/* After every count of outputs, in the first window, the middle and the
 * final drain, the replay's pieces are exactly the live run's first
 * outputs, ascending and disjoint, within the bound. */
static void test_window_delivered_matches_the_live_shuffle(void **state)
{
    (void)state;
    static const size_t windows[] = {1, 3, 8, 2000};
    static const unsigned slots[] = {1, 3, 16};
    for (int world = 1; world <= 4; world++)
        for (int rank = 0; rank < world; rank++)
            for (size_t w = 0; w < sizeof windows / sizeof *windows; w++)
                for (size_t k = 0; k < sizeof slots / sizeof *slots; k++) {
                    struct stk__plan_spec spec = window_spec(window_counts, 8, rank, world);
                    struct stk__plan_cursor c;
                    assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
                    const unsigned n_slots = slots[k] < c.count ? slots[k] : (unsigned)c.count;
                    uint64_t order[MAX_RUN];
                    const size_t run = live_outputs(&c, window_counts, n_slots, windows[w], order);
                    assert_int_equal(run, (79 + world - 1) / world);
                    for (uint64_t d = 0; d <= run + 1; d++) {
                        struct stk__seek_request req =
                            window_request(&c, window_counts, n_slots, windows[w], d);
                        uint64_t *out;
                        size_t n;
                        assert_int_equal(stk__seek_plan_delivered(&req, &out, &n), 0);
                        assert_true(n <= c.count + 2 * windows[w] + 2);
                        assert_int_equal(stk__plan_ranges_check(out, n, run), 0);
                        int want[MAX_RUN] = {0}, got[MAX_RUN] = {0};
                        for (uint64_t i = 0; i < d && i < run; i++)
                            want[order[i]] = 1;
                        for (size_t i = 0; i < n; i++)
                            for (uint64_t p = out[2 * i]; p < out[2 * i + 1]; p++)
                                got[p] = 1;
                        assert_memory_equal(got, want, run * sizeof *got);
                        stk__free(out);
                    }
                    stk__plan_cursor_free(&c);
                }
}

/* The rest after ranks stopped under windows is what none of their live
 * outputs was, padding counted as delivered. */
static void test_window_rest_is_what_no_rank_delivered(void **state)
{
    (void)state;
    for (int world = 2; world <= 4; world += 2)
        for (uint64_t stop = 0; stop <= 24; stop += 4) {
            int left[79];
            for (int i = 0; i < 79; i++)
                left[i] = 1;
            uint64_t *done[4];
            size_t n_done[4];
            for (int r = 0; r < world; r++) {
                struct stk__plan_spec spec = window_spec(window_counts, 8, r, world);
                struct stk__plan_cursor c;
                assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
                const unsigned n_slots = c.count < 4 ? (unsigned)c.count : 4;
                uint64_t order[MAX_RUN];
                const size_t run = live_outputs(&c, window_counts, n_slots, 8, order);
                const uint64_t share = (79 + (uint64_t)world - 1) / (uint64_t)world;
                for (uint64_t i = 0; i < stop && i < run; i++)
                    left[(r * share + order[i]) % 79] = 0;
                struct stk__seek_request req = window_request(&c, window_counts, n_slots, 8, stop);
                assert_int_equal(stk__seek_plan_delivered(&req, &done[r], &n_done[r]), 0);
                stk__plan_cursor_free(&c);
            }
            uint64_t *out;
            size_t n;
            assert_int_equal(stk__plan_remainder_runs(79, NULL, 0, world, 1,
                                                      (const uint64_t *const *)done, n_done,
                                                      &out, &n),
                             0);
            assert_int_equal(stk__plan_ranges_check(out, n, 79), 0);
            int got[79] = {0};
            for (size_t i = 0; i < n; i++)
                for (uint64_t p = out[2 * i]; p < out[2 * i + 1]; p++)
                    got[p] = 1;
            assert_memory_equal(got, left, sizeof got);
            stk__free(out);
            for (int r = 0; r < world; r++)
                stk__free(done[r]);
        }
}

/* At the default window (2000) and shards_in_flight (16) over 64 shards of
 * 1,000 samples and 8 ranks stopped mid-epoch: the rest's ranges stay
 * under the header's bound (remainder.h); the figure it states is printed. */
static void test_window_rest_bound_at_the_default_window(void **state)
{
    (void)state;
    static uint64_t counts[64];
    for (size_t i = 0; i < 64; i++)
        counts[i] = 1000;
    enum { WORLD = 8, W = 2000, K = 16 };
    uint64_t *done[WORLD], delivered = 0;
    size_t n_done[WORLD], segments = 0;
    for (int r = 0; r < WORLD; r++) {
        struct stk__plan_spec spec = window_spec(counts, 64, r, WORLD);
        struct stk__plan_cursor c;
        assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
        const uint64_t stop = 3000 + 512 * (uint64_t)r; /* of 8,000 */
        struct stk__seek_request req = window_request(&c, counts, K, W, stop);
        assert_int_equal(stk__seek_plan_delivered(&req, &done[r], &n_done[r]), 0);
        assert_true(n_done[r] <= c.count + 2 * W + 2);
        assert_int_equal(stk__plan_ranges_total(done[r], n_done[r]), stop);
        segments += c.count;
        delivered += stop;
        stk__plan_cursor_free(&c);
    }
    uint64_t *out;
    size_t n;
    assert_int_equal(stk__plan_remainder_runs(64000, NULL, 0, WORLD, 1,
                                              (const uint64_t *const *)done, n_done, &out, &n),
                     0);
    assert_true(n <= segments + (size_t)WORLD * (K + 2 * W + 3) + 1);
    assert_int_equal(stk__plan_ranges_total(out, n), 64000 - delivered);
    print_message("window rest: %zu ranges for %d ranks (%.2f W per rank)\n", n, WORLD,
                  (double)n / WORLD / W);
    stk__free(out);
    for (int r = 0; r < WORLD; r++)
        stk__free(done[r]);
}

static void test_window_allocation_failures(void **state)
{
    (void)state;
    struct stk__plan_spec spec = window_spec(window_counts, 8, 1, 2);
    struct stk__plan_cursor c;
    assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
    struct stk__seek_request req = window_request(&c, window_counts, 4, 8, 20);
    FAIL_EACH_ALLOCATION(stk__seek_plan_delivered, &req);
    stk__plan_cursor_free(&c);
}

/* Under node affinity (plan.h) each old node's ranks split the node's own
 * sequence; after they deliver a prefix of their runs, the node remainder
 * (positions of the old nodes' sequences one after the other) split over
 * new ranks with seq_nodes delivers every sample no old rank delivered,
 * each once, a node's tail the shares leave out included. Shards of very
 * unequal sizes: some node is short of its ranks' shares and pads. */
static void test_node_remainder_delivers_the_rest_once(void **state)
{
    (void)state;
    enum { SHARDS = 9 };
    const uint64_t counts[SHARDS] = {7, 19, 4, 13, 11, 9, 30, 2, 15}; /* 110 */
    uint64_t start[SHARDS + 1] = {0};
    for (int i = 0; i < SHARDS; i++)
        start[i + 1] = start[i] + counts[i];
    const int layouts[][2] = {{2, 1}, {4, 1}, {4, 2}, {6, 2}, {6, 3}}; /* world, ranks/node */
    for (size_t li = 0; li < 2 * sizeof layouts / sizeof layouts[0]; li++) {
        const int world = layouts[li / 2][0], rpn = layouts[li / 2][1], nodes = world / rpn;
        const int pad = li % 2; /* 0: uneven, each rank its part of its node's sequence */
        for (int global = 0; global <= 1; global++) {
            for (uint64_t stop = 0; stop <= 20; stop += 5) {
                int seen[110] = {0};
                uint64_t delivered[6];
                /* The old ranks: the first `stop` samples of their lists. */
                for (int r = 0; r < world; r++) {
                    const struct stk__plan_spec spec = {.n_shards = SHARDS,
                                                        .seed = 5,
                                                        .epoch = 2,
                                                        .rank = r,
                                                        .world = world,
                                                        .shuffle = 1,
                                                        .ranks_per_node = rpn,
                                                        .counts = counts,
                                                        .by_sample = 1,
                                                        .pad = pad,
                                                        .global = global};
                    struct stk__plan_cursor c;
                    assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
                    uint64_t got = 0;
                    struct stk__plan_segment seg;
                    for (uint64_t g = 0; got < stop && stk__plan_cursor_segment(&c, g, &seg); g++)
                        for (uint64_t k = 0; k < seg.count && got < stop; k++, got++)
                            seen[start[seg.shard] + seg.first + k] = 1;
                    delivered[r] = got;
                    stk__plan_cursor_free(&c);
                }
                uint32_t node_of[SHARDS];
                uint64_t lengths[6] = {0};
                assert_int_equal(stk__plan_node_split(SHARDS, 5, 1, nodes, counts, node_of), 0);
                for (int i = 0; i < SHARDS; i++)
                    lengths[node_of[i]] += counts[i];
                uint64_t *rest;
                size_t n;
                const uint64_t share = (110 + (uint64_t)world - 1) / (uint64_t)world;
                assert_int_equal(
                    stk__plan_node_remainder(lengths, nodes, rpn, share, pad, delivered, &rest, &n),
                    0);
                assert_int_equal(stk__plan_ranges_check(rest, n, 110), 0);
                /* Three new ranks split it. */
                int again[110] = {0};
                for (int r = 0; n > 0 && r < 3; r++) {
                    const struct stk__plan_spec spec = {.n_shards = SHARDS,
                                                        .seed = 5,
                                                        .epoch = 2,
                                                        .rank = r,
                                                        .world = 3,
                                                        .shuffle = 1,
                                                        .counts = counts,
                                                        .by_sample = 1,
                                                        .pad = pad,
                                                        .global = global,
                                                        .ranges = rest,
                                                        .n_ranges = n,
                                                        .seq_nodes = nodes};
                    struct stk__plan_cursor c;
                    assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
                    struct stk__plan_segment seg;
                    for (uint64_t g = 0; g < c.count && stk__plan_cursor_segment(&c, g, &seg); g++)
                        for (uint64_t k = 0; k < seg.count; k++)
                            again[start[seg.shard] + seg.first + k]++;
                    stk__plan_cursor_free(&c);
                }
                uint64_t left = stk__plan_ranges_total(rest, n), repeated = 0;
                for (int i = 0; i < 110; i++) {
                    if (seen[i] != 0 && again[i] != 0)
                        fail_msg("sample %d delivered before and after (world %d, %d a node, "
                                 "stop %llu, global %d)",
                                 i, world, rpn, (unsigned long long)stop, global);
                    assert_true(seen[i] != 0 || again[i] != 0);
                    repeated += again[i] > 1 ? (uint64_t)again[i] - 1 : 0;
                }
                assert_true(repeated <= 2); /* the new ranks' padding */
                assert_int_equal(left + repeated, pad ? 3 * ((left + 2) / 3) : left);
                stk__free(rest);
            }
        }
    }
}

static void test_allocation_failures(void **state)
{
    (void)state;
    const uint64_t delivered[] = {3, 4, 5};
    FAIL_EACH_ALLOCATION(stk__plan_remainder, 50, NULL, 0, 3, 1, delivered);
    /* Under node affinity, and a cursor over the nodes' sequences. */
    const uint64_t lengths[] = {20, 30}, counts[] = {20, 10, 20};
    const uint64_t delivered4[] = {3, 4, 5, 6};
    FAIL_EACH_ALLOCATION(stk__plan_node_remainder, lengths, 2, 2, 13, 1, delivered4);
    const uint64_t ranges[] = {5, 40};
    for (int global = 0; global <= 1; global++) {
        for (unsigned long fail = 1;; fail++) {
            const struct stk__plan_spec spec = {.n_shards = 3,
                                                .seed = 1,
                                                .epoch = 1,
                                                .rank = 1,
                                                .world = 2,
                                                .shuffle = 1,
                                                .counts = counts,
                                                .by_sample = 1,
                                                .pad = 1,
                                                .global = global,
                                                .ranges = ranges,
                                                .n_ranges = 1,
                                                .seq_nodes = 2};
            struct stk__plan_cursor c;
            stk__alloc_fail_after(fail);
            int rc = stk__plan_cursor_open(&c, &spec);
            stk__alloc_fail_after(0);
            if (rc == 0) {
                stk__plan_cursor_free(&c);
                break;
            }
            assert_int_equal(rc, STK_ENOMEM);
        }
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_stopped_apart),
        cmocka_unit_test(test_padding_counts_as_delivered),
        cmocka_unit_test(test_remainder_of_a_remainder),
        cmocka_unit_test(test_matches_brute_force),
        cmocka_unit_test(test_new_ranks_split_the_remainder),
        cmocka_unit_test(test_node_remainder_delivers_the_rest_once),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_window_delivered_matches_the_live_shuffle),
        cmocka_unit_test(test_window_rest_is_what_no_rank_delivered),
        cmocka_unit_test(test_window_rest_bound_at_the_default_window),
        cmocka_unit_test(test_window_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
