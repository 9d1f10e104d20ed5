/* SPDX-License-Identifier: MIT */
/*
 * cache.h - node-local disk cache of whole shards, shared by every process
 * on the node.
 *
 * A shard is downloaded once per node (whichever process or thread asks
 * first fills it, reading it as it arrives; the others wait and then read
 * the finished file), kept
 * under a size limit by evicting the least recently used shards that nobody
 * is reading, and never visible under its final name before it is
 * complete. See cache.c for the on-disk layout and the locking protocol.
 */
#ifndef STK_CACHE_H
#define STK_CACHE_H

#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

struct stk__cache_config {
    const char *dir;           /* created if missing (not its parents); copied */
    uint64_t max_bytes;        /* bound on the total size of the files in dir */
    unsigned shards_in_flight; /* named in the "cache too small" error */
    int cache_local;           /* also cache plain paths and file:// URLs */
};

/* Counters of one cache handle (one process's view). */
struct stk__cache_counts {
    uint64_t hits;          /* opens served from a complete cached file */
    uint64_t misses;        /* downloads done by this handle */
    uint64_t evictions;     /* shards this handle removed to make room */
    uint64_t bytes_written; /* bytes of shards this handle downloaded */
};

struct stk__cache;

/* Open (creating it if needed, mode 0700) the cache directory: STK_ECACHE
 * when it belongs to another user or others may write to it (the cache is
 * per user; see cache.c). The environment
 * variables STOKER_CACHE_LOCAL=1 (cache local files too) and
 * STOKER_CACHE_TEST_FILL_DELAY_MS=N (sleep N ms after a fill starts, to make
 * processes overlap) exist for tests only. */
int stk__cache_new(const struct stk__cache_config *cfg, struct stk__cache **out,
                   struct stk__err *err);

/* Free the handle; sources it opened stay valid (a fill in progress keeps
 * what it needs of the handle until its source is closed). NULL is a no-op. */
void stk__cache_free(struct stk__cache *c);

/*
 * Open url through the cache: a hit returns a file source over the cached
 * copy. A miss starts a thread that downloads the shard from
 * stk__source_open(url) (so any scheme that function knows works) into the
 * cache, and returns at once a source that yields the bytes as they land:
 * upstream errors come from its read with their own code, cache-side ones
 * (no room, disk errors) as STK_ECACHE. Closing it before the download
 * ended abandons the fill (nothing cached, no miss counted). Local paths
 * and file:// URLs go straight to stk__source_open() unless cache_local is
 * set. The returned source protects the cached file from eviction until it
 * is closed. name is url redacted (stk__redact_url): messages and the
 * source's url use it, never url, which may carry credentials; it is
 * borrowed and must outlive the source; url need only live until the call
 * returns. Thread-safe.
 */
int stk__cache_open(struct stk__cache *c, const char *url, const char *name,
                    const struct stk__source_config *scfg, struct stk__source **out,
                    struct stk__err *err);

/*
 * The same, but a miss returns only once the whole shard is in the cache
 * (one download, as a streamed miss makes), with a source over the
 * complete file: for readers that open a shard at a sample's offset, many
 * times over (a global order, plan.h), where a streamed miss would read
 * every byte before the offset and its close would abandon the fill. The
 * caller waits for the whole shard instead of its first chunk; a hit is
 * the same as stk__cache_open's. Thread-safe.
 */
int stk__cache_open_whole(struct stk__cache *c, const char *url, const char *name,
                          const struct stk__source_config *scfg, struct stk__source **out,
                          struct stk__err *err);

/* Whether a cache of max_bytes keeps n_shards shards of bytes in all at
 * once, with their H.url files and the room fills (at most fills at a
 * time) reserve ahead: the caller can then read them in any order for a
 * whole run without evicting one to make room for another. A pure
 * function of its arguments, so every rank of a run decides the same. */
int stk__cache_holds(uint64_t max_bytes, uint64_t bytes, size_t n_shards, unsigned fills);

void stk__cache_counts(const struct stk__cache *c, struct stk__cache_counts *out);

/* One coming read of the node: url (only its hash is kept) at time when
 * (any increasing scale; plan/node_uses.h gives the loader's). */
struct stk__cache_use {
    const char *url;
    uint64_t when;
};

/* Replace what this handle knows of the node's coming reads (a copy). From
 * then on its evictions take first the shards with no use after the
 * handle's clock, least recently used first, then those used farthest
 * ahead. n 0: plain LRU again. 0 or STK_ENOMEM (the old uses kept).
 * Thread-safe. */
int stk__cache_set_uses(struct stk__cache *c, const struct stk__cache_use *uses, size_t n);

/* Move the handle's clock to now unless it is already later: the reads
 * at or before it are past. Thread-safe. */
void stk__cache_advance(struct stk__cache *c, uint64_t now);

/* The file name (inside the cache directory) of url's cached copy:
 * 32 hex digits of a 128-bit FNV-1a hash of the URL. */
void stk__cache_name(const char *url, char hex[33]);

#endif
