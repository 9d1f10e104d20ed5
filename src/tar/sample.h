/* SPDX-License-Identifier: MIT */
/*
 * sample.h - a sample being built from tar members, and its lifetime.
 *
 * The public struct stk_sample is embedded so a batch can copy it out; the
 * rest is what stoker needs to free the sample and to account its bytes
 * against the memory budgets.
 */
#ifndef STK_SAMPLE_H
#define STK_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/buffer_pool.h"
#include "stoker.h"

struct stk__sample {
    struct stk_sample pub;
    struct stk_member *members; /* pub.members points here */
    size_t capacity;
    uint64_t bytes;             /* member data bytes, for budgets and stats */
    char *key;
    struct stk__buffer_pool *pool;     /* member data comes from and returns to it */
    /* Identity for per-sample random choices: the sample's number among the
     * good samples of its shard and the pass over the rank's shards. */
    uint64_t position;
    uint64_t pass;
    uint32_t draws; /* repeated augmentation: its copy's (plan.h's segment.draws) */
    /* Where a reader starts to deliver it (uncompressed): its first member's
     * header, or that of the bad samples just before it. */
    uint64_t offset;
    /* Bad input this sample accounts for (stk_batch.samples_skipped): the
     * bad samples between it and the previous good sample of its shard,
     * plus what the sequencer charged to it (pipeline.c). */
    uint64_t bad_samples;
    uint64_t bad_shards;
};

/* A sample with a copy of key[0..key_len). NULL when out of memory. */
struct stk__sample *stk__sample_new(const char *key, size_t key_len, const char *url,
                                    uint64_t shard_index, struct stk__buffer_pool *pool);

/* Append a member: ext is copied (and lower-cased), data is adopted (must
 * be from stk__buffer_pool_get(s->pool, size + 1), with a NUL at data[size]).
 * 0 or STK_ENOMEM; on failure data goes back to the pool. data NULL with
 * size 0: a member known by its header alone (stk__shard_config.headers_only). */
int stk__sample_add(struct stk__sample *s, const char *ext, size_t ext_len, uint8_t *data,
                    size_t size);

/* 1 if the sample already has a member with this extension. */
int stk__sample_has_ext(const struct stk__sample *s, const char *ext, size_t ext_len);

void stk__sample_free(struct stk__sample *s);

#endif
