/*
 * tar_reader.c - libarchive driven by stoker's byte sources.
 *
 * libarchive pulls data through read_cb; we hand it our own block buffer
 * filled by the source, so bytes are copied once from the source into the
 * block and once from the block into the member buffer. Only the tar
 * format and library-backed decompression filters are enabled: nothing
 * here can spawn an external program.
 */
#include "tar_reader.h"

#include <archive.h>
#include <archive_entry.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "alloc.h"
#include "stoker.h"

#define DRAIN_MAX ((uint64_t)4 << 20)

struct stk__tar {
    struct archive *archive;
    struct stk__source *src;
    unsigned char *block;
    size_t block_size;
    int source_failed; /* the source, not the format, caused the error */
    uint64_t member_offset;
    uint64_t member_size;
    char member_name[256]; /* copy for messages: libarchive's string dies with the entry */
};

static la_ssize_t read_cb(struct archive *a, void *client, const void **buf)
{
    struct stk__tar *t = client;
    ssize_t n = stk__source_read(t->src, t->block, t->block_size);
    if (n < 0) {
        t->source_failed = 1;
        archive_set_error(a, -1, "%s", t->src->err.msg);
        return -1;
    }
    *buf = t->block;
    return n;
}

/* libarchive skips the data of members nobody read (resume passes over
 * samples by their headers) through this when the source can seek. */
static la_int64_t skip_cb(struct archive *a, void *client, la_int64_t request)
{
    struct stk__tar *t = client;
    (void)a;
    if (request <= 0)
        return 0;
    int64_t n = t->src->ops->skip(t->src, (uint64_t)request);
    return n > 0 ? n : 0;
}

/* A support call answers ARCHIVE_WARN when libarchive lacks the library
 * and would run an external program (lz4, xz, ...) instead; stoker never
 * spawns programs behind the user's back, so such filters stay off. Which
 * filters are built in is probed once on a scratch archive. */
typedef int (*filter_fn)(struct archive *);
static const filter_fn FILTERS[] = {
    archive_read_support_filter_gzip, archive_read_support_filter_bzip2,
    archive_read_support_filter_xz,   archive_read_support_filter_zstd,
    archive_read_support_filter_lz4,
};
#define N_FILTERS (sizeof FILTERS / sizeof FILTERS[0])

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static unsigned builtin_mask;

static void probe_filters(void)
{
    for (size_t i = 0; i < N_FILTERS; i++) {
        struct archive *a = archive_read_new();
        if (a == NULL)
            continue;
        if (FILTERS[i](a) == ARCHIVE_OK)
            builtin_mask |= 1u << i;
        archive_read_free(a);
    }
}

static unsigned builtin_filters(void)
{
    pthread_once(&probe_once, probe_filters);
    return builtin_mask;
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
    /* Format: tar only (ustar, pax, GNU). Filters: only those this
     * libarchive implements with linked libraries. */
    archive_read_support_format_tar(a);
    unsigned filters = builtin_filters();
    for (size_t i = 0; i < N_FILTERS; i++)
        if (filters & (1u << i))
            FILTERS[i](a);
    t->archive = a;
    t->src = src;
    t->block = block;
    t->block_size = block_size;
    archive_read_set_callback_data(a, t);
    archive_read_set_read_callback(a, read_cb);
    if (src->ops->skip != NULL)
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
    return stk__errf(err, code, "%s: %s after member '%.200s' at offset %llu (read up to offset %lld): %s",
                     t->src->url, doing, t->member_name, (unsigned long long)t->member_offset,
                     (long long)consumed, why);
}

/* The archive ended; read the stream to its end too (the padding after the
 * end-of-archive blocks, usually under 10 KiB), so the source sees its own
 * end and checks it: a pipe: command's exit status, an HTTP body's length.
 * Otherwise a command that fails after writing a whole shard would go
 * unnoticed, and an HTTP connection would be closed instead of reused. */
