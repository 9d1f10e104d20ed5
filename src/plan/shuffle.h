/*
 * shuffle.h - the sample shuffle: a random permutation per window.
 *
 * The interleaved input is cut into windows of `capacity` samples; each
 * window is emitted in a random order drawn from (seed, window number).
 * Unlike WebDataset's buffer shuffle, where a sample's output position
 * depends on everything read before it, the output at position p depends
 * only on the input window holding p, so a resumed epoch (seek_plan.c)
 * re-reads at most one window. Memory is the same: one window of samples.
 *
 * The first windows are smaller, 64, 128, 256, ... samples up to the
 * capacity (as WebDataset's shuffle starts emitting at `initial` samples),
 * so the first batch does not wait for a whole window to be read: over a
 * 100 ms network a 1000-sample window of ImageNet JPEGs is most of a second.
 */
#ifndef STK_SHUFFLE_H
#define STK_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include "sample.h"

struct stk__shuffle {
    struct stk__sample **items;
    size_t capacity;
    size_t size;  /* of the window being filled (<= capacity) */
    size_t count; /* samples in the window */
    size_t next;  /* next to emit once the window is closed */
    int closed;
    uint64_t seed;
    uint64_t window; /* number of the window being filled */
    uint64_t bytes;  /* member bytes of the samples held */
};

/* capacity <= 1 makes the shuffle a pass-through. first_window is the
 * number of the first window filled (resume). */
int stk__shuffle_init(struct stk__shuffle *sh, size_t capacity, uint64_t seed,
                      uint64_t first_window);

/* The window holding input (and output) position `position` for a shuffle
 * of this capacity: its number and first position. */
void stk__shuffle_window_at(size_t capacity, uint64_t position, uint64_t *window,
                            uint64_t *start);

/* Add a sample to the open window; a full window closes (and is permuted).
 * Call only while stk__shuffle_pop() returns NULL: then count and bytes
 * describe the open window. */
void stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s);

/* The input ended: close the partial window. */
void stk__shuffle_finish(struct stk__shuffle *sh);

/* Next sample of the closed window, or NULL (then push or finish). */
struct stk__sample *stk__shuffle_pop(struct stk__shuffle *sh);

/* Free the buffered samples and the buffer. */
void stk__shuffle_free(struct stk__shuffle *sh);

#endif
