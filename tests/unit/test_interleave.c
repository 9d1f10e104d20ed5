/* SPDX-License-Identifier: MIT */
/*
 * test_interleave.c - the sequencer's slot choice (interleave.c) and the
 * resume plan computed from sample counts (seek_plan.c).
 *
 * The sequencer is simulated on counts: slot j streams the shards at
 * positions j, j+K, ... of the rank's epoch (plan cursor), each of a random
 * number of samples (empty shards included), and the interleave picks the
 * slot of every step as in pipeline.c. The property tested is the one a
 * resume depends on: for any output position, the run started from the seek
 * plan (interleave state, slot positions, samples passed over in each open
 * shard) delivers exactly the rest of the uninterrupted run from the input
 * the plan starts at, and through the shuffle (started where the plan says)
 * exactly the rest of its output.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "plan/interleave.h"
#include "plan/mixing.h"
#include "plan/plan.h"
#include "base/rng.h"
#include "plan/seek_plan.h"
#include "plan/shuffle.h"
#include "stoker.h"

#define MAX_SHARDS 24
#define MAX_SLOTS 8
#define MAX_SAMPLES (MAX_SHARDS * 40)

struct dataset {
    size_t n_shards;
    uint64_t sizes[MAX_SHARDS];
    uint64_t total;
};

/* Where each slot is: the position of its shard in the rank's epoch and
 * how many samples of that shard it has delivered. */
struct slots {
    uint64_t position[MAX_SLOTS];
    uint64_t taken[MAX_SLOTS];
};

/* Samples as shard * 1000 + number in the shard, in delivery order; the
 * count, or -1 when the interleave reports no progress. */
static long run(struct stk__interleave *il, struct slots *s, struct stk__plan_cursor *cursor,
                const struct dataset *d, unsigned k, uint64_t *out)
{
    long n = 0;
    for (;;) {
        int j = stk__interleave_pick(il);
        if (j < 0)
            return n;
        assert_true((unsigned)j < k);
        size_t shard;
        if (!stk__plan_cursor_shard(cursor, s->position[j], &shard)) {
            if (stk__interleave_stream_end(il))
                return n;
            continue;
        }
        if (s->taken[j] < d->sizes[shard]) {
            assert_true(n < MAX_SAMPLES);
            out[n++] = shard * 1000 + s->taken[j]++;
            stk__interleave_sample(il);
            continue;
        }
        s->taken[j] = 0;
        s->position[j] += k;
        if (stk__interleave_shard_end(il, (unsigned)j) < 0)
            return -1;
    }
}

/* Pop what the shuffle lets go into out (after dropping *drop of it). */
static void take_ready(struct stk__shuffle *sh, uint64_t *drop, uint64_t *out, long *got)
{
    struct stk__sample *x;
    while ((x = stk__shuffle_pop(sh)) != NULL) {
        if (*drop > 0)
            (*drop)--;
        else
            out[(*got)++] = x->position;
        stk__sample_free(x);
    }
}

/* in[0..n) through a shuffle of reach `window` started at `start` (NULL:
 * the epoch's start), dropping its first `drop` outputs; returns the count
 * written to out. */
static long shuffled(size_t window, uint64_t seed, const uint64_t *in, long n,
                     const struct stk__shuffle_start *start, uint64_t drop, uint64_t *out)
{
    struct stk__shuffle sh;
    assert_int_equal(stk__shuffle_init(&sh, window, seed, start), 0);
    long got = 0;
    for (long i = 0; i < n; i++) {
        take_ready(&sh, &drop, out, &got);
        struct stk__sample *x = stk__sample_new("k", 1, "mem://", 0, NULL);
        assert_non_null(x);
        x->position = in[i];
        stk__shuffle_push(&sh, x);
        assert_true(sh.count <= 2 * window + 1); /* the documented hard bound */
    }
    take_ready(&sh, &drop, out, &got);
    stk__shuffle_finish(&sh);
    take_ready(&sh, &drop, out, &got);
    stk__shuffle_free(&sh);
    return got;
}

static void random_dataset(struct stk__rng *r, struct dataset *d)
{
    d->n_shards = 1 + (size_t)stk__rng_below(r, MAX_SHARDS);
    d->total = 0;
    for (size_t i = 0; i < d->n_shards; i++) {
        /* One shard in five is empty: shard ends with no sample between. */
        d->sizes[i] = stk__rng_below(r, 5) == 0 ? 0 : 1 + stk__rng_below(r, 39);
        d->total += d->sizes[i];
    }
}

