/* SPDX-License-Identifier: MIT */
/*
 * pipeline_sequencer.c - the sequencer thread: interleaves the slots'
 * queues, shuffles, and assembles batches in an order that depends only on
 * (seed, epoch, rank, options).
 * DESIGN (locking): see pipeline_impl.h.
 */
#include "pipeline/pipeline_impl.h"

#include <stdlib.h>

#include "image/augment.h"

/* The sequencer keeps the last sample it took from the input in hand until
 * it takes the next (or the input ends), so that a shard end popped in
 * between can still charge its bad input to that sample (see charge()). */
struct sequencer {
    struct stk__pipeline *p;
    struct stk__interleave il;
    struct stk__mixing mix;
    struct stk__sample *held;
    uint64_t pulled; /* input position (from the epoch's start) of the next sample */
    uint64_t carry_samples, carry_shards; /* for the epoch's first sample */
    uint64_t largest; /* member bytes of the largest sample taken so far */
    /* Output position of the next output emitted (by the head or the
     * stream), and of the stream's next one; the head's is over once the
     * stream reaches an output the head did not deliver. */
    uint64_t emitted;
    uint64_t stream_at;
    int head_live;
    int head_blocked; /* the head's next output found no batch to go into */
    /* The slot picked for the next input, kept when its pop gave way to the
     * head: a pick draws from the interleave's stream, so it is made once. */
    int picked;
    int head_first; /* test builds: the stream waits for the head (head_holds()) */
};

/* A sample left the shuffle: its member bytes go back to the budget, and
 * readers waiting for room look again (pipeline_impl.h, DESIGN). */
static void release_bytes(struct stk__pipeline *p, uint64_t bytes) {
    stk__pipeline_hold(p, -bytes);
    if (atomic_load(&p->room_waiters) == 0)
        return;
    stk__mutex_lock(&p->mutex);
    for (unsigned t = 0; t < p->n_readers; t++)
        stk__cond_signal(&p->readers[t].cond);
    stk__mutex_unlock(&p->mutex);
}

/* Whether the head holds the next output and may deliver it (p->mutex
 * held). Once it found no batch to go into, only after a poll: room comes
 * from the caller, who does not signal the sequencer. */
static int head_waits(const struct sequencer *sq, int polled) {
    return sq->head_live && (!sq->head_blocked || polled) &&
           stk__head_ready(sq->p->head, sq->emitted);
}

/* Test builds only (-Dtest_hooks=true): with $STOKER_TEST_HEAD_FIRST=1
 * the stream takes no input until the head delivered all it planned (or
 * ended), so that a test sees the head deliver, whatever the machine's load
 * (p->mutex held). */
static int head_holds(const struct sequencer *sq) {
    return sq->head_first && sq->head_live && !stk__head_done(sq->p->head);
}

/* Pop the next item of slot j, waiting for it. 1 popped, 0 stopped, 3 not
 * popped: the head may deliver the next output meanwhile. */
static int pop_item(struct sequencer *sq, unsigned j, struct item *out) {
    struct stk__pipeline *p = sq->p;
    struct slot *s = &p->slots[j];
    struct reader_thread *owner = &p->readers[j % p->n_readers];
    int polled = 0;
    stk__mutex_lock(&p->mutex);
    while ((s->count == 0 || head_holds(sq)) && !atomic_load(&p->cancel) &&
           !head_waits(sq, polled)) {
        p->waiting_slot = (int)j;
        stk__cond_signal(&owner->cond);
        stk__cond_timedwait_ms(&p->seq_cond, &p->mutex, SEQUENCER_POLL_MS);
        polled = 1;
    }
    p->waiting_slot = -1;
    int popped = s->count > 0 && !head_holds(sq) && !atomic_load(&p->cancel);
    if (!popped && !atomic_load(&p->cancel)) {
        stk__mutex_unlock(&p->mutex);
        return 3;
    }
    if (popped) {
        *out = s->ring[s->head];
        s->head = (s->head + 1) % SLOT_MAX_ITEMS;
        s->count--;
        if (out->sample != NULL)
            s->bytes -= out->sample->bytes;
        if (s->count <= SLOT_MAX_ITEMS / 2 && s->bytes <= p->cfg.opts.prefetch_bytes_per_shard / 2)
            stk__cond_signal(&owner->cond);
    }
    stk__mutex_unlock(&p->mutex);
    return popped;
}

