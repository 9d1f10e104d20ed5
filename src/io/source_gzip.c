/* SPDX-License-Identifier: MIT */
/*
 * source_gzip.c - zlib inflate with gzip wrapping (windowBits 16 + 15):
 * zlib itself verifies each member's header, CRC-32 and ISIZE, and reports
 * a mismatch as Z_DATA_ERROR ("incorrect data check", "incorrect length
 * check"). Between members the layer looks at the next byte: the gzip magic
 * starts another member (inflateReset), zeros are padding up to the end,
 * anything else is reported.
 */
#include "io/source_gzip.h"

#include <string.h>
#include <zlib.h>

#include "base/alloc.h"
#include "stoker.h"

enum gz_state { IN_MEMBER, BETWEEN_MEMBERS, IN_PADDING, ENDED };

struct gzip_source {
    struct stk__layer layer; /* first: the source */
    z_stream zs;
    int zs_ready;
    enum gz_state state;
    int inner_ended;
    unsigned members; /* completed */
    uint64_t out_total; /* decompressed bytes of the previous members */
    int failed; /* an error found after output that was returned first */
};

int stk__is_gzip(const void *head, size_t len)
{
    const unsigned char *h = head;
    return len >= 3 && h[0] == 0x1f && h[1] == 0x8b && h[2] == 8;
}

static voidpf zalloc(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return stk__calloc(items, size);
}

static void zfree(voidpf opaque, voidpf address)
{
    (void)opaque;
    stk__free(address);
}

/* Offset in the compressed stream of the next byte zlib would take. */
static unsigned long long compressed_offset(const struct gzip_source *g)
{
    return (unsigned long long)(g->layer.inner->bytes_read - g->zs.avail_in);
}

/* More compressed bytes into the input buffer: 1, 0 at the end, <0. */
static int refill(struct gzip_source *g)
{
    if (g->zs.avail_in > 0)
        return 1;
    if (g->inner_ended)
        return 0;
    ssize_t n = stk__source_read(g->layer.inner, g->layer.input, g->layer.input_bytes);
    if (n < 0) {
        g->layer.base.err = g->layer.inner->err;
        return (int)n;
    }
    if (n == 0) {
        g->inner_ended = 1;
        return 0;
    }
    g->zs.next_in = g->layer.input;
    g->zs.avail_in = (uInt)n;
    return 1;
}

/* After a member: another member, padding, or data that is neither. 1 to
 * inflate on, 0 at the end, <0. */
static int between_members(struct gzip_source *g)
{
    for (;;) {
        int rc = refill(g);
        if (rc <= 0) {
            if (rc == 0)
                g->state = ENDED;
            return rc;
        }
        unsigned char next = *g->zs.next_in;
        if (g->state == BETWEEN_MEMBERS && next == 0x1f) {
            if (inflateReset(&g->zs) != Z_OK)
                return stk__errf(&g->layer.base.err, STK_EINTERNAL, "%s: zlib cannot restart",
                                 g->layer.base.url);
            g->state = IN_MEMBER;
            return 1;
        }
        if (next != 0)
            return stk__errf(&g->layer.base.err, STK_EFORMAT,
                             "%s: data after the gzip stream at compressed offset %llu (after "
                             "%u gzip member%s)",
                             g->layer.base.url, compressed_offset(g), g->members,
                             g->members == 1 ? "" : "s");
        g->state = IN_PADDING;
        while (g->zs.avail_in > 0 && *g->zs.next_in == 0) {
            g->zs.next_in++;
            g->zs.avail_in--;
        }
    }
}

static ssize_t gzip_read(struct stk__source *src, void *buf, size_t cap)
{
    struct gzip_source *g = (struct gzip_source *)src;
    if (g->failed)
        return g->failed;
    if (cap > UINT32_MAX)
        cap = UINT32_MAX;
    for (;;) {
        if (g->state == ENDED)
            return 0;
        if (g->state != IN_MEMBER) {
            int rc = between_members(g);
            if (rc <= 0)
                return rc;
        }
        int rc = refill(g);
        if (rc < 0)
            return rc;
        if (rc == 0)
            return stk__errf(&src->err, STK_ETRUNC,
                             "%s: gzip stream ends at compressed offset %llu inside member %u "
                             "(decompressed offset %llu): truncated",
                             src->url, compressed_offset(g), g->members + 1,
                             (unsigned long long)(g->out_total + g->zs.total_out));
        g->zs.next_out = buf;
        g->zs.avail_out = (uInt)cap;
        int z = inflate(&g->zs, Z_NO_FLUSH);
        size_t produced = cap - g->zs.avail_out;
        if (z == Z_STREAM_END) {
            g->members++;
            g->out_total += g->zs.total_out;
            g->state = BETWEEN_MEMBERS;
        } else if (z == Z_MEM_ERROR) {
            g->failed = stk__errf(&src->err, STK_ENOMEM, "%s: out of memory inflating", src->url);
        } else if (z != Z_OK && z != Z_BUF_ERROR) {
            g->failed = stk__errf(&src->err, STK_EFORMAT,
                                  "%s: gzip stream is corrupt at compressed offset %llu (member "
                                  "%u, decompressed offset %llu): %s",
                                  src->url, compressed_offset(g), g->members + 1,
                                  (unsigned long long)(g->out_total + g->zs.total_out),
                                  g->zs.msg != NULL ? g->zs.msg : "inflate failed");
        }
        /* Bytes inflated before an error come first: they are the stream's
         * up to the damage, as with any other source that fails midway. */
        if (produced > 0)
            return (ssize_t)produced;
        if (g->failed)
            return g->failed;
    }
}

static void gzip_close(struct stk__source *src)
{
    struct gzip_source *g = (struct gzip_source *)src;
    if (g->zs_ready)
        inflateEnd(&g->zs);
    stk__layer_release(&g->layer);
    stk__free(g);
}

static const struct stk__source_ops gzip_ops = {gzip_read, gzip_close, NULL};

int stk__source_gzip_open(struct stk__source *inner, const void *head, size_t head_len,
                          struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    struct gzip_source *g = stk__calloc(1, sizeof *g);
    if (g == NULL) {
        int rc = stk__errf(err, STK_ENOMEM, "%s: out of memory for a gzip reader", inner->url);
        stk__source_close(inner);
        return rc;
    }
    int rc = stk__layer_init(&g->layer, &gzip_ops, inner, head, head_len, err);
    if (rc < 0) {
        gzip_close(&g->layer.base);
        return rc;
    }
    g->zs.next_in = g->layer.input;
    g->zs.avail_in = (uInt)head_len;
    g->zs.zalloc = zalloc;
    g->zs.zfree = zfree;
    int z = inflateInit2(&g->zs, 16 + MAX_WBITS);
    if (z != Z_OK) {
        rc = stk__errf(err, z == Z_MEM_ERROR ? STK_ENOMEM : STK_EINTERNAL,
                       "%s: cannot start zlib: %s", inner->url,
                       g->zs.msg != NULL ? g->zs.msg : zError(z));
        gzip_close(&g->layer.base);
        return rc;
    }
    g->zs_ready = 1;
    *out = &g->layer.base;
    return 0;
}
