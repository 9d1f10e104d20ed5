/*
 * source.h - a byte stream of one shard.
 *
 * Every storage backend (local file now; HTTP, S3, GCS and pipe: later)
 * implements these operations, so the tar reader above never knows where
 * bytes come from. Reads are sequential: shards are streamed; the only jump
 * is an optional forward skip.
 */
#ifndef STK_SOURCE_H
#define STK_SOURCE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "error.h"

struct stk__source;

struct stk__source_ops {
    /* Read up to cap bytes into buf. Returns the count, 0 at end of stream,
     * or a negative STK_E* code with a message in src->err. */
    ssize_t (*read)(struct stk__source *src, void *buf, size_t cap);
    void (*close)(struct stk__source *src);
    /* Optional: move n bytes forward without reading them; returns the
     * bytes skipped (0: cannot, the caller reads instead) or <0. Lets a
     * resumed epoch pass over the data of samples it already delivered. */
    int64_t (*skip)(struct stk__source *src, uint64_t n);
};

struct stk__source {
    const struct stk__source_ops *ops;
    const char *url;          /* borrowed; names the shard in messages */
    uint64_t bytes_read;      /* maintained by stk__source_read() */
    struct stk__err err;
};

/* Open the source for url: a plain path or file:// URL. */
int stk__source_open(const char *url, struct stk__source **out, struct stk__err *err);

/* A source over caller memory (tests, fuzzing), returning at most `chunk`
 * bytes per read (0: no limit) so parsers can be fed one byte at a time. */
int stk__source_open_memory(const char *url, const void *data, size_t size, size_t chunk,
                            struct stk__source **out);

ssize_t stk__source_read(struct stk__source *src, void *buf, size_t cap);
void stk__source_close(struct stk__source *src);

#endif
