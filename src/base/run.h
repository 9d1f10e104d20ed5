/* SPDX-License-Identifier: MIT */
/*
 * run.h - the run context: what every layer of one run (a loader, an index
 * build, a verification) shares.
 *
 * The counters, the log and the error policy travel together, as curl
 * passes its easy handle and libuv its loop: each layer's config points to
 * the run (stk__shard_config.run, the image workers', the pipeline's)
 * instead of reaching through another layer's config for them. The stop
 * is each epoch's own (pipeline.c): two epochs of a loader can be in
 * flight at a boundary, and stopping one must not stop the other.
 * The owner (loader.c, dataset_index.c, verify.c) creates it, and it must
 * outlive every thread that counts into it.
 */
#ifndef STK_RUN_H
#define STK_RUN_H

#include <stdatomic.h>
#include <stdint.h>

#include "base/stats_table.h"
#include "stoker.h"

/* One atomic per field of struct stk_stats (base/stats_table.h): any thread
 * adds, stk__run_snapshot() copies them all. */
struct stk__counters {
#define STK__COUNTER_FIELD(name, kind, doc) atomic_uint_fast64_t name;
    STK__STATS(STK__COUNTER_FIELD)
#undef STK__COUNTER_FIELD
};

struct stk__run {
    struct stk__counters counters;
    /* stk_options.log: NULL drops messages; called from any thread. */
    void (*log)(void *log_data, enum stk_log_level level, const char *message);
    void *log_data;
    /* on_error=skip: bad input (a sample, an image, a shard cut short) is
     * dropped, counted and logged instead of failing the run. Out of memory,
     * the cache and a stale index are never bad input. */
    int skip_bad;
    /* stk__now_ns() when the caller first asked for data (0: not yet):
     * wall_ns counts from it. */
    atomic_uint_fast64_t started_ns;
    /* stk_options.progress, called by stk__run_jobs() after each shard. */
    void (*progress)(void *progress_data, uint64_t shards_done, uint64_t shards_total,
                     uint64_t samples);
    void *progress_data;
};

/* Zero counters, the options' log, policy and progress (o may be NULL: no
 * log, fail on bad input). */
void stk__run_init(struct stk__run *run, const struct stk_options *o);

/* A part of run with counters of its own: an epoch's pipeline, which can
 * read ahead of its epoch (pipeline.h) while the last one still counts.
 * run's log, policy and progress; zero counters. */
void stk__run_init_part(struct stk__run *part, const struct stk__run *run);

/* Add what part counted (its COUNT and NS rows; a GAUGE is the run's own)
 * into run, one atomic add per counter. */
void stk__run_merge(struct stk__run *run, const struct stk__run *part);

/* The same into a snapshot of run (stk__run_snapshot). */
void stk__run_snapshot_add(const struct stk__run *part, struct stk_stats *out);

/* Log a printf-style message through run->log (nothing when it is NULL). */
void stk__run_log(const struct stk__run *run, enum stk_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Copy every counter into out (wall_ns: the time since started_ns). Safe
 * while threads count. */
void stk__run_snapshot(const struct stk__run *run, struct stk_stats *out);

#endif
