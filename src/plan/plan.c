/* SPDX-License-Identifier: MIT */
/*
 * plan.c - deterministic shard order and the split across ranks.
 */
#include "plan/plan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "plan/remainder.h"
#include "stoker.h"

/* Parse a non-negative decimal environment variable; -1 when unset. */
static int env_int(const char *name, long *value, struct stk__err *err)
{
    const char *s = getenv(name);
    *value = -1;
    if (s == NULL || *s == '\0')
        return 0;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0' || v < 0 || v > 1000000)
        return stk__errf(err, STK_EINVAL, "environment variable %s='%.40s' is not a valid number",
                         name, s);
    *value = v;
    return 0;
}

int stk__plan_resolve_rank(int rank_opt, int world_opt, int *rank, int *world,
                           struct stk__err *err)
{
    static const char *const pairs[][2] = {
        {"RANK", "WORLD_SIZE"},
        {"SLURM_PROCID", "SLURM_NTASKS"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    };
    long r = rank_opt, w = world_opt;
    const char *source = "options";
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0] && (r < 0 || w < 0); i++) {
        long er, ew;
        int rc = env_int(pairs[i][0], &er, err);
        if (rc == 0)
            rc = env_int(pairs[i][1], &ew, err);
        if (rc < 0)
            return rc;
        if (er < 0 || ew < 0)
            continue;
        if (r < 0)
            r = er;
        if (w < 0)
            w = ew;
        source = pairs[i][0];
    }
    if (r < 0)
        r = 0;
    if (w < 0)
        w = 1;
    if (w < 1 || r >= w)
        return stk__errf(err, STK_EINVAL, "rank %ld is not below world size %ld (from %s)", r, w,
                         source);
    *rank = (int)r;
    *world = (int)w;
    return 0;
}

int stk_resolve_rank(int rank, int world_size, int *rank_out, int *world_out, char *errbuf,
                     size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__plan_resolve_rank(rank, world_size, rank_out, world_out, &err);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}

int stk__plan_check(size_t n_shards, int world, struct stk__err *err)
{
    if (n_shards < (size_t)world)
        return stk__errf(err, STK_EPLAN,
                         "%zu shard(s) cannot be split over %d ranks: every rank needs at least one "
                         "shard (split the data into more shards)",
                         n_shards, world);
    return 0;
}

size_t stk__plan_rank_count(size_t n_shards, int rank, int world)
{
    return n_shards / (size_t)world + ((size_t)rank < n_shards % (size_t)world ? 1 : 0);
}

/* Identity, then Fisher-Yates with the given seed when shuffling. */
static void permutation(size_t n, int shuffle, uint64_t seed, uint32_t *perm)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    if (!shuffle)
        return;
    struct stk__rng rng;
    stk__rng_seed(&rng, seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)stk__rng_below(&rng, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

void stk__plan_permutation(size_t n_shards, uint64_t seed, uint64_t epoch, int shuffle,
                           uint32_t *perm)
{
    /* The same on every rank because rank is not an input. */
    permutation(n_shards, shuffle, stk__mix(stk__mix(seed, epoch), 0x5368617264ull), perm);
}

void stk__plan_pass_order(size_t count, uint64_t seed, uint64_t epoch, uint64_t pass, int rank,
                          int shuffle, uint32_t *order)
{
    uint64_t key = stk__mix(stk__mix(stk__mix(seed, epoch), pass), (uint64_t)rank ^ 0x50617373ull);
    permutation(count, shuffle, key, order);
}

size_t stk__plan_rank_shard(const uint32_t *perm, size_t i, int rank, int world)
{
    return perm[i * (size_t)world + (size_t)rank];
}

int stk__plan_cursor_init(struct stk__plan_cursor *c, size_t n_shards, uint64_t seed,
                          uint64_t epoch, int rank, int world, int shuffle, int unbounded)
{
    *c = (struct stk__plan_cursor){
        .n_shards = n_shards,
        .count = stk__plan_rank_count(n_shards, rank, world),
        .seed = seed,
        .epoch = epoch,
        .rank = rank,
        .world = world,
        .shuffle = shuffle,
        .unbounded = unbounded,
    };
    c->perm = stk__calloc(n_shards + 1, sizeof *c->perm);
    c->order = stk__calloc(c->count + 1, sizeof *c->order);
    if (c->perm == NULL || c->order == NULL) {
        stk__plan_cursor_free(c);
        return STK_ENOMEM;
    }
    stk__plan_permutation(n_shards, seed, epoch, shuffle, c->perm);
    return 0;
}

/* Append the parts of the permuted sequence's run [begin, end) (end <= the
 * total) to c->segments. */
static void add_run(struct stk__plan_cursor *c, const uint64_t *counts, uint64_t begin,
                    uint64_t end)
{
    uint64_t start = 0; /* of shard perm[i] in the sequence */
    for (size_t i = 0; i < c->n_shards && start < end; i++) {
        size_t shard = c->perm[i];
        uint64_t stop = start + counts[shard];
        if (stop > begin && counts[shard] > 0) {
            uint64_t first = begin > start ? begin : start;
            uint64_t last = end < stop ? end : stop;
            c->segments[c->count++] =
                (struct stk__plan_segment){shard, first - start, last - first, 0};
        }
        start = stop;
    }
}

/* The same run of a global permutation of the total samples: one segment
 * per sample, found by its number through the shards' starts. */
static int add_global_run(struct stk__plan_cursor *c, const uint64_t *counts,
                          const uint32_t *order, uint64_t begin, uint64_t end)
{
    uint64_t *starts = stk__calloc(c->n_shards + 1, sizeof *starts); /* of shard perm[i] */
    if (starts == NULL)
        return STK_ENOMEM;
    for (size_t i = 0; i < c->n_shards; i++)
        starts[i + 1] = starts[i] + counts[c->perm[i]];
    for (uint64_t k = begin; k < end; k++) {
        uint64_t id = order[k];
        size_t lo = 0, hi = c->n_shards; /* the last position starting at or before id */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (starts[mid] <= id)
                lo = mid;
            else
                hi = mid;
        }
        while (starts[lo + 1] <= id) /* empty shards share a start */
            lo++;
        c->segments[c->count++] = (struct stk__plan_segment){c->perm[lo], id - starts[lo], 1, 0};
    }
    stk__free(starts);
    return 0;
}

