/*
 * shuffle.h - the sample shuffle buffer.
 *
 * WebDataset's buffer shuffle made deterministic: once the buffer holds
 * `capacity` samples, each new sample replaces a uniformly chosen one,
 * which is emitted. The choices come from a generator seeded by the caller,
 * so the output order is a pure function of the input order and the seed.
 */
#ifndef STK_SHUFFLE_H
#define STK_SHUFFLE_H

#include <stddef.h>

#include "rng.h"
#include "sample.h"

struct stk__shuffle {
    struct stk__sample **items;
    size_t capacity;
    size_t count;
    struct stk__rng rng;
};

/* capacity <= 1 makes the buffer a pass-through. */
int stk__shuffle_init(struct stk__shuffle *sh, size_t capacity, uint64_t seed);

/* Offer a sample; returns a sample to emit now, or NULL while filling. */
struct stk__sample *stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s);

/* After the input ended: the next buffered sample in random order, or NULL. */
struct stk__sample *stk__shuffle_drain(struct stk__shuffle *sh);

/* Free the buffered samples and the buffer. */
void stk__shuffle_free(struct stk__shuffle *sh);

#endif
