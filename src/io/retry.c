/* SPDX-License-Identifier: MIT */
/*
 * retry.c - the retry policy of remote sources.
 */
#include "io/retry.h"

int stk__retry_http_status(long status)
{
    return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

uint64_t stk__backoff_ms(unsigned attempt, unsigned base_ms, uint64_t retry_after_ms,
                         uint64_t random)
{
    uint64_t delay = base_ms;
    for (unsigned i = 1; i < attempt && delay < STK__BACKOFF_CAP_MS; i++)
        delay *= 2;
    if (delay > STK__BACKOFF_CAP_MS)
        delay = STK__BACKOFF_CAP_MS;
    uint64_t half = delay / 2;
    delay = half + (half > 0 ? random % (half + 1) : 0);
    if (retry_after_ms > delay)
        delay = retry_after_ms < STK__BACKOFF_CAP_MS ? retry_after_ms : STK__BACKOFF_CAP_MS;
    return delay;
}

void stk__rate_init(struct stk__rate_window *w, uint64_t window_ns, uint64_t min_rate)
{
    *w = (struct stk__rate_window){.window_ns = window_ns, .min_rate = min_rate};
}

int stk__rate_add(struct stk__rate_window *w, uint64_t ns, uint64_t bytes, uint64_t *rate)
{
    w->waited_ns += ns;
    w->bytes += bytes;
    if (w->min_rate == 0 || w->window_ns == 0 || w->waited_ns < w->window_ns)
        return 0;
    /* bytes / seconds, without overflow for any realistic count */
    uint64_t seen = (uint64_t)((double)w->bytes * 1e9 / (double)w->waited_ns);
    w->waited_ns = 0;
    w->bytes = 0;
    if (seen >= w->min_rate)
        return 0;
    *rate = seen;
    return 1;
}
