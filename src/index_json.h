/* SPDX-License-Identifier: MIT */
/*
 * index_json.h - the dataset index file, streamed in and out as JSON.
 *
 *   {"format": "stoker-index", "version": 3, "samples": TOTAL,
 *    "url_key": "32 HEX",
 *    "shards": [{"url": "...", "url_tag": "32 HEX", "samples": N, "size": BYTES,
 *                "mtime_ns": T, "etag": "...", "offsets": [O0, O1, ...]}, ...]}
 *
 * url is the shard's URL redacted (stk__redact_url): a URL may carry a
 * password or a signed query, and the index is a file that gets copied,
 * shared with Dask workers and left in caches. When that hides something,
 * url_tag tells the URL apart from others with the same redacted form:
 * SipHash-128 of the whole URL under url_key, a key drawn at random for
 * each index (so two indexes of one URL share no tag, and no table made
 * in advance maps tags to secrets). A loader finds its URL by the redacted
 * form and that tag: only the same URL, secret and all, matches. What a
 * tag still gives away is a check of a guessed secret, as any digest does:
 * the file is written 0600. Version 2 indexes (URLs as given, no tags) are
 * still read: an entry whose url is not in redacted form is turned into
 * one on reading, so both match the same way.
 *
 * size, mtime_ns and etag are the shard's stamp when `stoker index` read it
 * (source.h; each left out when its source cannot tell), offsets the byte
 * offset of each sample's first tar header (left out for compressed
 * shards). Every number is an exact unsigned integer.
 *
 * Reading is a stream (yajl): the file is fed in small chunks and each
 * value goes straight into the arrays the loader keeps, so memory is what
 * the index holds (8 bytes an offset), not a tree of the whole text; what
 * an index cannot hold is refused as soon as it is met, with the byte
 * where: an unknown key (before its value is read), a value of another
 * type, nesting deeper than the format's, more offsets than samples,
 * offsets that do not increase, are not on a 512-byte tar block or lie
 * past the shard's size. The file must be a regular file no larger than
 * STK__INDEX_MAX_BYTES: it is opened without blocking (a FIFO or a device
 * put at its name is refused, not waited on). An index of version 1 (no
 * stamps) is refused: run `stoker index` again. Every error is STK_EINDEX
 * but a file that cannot be opened or read (STK_ENOENT, STK_EIO) and
 * memory (STK_ENOMEM).
 */
#ifndef STK_INDEX_JSON_H
#define STK_INDEX_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

#define STK__INDEX_FORMAT "stoker-index"
#define STK__INDEX_VERSION 3
/* The oldest version read (see above). */
#define STK__INDEX_VERSION_MIN 2
/* Largest index file read; about 100 million offsets. */
#define STK__INDEX_MAX_BYTES ((uint64_t)1 << 30)

struct stk__index_entry {
    char *url;       /* redacted */
    int has_tag;     /* the URL had something to hide: tag tells it apart */
    uint64_t tag[2]; /* stk__index_url_tag() of the whole URL */
    uint64_t samples;
    struct stk__shard_stamp stamp;
    uint64_t *offsets; /* NULL, or `samples` increasing offsets */
};

struct stk__index_file {
    struct stk__index_entry *entries;
    size_t n;
    uint64_t samples; /* the file's total, equal to the entries' sum */
    uint64_t url_key[2]; /* the key of the entries' tags */
};

/* The entry that names url in an index whose tags are keyed by key: its
 * redacted form (name, made by the caller with stk__redact_url) and, when
 * that differs from url, its tag. *e borrows name. */
void stk__index_entry_for(const uint64_t key[2], const char *url, const char *name,
                          struct stk__index_entry *e);

/* Read and check the index at path into *out (freed by
 * stk__index_file_free, also after an error). */
int stk__index_json_read(const char *path, struct stk__index_file *out, struct stk__err *err);

/* Write f as JSON to fd (path names it in messages); the caller makes the
 * file and publishes it. Entries are written as they are: the caller makes
 * them with stk__index_entry_for() under f->url_key. */
int stk__index_json_write(int fd, const char *path, const struct stk__index_file *f,
                          struct stk__err *err);

void stk__index_file_free(struct stk__index_file *f);

#endif
