/* SPDX-License-Identifier: MIT */
/*
 * pipeline_readers.c - the reader threads: each fills the queues of its
 * slots with the samples of their shards, in storage order.
 * DESIGN (locking): see pipeline_impl.h.
 */
#include "pipeline/pipeline_impl.h"

#include "cache/cache.h"
#include "plan/node_uses.h"

static int slot_has_room(const struct stk__pipeline *p, const struct slot *s) {
    return !s->ended && s->count < SLOT_MAX_ITEMS &&
           (s->count == 0 || s->bytes < p->cfg.opts.prefetch_bytes_per_shard);
}

/* Choose which of this thread's slots to read for; -1 if none has room.
 * The slot the sequencer waits on comes first, then the emptiest. */
static int choose_slot(const struct stk__pipeline *p, const struct reader_thread *rt) {
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
 * already consumed, and when the rank reads a part of the shard what
 * precedes it; returns 1 opened, 0 end of this slot's stream, 2 shard
 * skipped as bad (an ITEM_SHARD_END), <0 error in rt->err. */
static int open_next_shard(struct reader_thread *rt, struct slot *s) {
    struct stk__pipeline *p = rt->p;
    struct stk__plan_segment seg;
    if (!stk__plan_cursor_segment(&rt->cursor, s->position, &seg))
        return 0;
    const size_t shard = seg.shard;
    /* The node cache's clock: reads planned before this one are past. */
    if (p->cfg.shard.cache != NULL)
        stk__cache_advance(p->cfg.shard.cache,
                           stk__plan_use_time(p->cfg.opts.epoch, s->position, p->rank_shards));
    const uint64_t skip = seg.first + s->skip; /* samples of the shard not read here */
    /* A resumed slot starts at the last sample it must pass over that the
     * index locates (its offset: nothing before is read), else at the shard's
     * start, and reads past the rest. */
    uint64_t at = 0, position = 0;
    const uint64_t *offsets = p->cfg.shard_offsets != NULL ? p->cfg.shard_offsets[shard] : NULL;
    if (skip > 0 && offsets != NULL && p->cfg.shard_samples[shard] > 0) {
        position = skip < p->cfg.shard_samples[shard] ? skip : p->cfg.shard_samples[shard] - 1;
        at = offsets[position];
    }
    int rc = stk__shard_open_at(p->cfg.urls->items[shard], p->cfg.names->items[shard], shard,
                                &p->cfg.shard, at, position, &s->reader, &rt->err);
    if (rc == 0 && p->cfg.shard_samples != NULL) {
        struct stk__shard_expect e = {
            .stamp = p->cfg.shard_stamps != NULL ? &p->cfg.shard_stamps[shard] : NULL,
            .samples = p->cfg.shard_samples[shard],
            .end = seg.count != STK__PLAN_WHOLE ? seg.first + seg.count : 0,
        };
        stk__shard_expect(s->reader, &e);
    }
    if (rc == 0 && skip > position) {
        atomic_fetch_add(&p->cfg.run->counters.samples_passed_over, skip - position);
        rc = stk__shard_skip(s->reader, skip - position, &rt->err);
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
    if (!p->cfg.run->skip_bad || !stk__error_is_bad_input(rc))
        return rc;
    stk__run_log(p->cfg.run, STK_LOG_WARN, "%s (shard skipped)", rt->err.msg);
    atomic_fetch_add(&p->cfg.run->counters.shards_failed, 1);
    stk__mutex_lock(&p->mutex);
    p->last_skip = rt->err;
    stk__mutex_unlock(&p->mutex);
    return 2;
}

/* Read one item for slot s. Runs without the mutex. */
static struct item produce(struct reader_thread *rt, struct slot *s) {
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

void *stk__pipeline_reader_main(void *arg) {
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
            stk__pipeline_record_failure(p, &rt->err);
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
