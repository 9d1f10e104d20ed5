/* SPDX-License-Identifier: MIT */
/*
 * pipeline_impl.h - the state the pipeline's files share: reader threads
 * (pipeline_readers.c), the sequencer thread (pipeline_sequencer.c), the
 * first batches read by offset (pipeline_head.c: its thread, which the
 * sequencer takes from), and the lifetime and batch queue (pipeline.c),
 * which starts the others; pipeline_replay.c holds what a replay of the
 * sequencer on counts needs. None calls into pipeline.c; the head calls the
 * readers' and the replay's helpers, and the sequencer the head's.
 *
 * DESIGN (locking). One mutex, p->mutex, guards every slot queue, the
 * batch queue, waiting_slot, finished and the first error. Wake-ups:
 *  - a reader waits on its own cond when none of its slots has room; the
 *    sequencer signals the owner of a slot after popping from it, and when
 *    it starts waiting on an empty slot;
 *  - the sequencer waits on seq_cond for an item in the slot it needs; a
 *    reader signals it after pushing to that slot;
 *  - the caller waits on batch_cond; the sequencer signals each batch and
 *    the end of the epoch, an image worker each finished batch, and
 *    stk__pipeline_wake() (another thread, through stk_loader_interrupt())
 *    a set cfg.interrupt. The flag is set before the broadcast, which is
 *    made under p->mutex, and checked under it before every wait, so a
 *    wake-up cannot fall between the check and the wait.
 * The batch budget has its own mutex (batch.c) and is never taken while
 * p->mutex is held.
 *
 * DESIGN (member bytes). One budget, shuffle_buffer_bytes, bounds the
 * member bytes of every sample between the tar reader and its batch: being
 * read, queued in a slot, in the sequencer's hand and in the shuffle
 * (held_bytes, atomic). Before, each slot could read one whole sample
 * ahead whatever its size, outside any budget: 16 x max_member_bytes at
 * the defaults (100 MB members: 1.4 GB with 16 shards in flight). Now a
 * reader reserves each member's bytes before it reads them (the shard
 * reader's gate); read ahead, they must fit in the budget and in the
 * slot's prefetch_bytes_per_shard, else the gate says "not now", the member
 * stays pending in the shard reader (s->deferred) and the thread turns to
 * its other slots or waits for room. The one read that goes ahead over the
 * budget is for the slot the sequencer waits on while it is empty: nothing
 * else could make room. So the bytes held stay within the budget, plus
 * that sample and the one in the sequencer's hand when the window is full.
 * Whether a window fits stays a pure function of the sample sequence
 * (pipeline_sequencer.c), never of how far readers got.
 * Wake-ups: a reader that finds nothing to read for want of room counts
 * itself in room_waiters and looks again before it waits; the sequencer,
 * after giving bytes back, signals the readers only when that count is
 * not zero (both sequentially consistent, so one of the two sees the
 * other). Its wait on an empty slot signals that slot's reader as before.
 *
 * DESIGN (two epochs in flight). At an epoch boundary the loader starts the
 * next epoch's pipeline once this one's input is over (loader.c), so that
 * its readers fill the next window while this one's tail is delivered.
 * Each pipeline has its own threads, cancel flag, limit and gauges; they
 * share the batch budget and buffer ring (the next one makes no batch
 * until this one made its last: the limit holds it at 0), the buffer
 * pool, and the member bytes: cfg.held_bytes is the owner's one count of
 * every pipeline's samples, so the bound above holds for both together
 * (shuffle_buffer_bytes, plus one sample read over it per pipeline and the
 * one in each sequencer's hand). The tail still held here leaves room for
 * the next window as it drains. A pipeline gives back what it held when it
 * stops (own_bytes). Bytes given back by one pipeline do not signal the
 * other's readers: a reader waiting for room looks again every
 * SEQUENCER_POLL_MS.
 *
 * Slot j reads the shards at positions j, j+K, j+2K, ... of this rank's
 * shard list (K = shards_in_flight), so the assignment of shards to slots is
 * static and readers can open the next shard before the sequencer gets to
 * it. Reader thread t serves slots t, t+T, ...: one sample at a time, always
 * for a slot with room, so a full queue never blocks the other slots of the
 * same thread.
 */
#ifndef STK_PIPELINE_IMPL_H
#define STK_PIPELINE_IMPL_H

