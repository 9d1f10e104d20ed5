/* SPDX-License-Identifier: MIT */
/*
 * tar_reader.c - libarchive driven by stoker's byte sources.
 *
 * libarchive pulls data through read_cb; we hand it our own block buffer
 * filled by the source, so bytes are copied once from the source into the
 * block and once from the block into the member buffer. libarchive reads
 * the tar format only: a compressed shard is decompressed below it by a
 * source layer, zlib for gzip (source_gzip.h: it checks the CRC, which
 * libarchive's gzip filter does not) and libarchive's own library-backed
 * filters for bzip2, xz, zstd and lz4 (source_filter.h); nothing here can
 * spawn an external program. So read_cb sees every byte of the tar stream
 * whatever the compression, and what follows the end-of-archive marker can
 * be checked (check_end).
 */
#include "tar/tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "io/source_filter.h"
#include "io/source_gzip.h"
#include "stoker.h"

/* Bytes of the stream handed to libarchive before its last block that are
 * kept for check_end. When libarchive reports the end of the archive it has
 * read ahead at most the last block plus what its copy buffer holds for one
 * read-ahead of 512 bytes (the second zero block): archive_read.c,
 * __archive_read_filter_ahead copies no more than it is asked for. */
#define HISTORY 1024

struct stk__tar {
    struct archive *archive;
    struct stk__source *src; /* the tar stream: raw, or a decompressing layer over it */
    struct stk__source *raw; /* the shard's bytes (bytes_read: the compressed size) */
    int compressed;
    unsigned char *block;
    size_t block_size;
    int source_failed; /* the source, not the format, caused the error */
    /* Bytes read to recognise a compression, handed to libarchive first. */
    unsigned char head[STK__SNIFF_BYTES];
    const unsigned char *first;
    size_t first_len;
    /* The tar stream as handed to libarchive. */
    uint64_t handed;           /* bytes given (or skipped) so far */
    const unsigned char *last; /* the last block given, still intact */
    size_t last_len;
    unsigned char history[HISTORY]; /* the bytes given just before it */
    size_t history_len;
    /* The first data block of a member, fetched by stk__tar_start. */
    int held;
    int held_rc;
    const void *held_block;
    size_t held_len;
    la_int64_t held_offset;
    uint64_t member_offset;
    uint64_t member_size;
    la_int64_t data_start; /* stream position of the member's data (stk__tar_skip) */
    char member_name[STK__SHOWN_MAX]; /* for messages (stk__shown): libarchive's string
                                         dies with the entry */
};

/* Move the last block into the history before its buffer is reused. */
static void remember_last(struct stk__tar *t)
{
    size_t n = t->last_len;
    if (n == 0)
        return;
    if (n >= HISTORY) {
        memcpy(t->history, t->last + n - HISTORY, HISTORY);
        t->history_len = HISTORY;
    } else {
        size_t keep = t->history_len < HISTORY - n ? t->history_len : HISTORY - n;
        memmove(t->history, t->history + t->history_len - keep, keep);
        memcpy(t->history + keep, t->last, n);
        t->history_len = keep + n;
    }
    t->last_len = 0;
}

static la_ssize_t read_cb(struct archive *a, void *client, const void **buf)
{
    struct stk__tar *t = client;
    remember_last(t);
    const unsigned char *p = t->first;
    ssize_t n = (ssize_t)t->first_len;
    t->first_len = 0;
    if (n == 0) {
        p = t->block;
        n = stk__source_read(t->src, t->block, t->block_size);
        if (n < 0) {
            t->source_failed = 1;
            archive_set_error(a, -1, "%s", t->src->err.msg);
            return -1;
        }
    }
    t->last = p;
    t->last_len = (size_t)n;
    t->handed += (uint64_t)n;
    *buf = p;
    return n;
}

/* libarchive skips the data of members nobody read (resume passes over
 * samples by their headers) through this when the source can seek. It has
 * consumed the last block by then. */
static la_int64_t skip_cb(struct archive *a, void *client, la_int64_t request)
{
    struct stk__tar *t = client;
    (void)a;
    if (request <= 0)
        return 0;
    int64_t n = t->src->ops->skip(t->src, (uint64_t)request);
    if (n <= 0)
        return 0;
    t->handed += (uint64_t)n;
    t->history_len = t->last_len = 0; /* what follows is not contiguous with them */
    return n;
}