/* Append the sequence's positions [begin, end) as segments. */
static int add_positions(struct stk__plan_cursor *c, const uint64_t *counts,
                         const uint32_t *order, uint64_t begin, uint64_t end)
{
    if (order != NULL)
        return add_global_run(c, counts, order, begin, end);
    add_run(c, counts, begin, end);
    return 0;
}

/* The same for positions [begin, end) of the remainder's ranges (plan.h),
 * each range's part in turn. */
static int add_remainder(struct stk__plan_cursor *c, const uint64_t *counts,
                         const uint32_t *order, uint64_t begin, uint64_t end)
{
    if (c->ranges == NULL)
        return add_positions(c, counts, order, begin, end);
    uint64_t acc = 0; /* remainder position of range i's start */
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < c->n_ranges && acc < end; i++) {
        const uint64_t from = c->ranges[2 * i], len = c->ranges[2 * i + 1] - from;
        const uint64_t lo = begin > acc ? begin : acc, hi = end < acc + len ? end : acc + len;
        if (lo < hi)
            rc = add_positions(c, counts, order, from + (lo - acc), from + (hi - acc));
        acc += len;
    }
    return rc;
}

/* The concatenation of the seq_nodes nodes' sequences (plan.h) in place of
 * the cursor's one: c->perm grouped by node, each node's shards in their
 * epoch order; with global, *order (the total's positions) the nodes'
 * global orders one after the other, each of its own block. 0 or
 * STK_ENOMEM. */
static int node_sequences(struct stk__plan_cursor *c, const uint64_t *counts, int global,
                          uint64_t total, uint32_t **order)
{
    const size_t n = c->n_shards;
    uint32_t *node_of = stk__calloc(n + 1, sizeof *node_of);
    uint32_t *grouped = stk__calloc(n + 1, sizeof *grouped);
    int rc = node_of == NULL || grouped == NULL ? STK_ENOMEM : 0;
    if (rc == 0)
        rc = stk__plan_node_split(n, c->seed, c->shuffle, c->seq_nodes, counts, node_of);
    if (rc == 0 && global && (*order = stk__calloc(total + 1, sizeof **order)) == NULL)
        rc = STK_ENOMEM;
    size_t len = 0;
    uint64_t start = 0; /* of node g's block */
    for (uint32_t g = 0; rc == 0 && g < (uint32_t)c->seq_nodes; g++) {
        uint64_t samples = 0;
        for (size_t i = 0; i < n; i++) {
            if (node_of[c->perm[i]] != g)
                continue;
            grouped[len++] = c->perm[i];
            samples += counts[c->perm[i]];
        }
        if (global && samples > 0) { /* as the node's own cursor draws it */
            permutation(samples, 1, stk__mix(stk__mix(c->seed, c->epoch), 0x53616d706c65ull),
                        *order + start);
            for (uint64_t k = 0; k < samples; k++)
                (*order)[start + k] += (uint32_t)start;
        }
        start += samples;
    }
    if (rc == 0)
        memcpy(c->perm, grouped, n * sizeof *grouped);
    stk__free(node_of);
    stk__free(grouped);
    return rc;
}

