/* SPDX-License-Identifier: MIT */
/*
 * cloud_request.h - map s3:// and gs:// URLs to the HTTP request that
 * fetches them: endpoint URL, addressing style, signing and headers.
 *
 * The HTTP source (source_http.h) then streams, retries and resumes the
 * object like any other URL; libcurl signs every attempt (CURLOPT_AWS_SIGV4).
 */
#ifndef STK_CLOUD_REQUEST_H
#define STK_CLOUD_REQUEST_H

#include <stddef.h>

#include "io/cloud_creds.h"
#include "base/error.h"
#include "io/source_http.h"

/* 1 if url starts with s3:// or gs://. */
int stk__cloud_is_url(const char *url);

/* A parsed "s3://bucket/key" or "gs://bucket/key"; pointers into the URL. */
struct stk__cloud_url {
    enum stk__cloud_provider provider;
    const char *bucket;
    size_t bucket_len;
    const char *key; /* after "bucket/"; may be empty (a listing of the bucket) */
};

/* 0, or STK_EINVAL naming the URL when it has no bucket. */
int stk__cloud_url_parse(const char *url, struct stk__cloud_url *u, struct stk__err *err);

/* Percent-encode s per RFC 3986 (everything but A-Z a-z 0-9 - _ . ~, and
 * '/' when keep_slash) as SigV4 wants it: a new string, or NULL when out of
 * memory. */
char *stk__uri_encode(const char *s, size_t n, int keep_slash);

/* The canonical query string of SigV4: each of the n pairs (kv[2i] = key,
 * kv[2i+1] = value) encoded, sorted by key then value, joined with '&'.
 * libcurl 7.88 signs the query as it finds it in the URL, so the URL must
 * carry exactly this string. New string or NULL (out of memory). */
char *stk__canonical_query(const char *const *kv, size_t n);

/* Everything one request needs; owns its strings (secrets are wiped on
 * free). `http` points into the struct and is what stk__source_http_open()
 * takes. */
struct stk__cloud_request {
    char *url;
    char *headers[3];
    size_t n_headers;
    char sigv4[96];
    char *userpwd;
    struct stk__http_request http;
    /* Which credentials signed it (cloud_creds.h): a 401/403 answer to
     * temporary ones (generation != 0) is worth one retry with new ones. */
    enum stk__cloud_provider provider;
    unsigned long generation;
    char source[512];
};

/* Build the request for cloud_url: a GET of its object when query is NULL,
 * else a GET of its bucket with that (canonical) query string, for
 * listings. Credentials, region and endpoint come from the environment
 * (cloud_creds.h; counters as there, may be NULL). Messages name cloud_url, which display_url keeps
 * pointing to (it must outlive the request). 0 or <0 with err set. */
int stk__cloud_request_init(struct stk__cloud_request *r, const char *cloud_url,
                            const char *query, struct stk__counters *counters,
                            struct stk__err *err);

/* Free what init allocated; a zeroed request is fine. */
void stk__cloud_request_free(struct stk__cloud_request *r);

#endif
