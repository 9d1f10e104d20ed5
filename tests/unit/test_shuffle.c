/* SPDX-License-Identifier: MIT */
/*
 * test_shuffle.c - the sliding-key shuffle: reach, first and last batches,
 * uniformity, resume.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plan/mixing.h"
#include "base/rng.h"
#include "tar/sample.h"
#include "plan/shuffle.h"
#include "stoker.h"

/* Push n numbered samples through a shuffle; out receives their order. */
static void run_shuffle(size_t capacity, uint64_t seed, int n, int *out)
{
    struct stk__shuffle sh;
    assert_int_equal(stk__shuffle_init(&sh, capacity, seed, NULL), 0);
    int got = 0;
    for (int i = 0; i <= n; i++) {
        struct stk__sample *s;
        while ((s = stk__shuffle_pop(&sh)) != NULL) {
            out[got++] = (int)s->position;
            stk__sample_free(s);
        }
        if (i == n)
            break;
        s = stk__sample_new("k", 1, "mem://", 0, NULL);
        assert_non_null(s);
        s->position = (uint64_t)i;
        s->bytes = (uint64_t)i + 1; /* the bytes a budget counts (no member data here) */
        uint64_t before = sh.bytes;
        stk__shuffle_push(&sh, s);
        assert_int_equal(sh.bytes, before + (uint64_t)i + 1);
    }
    stk__shuffle_finish(&sh);
    struct stk__sample *s;
    while ((s = stk__shuffle_pop(&sh)) != NULL) {
        out[got++] = (int)s->position;
        stk__sample_free(s);
    }
    assert_int_equal(sh.bytes, 0); /* every sample's bytes left with it */
    stk__shuffle_free(&sh);
    assert_int_equal(got, n);
}

/* Every input goes out exactly once, within 2W positions of where it came
 * in, and the shuffle never holds more than its hard bound. */
static void test_permutation_within_reach(void **state)
{
    (void)state;
    static const size_t reaches[] = {2, 3, 20, 64, 100, 1000};
    enum { N = 3000 };
    static int out[N];
    for (size_t c = 0; c < sizeof reaches / sizeof reaches[0]; c++) {
        for (uint64_t seed = 0; seed < 5; seed++) {
            int n = (int)(seed * 700 + 1) % N + 1;
            run_shuffle(reaches[c], seed, n, out);
            static char seen[N];
            memset(seen, 0, sizeof seen);
            for (int p = 0; p < n; p++) {
                assert_false(seen[out[p]]);
                seen[out[p]] = 1;
                long gap = (long)p - out[p];
                assert_true(gap <= 2 * (long)reaches[c] && -gap <= 2 * (long)reaches[c]);
            }
        }
    }
}

/* The first batch draws from the whole first window, not from its first
 * 64 inputs (the ramp this shuffle replaced), and the last batch from the
 * held tail, not from the last few inputs. */
static void test_first_and_last_batches_span_the_window(void **state)
{
    (void)state;
    enum { W = 1000, N = 5000, B = 64, SEEDS = 20 };
    static int out[N];
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        run_shuffle(W, seed, N, out);
        double first = 0, last = 0;
        int first_max = 0, last_min = N;
        for (int p = 0; p < B; p++) {
            first += out[p];
            first_max = out[p] > first_max ? out[p] : first_max;
            last += out[N - 1 - p];
            last_min = out[N - 1 - p] < last_min ? out[N - 1 - p] : last_min;
        }
        first /= B;
        last /= B;
        assert_true(first > 0.3 * W && first < 0.7 * W);
        assert_true(first_max > W / 2);
        assert_true(last < N - 0.15 * W && last_min < N - W / 2);
    }
}

/* An epoch shorter than the reach is one uniform permutation: every input
 * lands in every position about equally often. */
static void test_short_epoch_is_a_uniform_permutation(void **state)
{
    (void)state;
    enum { CAP = 100, N = 60, SEEDS = 6000 };
    static int counts[N][N];
    memset(counts, 0, sizeof counts);
    int out[N];
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        run_shuffle(CAP, seed, N, out);
        for (int p = 0; p < N; p++)
            counts[out[p]][p]++;
    }
    double expect = (double)SEEDS / N;
    double tolerance = 5.0 * __builtin_sqrt(expect * (1.0 - 1.0 / N));
    for (int i = 0; i < N; i++)
        for (int p = 0; p < N; p++)
            assert_true(counts[i][p] > expect - tolerance && counts[i][p] < expect + tolerance);
}

/* stk__shuffle_locate: a shuffle started where it says, dropping what it
 * says, delivers exactly the rest of the uninterrupted output, for
 * positions in the key-ordered part and in the final drain. */