static int fail_code(struct stk__pipeline *p) {
    stk__mutex_lock(&p->mutex);
    int code = p->fail.code ? p->fail.code : STK_EINTERNAL;
    stk__mutex_unlock(&p->mutex);
    return code;
}

/* A rank that must yield samples_per_rank samples cycles through its shards;
 * if a whole pass brings none, it would cycle forever. */
static int no_progress(struct stk__pipeline *p) {
    struct stk__err err;
    stk__errf(&err, STK_EPLAN,
              "rank %d: its %zu shard(s) hold no readable samples, cannot yield %llu samples",
              p->cfg.rank, p->rank_shards, (unsigned long long)p->cfg.opts.samples_per_rank);
    stk__mutex_lock(&p->mutex);
    stk__pipeline_record_failure(p, &err);
    stk__mutex_unlock(&p->mutex);
    return STK_EPLAN;
}

/* Charge a shard end's bad input to the sample taken from the input just
 * before it, which is still in hand, or at the epoch's start to the first
 * sample. That sample is the same in every run that delivers it (a resumed
 * run starts reading at the oldest input its shuffle holds, and every
 * sample before that one is output before it too), so per-batch counts do
 * not depend on where a run started; a resumed run drops what belongs to
 * samples before its first batch. */
static void charge(struct sequencer *sq, const struct item *it) {
    if (sq->held != NULL) {
        sq->held->bad_samples += it->bad_samples;
        sq->held->bad_shards += it->bad_shards;
    } else if (sq->pulled == 0) {
        sq->carry_samples += it->bad_samples;
        sq->carry_shards += it->bad_shards;
    }
}

/* Next sample of the interleaved input: 1 sample, 0 input over, 2 stopped,
 * 3 none yet and the head may deliver meanwhile, <0 error. */
static int next_input(struct sequencer *sq, struct stk__sample **out) {
    struct stk__pipeline *p = sq->p;
    for (;;) {
        int j = sq->picked >= 0 ? sq->picked : stk__interleave_pick(&sq->il);
        sq->picked = -1;
        if (j < 0)
            return 0;
        struct item it;
        int popped = pop_item(sq, (unsigned)j, &it);
        if (popped == 3)
            sq->picked = j;
        if (popped != 1)
            return popped == 0 ? 2 : 3;
        switch (it.kind) {
        case ITEM_SAMPLE:
            stk__interleave_sample(&sq->il);
            stk__mixing_sample(&sq->mix, (unsigned)j);
            if (it.sample->bytes > sq->largest)
                sq->largest = it.sample->bytes;
            it.sample->bad_samples += sq->carry_samples;
            it.sample->bad_shards += sq->carry_shards;
            sq->carry_samples = sq->carry_shards = 0;
            *out = it.sample;
            return 1;
        case ITEM_SHARD_END:
            charge(sq, &it);
            stk__mixing_shard_end(&sq->mix, (unsigned)j, &p->cfg.run->counters);
            if (stk__interleave_shard_end(&sq->il, (unsigned)j) < 0)
                return no_progress(p);
            break;
        case ITEM_STREAM_END:
            if (stk__interleave_stream_end(&sq->il))
                return 0;
            break;
        case ITEM_ERROR:
            return fail_code(p);
        }
    }
}

/* The next sample would take the samples the shuffle holds past
 * shuffle_buffer_bytes. Its reach is counted in samples so that the sequence
 * depends on sample counts alone (seek_plan.c finds where a resumed epoch
 * starts from the index's counts); samples that cannot be held fail instead,
 * whatever the error policy: the samples are fine, the budget is not. The
 * hint is what holds whatever the order: a reach of W holds at most 2W + 1
 * samples at a push (shuffle.h), so W = (budget / largest - 1) / 2 fits
 * samples up to the largest so far, and a reach of 1 (a pass-through) holds
 * one sample at a time, whatever its size. An average (what this said
 * before) let the next window of larger samples fail again. Frees s;
 * returns STK_ELIMIT. */