int stk__plan_cursor_by_sample(struct stk__plan_cursor *c, const uint64_t *counts, int pad,
                               int global)
{
    uint64_t total = 0;
    for (size_t i = 0; i < c->n_shards; i++)
        total += counts[c->perm[i]];
    /* The positions split over the ranks: the sequence's, or the ranges'. */
    const uint64_t span =
        c->ranges != NULL ? stk__plan_ranges_total(c->ranges, c->n_ranges) : total;
    const uint64_t world = (uint64_t)c->world, rank = (uint64_t)c->rank;
    uint64_t begin, end;
    if (pad) {
        uint64_t share = c->share ? c->share : (span + world - 1) / world;
        begin = rank * share;
        end = begin + share;
    } else {
        begin = rank * span / world;
        end = (rank + 1) * span / world;
    }
    /* Positions at or past span cycle over the sequence again: the padding
     * (at most world - 1 samples without node affinity, where share <=
     * span unless span < world). */
    if (end > span)
        c->padded = end - (begin > span ? begin : span);
    if (global && total > UINT32_MAX)
        return STK_EINVAL; /* the permutation is of 32-bit numbers */
    /* Segments: at most every shard once per cycle (and once more per
     * range of a remainder); with a global order a sample each. */
    uint64_t cycles = span > 0 ? (end - begin + span - 1) / span + 1 : 0;
    size_t room = global ? (size_t)(end - begin) + 1
                         : (size_t)cycles * (c->n_shards + c->n_ranges) + 1;
    stk__free(c->order);
    c->segments = stk__calloc(room, sizeof *c->segments);
    c->order = stk__calloc(room, sizeof *c->order);
    if (c->segments == NULL || c->order == NULL)
        return STK_ENOMEM;
    c->count = 0;
    c->order_pass = 0;
    uint32_t *order = NULL;
    int rc = 0;
    if (c->ranges != NULL && c->seq_nodes > 1) {
        rc = node_sequences(c, counts, global, total, &order);
    } else if (global && total > 0) {
        order = stk__calloc(total, sizeof *order);
        if (order == NULL)
            return STK_ENOMEM;
        /* The same on every rank of the sequence: rank is not an input. */
        permutation(total, 1, stk__mix(stk__mix(c->seed, c->epoch), 0x53616d706c65ull), order);
    }
    for (uint64_t at = begin; rc == 0 && span > 0 && at < end;) {
        uint64_t base = at / span * span;
        uint64_t stop = end < base + span ? end : base + span;
        rc = add_remainder(c, counts, order, at - base, stop - base);
        at = stop;
    }
    stk__free(order);
    return rc;
}

int stk__plan_cursor_borrow(struct stk__plan_cursor *c, const struct stk__plan_cursor *from)
{
    *c = *from;
    c->perm = NULL;
    c->borrowed = 1;
    c->order_pass = 0;
    c->order = stk__calloc(c->count + 1, sizeof *c->order);
    return c->order == NULL ? STK_ENOMEM : 0;
}

