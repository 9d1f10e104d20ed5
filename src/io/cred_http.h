/* SPDX-License-Identifier: MIT */
/*
 * cred_http.h - the small blocking requests that fetch credentials (token
 * endpoints, metadata servers, STS) and the helpers their answers need.
 *
 * These are a handful of requests per hour of training, made while no
 * shard depends on their speed, so each is one plain libcurl easy transfer
 * with a short timeout rather than a source (source_http.h streams shards).
 * Requests and answers hold secrets: bodies are wiped when freed, and no
 * function here puts a body, a header value or a form field in a message.
 */
#ifndef STK_CRED_HTTP_H
#define STK_CRED_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

/* An answer: status and body (NUL-terminated, at most 64 KiB). */
struct stk__cred_answer {
    long status;
    /* It carried "Metadata-Flavor: Google", which tells Google's metadata
     * server from whatever else answers at its address. */
    int google_flavor;
    char *body;
    size_t len;
};

/* Send method (GET, PUT, POST) to url with the n headers ("Name: value")
 * and body (NULL: none), waiting at most timeout_ms in all. 0 with *a
 * filled for any HTTP answer (the caller judges the status); STK_EIO when
 * no answer came (refused, timed out, DNS), naming `who` and url; STK_ENOMEM.
 * Free with stk__cred_answer_free(). */
int stk__cred_http(const char *who, const char *method, const char *url, const char *const *headers,
                   size_t n, const char *body, unsigned timeout_ms, struct stk__cred_answer *a,
                   struct stk__err *err);

/* SigV4 signing by libcurl (CURLOPT_AWS_SIGV4): provider as
 * "aws:amz:REGION:SERVICE", userpwd as "KEY_ID:SECRET". */
struct stk__cred_sigv4 {
    const char *provider;
    const char *userpwd;
};

/* stk__cred_http() of a POST signed with sign (STS AssumeRole). */
int stk__cred_http_signed(const char *who, const char *url, const char *const *headers, size_t n,
                          const char *body, unsigned timeout_ms, const struct stk__cred_sigv4 *sign,
                          struct stk__cred_answer *a, struct stk__err *err);

/* Wipe and free the body; a zeroed answer is fine. */
void stk__cred_answer_free(struct stk__cred_answer *a);

/* 1 for a status worth asking again (429, 5xx), else 0. */
int stk__cred_status_transient(long status);

/* Read a small file (a key file, a token file) into a new NUL-terminated
 * buffer of at most 1 MiB, wiped when freed with stk__cred_wipe_free().
 * NULL with err naming what (`what`, path) and why. */
char *stk__cred_read_file(const char *what, const char *path, struct stk__err *err);

/* Overwrite n bytes at p with zeros, stores the compiler may not drop. */
void stk__cred_wipe(void *p, size_t n);

/* Overwrite s (up to its NUL) and free it; NULL is a no-op. */
void stk__cred_wipe_free(char *s);

/* "2026-11-28T04:00:00Z" (RFC 3339, UTC, optional fraction) as seconds
 * since 1970, or -1 when it does not parse. */
int64_t stk__cred_parse_time(const char *s);

/* Copy src into dst[cap]: 0, or -1 (dst emptied) when it does not fit. */
int stk__cred_copy(char *dst, size_t cap, const char *src);

#endif
