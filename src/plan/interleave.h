/* SPDX-License-Identifier: MIT */
/*
 * interleave.h - which shard slot the sequencer takes its next sample from.
 *
 * Slot j of K streams the shards at positions j, j+K, j+2K, ... of the
 * rank's list. Without shuffle the slots take turns one shard at a time
 * (storage order); with shuffle each sample comes from a random slot among
 * those reading the lowest pass, weighted by the samples it has left in
 * the pass (its shards left times the mean shard size seen, less what it
 * took from the current one), so that every slot reaches its list's end at
 * about the same time. The choices depend only on the seed and on
 * where each slot's shards end, so the same state machine drives the live
 * sequencer and the replay that finds where a resumed epoch starts
 * (seek_plan.c) from per-shard sample counts, without reading any data.
 */
#ifndef STK_INTERLEAVE_H
#define STK_INTERLEAVE_H

#include <stddef.h>
#include <stdint.h>

#include "base/rng.h"

struct stk__interleave {
    int shuffle;
    unsigned n_slots;
    size_t rank_shards;      /* shards of the rank per pass */
    struct stk__rng rng;
    unsigned *active;        /* slots still streaming (shuffle mode) */
    unsigned n_active;
    unsigned picked;         /* index into active of the last pick */
    uint64_t *slot_position; /* position of the shard each slot delivers now */
    uint64_t *taken;         /* samples each slot took from its current shard */
    uint64_t ended_samples;  /* samples of the shards ended so far ... */
    uint64_t ended_shards;   /* ... and their number: the mean shard size */
    unsigned *candidates;    /* scratch: active slots in the lowest pass */
    uint64_t position;       /* shard ends so far (storage-order mode) */
    uint64_t empty_ends;     /* shard ends since the last sample */
};

/* 0 or STK_ENOMEM. */
int stk__interleave_init(struct stk__interleave *il, unsigned n_slots, size_t rank_shards,
                         int shuffle, uint64_t seed);

/* Copy src's state into dst, initialised with the same sizes. */
void stk__interleave_copy(struct stk__interleave *dst, const struct stk__interleave *src);

/* The slot to take the next item from; -1 when every stream has ended. */
int stk__interleave_pick(struct stk__interleave *il);

/* What the picked slot j delivered. shard_end returns -1 when the rank has
 * gone through all its shards twice over without a sample (it would cycle
 * forever); stream_end returns 1 when the input is over. */
void stk__interleave_sample(struct stk__interleave *il);
int stk__interleave_shard_end(struct stk__interleave *il, unsigned j);
int stk__interleave_stream_end(struct stk__interleave *il);

void stk__interleave_free(struct stk__interleave *il);

#endif