int stk__plan_resolve_node(int opt, int rank, int world, int *ranks_per_node,
                           struct stk__err *err)
{
    long rpn = opt > 0 ? opt : -1, v, w;
    const char *source = "ranks_per_node";
    int rc = 0;
    if (rpn < 0 && (rc = env_int("LOCAL_WORLD_SIZE", &v, err)) == 0 && v > 0) {
        rpn = v;
        source = "LOCAL_WORLD_SIZE";
    }
    if (rc == 0 && rpn < 0 && (rc = env_int("SLURM_NTASKS_PER_NODE", &v, err)) == 0 && v > 0) {
        rpn = v;
        source = "SLURM_NTASKS_PER_NODE";
    }
    if (rc == 0 && rpn < 0 && (rc = env_int("SLURM_NTASKS", &v, err)) == 0 &&
        (rc = env_int("SLURM_NNODES", &w, err)) == 0 && v > 0 && w > 0 && v % w == 0) {
        rpn = v / w;
        source = "SLURM_NTASKS / SLURM_NNODES";
    }
    if (rc < 0)
        return rc;
    if (rpn < 0)
        return stk__errf(err, STK_EINVAL,
                         "node_affinity needs the ranks per node: set ranks_per_node, or launch "
                         "with torchrun (LOCAL_WORLD_SIZE) or Slurm (SLURM_NTASKS_PER_NODE)");
    if (world % rpn != 0)
        return stk__errf(err, STK_EINVAL,
                         "node_affinity: %ld ranks per node (from %s) do not divide world size %d",
                         rpn, source, world);
    /* Node n is ranks n * rpn .. n * rpn + rpn - 1: what the launcher says
     * of this process must agree, else shards would follow the wrong node. */
    static const char *const checks[][2] = {
        {"GROUP_RANK", "node"}, {"SLURM_NODEID", "node"}, {"LOCAL_RANK", "local"}};
    for (size_t i = 0; i < sizeof checks / sizeof checks[0]; i++) {
        if ((rc = env_int(checks[i][0], &v, err)) < 0)
            return rc;
        long want = checks[i][1][0] == 'n' ? rank / rpn : rank % rpn;
        if (v >= 0 && v != want)
            return stk__errf(err, STK_EINVAL,
                             "node_affinity: %s=%ld but rank %d with %ld ranks per node (from %s) "
                             "is %s %ld: ranks must be numbered node by node",
                             checks[i][0], v, rank, rpn, source,
                             checks[i][1][0] == 'n' ? "on node" : "local rank", want);
    }
    *ranks_per_node = (int)rpn;
    return 0;
}

/* The dealing is bounded-load rendezvous hashing (highest random weight,
 * with the bounded loads of Mirrokni, Thorup and Zadimoghaddam): every
 * shard ranks the nodes by hash(seed, shard, node), and the shards, in a
 * seeded order, go each to the best-ranked node that stays within the
 * mean, floor(total / nodes); a shard that fits nowhere (the last few)
 * goes to the least loaded node, the best-ranked among equals. A shard's
 * ranking does not depend on how many nodes there are, so a run at 6 nodes
 * and one at 8 place most shards alike: going 8 -> 6 moves about the lost
 * nodes' shards, 6 -> 8 about the 2/8 the new nodes take, and after an
 * elastic resume most node caches stay warm. The greedy dealing it
 * replaced (each shard in a seeded order to the least loaded node) kept
 * the nodes within one shard of each other too but shared almost no
 * placement between node counts (bench/node_cache.py prints both). The
 * cap is the mean, not a margin over it as in the paper: a node above the
 * mean leaves its sequence's tail out of an epoch and one below it pads
 * (plan.h), so equal shards must give equal nodes (floor or ceil(n_shards
 * / nodes) shards each, without counts too, where every rank needs a
 * shard); the moves it adds are measured in test_plan.c (about 1% of the
 * shards for n -> n - 1). */
int stk__plan_node_split(size_t n_shards, uint64_t seed, int shuffle, int nodes,
                         const uint64_t *counts, uint32_t *node_of)
{
    uint32_t *order = stk__calloc(n_shards + 1, sizeof *order);
    uint64_t *load = stk__calloc((size_t)nodes, sizeof *load);
    if (order == NULL || load == NULL) {
        stk__free(order);
        stk__free(load);
        return STK_ENOMEM;
    }
    /* Epoch-independent: the keys have no epoch in them. */
    permutation(n_shards, shuffle, stk__mix(seed, 0x4e6f646573ull), order);
    const uint64_t key = stk__mix(seed, 0x52656e64657a766full);
    uint64_t total = 0;
    size_t left = 0; /* shards with samples not dealt yet */
    for (size_t i = 0; i < n_shards; i++) {
        const uint64_t w = counts != NULL ? counts[i] : 1;
        total += w;
        left += w > 0;
    }
    size_t empty = (size_t)nodes; /* nodes without samples yet */
    const uint64_t cap = total / (uint64_t)nodes;
    for (size_t i = 0; i < n_shards; i++) {
        const size_t shard = order[i];
        const uint64_t w = counts != NULL ? counts[shard] : 1;
        const uint64_t h = stk__mix(key, (uint64_t)shard);
        /* A node without samples would leave its ranks nothing to read:
         * once the shards left are as few as the empty nodes, each goes to
         * one of those. */
        const int to_empty = w > 0 && empty >= left;
        uint64_t best_score = 0, least_score = 0;
        int best = -1, least = -1;
        for (int k = 0; k < nodes; k++) {
            const uint64_t score = stk__mix(h, (uint64_t)k);
            if (load[k] + w <= cap && (!to_empty || load[k] == 0) &&
                (best < 0 || score > best_score)) {
                best = k;
                best_score = score;
            }
            if (least < 0 || load[k] < load[least] ||
                (load[k] == load[least] && score > least_score)) {
                least = k;
                least_score = score;
            }
        }
        if (best < 0) /* no room within the mean (an empty node is the least loaded) */
            best = least;
        empty -= w > 0 && load[best] == 0;
        left -= w > 0;
        node_of[shard] = (uint32_t)best;
        load[best] += w;
    }
    stk__free(order);
    stk__free(load);
    return 0;
}

