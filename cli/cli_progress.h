/* SPDX-License-Identifier: MIT */
/*
 * cli_progress.h - the live progress line of long commands (pack, reshard,
 * index, verify, bench): items done, rate, and the time left when the total
 * is known, redrawn in place on standard error.
 *
 * Only on a terminal: piped or redirected output (a log file, a CI job)
 * gets no carriage returns, and --quiet turns the line off everywhere.
 */
#ifndef STK_CLI_PROGRESS_H
#define STK_CLI_PROGRESS_H

#include <stdint.h>

#include "stoker.h"

struct cli_progress {
    int on;
    const char *unit;  /* "samples", "shards" */
    uint64_t total;    /* 0: unknown, no ETA */
    double start, last_draw;
    int drawn;
};

/* Put CLI_PROGRESS_LONGOPT in a command's getopt_long table ("q" in its
 * short options) and CLI_PROGRESS_HELP in its --help. */
#define CLI_PROGRESS_LONGOPT {"quiet", no_argument, NULL, 'q'}
#define CLI_PROGRESS_HELP "  -q, --quiet            no progress line (drawn only on a terminal)\n"

/* Seconds on a monotonic clock. */
double cli_now_s(void);

/* Start the line: on when standard error is a terminal and quiet is 0. */
void cli_progress_start(struct cli_progress *p, const char *unit, uint64_t total, int quiet);

/* Whether cli_progress_update() at time now (cli_now_s()) would draw: for a
 * caller whose counts cost something to gather, so it gathers them only then. */
int cli_progress_due(const struct cli_progress *p, double now);

/* done units so far, and extra text after the rate (NULL: none); draws at
 * most four times a second. */
void cli_progress_update(struct cli_progress *p, uint64_t done, const char *extra);

/* Clear the line, so what the command prints next starts on a clean one. */
void cli_progress_end(struct cli_progress *p);

/* Start p counting shards and make it o's progress callback, for
 * stk_verify() and stk_index_build(). */
void cli_progress_start_shards(struct cli_progress *p, struct stk_options *o, int quiet);

#endif
