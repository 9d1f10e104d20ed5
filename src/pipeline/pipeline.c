/* SPDX-License-Identifier: MIT */
/*
 * pipeline.c - an epoch's lifetime and its batch queue: start the reader
 * and sequencer threads (pipeline_readers.c, pipeline_sequencer.c) and the
 * image workers, hand batches to the caller, stop and join.
 * DESIGN (locking): see pipeline_impl.h.
 */
#include "pipeline/pipeline_impl.h"

static void free_slots(struct stk__pipeline *p) {
    for (unsigned j = 0; j < p->n_slots; j++) {
        struct slot *s = &p->slots[j];
        for (size_t i = 0; i < s->count; i++)
            stk__sample_free(s->ring[(s->head + i) % SLOT_MAX_ITEMS].sample);
        stk__shard_close(s->reader);
    }
    stk__free(p->slots);
}

void stk__pipeline_halt(struct stk__pipeline *p) {
    if (p->halted)
        return;
    p->halted = 1;
    atomic_store(&p->cancel, 1);
    stk__mutex_lock(&p->mutex);
    for (unsigned t = 0; t < p->n_readers; t++)
        stk__cond_broadcast(&p->readers[t].cond);
    stk__cond_broadcast(&p->seq_cond);
    stk__cond_broadcast(&p->batch_cond);
    stk__cond_broadcast(&p->range_cond);
    stk__mutex_unlock(&p->mutex);
    stk__budget_wake(p->cfg.budget);

    stk__head_stop(p);
    for (unsigned t = 0; t < p->readers_started; t++)
        stk__thread_join(p->readers[t].tid);
    if (p->seq_started)
        stk__thread_join(p->seq_tid);
    stk__image_workers_stop(p->workers);
    p->workers = NULL;
}

const struct stk__run *stk__pipeline_counts(const struct stk__pipeline *p) {
    return &p->counts;
}

void stk__pipeline_stop(struct stk__pipeline *p) {
    if (p == NULL)
        return;
    stk__pipeline_halt(p);
    stk__batch_free(p->partial);
    stk__head_free(p);
    for (unsigned t = 0; t < p->n_readers; t++) {
        stk__cond_destroy(&p->readers[t].cond);
        stk__plan_cursor_free(&p->readers[t].cursor);
    }
    stk__seek_plan_free(&p->seek);
    stk__plan_cursor_free(&p->plan);
    while (p->queue_head != NULL) {
        struct stk__batch *b = p->queue_head;
        p->queue_head = b->next;
        stk__batch_free(b);
    }
    free_slots(p);
    /* What its threads held when they stopped (DESIGN, two epochs). */
    atomic_fetch_sub(p->cfg.held_bytes, atomic_load(&p->own_bytes));
    stk__free(p->readers);
    stk__cond_destroy(&p->seq_cond);
    stk__cond_destroy(&p->batch_cond);
    stk__cond_destroy(&p->range_cond);
    stk__mutex_destroy(&p->mutex);
    stk__free(p);
}

/* Shard slots of an epoch whose list holds rank_shards positions: more
 * than that would only read its next pass early. */
static unsigned slots_for(const struct stk__pipeline_config *cfg, size_t rank_shards) {
    unsigned n = cfg->opts.shards_in_flight;
    return rank_shards > 0 && n > rank_shards ? (unsigned)rank_shards : n;
}

/* The epoch's gauges, once it is the one delivered (pipeline.h: ahead). */
static void publish_gauges(struct stk__pipeline *p) {
    struct stk__counters *c = &p->owner->counters;
    atomic_store(&c->samples_padded, p->plan.padded);
    atomic_store(&c->read_threads, p->n_readers);
    atomic_store(&c->shuffle_epoch_shards, p->rank_shards);
}

void stk__pipeline_begin(struct stk__pipeline *p, uint64_t limit) {
    atomic_store(&p->ahead, 0);
    publish_gauges(p);
    stk__pipeline_set_limit(p, limit);
}

/* Where each slot starts: at shards 0..K-1, or for a resumed epoch where
 * the seek plan puts it, from the per-shard sample counts of the index or,
 * without one, of a header scan of the shards it reaches. */