int stk_node_split(size_t n_shards, const uint64_t *counts, uint64_t seed, int shuffle, int nodes,
                   uint32_t *node_of)
{
    if (nodes < 1)
        return STK_EINVAL;
    return stk__plan_node_split(n_shards, seed, shuffle, nodes, counts, node_of);
}

int stk__plan_cursor_nodes(struct stk__plan_cursor *c, int ranks_per_node,
                           const uint64_t *counts)
{
    const int nodes = c->world / ranks_per_node, node = c->rank / ranks_per_node;
    uint32_t *node_of = stk__calloc(c->n_shards + 1, sizeof *node_of);
    if (node_of == NULL || stk__plan_node_split(c->n_shards, c->seed, c->shuffle, nodes, counts,
                                                node_of) < 0) {
        stk__free(node_of);
        return STK_ENOMEM;
    }
    uint64_t total = 0;
    size_t len = 0;
    for (size_t i = 0; i < c->n_shards; i++) {
        if (counts != NULL)
            total += counts[i];
        if (node_of[c->perm[i]] == (uint32_t)node)
            c->perm[len++] = c->perm[i];
    }
    stk__free(node_of);
    c->share = (total + (uint64_t)c->world - 1) / (uint64_t)c->world;
    c->n_shards = len;
    c->rank %= ranks_per_node;
    c->world = ranks_per_node;
    c->count = stk__plan_rank_count(len, c->rank, c->world);
    stk__free(c->order);
    c->order = stk__calloc(c->count + 1, sizeof *c->order);
    return c->order != NULL ? 0 : STK_ENOMEM;
}

void stk__plan_repeats(int reps, int world, int *parts, int *slots)
{
    int a = reps > 1 ? reps : 1, b = world;
    while (b != 0) { /* a becomes gcd(reps, world) */
        int t = a % b;
        a = b;
        b = t;
    }
    *parts = world / a;
    *slots = (reps > 1 ? reps : 1) / a;
}

/* Append seg to c->segments, growing it. 0 or STK_ENOMEM. */
static int push_segment(struct stk__plan_cursor *c, struct stk__plan_segment seg, size_t *room)
{
    if (c->count == *room) {
        size_t grown = *room ? *room * 2 : 64;
        struct stk__plan_segment *more = stk__realloc(c->segments, grown * sizeof *more);
        if (more == NULL)
            return STK_ENOMEM;
        c->segments = more;
        *room = grown;
    }
    c->segments[c->count++] = seg;
    return 0;
}

/* Append a part's pass-0 list to c's, tagged with draws: all of it (want
 * 0), or its first want samples, over it again from its start while it
 * holds fewer (counts, the samples per shard, needed then). 0 or
 * STK_ENOMEM. */
static int append_part(struct stk__plan_cursor *c, struct stk__plan_cursor *part,
                       const uint64_t *counts, uint64_t want, uint32_t draws, size_t *room)
{
    uint64_t taken = 0, held = 0; /* samples appended; samples of the part's list */
    struct stk__plan_segment seg;
    for (size_t i = 0; want != 0 && i < part->count; i++) {
        (void)stk__plan_cursor_segment(part, i, &seg);
        held += seg.count != STK__PLAN_WHOLE ? seg.count : counts[seg.shard];
    }
    if (want == 0)
        c->padded += part->padded;
    else if (want > held - part->padded) /* the part's padding or a cycle repeats samples */
        c->padded += want - (held - part->padded);
    while (held > 0 || want == 0) {
        for (size_t i = 0; i < part->count && (want == 0 || taken < want); i++) {
            (void)stk__plan_cursor_segment(part, i, &seg);
            if (want != 0) {
                uint64_t n = seg.count != STK__PLAN_WHOLE ? seg.count : counts[seg.shard];
                if (n > want - taken)
                    n = want - taken;
                if (n == 0)
                    continue;
                seg.count = n;
                taken += n;
            }
            seg.draws = draws;
            if (push_segment(c, seg, room) < 0)
                return STK_ENOMEM;
        }
        if (want == 0 || taken == want)
            break;
    }
    return 0;
}

