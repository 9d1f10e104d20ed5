/* SPDX-License-Identifier: MIT */
/*
 * cloud_list.h - expand "s3://bucket/prefix/" and "gs://bucket/prefix/"
 * into the shards stored under the prefix (ListObjectsV2).
 */
#ifndef STK_CLOUD_LIST_H
#define STK_CLOUD_LIST_H

#include "base/error.h"
#include "stoker.h"
#include "io/source.h"
#include "list/urls.h"

/* 1 if url is an s3:// or gs:// URL ending in '/': a prefix to list. */
int stk__cloud_is_prefix(const char *url);

/* Append to out "SCHEME://bucket/KEY" for every object under prefix_url
 * whose name ends in .tar, .tgz or .tar.{gz,bz2,xz,zst,lz4}, sorted
 * (strcmp). Follows continuation tokens to the end of the listing; the page
 * size is the server's (1000) unless $STOKER_LIST_MAX_KEYS says less.
 * Requests go through the HTTP source, so they are signed, retried and
 * time out as shards do (cfg). Fails, naming the redacted prefix URL, on an
 * HTTP error (403, 404, ...), a malformed response, or no shard. */
int stk__cloud_list(const char *prefix_url, const struct stk__source_config *cfg,
                    struct stk__strlist *out, struct stk__err *err);

/* Replace each prefix URL of urls, in place and in order, by its listing. */
int stk__cloud_expand_prefixes(struct stk__strlist *urls, const struct stk__source_config *cfg,
                               struct stk__err *err);

/* What the loader, the index builder and verify do with the user's URLs:
 * stk__expand_urls(), then stk__cloud_expand_prefixes() with the I/O
 * settings of opts (timeout, retries, backoff, CA bundle). names, when not
 * NULL, receives index for index the redacted form of every URL (redact.h):
 * the name samples and messages give the shard, which the caller keeps as
 * long as any sample read from it may live. On failure both lists are left
 * empty. */
int stk__expand_and_list(const struct stk_options *opts, const char *const *patterns, size_t n,
                         struct stk__strlist *out, struct stk__strlist *names,
                         struct stk__err *err);

#endif
