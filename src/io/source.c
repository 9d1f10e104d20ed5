/* SPDX-License-Identifier: MIT */
/*
 * source.c - choose a backend by URL scheme, and the in-memory source.
 */
#include "io/source.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "io/redact.h"
#include "io/cloud_request.h"
#include "io/source_cloud.h"
#include "io/source_file.h"
#include "io/source_http.h"
#include "io/source_pipe.h"
#include "stoker.h"

/* "scheme://" before any other slash. */
static int has_scheme(const char *url)
{
    const char *colon = strchr(url, ':');
    const char *slash = strchr(url, '/');
    return colon != NULL && colon > url && (slash == NULL || colon < slash) && colon[1] == '/' &&
           colon[2] == '/';
}

int stk__source_is_local(const char *url)
{
    if (strncmp(url, "file://", 7) == 0)
        return 1;
    return strncmp(url, "pipe:", 5) != 0 && !has_scheme(url);
}

int stk__source_open(const char *url, const struct stk__source_config *cfg,
                     struct stk__source **out, struct stk__err *err)
{
    static const struct stk__source_config defaults = {0};
    if (cfg == NULL)
        cfg = &defaults;
    *out = NULL;
    if (strncmp(url, "file://", 7) == 0)
        return stk__source_file_open(url, url + 7, cfg->jumps, out, err);
    if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0)
        return stk__source_http_open(url, NULL, cfg, out, err);
    if (stk__cloud_is_url(url))
        return stk__source_cloud_open(url, cfg, out, err);
    if (strncmp(url, "pipe:", 5) == 0)
        return stk__source_pipe_open(url, cfg, out, err);
    if (has_scheme(url)) {
        const char *colon = strchr(url, ':');
        char shown[512];
        stk__redact_url(url, shown, sizeof shown);
        return stk__errf(err, STK_EINVAL, "%s: URL scheme '%.*s' is not supported by this build",
                         shown, (int)(colon - url), url);
    }
    return stk__source_file_open(url, url, cfg->jumps, out, err);
}

int stk__source_check(const char *url, const char *shown, struct stk__err *err)
{
    if (!stk__source_is_local(url))
        return 0;
    return stk__source_file_check(shown, strncmp(url, "file://", 7) == 0 ? url + 7 : url, err);
}

int stk__source_local_stamp(const char *url, struct stk__shard_stamp *out)
{
    if (!stk__source_is_local(url))
        return 0;
    return stk__source_file_stamp(strncmp(url, "file://", 7) == 0 ? url + 7 : url, out);
}

int stk__stamp_differs(const struct stk__shard_stamp *recorded, const struct stk__shard_stamp *now,
                       char *why, size_t cap)
{
    if (recorded->has_size && now->has_size && recorded->size != now->size)
        snprintf(why, cap, "the shard has %llu bytes, the index records %llu",
                 (unsigned long long)now->size, (unsigned long long)recorded->size);
    else if (recorded->mtime_ns != 0 && now->mtime_ns != 0 && recorded->mtime_ns != now->mtime_ns)
        snprintf(why, cap, "the shard was modified at %llu.%09llu, the index records %llu.%09llu "
                 "(seconds since 1970; a copy that keeps times, cp -p or rsync -t, keeps it valid)",
                 (unsigned long long)(now->mtime_ns / 1000000000u),
                 (unsigned long long)(now->mtime_ns % 1000000000u),
                 (unsigned long long)(recorded->mtime_ns / 1000000000u),
                 (unsigned long long)(recorded->mtime_ns % 1000000000u));
    else if (recorded->etag[0] != '\0' && now->etag[0] != '\0' &&
             strcmp(recorded->etag, now->etag) != 0)
        snprintf(why, cap, "its ETag is %s, the index records %s", now->etag, recorded->etag);
    else
        return 0;
    return 1;
}

ssize_t stk__source_read(struct stk__source *src, void *buf, size_t cap)
{
    ssize_t n = src->ops->read(src, buf, cap);
    if (n > 0)
        src->bytes_read += (uint64_t)n;
    return n;
}

void stk__source_close(struct stk__source *src)
{
    if (src != NULL)
        src->ops->close(src);
}

struct memory_source {
    struct stk__source base;
    const unsigned char *data;
    size_t size;
    size_t pos;
    size_t chunk;
};

static ssize_t memory_read(struct stk__source *src, void *buf, size_t cap)
{
    struct memory_source *m = (struct memory_source *)src;
    size_t n = m->size - m->pos;
    if (n > cap)
        n = cap;
    if (m->chunk && n > m->chunk)
        n = m->chunk;
    memcpy(buf, m->data + m->pos, n);
    m->pos += n;
    return (ssize_t)n;
}

static void memory_close(struct stk__source *src)
{
    stk__free(src);
}

static int64_t memory_skip(struct stk__source *src, uint64_t n)
{
    struct memory_source *m = (struct memory_source *)src;
    uint64_t left = m->size - m->pos;
    if (n > left)
        n = left;
    m->pos += (size_t)n;
    return (int64_t)n;
}

static const struct stk__source_ops memory_ops = {memory_read, memory_close, memory_skip};

int stk__source_open_memory(const char *url, const void *data, size_t size, size_t chunk,
                            struct stk__source **out)
{
    struct memory_source *m = stk__calloc(1, sizeof *m);
    *out = NULL;
    if (m == NULL)
        return STK_ENOMEM;
    m->base.ops = &memory_ops;
    m->base.url = url;
    m->data = data;
    m->size = size;
    m->chunk = chunk;
    *out = &m->base;
    return 0;
}

int stk__layer_init(struct stk__layer *l, const struct stk__source_ops *ops,
                    struct stk__source *inner, const void *head, size_t head_len,
                    struct stk__err *err)
{
    const size_t min_input = (size_t)64 << 10;
    l->base.ops = ops;
    l->base.url = inner->url;
    l->inner = inner;
    /* The first read may have brought more than a usual read does. */
    l->input_bytes = head_len > min_input ? head_len : min_input;
    l->input = stk__malloc(l->input_bytes);
    if (l->input == NULL)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory for a decompressor", inner->url);
    if (head_len > 0)
        memcpy(l->input, head, head_len);
    l->head_len = head_len;
    return 0;
}

void stk__layer_release(struct stk__layer *l)
{
    stk__source_close(l->inner);
    stk__free(l->input);
}