/* The rank's list under repeated augmentation over virtual ranks (see the
 * top of plan.h): its parts' lists one after the other. */
static int open_repeats(struct stk__plan_cursor *c, const struct stk__plan_spec *spec)
{
    int parts, slots;
    stk__plan_repeats(spec->reps, spec->world, &parts, &slots);
    int rc = stk__plan_cursor_init(c, spec->n_shards, spec->seed, spec->epoch, spec->rank,
                                   spec->world, spec->shuffle, spec->unbounded);
    if (rc < 0)
        return rc;
    c->count = 0;
    size_t room = 0;
    struct stk__plan_spec one = *spec;
    one.reps = 0;
    one.world = parts;
    for (int j = 0; rc == 0 && j < slots; j++) {
        const int v = spec->rank + j * spec->world;
        one.rank = v / spec->reps;
        struct stk__plan_cursor part;
        rc = stk__plan_cursor_open(&part, &one);
        if (rc == 0) {
            rc = append_part(c, &part, spec->counts, spec->slot_samples, (uint32_t)v + 1, &room);
            stk__plan_cursor_free(&part);
        }
    }
    /* Extra passes (samples_per_rank without counts) reorder the whole list. */
    if (rc == 0) {
        stk__free(c->order);
        c->order = stk__calloc(c->count + 1, sizeof *c->order);
        rc = c->order == NULL ? STK_ENOMEM : 0;
    }
    if (rc < 0)
        stk__plan_cursor_free(c);
    return rc;
}

int stk__plan_cursor_open(struct stk__plan_cursor *c, const struct stk__plan_spec *spec)
{
    if (spec->reps > 1)
        return open_repeats(c, spec);
    int rc = stk__plan_cursor_init(c, spec->n_shards, spec->seed, spec->epoch, spec->rank,
                                   spec->world, spec->shuffle, spec->unbounded);
    if (rc == 0 && spec->ranks_per_node > 0)
        /* Whole shards are dealt round robin: every rank needs one. */
        rc = stk__plan_cursor_nodes(c, spec->ranks_per_node, spec->by_sample ? spec->counts : NULL);
    c->ranges = spec->ranges;
    c->n_ranges = spec->ranges != NULL ? spec->n_ranges : 0;
    c->seq_nodes = spec->seq_nodes;
    if (rc == 0 && spec->by_sample)
        rc = stk__plan_cursor_by_sample(c, spec->counts, spec->pad, spec->global);
    if (rc < 0)
        stk__plan_cursor_free(c);
    return rc;
}

int stk__plan_cursor_segment(struct stk__plan_cursor *c, uint64_t g,
                             struct stk__plan_segment *seg)
{
    if (c->count == 0 || (!c->unbounded && g >= c->count))
        return 0;
    uint64_t pass = g / c->count;
    size_t i = (size_t)(g % c->count);
    if (pass > 0) { /* extra passes re-read this rank's own list */
        if (c->order_pass != pass) {
            stk__plan_pass_order(c->count, c->seed, c->epoch, pass, c->rank, c->shuffle,
                                 c->order);
            c->order_pass = pass;
        }
        i = c->order[i];
    }
    if (c->segments != NULL)
        *seg = c->segments[i];
    else
        *seg = (struct stk__plan_segment){stk__plan_rank_shard(c->perm, i, c->rank, c->world), 0,
                                          STK__PLAN_WHOLE, 0};
    return 1;
}

int stk__plan_cursor_shard(struct stk__plan_cursor *c, uint64_t g, size_t *shard)
{
    struct stk__plan_segment seg;
    if (!stk__plan_cursor_segment(c, g, &seg))
        return 0;
    *shard = seg.shard;
    return 1;
}

void stk__plan_cursor_free(struct stk__plan_cursor *c)
{
    stk__free(c->perm);
    stk__free(c->order);
    if (!c->borrowed)
        stk__free(c->segments);
    c->perm = NULL;
    c->order = NULL;
    c->segments = NULL;
}
