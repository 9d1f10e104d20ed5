/* SPDX-License-Identifier: MIT */
/*
 * pipeline_head.c - an epoch's first batches, read by offset while its
 * shuffle window fills.
 *
 * The window's output depends on positions alone (shuffle.h), so the
 * samples of the first batches are known before any byte is read: the
 * outputs' inputs from a replay of the shuffle, their shards and numbers
 * from a replay of the interleave on the shards' counts (seek_plan.h), their
 * byte offsets from the dataset index or, without one, from a scan of the
 * local shards' tar headers (resume_scan.h). This thread reads those
 * samples one by one at their offsets, in output order, and the sequencer
 * emits them while the stream still fills the window; the stream drops
 * what the head delivered, and once it reaches an output the head has not
 * delivered, the head ends. Before, a fresh start read the whole window
 * (2,000 samples at the defaults) before its first output; a batch's
 * samples are 64 of them.
 *
 * The batches are the same whoever read each sample: a sample read at its
 * offset is the one the stream reads (its key, members, numbers and
 * augmentation draws), and the bad input before it in its shard comes with
 * it (an offset is that of the bad run before the sample, shard_reader.h).
 * What the sequencer charges to the input in hand when a shard ends (the
 * bad tail of the shard, or the rest of it cut off) the plan names
 * (seek_plan.h's ends), and the head reads those tails too, from their
 * shard's last sample on. The stream checks every sample it drops for the
 * head against the head's: another sample there, or other bad input with
 * it (shards changed since they were counted), fails the epoch, never
 * delivers other batches than the stream would nor loses a count.
 *
 * Only where a read by offset is as cheap as the stream's: local,
 * uncompressed shards read as they are (not through a node cache: its hits
 * and clock count the stream's opens), with their offsets known; not for
 * an epoch read
 * ahead (its window fills while the last epoch's tail is delivered), nor
 * with sequential_start (a disk where a seek costs more than the window's
 * read). The head's reads have their own counters, like the scan's: the
 * stream reads the same samples and counts them and their bad input; the
 * head adds its bytes to bytes_read as it reads them and its deliveries to
 * samples_fast_start.
 */
#include "pipeline/pipeline_impl.h"

/* Batches the head plans at most (and at most one window): the stream
 * catches up once it has read about a window, a few batches' decode time
 * locally. Its plan costs about 100 bytes a sample. */
#define HEAD_MAX_BATCHES 16
/* Samples the head reads ahead of the sequencer, in batches. */
#define HEAD_DEPTH_BATCHES 2

struct head_place {
    size_t shard;
    uint64_t sample; /* its number among the shard's good samples */
    uint64_t offset; /* where it starts (its bad run's first header) */
    uint64_t end;    /* where the next one starts; 0: not known */
    uint64_t pass;
    uint32_t draws;
    size_t first_end, n_ends; /* the segment ends charged to it: ends[] */
    /* Set when the sequencer takes it: the bad input it went out with,
     * which the stream's copy must hold too (stk__head_delivered). */
    uint64_t bad_samples, bad_shards;
};

/* A segment whose end's bad input the sequencer charges to a place: read
 * from its last sample (or its start when it holds none) to its end. */
struct head_end {
    struct stk__plan_segment seg;
    uint64_t offset;
    uint64_t position;
};

struct stk__head {
    struct stk__pipeline *p;
    pthread_t tid;
    int started;
    pthread_cond_t cond;         /* room in the ring, or over */
    uint64_t first;              /* output position of places[0] */
    struct head_place *places;   /* written by the thread before `planned` */
    size_t n;
    struct head_end *ends;
    struct stk__run run;         /* the head's own counts (above) */
    /* Guarded by p->mutex. */
    int planned;
    int over;                    /* the stream caught up, or the head failed */
    size_t read;                 /* places read into the ring */
    size_t taken;                /* places the sequencer took */
    size_t depth;
    struct stk__sample **ring;   /* [i % depth] holds place i once read */
};

/* The samples of shard and the offset of its sample `sample` (*next: of
 * the one after, 0 if not known), from the index or the scan. 0 when not
 * known (compressed, not counted): the plan stops there. */