/* Read until the first STK__SNIFF_BYTES bytes are in (or the stream ends):
 * into the block when it is large enough, so they reach libarchive without
 * a copy. 0 or an error. */
static int read_first(struct stk__tar *t, struct stk__err *err)
{
    unsigned char *p = t->block_size >= STK__SNIFF_BYTES ? t->block : t->head;
    size_t cap = t->block_size >= STK__SNIFF_BYTES ? t->block_size : STK__SNIFF_BYTES;
    size_t n = 0;
    while (n < STK__SNIFF_BYTES) {
        ssize_t got = stk__source_read(t->src, p + n, cap - n);
        if (got < 0)
            return stk__errf(err, (int)got, "%s", t->src->err.msg);
        if (got == 0)
            break;
        n += (size_t)got;
    }
    t->first = p;
    t->first_len = n;
    return 0;
}

/* Put a decompressing layer under the tar reader when the first bytes say
 * the shard is compressed. */
static int decompress(struct stk__tar *t, struct stk__err *err)
{
    const char *filter = stk__filter_sniff(t->first, t->first_len);
    if (!stk__is_gzip(t->first, t->first_len) && filter == NULL)
        return 0;
    struct stk__source *layer;
    t->raw = NULL; /* the layer owns the shard's source, also when it fails */
    int rc = filter == NULL
                 ? stk__source_gzip_open(t->src, t->first, t->first_len, &layer, err)
                 : stk__source_filter_open(t->src, filter, t->first, t->first_len, &layer, err);
    if (rc < 0) {
        t->src = NULL;
        return rc;
    }
    t->raw = t->src;
    t->src = layer;
    t->first_len = 0;
    t->compressed = 1;
    return 0;
}

int stk__tar_open(struct stk__source *src, size_t block_size, struct stk__tar **out,
                  struct stk__err *err)
{
    *out = NULL;
    struct stk__tar *t = stk__calloc(1, sizeof *t);
    unsigned char *block = stk__malloc(block_size);
    struct archive *a = archive_read_new();
    if (t == NULL || block == NULL || a == NULL) {
        stk__free(t);
        stk__free(block);
        if (a != NULL)
            archive_read_free(a);
        stk__source_close(src);
        return stk__errf(err, STK_ENOMEM, "out of memory opening a tar reader");
    }
    t->archive = a;
    t->src = t->raw = src;
    t->block = block;
    t->block_size = block_size;
    int rc = read_first(t, err);
    if (rc == 0)
        rc = decompress(t, err);
    if (rc < 0) {
        stk__tar_close(t);
        return rc;
    }
    /* Format: tar only (ustar, pax, GNU); no filters (see the top). */
    archive_read_support_format_tar(a);
    archive_read_set_callback_data(a, t);
    archive_read_set_read_callback(a, read_cb);
    if (t->src->ops->skip != NULL)
        archive_read_set_skip_callback(a, skip_cb);
    if (archive_read_open1(a) != ARCHIVE_OK) {
        const char *why = archive_error_string(a);
        int code = t->source_failed                            ? t->src->err.code
                   : why != NULL && strstr(why, "runcated") != NULL ? STK_ETRUNC
                                                                     : STK_EFORMAT;
        /* A source error already names the URL and says what went wrong. */
        if (t->source_failed)
            stk__errf(err, code, "%s", t->src->err.msg);
        else
            stk__errf(err, code, "%s: cannot read as tar at offset 0: %s", src->url,
                      archive_error_string(a) ? archive_error_string(a) : "unknown error");
        stk__tar_close(t);
        return code;
    }
    *out = t;
    return 0;
}

static int archive_failure(struct stk__tar *t, struct stk__err *err, const char *doing)
{
    struct archive *a = t->archive;
    const char *why = archive_error_string(a) ? archive_error_string(a) : "unknown error";
    if (t->source_failed)
        return stk__errf(err, t->src->err.code, "%s", t->src->err.msg);
    int code = strstr(why, "runcated") != NULL ? STK_ETRUNC : STK_EFORMAT;
    la_int64_t consumed = archive_filter_bytes(a, 0);
    if (t->member_name[0] == '\0')
        return stk__errf(err, code, "%s: %s in the first member (read up to offset %lld): %s",
                         t->src->url, doing, (long long)consumed, why);
    return stk__errf(err, code,
                     "%s: %s after member '%s' at offset %llu (read up to offset %lld): %s",
                     t->src->url, doing, t->member_name, (unsigned long long)t->member_offset,
                     (long long)consumed, why);
}

