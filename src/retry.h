/*
 * retry.h - which failed requests are worth repeating, and when.
 *
 * Pure functions (no I/O, no clock) so the policy is unit-tested and every
 * remote source (http(s), and s3/gs through it) shares one policy.
 */
#ifndef STK_RETRY_H
#define STK_RETRY_H

#include <stdint.h>

/* Longest wait between two attempts, whatever the base and attempt. */
#define STK__BACKOFF_CAP_MS 20000u

/* 1 if an HTTP status is transient: 408, 429 and every 5xx. Other 4xx
 * (403 Forbidden, 404 Not Found, ...) are answers, not accidents. */
int stk__retry_http_status(long status);

/* Delay before retry number `attempt` (1 = the first retry): exponential
 * backoff base * 2^(attempt-1), capped at STK__BACKOFF_CAP_MS, with "equal
 * jitter" (half fixed, half drawn from `random`), so clients that failed
 * together do not come back together. A server's Retry-After (retry_after_ms
 * > 0) raises the delay to at least that much, within the cap. */
uint64_t stk__backoff_ms(unsigned attempt, unsigned base_ms, uint64_t retry_after_ms,
                         uint64_t random);

#endif