static void test_locate_resumes_exactly(void **state)
{
    (void)state;
    enum { N = 700 };
    static int full[N];
    static const size_t reaches[] = {1, 2, 50, 300, 1000};
    for (size_t c = 0; c < sizeof reaches / sizeof reaches[0]; c++) {
        size_t reach = reaches[c];
        run_shuffle(reach, 42, N, full);
        for (uint64_t output = 0; output < N; output += 37) {
            struct stk__shuffle_start start;
            uint64_t drop;
            assert_int_equal(stk__shuffle_locate(reach, 42, output, N, &start, &drop), 1);
            assert_true(start.input <= output);
            struct stk__shuffle sh;
            assert_int_equal(stk__shuffle_init(&sh, reach, 42, &start), 0);
            uint64_t p = output;
            for (uint64_t i = start.input;; i++) {
                struct stk__sample *s;
                while ((s = stk__shuffle_pop(&sh)) != NULL) {
                    if (drop > 0) {
                        drop--;
                    } else {
                        assert_true(p < N);
                        assert_int_equal(s->position, full[p++]);
                    }
                    stk__sample_free(s);
                }
                if (i == N)
                    break;
                s = stk__sample_new("k", 1, "mem://", 0, NULL);
                assert_non_null(s);
                s->position = i;
                stk__shuffle_push(&sh, s);
            }
            stk__shuffle_finish(&sh);
            struct stk__sample *s;
            while ((s = stk__shuffle_pop(&sh)) != NULL) {
                if (drop > 0) {
                    drop--;
                } else {
                    assert_int_equal(s->position, full[p++]);
                }
                stk__sample_free(s);
            }
            assert_int_equal(p, N);
            stk__shuffle_free(&sh);
        }
        struct stk__shuffle_start start;
        uint64_t drop;
        assert_int_equal(stk__shuffle_locate(reach, 42, N, N, &start, &drop), 0);
    }
}

/* Capacity 0 or 1 passes samples through in order. */
/* stk__shuffle_outputs replays the live order on positions: any run of
 * outputs, also in the final drain, also with a total past what the
 * outputs need (an epoch's first batches before all its shards are
 * counted), and fewer outputs where the epoch ends. */
static void test_outputs_replay_the_order(void **state)
{
    (void)state;
    enum { N = 600 };
    static int live[N];
    static uint64_t got[N];
    const size_t reaches[] = {1, 7, 100, 1000};
    for (size_t r = 0; r < sizeof reaches / sizeof *reaches; r++) {
        const size_t reach = reaches[r];
        run_shuffle(reach, 42 + r, N, live);
        for (uint64_t first = 0; first < N; first += 97) {
            size_t n;
            assert_int_equal(stk__shuffle_outputs(reach, 42 + r, first, 64, N, got, &n), 0);
            assert_int_equal(n, first + 64 <= N ? 64 : N - first);
            for (size_t i = 0; i < n; i++)
                assert_int_equal(got[i], (uint64_t)live[first + i]);
            /* A total past first + 64 + 2W + 1 leaves these outputs as they are. */
            uint64_t enough = first + 64 + 2 * reach + 2;
            if (enough <= N) {
                assert_int_equal(stk__shuffle_outputs(reach, 42 + r, first, 64, enough, got, &n),
                                 0);
                assert_int_equal(n, 64);
                for (size_t i = 0; i < n; i++)
                    assert_int_equal(got[i], (uint64_t)live[first + i]);
            }
        }
    }
}

static void test_pass_through(void **state)
{
    (void)state;
    int out[50];
    for (size_t cap = 0; cap < 2; cap++) {
        run_shuffle(cap, 7, 50, out);
        for (int i = 0; i < 50; i++)
            assert_int_equal(out[i], i);
    }
}

/* Same-shard pairs of a batch (mixing.c) against counting every ordered
 * pair of distinct positions, on random batches with few and many shards. */
static void test_same_shard_pairs_brute_force(void **state)
{
    (void)state;
    struct stk__rng rng;
    stk__rng_seed(&rng, 15);
    uint64_t shards[200], copy[200];
    for (int round = 0; round < 300; round++) {
        size_t n = (size_t)stk__rng_below(&rng, 200) + 1;
        uint64_t kinds = stk__rng_below(&rng, 40) + 1;
        for (size_t i = 0; i < n; i++)
            shards[i] = copy[i] = stk__rng_below(&rng, kinds) * 1000003u;
        uint64_t brute = 0;
        for (size_t i = 0; i < n; i++)
            for (size_t j = 0; j < n; j++)
                brute += i != j && shards[i] == shards[j];
        uint64_t distinct, kinds_seen = 0;
        assert_int_equal(stk__same_shard_pairs(copy, n, &distinct), brute);
        for (size_t i = 0; i < n; i++) {
            size_t j = 0;
            while (j < i && shards[j] != shards[i])
                j++;
            kinds_seen += j == i;
        }
        assert_int_equal(distinct, kinds_seen);
    }
    uint64_t one = 7;
    assert_int_equal(stk__same_shard_pairs(&one, 1, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_shard_pairs_brute_force),
        cmocka_unit_test(test_permutation_within_reach),
        cmocka_unit_test(test_first_and_last_batches_span_the_window),
        cmocka_unit_test(test_short_epoch_is_a_uniform_permutation),
        cmocka_unit_test(test_locate_resumes_exactly),
        cmocka_unit_test(test_pass_through),
        cmocka_unit_test(test_outputs_replay_the_order),
    };
    return cmocka_run_group_tests_name("shuffle", tests, NULL, NULL);
}
