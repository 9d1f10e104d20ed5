/* SPDX-License-Identifier: MIT */
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

/*
 * Is a stream fast enough for its reader? Only the time the reader spends
 * waiting for bytes counts, with the bytes that came meanwhile (or were
 * already there when it asked): a consumer that reads slowly, whose stream
 * then waits in socket buffers, never makes its server look slow, while a
 * server that drips a byte at a time while the reader waits is caught.
 * Windows of window_ns of waiting are judged one after the other.
 */
struct stk__rate_window {
    uint64_t window_ns;  /* waiting time per judgement */
    uint64_t min_rate;   /* bytes per second; 0: never too slow */
    uint64_t waited_ns;  /* in the current window */
    uint64_t bytes;      /* that came in it */
};

void stk__rate_init(struct stk__rate_window *w, uint64_t window_ns, uint64_t min_rate);

/* Add ns of waiting and the bytes that came (ns may be 0: bytes that were
 * there when asked for). Returns 1 when the window is complete and brought
 * less than min_rate, with *rate the bytes per second it did bring; else 0
 * (a complete window that was fast enough starts the next). */
int stk__rate_add(struct stk__rate_window *w, uint64_t ns, uint64_t bytes, uint64_t *rate);

#endif
