/* SPDX-License-Identifier: MIT */
/*
 * run.c - the run context's log and its one counter snapshot (see run.h).
 */
#include "base/run.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/threads.h"

/* One atomic per field of struct stk_stats, all uint64_t, and each row of
 * the table at the position of its field: a counter added to one and not
 * the other, or in another order, fails here. */
_Static_assert(sizeof(struct stk__counters) / sizeof(atomic_uint_fast64_t) ==
                   sizeof(struct stk_stats) / sizeof(uint64_t),
               "struct stk_stats and STK__STATS in base/stats_table.h disagree");
enum {
#define STK__STAT_POSITION(name, kind, doc) STK__STAT_AT_##name,
    STK__STATS(STK__STAT_POSITION)
#undef STK__STAT_POSITION
};
#define STK__STAT_IN_PLACE(name, kind, doc)                                                        \
    _Static_assert(offsetof(struct stk_stats, name) == STK__STAT_AT_##name * sizeof(uint64_t),     \
                   "row " #name " of base/stats_table.h is not at its field's place");
STK__STATS(STK__STAT_IN_PLACE)
#undef STK__STAT_IN_PLACE

void stk__run_init(struct stk__run *run, const struct stk_options *o) {
    memset(run, 0, sizeof *run);
    if (o == NULL)
        return;
    run->log = o->log;
    run->log_data = o->log_data;
    run->skip_bad = o->on_error == STK_ON_ERROR_SKIP;
    run->progress = o->progress;
    run->progress_data = o->progress_data;
}

void stk__run_init_part(struct stk__run *part, const struct stk__run *run) {
    memset(part, 0, sizeof *part);
    part->log = run->log;
    part->log_data = run->log_data;
    part->skip_bad = run->skip_bad;
    part->progress = run->progress;
    part->progress_data = run->progress_data;
}

/* Per row kind: what a part adds to the run's value. */
#define STK__PART_COUNT(x) (x)
#define STK__PART_NS(x) (x)
#define STK__PART_GAUGE(x) ((void)(x), (uint64_t)0)

void stk__run_merge(struct stk__run *run, const struct stk__run *part) {
    struct stk__counters *c = (struct stk__counters *)&part->counters;
#define STK__MERGE_COUNTER(name, kind, doc)                                                        \
    atomic_fetch_add(&run->counters.name, STK__PART_##kind(atomic_load(&c->name)));
    STK__STATS(STK__MERGE_COUNTER)
#undef STK__MERGE_COUNTER
}

void stk__run_snapshot_add(const struct stk__run *part, struct stk_stats *out) {
    struct stk__counters *c = (struct stk__counters *)&part->counters;
#define STK__ADD_COUNTER(name, kind, doc) out->name += STK__PART_##kind(atomic_load(&c->name));
    STK__STATS(STK__ADD_COUNTER)
#undef STK__ADD_COUNTER
}

void stk__run_log(const struct stk__run *run, enum stk_log_level level, const char *fmt, ...) {
    if (run->log == NULL)
        return;
    char msg[STK__ERRMSG_MAX + 256]; /* a detailed message and a few words */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    run->log(run->log_data, level, msg);
}

void stk__run_snapshot(const struct stk__run *run, struct stk_stats *out) {
    /* The cast drops const: atomic loads do not modify the counters. */
    struct stk__counters *c = (struct stk__counters *)&run->counters;
#define STK__COPY_COUNTER(name, kind, doc) out->name = atomic_load(&c->name);
    STK__STATS(STK__COPY_COUNTER)
#undef STK__COPY_COUNTER
    uint64_t started = atomic_load((atomic_uint_fast64_t *)&run->started_ns);
    out->wall_ns = started ? stk__now_ns() - started : 0;
}
