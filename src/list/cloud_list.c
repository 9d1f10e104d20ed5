/* SPDX-License-Identifier: MIT */
/*
 * cloud_list.c - list the shards under an object store prefix.
 *
 * One ListObjectsV2 request per page (GET bucket?list-type=2&prefix=P
 * [&continuation-token=T]), each fetched whole through the HTTP source
 * (signing, retries and messages as for shards) and parsed by list_xml.c.
 * GCS's XML API answers the same request; temporary credentials refused
 * mid-listing are replaced once (fetch_page). Objects that are not tar shards
 * (indexes, READMEs, "directory" markers) are left out.
 */
#include "list/cloud_list.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/cloud_request.h"
#include "io/cred_cache.h"
#include "list/list_xml.h"
#include "io/redact.h"
#include "io/source_http.h"
#include "stoker.h"

/* A 1000-key page is a few hundred KiB; this only stops a runaway server. */
#define MAX_PAGE_BYTES (64u << 20)
#define SUFFIXES ".tar, .tgz, .tar.gz, .tar.bz2, .tar.xz, .tar.zst, .tar.lz4"

static const char *const shard_suffixes[] = {".tar",     ".tgz",    ".tar.gz", ".tar.bz2",
                                             ".tar.xz", ".tar.zst", ".tar.lz4"};

int stk__cloud_is_prefix(const char *url)
{
    size_t n = strlen(url);
    return stk__cloud_is_url(url) && n > 5 && url[n - 1] == '/';
}

static int is_shard(const char *key)
{
    size_t n = strlen(key);
    for (size_t i = 0; i < sizeof shard_suffixes / sizeof shard_suffixes[0]; i++) {
        size_t k = strlen(shard_suffixes[i]);
        if (n > k && strcmp(key + n - k, shard_suffixes[i]) == 0)
            return 1;
    }
    return 0;
}

/* GET the whole body of one request into a new buffer (NUL-terminated). */
static int fetch(const struct stk__cloud_request *r, const struct stk__source_config *cfg,
                 char **body, size_t *len, struct stk__err *err)
{
    struct stk__source *src = NULL;
    *body = NULL;
    *len = 0;
    int rc = stk__source_http_open(r->url, &r->http, cfg, &src, err);
    size_t cap = 0;
    while (rc == 0) {
        if (cap - *len < 65536) {
            size_t grown = cap ? 2 * cap : 262144;
            char *b = grown <= MAX_PAGE_BYTES + 65536 ? stk__realloc(*body, grown) : NULL;
            if (b == NULL) {
                rc = grown > MAX_PAGE_BYTES + 65536
                         ? stk__errf(err, STK_ELIMIT, "%s: listing page larger than %u MiB",
                                     src->url, MAX_PAGE_BYTES >> 20)
                         : stk__errf(err, STK_ENOMEM, "out of memory listing %s", src->url);
                break;
            }
            *body = b;
            cap = grown;
        }
        ssize_t n = stk__source_read(src, *body + *len, cap - *len - 1);
        if (n < 0) {
            *err = src->err;
            rc = (int)n;
        } else if (n == 0) {
            (*body)[*len] = '\0';
            break;
        }
        *len += n > 0 ? (size_t)n : 0;
    }
    stk__source_close(src);
    if (rc < 0) {
        stk__free(*body);
        *body = NULL;
    }
    return rc;
}

/* One page: a request signed with the current credentials, and when a
 * server refuses temporary ones (401/403; revoked, or expired while the
 * listing went on), one more with new ones, as source_cloud.c does for
 * objects. Static keys are not retried: a 403 to them is the answer. */
static int fetch_page(const char *prefix_url, const char *query,
                      const struct stk__source_config *cfg, char **body, size_t *len,
                      struct stk__err *err)
{
    int rc = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        struct stk__cloud_request r;
        rc = stk__cloud_request_init(&r, prefix_url, query, cfg->counters, err);
        if (rc < 0)
            return rc;
        rc = fetch(&r, cfg, body, len, err);
        enum stk__cloud_provider provider = r.provider;
        unsigned long generation = r.generation;
        char source[sizeof r.source];
        snprintf(source, sizeof source, "%s", r.source);
        stk__cloud_request_free(&r);
        if (rc != STK_EACCESS)
            return rc;
        if (generation == 0 || attempt == 1) {
            char why[STK__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            return stk__errf(err, rc, "%.700s (credentials: %.300s)", why,
                             source[0] ? source : "none");
        }
        stk__cred_cache_reject(provider, generation);
    }
    return rc;
}

/* Page size from $STOKER_LIST_MAX_KEYS (tests use it to force several
 * pages); 0: the server's default. */
