/* SPDX-License-Identifier: MIT */
/*
 * image_workers.h - threads that turn samples into images in batch slots.
 *
 * The sequencer assigns each sample a slot of a batch and submits it; any
 * worker transforms it in place. A batch counts its unfinished slots (plus
 * one until the sequencer has filled it); the worker that brings the count
 * to zero reports the batch done. Order never depends on which worker ran
 * what: slots are fixed before the work starts.
 */
#ifndef STK_IMAGE_WORKERS_H
#define STK_IMAGE_WORKERS_H

#include <stddef.h>

#include "pipeline/batch.h"
#include "image/image.h"
#include "pipeline/sample_image.h"
#include "base/run.h"

struct stk__image_workers;

struct stk__image_workers_config {
    unsigned threads;
    size_t max_tasks;                     /* slots that can be outstanding at once */
    const struct stk__image_config *image;
    const struct stk__sample_rules *rules; /* labels and required members */
    struct stk__run *run; /* counters, log, error policy */
    /* Called by the worker that completes a batch. */
    void (*batch_done)(void *data, struct stk__batch *b);
    void *batch_done_data;
};

int stk__image_workers_start(const struct stk__image_workers_config *cfg,
                             struct stk__image_workers **out, struct stk__err *err);

/* Queue slot `slot` of b (b->pending already counts it). Never blocks:
 * max_tasks must cover every slot of every batch that may exist (the batch
 * budget times batch_size); a full ring aborts, as it means that sizing is
 * wrong. After stop has begun the task is dropped with the queued ones. */
void stk__image_workers_submit(struct stk__image_workers *workers, struct stk__batch *b,
                               size_t slot);

/* Drop the slot count a sealed batch held; reports the batch if done. */
void stk__image_workers_seal(struct stk__image_workers *workers, struct stk__batch *b);

/* Stop and join the workers; queued tasks are dropped. NULL is a no-op. */
void stk__image_workers_stop(struct stk__image_workers *workers);

#endif
