/* SPDX-License-Identifier: MIT */
/*
 * seek_plan.h - where a resumed epoch starts reading.
 *
 * To deliver batch k of an epoch exactly as an uninterrupted run would,
 * the sequencer must start reading at the oldest input the shuffle still
 * holds when it delivers output position k * batch_size (shuffle.h), with
 * every shard slot at the shard and sample the interleave had reached by
 * then. Given the number of samples of every shard (a dataset index), this
 * replays the shuffle on positions and the interleave (interleave.c) on
 * counts alone, so a resume reads no data before that input: readers open
 * their shards and pass over the consumed samples without decoding them.
 * Without an index the counts are asked for as the replay reaches their
 * shards (a header scan of local ones): only the shards of the rank's list
 * up to about the resumed position, not the whole epoch, and none where the
 * resumed input falls within the first sixteenth of them (the scan would
 * cost more than the jump saves).
 */
#ifndef STK_SEEK_PLAN_H
#define STK_SEEK_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "plan/interleave.h"
#include "plan/plan.h"
#include "plan/shuffle.h"

struct stk__seek_plan {
    uint64_t input_start;  /* interleaved samples before the resumed input */
    struct stk__shuffle_start start; /* the shuffle's state there */
    uint64_t drop;         /* samples of its output before the first batch */
    uint64_t *slot_skip;   /* per slot: samples of its current shard consumed */
    struct stk__interleave il; /* the sequencer's state at input_start */
};

struct stk__seek_request {
    struct stk__plan_cursor *cursor; /* the rank's shards in this epoch */
    const uint64_t *shard_samples;   /* samples per shard, by URL index, or NULL: */
    /* ... then count(count_data, shard, &samples) says it: 1 counted, 0 not
     * known (no plan: the epoch is read from its start), <0 an error. */
    int (*count)(void *count_data, size_t shard, uint64_t *samples);
    void *count_data;
    unsigned n_slots;
    int shuffle;
    uint64_t interleave_seed;
    uint64_t shuffle_seed;
    size_t window;                   /* shuffle reach, 1 without shuffle */
    uint64_t output_position;        /* first sample to deliver */
    uint64_t target;                 /* samples the rank yields (UINT64_MAX: all) */
};

/* 1: plan computed; 0: the position is at or past the end of the epoch,
 * the rank cannot progress, or a count is not known (start from the
 * beginning and let the pipeline report it); STK_ENOMEM or count's error. */
int stk__seek_plan_compute(struct stk__seek_plan *sp, const struct stk__seek_request *req);

/* Elastic resume under a shuffle window (remainder.h): which positions of
 * the rank's run (its list's samples in list order, from 0) its first
 * req->output_position outputs were. The shuffle replay gives the inputs
 * read by then and the <= 2W + 1 still held; the interleave replay puts
 * each input at its place in the list. So what went out is the front each
 * slot consumed of its positions (whole segments before, a part of the
 * current one) less the held samples: *out (pairs, ascending, freed with
 * stk__free), *n_out of them, at most (list positions) + (held) + 1. 0;
 * STK_EINVAL when the rank's input ends before the shuffle's replay read
 * that many (a count not of this rank and options); STK_ENOMEM. */
int stk__seek_plan_delivered(const struct stk__seek_request *req, uint64_t **out,
                             size_t *n_out);

/* Where an output of the rank's epoch comes from. */
struct stk__seek_place {
    uint64_t input;         /* its input position */
    uint64_t list_position; /* the position of the rank's list it is read at */
    uint64_t sample;        /* its sample within that position's segment */
    /* The list positions whose segment's end the sequencer charges to it
     * (their bad tail, a failed shard): ends[first_end, first_end + n_ends). */
    size_t first_end, n_ends;
};

/* Where the rank's outputs [first, first + n) come from, without reading
 * data, in output order in places[0..*n_out) (fewer than n where the epoch
 * ends), and *ends (freed with stk__free; *n_ends) the list positions their
 * places name. The counts are asked for as in stk__seek_plan_compute, up to
 * the inputs those outputs need. Lets an epoch read its first batches'
 * samples by offset while its window fills (pipeline_head.c). 1, 0 (a count
 * not known, or no output), STK_ENOMEM or count's error. */
int stk__seek_plan_outputs(const struct stk__seek_request *req, uint64_t first, size_t n,
                           struct stk__seek_place *places, size_t *n_out, uint64_t **ends,
                           size_t *n_ends);

void stk__seek_plan_free(struct stk__seek_plan *sp);

#endif
