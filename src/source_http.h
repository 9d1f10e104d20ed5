/*
 * source_http.h - http:// and https:// shards streamed with libcurl.
 */
#ifndef STK_SOURCE_HTTP_H
#define STK_SOURCE_HTTP_H

#include "source.h"

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

/* Start streaming url (with any credentials it carries; messages name it,
 * or req->display_url, redacted). req NULL: a plain GET. The request is sent
 * at once; the first read waits for the response. url need only live until
 * this returns. */
int stk__source_http_open(const char *url, const struct stk__http_request *req,
                          const struct stk__source_config *cfg, struct stk__source **out,
                          struct stk__err *err);

#endif