static int drain(struct stk__tar *t, struct stk__err *err)
{
    /* Padding is small; past this much, what follows the archive is not
     * padding and is left unread (the source is closed). */
    const uint64_t limit = t->src->bytes_read + DRAIN_MAX;
    while (t->src->bytes_read < limit) {
        ssize_t n = stk__source_read(t->src, t->block, t->block_size);
        if (n == 0)
            return 0;
        if (n < 0)
            return stk__errf(err, t->src->err.code, "%s", t->src->err.msg);
    }
    return 0;
}

int stk__tar_next(struct stk__tar *t, struct stk__tar_member *m, struct stk__err *err)
{
    struct archive_entry *e;
    int r = archive_read_next_header(t->archive, &e);
    if (r == ARCHIVE_EOF)
        return drain(t, err);
    if (r != ARCHIVE_OK && r != ARCHIVE_WARN)
        return archive_failure(t, err, "bad tar header");
    la_int64_t pos = archive_read_header_position(t->archive);
    if (pos >= 0)
        t->member_offset = t->src->start_offset + (uint64_t)pos;
    const char *name = archive_entry_pathname(e);
    if (name == NULL)
        return stk__errf(err, STK_EFORMAT, "%s: member at offset %llu has no name", t->src->url,
                         (unsigned long long)t->member_offset);
    m->name = name;
    m->offset = t->member_offset;
    m->regular = archive_entry_filetype(e) == AE_IFREG && archive_entry_hardlink(e) == NULL;
    if (m->regular && !archive_entry_size_is_set(e))
        return stk__errf(err, STK_EFORMAT, "%s: member '%.200s' at offset %llu has no size",
                         t->src->url, name, (unsigned long long)t->member_offset);
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
    snprintf(t->member_name, sizeof t->member_name, "%s", name);
    t->member_size = m->size;
    return 1;
}

int stk__tar_read(struct stk__tar *t, void *buf, size_t size, struct stk__err *err)
{
    /* Blocks come with their offset in the member: a block that starts past
     * the bytes filled so far, or an end before `size`, is a hole that
     * archive_read_data() would fill with zeros. Besides sparse maps (the
     * header has them, see stk__tar_next) a pax GNU.sparse.size or
     * SCHILY.realsize record alone claims more bytes than the shard stores. */
    unsigned char *p = buf;
    uint64_t filled = 0;
    while (filled < size) {
        const void *block;
        size_t n;
        la_int64_t offset;
        int r = archive_read_data_block(t->archive, &block, &n, &offset);
        if (r == ARCHIVE_EOF ||
            (r == ARCHIVE_OK && (n == 0 || offset < 0 || (uint64_t)offset != filled))) {
            stk__errf(err, STK_EFORMAT,
                      "%s: member '%.200s' at offset %llu claims %llu bytes, of which the shard "
                      "stores %llu before a hole (a sparse file without a map, or a damaged "
                      "header); refused",
                      t->src->url, t->member_name, (unsigned long long)t->member_offset,
                      (unsigned long long)size, (unsigned long long)filled);
            return 1;
        }
        if (r != ARCHIVE_OK)
            return archive_failure(t, err, "cannot read member data");
        if (n > size - filled)
            n = (size_t)(size - filled); /* past the size in the header: never used */
        memcpy(p + filled, block, n);
        filled += n;
    }
    return 0;
}

int stk__tar_compressed(const struct stk__tar *t)
{
    /* Filter 0 is the outermost; a plain tar has only "none". */
    return archive_filter_count(t->archive) > 1;
}

uint64_t stk__tar_source_bytes(const struct stk__tar *t)
{
    return t->src->bytes_read;
}

void stk__tar_close(struct stk__tar *t)
{
    if (t == NULL)
        return;
    if (t->archive != NULL)
        archive_read_free(t->archive);
    stk__source_close(t->src);
    stk__free(t->block);
    stk__free(t);
}
