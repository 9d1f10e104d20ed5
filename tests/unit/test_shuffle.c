/*
 * test_shuffle.c - the windowed shuffle: windows, permutations, uniformity.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mixing.h"
#include "rng.h"
#include "sample.h"
#include "shuffle.h"
#include "stoker.h"

/* Window sizes as documented: 64, 128, ... doubling up to the capacity. */
static size_t expected_size(size_t capacity, uint64_t k)
{
    size_t size = 64;
    for (; k > 0 && size < capacity; k--)
        size *= 2;
    return size < capacity ? size : capacity;
}

/* stk__shuffle_window_at agrees with walking the windows one by one. */
static void test_window_at_matches_the_schedule(void **state)
{
    (void)state;
    static const size_t capacities[] = {1, 2, 20, 63, 64, 65, 100, 1000, 4096, 5000};
    for (size_t c = 0; c < sizeof capacities / sizeof capacities[0]; c++) {
        size_t cap = capacities[c];
        uint64_t k = 0, start = 0;
        for (uint64_t p = 0; p < 30000; p++) {
            if (p == start + expected_size(cap, k)) {
                start = p;
                k++;
            }
            uint64_t window, first;
            stk__shuffle_window_at(cap, p, &window, &first);
            assert_int_equal(window, k);
            assert_int_equal(first, start);
        }
    }
}

/* Push n numbered samples through a shuffle; out receives their order. */
static void run_shuffle(size_t capacity, uint64_t seed, int n, int *out)
{
    struct stk__shuffle sh;
    assert_int_equal(stk__shuffle_init(&sh, capacity, seed, 0), 0);
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

/* Each window is a permutation of its own input, and over many seeds every
 * sample lands in every position of its window about equally often. */
static void test_windows_are_uniform_permutations(void **state)
{
    (void)state;
    enum { CAP = 100, N = 64 + 100 + 37, SEEDS = 4000 };
    static int counts[N][N];
    memset(counts, 0, sizeof counts);
    int out[N];
    for (uint64_t seed = 0; seed < SEEDS; seed++) {
        run_shuffle(CAP, seed, N, out);
        for (int p = 0; p < N; p++) {
            uint64_t w_out, s_out, w_in, s_in;
            stk__shuffle_window_at(CAP, (uint64_t)p, &w_out, &s_out);
            stk__shuffle_window_at(CAP, (uint64_t)out[p], &w_in, &s_in);
            assert_int_equal(w_out, w_in); /* never leaves its window */
            counts[out[p]][p]++;
        }
    }
    /* Windows [0,64) [64,164) and the last, partial [164,201): each cell of
     * a window of size m expects SEEDS/m; allow 5 standard deviations. */
    for (int i = 0; i < N; i++) {
        uint64_t w, first;
        stk__shuffle_window_at(CAP, (uint64_t)i, &w, &first);
        int m = w == 0 ? 64 : w == 1 ? 100 : N - 164;
        double expect = (double)SEEDS / m;
        double tolerance = 5.0 * __builtin_sqrt(expect * (1.0 - 1.0 / m));
        for (int p = (int)first; p < (int)first + m; p++)
            assert_true(counts[i][p] > expect - tolerance && counts[i][p] < expect + tolerance);
    }
}

/* Capacity 0 or 1 passes samples through in order. */
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
        assert_int_equal(stk__same_shard_pairs(copy, n), brute);
    }
    uint64_t one = 7;
    assert_int_equal(stk__same_shard_pairs(&one, 1), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_shard_pairs_brute_force),
        cmocka_unit_test(test_window_at_matches_the_schedule),
        cmocka_unit_test(test_windows_are_uniform_permutations),
        cmocka_unit_test(test_pass_through),
    };
    return cmocka_run_group_tests_name("shuffle", tests, NULL, NULL);
}
