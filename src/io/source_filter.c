/* SPDX-License-Identifier: MIT */
/*
 * source_filter.c - libarchive's "raw" format over its decompression
 * filters: the single entry it reads is the decompressed stream.
 */
#include "io/source_filter.h"

#include <archive.h>
#include <archive_entry.h>
#include <pthread.h>
#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

/* A support call answers ARCHIVE_WARN when libarchive lacks the library
 * and would run an external program (lz4, xz, ...) instead; stoker never
 * spawns programs behind the user's back, so such filters stay off. Which
 * filters are built in is probed once on a scratch archive. */
typedef int (*filter_fn)(struct archive *);
static const struct {
    const char *name;
    filter_fn support;
} FILTERS[] = {
    {"bzip2", archive_read_support_filter_bzip2},
    {"xz", archive_read_support_filter_xz},
    {"zstd", archive_read_support_filter_zstd},
    {"lz4", archive_read_support_filter_lz4},
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
        if (FILTERS[i].support(a) == ARCHIVE_OK)
            builtin_mask |= 1u << i;
        archive_read_free(a);
    }
}

const char *stk__filter_sniff(const void *head, size_t len)
{
    const unsigned char *h = head;
    /* As libarchive's bidders: bzip2 needs its block or end-of-stream magic
     * after "BZh1".."BZh9". */
    if (len >= 10 && memcmp(h, "BZh", 3) == 0 && h[3] >= '1' && h[3] <= '9' &&
        (memcmp(h + 4, "\x31\x41\x59\x26\x53\x59", 6) == 0 ||
         memcmp(h + 4, "\x17\x72\x45\x38\x50\x90", 6) == 0))
        return "bzip2";
    if (len >= 6 && memcmp(h, "\xfd" "7zXZ\0", 6) == 0)
        return "xz";
    if (len >= 4 && memcmp(h, "\x28\xb5\x2f\xfd", 4) == 0)
        return "zstd";
    if (len >= 4 &&
        (memcmp(h, "\x04\x22\x4d\x18", 4) == 0 || memcmp(h, "\x02\x21\x4c\x18", 4) == 0))
        return "lz4";
    return NULL;
}

struct filter_source {
    struct stk__layer layer; /* first: the source */
    struct archive *archive;
    const char *name; /* of the compression */
    int inner_failed;
    const unsigned char *pending; /* decompressed bytes not yet returned */
    size_t pending_len;
    int ended;
};

static la_ssize_t read_cb(struct archive *a, void *client, const void **buf)
{
    struct filter_source *f = client;
    *buf = f->layer.input;
    if (f->layer.head_len > 0) {
        la_ssize_t n = (la_ssize_t)f->layer.head_len;
        f->layer.head_len = 0;
        return n;
    }
    ssize_t n = stk__source_read(f->layer.inner, f->layer.input, f->layer.input_bytes);
    if (n < 0) {
        f->inner_failed = 1;
        archive_set_error(a, -1, "%s", f->layer.inner->err.msg);
        return -1;
    }
    return n;
}

static int failure(struct filter_source *f)
{
    if (f->inner_failed) {
        f->layer.base.err = f->layer.inner->err;
        return f->layer.base.err.code;
    }
    /* libarchive's own counters are gone once it failed: ours say how far
     * the compressed stream was read. */
    const char *why = archive_error_string(f->archive);
    return stk__errf(&f->layer.base.err, STK_EFORMAT,
                     "%s: cannot decompress its %s data (read up to compressed offset %llu): %s",
                     f->layer.base.url, f->name, (unsigned long long)f->layer.inner->bytes_read,
                     why != NULL ? why : "unknown error");
}

static ssize_t filter_read(struct stk__source *src, void *buf, size_t cap)
{
    struct filter_source *f = (struct filter_source *)src;
    while (f->pending_len == 0) {
        if (f->ended)
            return 0;
        const void *block;
        size_t n;
        la_int64_t offset;
        int r = archive_read_data_block(f->archive, &block, &n, &offset);
        if (r == ARCHIVE_EOF) {
            f->ended = 1;
            return 0;
        }
        if (r != ARCHIVE_OK)
            return failure(f);
        f->pending = block;
        f->pending_len = n;
    }
    size_t n = f->pending_len < cap ? f->pending_len : cap;
    memcpy(buf, f->pending, n);
    f->pending += n;
    f->pending_len -= n;
    return (ssize_t)n;
}

static void filter_close(struct stk__source *src)
{
    struct filter_source *f = (struct filter_source *)src;
    if (f->archive != NULL)
        archive_read_free(f->archive);
    stk__layer_release(&f->layer);
    stk__free(f);
}

static const struct stk__source_ops filter_ops = {filter_read, filter_close, NULL};

int stk__source_filter_open(struct stk__source *inner, const char *name, const void *head,
                            size_t head_len, struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    pthread_once(&probe_once, probe_filters);
    size_t which = N_FILTERS;
    for (size_t i = 0; i < N_FILTERS; i++)
        if (strcmp(FILTERS[i].name, name) == 0)
            which = i;
    if (which == N_FILTERS || !(builtin_mask & (1u << which))) {
        int rc = stk__errf(err, STK_EFORMAT,
                           "%s: compressed with %s, which this libarchive cannot decompress "
                           "without running an external program",
                           inner->url, name);
        stk__source_close(inner);
        return rc;
    }
    struct filter_source *f = stk__calloc(1, sizeof *f);
    if (f == NULL) {
        int rc = stk__errf(err, STK_ENOMEM, "%s: out of memory for a %s reader", inner->url, name);
        stk__source_close(inner);
        return rc;
    }
    int rc = stk__layer_init(&f->layer, &filter_ops, inner, head, head_len, err);
    struct archive *a = rc == 0 ? archive_read_new() : NULL;
    if (rc == 0 && a == NULL)
        rc = stk__errf(err, STK_ENOMEM, "%s: out of memory for a %s reader", inner->url, name);
    if (rc < 0) {
        filter_close(&f->layer.base);
        return rc;
    }
    f->archive = a;
    f->name = FILTERS[which].name;
    archive_read_support_format_raw(a);
    FILTERS[which].support(a);
    archive_read_set_callback_data(a, f);
    archive_read_set_read_callback(a, read_cb);
    struct archive_entry *e;
    if (archive_read_open1(a) != ARCHIVE_OK || archive_read_next_header(a, &e) != ARCHIVE_OK) {
        rc = failure(f);
        *err = f->layer.base.err;
        filter_close(&f->layer.base);
        return rc;
    }
    *out = &f->layer.base;
    return 0;
}