static void check_resumes(uint64_t seed)
{
    struct stk__rng r;
    stk__rng_seed(&r, seed);
    struct dataset d;
    random_dataset(&r, &d);
    int shuffle = (int)stk__rng_below(&r, 2);
    unsigned k = 1 + (unsigned)stk__rng_below(&r, MAX_SLOTS);
    static const size_t windows[] = {1, 2, 7, 64, 1000};
    size_t window = shuffle ? windows[stk__rng_below(&r, 5)] : 1;
    uint64_t il_seed = stk__rng_next(&r);

    struct stk__plan_cursor cursor;
    assert_int_equal(stk__plan_cursor_init(&cursor, d.n_shards, seed, 3, 0, 1, shuffle, 0), 0);
    struct stk__interleave il;
    assert_int_equal(stk__interleave_init(&il, k, cursor.count, shuffle, il_seed), 0);
    struct slots start = {{0}, {0}};
    for (unsigned j = 0; j < k; j++)
        start.position[j] = j;
    static uint64_t full[MAX_SAMPLES], resumed[MAX_SAMPLES];
    long n = run(&il, &start, &cursor, &d, k, full);
    stk__interleave_free(&il);
    if (d.total > 0)
        assert_int_equal(n, (long)d.total); /* every sample exactly once */
    static uint64_t out_full[MAX_SAMPLES], out_resumed[MAX_SAMPLES];
    assert_int_equal(shuffled(window, il_seed, full, n, NULL, 0, out_full), n);

    for (int t = 0; t < 8; t++) {
        uint64_t position = stk__rng_below(&r, d.total + 2);
        struct stk__seek_request req = {
            .cursor = &cursor,
            .shard_samples = d.sizes,
            .n_slots = k,
            .shuffle = shuffle,
            .interleave_seed = il_seed,
            .shuffle_seed = il_seed,
            .window = window,
            .output_position = position,
            .target = UINT64_MAX,
        };
        struct stk__seek_plan sp;
        int rc = stk__seek_plan_compute(&sp, &req);
        if (position >= d.total) { /* past the end: the epoch has no such position */
            assert_int_equal(rc, 0);
            continue;
        }
        assert_int_equal(rc, 1);
        uint64_t input_start = sp.input_start;
        assert_true(input_start <= position); /* never starts after its output */
        /* The resume reads at most the shuffle's hard bound (2W) before
         * its first output's own input. */
        assert_true(input_start + 2 * window + 1 >= position || d.total - input_start <= 2 * window);
        struct slots from = {{0}, {0}};
        for (unsigned j = 0; j < k; j++) {
            from.position[j] = sp.il.slot_position[j];
            from.taken[j] = sp.slot_skip[j];
        }
        long m = run(&sp.il, &from, &cursor, &d, k, resumed);
        if (m != n - (long)input_start ||
            memcmp(resumed, full + input_start, (size_t)m * sizeof *resumed) != 0)
            fail_msg("seed %llu (%zu shards, %u slots, shuffle %d, window %zu): resuming at "
                     "%llu gives %ld samples, the uninterrupted run %ld from there",
                     (unsigned long long)seed, d.n_shards, k, shuffle, window,
                     (unsigned long long)input_start, m, n - (long)input_start);
        /* Through the shuffle: the resumed output is the rest of the full one. */
        long got = shuffled(window, il_seed, resumed, m, &sp.start, sp.drop, out_resumed);
        if (got != n - (long)position ||
            memcmp(out_resumed, out_full + position, (size_t)got * sizeof *out_resumed) != 0)
            fail_msg("seed %llu (window %zu): output from %llu differs after a resume",
                     (unsigned long long)seed, window, (unsigned long long)position);
        stk__seek_plan_free(&sp);
    }
    stk__plan_cursor_free(&cursor);
}

static void test_seek_plan_equals_replayed_interleave(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 400; seed++)
        check_resumes(seed);
}

/* Without shuffle the slots take turns one shard at a time: storage order. */
static void test_storage_order(void **state)
{
    (void)state;
    struct dataset d = {.n_shards = 7, .sizes = {3, 0, 2, 5, 1, 0, 4}};
    for (size_t i = 0; i < d.n_shards; i++)
        d.total += d.sizes[i];
    for (unsigned k = 1; k <= 4; k++) {
        struct stk__plan_cursor cursor;
        assert_int_equal(stk__plan_cursor_init(&cursor, d.n_shards, 0, 0, 0, 1, 0, 0), 0);
        struct stk__interleave il;
        assert_int_equal(stk__interleave_init(&il, k, cursor.count, 0, 0), 0);
        struct slots s = {{0}, {0}};
        for (unsigned j = 0; j < k; j++)
            s.position[j] = j;
        uint64_t out[MAX_SAMPLES];
        assert_int_equal(run(&il, &s, &cursor, &d, k, out), (long)d.total);
        long n = 0;
        for (size_t shard = 0; shard < d.n_shards; shard++)
            for (uint64_t i = 0; i < d.sizes[shard]; i++, n++)
                assert_int_equal(out[n], shard * 1000 + i);
        stk__interleave_free(&il);
        stk__plan_cursor_free(&cursor);
    }
}