static int locate(const struct stk__head *h, const struct stk__resume_scan *scan, size_t shard,
                  uint64_t sample, uint64_t *count, uint64_t *offset, uint64_t *next)
{
    const struct stk__pipeline_config *cfg = &h->p->cfg;
    uint64_t from;
    *next = 0;
    if (cfg->shard_samples != NULL) {
        const uint64_t *offsets = cfg->shard_offsets != NULL ? cfg->shard_offsets[shard] : NULL;
        *count = cfg->shard_samples[shard];
        if (offsets == NULL)
            return 0;
        *offset = sample < *count ? offsets[sample] : 0;
        if (sample + 1 < *count)
            *next = offsets[sample + 1];
        else if (cfg->shard_stamps != NULL)
            *next = cfg->shard_stamps[shard].size;
        return 1;
    }
    if (!scan->counted[shard])
        return 0;
    *count = scan->counts[shard];
    *offset = sample < *count ? stk__resume_scan_offset(scan, shard, sample, &from) : 0;
    if (sample + 1 < *count)
        *next = stk__resume_scan_offset(scan, shard, sample + 1, &from);
    return 1;
}

/* Where the segment at list position g ends: its last sample, or its
 * start when it holds none. 1, or 0 (not known). */
static int locate_end(const struct stk__head *h, const struct stk__resume_scan *scan,
                      struct stk__plan_cursor *cursor, uint64_t g, struct head_end *e)
{
    uint64_t count, next;
    if (!stk__plan_cursor_segment(cursor, g, &e->seg) ||
        !locate(h, scan, e->seg.shard, 0, &count, &e->offset, &next))
        return 0;
    uint64_t last = e->seg.count != STK__PLAN_WHOLE ? e->seg.first + e->seg.count : count;
    e->position = last > e->seg.first ? last - 1 : e->seg.first;
    if (last > e->seg.first)
        locate(h, scan, e->seg.shard, e->position, &count, &e->offset, &next);
    else
        e->offset = e->position = 0; /* an empty shard: read from its start */
    return 1;
}

/* The places of outputs [first, first + n): 0 planned (h->n may be 0), or
 * STK_ENOMEM. One output more is asked for than the head takes: the stream
 * delivers at least the epoch's last. */
static int plan(struct stk__head *h)
{
    struct stk__pipeline *p = h->p;
    const uint64_t b = p->cfg.opts.batch_size;
    size_t window = stk__pipeline_shuffle_window(&p->cfg.opts);
    uint64_t want = HEAD_MAX_BATCHES * b < window ? HEAD_MAX_BATCHES * b : window;
    if (p->cfg.batch_limit <= UINT64_MAX / b) { /* a range: none past its end */
        const uint64_t end = p->cfg.batch_limit * b;
        want = end <= h->first ? 0 : end - h->first < want ? end - h->first : want;
    }
    if (want == 0)
        return 0;
    struct stk__plan_cursor cursor;
    int rc = stk__plan_cursor_open(&cursor, &p->cfg.plan);
    if (rc < 0)
        return rc;
    struct stk__resume_scan scan = {0};
    struct stk__seek_request req = stk__pipeline_seek_request(&p->cfg, &cursor, p->n_slots,
                                                              h->first);
    req.count = stk__resume_scan_count;
    req.count_data = &scan;
    struct stk__seek_place *out = stk__calloc(want + 1, sizeof *out);
    uint64_t *ends = NULL;
    size_t got = 0, n_ends = 0;
    h->places = stk__calloc(want + 1, sizeof *h->places);
    rc = out == NULL || h->places == NULL ? STK_ENOMEM : 0;
    if (rc == 0 && req.shard_samples == NULL)
        rc = stk__resume_scan_init(&scan, p->cfg.urls, p->cfg.names, &p->cfg.shard,
                                   "first batches without a dataset index",
                                   "they wait for the shuffle window to fill (read by offset "
                                   "only from uncompressed shards whose samples it can place)");
    if (rc == 0)
        rc = stk__seek_plan_outputs(&req, h->first, want + 1, out, &got, &ends, &n_ends);
    if (rc > 0 && (h->ends = stk__calloc(n_ends + 1, sizeof *h->ends)) == NULL)
        rc = STK_ENOMEM;
    const size_t use = rc <= 0 ? 0 : got > want ? want : got - 1;
    int known = 1;
    for (size_t i = 0; i < use && known; i++) {
        struct stk__plan_segment seg;
        struct head_place *pl = &h->places[i];
        uint64_t count;
        known = stk__plan_cursor_segment(&cursor, out[i].list_position, &seg) &&
                locate(h, &scan, seg.shard, seg.first + out[i].sample, &count, &pl->offset,
                       &pl->end);
        pl->shard = seg.shard;
        pl->sample = seg.first + out[i].sample;
        pl->pass = out[i].list_position / p->rank_shards;
        pl->draws = seg.draws;
        pl->first_end = out[i].first_end;
        pl->n_ends = out[i].n_ends;
        for (size_t e = 0; e < pl->n_ends && known; e++)
            known = locate_end(h, &scan, &cursor, ends[pl->first_end + e],
                               &h->ends[pl->first_end + e]);
        if (known)
            h->n = i + 1;
    }
    if (req.shard_samples == NULL)
        stk__resume_scan_free(&scan);
    stk__plan_cursor_free(&cursor);
    stk__free(out);
    stk__free(ends);
    return rc < 0 ? rc : 0;
}

