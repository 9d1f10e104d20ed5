/*
 * pipeline.c - reader threads, the sequencer thread and the batch queue.
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
 * p->mutex is held. The stop flag (the run's cancel) is atomic: every
 * waiter re-checks it after a broadcast from stk__pipeline_stop().
 *
 * Slot j reads the shards at positions j, j+K, j+2K, ... of this rank's
 * shard list (K = shards_in_flight), so the assignment of shards to slots is
 * static and readers can open the next shard before the sequencer gets to
 * it. Reader thread t serves slots t, t+T, ...: one sample at a time, always
 * for a slot with room, so a full queue never blocks the other slots of the
 * same thread.
 */
#include "pipeline/pipeline.h"

#include <string.h>

#include "base/alloc.h"
#include "plan/interleave.h"
#include "pipeline/mix.h"
#include "plan/mixing.h"
#include "plan/plan.h"
#include "base/rng.h"
#include "plan/seek_plan.h"
#include "plan/shuffle.h"
#include "base/threads.h"
#include "pipeline/image_workers.h"

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
    uint64_t bytes;
    int ended; /* a STREAM_END or ERROR is queued: nothing more to read */
    /* Owned by the reader thread serving this slot. */
    struct stk__shard_reader *reader;
    uint64_t position; /* position of the shard being read in the rank's list */
    uint64_t skip;     /* samples to skip in it (a resumed epoch), 0 afterwards */
};

struct reader_thread {
    struct stk__pipeline *p;
    pthread_t tid;
    pthread_cond_t cond;
    unsigned index;
    struct stk__plan_cursor cursor;
    struct stk__err err;
};

struct stk__pipeline {
    struct stk__pipeline_config cfg;
    size_t rank_shards; /* shards of this rank per pass */
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
     * index >= limit, and the caller gets STK_EOF once next_index reaches it.
     * Both guarded by mutex; the sequencer waits on range_cond. */
    uint64_t limit;
    uint64_t next_index;
    pthread_cond_t range_cond;
};

/* ---- reader side ---- */

static int slot_has_room(const struct stk__pipeline *p, const struct slot *s)
{
    return !s->ended && s->count < SLOT_MAX_ITEMS &&
           (s->count == 0 || s->bytes < p->cfg.opts.prefetch_bytes_per_shard);
}

/* Choose which of this thread's slots to read for; -1 if none has room.
 * The slot the sequencer waits on comes first, then the emptiest. */
static int choose_slot(const struct stk__pipeline *p, const struct reader_thread *rt)
{
    int best = -1;
    for (unsigned j = rt->index; j < p->n_slots; j += p->n_readers) {
        const struct slot *s = &p->slots[j];
        if (!slot_has_room(p, s))
            continue;
        if ((int)j == p->waiting_slot)
            return (int)j;
        if (best < 0 || s->count < p->slots[best].count)
            best = (int)j;
    }
    return best;
}

/* Open the shard at the slot's position and skip what a resumed epoch
 * already consumed; returns 1 opened, 0 end of this slot's stream, 2 shard
 * skipped as bad (an ITEM_SHARD_END), <0 error in rt->err. */
