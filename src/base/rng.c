/* SPDX-License-Identifier: MIT */
/*
 * rng.c - SplitMix64 and an unbiased bounded draw.
 */
#include "base/rng.h"

static uint64_t splitmix_finalize(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t stk__mix(uint64_t a, uint64_t b)
{
    return splitmix_finalize(splitmix_finalize(a + 0x9e3779b97f4a7c15ull) ^ b);
}

void stk__rng_seed(struct stk__rng *r, uint64_t seed)
{
    r->state = seed;
}

uint64_t stk__rng_next(struct stk__rng *r)
{
    r->state += 0x9e3779b97f4a7c15ull;
    return splitmix_finalize(r->state);
}

uint64_t stk__rng_below(struct stk__rng *r, uint64_t bound)
{
    /* Lemire's multiply-shift with rejection of the biased low range. */
    unsigned __int128 m = (unsigned __int128)stk__rng_next(r) * bound;
    uint64_t low = (uint64_t)m;
    if (low < bound) {
        uint64_t threshold = -bound % bound;
        while (low < threshold) {
            m = (unsigned __int128)stk__rng_next(r) * bound;
            low = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}
