/* SPDX-License-Identifier: MIT */
/*
 * cli_plot.h - `stoker bench --plot`: throughput and stage busy shares over
 * time as a standalone SVG file, written directly (no plotting library).
 */
#ifndef STK_CLI_PLOT_H
#define STK_CLI_PLOT_H

#include <stddef.h>

#include "stoker.h"

/* The rates over one interval of a run, ending t seconds after its start. */
struct cli_plot_point {
    double t;
    struct stk_rates r;
};

/* Write the points to path: a top panel with images/s (samples/s when
 * with_images is 0) and a bottom one with the busy shares of reading, image
 * decoding (when with_images) and batching and the share of time the consumer
 * waited, each a <polyline> whose id names its series. 0, or -1 with errno
 * set. */
int cli_plot_svg(const char *path, const struct cli_plot_point *pts, size_t n, int with_images);

#endif