static int plan_slots(struct stk__pipeline *p) {
    for (unsigned j = 0; j < p->n_slots; j++)
        p->slots[j].position = j;
    if (p->cfg.first_batch == 0)
        return 0;
    struct stk__resume_scan scan = {0};
    struct stk__seek_request req = stk__pipeline_seek_request(&p->cfg, &p->readers[0].cursor, p->n_slots,
                                                p->cfg.first_batch * p->cfg.opts.batch_size);
    req.count = stk__resume_scan_count;
    req.count_data = &scan;
    int rc = req.shard_samples != NULL
                 ? 0
                 : stk__resume_scan_init(&scan, p->cfg.urls, p->cfg.names, &p->cfg.shard,
                                         "resume without a dataset index",
                                         "the epoch is read again from its start up to the "
                                         "saved batch (index= jumps there)");
    if (rc == 0)
        rc = stk__seek_plan_compute(&p->seek, &req);
    p->seeking = rc > 0;
    for (unsigned j = 0; p->seeking && j < p->n_slots; j++) {
        struct slot *s = &p->slots[j];
        s->position = p->seek.il.slot_position[j];
        s->skip = p->seek.slot_skip[j];
        struct stk__plan_segment seg;
        if (req.shard_samples == NULL && s->skip > 0 &&
            stk__plan_cursor_segment(req.cursor, s->position, &seg))
            s->skip_offset =
                stk__resume_scan_offset(&scan, seg.shard, seg.first + s->skip, &s->skip_from);
    }
    if (req.shard_samples == NULL)
        stk__resume_scan_free(&scan);
    return rc < 0 ? rc : 0;
}

/* Whether the epoch's first batches are read by offset while its window
 * fills (pipeline_head.c): where a read by offset costs no more than the
 * stream's (local files read as they are, not through a node cache, whose
 * hits and clock count the stream's opens), and the stream would make the
 * first batch wait for a window. */
static int head_wanted(const struct stk__pipeline_config *cfg) {
    return !cfg->ahead && !cfg->any_remote && cfg->shard.cache == NULL &&
           !cfg->opts.sequential_start && stk__pipeline_shuffle_window(&cfg->opts) > 1;
}

int stk__pipeline_delivered(const struct stk__pipeline_config *cfg, uint64_t delivered,
                            uint64_t **out, size_t *n_out) {
    struct stk__plan_cursor cursor;
    *out = NULL;
    *n_out = 0;
    int rc = stk__plan_cursor_open(&cursor, &cfg->plan);
    if (rc < 0)
        return rc;
    struct stk__seek_request req = stk__pipeline_seek_request(cfg, &cursor, slots_for(cfg, cursor.count),
                                                delivered);
    rc = stk__seek_plan_delivered(&req, out, n_out);
    stk__plan_cursor_free(&cursor);
    return rc;
}

