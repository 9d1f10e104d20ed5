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

/* Whether slot s may read ahead a sample of sample_bytes (of which it
 * reserved s->reading already): within its prefetch_bytes_per_shard and
 * within the budget. A slot once read one whole sample ahead whatever its
 * size, outside any budget. */
static int fits(const struct stk__pipeline *p, const struct slot *s, uint64_t sample_bytes) {
    const struct stk_options *o = &p->cfg.opts;
    return sample_bytes <= s->reading ||
           (atomic_load(&s->bytes) + sample_bytes <= o->prefetch_bytes_per_shard &&
            atomic_load(p->cfg.held_bytes) - s->reading + sample_bytes <= o->shuffle_buffer_bytes);
}

/* Whether slot s reads only past the range's end (stk__pipeline_set_limit)
 * or the rank's last input: in a global order each position of the rank's
 * list is one sample, taken in turn, so position g is input g and, without
 * a window, output g. A range's last batch takes the outputs below limit x
 * batch_size; reading ahead past them (16 slots of 2 MiB: 300 to 400
 * samples of the sample set per Dask task) would be read again by whoever
 * makes the next range. Past samples_per_rank nothing is taken at all: a
 * read there only fetches (through a node cache, a whole shard evicted
 * since: test_nodes.py saw a node fetch a shard twice in the rest of an
 * epoch). */
static int past_range(const struct stk__pipeline *p, const struct slot *s) {
    const uint64_t b = p->cfg.opts.batch_size, target = p->cfg.opts.samples_per_rank;
    return p->cfg.plan.global && ((p->limit <= UINT64_MAX / b && s->position >= p->limit * b) ||
                                  (target != 0 && s->position >= target));
}

/* Choose which of this thread's slots to read for; -1 if none has room.
 * The slot the sequencer waits on comes first (past a range's end only
 * while it is empty: the sequencer takes the sample after the range's
 * last before it stops), then the emptiest; read ahead only within the
 * range, while the budget has room, and not for a slot whose sample was
 * put off until it fits (*budget_bound says that this is why nothing was
 * chosen). */
static int choose_slot(const struct stk__pipeline *p, const struct reader_thread *rt,
                       int *budget_bound) {
    int best = -1;
    const int full = stk__pipeline_budget_full(p);
    *budget_bound = 0;
    for (unsigned j = rt->index; j < p->n_slots; j += p->n_readers) {
        const struct slot *s = &p->slots[j];
        if (!slot_has_room(p, s))
            continue;
        if (past_range(p, s) && ((int)j != p->waiting_slot || s->count > 0))
            continue;
        if ((int)j == p->waiting_slot)
            return (int)j;
        if (full || (s->deferred > 0 && !fits(p, s, s->deferred))) {
            *budget_bound = 1;
            continue;
        }
        if (best < 0 || s->count < p->slots[best].count)
            best = (int)j;
    }
    return best;
}

/* The shard readers' gate (shard_reader.h): reserve the bytes the sample
 * being read holds once its next member is in, if they fit or the
 * sequencer waits for this sample; else "not now", and the reader turns to
 * its other slots or waits for room. */
static int member_gate(void *data, uint64_t sample_bytes) {
    struct reader_thread *rt = data;
    struct stk__pipeline *p = rt->p;
    struct slot *s = rt->slot;
    if (atomic_load(&p->cancel))
        return -1;
    const struct stk_options *o = &p->cfg.opts;
    uint64_t held = atomic_load(p->cfg.held_bytes);
    for (;;) {
        uint64_t want = held - s->reading + sample_bytes;
        if (!rt->must_read && sample_bytes > s->reading &&
            (atomic_load(&s->bytes) + sample_bytes > o->prefetch_bytes_per_shard ||
             want > o->shuffle_buffer_bytes)) {
            s->deferred = sample_bytes;
            return 1;
        }
        if (atomic_compare_exchange_weak(p->cfg.held_bytes, &held, want))
            break;
    }
    atomic_fetch_add(&p->own_bytes, sample_bytes - s->reading);
    s->reading = sample_bytes;
    s->deferred = 0;
    return 0;
}

size_t stk__pipeline_sample_block(size_t block_size, uint64_t at, uint64_t end) {
    uint64_t span = end > at ? end - at + 1024 : 0;
    span = (span + 4095) & ~(uint64_t)4095;
    return span > 0 && span < block_size ? (size_t)span : block_size;
}

