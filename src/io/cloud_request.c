/* SPDX-License-Identifier: MIT */
/*
 * cloud_request.c - the HTTP request behind an s3:// or gs:// URL.
 *
 * Addressing. S3 with AWS_ENDPOINT_URL (MinIO, s3rver, ...) is path-style,
 * ENDPOINT/bucket/key; AWS itself is virtual-hosted,
 * https://bucket.s3.REGION.amazonaws.com/key (path-style for bucket names
 * with dots, which break the TLS wildcard). GCS is always path-style on
 * https://storage.googleapis.com (or STOKER_GCS_ENDPOINT).
 *
 * Signing. libcurl's CURLOPT_AWS_SIGV4 computes AWS Signature V4 with the
 * key id and secret given as CURLOPT_USERPWD, for every attempt, so a retry
 * or a Range resume carries a fresh x-amz-date. Two gaps of libcurl 7.88
 * are filled here: it does not send x-amz-content-sha256, which S3 requires
 * (we send the SHA-256 of the empty body, which is also the payload hash
 * libcurl puts in its canonical request for a GET: the two must agree), and
 * it signs the query string as written, so listings build theirs already
 * canonical (stk__canonical_query). GCS accepts the same AWS4-HMAC-SHA256
 * signatures from HMAC keys (its "interoperability" mode, region "auto",
 * service "s3"), so one signer serves both; an OAuth bearer token is the
 * other GCS option.
 */
#include "io/cloud_request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/redact.h"
#include "stoker.h"

#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
#define GCS_ENDPOINT "https://storage.googleapis.com"
#define MAX_BUCKET 222 /* GCS's limit; S3's is 63 */

int stk__cloud_is_url(const char *url)
{
    return strncmp(url, "s3://", 5) == 0 || strncmp(url, "gs://", 5) == 0;
}

int stk__cloud_url_parse(const char *url, struct stk__cloud_url *u, struct stk__err *err)
{
    memset(u, 0, sizeof *u);
    if (!stk__cloud_is_url(url))
        return stk__errf(err, STK_EINVAL, "'%.200s' is not an s3:// or gs:// URL", url);
    u->provider = url[0] == 's' ? STK__CLOUD_S3 : STK__CLOUD_GCS;
    u->bucket = url + 5;
    u->bucket_len = strcspn(u->bucket, "/");
    u->key = u->bucket + u->bucket_len + (u->bucket[u->bucket_len] == '/');
    /* The bucket becomes part of a host name or a path: only the characters
     * bucket names may have, so nothing can change the request's target. */
    int ok = u->bucket_len > 0 && u->bucket_len <= MAX_BUCKET;
    for (size_t i = 0; ok && i < u->bucket_len; i++) {
        char c = u->bucket[i];
        ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
             c == '.' || c == '-' || c == '_';
    }
    if (!ok) {
        char shown[512];
        stk__redact_url(url, shown, sizeof shown);
        return stk__errf(err, STK_EINVAL, "%s: not a valid bucket name (want %.2s://BUCKET/KEY)",
                         shown, url);
    }
    return 0;
}

static int unreserved(unsigned char c, int keep_slash)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/');
}

char *stk__uri_encode(const char *s, size_t n, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    char *out = stk__malloc(3 * n + 1);
    if (out == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (unreserved(c, keep_slash)) {
            out[k++] = (char)c;
        } else {
            out[k++] = '%';
            out[k++] = hex[c >> 4];
            out[k++] = hex[c & 15];
        }
    }
    out[k] = '\0';
    return out;
}

static int compare_pairs(const void *a, const void *b)
{
    char *const *x = a, *const *y = b;
    int c = strcmp(x[0], y[0]);
    return c != 0 ? c : strcmp(x[1], y[1]);
}

char *stk__canonical_query(const char *const *kv, size_t n)
{
    char **enc = stk__calloc(2 * n + 1, sizeof *enc);
    char *out = NULL;
    if (enc == NULL)
        return NULL;
    size_t len = 1;
    for (size_t i = 0; i < 2 * n; i++) {
        enc[i] = stk__uri_encode(kv[i], strlen(kv[i]), 0);
        if (enc[i] == NULL)
            goto out;
        len += strlen(enc[i]) + 1;
    }
    qsort(enc, n, 2 * sizeof *enc, compare_pairs);
    out = stk__malloc(len);
    if (out == NULL)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%s=%s", i ? "&" : "", enc[2 * i],
                              enc[2 * i + 1]);