/* Open shard at offset, where its sample `position` starts, as the head
 * reads: its own counts, no gate, a block of `block` bytes. 0 or <0 (err
 * set). */
static int open_at(struct stk__head *h, size_t shard, uint64_t offset, uint64_t position,
                   size_t block, struct stk__shard_reader **r, struct stk__err *err)
{
    struct stk__pipeline *p = h->p;
    struct stk__shard_config cfg = p->cfg.shard;
    cfg.run = &h->run;
    cfg.source.counters = &h->run.counters;
    cfg.gate = NULL;
    cfg.source.jumps = 1; /* one sample: no read-ahead of the whole file */
    cfg.block_size = block;
    return stk__shard_open_at(p->cfg.urls->items[shard], p->cfg.names->items[shard], shard, &cfg,
                              offset, position, r, err);
}

/* The bad input the stream's reader reports at the end of e's segment
 * (ITEM_SHARD_END): read from its last sample to where the readers stop.
 * 0 or <0 (err set). */
static int read_end(struct stk__head *h, const struct head_end *e, uint64_t *bad_samples,
                    uint64_t *bad_shards, struct stk__err *err)
{
    struct stk__shard_reader *r;
    int rc = open_at(h, e->seg.shard, e->offset, e->position, h->p->cfg.shard.block_size, &r,
                     err);
    if (rc < 0)
        return rc;
    stk__pipeline_expect(h->p, r, &e->seg);
    struct stk__sample *s = NULL;
    while ((rc = stk__shard_next(r, &s, err)) == 1) {
        stk__sample_free(s);
        s = NULL;
    }
    if (rc == 0) {
        uint64_t skipped;
        int failed;
        stk__shard_tail(r, &skipped, &failed);
        *bad_samples += skipped;
        *bad_shards += (uint64_t)failed;
    }
    stk__shard_close(r);
    return rc;
}

/* Read place i: 1 and *out, or 0 (the head ends: the stream will meet
 * whatever stopped it, and report it by the policy). */
static int read_place(struct stk__head *h, size_t i, struct stk__sample **out)
{
    struct stk__pipeline *p = h->p;
    const struct head_place *pl = &h->places[i];
    struct stk__shard_reader *r;
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__sample *s = NULL;
    int rc = open_at(h, pl->shard, pl->offset, pl->sample,
                     stk__pipeline_sample_block(p->cfg.shard.block_size, pl->offset, pl->end),
                     &r, &err);
    if (rc == 0) {
        rc = stk__shard_next(r, &s, &err);
        stk__shard_close(r);
    }
    for (size_t e = 0; rc == 1 && e < pl->n_ends; e++)
        if ((rc = read_end(h, &h->ends[pl->first_end + e], &s->bad_samples, &s->bad_shards,
                           &err)) == 0)
            rc = 1;
    /* Its bytes count as read now, the rest of its counts never (above). */
    atomic_fetch_add(&p->cfg.run->counters.bytes_read,
                     atomic_exchange(&h->run.counters.bytes_read, 0));
    if (rc == 1) {
        s->pass = pl->pass;
        s->draws = pl->draws;
        *out = s;
        return 1;
    }
    stk__sample_free(s);
    if (rc != 0)
        stk__run_log(p->cfg.run, STK_LOG_INFO,
                     "the first batches by offset stop at %s sample %llu: %s",
                     p->cfg.names->items[pl->shard], (unsigned long long)pl->sample, err.msg);
    return 0;
}

static void *head_main(void *arg)
{
    struct stk__head *h = arg;
    struct stk__pipeline *p = h->p;
    int rc = plan(h);
    stk__mutex_lock(&p->mutex);
    h->planned = 1;
    h->over = rc < 0 || h->n == 0;
    for (size_t i = 0; i < h->n && !h->over && !atomic_load(&p->cancel); i++) {
        while (i - h->taken >= h->depth && !h->over && !atomic_load(&p->cancel))
            stk__cond_wait(&h->cond, &p->mutex);
        if (h->over || atomic_load(&p->cancel))
            break;
        stk__mutex_unlock(&p->mutex);
        struct stk__sample *s = NULL;
        const int got = read_place(h, i, &s);
        if (got)
            stk__pipeline_hold(p, s->bytes);
        stk__mutex_lock(&p->mutex);
        if (!got) {
            h->over = 1;
            break;
        }
        h->ring[i % h->depth] = s;
        h->read = i + 1;
        stk__cond_signal(&p->seq_cond);
    }
    stk__mutex_unlock(&p->mutex);
    return NULL;
}

