/*
 * report.c - the input-bound report: where a loader's time went, in words.
 *
 * Everything comes from one stk_stats snapshot, so the report is a pure
 * function (tested on made-up counters). A stage's busy share is its
 * threads' time over (threads x wall time); the busiest stage is the one to
 * feed first. Reading is busy while waiting on storage or the network too:
 * a reader blocked on a slow server is as much a limit as one parsing.
 */
#include <stdarg.h>
#include <stdio.h>

#include "abi.h"
#include "stoker.h"

/* The caller is input-bound from this share of its time spent waiting. */
#define INPUT_BOUND_SHARE 0.05
/* A stage this busy has no spare capacity. */
#define SATURATED_SHARE 0.80

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

static double share(uint64_t busy_ns, uint64_t threads, uint64_t wall_ns)
{
    return threads && wall_ns ? (double)busy_ns / ((double)threads * (double)wall_ns) : 0;
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
    double seconds = (double)s->wall_ns / 1e9;
    double waited = (double)s->wait_ns / (double)s->wall_ns;
    int bound = waited >= INPUT_BOUND_SHARE;
    put(&o, "%s: the caller waited for batches %.0f%% of %.2f s (%.0f samples/s delivered)\n",
        bound ? "input-bound" : "not input-bound", 100 * waited, seconds,
        (double)s->samples / seconds);

    if (s->samples_skipped || s->shards_failed)
        put(&o,
            "bad input skipped: %llu sample%s (%llu image%s replaced), %llu shard%s cut short "
            "or not read (the log names each)\n",
            (unsigned long long)s->samples_skipped, s->samples_skipped == 1 ? "" : "s",
            (unsigned long long)s->images_replaced, s->images_replaced == 1 ? "" : "s",
            (unsigned long long)s->shards_failed, s->shards_failed == 1 ? "" : "s");

    double read = share(s->read_ns, s->read_threads, s->wall_ns);
    double decode = share(s->decode_ns, s->decode_threads, s->wall_ns);
    double batching = share(s->sequence_ns, 1, s->wall_ns);
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
    put(&o, "batching (interleave, shuffle, assemble): 1 thread %.0f%% busy\n", 100 * batching);

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
