/*
 * retry.c - the retry policy of remote sources.
 */
#include "retry.h"

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
