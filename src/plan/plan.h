/* SPDX-License-Identifier: MIT */
/*
 * plan.h - which shards a rank reads in an epoch, and in what order.
 *
 * For (seed, epoch) every rank computes the same permutation of all shards,
 * then takes every world_size-th one starting at its rank, so ranks read
 * disjoint shards without talking to each other. Pass 0 is the epoch
 * proper; passes 1, 2, ... are the extra rounds a rank makes over its own
 * shards, in a new order each, when it must yield more samples than they
 * hold (samples_per_rank).
 *
 * With per-shard sample counts (a dataset index) the split can be by sample
 * instead (stk__plan_cursor_by_sample): the epoch's shards in permutation
 * order form one sequence of N samples, and rank r takes the contiguous run
 * [r * share, (r + 1) * share) of it, share = ceil(N / world), wrapping to
 * the sequence's start for the last ranks' padding as torch's
 * DistributedSampler repeats its first indices (at most world - 1 samples
 * in all). A rank's list is then one of segments: a shard, its first sample
 * and a count, whole shards in the middle and a part of one at either end.
 * Every sample is read once per epoch by the rank group, where a split by
 * whole shards leaves ranks with unequal counts that samples_per_rank then
 * truncates or repeats. Without padding (uneven evaluation) the runs are
 * [r * N / world, (r + 1) * N / world): each sample once, counts differing
 * by at most one, and fewer shards than ranks is no obstacle.
 *
 * With global set the sequence is instead a seeded permutation of every
 * sample of the epoch, and each position of a rank's list one sample (a
 * segment of count 1), read by its offset: the epoch's order is then a
 * uniform permutation however the shards were written (sorted by class
 * included), where a window over streamed shards mixes only what it holds.
 * It needs random access, so the loader chooses it for shards with
 * offsets that are local files or that a node cache keeps whole for the
 * run (loader.c).
 * Node affinity (stk__plan_cursor_nodes): ranks node * R .. node * R + R - 1
 * form a node (R ranks per node, as torchrun and Slurm's block distribution
 * number them). Once per run (seed, not epoch) the shards are dealt to the
 * nodes by bounded-load rendezvous hashing (stk__plan_node_split), so that
 * runs at other node counts place most shards alike. Each epoch a node's
 * sequence is the epoch's permutation restricted to its own shards, and its
 * R ranks split that sequence as above, by shard or by sample. By sample
 * every rank still takes the run's equal share ceil(total / world), cycling
 * over its node's sequence: a node holding fewer samples than R shares
 * repeats some (counted in .padded), one holding more leaves its sequence's
 * tail out that epoch (a different tail each epoch; the dealing keeps a
 * node under the mean plus one shard's samples). So a node reads the same shards every
 * epoch and its cache stays warm.
 */
#ifndef STK_PLAN_H
#define STK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* Resolve rank/world: explicit values win, then RANK/WORLD_SIZE,
 * SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE,
 * else 0 of 1. Fails on inconsistent values. */
int stk__plan_resolve_rank(int rank_opt, int world_opt, int *rank, int *world,
                           struct stk__err *err);

/* Check that n_shards can be split over world ranks. */
int stk__plan_check(size_t n_shards, int world, struct stk__err *err);

/* Number of shards rank reads per pass. */
size_t stk__plan_rank_count(size_t n_shards, int rank, int world);

/* The epoch's permutation of all n_shards shards (URL order without
 * shuffle), the same on every rank. */
void stk__plan_permutation(size_t n_shards, uint64_t seed, uint64_t epoch, int shuffle,
                           uint32_t *perm);

/* The i-th shard (index into the URL list) of this rank's pass-0 list,
 * i < stk__plan_rank_count(), given the epoch's permutation. */
size_t stk__plan_rank_shard(const uint32_t *perm, size_t i, int rank, int world);

/* The order of pass >= 1 over the rank's own list: order[i] is the index in
 * the pass-0 list of the i-th shard read (a permutation of 0..count-1; the
 * identity without shuffle). */
void stk__plan_pass_order(size_t count, uint64_t seed, uint64_t epoch, uint64_t pass, int rank,
                          int shuffle, uint32_t *order);

/* A part of a shard in a rank's list: samples [first, first + count). */
struct stk__plan_segment {
    size_t shard;
    uint64_t first;
    uint64_t count; /* STK__PLAN_WHOLE: the whole shard, however many it holds */
    uint32_t draws; /* repeated augmentation: 1 + the virtual rank whose draws the samples
                     * take (see the top of this file); 0: the rank's own */
};
#define STK__PLAN_WHOLE UINT64_MAX

/* The shards of one rank's epoch by position: position g is shard g % count
 * of pass g / count (count = shards of the rank per pass, or segments when
 * split by sample). Keeps the epoch's permutation and the order of the last
 * pass asked for. */
struct stk__plan_cursor {
    size_t n_shards;
    size_t count;             /* shards of this rank per pass */
    uint64_t seed, epoch;
    int rank, world, shuffle;
    int unbounded;            /* extra passes allowed (samples_per_rank set) */
    uint32_t *perm;
    uint32_t *order;
    uint64_t order_pass;
    struct stk__plan_segment *segments; /* the rank's list when split by sample, else NULL */
    int borrowed;                       /* segments belong to another cursor */
    uint64_t padded;                    /* samples of the list repeated as padding */
    uint64_t share;  /* by sample with padding: the rank's samples (0: of its sequence) */
    const uint64_t *ranges; /* by sample: only these positions of the sequence (see spec) */
    size_t n_ranges;
    int seq_nodes; /* with ranges: of the nodes' sequences (see spec) */
};
/* (With node affinity n_shards, rank and world are those of the node: its
 * shards, its rank within it, its ranks; perm holds its sequence.) */

