/* SPDX-License-Identifier: MIT */
/*
 * source.h - a byte stream of one shard.
 *
 * Every storage backend (local file, http(s), S3, GCS, pipe:, the node
 * cache) implements these operations, so the tar reader above
 * never knows where bytes come from. Reads are sequential: shards are
 * streamed; the only jump is an optional forward skip.
 */
#ifndef STK_SOURCE_H
#define STK_SOURCE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/error.h"
#include "base/run.h"

struct stk__source;

/* What a backend can tell of the version of the shard it reads, recorded
 * by the dataset index and compared with it when the shard is read again
 * (dataset_index.h): a rewritten shard must not be read with another's
 * counts and offsets. Zero fields are unknown. */
#define STK__ETAG_MAX 128
struct stk__shard_stamp {
    uint64_t size;     /* bytes of the whole shard, when has_size */
    int has_size;
    uint64_t mtime_ns; /* local files: modification time, ns since the epoch; 0 unknown */
    char etag[STK__ETAG_MAX]; /* http(s), s3, gs: the ETag header as sent; "" unknown */
};

/* 1 if a recorded stamp and the shard's now differ in what both know,
 * with why (e.g. "size 51200 bytes, the index records 20480"); else 0. */
int stk__stamp_differs(const struct stk__shard_stamp *recorded, const struct stk__shard_stamp *now,
                       char *why, size_t cap);

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
    /* Names the shard in the source's messages: the URL with credentials
     * redacted (redact.h). Borrowed from the opener, or owned by the
     * backend (HTTP), so valid only while the source is open: samples are
     * named by their owner's list instead (stk__shard_open). */
    const char *url;
    uint64_t bytes_read;      /* maintained by stk__source_read() */
    uint64_t start_offset;    /* where in the shard the stream starts (stk__source_seek, source_seek.h) */
    /* Filled by the backend at open, or before the first read returns
     * bytes (once a server has answered); never changed afterwards. */
    struct stk__shard_stamp stamp;
    struct stk__err err;
};

/* What a backend may need beyond the URL: one config for every backend, so
 * an opener passes the loader's settings through without knowing which
 * backend a URL picks; zero means the default noted. */
struct stk__source_config {
    unsigned io_timeout_ms; /* connect timeout and stall window (0: STK__IO_TIMEOUT_MS) */
    unsigned io_retries;    /* failed attempts in a row retried (0: none) */
    unsigned io_backoff_ms; /* first retry delay (0: STK__IO_BACKOFF_MS) */
    unsigned io_min_rate;   /* bytes/s over each stall window of waiting (0: no check) */
    int allow_pipe;         /* accept pipe:COMMAND */
    /* The reader seeks over most of the shard (the dataset index's header
     * scan, shard_reader.h) or reads one sample at its offset (an epoch's
     * first batches, pipeline_head.c): a local file is not read ahead
     * whole, which would read what the reader jumps over. */
    int jumps;
    const char *ca_bundle;  /* NULL: $STOKER_CA_BUNDLE, $CURL_CA_BUNDLE, system */
    /* The run's counters (retries, resumes of remote sources); may be NULL. */
    struct stk__counters *counters;
    /* When set and nonzero, a read() blocked on the network or a command
     * returns STK_EIO ("cancelled") within about 100 ms, so stopping a
     * loader mid-shard never waits for a slow server or program. */
    const atomic_int *cancel;
};

/* What a zero io_timeout_ms and io_backoff_ms of stk__source_config mean. */
#define STK__IO_TIMEOUT_MS 30000u
#define STK__IO_BACKOFF_MS 500u

/* Open the source for url: a plain path, file://, http://, https://,
 * s3://, gs:// or pipe:COMMAND. cfg NULL means every default (pipe: refused). url must
 * outlive the source. */
int stk__source_open(const char *url, const struct stk__source_config *cfg,
                     struct stk__source **out, struct stk__err *err);

/* A source over caller memory (tests, fuzzing), returning at most `chunk`
 * bytes per read (0: no limit) so parsers can be fed one byte at a time. */
int stk__source_open_memory(const char *url, const void *data, size_t size, size_t chunk,
                            struct stk__source **out);

/* 1 for a plain path or file:// URL (read in place), 0 for a stream that
 * crosses a network or a program (http(s), s3, gs, pipe:). */
int stk__source_is_local(const char *url);

/* For a plain path or file:// URL, whether the shard exists and is a file
 * (0, or STK_ENOENT / STK_EINVAL with a message naming `shown`); 0 for the
 * others, which only a request can tell. */
int stk__source_check(const char *url, const char *shown, struct stk__err *err);

/* For a plain path or file:// URL, its stamp now (1); 0 for the others,
 * which only a request can tell, and for a file that cannot be stat'ed
 * (opening it says why). */
int stk__source_local_stamp(const char *url, struct stk__shard_stamp *out);

ssize_t stk__source_read(struct stk__source *src, void *buf, size_t cap);
void stk__source_close(struct stk__source *src);

/* A source that transforms another (a decompressor): it owns inner, names
 * the shard with inner's url, and reads inner through an input buffer that
 * starts with the bytes of inner already read (head), so whoever looked at
 * a shard's first bytes to choose the layer loses none. */
struct stk__layer {
    struct stk__source base;
    struct stk__source *inner;
    unsigned char *input; /* input_bytes, at least 64 KiB */
    size_t input_bytes;
    size_t head_len;      /* bytes of input[] filled from head */
};

/* Set up l (zeroed by the caller, embedded at the start of the layer's own
 * struct) with ops over inner. 0, or STK_ENOMEM with a message in err; l
 * owns inner either way (stk__layer_release closes it). */
int stk__layer_init(struct stk__layer *l, const struct stk__source_ops *ops,
                    struct stk__source *inner, const void *head, size_t head_len,
                    struct stk__err *err);

/* Close inner and free the input buffer (not l itself). */
void stk__layer_release(struct stk__layer *l);

#endif