static int open_next_shard(struct reader_thread *rt, struct slot *s)
{
    struct stk__pipeline *p = rt->p;
    size_t shard;
    if (!stk__plan_cursor_shard(&rt->cursor, s->position, &shard))
        return 0;
    /* A resumed slot starts at the last sample it must pass over that the
     * index locates (its offset: nothing before is read), else at the shard's
     * start, and reads past the rest. */
    uint64_t at = 0, position = 0;
    const uint64_t *offsets = p->cfg.shard_offsets != NULL ? p->cfg.shard_offsets[shard] : NULL;
    if (s->skip > 0 && offsets != NULL && p->cfg.shard_samples[shard] > 0) {
        position = s->skip < p->cfg.shard_samples[shard] ? s->skip
                                                         : p->cfg.shard_samples[shard] - 1;
        at = offsets[position];
    }
    int rc = stk__shard_open_at(p->cfg.urls->items[shard], p->cfg.names->items[shard], shard,
                                &p->cfg.shard, at, position, &s->reader, &rt->err);
    if (rc == 0 && p->cfg.shard_samples != NULL) {
        struct stk__shard_expect e = {
            .stamp = p->cfg.shard_stamps != NULL ? &p->cfg.shard_stamps[shard] : NULL,
            .samples = p->cfg.shard_samples[shard],
        };
        stk__shard_expect(s->reader, &e);
    }
    if (rc == 0 && s->skip > position) {
        atomic_fetch_add(&p->cfg.run->counters.samples_passed_over, s->skip - position);
        rc = stk__shard_skip(s->reader, s->skip - position, &rt->err);
        if (rc < 0) {
            stk__shard_close(s->reader);
            s->reader = NULL;
        }
    }
    s->skip = 0;
    if (rc == 0)
        return 1;
    /* Out of memory, a cache that cannot take the shard and a stale index
     * are not bad input: skipping would drop good shards for a
     * configuration problem. */
    if (!p->cfg.run->skip_bad || rc == STK_ENOMEM || rc == STK_ECACHE || rc == STK_EINDEX)
        return rc;
    stk__run_log(p->cfg.run, STK_LOG_WARN, "%s (shard skipped)", rt->err.msg);
    atomic_fetch_add(&p->cfg.run->counters.shards_failed, 1);
    return 2;
}

/* Read one item for slot s. Runs without the mutex. */
static struct item produce(struct reader_thread *rt, struct slot *s)
{
    struct stk__pipeline *p = rt->p;
    struct item it = {.kind = ITEM_ERROR};
    if (s->reader == NULL) {
        int rc = open_next_shard(rt, s);
        if (rc < 0)
            return it;
        if (rc == 0) {
            it.kind = ITEM_STREAM_END;
            return it;
        }
        if (rc == 2) {
            s->position += p->n_slots;
            it.kind = ITEM_SHARD_END;
            it.bad_shards = 1;
            return it;
        }
    }
    int rc = stk__shard_next(s->reader, &it.sample, &rt->err);
    if (rc == 1) {
        it.kind = ITEM_SAMPLE;
        it.sample->pass = s->position / p->rank_shards;
        return it;
    }
    if (rc == 0) {
        int failed;
        stk__shard_tail(s->reader, &it.bad_samples, &failed);
        it.bad_shards = (uint64_t)failed;
        s->position += p->n_slots;
        it.kind = ITEM_SHARD_END;
    }
    stk__shard_close(s->reader);
    s->reader = NULL;
    return it;
}

static void record_failure(struct stk__pipeline *p, const struct stk__err *err)
{
    if (p->fail.code == 0)
        p->fail = *err;
}

static void *reader_main(void *arg)
{
    struct reader_thread *rt = arg;
    struct stk__pipeline *p = rt->p;
    stk__mutex_lock(&p->mutex);
    while (!atomic_load(&p->cfg.run->cancel)) {
        int j = choose_slot(p, rt);
        if (j < 0) {
            stk__cond_wait(&rt->cond, &p->mutex);
            continue;
        }
        struct slot *s = &p->slots[j];
        stk__mutex_unlock(&p->mutex);
        uint64_t start = stk__now_ns();
        struct item it = produce(rt, s);
        atomic_fetch_add(&p->cfg.run->counters.read_ns, stk__now_ns() - start);
        stk__mutex_lock(&p->mutex);
        if (atomic_load(&p->cfg.run->cancel)) {
            stk__sample_free(it.sample);
            break;
        }
        if (it.kind == ITEM_ERROR)
            record_failure(p, &rt->err);
        if (it.kind == ITEM_ERROR || it.kind == ITEM_STREAM_END)
            s->ended = 1;
        s->ring[(s->head + s->count) % SLOT_MAX_ITEMS] = it;
        s->count++;
        if (it.sample != NULL)
            s->bytes += it.sample->bytes;
        if (p->waiting_slot == j &&
            (it.kind != ITEM_SAMPLE || s->count >= WAKE_SEQUENCER_ITEMS ||
             s->bytes >= p->cfg.opts.prefetch_bytes_per_shard / 4 || !slot_has_room(p, s)))
            stk__cond_signal(&p->seq_cond);
    }
    stk__mutex_unlock(&p->mutex);
    return NULL;
}