/* With shuffle a slot of a later pass is never picked while a slot of an
 * earlier pass still streams, and slots are really mixed. */
static void test_shuffle_finishes_a_pass_first(void **state)
{
    (void)state;
    const unsigned k = 3;
    const size_t rank_shards = 4;
    struct stk__interleave il;
    assert_int_equal(stk__interleave_init(&il, k, rank_shards, 1, 99), 0);
    unsigned picks[MAX_SLOTS] = {0};
    /* Slot 0 reaches pass 1 (position 3 + 3 = 6 >= 4) after two shard ends;
     * slots 1 and 2 stay in pass 0 meanwhile. */
    stk__interleave_shard_end(&il, 0);
    stk__interleave_shard_end(&il, 0);
    for (int i = 0; i < 200; i++) {
        int j = stk__interleave_pick(&il);
        assert_true(j == 1 || j == 2);
        picks[j]++;
        stk__interleave_sample(&il);
    }
    assert_true(picks[1] > 50 && picks[2] > 50);
    stk__interleave_free(&il);
}

/* Slots whose lists differ in length (9 shards on 4 slots: one slot has
 * three) still end together: the epoch's last samples come from several
 * shards, not from the longer slot's last shard alone. */
static void test_slots_end_together(void **state)
{
    (void)state;
    struct dataset d = {.n_shards = 9};
    for (size_t i = 0; i < d.n_shards; i++)
        d.total += d.sizes[i] = 39;
    const unsigned k = 4;
    for (uint64_t seed = 0; seed < 20; seed++) {
        struct stk__plan_cursor cursor;
        assert_int_equal(stk__plan_cursor_init(&cursor, d.n_shards, seed, 0, 0, 1, 1, 0), 0);
        struct stk__interleave il;
        assert_int_equal(stk__interleave_init(&il, k, cursor.count, 1, seed), 0);
        struct slots s = {{0}, {0}};
        for (unsigned j = 0; j < k; j++)
            s.position[j] = j;
        static uint64_t out[MAX_SAMPLES];
        long n = run(&il, &s, &cursor, &d, k, out);
        assert_int_equal(n, (long)d.total);
        uint64_t shards[32];
        for (int i = 0; i < 32; i++)
            shards[i] = out[n - 32 + i] / 1000;
        uint64_t distinct;
        stk__same_shard_pairs(shards, 32, &distinct);
        assert_true(distinct >= 3);
        stk__interleave_free(&il);
        stk__plan_cursor_free(&cursor);
    }
}

/* Shard ends without a sample between them, over more than two passes of
 * the rank's shards, mean the rank cannot progress. */
static void test_no_progress_detected(void **state)
{
    (void)state;
    const unsigned k = 2;
    const size_t rank_shards = 3;
    struct stk__interleave il;
    assert_int_equal(stk__interleave_init(&il, k, rank_shards, 1, 5), 0);
    int ends = 0, rc = 0;
    while (rc == 0 && ends < 100) {
        int j = stk__interleave_pick(&il);
        rc = stk__interleave_shard_end(&il, (unsigned)j);
        ends++;
    }
    assert_int_equal(rc, -1);
    assert_int_equal(ends, 2 * rank_shards + k + 1);
    stk__interleave_sample(&il); /* a sample restarts the count */
    assert_int_equal(stk__interleave_shard_end(&il, 0), 0);
    stk__interleave_free(&il);
}

/* A copy continues exactly as the original. */
static void test_copy_continues_the_same(void **state)
{
    (void)state;
    struct stk__interleave a, b;
    assert_int_equal(stk__interleave_init(&a, 5, 10, 1, 7), 0);
    assert_int_equal(stk__interleave_init(&b, 5, 10, 1, 0), 0);
    for (int i = 0; i < 30; i++) {
        int j = stk__interleave_pick(&a);
        if (i % 4 == 0)
            stk__interleave_shard_end(&a, (unsigned)j);
        else
            stk__interleave_sample(&a);
    }
    stk__interleave_copy(&b, &a);
    for (int i = 0; i < 100; i++) {
        int j = stk__interleave_pick(&a);
        assert_int_equal(stk__interleave_pick(&b), j);
        if (i % 3 == 0) {
            stk__interleave_shard_end(&a, (unsigned)j);
            stk__interleave_shard_end(&b, (unsigned)j);
        }
    }
    stk__interleave_free(&a);
    stk__interleave_free(&b);
}

/* Counts asked as the replay reaches their shards (a resume's header scan
 * without an index): the shards asked for, and 0 (not known) for any shard
 * from `unknown_from` on. */
struct asked {
    const uint64_t *sizes;
    unsigned char seen[128];
    size_t n_seen;
    size_t unknown_from;
};

