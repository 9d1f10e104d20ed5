/* SPDX-License-Identifier: MIT */
/*
 * cred_cache.h - one copy per process of the temporary credentials a
 * platform hands out (cred_gcs.h, cred_aws.h), renewed before they expire.
 */
#ifndef STK_CRED_CACHE_H
#define STK_CRED_CACHE_H

#include "io/cloud_creds.h"

struct stk__counters;

/* Copy the provider's current temporary credentials into c's key_id,
 * secret, token, bearer, source, expires_ms and generation (region and
 * endpoint are left alone). The first call of the process, a change of the
 * variables that pick the source, or credentials within their refresh
 * margin (a quarter of their lifetime, at most 5 minutes, before expiry)
 * fetch anew, in one thread while the others go on with the credentials
 * still valid or wait for the new ones; a fetch that gets no answer is
 * tried 4 times with backoff. counters->cred_refreshes (counters may be
 * NULL) counts the fetches this caller made.
 * 1 with credentials; 0 when no source exists (c->source names what was
 * tried; requests go unsigned); <0 with err naming the source. Thread-safe. */
int stk__cred_cache_get(enum stk__cloud_provider provider, struct stk__cloud_creds *c,
                        struct stk__counters *counters, struct stk__err *err);

/* A server refused credentials of this generation (401/403): the next
 * stk__cred_cache_get() fetches new ones, unless another thread did
 * already. Thread-safe. */
void stk__cred_cache_reject(enum stk__cloud_provider provider, unsigned long generation);

#endif