out:
    for (size_t i = 0; i < 2 * n; i++)
        stk__free(enc[i]);
    stk__free(enc);
    return out;
}

/* vsnprintf into a new allocation; NULL when out of memory. */
static char *format(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *format(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? stk__malloc((size_t)n + 1) : NULL;
    if (s != NULL) {
        va_start(ap, fmt);
        vsnprintf(s, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    return s;
}

static void wipe_free(char *s)
{
    if (s == NULL)
        return;
    volatile char *p = s;
    while (*p != '\0')
        *p++ = '\0';
    stk__free(s);
}

/* The endpoint URL of the object (query NULL) or of the bucket listing. */
static char *endpoint_url(const struct stk__cloud_url *u, const struct stk__cloud_creds *c,
                          const char *query)
{
    int b = (int)u->bucket_len;
    const char *base = c->endpoint;
    if (base[0] == '\0' && u->provider == STK__CLOUD_GCS)
        base = GCS_ENDPOINT;
    /* root names the bucket; a virtual host's root path is "/". */
    char *root;
    int virtual_host = 0;
    if (base[0] != '\0')
        root = format("%s/%.*s", base, b, u->bucket);
    else if (memchr(u->bucket, '.', u->bucket_len) != NULL)
        root = format("https://s3.%s.amazonaws.com/%.*s", c->region, b, u->bucket);
    else
        root = format("https://%.*s.s3.%s.amazonaws.com", b, u->bucket, c->region),
        virtual_host = 1;
    char *key = stk__uri_encode(u->key, strlen(u->key), 1);
    char *url = NULL;
    if (root != NULL && key != NULL)
        url = query != NULL ? format("%s%s?%s", root, virtual_host ? "/" : "", query)
                            : format("%s/%s", root, key);
    stk__free(root);
    stk__free(key);
    return url;
}

int stk__cloud_request_init(struct stk__cloud_request *r, const char *cloud_url,
                            const char *query, struct stk__counters *counters,
                            struct stk__err *err)
{
    memset(r, 0, sizeof *r);
    struct stk__cloud_url u;
    int rc = stk__cloud_url_parse(cloud_url, &u, err);
    if (rc < 0)
        return rc;
    struct stk__cloud_creds *c = stk__calloc(1, sizeof *c);
    if (c == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory");
    rc = stk__cloud_creds_load(u.provider, c, counters, err);
    if (rc < 0) {
        char shown[512];
        stk__redact_url(cloud_url, shown, sizeof shown);
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        stk__errf(err, rc, "%s: %s", shown, why);
        goto out;
    }
    r->provider = u.provider;
    r->generation = c->generation;
    snprintf(r->source, sizeof r->source, "%s", c->source);
    r->url = endpoint_url(&u, c, query);
    int nomem = r->url == NULL;
    if (c->key_id[0] != '\0') {
        snprintf(r->sigv4, sizeof r->sigv4, "aws:amz:%s:s3", c->region);
        r->userpwd = format("%s:%s", c->key_id, c->secret);
        r->headers[r->n_headers++] = format("x-amz-content-sha256: %s", EMPTY_SHA256);
        if (c->token[0] != '\0')
            r->headers[r->n_headers++] = format("x-amz-security-token: %s", c->token);
        nomem |= r->userpwd == NULL;
    } else if (c->bearer[0] != '\0') {
        r->headers[r->n_headers++] = format("Authorization: Bearer %s", c->bearer);
    }
    for (size_t i = 0; i < r->n_headers; i++)
        nomem |= r->headers[i] == NULL;
    if (nomem) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        goto out;
    }
    r->http.display_url = cloud_url;
    r->http.headers = (const char *const *)r->headers;
    r->http.n_headers = r->n_headers;
    r->http.aws_sigv4 = r->sigv4[0] != '\0' ? r->sigv4 : NULL;
    r->http.userpwd = r->userpwd;
out:
    stk__cloud_creds_wipe(c);
    stk__free(c);
    if (rc < 0)
        stk__cloud_request_free(r);
    return rc;
}

void stk__cloud_request_free(struct stk__cloud_request *r)
{
    stk__free(r->url);
    for (size_t i = 0; i < sizeof r->headers / sizeof r->headers[0]; i++)
        wipe_free(r->headers[i]);
    wipe_free(r->userpwd);
    memset(r, 0, sizeof *r);
}