static int window_too_big(struct sequencer *sq, const struct stk__shuffle *sh,
                          struct stk__sample *s) {
    struct stk__pipeline *p = sq->p;
    const double mib = 1024.0 * 1024.0;
    uint64_t bytes = sh->bytes + s->bytes, budget = p->cfg.opts.shuffle_buffer_bytes;
    uint64_t largest = sq->largest > s->bytes ? sq->largest : s->bytes;
    uint64_t per_budget = budget / (largest > 0 ? largest : 1);
    uint64_t fit = per_budget >= 3 ? (per_budget - 1) / 2 : 1;
    char key[STK__SHOWN_MAX];
    struct stk__err err;
    stk__errf(&err, STK_ELIMIT,
              "the shuffle window would hold %zu samples of %.1f MiB in all, above "
              "shuffle_buffer_bytes (%.1f MiB); lower shuffle_buffer (to %llu for samples up to "
              "%.1f MiB, the largest so far) or raise shuffle_buffer_bytes (to %.1f MiB for "
              "shuffle_buffer %zu) (the last: %s: sample '%s', %.1f MiB)",
              sh->count + 1, (double)bytes / mib, (double)budget / mib,
              (unsigned long long)fit, (double)largest / mib,
              (double)(2 * sh->reach + 1) * (double)largest / mib, sh->reach, s->pub.url,
              stk__shown(key, sizeof key, s->key), (double)s->bytes / mib);
    stk__sample_free(s);
    stk__mutex_lock(&p->mutex);
    stk__pipeline_record_failure(p, &err);
    stk__mutex_unlock(&p->mutex);
    return STK_ELIMIT;
}