/* ---- sequencer side ---- */

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
};

/* Pop the next item of slot j, waiting for it. 1 popped, 0 stopped. */
static int pop_item(struct stk__pipeline *p, unsigned j, struct item *out)
{
    struct slot *s = &p->slots[j];
    struct reader_thread *owner = &p->readers[j % p->n_readers];
    stk__mutex_lock(&p->mutex);
    while (s->count == 0 && !atomic_load(&p->cfg.run->cancel)) {
        p->waiting_slot = (int)j;
        stk__cond_signal(&owner->cond);
        stk__cond_timedwait_ms(&p->seq_cond, &p->mutex, SEQUENCER_POLL_MS);
    }
    p->waiting_slot = -1;
    int popped = s->count > 0 && !atomic_load(&p->cfg.run->cancel);
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

static int fail_code(struct stk__pipeline *p)
{
    stk__mutex_lock(&p->mutex);
    int code = p->fail.code ? p->fail.code : STK_EINTERNAL;
    stk__mutex_unlock(&p->mutex);
    return code;
}

/* A rank that must yield samples_per_rank samples cycles through its shards;
 * if a whole pass brings none, it would cycle forever. */
static int no_progress(struct stk__pipeline *p)
{
    struct stk__err err;
    stk__errf(&err, STK_EPLAN,
              "rank %d: its %zu shard(s) hold no readable samples, cannot yield %llu samples",
              p->cfg.rank, p->rank_shards, (unsigned long long)p->cfg.opts.samples_per_rank);
    stk__mutex_lock(&p->mutex);
    record_failure(p, &err);
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
static void charge(struct sequencer *sq, const struct item *it)
{
    if (sq->held != NULL) {
        sq->held->bad_samples += it->bad_samples;
        sq->held->bad_shards += it->bad_shards;
    } else if (sq->pulled == 0) {
        sq->carry_samples += it->bad_samples;
        sq->carry_shards += it->bad_shards;
    }
}

/* Next sample of the interleaved input: 1 sample, 0 input over, 2 stopped,
 * <0 error. */
static int next_input(struct sequencer *sq, struct stk__sample **out)
{
    struct stk__pipeline *p = sq->p;
    for (;;) {
        int j = stk__interleave_pick(&sq->il);
        if (j < 0)
            return 0;
        struct item it;
        if (!pop_item(p, (unsigned)j, &it))
            return 2;
        switch (it.kind) {
        case ITEM_SAMPLE:
            stk__interleave_sample(&sq->il);
            stk__mixing_sample(&sq->mix, (unsigned)j);
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
 * whatever the error policy: the samples are fine, the budget is not. Frees
 * s; returns STK_ELIMIT. */
static int window_too_big(struct stk__pipeline *p, const struct stk__shuffle *sh,
                          struct stk__sample *s)
{
    const double mib = 1024.0 * 1024.0;
    uint64_t bytes = sh->bytes + s->bytes, budget = p->cfg.opts.shuffle_buffer_bytes;
    /* The shuffle may hold twice its reach (shuffle.h): the reach that fits
     * is half the samples that do. */
    uint64_t each = bytes / (sh->count + 1), fit = each > 0 ? budget / each / 2 : sh->count;
    char key[STK__SHOWN_MAX];
    struct stk__err err;
    stk__errf(&err, STK_ELIMIT,
              "the shuffle window would hold %zu samples of %.1f MiB in all, above "
              "shuffle_buffer_bytes (%.1f MiB); lower shuffle_buffer (to %llu for samples of "
              "this size) or raise shuffle_buffer_bytes (the last: %s: sample '%s', %.1f MiB)",
              sh->count + 1, (double)bytes / mib, (double)budget / mib,
              (unsigned long long)(fit > 1 ? fit : 1), s->pub.url,
              stk__shown(key, sizeof key, s->key), (double)s->bytes / mib);
    stk__sample_free(s);
    stk__mutex_lock(&p->mutex);
    record_failure(p, &err);
    stk__mutex_unlock(&p->mutex);
    return STK_ELIMIT;
}

/* Queue a filled batch; it becomes deliverable once its slots are done. */
static void deliver(struct stk__pipeline *p, struct stk__batch *b)
{
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
static void batch_done(void *data, struct stk__batch *b)
{
    struct stk__pipeline *p = data;
    (void)b;
    stk__mutex_lock(&p->mutex);
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
}

/* Before starting batch `index`: wait while it is past the range's limit.
 * 0, or 1 if stopped. */
static int wait_for_range(struct stk__pipeline *p, uint64_t index)
{
    stk__mutex_lock(&p->mutex);
    while (index >= p->limit && !atomic_load(&p->cfg.run->cancel))
        stk__cond_wait(&p->range_cond, &p->mutex);
    stk__mutex_unlock(&p->mutex);
    return atomic_load(&p->cfg.run->cancel) ? 1 : 0;
}

/* A batch is complete: count how it mixes shards, then queue it. */
static void close_batch(struct sequencer *sq, struct stk__batch *b)
{
    stk__mixing_batch(&sq->mix, b->samples, b->pub.n_samples, &sq->p->cfg.run->counters);
    deliver(sq->p, b);
}

/* Put a sample into the batch being built. 0, 1 stopped, or STK_ENOMEM. */
static int emit(struct sequencer *sq, struct stk__batch **batch, uint64_t *index,
                struct stk__sample *s)
{
    struct stk__pipeline *p = sq->p;
    if (*batch == NULL) {
        if (wait_for_range(p, *index) || stk__budget_acquire(p->cfg.budget, &p->cfg.run->cancel)) {
            stk__sample_free(s);
            return 1;
        }
        *batch = stk__batch_new(p->cfg.opts.batch_size, (*index)++, p->cfg.budget, p->cfg.ring);
        if (*batch == NULL) {
            stk__sample_free(s);
            return STK_ENOMEM;
        }
    }
    stk__batch_add(*batch, s);
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

/* Add the sequencer's CPU time since *published to the counters. Its waits
 * are many (readers, batch buffers, image workers), so CPU time is simpler
 * and more exact than timing the work between them. */
static void publish_cpu(struct stk__pipeline *p, uint64_t *published)
{
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
static int sequence(struct stk__pipeline *p, struct sequencer *sq, struct stk__shuffle *sh)
{
    uint64_t published = stk__thread_cpu_ns();
    unsigned since_publish = 0;
    struct stk__batch *batch = NULL;
    uint64_t index = p->cfg.first_batch;
    uint64_t to_drop = p->seeking ? p->seek.drop : p->cfg.first_batch * p->cfg.opts.batch_size;
    uint64_t target = p->cfg.opts.samples_per_rank ? p->cfg.opts.samples_per_rank : UINT64_MAX;
    int input_done = 0, failed = 0, rc = 0;
    sq->pulled = p->seeking ? p->seek.input_start : 0;
    for (;;) {
        if (++since_publish == CPU_PUBLISH_EVERY) {
            publish_cpu(p, &published);
            since_publish = 0;
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
            /* The sample in hand goes into the shuffle once the next one is
             * taken or the input is over, so a shard end after it can still
             * charge its bad input to it (charge()). */
            struct stk__sample *held = sq->held;
            sq->held = NULL;
            if (held != NULL && sh->count > 0 &&
                sh->bytes + held->bytes > p->cfg.opts.shuffle_buffer_bytes) {
                stk__sample_free(s); /* the one taken after it */
                rc = window_too_big(p, sh, held);
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
            } else {
                sq->pulled++;
                sq->held = s;
            }
            continue;
        }
        if (to_drop > 0) {
            to_drop--;
            stk__sample_free(s);
            continue;
        }
        rc = emit(sq, &batch, &index, s);
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

/* Seeds of the sequencer's random choices for this rank and epoch. */
static uint64_t sequencer_seed(const struct stk__pipeline_config *cfg, uint64_t purpose)
{
    uint64_t base = stk__mix(stk__mix(cfg->opts.seed, cfg->opts.epoch),
                             ((uint64_t)cfg->rank << 32) | (uint64_t)cfg->world_size);
    return stk__mix(base, purpose);
}
#define INTERLEAVE_SEED 0x496e746572ull
#define SHUFFLE_SEED 0x53687566ull

static size_t shuffle_window(const struct stk_options *o)
{
    return o->shuffle && o->shuffle_buffer > 1 ? o->shuffle_buffer : 1;
}

static void *sequencer_main(void *arg)
{
    struct stk__pipeline *p = arg;
    struct sequencer sq = {.p = p};
    struct stk__shuffle sh;
    int rc = stk__shuffle_init(&sh, shuffle_window(&p->cfg.opts),
                               sequencer_seed(&p->cfg, SHUFFLE_SEED),
                               p->seeking ? &p->seek.start : NULL);
    if (rc == 0)
        rc = stk__mixing_init(&sq.mix, p->cfg.opts.batch_size, p->n_slots, p->seeking);
    if (rc == 0)
        rc = stk__interleave_init(&sq.il, p->n_slots, p->rank_shards, p->cfg.opts.shuffle,
                                  sequencer_seed(&p->cfg, INTERLEAVE_SEED));
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
    p->finished = 1;
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
    return NULL;
}

/* ---- lifetime ---- */

static void free_slots(struct stk__pipeline *p)
{
    for (unsigned j = 0; j < p->n_slots; j++) {
        struct slot *s = &p->slots[j];
        for (size_t i = 0; i < s->count; i++)
            stk__sample_free(s->ring[(s->head + i) % SLOT_MAX_ITEMS].sample);
        stk__shard_close(s->reader);
    }
    stk__free(p->slots);
}

void stk__pipeline_stop(struct stk__pipeline *p)
{
    if (p == NULL)
        return;
    atomic_store(&p->cfg.run->cancel, 1);
    stk__mutex_lock(&p->mutex);
    for (unsigned t = 0; t < p->n_readers; t++)
        stk__cond_broadcast(&p->readers[t].cond);
    stk__cond_broadcast(&p->seq_cond);
    stk__cond_broadcast(&p->batch_cond);
    stk__cond_broadcast(&p->range_cond);
    stk__mutex_unlock(&p->mutex);
    stk__budget_wake(p->cfg.budget);

    for (unsigned t = 0; t < p->readers_started; t++)
        stk__thread_join(p->readers[t].tid);
    if (p->seq_started)
        stk__thread_join(p->seq_tid);
    stk__image_workers_stop(p->workers);
    stk__batch_free(p->partial);
    for (unsigned t = 0; t < p->n_readers; t++) {
        stk__cond_destroy(&p->readers[t].cond);
        stk__plan_cursor_free(&p->readers[t].cursor);
    }
    stk__seek_plan_free(&p->seek);
    while (p->queue_head != NULL) {
        struct stk__batch *b = p->queue_head;
        p->queue_head = b->next;
        stk__batch_free(b);
    }
    free_slots(p);
    stk__free(p->readers);
    stk__cond_destroy(&p->seq_cond);
    stk__cond_destroy(&p->batch_cond);
    stk__cond_destroy(&p->range_cond);
    stk__mutex_destroy(&p->mutex);
    stk__free(p);
}

/* Where each slot starts: at shards 0..K-1, or for a resumed epoch with
 * per-shard sample counts where the seek plan puts it. */
static int plan_slots(struct stk__pipeline *p)
{
    for (unsigned j = 0; j < p->n_slots; j++)
        p->slots[j].position = j;
    if (p->cfg.first_batch == 0 || p->cfg.shard_samples == NULL)
        return 0;
    const struct stk_options *o = &p->cfg.opts;
    struct stk__seek_request req = {
        .cursor = &p->readers[0].cursor,
        .shard_samples = p->cfg.shard_samples,
        .n_slots = p->n_slots,
        .shuffle = o->shuffle,
        .interleave_seed = sequencer_seed(&p->cfg, INTERLEAVE_SEED),
        .shuffle_seed = sequencer_seed(&p->cfg, SHUFFLE_SEED),
        .window = shuffle_window(o),
        .output_position = p->cfg.first_batch * o->batch_size,
        .target = o->samples_per_rank ? o->samples_per_rank : UINT64_MAX,
    };
    int rc = stk__seek_plan_compute(&p->seek, &req);
    if (rc <= 0)
        return rc;
    p->seeking = 1;
    for (unsigned j = 0; j < p->n_slots; j++) {
        p->slots[j].position = p->seek.il.slot_position[j];
        p->slots[j].skip = p->seek.slot_skip[j];
    }
    return 0;
}

int stk__pipeline_start(const struct stk__pipeline_config *cfg, struct stk__pipeline **out,
                        struct stk__err *err)
{
    *out = NULL;
    struct stk__pipeline *p = stk__calloc(1, sizeof *p);
    if (p == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory starting an epoch");
    p->cfg = *cfg;
    p->rank_shards = stk__plan_rank_count(cfg->urls->count, cfg->rank, cfg->world_size);
    /* More slots than the rank has shards would only read its next pass
     * early. */
    p->n_slots = cfg->opts.shards_in_flight;
    if (p->rank_shards > 0 && p->n_slots > p->rank_shards)
        p->n_slots = (unsigned)p->rank_shards;
    p->n_readers = cfg->opts.threads < p->n_slots ? cfg->opts.threads : p->n_slots;
    /* A remote stream blocks its reader for a round trip at every shard
     * start and stall: one reader per slot keeps the others flowing (and
     * opens every slot's first shard at once), where for local files one
     * per thread avoids switching between more readers than cores. */
    if (cfg->any_remote)
        p->n_readers = p->n_slots;
    atomic_store(&cfg->run->counters.read_threads, p->n_readers);
    atomic_store(&cfg->run->counters.shuffle_epoch_shards, p->rank_shards);
    p->waiting_slot = -1;
    p->next_index = cfg->first_batch;
    p->limit = cfg->batch_limit;
    /* The run's cancel flag is the epoch's stop: sources waiting on a
     * server or a command give up when it is set. */
    p->cfg.shard.run = cfg->run;
    p->cfg.shard.source.cancel = &cfg->run->cancel;
    atomic_store(&cfg->run->cancel, 0);
    stk__mutex_init(&p->mutex);
    stk__cond_init(&p->seq_cond);
    stk__cond_init(&p->batch_cond);
    stk__cond_init(&p->range_cond);
    p->slots = stk__calloc(p->n_slots, sizeof *p->slots);
    p->readers = stk__calloc(p->n_readers, sizeof *p->readers);
    int rc = 0;
    if (p->slots == NULL || p->readers == NULL)
        rc = STK_ENOMEM;
    for (unsigned t = 0; p->readers != NULL && t < p->n_readers; t++) {
        struct reader_thread *rt = &p->readers[t];
        rt->p = p;
        rt->index = t;
        stk__cond_init(&rt->cond);
        if (rc == 0)
            rc = stk__plan_cursor_init(&rt->cursor, cfg->urls->count, cfg->opts.seed,
                                       cfg->opts.epoch, cfg->rank, cfg->world_size,
                                       cfg->opts.shuffle, cfg->opts.samples_per_rank != 0);
    }
    if (rc == 0)
        rc = plan_slots(p);
    if (rc < 0) {
        stk__errf(err, rc, "out of memory starting an epoch");
        goto fail;
    }
    for (unsigned t = 0; t < p->n_readers; t++) {
        rc = stk__thread_create(&p->readers[t].tid, reader_main, &p->readers[t]);
        if (rc < 0) {
            stk__errf(err, rc, "cannot start a reader thread: %s", strerror(-rc));
            goto fail;
        }
        p->readers_started++;
    }
    if (cfg->image != NULL) {
        struct stk__image_workers_config pc = {
            .threads = cfg->opts.threads,
            .max_tasks = cfg->opts.max_batches * cfg->opts.batch_size,
            .image = cfg->image,
            .rules = cfg->rules,
            .run = cfg->run,
            .batch_done = batch_done,
            .batch_done_data = p,
        };
        rc = stk__image_workers_start(&pc, &p->workers, err);
        if (rc < 0)
            goto fail;
    }
    rc = stk__thread_create(&p->seq_tid, sequencer_main, p);
    if (rc < 0) {
        stk__errf(err, rc, "cannot start the sequencer thread: %s", strerror(-rc));
        goto fail;
    }
    p->seq_started = 1;
    *out = p;
    return 0;
fail:
    if (p->readers == NULL)
        p->n_readers = 0;
    if (p->slots == NULL)
        p->n_slots = 0;
    stk__pipeline_stop(p);
    return rc;
}

/* Bad samples of a finished batch (image, label or required member).
 * Under the skip policy each is replaced by a copy of the batch's first
 * good sample, and counted, so every rank still gets full, equal batches:
 * its image, its label and its public sample (key, members), so a slot
 * never pairs one sample's image with another's caption. Otherwise the
 * batch's first error ends the epoch. */
static int settle_failures(struct stk__pipeline *p, struct stk__batch *b, struct stk__err *err)
{
    if (b->error.code == 0)
        return 0;
    size_t n = b->pub.n_samples, good = n;
    for (size_t i = 0; i < n && good == n; i++)
        if (!b->failed[i])
            good = i;
    if (!p->cfg.run->skip_bad || b->out_of_memory) { /* no memory is never bad input */
        *err = b->error;
        return b->error.code;
    }
    if (good == n) /* nothing to copy: the last sample's own error, naming what it lacks */
        return stk__errf(err, b->error.code, "every sample of batch %llu is bad; the last: %s",
                         (unsigned long long)b->pub.index, b->error.msg);
    size_t bytes = b->ring->image_bytes, replaced = 0;
    int64_t *labels = (int64_t *)((char *)b->buffer + b->ring->labels_offset);
    for (size_t i = 0; i < n; i++) {
        if (!b->failed[i])
            continue;
        memcpy((char *)b->buffer + i * bytes, (char *)b->buffer + good * bytes, bytes);
        labels[i] = labels[good];
        b->pubs[i] = b->pubs[good]; /* the bad sample itself stays owned by samples[i] */
        replaced++;
    }
    atomic_fetch_add(&p->cfg.run->counters.images_replaced, replaced);
    atomic_fetch_add(&p->cfg.run->counters.samples_skipped, replaced);
    b->pub.images_replaced = replaced;
    b->pub.samples_skipped += replaced;
    return 0;
}

/* Mixup or CutMix of a settled batch, on the caller's thread outside the
 * pipeline's lock, keyed by the batch index (mix.h). */
static int mix_batch(struct stk__pipeline *p, struct stk__batch *b, struct stk__err *err)
{
    const struct stk_options *o = &p->cfg.opts;
    if (p->cfg.image == NULL)
        return 0;
    double cutmix_share = o->mix_switch_probability ? o->mix_switch_probability : 0.5;
    /* the image's seed: the option's, or a repeated-augmentation copy's */
    const struct stk__mix_params mp = {o->mixup_alpha, o->cutmix_alpha, cutmix_share,
                                       p->cfg.image->seed, o->epoch, p->cfg.rank};
    if (o->transform != STK_TRANSFORM_TRAIN || !stk__mix_enabled(&mp))
        return 0;
    uint64_t t0 = stk__now_ns();
    size_t n = b->pub.n_samples;
    b->mix_labels = stk__malloc((n ? n : 1) * sizeof *b->mix_labels);
    void *scratch = stk__malloc(b->ring->image_bytes);
    if (b->mix_labels == NULL || scratch == NULL) {
        stk__free(scratch);
        return stk__errf(err, STK_ENOMEM, "no memory to mix batch %llu",
                         (unsigned long long)b->pub.index);
    }
    struct stk__mix_draw d;
    stk__mix_draw(&mp, b->pub.index, p->cfg.image->width, p->cfg.image->height, &d);
    stk__mix_apply(&d, p->cfg.image, b->buffer, n, b->pub.labels, b->mix_labels, scratch);
    stk__free(scratch);
    b->pub.mix_labels = b->mix_labels;
    b->pub.mix_weight = d.lambda;
    atomic_fetch_add(&p->cfg.run->counters.batch_mix_ns, stk__now_ns() - t0);
    return 0;
}

int stk__pipeline_next(struct stk__pipeline *p, struct stk__batch **out, unsigned timeout_ms,
                       struct stk__err *err)
{
    *out = NULL;
    int rc = 0;
    const uint64_t deadline = stk__now_ns() + (uint64_t)timeout_ms * 1000000u;
    stk__mutex_lock(&p->mutex);
    while (p->next_index < p->limit &&
           ((p->queue_head == NULL && !p->finished) ||
            (p->queue_head != NULL && atomic_load(&p->queue_head->pending) != 0))) {
        if (atomic_load(&p->cfg.budget->held_by_caller) >= p->cfg.budget->limit) {
            rc = stk__errf(err, STK_EBUSY,
                           "the caller holds all %zu batches the loader may have; release one "
                           "with stk_batch_release()",
                           p->cfg.budget->limit);
            goto out;
        }
        if (p->cfg.interrupt != NULL && atomic_exchange(p->cfg.interrupt, 0)) {
            rc = stk__errf(err, STK_EINTR, "interrupted (stk_loader_interrupt) while waiting "
                           "for a batch; the epoch goes on");
            goto out;
        }
        if (timeout_ms == 0) {
            stk__cond_wait(&p->batch_cond, &p->mutex);
            continue;
        }
        const uint64_t now = stk__now_ns();
        if (now >= deadline) {
            rc = stk__errf(err, STK_EINTR, "no batch within %u ms; the epoch goes on", timeout_ms);
            goto out;
        }
        stk__cond_timedwait_ms(&p->batch_cond, &p->mutex,
                               (unsigned)((deadline - now + 999999u) / 1000000u));
    }
    if (p->next_index >= p->limit) {
        rc = STK_EOF; /* the range is over; batches made past it stay queued */
    } else if (p->queue_head != NULL) {
        struct stk__batch *b = p->queue_head;
        p->queue_head = b->next;
        if (p->queue_head == NULL)
            p->queue_tail = NULL;
        rc = settle_failures(p, b, err);
        if (rc < 0) {
            stk__mutex_unlock(&p->mutex);
            stk__batch_free(b);
            return rc;
        }
        atomic_fetch_add(&p->cfg.budget->held_by_caller, 1);
        p->next_index = b->pub.index + 1;
        *out = b;
    } else if (p->fail.code != 0) {
        *err = p->fail;
        rc = p->fail.code;
    } else {
        rc = STK_EOF;
    }
out:
    stk__mutex_unlock(&p->mutex);
    if (*out != NULL && mix_batch(p, *out, err) < 0) {
        atomic_fetch_sub(&p->cfg.budget->held_by_caller, 1);
        stk__batch_free(*out);
        *out = NULL;
        return err->code;
    }
    return rc;
}

uint64_t stk__pipeline_next_index(struct stk__pipeline *p)
{
    stk__mutex_lock(&p->mutex);
    uint64_t next = p->fail.code != 0 ? UINT64_MAX : p->next_index;
    stk__mutex_unlock(&p->mutex);
    return next;
}

void stk__pipeline_set_limit(struct stk__pipeline *p, uint64_t limit)
{
    stk__mutex_lock(&p->mutex);
    p->limit = limit;
    stk__cond_broadcast(&p->range_cond);
    stk__mutex_unlock(&p->mutex);
}

void stk__pipeline_wake(struct stk__pipeline *p)
{
    stk__mutex_lock(&p->mutex);
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
}
