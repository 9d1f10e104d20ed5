/* SPDX-License-Identifier: MIT */
/*
 * tar_reader.h - stream the members of one tar shard.
 *
 * A thin layer over libarchive (every tar flavour: ustar, pax extended
 * headers, GNU long names) fed by a stk__source through libarchive's read
 * callback; gzip/bzip2/xz/zstd/lz4-compressed shards are recognised by
 * their first bytes and decompressed by a source layer below it. It hands out regular
 * file members only, checks sizes against limits before anything is
 * allocated, and turns libarchive's errors into messages that name the
 * shard URL and the byte offset.
 */
#ifndef STK_TAR_READER_H
#define STK_TAR_READER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"
#include "io/source.h"

struct stk__tar;

struct stk__tar_member {
    const char *name;  /* valid until the next stk__tar_next() */
    uint64_t size;
    uint64_t offset;   /* byte offset of the member's header in the (uncompressed) stream */
    int regular;       /* 0 for directories, links, devices: their data is never read */
    /* A GNU sparse file (old GNU 'S' headers or pax GNU.sparse records):
     * size is its expanded size, stored the bytes of data the shard holds
     * for it; the rest are holes that reading would fill with zeros. */
    int sparse;
    uint64_t stored;
};

/* Take ownership of src (closed by stk__tar_close, also on failure). */
int stk__tar_open(struct stk__source *src, size_t block_size, struct stk__tar **out,
                  struct stk__err *err);

/* 1: *m describes the next member; 0: end of archive; <0: error in err. */
int stk__tar_next(struct stk__tar *t, struct stk__tar_member *m, struct stk__err *err);

/* After stk__tar_next() returned 0: read the stream to its end (so sources
 * check theirs: a command's exit status, an HTTP length, a gzip trailer)
 * and check that what follows the end-of-archive marker is zeros. 0, or
 * STK_EFORMAT naming the offset of data there (a second archive: tar
 * readers stop at the first marker), or the source's error. */
int stk__tar_finish(struct stk__tar *t, struct stk__err *err);

/* Before allocating for the current member's `size` bytes: fetch its first
 * data block (kept for stk__tar_read). 0; or 1 when its data does not start
 * there (a header claiming bytes the shard does not store), with a message
 * in err; or <0 when the stream cannot be read further. */
int stk__tar_start(struct stk__tar *t, uint64_t size, struct stk__err *err);

/* Read exactly `size` bytes of the current member's data into buf: 0; or
 * 1 when the member has a hole (a block past the bytes read so far, or an
 * end before `size`: data that reading would make up as zeros), with a
 * message in err: the member is refused, the archive can go on; or <0 when
 * the stream cannot be read further. */
int stk__tar_read(struct stk__tar *t, void *buf, size_t size, struct stk__err *err);

/* Instead of stk__tar_start/stk__tar_read: pass over the current member's
 * `size` bytes of data without reading them (libarchive seeks through the
 * source's skip where it has one). 0; or 1 when the shard stores fewer
 * blocks of data than `size` needs (the hole stk__tar_read reports, told
 * by where the data ends), with a message in err; or <0 when the stream
 * cannot be read further (a shard cut short). A header that claims a few
 * bytes more than it stores, within its last 512-byte block, is not told
 * apart: only reading finds that end. */
int stk__tar_skip(struct stk__tar *t, uint64_t size, struct stk__err *err);

/* 1 if a decompression filter is in use (offsets are not file offsets). */
int stk__tar_compressed(const struct stk__tar *t);

/* Bytes consumed from the source so far (compressed size). */
uint64_t stk__tar_source_bytes(const struct stk__tar *t);

void stk__tar_close(struct stk__tar *t);

#endif
