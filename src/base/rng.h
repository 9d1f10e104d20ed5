/* SPDX-License-Identifier: MIT */
/*
 * rng.h - deterministic random numbers.
 *
 * Every random choice in stoker derives from the user's seed through
 * stk__mix(), so sequences depend only on (seed, epoch, rank, ...) and never
 * on thread scheduling. The generator is SplitMix64: tiny state, good
 * statistical quality for shuffling, and trivially seekable.
 */
#ifndef STK_RNG_H
#define STK_RNG_H

#include <stdint.h>

struct stk__rng {
    uint64_t state;
};

/* Hash several words into one seed (order matters). */
uint64_t stk__mix(uint64_t a, uint64_t b);

void stk__rng_seed(struct stk__rng *r, uint64_t seed);
uint64_t stk__rng_next(struct stk__rng *r);
/* Uniform in [0, bound), bound > 0, without modulo bias (Lemire). */
uint64_t stk__rng_below(struct stk__rng *r, uint64_t bound);

#endif
