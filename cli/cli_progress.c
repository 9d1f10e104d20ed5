/* SPDX-License-Identifier: MIT */
/*
 * cli_progress.c - the live progress line (see cli_progress.h).
 *
 * The rate is over the whole run so far, so the time left does not jump
 * with every slow shard; ETA assumes the rest goes as fast.
 */
#include "cli_progress.h"

#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define REDRAW_S 0.25

double cli_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void cli_progress_start(struct cli_progress *p, const char *unit, uint64_t total, int quiet)
{
    p->on = !quiet && isatty(STDERR_FILENO);
    p->unit = unit;
    p->total = total;
    p->start = cli_now_s();
    p->last_draw = 0;
    p->drawn = 0;
}

int cli_progress_due(const struct cli_progress *p, double now)
{
    return p->on && now - p->last_draw >= REDRAW_S;
}

void cli_progress_update(struct cli_progress *p, uint64_t done, const char *extra)
{
    double now = cli_now_s();
    if (!cli_progress_due(p, now))
        return;
    p->last_draw = now;
    p->drawn = 1;
    double t = now - p->start, rate = t > 0 ? (double)done / t : 0;
    if (p->total > 0)
        fprintf(stderr, "\r%llu/%llu %s", (unsigned long long)done,
                (unsigned long long)p->total, p->unit);
    else
        fprintf(stderr, "\r%llu %s", (unsigned long long)done, p->unit);
    fprintf(stderr, ", %.0f %s/s", rate, p->unit);
    if (extra != NULL)
        fprintf(stderr, ", %s", extra);
    if (p->total > 0 && rate > 0 && done <= p->total)
        fprintf(stderr, ", %.0f s left", (double)(p->total - done) / rate);
    fprintf(stderr, ", %.1f s\033[K", t);
    fflush(stderr);
}

void cli_progress_end(struct cli_progress *p)
{
    if (p->drawn)
        fputs("\r\033[K", stderr);
    p->drawn = 0;
}

static void progress_shards(void *data, uint64_t shards_done, uint64_t shards_total,
                            uint64_t samples)
{
    struct cli_progress *p = data;
    char extra[64];
    snprintf(extra, sizeof extra, "%llu samples", (unsigned long long)samples);
    p->total = shards_total;
    cli_progress_update(p, shards_done, extra);
}

void cli_progress_start_shards(struct cli_progress *p, struct stk_options *o, int quiet)
{
    cli_progress_start(p, "shards", 0, quiet); /* the total comes with each call */
    o->progress = progress_shards;
    o->progress_data = p;
}
