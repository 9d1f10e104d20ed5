/*
 * mixing.c - shuffle quality counters (see mixing.h).
 *
 * Counting a batch sorts a copy of its shard indices: b log b comparisons
 * per batch, next to the per-sample work of assembling it, and no table
 * sized by the number of shards.
 */
#include "mixing.h"

#include <stdlib.h>

#include "alloc.h"

int stk__mixing_init(struct stk__mixing *m, size_t batch_size, unsigned n_slots, int partial)
{
    m->shards = stk__calloc(batch_size, sizeof *m->shards);
    m->taken = stk__calloc(n_slots, sizeof *m->taken);
    m->partial = stk__calloc(n_slots, 1);
    m->capacity = batch_size;
    m->n_slots = n_slots;
    if (m->shards == NULL || m->taken == NULL || m->partial == NULL) {
        stk__mixing_free(m);
        return STK_ENOMEM;
    }
    for (unsigned j = 0; j < n_slots; j++)
        m->partial[j] = (unsigned char)(partial != 0);
    return 0;
}

void stk__mixing_free(struct stk__mixing *m)
{
    stk__free(m->shards);
    stk__free(m->taken);
    stk__free(m->partial);
    m->shards = m->taken = NULL;
    m->partial = NULL;
}

void stk__mixing_sample(struct stk__mixing *m, unsigned j) { m->taken[j]++; }

void stk__mixing_shard_end(struct stk__mixing *m, unsigned j, struct stk__counters *c)
{
    uint64_t n = m->taken[j];
    if (!m->partial[j]) {
        atomic_fetch_add(&c->shuffle_shards_sized, 1);
        atomic_fetch_add(&c->shuffle_sized_samples, n);
        atomic_fetch_add(&c->shuffle_sized_pairs, n > 1 ? n * (n - 1) : 0);
    }
    m->taken[j] = 0;
    m->partial[j] = 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

uint64_t stk__same_shard_pairs(uint64_t *shards, size_t n)
{
    qsort(shards, n, sizeof *shards, cmp_u64);
    uint64_t pairs = 0;
    for (size_t i = 0; i < n;) {
        size_t run = 1;
        while (i + run < n && shards[i + run] == shards[i])
            run++;
        pairs += (uint64_t)run * (run - 1);
        i += run;
    }
    return pairs;
}

void stk__mixing_batch(struct stk__mixing *m, const struct stk__batch *b, struct stk__counters *c)
{
    size_t n = b->pub.n_samples; /* at most batch_size, the capacity */
    for (size_t i = 0; i < n; i++)
        m->shards[i] = b->samples[i]->pub.shard_index;
    atomic_fetch_add(&c->shuffle_pairs, (uint64_t)n * (n > 0 ? n - 1 : 0));
    atomic_fetch_add(&c->shuffle_shard_pairs, stk__same_shard_pairs(m->shards, n));
}
