/* SPDX-License-Identifier: MIT */
/*
 * source_cloud.c - open an object store shard through the HTTP source.
 *
 * The HTTP source is wrapped for one thing: temporary credentials that a
 * server refuses (401/403; say revoked, or expired while a Range resume was
 * due) are replaced once, through the credential cache, and the object is
 * asked again from where it stopped. Static keys are not retried: a 403 to
 * them is the answer. A refusal names where the credentials came from, so
 * "no credentials were found" reads as such.
 */
#include "io/source_cloud.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "io/cloud_request.h"
#include "io/cred_cache.h"
#include "io/redact.h"
#include "io/source_http.h"
#include "io/source_seek.h"
#include "stoker.h"

struct cloud_source {
    struct stk__source base;
    struct stk__source *inner;
    char *url;
    char *shown; /* url redacted: names the source between two inner ones */
    struct stk__source_config cfg;
    enum stk__cloud_provider provider;
    unsigned long generation; /* of the credentials inner was signed with; 0: static */
    char creds_source[512];
    uint64_t delivered;
    int retried;
};

static int open_inner(struct cloud_source *s, struct stk__err *err)
{
    struct stk__cloud_request r;
    int rc = stk__cloud_request_init(&r, s->url, NULL, s->cfg.counters, err);
    if (rc == 0) {
        s->provider = r.provider;
        s->generation = r.generation;
        snprintf(s->creds_source, sizeof s->creds_source, "%s", r.source);
        rc = stk__source_http_open(r.url, &r.http, &s->cfg, &s->inner, err);
    }
    stk__cloud_request_free(&r);
    if (rc == 0)
        s->base.url = s->inner->url;
    return rc;
}

/* After a refusal: one new request with new credentials, at the offset
 * already delivered. */
static int reopen(struct cloud_source *s)
{
    stk__cred_cache_reject(s->provider, s->generation);
    s->inner->ops->close(s->inner);
    s->inner = NULL;
    s->base.url = s->shown; /* until the new source names it */
    int rc = open_inner(s, &s->base.err);
    if (rc == 0 && s->delivered > 0)
        rc = stk__source_seek(s->inner, s->delivered);
    if (rc < 0 && s->inner != NULL)
        s->base.err = s->inner->err;
    return rc;
}

static ssize_t cloud_read(struct stk__source *src, void *buf, size_t cap)
{
    struct cloud_source *s = (struct cloud_source *)src;
    for (;;) {
        if (s->inner == NULL)
            return s->base.err.code < 0 ? s->base.err.code : STK_EINTERNAL;
        ssize_t n = s->inner->ops->read(s->inner, buf, cap);
        s->base.stamp = s->inner->stamp;
        if (n >= 0) {
            s->delivered += (uint64_t)n;
            return n;
        }
        s->base.err = s->inner->err;
        if (n != STK_EACCESS)
            return n;
        if (s->generation != 0 && !s->retried) {
            s->retried = 1;
            int rc = reopen(s);
            if (rc < 0)
                return rc;
            continue;
        }
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", s->base.err.msg);
        return stk__errf(&s->base.err, (int)n, "%.700s (credentials: %.300s)", why,
                         s->creds_source[0] ? s->creds_source : "none");
    }
}

static int64_t cloud_skip(struct stk__source *src, uint64_t n)
{
    struct cloud_source *s = (struct cloud_source *)src;
    if (s->inner == NULL || s->inner->ops->skip == NULL)
        return 0;
    int64_t k = s->inner->ops->skip(s->inner, n);
    if (k > 0)
        s->delivered += (uint64_t)k;
    if (k < 0)
        s->base.err = s->inner->err;
    return k;
}

static void cloud_close(struct stk__source *src)
{
    struct cloud_source *s = (struct cloud_source *)src;
    if (s->inner != NULL)
        s->inner->ops->close(s->inner);
    stk__free(s->url);
    stk__free(s->shown);
    stk__free(s);
}

static const struct stk__source_ops cloud_ops = {cloud_read, cloud_close, cloud_skip};

int stk__source_cloud_open(const char *url, const struct stk__source_config *cfg,
                           struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    struct cloud_source *s = stk__calloc(1, sizeof *s);
    if (s == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory");
    s->base.ops = &cloud_ops;
    s->url = stk__strdup(url);
    s->shown = stk__redact_url_dup(url);
    if (s->url == NULL || s->shown == NULL) {
        cloud_close(&s->base);
        return stk__errf(err, STK_ENOMEM, "out of memory");
    }
    s->cfg = *cfg;
    int rc = open_inner(s, err);
    if (rc < 0) {
        cloud_close(&s->base);
        return rc;
    }
    s->base.stamp = s->inner->stamp;
    *out = &s->base;
    return 0;
}
