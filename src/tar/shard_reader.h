/* SPDX-License-Identifier: MIT */
/*
 * shard_reader.h - the samples of one shard, in storage order.
 *
 * Groups tar members into samples with WebDataset's rule: the key is the
 * member path up to the first dot of its basename, the extension the rest
 * (lower-cased). Members of a sample must be adjacent; a key that comes back
 * later in the shard is reported (STK_EDUPKEY), never merged or split.
 * Under the skip policy a bad sample is dropped and counted, and a shard
 * that cannot be parsed further ends early and is counted as failed. After
 * the last sample the rest of the stream is read and must be zeros (data
 * after the end-of-archive marker is a shard error); a shard read to its
 * end without a sample is counted (shards_empty).
 */
#ifndef STK_SHARD_READER_H
#define STK_SHARD_READER_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "base/run.h"
#include "tar/sample.h"
#include "io/source.h"
#include "stoker.h"

struct stk__cache;

struct stk__shard_config {
    size_t block_size;
    uint64_t max_member_bytes;
    size_t max_members;
    size_t max_key_bytes;
    uint64_t max_samples; /* samples a shard may hold; 0: no limit (tests) */
    /* Samples are made from member headers alone: the data is seeked over
     * (stk__tar_skip), never read, and samples come without it. For
     * counting local shards (the dataset index), where a seek costs no
     * more than a read of the same bytes; with it set source.jumps too. */
    int headers_only;
    struct stk__run *run; /* counters, log, error policy; required */
    struct stk__source_config source; /* source.counters: NULL or &run->counters */
    struct stk__buffer_pool *pool;         /* member buffers; NULL: plain allocation */
    struct stk__cache *cache;       /* node cache shards are opened through; may be NULL */
    /* Through the cache, a miss is filled whole before the shard is read
     * (stk__cache_open_whole): for a global order's opens at offsets. */
    int cache_whole;
    /* Called before a member's data is read into memory (not while passing
     * over samples), with the bytes the sample being built holds once it is
     * (this member included), so the owner can count them against its
     * budget (the pipeline's backpressure). NULL: none. It returns 0 to
     * read on, 1 for "not now": stk__shard_next() returns 2 with the member
     * still pending, and the next call asks again; <0 stops the read with
     * STK_EINTR (the owner was cancelled). */
    int (*gate)(void *gate_data, uint64_t sample_bytes);
    void *gate_data;
};

/* The config a loader with these options reads shards with, counting
 * into run (whose cancel flag stops its sources). */
void stk__shard_config_init(struct stk__shard_config *cfg, const struct stk_options *o,
                            struct stk__run *run, struct stk__buffer_pool *pool);

/* Turn cfg into the config that counts url's samples (stk__shard_count): a
 * local shard from its headers alone, seeking over member data; a remote
 * one as read, since a seek there is a new request. */
void stk__shard_config_count(struct stk__shard_config *cfg, const char *url);

struct stk__shard_reader;

/* Open url, through cfg->cache when set. name is what samples (their url,
 * the public __url__) and messages call the shard: url redacted
 * (stk__expand_and_list() makes both lists). It is borrowed, not copied,
 * and must outlive every sample the reader returns, so it belongs to the
 * owner of the URL list (loader, index build, verify), not to the source,
 * which is closed while batches of its samples are still held. url need
 * only live until the call returns. shard_index is reported in samples. */
int stk__shard_open(const char *url, const char *name, uint64_t shard_index,
                    const struct stk__shard_config *cfg, struct stk__shard_reader **out,
                    struct stk__err *err);

/* Same over an already opened source (ownership passes to the reader);
 * name as for stk__shard_open(). */
int stk__shard_open_source(struct stk__source *src, const char *name, uint64_t shard_index,
                           const struct stk__shard_config *cfg, struct stk__shard_reader **out,
                           struct stk__err *err);

/* 1: *out is the next sample (caller frees); 0: shard done; 2: the gate
 * said "not now" (call again later); <0: error. */
int stk__shard_next(struct stk__shard_reader *r, struct stk__sample **out, struct stk__err *err);

/* Pass over the next n samples that stk__shard_next() would return (read
 * and dropped, not counted in samples_read, never decoded); bad samples
 * are dropped as stk__shard_next() drops them, so the samples that follow
 * keep their numbers. 0, or STK_EPLAN when
 * the shard ends first (its count in the index is stale), or an error. */
int stk__shard_skip(struct stk__shard_reader *r, uint64_t n, struct stk__err *err);

/* Byte offsets of samples in a shard: their first member's header, or the
 * first header of the bad samples just before them, which they account for. */
struct stk__offsets {
    uint64_t *items;
    size_t count, capacity;
};
int stk__offsets_push(struct stk__offsets *v, uint64_t offset); /* 0 or STK_ENOMEM */
void stk__offsets_free(struct stk__offsets *v);

/* Count the samples left in the shard the same way: 0 and *n, or <0.
 * offsets, if not NULL, receives where each of them starts. */
int stk__shard_count(struct stk__shard_reader *r, uint64_t *n, struct stk__offsets *offsets,
                     struct stk__err *err);

/* Open url at byte offset, where sample number `position` starts (from
 * stk__shard_count's offsets of an uncompressed shard): no byte before it
 * is read where the source can seek. name as for stk__shard_open(). */
int stk__shard_open_at(const char *url, const char *name, uint64_t shard_index,
                       const struct stk__shard_config *cfg, uint64_t offset, uint64_t position,
                       struct stk__shard_reader **out, struct stk__err *err);

/* 1 once the shard was read to its end without error and held no sample,
 * good or bad (counted in shards_empty). */
int stk__shard_empty(const struct stk__shard_reader *r);

/* Members ignored so far (no key: directories, links, names without a
 * dot); *first is the first one's name (truncated), "" if none. */
uint64_t stk__shard_ignored(const struct stk__shard_reader *r, const char **first);

/* 1 if a resume may open the shard at a sample's offset: the offsets are
 * byte offsets of the file (no compression), and no key reappeared (telling
 * such a sample from a good one needs every key before it). */
int stk__shard_seekable(const struct stk__shard_reader *r);

/* After the last sample: the bad samples that followed the last good one
 * (no sample accounts for them) and whether the rest of the shard was
 * skipped as unreadable. */
void stk__shard_tail(const struct stk__shard_reader *r, uint64_t *skipped, int *failed);

/* What the dataset index records of the shard a reader reads (index_json.h):
 * its stamp, compared once the source has answered (before the first
 * sample is returned), and its good samples, compared when the shard ends
 * cleanly (from where the reader was opened: stk__shard_open_at's
 * position), unless it stops before the end. A difference is STK_EINDEX, "the index is stale for SHARD",
 * never skipped as bad input. */
struct stk__shard_expect {
    const struct stk__shard_stamp *stamp; /* NULL: not compared */
    uint64_t samples;
    /* 0, or the position of the first sample not to read: the reader ends
     * there (a rank reading part of the shard; its count is not compared). */
    uint64_t end;
};
void stk__shard_expect(struct stk__shard_reader *r, const struct stk__shard_expect *e);

/* The shard's stamp as its source tells it: complete once a sample was
 * read (what `stoker index` records). */
const struct stk__shard_stamp *stk__shard_stamp(const struct stk__shard_reader *r);

void stk__shard_close(struct stk__shard_reader *r);

#endif
