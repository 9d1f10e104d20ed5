/* SPDX-License-Identifier: MIT */
/*
 * report.c - the input-bound report: where a loader's time went, in words.
 *
 * Everything comes from one stk_stats snapshot, so the report is a pure
 * function (tested on made-up counters). A stage's busy share is its
 * threads' time over (threads x wall time); the busiest stage is the one to
 * feed first. Reading is busy while waiting on storage or the network too:
 * a reader blocked on a slow server is as much a limit as one parsing.
 * stk_stats_rates() computes the same shares over any interval, for the
 * figures over time (a plot, TensorBoard, Prometheus).
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/abi.h"
#include "base/stats_table.h"
#include "stoker.h"

/* The caller is input-bound from this share of its time spent waiting. */
#define INPUT_BOUND_SHARE 0.05
/* A stage this busy has no spare capacity. */
#define SATURATED_SHARE 0.80
/* Batches mixing fewer shards than this share of a perfect shuffle's get a
 * hint: half is where a model sees consecutive batches visibly correlated
 * by shard, not a small shortfall from the ideal. */
#define POOR_MIXING_SHARE 0.5

struct out {
    char *buf;
    size_t size, len;
};

/* Append like snprintf, counting what did not fit. */
static void put(struct out *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = o->len < o->size ? o->size - o->len : 0;
    int n = vsnprintf(room ? o->buf + o->len : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        o->len += (size_t)n;
}

/* Capped at 1: a stage's time is counted when a piece of work ends (an
 * image, a block of a shard), so an interval short next to one piece can
 * be charged more time than it lasted. */
static double share(uint64_t busy_ns, uint64_t threads, uint64_t wall_ns)
{
    double s = threads && wall_ns ? (double)busy_ns / ((double)threads * (double)wall_ns) : 0;
    return s < 1 ? s : 1;
}

static double ratio(uint64_t num, uint64_t den)
{
    return den ? (double)num / (double)den : num ? INFINITY : 0;
}

/* Labels per batch over the interval, against a uniform permutation of the
 * labels seen since the start (it needs many batches of counts). */
static void label_mixing(const struct stk_stats *now, const struct stk_stats *b,
                         struct stk_rates *out)
{
    out->label_mix_eff = ratio(now->label_pairs - b->label_pairs,
                               now->label_same_pairs - b->label_same_pairs);
    double labels = (double)now->label_samples;
    if (now->label_sample_pairs > 0)
        out->label_mix_perfect = labels * (labels - 1) / (double)now->label_sample_pairs;
    else if (labels > 1)
        out->label_mix_perfect = INFINITY;
    if (now->label_batches > b->label_batches)
        out->labels_per_batch = (double)(now->label_distinct - b->label_distinct) /
                                (double)(now->label_batches - b->label_batches);
}

/* The rates themselves, on this library's structs. */
static void rates(const struct stk_stats *now, const struct stk_stats *before,
                  struct stk_rates *out)
{
    struct stk_stats zero;
    memset(&zero, 0, sizeof zero);
    const struct stk_stats *b = before != NULL ? before : &zero;
    memset(out, 0, sizeof *out);
    label_mixing(now, b, out); /* counts, not times: also without wall time (verify) */
    /* Thread counts and shard sizes describe the loader, not the interval. */
    if (now->wall_ns <= b->wall_ns)
        return;
    uint64_t wall = now->wall_ns - b->wall_ns;
    double seconds = (double)wall / 1e9;
    out->seconds = seconds;
    out->samples_per_s = (double)(now->samples - b->samples) / seconds;
    out->images_per_s = (double)(now->images_decoded - b->images_decoded) / seconds;
    out->read_bytes_per_s = (double)(now->bytes_read - b->bytes_read) / seconds;
    out->wait_share = share(now->wait_ns - b->wait_ns, 1, wall); /* a wait counts at its end too */
    out->read_busy = share(now->read_ns - b->read_ns, now->read_threads, wall);
    out->decode_busy = share(now->decode_ns - b->decode_ns, now->decode_threads, wall);
    out->batching_busy = share(now->sequence_ns - b->sequence_ns, 1, wall);
    out->shuffle_k_eff = ratio(now->shuffle_pairs - b->shuffle_pairs,
                               now->shuffle_shard_pairs - b->shuffle_shard_pairs);
    if (now->shuffle_shards_sized > 0) {
        /* The epoch's S shards, each of the mean size seen: N = S * mean m,
         * sum m(m-1) = S * mean m(m-1). */
        double per = (double)now->shuffle_epoch_shards / (double)now->shuffle_shards_sized;
        double n = per * (double)now->shuffle_sized_samples;
        double pairs = per * (double)now->shuffle_sized_pairs;
        out->shuffle_k_perfect = pairs > 0 ? n * (n - 1) / pairs : n > 1 ? INFINITY : 0;
    }
}

void stk_stats_rates_sized(const struct stk_stats *now, const struct stk_stats *before,
                           size_t stats_size, struct stk_rates *out, size_t rates_size)
{
    struct stk_stats n, b;
    struct stk_rates r;
    stk__struct_copy(&n, sizeof n, now, stats_size);
    if (before != NULL)
        stk__struct_copy(&b, sizeof b, before, stats_size);
    rates(&n, before != NULL ? &b : NULL, &r);
    stk__struct_copy(out, rates_size, &r, sizeof r);
}

static double ms_per(uint64_t ns, uint64_t items)
{
    return items ? (double)ns / 1e6 / (double)items : 0;
}

size_t stk_stats_report_sized(const struct stk_stats *caller_stats, size_t stats_size, char *buf,
                              size_t size)
{
    struct stk_stats full, *s = &full;
    stk__struct_copy(&full, sizeof full, caller_stats, stats_size);
    struct out o = {buf, size, 0};
    if (size > 0)
        buf[0] = '\0';
    if (s->wall_ns == 0 || s->batches == 0) {
        put(&o, "no batches delivered yet: nothing to report\n");
        return o.len;
    }
    struct stk_rates r;
    rates(s, NULL, &r);
    double seconds = r.seconds;
    int bound = r.wait_share >= INPUT_BOUND_SHARE;
    put(&o, "%s: the caller waited for batches %.0f%% of %.2f s (%.0f samples/s delivered)\n",
        bound ? "input-bound" : "not input-bound", 100 * r.wait_share, seconds,
        r.samples_per_s);

    if (s->samples_skipped || s->shards_failed)
        put(&o,
            "bad input skipped: %llu sample%s (%llu image%s replaced), %llu shard%s cut short "
            "or not read (the log names each)\n",
            (unsigned long long)s->samples_skipped, s->samples_skipped == 1 ? "" : "s",
            (unsigned long long)s->images_replaced, s->images_replaced == 1 ? "" : "s",
            (unsigned long long)s->shards_failed, s->shards_failed == 1 ? "" : "s");

    /* A node cache that misses every epoch downloads the dataset every
     * epoch: the epoch's own figures say so where the run's totals blur it. */
    if (s->cache_hits + s->cache_misses > 0) {
        uint64_t opens = s->cache_epoch_hits + s->cache_epoch_misses;
        put(&o,
            "node cache this epoch: %llu hit%s, %llu miss%s (%.0f%% hits), %.1f MB from the "
            "origin; run: %llu hits, %llu misses, %llu evictions\n",
            (unsigned long long)s->cache_epoch_hits, s->cache_epoch_hits == 1 ? "" : "s",
            (unsigned long long)s->cache_epoch_misses, s->cache_epoch_misses == 1 ? "" : "es",
            opens ? 100.0 * (double)s->cache_epoch_hits / (double)opens : 0.0,
            (double)s->cache_epoch_origin_bytes / 1e6, (unsigned long long)s->cache_hits,
            (unsigned long long)s->cache_misses, (unsigned long long)s->cache_evictions);
    }

    double read = r.read_busy, decode = r.decode_busy, batching = r.batching_busy;
    put(&o, "reading: %llu thread%s %.0f%% busy, %.3f ms per sample, %.1f MB/s read\n",
        (unsigned long long)s->read_threads, s->read_threads == 1 ? "" : "s", 100 * read,
        ms_per(s->read_ns, s->samples_read), (double)s->bytes_read / 1e6 / seconds);
    if (s->decode_threads)
        put(&o,
            "image decoding: %llu thread%s %.0f%% busy, per image %.3f ms decode, %.3f ms "
            "resample, %.3f ms convert\n",
            (unsigned long long)s->decode_threads, s->decode_threads == 1 ? "" : "s",
            100 * decode, ms_per(s->image_decode_ns, s->images_decoded),
            ms_per(s->image_resample_ns, s->images_decoded),
            ms_per(s->image_convert_ns, s->images_decoded));
    if (s->image_augment_ns + s->image_erase_ns + s->batch_mix_ns > 0)
        put(&o,
            "augmentations: per image %.3f ms crop ops, %.3f ms random erasing, %.3f ms "
            "Mixup/CutMix (on the caller's thread)\n",
            ms_per(s->image_augment_ns, s->images_decoded),
            ms_per(s->image_erase_ns, s->images_decoded), ms_per(s->batch_mix_ns, s->samples));
    /* Each op that ran: what one run costs, how often it runs and so what
     * it costs per image, the figure to weigh against dropping it. */
#define PUT_OP(X, name, label, op)                                                                 \
    if (s->aug_##name##_runs > 0)                                                                  \
        put(&o, "  %s: %.3f ms per run, %.2f runs per image, %.3f ms per image\n", label,          \
            ms_per(s->aug_##name##_ns, s->aug_##name##_runs),                                      \
            ratio(s->aug_##name##_runs, s->images_decoded),                                        \
            ms_per(s->aug_##name##_ns, s->images_decoded));
    STK__AUG_OP_STATS(PUT_OP, _)
#undef PUT_OP
    put(&o, "batching (interleave, shuffle, assemble): 1 thread %.0f%% busy\n", 100 * batching);
    if (s->shuffle_pairs > 0) {
        if (isinf(r.shuffle_k_eff))
            put(&o, "shuffle: no two samples of a batch came from the same shard");
        else
            put(&o, "shuffle: batches mix %.1f shards (k_eff)", r.shuffle_k_eff);
        if (r.shuffle_k_perfect > 0 && !isinf(r.shuffle_k_perfect))
            put(&o, "; a perfect shuffle of the epoch: %.1f\n", r.shuffle_k_perfect);
        else
            put(&o, "\n");
        if (r.shuffle_k_eff < POOR_MIXING_SHARE * r.shuffle_k_perfect)
            put(&o, "hint: batches mix shards poorly: raise shards_in_flight (shards "
                    "interleaved) or shuffle_buffer (samples shuffled together)\n");
    }
    if (s->label_pairs > 0 && s->label_samples > 1) {
        /* Shards can be mixed perfectly and batches still hold few classes:
         * shards written in class order. */
        put(&o, "labels: %.1f distinct per batch; batches mix ", r.labels_per_batch);
        if (isinf(r.label_mix_eff))
            put(&o, "labels without repeats");
        else
            put(&o, "%.1f labels (L_eff)", r.label_mix_eff);
        if (!isinf(r.label_mix_perfect))
            put(&o, "; a uniform shuffle of the labels seen: %.1f", r.label_mix_perfect);
        put(&o, "\n");
        if (r.label_mix_eff < POOR_MIXING_SHARE * r.label_mix_perfect)
            put(&o, "hint: batches mix labels poorly: the shards look sorted by class; "
                    "rewrite them shuffled (stoker reshard --shuffle) or raise "
                    "shards_in_flight and shuffle_buffer\n");
    }

    /* The busiest stage, and what would relieve it. */
    const struct {
        double busy;
        const char *advice;
    } stages[] = {
        {decode, "image decoding is the limit: give it more cores (threads, cores freed from "
                 "the training process, or CPU workers)"},
        {read, "reading is the limit: its threads, storage or network (raise threads and "
               "shards_in_flight; the node cache for remote shards)"},
        {batching, "batching is the limit: one thread interleaves, shuffles and assembles "
                   "batches (larger samples or batches cost it less per byte)"},
    };
    size_t top = 0;
    for (size_t i = 1; i < sizeof stages / sizeof stages[0]; i++)
        if (stages[i].busy > stages[top].busy)
            top = i;
    if (!bound)
        put(&o, "verdict: the consumer, not the input, sets the pace\n");
    else if (stages[top].busy >= SATURATED_SHARE)
        put(&o, "verdict: %s\n", stages[top].advice);
    else
        put(&o, "verdict: no stage is saturated: the loader's threads are short of CPU time "
                "(other processes on its cores?)\n");
    return o.len;
}