static int count_shard(void *data, size_t shard, uint64_t *samples)
{
    struct asked *a = data;
    a->n_seen += !a->seen[shard];
    a->seen[shard] = 1;
    *samples = a->sizes[shard];
    return shard < a->unknown_from;
}

/* The plan from counts asked for shard by shard is the plan from all
 * counts, and asks only for the shards the replay reaches: of 100 shards of
 * 10 samples, with 4 slots and a window of 7, a resume at output 95 needs
 * about the first (95 + 2 x 7) / 10 shards and the slots' next ones. A
 * count not known leaves no plan (the epoch is read from its start), and so
 * does a resume with nothing to jump over, without asking for any. */
static void test_seek_plan_asks_only_the_counts_it_needs(void **state)
{
    (void)state;
    enum { SHARDS = 100 };
    uint64_t sizes[SHARDS];
    for (size_t i = 0; i < SHARDS; i++)
        sizes[i] = 10;
    struct stk__plan_cursor cursor;
    assert_int_equal(stk__plan_cursor_init(&cursor, SHARDS, 5, 0, 0, 1, 1, 0), 0);
    struct stk__seek_request req = {.cursor = &cursor, .shard_samples = sizes, .n_slots = 4,
                                    .shuffle = 1, .interleave_seed = 9, .shuffle_seed = 9,
                                    .window = 7, .output_position = 95, .target = UINT64_MAX};
    struct stk__seek_plan all, asked_plan;
    assert_int_equal(stk__seek_plan_compute(&all, &req), 1);
    struct asked a = {.sizes = sizes, .unknown_from = SHARDS};
    req.shard_samples = NULL;
    req.count = count_shard;
    req.count_data = &a;
    assert_int_equal(stk__seek_plan_compute(&asked_plan, &req), 1);
    assert_int_equal(asked_plan.input_start, all.input_start);
    assert_int_equal(asked_plan.drop, all.drop);
    assert_int_equal(asked_plan.start.input, all.start.input);
    assert_int_equal(asked_plan.start.cut_key, all.start.cut_key);
    assert_int_equal(asked_plan.start.cut_input, all.start.cut_input);
    for (unsigned j = 0; j < req.n_slots; j++) {
        assert_int_equal(asked_plan.il.slot_position[j], all.il.slot_position[j]);
        assert_int_equal(asked_plan.slot_skip[j], all.slot_skip[j]);
    }
    if (a.n_seen > (95 + 2 * 7 + 2) / 10 + 1 + req.n_slots)
        fail_msg("%zu of %d shards counted for a resume at output 95", a.n_seen, SHARDS);
    stk__seek_plan_free(&asked_plan);
    stk__seek_plan_free(&all);
    struct asked unknown = {.sizes = sizes, .unknown_from = 3};
    req.count_data = &unknown;
    assert_int_equal(stk__seek_plan_compute(&asked_plan, &req), 0);
    /* Output 5 of a window of 50: the shuffle still holds one of the first
     * inputs, so there is next to nothing to jump over and no shard is
     * counted. */
    struct asked early = {.sizes = sizes, .unknown_from = SHARDS};
    req.count_data = &early;
    req.output_position = 5;
    req.window = 50;
    assert_int_equal(stk__seek_plan_compute(&asked_plan, &req), 0);
    assert_int_equal(early.n_seen, 0);
    stk__plan_cursor_free(&cursor);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    struct stk__plan_cursor cursor;
    uint64_t sizes[6] = {4, 4, 4, 4, 4, 4};
    assert_int_equal(stk__plan_cursor_init(&cursor, 6, 1, 0, 0, 1, 1, 0), 0);
    struct stk__seek_request req = {.cursor = &cursor, .shard_samples = sizes, .n_slots = 3,
                                    .shuffle = 1, .interleave_seed = 1, .window = 4,
                                    .output_position = 13, .target = UINT64_MAX};
    int failures = 0;
    for (unsigned long n = 1;; n++) {
        struct stk__seek_plan sp;
        stk__alloc_fail_after(n);
        int rc = stk__seek_plan_compute(&sp, &req);
        stk__alloc_fail_after(0);
        if (rc == 1) {
            stk__seek_plan_free(&sp);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        failures++;
    }
    assert_true(failures >= 6);
    stk__plan_cursor_free(&cursor);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seek_plan_equals_replayed_interleave),
        cmocka_unit_test(test_storage_order),
        cmocka_unit_test(test_slots_end_together),
        cmocka_unit_test(test_shuffle_finishes_a_pass_first),
        cmocka_unit_test(test_no_progress_detected),
        cmocka_unit_test(test_copy_continues_the_same),
        cmocka_unit_test(test_seek_plan_asks_only_the_counts_it_needs),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
