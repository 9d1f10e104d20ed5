/* SPDX-License-Identifier: MIT */
/*
 * test_plan.c - shard permutations and the split across ranks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "plan/node_uses.h"
#include "plan/plan.h"
#include "stoker.h"

#define N 103

/* Every index 0..N-1 exactly once. */
static void assert_permutation(const uint32_t *a)
{
    int seen[N] = {0};
    for (int i = 0; i < N; i++)
        seen[a[i]]++;
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
}

static void test_permutation_is_deterministic_and_complete(void **state)
{
    (void)state;
    uint32_t a[N], b[N], c[N];
    stk__plan_permutation(N, 7, 3, 1, a);
    stk__plan_permutation(N, 7, 3, 1, b);
    stk__plan_permutation(N, 7, 4, 1, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_permutation(a);
}

static void test_no_shuffle_is_storage_order(void **state)
{
    (void)state;
    uint32_t a[N];
    stk__plan_permutation(N, 7, 3, 0, a);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(a[i], i);
}

static void test_ranks_are_disjoint_and_cover_all(void **state)
{
    (void)state;
    static const int worlds[] = {1, 2, 3, 8, N};
    uint32_t perm[N];
    stk__plan_permutation(N, 1, 0, 1, perm);
    for (size_t w = 0; w < sizeof worlds / sizeof worlds[0]; w++) {
        int world = worlds[w];
        int seen[N] = {0};
        size_t total = 0, min = N, max = 0;
        for (int r = 0; r < world; r++) {
            size_t n = stk__plan_rank_count(N, r, world);
            min = n < min ? n : min;
            max = n > max ? n : max;
            for (size_t i = 0; i < n; i++)
                seen[stk__plan_rank_shard(perm, i, r, world)]++;
            total += n;
        }
        assert_int_equal(total, N);
        assert_true(max - min <= 1);
        for (int i = 0; i < N; i++)
            assert_int_equal(seen[i], 1);
    }
}

static void test_pass_order_permutes_the_ranks_own_list(void **state)
{
    (void)state;
    uint32_t a[N], b[N], c[N];
    stk__plan_pass_order(N, 7, 3, 1, 0, 1, a);
    stk__plan_pass_order(N, 7, 3, 1, 0, 1, b);
    stk__plan_pass_order(N, 7, 3, 2, 0, 1, c);
    assert_memory_equal(a, b, sizeof a);
    assert_memory_not_equal(a, c, sizeof a);
    assert_permutation(a);
    stk__plan_pass_order(N, 7, 3, 1, 0, 0, a);
    for (uint32_t i = 0; i < N; i++)
        assert_int_equal(a[i], i);
}

static void test_too_few_shards(void **state)
{
    (void)state;
    struct stk__err err;
    assert_int_equal(stk__plan_check(2, 3, &err), STK_EPLAN);
    assert_non_null(strstr(err.msg, "2 shard(s) cannot be split over 3 ranks"));
    assert_int_equal(stk__plan_check(3, 3, &err), 0);
}

/* The split by sample: over every rank of a world, each sample of the epoch
 * is read (shard, position) once, plus the padding that equal shares need
 * (ceil(total / world) each, at most world - 1 repeated, counted in
 * .padded); without padding each sample exactly once, shares differing by
 * at most one. Shards of uneven and zero sizes, fewer shards than ranks
 * and fewer samples than ranks included; with a global order the same with
 * a segment per sample. */
static void check_split(const uint64_t *counts, size_t n_shards, int world, int pad, int global)
{
    uint64_t total = 0, start[16];
    for (size_t i = 0; i < n_shards; i++) {
        start[i] = total;
        total += counts[i];
    }
    static int seen[4096];
    memset(seen, 0, sizeof seen);
    uint64_t padded = 0, share = (total + (uint64_t)world - 1) / (uint64_t)world;
    for (int r = 0; r < world; r++) {
        struct stk__plan_cursor c;
        assert_int_equal(stk__plan_cursor_init(&c, n_shards, 9, 1, r, world, 1, 0), 0);
        assert_int_equal(stk__plan_cursor_by_sample(&c, counts, pad, global), 0);
        uint64_t mine = 0;
        struct stk__plan_segment seg;
        for (uint64_t g = 0; stk__plan_cursor_segment(&c, g, &seg); g++) {
            assert_true(seg.count > 0 && seg.first + seg.count <= counts[seg.shard]);
            if (global)
                assert_int_equal(seg.count, 1);
            for (uint64_t k = 0; k < seg.count; k++)
                seen[start[seg.shard] + seg.first + k]++;
            mine += seg.count;
        }
        if (pad)
            assert_int_equal(mine, share);
        else
            assert_true(mine == total / (uint64_t)world || mine == total / (uint64_t)world + 1);
        padded += c.padded;
        stk__plan_cursor_free(&c);
    }
    uint64_t repeated = 0;
    for (uint64_t i = 0; i < total; i++) {
        assert_true(seen[i] >= 1);
        repeated += (uint64_t)seen[i] - 1;
    }
    assert_int_equal(repeated, pad ? share * (uint64_t)world - total : 0);
    assert_int_equal(padded, repeated);
    assert_true(total < (uint64_t)world || repeated <= (uint64_t)world - 1);
}

static void test_split_by_sample(void **state)
{
    (void)state;
    const uint64_t uneven[] = {300, 300, 300, 300, 300, 100};
    const uint64_t gaps[] = {7, 0, 13, 1, 0, 29, 5};
    const uint64_t two[] = {30, 10};
    const uint64_t tiny[] = {1, 0, 1};
    for (int global = 0; global < 2; global++) {
        for (int pad = 0; pad < 2; pad++) {
            for (int world = 1; world <= 9; world++) {
                check_split(uneven, 6, world, pad, global);
                check_split(gaps, 7, world, pad, global);
                check_split(two, 2, world, pad, global);
            }
            check_split(tiny, 3, 5, pad, global); /* fewer samples than ranks */
        }
    }
}

/* Repeated augmentation over virtual ranks (plan.h): over every rank of a
 * world, every sample read is read reps times, each copy tagged with a
 * distinct virtual rank of the rank reading it, on reps distinct ranks when
 * world >= reps; cut to slot_samples per part, every rank reads the same
 * count and the epoch covers the parts' first slot_samples samples; whole
 * parts without padding read every sample reps times. */
static void check_repeats(const uint64_t *counts, size_t n_shards, int reps, int world,
                          int by_sample, int global, uint64_t slot_samples)
{
    uint64_t total = 0, start[16];
    for (size_t i = 0; i < n_shards; i++) {
        start[i] = total;
        total += counts[i];
    }
    int parts, slots;
    stk__plan_repeats(reps, world, &parts, &slots);
    assert_int_equal(parts * reps, world * slots); /* the lcm of reps and world */
    static int copies[4096];
    static uint32_t draws[4096][8], ranks[4096][8];
    memset(copies, 0, sizeof copies);
    for (int r = 0; r < world; r++) {
        struct stk__plan_spec spec = {.n_shards = n_shards, .seed = 5, .epoch = 2, .rank = r,
                                      .world = world, .shuffle = 1, .counts = counts,
                                      .by_sample = by_sample, .pad = 0, .global = global,
                                      .reps = reps, .slot_samples = slot_samples};
        struct stk__plan_cursor c;
        assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
        uint64_t mine = 0;
        struct stk__plan_segment seg;
        for (uint64_t g = 0; stk__plan_cursor_segment(&c, g, &seg); g++) {
            uint64_t n = seg.count != STK__PLAN_WHOLE ? seg.count : counts[seg.shard];
            assert_true(seg.first + n <= counts[seg.shard]);
            assert_int_equal((seg.draws - 1) % (uint32_t)world, (uint32_t)r);
            for (uint64_t k = 0; k < n; k++) {
                uint64_t id = start[seg.shard] + seg.first + k;
                assert_true(copies[id] < 8);
                draws[id][copies[id]] = seg.draws;
                ranks[id][copies[id]++] = (uint32_t)r;
            }
            mine += n;
        }
        if (slot_samples)
            assert_int_equal(mine, slot_samples * (uint64_t)slots);
        stk__plan_cursor_free(&c);
    }
    uint64_t read = 0;
    for (uint64_t i = 0; i < total; i++) {
        if (copies[i] == 0 && slot_samples)
            continue;
        assert_int_equal(copies[i], reps);
        read++;
        for (int a = 0; a < reps; a++)
            for (int b = 0; b < a; b++) {
                assert_true(draws[i][a] != draws[i][b]);
                if (world >= reps)
                    assert_true(ranks[i][a] != ranks[i][b]);
            }
    }
    if (slot_samples)
        assert_int_equal(read * (uint64_t)reps, slot_samples * (uint64_t)slots * (uint64_t)world);
}

static void test_repeats(void **state)
{
    (void)state;
    const uint64_t uneven[] = {300, 300, 300, 300, 300, 100};
    const uint64_t gaps[] = {7, 0, 13, 1, 0, 29, 5, 0, 17};
    for (int reps = 2; reps <= 5; reps++) {
        for (int world = 1; world <= 9; world++) {
            int parts, slots;
            stk__plan_repeats(reps, world, &parts, &slots);
            if (slots == 1)
                continue; /* the loader plans those as a plain plan of parts ranks */
            for (int global = 0; global < 2; global++) {
                check_repeats(uneven, 6, reps, world, parts > 1, global && parts > 1,
                              1600 / (uint64_t)world / (uint64_t)slots);
                check_repeats(gaps, 9, reps, world, parts > 1, global && parts > 1,
                              72 / (uint64_t)world / (uint64_t)slots);
            }
            if (parts <= 9) /* whole shards of each part, as without an index */
                check_repeats(gaps, 9, reps, world, 0, 0, 0);
        }
    }
    int parts, slots;
    stk__plan_repeats(3, 4, &parts, &slots);
    assert_int_equal(parts, 4);
    assert_int_equal(slots, 3);
    stk__plan_repeats(4, 2, &parts, &slots);
    assert_int_equal(parts, 1);
    assert_int_equal(slots, 2);
}

static void test_rank_from_environment(void **state)
{
    (void)state;
    struct stk__err err;
    int rank, world;
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    setenv("SLURM_PROCID", "2", 1);
    setenv("SLURM_NTASKS", "4", 1);
    assert_int_equal(stk__plan_resolve_rank(-1, -1, &rank, &world, &err), 0);
    assert_int_equal(rank, 2);
    assert_int_equal(world, 4);
    /* torchrun's variables win over Slurm's, explicit options over both. */
    setenv("RANK", "1", 1);
    setenv("WORLD_SIZE", "2", 1);
    assert_int_equal(stk__plan_resolve_rank(-1, -1, &rank, &world, &err), 0);
    assert_int_equal(rank, 1);
    assert_int_equal(world, 2);
    assert_int_equal(stk__plan_resolve_rank(0, 1, &rank, &world, &err), 0);
    assert_int_equal(rank, 0);
    assert_int_equal(world, 1);
    setenv("RANK", "5", 1);
    assert_int_equal(stk__plan_resolve_rank(-1, -1, &rank, &world, &err), STK_EINVAL);
    setenv("RANK", "x1", 1);
    assert_int_equal(stk__plan_resolve_rank(-1, -1, &rank, &world, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "RANK"));
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
    unsetenv("SLURM_PROCID");
    unsetenv("SLURM_NTASKS");
    assert_int_equal(stk__plan_resolve_rank(-1, -1, &rank, &world, &err), 0);
    assert_int_equal(rank, 0);
    assert_int_equal(world, 1);
}

/* Node affinity by shard: every shard on one node for the whole run, the
 * node's ranks reading each of its shards once per epoch, in an order
 * that changes with the epoch. */
static void test_affinity_by_shard(void **state)
{
    (void)state;
    enum { SHARDS = 23, WORLD = 6, RPN = 3 };
    int home[SHARDS], orders_differ = 0;
    uint32_t first_order[SHARDS];
    for (int i = 0; i < SHARDS; i++)
        home[i] = -1;
    for (uint64_t epoch = 0; epoch < 4; epoch++) {
        int seen[SHARDS] = {0};
        for (int r = 0; r < WORLD; r++) {
            struct stk__plan_cursor c;
            const struct stk__plan_spec spec = {.n_shards = SHARDS, .seed = 5, .epoch = epoch,
                                                .rank = r, .world = WORLD, .shuffle = 1,
                                                .ranks_per_node = RPN};
            assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
            size_t shard;
            for (uint64_t g = 0; stk__plan_cursor_shard(&c, g, &shard); g++) {
                seen[shard]++;
                if (home[shard] < 0)
                    home[shard] = r / RPN;
                assert_int_equal(home[shard], r / RPN);
            }
            assert_true(c.count >= 1); /* 23 shards over 2 nodes of 3 ranks */
            if (r == 0 && epoch == 0)
                memcpy(first_order, c.perm, sizeof first_order);
            else if (r == 0)
                orders_differ |= memcmp(first_order, c.perm, c.n_shards * sizeof *c.perm) != 0;
            stk__plan_cursor_free(&c);
        }
        for (int i = 0; i < SHARDS; i++)
            assert_int_equal(seen[i], 1);
    }
    assert_true(orders_differ);
}

/* Node affinity by sample: each rank yields the run's equal share
 * ceil(total / world), reading only its node's shards; a node repeats
 * samples (padding) only where its own shards hold fewer than its ranks'
 * shares, and every sample of a node not over its share is read. */
static void test_affinity_by_sample(void **state)
{
    (void)state;
    const uint64_t counts[] = {300, 17, 300, 5, 120, 0, 64, 64, 90, 33, 250, 1};
    enum { SHARDS = 12 };
    uint64_t total = 0, start[SHARDS];
    for (int i = 0; i < SHARDS; i++) {
        start[i] = total;
        total += counts[i];
    }
    for (int world = 2; world <= 8; world += 2) {
        for (int rpn = 1; rpn <= world; rpn *= 2) {
            if (world % rpn)
                continue;
            const uint64_t share = (total + (uint64_t)world - 1) / (uint64_t)world;
            uint32_t node_of[SHARDS];
            assert_int_equal(stk__plan_node_split(SHARDS, 7, 1, world / rpn, counts, node_of), 0);
            static int seen[2048];
            memset(seen, 0, sizeof seen);
            uint64_t node_total[8] = {0}, padded[8] = {0};
            for (int i = 0; i < SHARDS; i++)
                node_total[node_of[i]] += counts[i];
            for (int r = 0; r < world; r++) {
                struct stk__plan_cursor c;
                const struct stk__plan_spec spec = {
                    .n_shards = SHARDS, .seed = 7, .epoch = 3, .rank = r, .world = world,
                    .shuffle = 1, .ranks_per_node = rpn, .counts = counts, .by_sample = 1,
                    .pad = 1};
                assert_int_equal(stk__plan_cursor_open(&c, &spec), 0);
                uint64_t mine = 0;
                struct stk__plan_segment seg;
                for (uint64_t g = 0; stk__plan_cursor_segment(&c, g, &seg); g++) {
                    assert_int_equal(node_of[seg.shard], (uint32_t)(r / rpn));
                    for (uint64_t k = 0; k < seg.count; k++)
                        seen[start[seg.shard] + seg.first + k]++;
                    mine += seg.count;
                }
                assert_int_equal(mine, share);
                padded[r / rpn] += c.padded;
                stk__plan_cursor_free(&c);
            }
            for (int n = 0; n < world / rpn; n++) {
                uint64_t want = (uint64_t)rpn * share;
                assert_int_equal(padded[n], want > node_total[n] ? want - node_total[n] : 0);
                for (int i = 0; i < SHARDS && want >= node_total[n]; i++)
                    for (uint64_t k = 0; node_of[i] == (uint32_t)n && k < counts[i]; k++)
                        assert_true(seen[start[i] + k] >= 1);
            }
        }
    }
}

/* The dealing of shards to nodes (bounded-load rendezvous): floor or
 * ceil(shards / nodes) shards a node without counts, and with equal
 * counts; with any counts the nodes' samples within the largest count of
 * each other, as the greedy dealing kept them. */
static void test_node_split_balances(void **state)
{
    (void)state;
    enum { SHARDS = 200 };
    static uint64_t counts[SHARDS];
    uint64_t most = 0, total = 0;
    for (int i = 0; i < SHARDS; i++) {
        counts[i] = (uint64_t)((i * 7919) % 500);
        most = counts[i] > most ? counts[i] : most;
        total += counts[i];
    }
    static uint32_t node_of[SHARDS];
    for (int nodes = 1; nodes <= 9; nodes++) {
        int shards[9] = {0};
        uint64_t load[9] = {0};
        assert_int_equal(stk__plan_node_split(SHARDS, 4, 1, nodes, NULL, node_of), 0);
        for (int i = 0; i < SHARDS; i++)
            shards[node_of[i]]++;
        assert_int_equal(stk__plan_node_split(SHARDS, 4, 1, nodes, counts, node_of), 0);
        for (int i = 0; i < SHARDS; i++)
            load[node_of[i]] += counts[i];
        for (int k = 0; k < nodes; k++) {
            assert_true(shards[k] == SHARDS / nodes || shards[k] == SHARDS / nodes + 1);
            assert_true(load[k] <= (total + (uint64_t)nodes - 1) / (uint64_t)nodes + most);
            for (int j = 0; j < nodes; j++)
                assert_true(load[k] <= load[j] + most);
        }
        static uint64_t equal[SHARDS];
        for (int i = 0; i < SHARDS; i++)
            equal[i] = 200;
        memset(shards, 0, sizeof shards);
        assert_int_equal(stk__plan_node_split(SHARDS, 4, 1, nodes, equal, node_of), 0);
        for (int i = 0; i < SHARDS; i++)
            shards[node_of[i]]++;
        for (int k = 0; k < nodes; k++)
            assert_true(shards[k] == SHARDS / nodes || shards[k] == SHARDS / nodes + 1);
    }
}

/* Shards that change node between a dealing to `from` nodes and one to
 * `to`, and those on the nodes that only `from` has. */
static void count_moves(const uint64_t *counts, size_t shards, int from, int to, size_t *moved,
                        size_t *lost)
{
    static uint32_t a[4096], b[4096];
    assert_true(shards <= 4096);
    assert_int_equal(stk__plan_node_split(shards, 9, 1, from, counts, a), 0);
    assert_int_equal(stk__plan_node_split(shards, 9, 1, to, counts, b), 0);
    *moved = *lost = 0;
    for (size_t i = 0; i < shards; i++) {
        *moved += a[i] != b[i];
        *lost += a[i] >= (uint32_t)to;
    }
}

/* The dealing is stable across node counts: from n to n - 1 nodes the lost
 * node's shards move, and few others (the cap displaces a shard where its
 * node fills with the newcomers first); from n - 1 to n about a 1/n share
 * moves to the new node. The greedy dealing it replaced moved about
 * (n - 1) / n of all shards either way. */
static void test_node_split_is_stable(void **state)
{
    (void)state;
    enum { SHARDS = 4000 };
    static uint64_t counts[SHARDS];
    for (int i = 0; i < SHARDS; i++)
        counts[i] = 900 + (uint64_t)((i * 7919) % 200); /* shards of 900..1099 samples */
    for (int weighted = 0; weighted <= 1; weighted++) {
        for (int n = 2; n <= 8; n++) {
            size_t moved, lost;
            count_moves(weighted ? counts : NULL, SHARDS, n, n - 1, &moved, &lost);
            print_message("%s %d -> %d nodes: %zu moved, %zu on the lost node\n",
                          weighted ? "by count" : "by shard", n, n - 1, moved, lost);
            assert_true(moved >= lost);
            assert_true(moved <= lost + SHARDS / 50); /* the lost node's shards + 2% */
            count_moves(weighted ? counts : NULL, SHARDS, n - 1, n, &moved, &lost);
            assert_true(moved <= SHARDS / (size_t)n + SHARDS / 50);
        }
    }
}

/* A node's coming reads: under affinity each of its shards once per epoch
 * and no other shard, at times inside its epoch, position k of every rank
 * at the same time. */
static void test_node_uses(void **state)
{
    (void)state;
    enum { SHARDS = 20, WORLD = 4, RPN = 2 };
    const struct stk__plan_spec spec = {.n_shards = SHARDS, .seed = 3, .epoch = 7, .rank = 3,
                                        .world = WORLD, .shuffle = 1, .ranks_per_node = RPN};
    struct stk__plan_use *uses;
    size_t n;
    assert_int_equal(stk__plan_node_uses(&spec, 2, RPN, 2, &uses, &n), 0);
    uint32_t node_of[SHARDS];
    assert_int_equal(stk__plan_node_split(SHARDS, 3, 1, WORLD / RPN, NULL, node_of), 0);
    int seen[2][SHARDS] = {{0}};
    for (size_t i = 0; i < n; i++) {
        uint64_t epoch = uses[i].when >> 32;
        assert_true(epoch == 7 || epoch == 8);
        assert_int_equal(node_of[uses[i].shard], 1);
        seen[epoch - 7][uses[i].shard]++;
    }
    for (int e = 0; e < 2; e++)
        for (int i = 0; i < SHARDS; i++)
            assert_int_equal(seen[e][i], node_of[i] == 1 ? 1 : 0);
    assert_int_equal(stk__plan_use_time(7, 2, 5), stk__plan_use_time(7, 4, 10));
    assert_true(stk__plan_use_time(7, 9, 10) < stk__plan_use_time(8, 0, 10));
    stk__free(uses);
}

/* Node identity from the launcher, checked against the rank numbering. */
static void test_node_from_environment(void **state)
{
    (void)state;
    struct stk__err err;
    int rpn = 0;
    unsetenv("SLURM_NTASKS_PER_NODE");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_NNODES");
    unsetenv("SLURM_NODEID");
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("GROUP_RANK");
    unsetenv("LOCAL_RANK");
    assert_int_equal(stk__plan_resolve_node(0, 1, 4, &rpn, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "ranks_per_node"));
    assert_int_equal(stk__plan_resolve_node(2, 1, 4, &rpn, &err), 0);
    assert_int_equal(rpn, 2);
    assert_int_equal(stk__plan_resolve_node(3, 1, 4, &rpn, &err), STK_EINVAL);
    setenv("SLURM_NTASKS", "8", 1);
    setenv("SLURM_NNODES", "2", 1);
    assert_int_equal(stk__plan_resolve_node(0, 5, 8, &rpn, &err), 0);
    assert_int_equal(rpn, 4);
    setenv("SLURM_NODEID", "0", 1); /* rank 5 of 4 per node is on node 1 */
    assert_int_equal(stk__plan_resolve_node(0, 5, 8, &rpn, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "SLURM_NODEID=0"));
    unsetenv("SLURM_NODEID");
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_NNODES");
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    setenv("GROUP_RANK", "1", 1);
    setenv("LOCAL_RANK", "1", 1);
    assert_int_equal(stk__plan_resolve_node(0, 3, 4, &rpn, &err), 0);
    assert_int_equal(rpn, 2);
    assert_int_equal(stk__plan_resolve_node(0, 2, 4, &rpn, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "LOCAL_RANK=1"));
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("GROUP_RANK");
    unsetenv("LOCAL_RANK");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_permutation_is_deterministic_and_complete),
        cmocka_unit_test(test_no_shuffle_is_storage_order),
        cmocka_unit_test(test_ranks_are_disjoint_and_cover_all),
        cmocka_unit_test(test_pass_order_permutes_the_ranks_own_list),
        cmocka_unit_test(test_too_few_shards),
        cmocka_unit_test(test_split_by_sample),
        cmocka_unit_test(test_repeats),
        cmocka_unit_test(test_affinity_by_shard),
        cmocka_unit_test(test_affinity_by_sample),
        cmocka_unit_test(test_node_from_environment),
        cmocka_unit_test(test_node_uses),
        cmocka_unit_test(test_node_split_balances),
        cmocka_unit_test(test_node_split_is_stable),
        cmocka_unit_test(test_rank_from_environment),
    };
    return cmocka_run_group_tests_name("plan", tests, NULL, NULL);
}
