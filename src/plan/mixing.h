/* SPDX-License-Identifier: MIT */
/*
 * mixing.h - shuffle quality: how many shards a loader's batches mix.
 *
 * For a batch of b samples of which n_s come from shard s, the chance that
 * two distinct samples of it share a shard is sum n_s(n_s-1) / b(b-1). Its
 * inverse, pooled over batches,
 *     k_eff = sum b(b-1) / sum n_s(n_s-1),
 * is the effective number of shards mixed per batch (the inverse Simpson
 * index): k equal-sized shards drawn evenly give about k. A perfect shuffle
 * of an epoch of N samples in shards of m_s samples gives in expectation
 *     k_perfect = N(N-1) / sum m_s(m_s-1)
 * whatever the batch size, so the two are compared directly. The sequencer
 * counts both as it assembles batches, from what it already holds: the
 * shard index of each sample of a batch, and each shard's sample count once
 * its end goes by.
 *
 * Shards are a proxy: class-sorted shards mixed perfectly still give
 * batches of few classes. So the labels are counted the same way, once a
 * batch is delivered with them: L_eff = sum b(b-1) / sum n_c(n_c-1) over
 * batches (n_c samples of label c), the effective number of labels per
 * batch, against a uniform permutation's N(N-1) / sum N_c(N_c-1) from the
 * N_c samples of each label seen so far, and the mean number of distinct
 * labels per batch for people to read.
 */
#ifndef STK_MIXING_H
#define STK_MIXING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/run.h"
#include "tar/sample.h"

struct stk__mixing {
    uint64_t *shards; /* shard indices of one batch (scratch, batch_size) */
    size_t capacity;
    uint64_t *taken;  /* per slot: samples taken from its current shard */
    unsigned char *partial; /* per slot: the current shard was entered mid-way */
    unsigned n_slots;
};

/* Scratch for batches of up to batch_size samples and n_slots slots.
 * partial: the first shard of every slot is entered mid-way (a resumed
 * epoch), so its size is not counted. 0 or STK_ENOMEM. */
int stk__mixing_init(struct stk__mixing *m, size_t batch_size, unsigned n_slots, int partial);
void stk__mixing_free(struct stk__mixing *m);

/* A sample was taken from slot j / slot j's shard ended: at the end its
 * sample count goes into the counters' shard sizes. */
void stk__mixing_sample(struct stk__mixing *m, unsigned j);
void stk__mixing_shard_end(struct stk__mixing *m, unsigned j, struct stk__counters *c);

/* Count the pairs of one assembled batch of n samples into c. */
void stk__mixing_batch(struct stk__mixing *m, struct stk__sample *const *samples, size_t n,
                       struct stk__counters *c);

/* sum over shards of n_s(n_s-1) for n shard indices (or labels); sorts them
 * in place. distinct (may be NULL): the number of different values. */
uint64_t stk__same_shard_pairs(uint64_t *shards, size_t n, uint64_t *distinct);

/* Label mixing of delivered batches, counted into the run's label_*
 * counters. One thread counts (the loader's owner). The table of labels seen
 * grows to at most MAX_LABELS (mixing.c) distinct labels; past that, or
 * out of memory, counting stops (counting is advice, never a failure). */
struct stk__label_mixing {
    uint64_t *scratch; /* a batch's labels, sorted (batch_size) */
    size_t capacity;
    int64_t *keys;     /* open addressing table of labels seen */
    uint64_t *counts;
    size_t slots, used;
    int stopped;
    struct stk__counters *counters;
};

/* 0 or STK_ENOMEM. counters must outlive m. */
int stk__label_mixing_init(struct stk__label_mixing *m, size_t batch_size,
                           struct stk__counters *counters);
void stk__label_mixing_free(struct stk__label_mixing *m);

/* Count one delivered batch's n labels (or one shard's, for verify: the
 * scratch grows to n). */
void stk__label_mixing_batch(struct stk__label_mixing *m, const int64_t *labels, size_t n);

#endif
