/*
 * plan.h - which shards a rank reads in an epoch, and in what order.
 *
 * For (seed, epoch, pass) every rank computes the same permutation of all
 * shards, then takes every world_size-th one starting at its rank, so ranks
 * read disjoint shards without talking to each other. Pass 0 is the epoch
 * proper; passes 1, 2, ... are the extra rounds a rank makes when it must
 * yield more samples than its shards hold (samples_per_rank).
 */
#ifndef STK_PLAN_H
#define STK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "error.h"

/* Resolve rank/world: explicit values win, then RANK/WORLD_SIZE,
 * SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE,
 * else 0 of 1. Fails on inconsistent values. */
int stk__plan_resolve_rank(int rank_opt, int world_opt, int *rank, int *world,
                           struct stk__err *err);

/* Check that n_shards can be split over world ranks. */
int stk__plan_check(size_t n_shards, int world, struct stk__err *err);

/* Number of shards rank reads per pass. */
size_t stk__plan_rank_count(size_t n_shards, int rank, int world);

/* The i-th shard (index into the URL list) this rank reads in the given
 * pass, i < stk__plan_rank_count(). With shuffle off the order is the URL
 * order. `perm` is scratch of n_shards entries computed by
 * stk__plan_permutation() for the same (seed, epoch, pass). */
void stk__plan_permutation(size_t n_shards, uint64_t seed, uint64_t epoch, uint64_t pass,
                           int shuffle, uint32_t *perm);
size_t stk__plan_rank_shard(const uint32_t *perm, size_t i, int rank, int world);

#endif
