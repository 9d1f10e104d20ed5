/* SPDX-License-Identifier: MIT */
/*
 * curl_shared.h - libcurl state shared by every remote source of the
 * process: global init, the DNS/TLS-session share, and idle transfer
 * handles that keep their connections open for the next shard.
 */
#ifndef STK_CURL_SHARED_H
#define STK_CURL_SHARED_H

#include <curl/curl.h>

#include "base/error.h"

/* One transfer's handles. The multi handle owns the connection cache, so a
 * pair taken from the pool reconnects to a host it talked to before at no
 * cost (no TCP or TLS handshake). */
struct stk__curl_pair {
    CURLM *multi;
    CURL *easy;
    struct stk__curl_pair *next; /* pool link */
};

/* Initialize libcurl once per process (thread-safe) and return the share
 * every easy handle must use, or NULL with err set. */
CURLSH *stk__curl_share(struct stk__err *err);

/* The CA bundle a transfer verifies TLS with: configured (the ca_bundle
 * option) when set, else $STOKER_CA_BUNDLE, else $CURL_CA_BUNDLE; NULL for
 * the system store. */
const char *stk__curl_ca_bundle(const char *configured);

/* A pair for one transfer: an idle one from the pool, else a new one. The
 * easy handle is reset (no options set) and not added to the multi handle.
 * NULL with err set on failure. Thread-safe. */
struct stk__curl_pair *stk__curl_pair_get(struct stk__err *err);

/* Return a pair whose easy handle is not in its multi handle. Thread-safe;
 * pairs beyond the pool's bound are freed. NULL is a no-op. */
void stk__curl_pair_put(struct stk__curl_pair *pair);

#endif