static long max_keys(void)
{
    const char *s = getenv("STOKER_LIST_MAX_KEYS");
    char *end = NULL;
    long v = s != NULL ? strtol(s, &end, 10) : 0;
    return s != NULL && *end == '\0' && v > 0 && v <= 1000 ? v : 0;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Prefix a message with what was being done: "LISTING: detail". */
static int context(struct stk__err *err, const char *shown, int rc)
{
    char why[STK__ERRMSG_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    /* The HTTP source's messages already start with the prefix URL. */
    size_t n = strlen(shown);
    if (strncmp(why, shown, n) == 0 && why[n] == ':')
        return stk__errf(err, rc, "%s (listing the prefix)", why);
    return stk__errf(err, rc, "%s: %s (listing the prefix)", shown, why);
}

int stk__cloud_list(const char *prefix_url, const struct stk__source_config *cfg,
                    struct stk__strlist *out, struct stk__err *err)
{
    struct stk__cloud_url u;
    int rc = stk__cloud_url_parse(prefix_url, &u, err);
    if (rc < 0)
        return rc;
    char *shown = stk__redact_url_dup(prefix_url);
    struct stk__strlist found = {0};
    char *token = NULL;
    size_t listed = 0;
    char keys[16];
    snprintf(keys, sizeof keys, "%ld", max_keys());
    if (shown == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory listing a prefix");
    do {
        const char *kv[8] = {"list-type", "2", "prefix", u.key};
        size_t n = 2;
        if (keys[0] != '0') {
            kv[2 * n] = "max-keys", kv[2 * n + 1] = keys;
            n++;
        }
        if (token != NULL) {
            kv[2 * n] = "continuation-token", kv[2 * n + 1] = token;
            n++;
        }
        char *query = stk__canonical_query(kv, n);
        char *body = NULL;
        size_t len = 0;
        rc = query == NULL ? stk__errf(err, STK_ENOMEM, "out of memory")
                           : fetch_page(prefix_url, query, cfg, &body, &len, err);
        stk__free(query);
        struct stk__list_page page = {0};
        if (rc == 0)
            rc = stk__list_parse(body, len, &page, err);
        stk__free(body);
        for (size_t i = 0; rc == 0 && i < page.keys.count; i++) {
            const char *key = page.keys.items[i];
            listed++;
            if (!is_shard(key))
                continue;
            if (found.count >= STK__MAX_SHARDS) {
                rc = stk__errf(err, STK_ELIMIT, "more than %u shards", STK__MAX_SHARDS);
                break;
            }
            /* "s3://" + bucket + "/" + key */
            size_t need = 5 + u.bucket_len + 1 + strlen(key) + 1;
            char *url = stk__malloc(need);
            if (url != NULL)
                snprintf(url, need, "%.5s%.*s/%s", prefix_url, (int)u.bucket_len, u.bucket, key);
            rc = url == NULL ? STK_ENOMEM : stk__strlist_push(&found, url, need - 1);
            stk__free(url);
            if (rc < 0)
                stk__errf(err, rc, "out of memory");
        }
        stk__free(token);
        token = NULL;
        if (rc == 0 && page.truncated) {
            if (page.next_token == NULL)
                rc = stk__errf(err, STK_EFORMAT,
                               "bad listing response: truncated without a NextContinuationToken");
            token = page.next_token;
            page.next_token = NULL;
        }
        stk__list_page_free(&page);
    } while (rc == 0 && token != NULL);
    if (rc < 0)
        context(err, shown, rc);
    else if (found.count == 0)
        rc = stk__errf(err, STK_ENOENT, "%s: no shards (%s) under this prefix (%zu object%s)",
                       shown, SUFFIXES, listed, listed == 1 ? "" : "s");
    if (rc == 0)
        qsort(found.items, found.count, sizeof *found.items, by_name);
    for (size_t i = 0; rc == 0 && i < found.count; i++)
        if (stk__strlist_push(out, found.items[i], strlen(found.items[i])) < 0)
            rc = stk__errf(err, STK_ENOMEM, "out of memory listing %s", shown);
    stk__free(token);
    stk__strlist_free(&found);
    stk__free(shown);
    return rc;
}

int stk__cloud_expand_prefixes(struct stk__strlist *urls, const struct stk__source_config *cfg,
                               struct stk__err *err)
{
    size_t i = 0;
    for (; i < urls->count; i++)
        if (stk__cloud_is_prefix(urls->items[i]))
            break;
    if (i == urls->count)
        return 0; /* nothing to list: the common case costs one scan */
    struct stk__strlist expanded = {0};
    int rc = 0;
    for (i = 0; rc == 0 && i < urls->count; i++) {
        const char *u = urls->items[i];
        if (stk__cloud_is_prefix(u))
            rc = stk__cloud_list(u, cfg, &expanded, err);
        else if (stk__strlist_push(&expanded, u, strlen(u)) < 0)
            rc = stk__errf(err, STK_ENOMEM, "out of memory expanding URLs");
    }
    if (rc == 0 && expanded.count > STK__MAX_SHARDS)
        rc = stk__errf(err, STK_ELIMIT, "the URLs name more than %u shards", STK__MAX_SHARDS);
    if (rc < 0) {
        stk__strlist_free(&expanded);
        return rc;
    }
    stk__strlist_free(urls);
    *urls = expanded;
    return 0;
}

int stk__expand_and_list(const struct stk_options *opts, const char *const *patterns, size_t n,
                         struct stk__strlist *out, struct stk__strlist *names,
                         struct stk__err *err)
{
    int rc = stk__expand_urls(patterns, n, out, err);
    const struct stk__source_config cfg = {
        .io_timeout_ms = opts->io_timeout_ms,
        .io_retries = opts->io_retries,
        .io_backoff_ms = opts->io_backoff_ms,
        .io_min_rate = opts->io_min_rate,
        .allow_pipe = 0,
        .ca_bundle = opts->ca_bundle,
        .counters = NULL,
        .cancel = NULL,
    };
    if (rc == 0)
        rc = stk__cloud_expand_prefixes(out, &cfg, err);
    for (size_t i = 0; rc == 0 && names != NULL && i < out->count; i++) {
        char *shown = stk__redact_url_dup(out->items[i]);
        if (shown == NULL || stk__strlist_push(names, shown, strlen(shown)) < 0)
            rc = stk__errf(err, STK_ENOMEM, "out of memory naming %zu shards", out->count);
        stk__free(shown);
    }
    if (rc < 0) {
        stk__strlist_free(out);
        if (names != NULL)
            stk__strlist_free(names);
    }
    return rc;
}
