/* SPDX-License-Identifier: MIT */
/*
 * cli_plot.c - an SVG line chart of a bench run (see cli_plot.h).
 *
 * SVG is text a few printf calls produce, opens in every browser and
 * renders on GitHub, so a chart needs no dependency. Two panels share the
 * time axis: the rate, whose scale follows its peak, and the shares, on a
 * fixed 0-100% scale so runs compare at a glance.
 */
#include "cli_plot.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

#define WIDTH 720
#define HEIGHT 420
#define LEFT 64
#define RIGHT 150 /* room for the legend */
#define TOP 30
#define PANEL 150 /* height of each panel */
#define GAP 50

struct series {
    const char *id, *label, *color;
    int panel; /* 0: rate, 1: share */
    int images; /* 1: drawn only with images, -1: only without, 0: always */
    double (*value)(const struct stk_rates *r);
};

static double images(const struct stk_rates *r) { return r->images_per_s; }
static double samples(const struct stk_rates *r) { return r->samples_per_s; }
static double read(const struct stk_rates *r) { return r->read_busy; }
static double decode(const struct stk_rates *r) { return r->decode_busy; }
static double batching(const struct stk_rates *r) { return r->batching_busy; }
static double waiting(const struct stk_rates *r) { return r->wait_share; }

/* A round number at or above v for the rate axis: 1, 2 or 5 times a power of ten. */
static double nice_ceil(double v)
{
    if (v <= 0)
        return 1;
    double p = pow(10, floor(log10(v)));
    return v <= p ? p : v <= 2 * p ? 2 * p : v <= 5 * p ? 5 * p : 10 * p;
}

static void axes(FILE *f, int y0, const char *title, const char *top, double t_end)
{
    int w = WIDTH - LEFT - RIGHT;
    fprintf(f, "<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" fill=\"none\" stroke=\"#999\"/>\n",
            LEFT, y0, w, PANEL);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"13\">%s</text>\n", LEFT, y0 - 8, title);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%s</text>\n",
            LEFT - 4, y0 + 10, top);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">0</text>\n",
            LEFT - 4, y0 + PANEL);
    fprintf(f, "<text x=\"%d\" y=\"%d\" font-size=\"11\" text-anchor=\"end\">%.1f s</text>\n",
            LEFT + w, y0 + PANEL + 14, t_end);
}

int cli_plot_svg(const char *path, const struct cli_plot_point *pts, size_t n, int with_images)
{
    const struct series all[] = {
        {"images_per_s", "images/s", "#1f77b4", 0, 1, images},
        {"samples_per_s", "samples/s", "#1f77b4", 0, -1, samples},
        {"read_busy", "reading busy", "#2ca02c", 1, 0, read},
        {"decode_busy", "decoding busy", "#d62728", 1, 1, decode},
        {"batching_busy", "batching busy", "#9467bd", 1, 0, batching},
        {"wait_share", "consumer waiting", "#7f7f7f", 1, 0, waiting},
    };
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return -1;
    double t_end = n > 0 && pts[n - 1].t > 0 ? pts[n - 1].t : 1;
    double peak = 0;
    for (size_t i = 0; i < n; i++) {
        double v = with_images ? pts[i].r.images_per_s : pts[i].r.samples_per_s;
        peak = v > peak ? v : peak;
    }
    double rate_max = nice_ceil(peak);
    char top[32];
    snprintf(top, sizeof top, "%.0f", rate_max);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
            WIDTH, HEIGHT, WIDTH, HEIGHT);
    axes(f, TOP, with_images ? "images/s" : "samples/s", top, t_end);
    axes(f, TOP + PANEL + GAP, "busy share of each stage, and of the consumer waiting", "100%",
         t_end);
    int legend = 0;
    for (size_t s = 0; s < sizeof all / sizeof all[0]; s++) {
        const struct series *se = &all[s];
        if (se->images != 0 && (se->images > 0) != (with_images != 0))
            continue;
        int y0 = TOP + se->panel * (PANEL + GAP);
        double max = se->panel == 0 ? rate_max : 1;
        fprintf(f, "<polyline id=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                se->id, se->color);
        for (size_t i = 0; i < n; i++) {
            double v = se->value(&pts[i].r);
            v = v < 0 ? 0 : v > max ? max : v;
            fprintf(f, "%s%.1f,%.1f", i ? " " : "",
                    LEFT + pts[i].t / t_end * (WIDTH - LEFT - RIGHT),
                    y0 + PANEL - v / max * PANEL);
        }
        fprintf(f, "\"/>\n");
        int ly = TOP + 20 + 18 * legend++;
        fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"3\"/>"
                   "<text x=\"%d\" y=\"%d\" font-size=\"12\">%s</text>\n",
                WIDTH - RIGHT + 10, ly, WIDTH - RIGHT + 28, ly, se->color, WIDTH - RIGHT + 32,
                ly + 4, se->label);
    }
    fprintf(f, "</svg>\n");
    int failed = ferror(f);
    if (fclose(f) != 0 || failed) {
        if (errno == 0)
            errno = EIO;
        return -1;
    }
    return 0;
}
