/* SPDX-License-Identifier: MIT */
/*
 * mixing.c - shuffle quality counters (see mixing.h).
 *
 * Counting a batch sorts a copy of its shard indices: b log b comparisons
 * per batch, next to the per-sample work of assembling it, and no table
 * sized by the number of shards.
 */
#include "plan/mixing.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"

/* Distinct labels the table follows: ImageNet-21k has 21,841 classes; a
 * label per sample (an id, not a class) would grow it with the dataset. */
#define MAX_LABELS ((size_t)1 << 20)

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

uint64_t stk__same_shard_pairs(uint64_t *shards, size_t n, uint64_t *distinct)
{
    qsort(shards, n, sizeof *shards, cmp_u64);
    uint64_t pairs = 0, runs = 0;
    for (size_t i = 0; i < n; runs++) {
        size_t run = 1;
        while (i + run < n && shards[i + run] == shards[i])
            run++;
        pairs += (uint64_t)run * (run - 1);
        i += run;
    }
    if (distinct != NULL)
        *distinct = runs;
    return pairs;
}

void stk__mixing_batch(struct stk__mixing *m, struct stk__sample *const *samples, size_t n,
                       struct stk__counters *c)
{
    /* n is at most batch_size, the capacity */
    for (size_t i = 0; i < n; i++)
        m->shards[i] = samples[i]->pub.shard_index;
    atomic_fetch_add(&c->shuffle_pairs, (uint64_t)n * (n > 0 ? n - 1 : 0));
    atomic_fetch_add(&c->shuffle_shard_pairs, stk__same_shard_pairs(m->shards, n, NULL));
}

int stk__label_mixing_init(struct stk__label_mixing *m, size_t batch_size,
                           struct stk__counters *counters)
{
    memset(m, 0, sizeof *m);
    m->counters = counters;
    m->capacity = batch_size;
    m->scratch = stk__calloc(batch_size, sizeof *m->scratch);
    return m->scratch == NULL ? STK_ENOMEM : 0;
}

void stk__label_mixing_free(struct stk__label_mixing *m)
{
    stk__free(m->scratch);
    stk__free(m->keys);
    stk__free(m->counts);
    m->scratch = NULL;
    m->keys = NULL;
    m->counts = NULL;
}

static size_t slot_of(const struct stk__label_mixing *m, int64_t label)
{
    size_t i = (size_t)stk__mix((uint64_t)label, 0x4c6162656cull) & (m->slots - 1);
    while (m->counts[i] != 0 && m->keys[i] != label)
        i = (i + 1) & (m->slots - 1);
    return i;
}

/* Double the table (or make the first); 0, or -1 when it may not grow. */
static int grow(struct stk__label_mixing *m)
{
    size_t slots = m->slots ? 2 * m->slots : 256;
    if (slots > 2 * MAX_LABELS)
        return -1;
    int64_t *keys = stk__calloc(slots, sizeof *keys);
    uint64_t *counts = stk__calloc(slots, sizeof *counts);
    if (keys == NULL || counts == NULL) {
        stk__free(keys);
        stk__free(counts);
        return -1;
    }
    struct stk__label_mixing old = *m;
    m->keys = keys;
    m->counts = counts;
    m->slots = slots;
    for (size_t i = 0; i < old.slots; i++) {
        if (old.counts[i] == 0)
            continue;
        size_t j = slot_of(m, old.keys[i]);
        m->keys[j] = old.keys[i];
        m->counts[j] = old.counts[i];
    }
    stk__free(old.keys);
    stk__free(old.counts);
    return 0;
}

/* Count one sample of label; returns the label's count before it, or -1
 * when the table cannot take a new label. */
static int64_t count_label(struct stk__label_mixing *m, int64_t label)
{
    if ((m->used + 1) * 2 > m->slots && grow(m) < 0)
        return -1;
    size_t i = slot_of(m, label);
    if (m->counts[i] == 0) {
        m->keys[i] = label;
        m->used++;
    }
    return (int64_t)m->counts[i]++;
}

void stk__label_mixing_batch(struct stk__label_mixing *m, const int64_t *labels, size_t n)
{
    if (m->stopped)
        return;
    if (n > m->capacity) { /* a shard's labels (verify) */
        uint64_t *bigger = stk__realloc(m->scratch, n * sizeof *bigger);
        if (bigger == NULL) {
            m->stopped = 1;
            return;
        }
        m->scratch = bigger;
        m->capacity = n;
    }
    uint64_t sample_pairs = 0;
    for (size_t i = 0; i < n; i++) {
        int64_t before = count_label(m, labels[i]);
        if (before < 0) {
            m->stopped = 1;
            return;
        }
        sample_pairs += 2 * (uint64_t)before; /* N(N-1) grows by 2N */
    }
    for (size_t i = 0; i < n; i++)
        m->scratch[i] = (uint64_t)labels[i]; /* equal labels, equal words */
    uint64_t distinct, same = stk__same_shard_pairs(m->scratch, n, &distinct);
    atomic_fetch_add(&m->counters->label_pairs, (uint64_t)n * (n > 0 ? n - 1 : 0));
    atomic_fetch_add(&m->counters->label_same_pairs, same);
    atomic_fetch_add(&m->counters->label_distinct, distinct);
    atomic_fetch_add(&m->counters->label_batches, 1);
    atomic_fetch_add(&m->counters->label_samples, n);
    atomic_fetch_add(&m->counters->label_sample_pairs, sample_pairs);
}