int stk__pipeline_start(const struct stk__pipeline_config *cfg, struct stk__pipeline **out,
                        struct stk__err *err) {
    *out = NULL;
    struct stk__pipeline *p = stk__calloc(1, sizeof *p);
    if (p == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory starting an epoch");
    p->cfg = *cfg;
    p->owner = cfg->run;
    stk__run_init_part(&p->counts, cfg->run);
    p->cfg.run = &p->counts;
    if (stk__plan_cursor_open(&p->plan, &cfg->plan) < 0) {
        stk__free(p);
        return stk__errf(err, STK_ENOMEM, "out of memory starting an epoch");
    }
    p->rank_shards = p->plan.count; /* shards, or segments of shards */
    p->n_slots = slots_for(cfg, p->rank_shards);
    p->n_readers = cfg->opts.threads < p->n_slots ? cfg->opts.threads : p->n_slots;
    /* A remote stream blocks its reader for a round trip at every shard
     * start and stall: one reader per slot keeps the others flowing (and
     * opens every slot's first shard at once), where for local files one
     * per thread avoids switching between more readers than cores. */
    if (cfg->any_remote)
        p->n_readers = p->n_slots;
    p->waiting_slot = -1;
    p->next_index = cfg->first_batch;
    p->limit = cfg->ahead ? 0 : cfg->batch_limit;
    atomic_init(&p->ahead, cfg->ahead);
    if (!cfg->ahead)
        publish_gauges(p);
    p->cfg.shard.run = &p->counts;
    p->cfg.shard.source.counters = &p->counts.counters;
    p->cfg.shard.source.cancel = &p->cancel;
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
            rc = p->plan.segments != NULL ? stk__plan_cursor_borrow(&rt->cursor, &p->plan)
                                          : stk__plan_cursor_open(&rt->cursor, &cfg->plan);
    }
    if (rc == 0)
        rc = plan_slots(p);
    if (rc < 0) {
        stk__errf(err, rc, "out of memory starting an epoch");
        goto fail;
    }
    for (unsigned t = 0; t < p->n_readers; t++) {
        rc = stk__thread_create(&p->readers[t].tid, stk__pipeline_reader_main, &p->readers[t]);
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
            .run = p->cfg.run,
            .batch_done = stk__pipeline_batch_done,
            .batch_done_data = p,
        };
        rc = stk__image_workers_start(&pc, &p->workers, err);
        if (rc < 0)
            goto fail;
    }
    if (head_wanted(&p->cfg) && stk__head_start(p, cfg->first_batch * cfg->opts.batch_size) < 0)
        stk__head_free(p); /* the stream alone delivers every batch */
    rc = stk__thread_create(&p->seq_tid, stk__pipeline_sequencer_main, p);
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
static int settle_failures(struct stk__pipeline *p, struct stk__batch *b, struct stk__err *err) {
    if (b->error.code == 0)
        return 0;
    size_t n = b->pub.n_samples, good = n;
    for (size_t i = 0; i < n && good == n; i++)
        if (!b->failed[i])
            good = i;
    if (!p->cfg.run->skip_bad || b->not_bad_input) {
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
        b->keys[i] = b->keys[good];
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
static int mix_batch(struct stk__pipeline *p, struct stk__batch *b, struct stk__err *err) {
    const struct stk_options *o = &p->cfg.opts;
    if (p->cfg.image == NULL)
        return 0;
    double cutmix_share = o->mix_switch_probability ? o->mix_switch_probability : 0.5;
    /* the image's seed: the option's, or a repeated-augmentation copy's */
    const struct stk__mix_params mp = {o->mixup_alpha,     o->cutmix_alpha, cutmix_share,
                                       p->cfg.image->seed, o->epoch,        p->cfg.rank};
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
                       struct stk__err *err) {
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
            rc = stk__errf(err, STK_EINTR,
                           "interrupted (stk_loader_interrupt) while waiting "
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

uint64_t stk__pipeline_next_index(struct stk__pipeline *p) {
    stk__mutex_lock(&p->mutex);
    uint64_t next = p->fail.code != 0 ? UINT64_MAX : p->next_index;
    stk__mutex_unlock(&p->mutex);
    return next;
}

int stk__pipeline_input_over(struct stk__pipeline *p) {
    stk__mutex_lock(&p->mutex);
    int over = p->input_over;
    stk__mutex_unlock(&p->mutex);
    return over;
}

int stk__pipeline_finished(struct stk__pipeline *p) {
    stk__mutex_lock(&p->mutex);
    int finished = p->finished;
    stk__mutex_unlock(&p->mutex);
    return finished;
}

void stk__pipeline_set_limit(struct stk__pipeline *p, uint64_t limit) {
    stk__mutex_lock(&p->mutex);
    p->limit = limit;
    stk__cond_broadcast(&p->range_cond);
    for (unsigned t = 0; t < p->n_readers; t++) /* their read-ahead stopped at the old one */
        stk__cond_broadcast(&p->readers[t].cond);
    stk__mutex_unlock(&p->mutex);
}

void stk__pipeline_wake(struct stk__pipeline *p) {
    stk__mutex_lock(&p->mutex);
    stk__cond_broadcast(&p->batch_cond);
    stk__mutex_unlock(&p->mutex);
}