int stk__head_start(struct stk__pipeline *p, uint64_t first)
{
    struct stk__head *h = stk__calloc(1, sizeof *h);
    if (h == NULL)
        return STK_ENOMEM;
    h->p = p;
    h->first = first;
    h->depth = HEAD_DEPTH_BATCHES * p->cfg.opts.batch_size;
    h->ring = stk__calloc(h->depth, sizeof *h->ring);
    stk__run_init(&h->run, NULL);
    h->run.skip_bad = p->cfg.run->skip_bad;
    stk__cond_init(&h->cond);
    p->head = h;
    if (h->ring == NULL)
        return STK_ENOMEM;
    int rc = stk__thread_create(&h->tid, head_main, h);
    h->started = rc == 0;
    return rc;
}

int stk__head_ready(const struct stk__head *h, uint64_t output)
{
    return h != NULL && !h->over && output >= h->first && output - h->first < h->read &&
           output - h->first >= h->taken;
}

int stk__head_done(const struct stk__head *h)
{
    return h == NULL || (h->planned && (h->over || h->taken == h->n));
}

struct stk__sample *stk__head_take(struct stk__head *h, uint64_t output)
{
    struct stk__pipeline *p = h->p;
    stk__mutex_lock(&p->mutex);
    struct stk__sample *s = NULL;
    if (stk__head_ready(h, output)) {
        const size_t i = (size_t)(output - h->first);
        s = h->ring[i % h->depth];
        h->ring[i % h->depth] = NULL;
        h->taken = i + 1;
        stk__cond_signal(&h->cond);
    }
    stk__mutex_unlock(&p->mutex);
    if (s != NULL) {
        atomic_fetch_add(&p->cfg.run->counters.samples_fast_start, 1);
        /* What the head delivered with it, for the stream's check. */
        h->places[output - h->first].bad_samples = s->bad_samples;
        h->places[output - h->first].bad_shards = s->bad_shards;
    }
    return s;
}

int stk__head_delivered(const struct stk__head *h, uint64_t output,
                        const struct stk__sample *stream, struct stk__err *err)
{
    if (h == NULL || output < h->first || output - h->first >= h->taken)
        return 0;
    const struct head_place *pl = &h->places[output - h->first];
    const char *const *names = (const char *const *)h->p->cfg.names->items;
    if (stream->pub.shard_index == pl->shard && stream->position == pl->sample &&
        stream->bad_samples == pl->bad_samples && stream->bad_shards == pl->bad_shards)
        return 1;
    return stk__errf(err, STK_EINDEX,
                     "output %llu of the epoch was read by offset as sample %llu of %s (%llu bad "
                     "before it), but the shards give sample %llu of %s there (%llu bad): they "
                     "changed since they were counted (run `stoker index` again, or give "
                     "sequential_start=1)",
                     (unsigned long long)output, (unsigned long long)pl->sample,
                     names[pl->shard],
                     (unsigned long long)(pl->bad_samples + pl->bad_shards),
                     (unsigned long long)stream->position, names[stream->pub.shard_index],
                     (unsigned long long)(stream->bad_samples + stream->bad_shards));
}

void stk__head_end(struct stk__head *h)
{
    if (h == NULL)
        return;
    stk__mutex_lock(&h->p->mutex);
    h->over = 1;
    stk__cond_signal(&h->cond);
    stk__mutex_unlock(&h->p->mutex);
}

void stk__head_stop(struct stk__pipeline *p)
{
    struct stk__head *h = p->head;
    if (h == NULL)
        return;
    stk__head_end(h);
    if (h->started)
        stk__thread_join(h->tid);
    h->started = 0;
}

void stk__head_free(struct stk__pipeline *p)
{
    struct stk__head *h = p->head;
    if (h == NULL)
        return;
    stk__head_stop(p);
    for (size_t i = 0; h->ring != NULL && i < h->depth; i++) {
        if (h->ring[i] != NULL)
            stk__pipeline_hold(p, -h->ring[i]->bytes);
        stk__sample_free(h->ring[i]);
    }
    stk__cond_destroy(&h->cond);
    stk__free(h->ring);
    stk__free(h->places);
    stk__free(h->ends);
    stk__free(h);
    p->head = NULL;
}
