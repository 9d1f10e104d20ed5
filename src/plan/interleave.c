/*
 * interleave.c - the sequencer's choice of shard slot.
 */
#include "interleave.h"

#include <string.h>

#include "alloc.h"
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
    if (il->active == NULL || il->candidates == NULL || il->slot_position == NULL) {
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
    uint64_t *slot_position = dst->slot_position;
    *dst = *src;
    dst->active = active;
    dst->candidates = candidates;
    dst->slot_position = slot_position;
    memcpy(active, src->active, src->n_slots * sizeof *active);
    memcpy(slot_position, src->slot_position, src->n_slots * sizeof *slot_position);
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
    unsigned n = 0;
    for (unsigned a = 0; a < il->n_active; a++)
        if (il->slot_position[il->active[a]] / il->rank_shards == low)
            il->candidates[n++] = a;
    il->picked = il->candidates[stk__rng_below(&il->rng, n)];
    return (int)il->active[il->picked];
}

void stk__interleave_sample(struct stk__interleave *il)
{
    il->empty_ends = 0;
}

int stk__interleave_shard_end(struct stk__interleave *il, unsigned j)
{
    il->position++;
    il->slot_position[j] += il->n_slots;
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
    il->active = NULL;
    il->candidates = NULL;
    il->slot_position = NULL;
}