/* Everything that decides one rank's list in one epoch. */
struct stk__plan_spec {
    size_t n_shards;
    uint64_t seed, epoch;
    int rank, world, shuffle;
    int unbounded;          /* extra passes allowed (samples_per_rank set) */
    int ranks_per_node;     /* node affinity: ranks per node; 0: off */
    const uint64_t *counts; /* samples per shard (a dataset index), or NULL */
    int by_sample;          /* split by sample over counts */
    int pad;                /* by sample: equal shares (see above) */
    int global;             /* by sample: a global order of the samples (see above) */
    /* By sample, elastic resume (remainder.h): the ranks split only these
     * positions of the epoch's sequence, n_ranges [begin, end) pairs,
     * ascending, as they would split the whole; NULL: the whole. Not with
     * ranks_per_node. */
    const uint64_t *ranges;
    size_t n_ranges;
    /* With ranges, above 1: the positions are of the concatenation of the
     * sequences of this many nodes under node affinity, node 0's first
     * (the rest of an epoch of a run with that many nodes,
     * stk__plan_node_remainder); else of the one sequence. */
    int seq_nodes;
    int reps;               /* repeated augmentation dealt over virtual ranks (see above),
                             * rank and world the real ones; 0 or 1: off */
    uint64_t slot_samples;  /* with reps and counts: samples of each part the rank
                             * reads; 0: all */
};

/* Repeated augmentation of reps copies over world ranks (see the top of this
 * file): *parts, the plan parts of the epoch, and *slots, the parts each
 * rank reads. */
void stk__plan_repeats(int reps, int world, int *parts, int *slots);

/* Node identity for node affinity: *ranks_per_node from opt when > 0, else
 * the launcher's LOCAL_WORLD_SIZE (torchrun), SLURM_NTASKS_PER_NODE, or
 * SLURM_NTASKS / SLURM_NNODES. Fails when none is known, when it does not
 * divide world, or when GROUP_RANK / SLURM_NODEID / LOCAL_RANK disagree
 * with node = rank / ranks_per_node (ranks not numbered node by node). */
int stk__plan_resolve_node(int opt, int rank, int world, int *ranks_per_node,
                           struct stk__err *err);

/* The node of every shard for the whole run (node_of[shard], n_shards
 * entries) under node affinity with the given number of nodes: each shard
 * to its best-ranked node by hash(seed, shard, node) with room within the
 * mean, floor(total / nodes), else to the least loaded (counts NULL: every
 * shard counts 1, so floor or ceil(n_shards / nodes) shards a node).
 * Stable across node counts: from n to n - 1 nodes about the lost node's
 * shards move. 0 or STK_ENOMEM. */
int stk__plan_node_split(size_t n_shards, uint64_t seed, int shuffle, int nodes,
                         const uint64_t *counts, uint32_t *node_of);

/* One rank's list in one epoch: stk__plan_cursor_init, then
 * stk__plan_cursor_nodes and stk__plan_cursor_by_sample as spec asks. 0 or
 * STK_ENOMEM (the cursor then needs no free). */
int stk__plan_cursor_open(struct stk__plan_cursor *c, const struct stk__plan_spec *spec);

int stk__plan_cursor_init(struct stk__plan_cursor *c, size_t n_shards, uint64_t seed,
                          uint64_t epoch, int rank, int world, int shuffle, int unbounded);

/* Restrict the cursor to the rank's node (see the top of this file):
 * ranks_per_node divides world; counts (NULL: deal shards round robin)
 * balance the nodes' samples and set the equal share of a split by sample.
 * Before stk__plan_cursor_by_sample. 0 or STK_ENOMEM. */
int stk__plan_cursor_nodes(struct stk__plan_cursor *c, int ranks_per_node,
                           const uint64_t *counts);

/* Split the epoch by sample (see the top of this file) over counts[i], the
 * samples of each shard; pad: the last ranks repeat samples so that every
 * rank's share is ceil(N / world). With c->ranges set, N is the positions
 * they hold, and the split is of those positions alone. 0 or STK_ENOMEM. */
int stk__plan_cursor_by_sample(struct stk__plan_cursor *c, const uint64_t *counts, int pad,
                               int global);

/* A cursor over from's list by sample (read-only, from outlives c), with an
 * order of its own for the extra passes: the lists of a global order hold
 * a segment per sample, too many to copy per reader thread. 0 or
 * STK_ENOMEM. */
int stk__plan_cursor_borrow(struct stk__plan_cursor *c, const struct stk__plan_cursor *from);

/* 1 and *shard set (index into the URL list) when the rank reads a shard
 * at position g; 0 when its epoch has no such position. */
int stk__plan_cursor_shard(struct stk__plan_cursor *c, uint64_t g, size_t *shard);

/* The same with the part of the shard read there. */
int stk__plan_cursor_segment(struct stk__plan_cursor *c, uint64_t g,
                             struct stk__plan_segment *seg);

void stk__plan_cursor_free(struct stk__plan_cursor *c);

#endif
