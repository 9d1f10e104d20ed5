/* SPDX-License-Identifier: MIT */
/*
 * index_json.h - the dataset index file, streamed in and out as JSON.
 *
 *   {"format": "stoker-index", "version": 2, "samples": TOTAL,
 *    "shards": [{"url": "...", "samples": N, "size": BYTES, "mtime_ns": T,
 *                "etag": "...", "offsets": [O0, O1, ...]}, ...]}
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
 * past the shard's size. An index of version 1 (no stamps) is refused:
 * run `stoker index` again. Every error is STK_EINDEX but a file that
 * cannot be opened or read (STK_ENOENT, STK_EIO) and memory (STK_ENOMEM).
 */
#ifndef STK_INDEX_JSON_H
#define STK_INDEX_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

#define STK__INDEX_FORMAT "stoker-index"
#define STK__INDEX_VERSION 2
/* Largest index file read; about 100 million offsets. */
#define STK__INDEX_MAX_BYTES ((uint64_t)1 << 30)

struct stk__index_entry {
    char *url;
    uint64_t samples;
    struct stk__shard_stamp stamp;
    uint64_t *offsets; /* NULL, or `samples` increasing offsets */
};

struct stk__index_file {
    struct stk__index_entry *entries;
    size_t n;
    uint64_t samples; /* the file's total, equal to the entries' sum */
};

/* Read and check the index at path into *out (freed by
 * stk__index_file_free, also after an error). */
int stk__index_json_read(const char *path, struct stk__index_file *out, struct stk__err *err);

/* Write f as JSON to fd (path names it in messages); the caller makes the
 * file and publishes it. */
int stk__index_json_write(int fd, const char *path, const struct stk__index_file *f,
                          struct stk__err *err);

void stk__index_file_free(struct stk__index_file *f);

#endif
