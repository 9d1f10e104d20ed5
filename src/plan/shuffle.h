/* SPDX-License-Identifier: MIT */
/*
 * shuffle.h - the sample shuffle: a sliding window of random sort keys.
 *
 * DESIGN. Input sample i (its position in the interleaved input) gets the
 * sort key  base(i) + u_i * W,  with u_i uniform in [0, 1) drawn from
 * (seed, i), W = the reach (shuffle_buffer) and base(i) = max(i - W, 0).
 * Samples leave in key order: a held sample goes out once no later input
 * can have a smaller key (the next input's base is past it). So every
 * output position draws from a window of W consecutive inputs that slides
 * one sample at a time, like a reservoir of the same memory and unlike the
 * disjoint windows this replaced: those never mixed a window's last samples
 * with the next window's first ones, and ramped up from 64 samples at each
 * epoch start. Here the first W inputs share base 0, so the first batch is
 * drawn from the whole first window, as mixed as the rest. When the input
 * ends, the samples still held (about W/2, the last inputs' tail) are
 * emitted in a random order instead of key order, so the epoch's last
 * batches are as mixed as its middle.
 *
 * Alternatives weighed (bench/shuffle_designs.py models each): classes
 * per batch of 64 on 3,200 class-sorted samples of 34 classes in 16
 * shards of 200, where a uniform permutation gives 29.1:
 *   - disjoint windows of 1000 ramping from 64, 4 shards in flight (what
 *     this replaced): 12.6, first batch 4.5;
 *   - disjoint windows of 2000, no ramp, 16 shards in flight: 25.2;
 *   - WebDataset's reservoir (shardshuffle=8, .shuffle(1000)): 20.4, first
 *     batch 3.5; its output depends on everything read before, so a resume
 *     must re-read the epoch from its start;
 *   - these sliding keys, 16 shards in flight: 22.7 with W = 1000, 28.6
 *     with W = 2000 (the default), first batch 27.4.
 * A disjoint window and the sliding keys hold W/2 samples on average for
 * the same W; the sliding keys mix better at every W.
 * Memory: the samples held, W/2 on average once past the first window, W
 * at the epoch's start, 2W the hard bound (the first window's stragglers
 * and a full window after it). shuffle_buffer_bytes bounds their bytes.
 *
 * What a stream cannot do: with each shard read front to back, the classes
 * within reach are about (shards in flight) + W / (samples of a class in a
 * shard). ImageNet in class order (1,281 per class, shards of 10,000) gets
 * 17.5 classes per batch of 256 at the defaults and 112.7 with all 129
 * shards in flight and W = 10,000, where a permutation gets 226
 * (bench/shuffle_mixing.py). Not built here, the one design that reaches a
 * permutation on such data: with an index and local or cached shards, a
 * seeded permutation of all the rank's samples read at their offsets
 * (random access: no shuffle memory, resume re-reads nothing, but a seek
 * and a tar header per sample, and a request per sample remotely). Today
 * such data is fixed once by rewriting it (stoker reshard: 0.93 of a
 * permutation after one pass: 210.0), and pack no longer writes it sorted.
 *
 * Resume: the output depends only on (seed, W, input count), never on
 * sample contents, so stk__shuffle_locate() replays it on positions alone
 * and a resumed epoch starts reading at the oldest sample still held at its
 * first output, at most 2W inputs back, dropping on arrival those that
 * went out before. The same replay makes any batch range reachable from
 * the dataset index (Dask tasks).
 */
#ifndef STK_SHUFFLE_H
#define STK_SHUFFLE_H

#include <stddef.h>
#include <stdint.h>

#include "tar/sample.h"

struct stk__shuffle_entry {
    uint64_t key;   /* fixed point: 20 fraction bits (shuffle.c) */
    uint64_t input; /* input position; breaks ties */
    struct stk__sample *sample; /* NULL when only positions are replayed */
};

/* Where a resumed shuffle starts: the first input it reads, and the key
 * below which a pushed sample went out before the resume (dropped). */
struct stk__shuffle_start {
    uint64_t input;
    uint64_t cut_key;
    uint64_t cut_input;
};

struct stk__shuffle {
    struct stk__shuffle_entry *heap; /* min-heap by (key, input) */
    size_t count;                    /* samples held */
    size_t max;                      /* 2 * reach: the hard bound */
    size_t reach;                    /* W; 1 is a pass-through */
    uint64_t seed;
    uint64_t pushed;                 /* input position of the next push */
    struct stk__shuffle_start start;
    int draining;                    /* input over: heap holds the drain order */
    size_t drain_next;
    uint64_t bytes;                  /* member bytes of the samples held */
};

/* reach <= 1 makes the shuffle a pass-through. start NULL: the epoch's
 * start; else a resumed epoch (stk__shuffle_locate). 0 or STK_ENOMEM. */
int stk__shuffle_init(struct stk__shuffle *sh, size_t reach, uint64_t seed,
                      const struct stk__shuffle_start *start);

/* Add the next input sample. One that went out before a resume is freed.
 * Call only while stk__shuffle_pop() returns NULL. */
void stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s);

/* The input ended and stk__shuffle_pop() returned NULL since the last push:
 * what is held goes out in a random order. */
void stk__shuffle_finish(struct stk__shuffle *sh);

/* Next sample out, or NULL (then push, or finish). */
struct stk__sample *stk__shuffle_pop(struct stk__shuffle *sh);

/* Replay a shuffle of `total` inputs on positions alone: where a run must
 * start to deliver output position `output` exactly, and how many of the
 * drained samples to drop after its pushes (0 unless `output` falls in the
 * final drain). 1 found; 0 output >= total; STK_ENOMEM. */
int stk__shuffle_locate(size_t reach, uint64_t seed, uint64_t output, uint64_t total,
                        struct stk__shuffle_start *start, uint64_t *drop);

/* Replay a shuffle of `total` inputs on positions alone up to the moment
 * its first `output` outputs have gone out (all of them when output >=
 * total): *pushed, the inputs read by then, and *held (freed with
 * stk__free), ascending, the *n_held of those not out yet, at most 2W + 1.
 * So what went out is [0, *pushed) less *held (elastic resume under a
 * window, seek_plan.h). 0 or STK_ENOMEM. */
int stk__shuffle_held(size_t reach, uint64_t seed, uint64_t output, uint64_t total,
                      uint64_t *pushed, uint64_t **held, size_t *n_held);

/* Replay a shuffle of `total` inputs on positions alone: the input
 * position of each of its outputs [first, first + n), in output order, in
 * inputs[0..*n_out) (fewer than n where the outputs end). With total past
 * what the outputs need (first + n + 2W + 2 inputs), the same as with the
 * true total: an epoch's first batches without counting all of it. Its
 * cost is the replay up to them, O((first + n + W) log W). 0 or STK_ENOMEM. */
int stk__shuffle_outputs(size_t reach, uint64_t seed, uint64_t first, size_t n, uint64_t total,
                         uint64_t *inputs, size_t *n_out);

/* Free the held samples and the buffer. */
void stk__shuffle_free(struct stk__shuffle *sh);

#endif