/* Offset of the first non-zero byte of p[0..n), or n. */
static size_t first_nonzero(const unsigned char *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w != 0)
            break;
    }
    while (i < n && p[i] == 0)
        i++;
    return i;
}

static int data_after_end(struct stk__tar *t, uint64_t at, struct stk__err *err)
{
    return stk__errf(err, STK_EFORMAT,
                     "%s: data after the end-of-archive marker at offset %llu%s: the shard holds "
                     "more than one archive (cat a.tar b.tar) or junk after it, which tar "
                     "readers stop before",
                     t->src->url, (unsigned long long)(t->raw->start_offset + at),
                     t->compressed ? " of the decompressed stream" : "");
}

/* The archive ended (libarchive read its end-of-archive marker, or the
 * stream ended at a header boundary). What follows must be padding: zeros
 * to the end. Anything else would be dropped without a word (a second
 * archive of `cat a.tar b.tar`: GNU tar and Python's tarfile stop at the
 * first marker too), so it is an error. Reading to the end also makes the
 * source see its own end, so an HTTP connection is reused. */
int stk__tar_finish(struct stk__tar *t, struct stk__err *err)
{
    la_int64_t consumed = archive_filter_bytes(t->archive, 0);
    /* Given to libarchive but not consumed: the end of history + last. */
    uint64_t unseen = consumed >= 0 && (uint64_t)consumed <= t->handed
                          ? t->handed - (uint64_t)consumed
                          : UINT64_MAX;
    if (unseen > t->history_len + t->last_len)
        return stk__errf(err, STK_EINTERNAL,
                         "%s: libarchive ended the archive at offset %lld, %llu bytes before the "
                         "end of what it was given (more than stoker keeps to check)",
                         t->src->url, (long long)consumed, (unsigned long long)t->handed);
    size_t in_last = unseen < t->last_len ? (size_t)unseen : t->last_len;
    size_t in_history = (size_t)unseen - in_last;
    const unsigned char *h = t->history + t->history_len - in_history;
    size_t at = first_nonzero(h, in_history);
    if (at < in_history)
        return data_after_end(t, (uint64_t)consumed + at, err);
    const unsigned char *l = t->last + t->last_len - in_last;
    at = first_nonzero(l, in_last);
    if (at < in_last)
        return data_after_end(t, (uint64_t)consumed + in_history + at, err);
    for (;;) {
        ssize_t n = stk__source_read(t->src, t->block, t->block_size);
        if (n == 0)
            return 0;
        if (n < 0)
            return stk__errf(err, t->src->err.code, "%s", t->src->err.msg);
        at = first_nonzero(t->block, (size_t)n);
        if (at < (size_t)n)
            return data_after_end(t, t->handed + at, err);
        t->handed += (uint64_t)n;
    }
}

int stk__tar_next(struct stk__tar *t, struct stk__tar_member *m, struct stk__err *err)
{
    struct archive_entry *e;
    int r = archive_read_next_header(t->archive, &e);
    if (r == ARCHIVE_EOF)
        return 0;
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
        return archive_failure(t, err, "bad tar header");
    la_int64_t pos = archive_read_header_position(t->archive);
    if (pos >= 0)
        t->member_offset = t->raw->start_offset + (uint64_t)pos;
    t->held = 0;
    const char *name = archive_entry_pathname(e);
    if (name == NULL)
        return stk__errf(err, STK_EFORMAT, "%s: member at offset %llu has no name", t->src->url,
                         (unsigned long long)t->member_offset);
    m->name = name;
    m->offset = t->member_offset;
    m->regular = archive_entry_filetype(e) == AE_IFREG && archive_entry_hardlink(e) == NULL;
    if (m->regular && !archive_entry_size_is_set(e))
        return stk__errf(err, STK_EFORMAT, "%s: member '%s' at offset %llu has no size",
                         t->src->url, stk__shown(t->member_name, sizeof t->member_name, name),
                         (unsigned long long)t->member_offset);
    la_int64_t size = archive_entry_size(e);
    m->size = size > 0 ? (uint64_t)size : 0;
    /* libarchive lists the data regions of a sparse file; one region
     * covering the whole file is no hole (it then reports 0). */
    m->sparse = m->regular && archive_entry_sparse_count(e) > 0;
    m->stored = m->size;
    if (m->sparse) {
        la_int64_t offset, length;
        m->stored = 0;
        archive_entry_sparse_reset(e);
        while (archive_entry_sparse_next(e, &offset, &length) == ARCHIVE_OK)
            m->stored += length > 0 ? (uint64_t)length : 0;
    }
    stk__shown(t->member_name, sizeof t->member_name, name);
    t->member_size = m->size;
    /* libarchive has consumed the member's headers (pax and GNU records
     * too): its data starts here. */
    t->data_start = archive_filter_bytes(t->archive, 0);
    return 1;
}

