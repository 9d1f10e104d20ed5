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
                (struct stk__plan_segment){shard, first - start, last - first};
        }
        start = stop;
    }
}

/* The same run of a global permutation of the total samples: one segment
 * per sample, found by its number through the shards' starts. */
static int add_global_run(struct stk__plan_cursor *c, const uint64_t *counts, const uint32_t *order,
                          uint64_t begin, uint64_t end)
{
    uint64_t *starts = stk__calloc(c->n_shards + 1, sizeof *starts);
    if (starts == NULL)
        return STK_ENOMEM;
    for (size_t i = 0; i < c->n_shards; i++)
        starts[i + 1] = starts[i] + counts[i];
    for (uint64_t k = begin; k < end; k++) {
        uint64_t id = order[k];
        size_t lo = 0, hi = c->n_shards; /* the last shard starting at or before id */
        while (hi - lo > 1) {
            size_t mid = lo + (hi - lo) / 2;
            if (starts[mid] <= id)
                lo = mid;
            else
                hi = mid;
        }
        while (counts[lo] == 0 || starts[lo] + counts[lo] <= id) /* empty shards share a start */
            lo++;
        c->segments[c->count++] = (struct stk__plan_segment){lo, id - starts[lo], 1};
    }
    stk__free(starts);
    return 0;
}

int stk__plan_cursor_by_sample(struct stk__plan_cursor *c, const uint64_t *counts, int pad,
                               int global)
{
    uint64_t total = 0;
    for (size_t i = 0; i < c->n_shards; i++)
        total += counts[i];
    const uint64_t world = (uint64_t)c->world, rank = (uint64_t)c->rank;
    uint64_t begin, end;
    if (pad) {
        uint64_t share = (total + world - 1) / world;
        begin = rank * share;
        end = begin + share;
    } else {
        begin = rank * total / world;
        end = (rank + 1) * total / world;
    }
    /* A run wraps at most once around the sequence when padding (share <=
     * total unless total < world: then each rank's one sample is taken
     * modulo total, a run of its own). */
    if (total > 0 && begin >= total) {
        uint64_t wrapped = begin % total;
        c->padded = end - begin;
        end = wrapped + (end - begin);
        begin = wrapped;
    } else if (end > total) {
        c->padded = end - total;
    }
    /* Segments: at most every shard once per run, two runs; with a global
     * order a sample each. */
    size_t room = global ? (size_t)(end - begin) + 1 : 2 * c->n_shards + 1;
    if (global && total > UINT32_MAX)
        return STK_EINVAL; /* the permutation is of 32-bit numbers */
    stk__free(c->order);
    c->segments = stk__calloc(room, sizeof *c->segments);
    c->order = stk__calloc(room, sizeof *c->order);
    if (c->segments == NULL || c->order == NULL)
        return STK_ENOMEM;
    c->count = 0;
    c->order_pass = 0;
    if (total == 0)
        return 0;
    if (!global) {
        add_run(c, counts, begin, end < total ? end : total);
        if (end > total)
            add_run(c, counts, 0, end - total);
        return 0;
    }
    uint32_t *order = stk__calloc(total, sizeof *order);
    if (order == NULL)
        return STK_ENOMEM;
    /* The same on every rank: rank is not an input. */
    permutation(total, 1, stk__mix(stk__mix(c->seed, c->epoch), 0x53616d706c65ull), order);
    int rc = add_global_run(c, counts, order, begin, end < total ? end : total);
    if (rc == 0 && end > total)
        rc = add_global_run(c, counts, order, 0, end - total);
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
                                          STK__PLAN_WHOLE};
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
