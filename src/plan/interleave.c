/* SPDX-License-Identifier: MIT */
/*
 * interleave.c - the sequencer's choice of shard slot.
 */
#include "plan/interleave.h"

#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

int stk__interleave_init(struct stk__interleave *il, unsigned n_slots, size_t rank_shards,
                         int shuffle, uint64_t seed)
{
    memset(il, 0, sizeof *il);
    il->shuffle = shuffle;
    il->n_slots = n_slots;
    il->rank_shards = rank_shards;
    stk__rng_seed(&il->rng, seed);
    il->active = stk__calloc(n_slots, sizeof *il->active);
    il->candidates = stk__calloc(n_slots, sizeof *il->candidates);
    il->slot_position = stk__calloc(n_slots, sizeof *il->slot_position);
    il->taken = stk__calloc(n_slots, sizeof *il->taken);
    if (il->active == NULL || il->candidates == NULL || il->slot_position == NULL ||
        il->taken == NULL) {
        stk__interleave_free(il);
        return STK_ENOMEM;
    }
    il->n_active = n_slots;
    for (unsigned j = 0; j < n_slots; j++) {
        il->active[j] = j;
        il->slot_position[j] = j;
    }
    return 0;
}

void stk__interleave_copy(struct stk__interleave *dst, const struct stk__interleave *src)
{
    unsigned *active = dst->active, *candidates = dst->candidates;
    uint64_t *slot_position = dst->slot_position, *taken = dst->taken;
    *dst = *src;
    dst->active = active;
    dst->candidates = candidates;
    dst->slot_position = slot_position;
    dst->taken = taken;
    memcpy(active, src->active, src->n_slots * sizeof *active);
    memcpy(slot_position, src->slot_position, src->n_slots * sizeof *slot_position);
    memcpy(taken, src->taken, src->n_slots * sizeof *taken);
}

/* Estimated samples slot j has left before position end: its shards from
 * the current one times `size`, less those taken; at least 1. */
static uint64_t samples_left(const struct stk__interleave *il, unsigned j, uint64_t end,
                             uint64_t size)
{
    uint64_t shards = (end - 1 - il->slot_position[j]) / il->n_slots + 1;
    uint64_t left = shards * size;
    return left > il->taken[j] ? left - il->taken[j] : 1;
}

int stk__interleave_pick(struct stk__interleave *il)
{
    if (!il->shuffle)
        return (int)(il->position % il->n_slots);
    if (il->n_active == 0)
        return -1;
    /* Draw only from slots in the lowest pass still being read, so a rank
     * finishes a pass over its shards before it starts the next: no sample
     * twice while another was never read. */
    uint64_t low = UINT64_MAX;
    for (unsigned a = 0; a < il->n_active; a++) {
        uint64_t pass = il->slot_position[il->active[a]] / il->rank_shards;
        low = pass < low ? pass : low;
    }
    /* Each in proportion to the samples it has left in the pass, as far as
     * they can be told without an index: then every slot ends its list at
     * about the same time, and an epoch's last samples still come from many
     * shards. (Drawn uniformly, a slot with one shard more than the others
     * read it alone at the end: with class-sorted shards, batches of one
     * class.) Before a shard has ended, the largest count taken from one
     * stands in for the mean size. */
    uint64_t size = 1;
    for (unsigned j = 0; j < il->n_slots; j++)
        size = il->taken[j] + 1 > size ? il->taken[j] + 1 : size;
    if (il->ended_shards > 0)
        size = (il->ended_samples + il->ended_shards - 1) / il->ended_shards;
    uint64_t end = (low + 1) * il->rank_shards, total = 0;
    unsigned n = 0;
    for (unsigned a = 0; a < il->n_active; a++) {
        unsigned j = il->active[a];
        if (il->slot_position[j] / il->rank_shards != low)
            continue;
        il->candidates[n++] = a;
        total += samples_left(il, j, end, size);
    }
    uint64_t r = stk__rng_below(&il->rng, total);
    for (unsigned c = 0;; c++) {
        unsigned a = il->candidates[c];
        uint64_t left = samples_left(il, il->active[a], end, size);
        if (r < left || c + 1 == n) {
            il->picked = a;
            break;
        }
        r -= left;
    }
    return (int)il->active[il->picked];
}

void stk__interleave_sample(struct stk__interleave *il)
{
    il->empty_ends = 0;
    if (il->shuffle)
        il->taken[il->active[il->picked]]++;
}

int stk__interleave_shard_end(struct stk__interleave *il, unsigned j)
{
    il->position++;
    il->slot_position[j] += il->n_slots;
    il->ended_samples += il->taken[j];
    il->ended_shards++;
    il->taken[j] = 0;
    return ++il->empty_ends > 2 * il->rank_shards + il->n_slots ? -1 : 0;
}

int stk__interleave_stream_end(struct stk__interleave *il)
{
    if (!il->shuffle)
        return 1;
    il->active[il->picked] = il->active[--il->n_active];
    return il->n_active == 0;
}

void stk__interleave_free(struct stk__interleave *il)
{
    stk__free(il->active);
    stk__free(il->candidates);
    stk__free(il->slot_position);
    stk__free(il->taken);
    il->active = NULL;
    il->candidates = NULL;
    il->slot_position = NULL;
    il->taken = NULL;
}
