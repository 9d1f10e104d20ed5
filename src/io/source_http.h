/* SPDX-License-Identifier: MIT */
/*
 * source_http.h - http:// and https:// shards streamed with libcurl.
 */
#ifndef STK_SOURCE_HTTP_H
#define STK_SOURCE_HTTP_H

#include "io/source.h"

/* How to make the request beyond a plain GET of the URL: what an object
 * store (S3, GCS) adds. Every field may be zero/NULL. The strings and the
 * header array need only live until stk__source_http_open() returns: the
 * source keeps copies (libcurl copies string options; headers are copied
 * into the source's own list). */
struct stk__http_request {
    /* Names the stream in messages instead of url (e.g. "s3://b/k" for the
     * endpoint URL it maps to); redacted like url. */
    const char *display_url;
    /* Extra request headers, "Name: value". They are sent on every attempt
     * and, with aws_sigv4, signed; they may hold secrets (tokens) and are
     * never printed. */
    const char *const *headers;
    size_t n_headers;
    /* CURLOPT_AWS_SIGV4 provider string, "aws:amz:REGION:SERVICE": libcurl
     * signs each attempt (retries and Range resumes included) afresh. */
    const char *aws_sigv4;
    /* "user:password" for the server or for signing ("KEY_ID:SECRET"). */
    const char *userpwd;
};

/* Longest origin stk__url_origin() writes. */
#define STK__URL_ORIGIN_MAX 320

/* The origin of url as libcurl parses it, "scheme://host:port" in lower
 * case with the scheme's default port filled in, into buf (cap bytes), and
 * *has_user (when not NULL) whether the URL holds a user name. 0, or -1
 * when url does not parse or the origin does not fit. Two URLs share an
 * origin when these strings are equal. */
int stk__url_origin(const char *url, char *buf, size_t cap, int *has_user);

/* Start streaming url (with any credentials it carries; messages name it,
 * or req->display_url, redacted). req NULL: a plain GET. The request is sent
 * at once; the first read waits for the response. url need only live until
 * this returns. A request that carries credentials (req headers, signing or
 * a password; a user name in url) follows redirects only within url's
 * origin and fails (STK_EHTTP) on one to another; other requests follow
 * any http(s) redirect. */
int stk__source_http_open(const char *url, const struct stk__http_request *req,
                          const struct stk__source_config *cfg, struct stk__source **out,
                          struct stk__err *err);

#endif
