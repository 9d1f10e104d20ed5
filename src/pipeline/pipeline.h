/* SPDX-License-Identifier: MIT */
/*
 * pipeline.h - one epoch of one rank: readers, sequencer, batches.
 *
 *   reader threads --(per-shard bounded queues)--> sequencer thread
 *       --(interleave + shuffle buffer, batch budget)--> batch queue --> caller
 *
 * The sample order is fixed by the sequencer alone, which draws from the
 * shard queues in an order that depends only on (seed, epoch, rank,
 * options); reader threads only decide how fast queues fill. With a
 * transform, the sequencer also hands each slot of a batch to the image
 * workers (image_workers.h); a queued batch is delivered once its last
 * slot is done.
 */
#ifndef STK_PIPELINE_H
#define STK_PIPELINE_H

#include <stdatomic.h>
#include <stdint.h>

#include "pipeline/batch.h"
#include "base/error.h"
#include "image/image.h"
#include "pipeline/sample_image.h"
#include "plan/plan.h"
#include "tar/shard_reader.h"
#include "base/strlist.h"

struct stk__pipeline_config {
    struct stk_options opts;  /* batch, shuffle, seed, epoch, budgets */
    int rank;                 /* resolved, unlike opts.rank */
    int world_size;
    const struct stk__strlist *urls;
    /* urls[i] redacted: what samples and messages call shard i. Samples
     * point into it, so it must outlive every batch, not just the pipeline. */
    const struct stk__strlist *names;
    int any_remote;           /* some url is not a local file (decided once by the owner) */
    uint64_t first_batch;     /* the epoch starts at this batch (resume) */
    uint64_t batch_limit;     /* no batch at this index or later (UINT64_MAX: none) */
    /* Samples per shard by URL index (a dataset index), or NULL. With it a
     * resumed epoch seeks to the shuffle window of first_batch; without it
     * the samples before first_batch are read again and dropped. */
    const uint64_t *shard_samples;
    /* With it, per shard the byte offset of each sample (NULL for
     * compressed shards): a resumed reader opens its shard right there. */
    const uint64_t *const *shard_offsets;
    /* With it, per shard the stamp the index recorded: every shard opened
     * is checked against it and against its count (stk__shard_expect). */
    const struct stk__shard_stamp *shard_stamps;
    /* What decides the rank's list for the epoch (plan.h: its shards, or
     * its run of samples, in a global order or not, under node affinity
     * or not); the owner fills it as it plans (stk_loader's plan_spec()). */
    struct stk__plan_spec plan;
    /* Log and error policy; the epoch's gauges and samples_read_ahead go
     * to its counters. The pipeline's own counts go to a part of it
     * (stk__run_init_part: stk__pipeline_counts), so that an epoch read
     * ahead counts as its own, not the last one's. Must outlive the pipeline. */
    struct stk__run *run;
    struct stk__shard_config shard; /* its run and source counters are set to the part */
    struct stk__batch_budget *budget;
    /* Member bytes held by every pipeline of the owner, which
     * shuffle_buffer_bytes bounds (pipeline_impl.h, DESIGN): two epochs in
     * flight at a boundary share it. Must outlive the pipeline. */
    _Atomic uint64_t *held_bytes;
    /* Started ahead of its epoch, while the last one's tail is delivered:
     * the readers read and the window fills, but the range's limit starts
     * at 0 (no batch takes a buffer the last epoch may still need) and no
     * gauge of the epoch is published until stk__pipeline_begin(). */
    int ahead;
    /* Image batches (NULL for raw samples); must outlive the pipeline. */
    const struct stk__image_config *image;
    const struct stk__sample_rules *rules; /* with image: labels, required members */
    struct stk__image_ring *ring;
    /* Set (by another thread) to make a waiting stk__pipeline_next()
     * return STK_EINTR; cleared by the call that returns it. May be NULL;
     * must outlive the pipeline. */
    atomic_int *interrupt;
};

struct stk__pipeline;

/* Start the threads of one epoch. The config is copied; urls and budget
 * must outlive the pipeline, names every batch it delivers. */
int stk__pipeline_start(const struct stk__pipeline_config *cfg, struct stk__pipeline **out,
                        struct stk__err *err);

/* Elastic resume under a shuffle window: which positions of its run (its
 * list's samples, from 0) the rank of cfg (plan, seeds, options as its
 * epoch ran) delivered with its first `delivered` samples, replayed on the
 * index's counts without reading data (stk__seek_plan_delivered). *out:
 * ascending pairs, freed with stk__free. 0, STK_EINVAL or STK_ENOMEM. */
int stk__pipeline_delivered(const struct stk__pipeline_config *cfg, uint64_t delivered,
                            uint64_t **out, size_t *n_out);
/* The epoch of a pipeline started ahead begins: its gauges are published,
 * it stops counting samples_read_ahead and makes batches up to limit. */
void stk__pipeline_begin(struct stk__pipeline *p, uint64_t limit);

/* 1 once the sequencer took the epoch's last input (the readers are done;
 * the window drains its tail), or failed. */
int stk__pipeline_input_over(struct stk__pipeline *p);

/* 1 once the sequencer made the epoch's last batch (or stopped). */
int stk__pipeline_finished(struct stk__pipeline *p);

/* Next batch: 0 (*out set), STK_EOF, STK_EBUSY, STK_EINTR (cfg.interrupt
 * was set, before or while it waited, or timeout_ms passed without a batch;
 * 0: no timeout; the epoch goes on either way) or an error with err set. */
int stk__pipeline_next(struct stk__pipeline *p, struct stk__batch **out, unsigned timeout_ms,
                       struct stk__err *err);

/* Index of the batch the next stk__pipeline_next() delivers, or UINT64_MAX
 * once the pipeline failed. */
uint64_t stk__pipeline_next_index(struct stk__pipeline *p);

/* Move the end of the range: batches up to limit - 1 are made and
 * delivered, then STK_EOF (UINT64_MAX: to the epoch's end). Raising it
 * wakes a sequencer waiting at the old limit, so a range continues. */
void stk__pipeline_set_limit(struct stk__pipeline *p, uint64_t limit);

/* Wake a thread waiting in stk__pipeline_next() so that it looks at
 * cfg.interrupt again. Thread-safe; p must not be stopped meanwhile. */
void stk__pipeline_wake(struct stk__pipeline *p);

/* What the pipeline counted (COUNT and NS rows; gauges go to cfg.run),
 * for the owner's stats and, once it is halted, to merge into cfg.run. */
const struct stk__run *stk__pipeline_counts(const struct stk__pipeline *p);

/* Stop its threads (also mid-epoch) and join them: its counts are final.
 * Nothing is freed; stk__pipeline_wake() is still safe. Once only. */
void stk__pipeline_halt(struct stk__pipeline *p);

/* Halt it unless it is, and free all unread data. */
void stk__pipeline_stop(struct stk__pipeline *p);

#endif