/* The next data block of the current member: the one stk__tar_start()
 * fetched first, if any. */
static int next_block(struct stk__tar *t, const void **block, size_t *n, la_int64_t *offset)
{
    if (t->held) {
        t->held = 0;
        *block = t->held_block;
        *n = t->held_len;
        *offset = t->held_offset;
        return t->held_rc;
    }
    return archive_read_data_block(t->archive, block, n, offset);
}

static int hole(struct stk__tar *t, uint64_t size, uint64_t filled, struct stk__err *err)
{
    stk__errf(err, STK_EFORMAT,
              "%s: member '%s' at offset %llu claims %llu bytes, of which the shard stores %llu "
              "before a hole (a sparse file without a map, or a damaged header); refused",
              t->src->url, t->member_name, (unsigned long long)t->member_offset,
              (unsigned long long)size, (unsigned long long)filled);
    return 1;
}

/* Blocks come with their offset in the member: a block that starts past the
 * bytes filled so far, or an end before `size`, is a hole that
 * archive_read_data() would fill with zeros. Besides sparse maps (the header
 * has them, see stk__tar_next) a pax GNU.sparse.size or SCHILY.realsize
 * record alone claims more bytes than the shard stores. */
static int is_hole(int r, size_t n, la_int64_t offset, uint64_t filled)
{
    return r == ARCHIVE_EOF ||
           (r == ARCHIVE_OK && (n == 0 || offset < 0 || (uint64_t)offset != filled));
}

int stk__tar_start(struct stk__tar *t, uint64_t size, struct stk__err *err)
{
    if (size == 0)
        return 0;
    t->held_rc = archive_read_data_block(t->archive, &t->held_block, &t->held_len,
                                         &t->held_offset);
    t->held = 1;
    if (is_hole(t->held_rc, t->held_len, t->held_offset, 0))
        return hole(t, size, 0, err);
    return t->held_rc == ARCHIVE_OK ? 0 : archive_failure(t, err, "cannot read member data");
}

int stk__tar_read(struct stk__tar *t, void *buf, size_t size, struct stk__err *err)
{
    unsigned char *p = buf;
    uint64_t filled = 0;
    while (filled < size) {
        const void *block;
        size_t n;
        la_int64_t offset;
        int r = next_block(t, &block, &n, &offset);
        if (is_hole(r, n, offset, filled))
            return hole(t, size, filled, err);
        if (r != ARCHIVE_OK)
            return archive_failure(t, err, "cannot read member data");
        if (n > size - filled)
            n = (size_t)(size - filled); /* past the size in the header: never used */
        memcpy(p + filled, block, n);
        filled += n;
    }
    return 0;
}

int stk__tar_skip(struct stk__tar *t, uint64_t size, struct stk__err *err)
{
    if (size == 0)
        return 0;
    /* libarchive consumes the blocks the member stores, its padding
     * included, so where they end bounds what a read would find. */
    if (archive_read_data_skip(t->archive) != ARCHIVE_OK)
        return archive_failure(t, err, "cannot skip member data");
    la_int64_t end = archive_filter_bytes(t->archive, 0);
    uint64_t stored = end > t->data_start ? (uint64_t)(end - t->data_start) : 0;
    return stored < size ? hole(t, size, stored, err) : 0;
}

int stk__tar_compressed(const struct stk__tar *t)
{
    return t->compressed;
}

uint64_t stk__tar_source_bytes(const struct stk__tar *t)
{
    return t->raw->bytes_read;
}

void stk__tar_close(struct stk__tar *t)
{
    if (t == NULL)
        return;
    if (t->archive != NULL)
        archive_read_free(t->archive);
    stk__source_close(t->src); /* a layer closes the shard's source too */
    stk__free(t->block);
    stk__free(t);
}