#include <string.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "base/threads.h"
#include "pipeline/image_workers.h"
#include "pipeline/mix.h"
#include "pipeline/pipeline.h"
#include "plan/interleave.h"
#include "plan/mixing.h"
#include "plan/plan.h"
#include "plan/seek_plan.h"
#include "plan/shuffle.h"
#include "pipeline/resume_scan.h"

#define SLOT_MAX_ITEMS 1024
/* Hand-offs are batched: a reader wakes the waiting sequencer only once a
 * slot holds this many samples (or a quarter of its byte budget, or a
 * non-sample item), and the sequencer wakes a reader only once a slot has
 * drained below half its budget. Waking per sample costs a context switch
 * per sample, a quarter of the CPU time on one core (perf). A waiting
 * sequencer also looks on its own every SEQUENCER_POLL_MS, so samples of a
 * slow source (a network stream, a pipe: command) are not held back while
 * their reader waits for the next bytes. */
#define WAKE_SEQUENCER_ITEMS 16
#define SEQUENCER_POLL_MS 10

enum item_kind { ITEM_SAMPLE, ITEM_SHARD_END, ITEM_STREAM_END, ITEM_ERROR };

struct item {
    enum item_kind kind;
    struct stk__sample *sample;
    /* ITEM_SHARD_END: bad samples after the shard's last good one, and 1
     * if the shard failed (cut short, or not opened). */
    uint64_t bad_samples;
    uint64_t bad_shards;
};

struct slot {
    /* Guarded by p->mutex. */
    struct item ring[SLOT_MAX_ITEMS];
    size_t head;
    size_t count;
    _Atomic uint64_t bytes; /* written under p->mutex; a reader's gate reads it without */
    int ended; /* a STREAM_END or ERROR is queued: nothing more to read */
    /* Owned by the reader thread serving this slot. */
    struct stk__shard_reader *reader;
    uint64_t reading;  /* member bytes of the sample being read, reserved in held_bytes */
    uint64_t deferred; /* what that sample would hold with the member the gate put off */
    uint64_t position; /* position of the shard being read in the rank's list */
    uint64_t skip;     /* samples to skip in it (a resumed epoch), 0 afterwards */
    /* Without an index, where a resume's header scan (resume_scan.h) found
     * sample skip_from <= skip of it: the reader opens it there (0: from
     * the start). */
    uint64_t skip_from;
    uint64_t skip_offset;
    uint32_t draws;    /* its segment's copy under repeated augmentation (plan.h) */
};

struct reader_thread {
    struct stk__pipeline *p;
    pthread_t tid;
    pthread_cond_t cond;
    unsigned index;
    struct stk__plan_cursor cursor;
    struct stk__err err;
    /* Owned by the thread: the slot it reads for, and whether the
     * sequencer waits on it (its read goes ahead over the budget). */
    struct slot *slot;
    int must_read;
};

struct stk__pipeline {
    struct stk__pipeline_config cfg;
    size_t rank_shards;         /* shards (or segments of them) of this rank per pass */
    /* The rank's plan for the epoch; the readers' cursors borrow its list
     * when it is one by sample (a global order holds a segment a sample). */
    struct stk__plan_cursor plan;
    struct stk__seek_plan seek; /* valid when resuming with seeking */
    int seeking;
    pthread_mutex_t mutex;
    pthread_cond_t seq_cond;
    pthread_cond_t batch_cond;
    struct slot *slots;
    unsigned n_slots;
    struct reader_thread *readers;
    unsigned n_readers;
    unsigned readers_started;
    pthread_t seq_tid;
    int seq_started;
    int waiting_slot;
    struct stk__batch *queue_head, *queue_tail;
    struct stk__batch *partial; /* the sequencer's unfinished batch, freed once the workers stop */
    struct stk__image_workers *workers; /* image worker threads, NULL for raw samples */
    int finished;
    struct stk__err fail; /* first error; fail.code != 0 once failed */
    /* A range (stk__pipeline_set_limit): the sequencer starts no batch at
     * index >= limit, the caller gets STK_EOF once next_index reaches it,
     * and in a global order the readers read ahead no sample past it.
     * Both guarded by mutex; the sequencer waits on range_cond. */
    uint64_t limit;
    uint64_t next_index;
    pthread_cond_t range_cond;
    /* Member bytes held before batching (DESIGN above): this pipeline's
     * share of *cfg.held_bytes, and the readers waiting for room. */
    _Atomic uint64_t own_bytes;
    atomic_int room_waiters;
    /* The epoch's stop: set by stk__pipeline_stop; sources waiting on a
     * server or a command give up when it is set. */
    atomic_int cancel;
    /* Started ahead of its epoch and not yet begun (pipeline.h). */
    atomic_int ahead;
    int halted; /* owner only (stk__pipeline_halt) */
    /* What its threads count (cfg.run points here), and the owner's run,
     * which gets the gauges and samples_read_ahead (pipeline.h). */
    struct stk__run counts;
    struct stk__run *owner;
    int input_over; /* guarded by mutex (stk__pipeline_input_over) */
    /* The first batches read by offset while the window fills
     * (pipeline_head.c), or NULL. */
    struct stk__head *head;
};