void stk__pipeline_expect(const struct stk__pipeline *p, struct stk__shard_reader *r,
                          const struct stk__plan_segment *seg) {
    if (p->cfg.shard_samples == NULL)
        return;
    const size_t shard = seg->shard;
    struct stk__shard_expect e = {
        .stamp = p->cfg.shard_stamps != NULL ? &p->cfg.shard_stamps[shard] : NULL,
        .samples = p->cfg.shard_samples[shard],
        /* A part ending at the shard's last sample reads on to the end:
         * bad input after that sample is counted there (between samples
         * it is the next one's: the index records a sample from the bad
         * run before it), and the count is checked. */
        .end = seg->count != STK__PLAN_WHOLE && seg->first + seg->count < p->cfg.shard_samples[shard]
                   ? seg->first + seg->count
                   : 0,
    };
    stk__shard_expect(r, &e);
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
    s->draws = seg.draws;
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
    } else if (s->skip_from > 0) {
        position = s->skip_from;
        at = s->skip_offset;
    }
    /* A sample opened on its own (a global order) is read in one block of
     * its size and the next header's, not read_buffer_bytes: tiny samples
     * read from 256 KiB blocks cost 30x the time (a 60,000-sample epoch 26.6
     * against 0.9 s here). */
    struct stk__shard_config cfg = p->cfg.shard;
    cfg.gate = member_gate;
    cfg.gate_data = rt;
    if (seg.count == 1 && offsets != NULL && position == skip) {
        uint64_t end = position + 1 < p->cfg.shard_samples[shard]
                           ? offsets[position + 1]
                           : (p->cfg.shard_stamps != NULL ? p->cfg.shard_stamps[shard].size : 0);
        cfg.block_size = stk__pipeline_sample_block(cfg.block_size, at, end);
    }
    int rc = stk__shard_open_at(p->cfg.urls->items[shard], p->cfg.names->items[shard], shard,
                                &cfg, at, position, &s->reader, &rt->err);
    if (rc == 0)
        stk__pipeline_expect(p, s->reader, &seg);
    if (rc == 0 && skip > position) {
        atomic_fetch_add(&p->cfg.run->counters.samples_passed_over, skip - position);
        rc = stk__shard_skip(s->reader, skip - position, &rt->err);
        if (rc < 0) {
            stk__shard_close(s->reader);
            s->reader = NULL;
        }
    }
    s->skip = s->skip_from = s->skip_offset = 0;
    if (rc == 0)
        return 1;
    /* Out of memory, a cache that cannot take the shard and a stale index
     * are not bad input: skipping would drop good shards for a
     * configuration problem. */
    if (!p->cfg.run->skip_bad || !stk__error_is_bad_input(rc))
        return rc;
    stk__run_log(p->cfg.run, STK_LOG_WARN, "%s (shard skipped)", rt->err.msg);
    atomic_fetch_add(&p->cfg.run->counters.shards_failed, 1);
    return 2;
}

/* Read one item for slot s into *it (an ITEM_ERROR on entry). Runs without
 * the mutex. 0 when the gate put the sample off (nothing to queue), else 1. */
static int produce(struct reader_thread *rt, struct slot *s, struct item *it) {
    struct stk__pipeline *p = rt->p;
    if (s->reader == NULL) {
        int rc = open_next_shard(rt, s);
        if (rc < 0)
            return 1;
        if (rc == 0) {
            it->kind = ITEM_STREAM_END;
            return 1;
        }
        if (rc == 2) {
            s->position += p->n_slots;
            it->kind = ITEM_SHARD_END;
            it->bad_shards = 1;
            return 1;
        }
    }
    int rc = stk__shard_next(s->reader, &it->sample, &rt->err);
    if (rc == 2)
        return 0;
    if (rc == 1) {
        it->kind = ITEM_SAMPLE;
        it->sample->pass = s->position / p->rank_shards;
        it->sample->draws = s->draws;
        return 1;
    }
    if (rc == 0) {
        int failed;
        stk__shard_tail(s->reader, &it->bad_samples, &failed);
        it->bad_shards = (uint64_t)failed;
        s->position += p->n_slots;
        it->kind = ITEM_SHARD_END;
    }
    stk__shard_close(s->reader);
    s->reader = NULL;
    return 1;
}

void *stk__pipeline_reader_main(void *arg) {
    struct reader_thread *rt = arg;
    struct stk__pipeline *p = rt->p;
    stk__mutex_lock(&p->mutex);
    while (!atomic_load(&p->cancel)) {
        int budget_bound;
        int j = choose_slot(p, rt, &budget_bound);
        if (j < 0) {
            /* Counted before the budget is looked at again (DESIGN). */
            if (budget_bound)
                atomic_fetch_add(&p->room_waiters, 1);
            /* Room may come from the other epoch's pipeline at a boundary,
             * which does not know this one's readers (pipeline_impl.h). */
            int still;
            if (!budget_bound)
                stk__cond_wait(&rt->cond, &p->mutex);
            else if (choose_slot(p, rt, &still) < 0)
                stk__cond_timedwait_ms(&rt->cond, &p->mutex, SEQUENCER_POLL_MS);
            if (budget_bound)
                atomic_fetch_sub(&p->room_waiters, 1);
            continue;
        }
        struct slot *s = &p->slots[j];
        rt->slot = s;
        rt->must_read = j == p->waiting_slot && s->count == 0;
        stk__mutex_unlock(&p->mutex);
        uint64_t start = stk__now_ns();
        struct item it = {.kind = ITEM_ERROR};
        const int produced = produce(rt, s, &it);
        atomic_fetch_add(&p->cfg.run->counters.read_ns, stk__now_ns() - start);
        if (produced) {
            /* The reservation becomes the sample's (none if the read ended
             * without one) until the sequencer gives it back. */
            stk__pipeline_hold(p, (it.sample != NULL ? it.sample->bytes : 0) - s->reading);
            s->reading = 0;
            s->deferred = 0;
        }
        stk__mutex_lock(&p->mutex);
        if (!produced)
            continue;
        if (atomic_load(&p->cancel)) {
            stk__sample_free(it.sample);
            break;
        }
        if (it.kind == ITEM_SAMPLE && atomic_load(&p->ahead))
            atomic_fetch_add(&p->owner->counters.samples_read_ahead, 1);
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