/* Queue a filled batch; it becomes deliverable once its slots are done. */
static void deliver(struct stk__pipeline *p, struct stk__batch *b) {
    if (p->workers == NULL)
        atomic_store(&b->pending, 0);
    stk__mutex_lock(&p->mutex);
    b->next = NULL;
    if (p->queue_tail != NULL)
        p->queue_tail->next = b;
    else
        p->queue_head = b;
    p->queue_tail = b;
    stk__cond_signal(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
    if (p->workers != NULL)
        stk__image_workers_seal(p->workers, b);
}

/* Called by the image worker that finished b's last slot. */
void stk__pipeline_batch_done(void *data, struct stk__batch *b) {
    struct stk__pipeline *p = data;
    (void)b;
    stk__mutex_lock(&p->mutex);
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
}

/* Before starting batch `index`: wait while it is past the range's limit.
 * 0, or 1 if stopped. */
static int wait_for_range(struct stk__pipeline *p, uint64_t index) {
    stk__mutex_lock(&p->mutex);
    while (index >= p->limit && !atomic_load(&p->cancel))
        stk__cond_wait(&p->range_cond, &p->mutex);
    stk__mutex_unlock(&p->mutex);
    return atomic_load(&p->cancel) ? 1 : 0;
}

/* A batch is complete: count how it mixes shards, then queue it. */
static void close_batch(struct sequencer *sq, struct stk__batch *b) {
    stk__mixing_batch(&sq->mix, b->samples, b->pub.n_samples, &sq->p->cfg.run->counters);
    deliver(sq->p, b);
}

/* Put a sample into the batch being built. 0, 1 stopped, or STK_ENOMEM. */
static int emit(struct sequencer *sq, struct stk__batch **batch, uint64_t *index,
                struct stk__sample *s) {
    struct stk__pipeline *p = sq->p;
    if (*batch == NULL) {
        if (wait_for_range(p, *index) || stk__budget_acquire(p->cfg.budget, &p->cancel)) {
            stk__sample_free(s);
            return 1;
        }
        *batch = stk__batch_new(p->cfg.opts.batch_size, (*index)++, p->cfg.budget, p->cfg.ring);
        if (*batch == NULL) {
            stk__sample_free(s);
            return STK_ENOMEM;
        }
    }
    sq->emitted++;
    /* The image config's seed differs from the option's for repeated
     * augmentation (loader.c); without a transform there is none. A rank
     * holding several copies' parts (plan.h) draws each as its copy's
     * virtual rank, as the loader's seed for a rank holding one. */
    uint64_t seed = s->draws != 0 ? stk__mix(p->cfg.opts.seed, (uint64_t)s->draws - 1)
                    : p->cfg.image != NULL ? p->cfg.image->seed
                                           : p->cfg.opts.seed;
    stk__batch_add(*batch, s,
                   stk__draws_key(seed, p->cfg.opts.epoch, s->pub.shard_index, s->pass,
                                  s->position));
    if (p->workers != NULL) {
        atomic_fetch_add(&(*batch)->pending, 1);
        stk__image_workers_submit(p->workers, *batch, (*batch)->pub.n_samples - 1);
    }
    if ((*batch)->pub.n_samples == p->cfg.opts.batch_size) {
        close_batch(sq, *batch);
        *batch = NULL;
    }
    return 0;
}

/* Emit the next output from the head (pipeline_head.c) when it holds it
 * and a batch can take it without waiting: the stream fills the window
 * meanwhile, so the head never holds the sequencer up. 1 emitted, 0 not
 * now, 2 stopped, <0 error. */
static int head_step(struct sequencer *sq, struct stk__batch **batch, uint64_t *index) {
    struct stk__pipeline *p = sq->p;
    stk__mutex_lock(&p->mutex);
    const int ready = stk__head_ready(p->head, sq->emitted);
    const int in_range = *index < p->limit;
    stk__mutex_unlock(&p->mutex);
    if (!ready)
        return 0;
    if (*batch == NULL) {
        if (!in_range || stk__budget_try_acquire(p->cfg.budget)) {
            sq->head_blocked = 1;
            return 0;
        }
        *batch = stk__batch_new(p->cfg.opts.batch_size, (*index)++, p->cfg.budget, p->cfg.ring);
        if (*batch == NULL)
            return STK_ENOMEM;
    }
    sq->head_blocked = 0;
    struct stk__sample *s = stk__head_take(p->head, sq->emitted);
    if (s == NULL) /* the head failed since: the stream delivers it */
        return 0;
    const int rc = emit(sq, batch, index, s);
    return rc == 0 ? 1 : rc == 1 ? 2 : rc;
}

/* The stream's next output s: dropped when a resume starts past it or the
 * head delivered it (checked to be the same sample), else emitted. 0, 1
 * stopped, or <0. */
static int stream_output(struct sequencer *sq, struct stk__batch **batch, uint64_t *index,
                         struct stk__sample *s) {
    struct stk__pipeline *p = sq->p;
    const uint64_t at = sq->stream_at++;
    if (at < p->cfg.first_batch * p->cfg.opts.batch_size) {
        stk__sample_free(s);
        return 0;
    }
    if (at < sq->emitted) {
        struct stk__err err;
        int rc = stk__head_delivered(p->head, at, s, &err);
        stk__sample_free(s);
        if (rc < 0) {
            stk__mutex_lock(&p->mutex);
            stk__pipeline_record_failure(p, &err);
            stk__mutex_unlock(&p->mutex);
        }
        return rc < 0 ? rc : 0;
    }
    if (sq->head_live) {
        sq->head_live = 0;
        stk__head_end(p->head);
    }
    return emit(sq, batch, index, s);
}

/* Add the sequencer's CPU time since *published to the counters. Its waits
 * are many (readers, batch buffers, image workers), so CPU time is simpler
 * and more exact than timing the work between them. */
static void publish_cpu(struct stk__pipeline *p, uint64_t *published) {
    uint64_t now = stk__thread_cpu_ns();
    atomic_fetch_add(&p->cfg.run->counters.sequence_ns, now - *published);
    *published = now;
}

/* Samples between two publish_cpu calls: a report mid-epoch lags by that
 * much, and the clock's system call stays off the per-sample path. */
#define CPU_PUBLISH_EVERY 64

/* Interleave, shuffle and batch the input. A resumed epoch starts at the
 * oldest input its first batch's shuffle holds when it could seek there (the readers
 * skipped to it), else at the epoch's start; the samples before its first
 * batch go through the same interleave and shuffle and are dropped, never
 * decoded. */
static int sequence(struct stk__pipeline *p, struct sequencer *sq, struct stk__shuffle *sh) {
    uint64_t published = stk__thread_cpu_ns();
    unsigned since_publish = 0;
    struct stk__batch *batch = NULL;
    uint64_t index = p->cfg.first_batch;
    const uint64_t first_output = p->cfg.first_batch * p->cfg.opts.batch_size;
    uint64_t target = p->cfg.opts.samples_per_rank ? p->cfg.opts.samples_per_rank : UINT64_MAX;
    int input_done = 0, failed = 0, rc = 0;
    sq->pulled = p->seeking ? p->seek.input_start : 0;
    sq->emitted = first_output;
    sq->stream_at = p->seeking ? first_output - p->seek.drop : 0;
    sq->head_live = p->head != NULL;
    for (;;) {
        if (++since_publish == CPU_PUBLISH_EVERY) {
            publish_cpu(p, &published);
            since_publish = 0;
        }
        if (sq->head_live && !failed) {
            rc = head_step(sq, &batch, &index);
            if (rc == 2 || rc < 0)
                goto out;
            if (rc == 1)
                continue;
        }
        struct stk__sample *s = stk__shuffle_pop(sh);
        if (s == NULL) {
            if (failed || (input_done && sh->draining))
                break;
            if (input_done) {
                /* What the key order let go after the last push went
                 * first; the rest drains (shuffle.h). */
                stk__shuffle_finish(sh);
                continue;
            }
            rc = sq->pulled == target ? 0 : next_input(sq, &s);
            if (rc == 2)
                goto out;
            if (rc == 3)
                continue;
            /* The sample in hand goes into the shuffle once the next one is
             * taken or the input is over, so a shard end after it can still
             * charge its bad input to it (charge()). */
            struct stk__sample *held = sq->held;
            sq->held = NULL;
            if (held != NULL && sh->count > 0 &&
                sh->bytes + held->bytes > p->cfg.opts.shuffle_buffer_bytes) {
                stk__sample_free(s); /* the one taken after it */
                rc = window_too_big(sq, sh, held);
                goto out;
            }
            if (held != NULL)
                stk__shuffle_push(sh, held);
            if (rc < 0) {
                /* The input failed: what the samples before it completed
                 * (what the shuffle may let go, every sample without shuffling) is
                 * still delivered, then the error. */
                failed = rc;
            } else if (rc == 0) {
                input_done = 1;
                stk__mutex_lock(&p->mutex);
                p->input_over = 1;
                stk__mutex_unlock(&p->mutex);
            } else {
                sq->pulled++;
                sq->held = s;
            }
            continue;
        }
        release_bytes(p, s->bytes);
        rc = stream_output(sq, &batch, &index, s);
        if (rc != 0)
            goto out;
    }
    rc = failed;
    if (failed)
        goto out;
    if (batch != NULL && !p->cfg.opts.drop_last) {
        close_batch(sq, batch);
        batch = NULL;
    }
out:
    /* Image workers may still write into a partial batch: it is freed by
     * stk__pipeline_stop() after they are joined. */
    p->partial = batch;
    publish_cpu(p, &published);
    return rc;
}

void *stk__pipeline_sequencer_main(void *arg) {
    struct stk__pipeline *p = arg;
    struct sequencer sq = {.p = p, .picked = -1};
#ifdef STK_TEST_HOOKS
    const char *head_first = getenv("STOKER_TEST_HEAD_FIRST");
    sq.head_first = head_first != NULL && strcmp(head_first, "1") == 0;
#endif
    struct stk__shuffle sh;
    int rc = stk__shuffle_init(&sh, stk__pipeline_shuffle_window(&p->cfg.opts),
                               stk__pipeline_sequencer_seed(&p->cfg, SHUFFLE_SEED),
                               p->seeking ? &p->seek.start : NULL);
    if (rc == 0)
        rc = stk__mixing_init(&sq.mix, p->cfg.opts.batch_size, p->n_slots, p->seeking);
    if (rc == 0)
        rc = stk__interleave_init(&sq.il, p->n_slots, p->rank_shards, p->cfg.opts.shuffle,
                                  stk__pipeline_sequencer_seed(&p->cfg, INTERLEAVE_SEED));
    if (rc == 0 && p->seeking)
        stk__interleave_copy(&sq.il, &p->seek.il);
    if (rc == 0)
        rc = sequence(p, &sq, &sh);
    stk__sample_free(sq.held);
    stk__shuffle_free(&sh);
    stk__mixing_free(&sq.mix);
    stk__interleave_free(&sq.il);

    stk__mutex_lock(&p->mutex);
    if (rc == STK_ENOMEM && p->fail.code == 0)
        stk__errf(&p->fail, STK_ENOMEM, "out of memory while assembling batches");
    p->input_over = 1;
    p->finished = 1;
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
    return NULL;
}