/* 1 if the budget has no room left for another member (read-ahead stops). */
static inline int stk__pipeline_budget_full(const struct stk__pipeline *p) {
    return atomic_load(p->cfg.held_bytes) >= p->cfg.opts.shuffle_buffer_bytes;
}

/* Member bytes now held by this pipeline's samples (delta may wrap:
 * negative), counted in its share and in the owner's total. */
static inline void stk__pipeline_hold(struct stk__pipeline *p, uint64_t delta) {
    atomic_fetch_add(p->cfg.held_bytes, delta);
    atomic_fetch_add(&p->own_bytes, delta);
}

/* Record the epoch's first error (p->mutex held). */
static inline void stk__pipeline_record_failure(struct stk__pipeline *p,
                                                const struct stk__err *err) {
    if (p->fail.code == 0)
        p->fail = *err;
}

/* Thread bodies: a struct reader_thread, the struct stk__pipeline. */
void *stk__pipeline_reader_main(void *arg);
void *stk__pipeline_sequencer_main(void *arg);

/* The image workers' batch_done callback: b's last slot is done. */
void stk__pipeline_batch_done(void *data, struct stk__batch *b);

/* The head (pipeline_head.c): start it for the epoch's outputs from
 * output position `first` (p->head is set, also when this fails: free it
 * with stk__head_free). 0 or <0. */
int stk__head_start(struct stk__pipeline *p, uint64_t first);
/* With p->mutex held: 1 if the head holds output position `output`, the
 * one the sequencer emits next. */
int stk__head_ready(const struct stk__head *h, uint64_t output);
/* With p->mutex held: 1 once the head delivers nothing more. */
int stk__head_done(const struct stk__head *h);
/* Take that output (NULL: not there); the sequencer owns the sample. */
struct stk__sample *stk__head_take(struct stk__head *h, uint64_t output);
/* The stream dropped `stream` at output `output`: 1 if the head delivered
 * that output (0 if not), or STK_EINDEX (err set) when the head's sample
 * there was another, or came with other bad input. */
int stk__head_delivered(const struct stk__head *h, uint64_t output,
                        const struct stk__sample *stream, struct stk__err *err);
/* The stream caught up: the head reads no more. h may be NULL. */
void stk__head_end(struct stk__head *h);
/* End the head and join its thread; stk__head_free also frees it. */
void stk__head_stop(struct stk__pipeline *p);
void stk__head_free(struct stk__pipeline *p);

/* The block a sample opened on its own at `at` is read in: its size and
 * the next header's (the next sample starts at end; 0: not known, the
 * block_size given). Tiny samples read from 256 KiB blocks cost 30x. */
size_t stk__pipeline_sample_block(size_t block_size, uint64_t at, uint64_t end);

/* Tell reader r of seg what the index says of its shard, as the readers
 * do (nothing without an index). */
void stk__pipeline_expect(const struct stk__pipeline *p, struct stk__shard_reader *r,
                          const struct stk__plan_segment *seg);

/* What the sequencer of cfg's epoch does, for a replay on counts from
 * output position `output` (seek_plan.h). */
struct stk__seek_request stk__pipeline_seek_request(const struct stk__pipeline_config *cfg,
                                                    struct stk__plan_cursor *cursor,
                                                    unsigned n_slots, uint64_t output);

/* Seeds of the sequencer's random choices for this rank and epoch (also
 * what a resume replays to find its position). */
uint64_t stk__pipeline_sequencer_seed(const struct stk__pipeline_config *cfg, uint64_t purpose);
#define INTERLEAVE_SEED 0x496e746572ull
#define SHUFFLE_SEED 0x53687566ull

/* Samples the shuffle holds back (1: no shuffle). */
size_t stk__pipeline_shuffle_window(const struct stk_options *o);

#endif
