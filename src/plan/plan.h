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

/* The shards of one rank's epoch by position: position g is shard g % count
 * of pass g / count (count = shards of the rank per pass). Keeps the
 * epoch's permutation and the order of the last pass asked for. */
struct stk__plan_cursor {
    size_t n_shards;
    size_t count;             /* shards of this rank per pass */
    uint64_t seed, epoch;
    int rank, world, shuffle;
    int unbounded;            /* extra passes allowed (samples_per_rank set) */
    uint32_t *perm;
    uint32_t *order;
    uint64_t order_pass;
};

int stk__plan_cursor_init(struct stk__plan_cursor *c, size_t n_shards, uint64_t seed,
                          uint64_t epoch, int rank, int world, int shuffle, int unbounded);

/* 1 and *shard set (index into the URL list) when the rank reads a shard
 * at position g; 0 when its epoch has no such position. */
int stk__plan_cursor_shard(struct stk__plan_cursor *c, uint64_t g, size_t *shard);

void stk__plan_cursor_free(struct stk__plan_cursor *c);

#endif
