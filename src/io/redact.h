/* SPDX-License-Identifier: MIT */
/*
 * redact.h - URLs made safe to print.
 *
 * Shard URLs may carry credentials: "user:password@" userinfo, or signed
 * query strings (X-Amz-Signature=..., sig=..., token=...). Every message,
 * log line and exception names a shard by the redacted form, produced here
 * and nowhere else, so one function decides what is secret.
 */
#ifndef STK_REDACT_H
#define STK_REDACT_H

#include <stddef.h>

/* Write the redacted form of url into out (out_size bytes including the NUL,
 * truncated if needed; out_size 0 writes nothing). Returns the length of the
 * full redacted form, like snprintf. See stk_redact_url() in stoker.h for
 * the rules. */
size_t stk__redact_url(const char *url, char *out, size_t out_size);

/* The redacted form in a new allocation (stk__free it); NULL when out of
 * memory. */
char *stk__redact_url_dup(const char *url);

#endif
