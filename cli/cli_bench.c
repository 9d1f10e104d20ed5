/* SPDX-License-Identifier: MIT */
/*
 * cli_bench.c - `stoker bench`: read shards into batches as fast as the
 * loader can and report samples/s and MB/s.
 *
 * The clock starts before the loader is created and stops after the last
 * batch of the last epoch is released, so the first-batch latency and every
 * epoch's startup are included. A progress line is drawn on standard error
 * only when it is a terminal. With --plot the counters are sampled every
 * PLOT_INTERVAL_S, between batches, into rates over each interval, so a
 * stall shows as a dip (its interval ends with the batch that ends it).
 *
 * This file allocates the plot's points with plain realloc/free, each call
 * marked for checksrc: the CLI keeps to the public API.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli_common.h"
#include "cli_plot.h"
#include "cli_progress.h"

#define PLOT_INTERVAL_S 0.25

static const char *const CMD = "bench";

static void help(void)
{
    printf("usage: stoker bench [OPTIONS] URL...\n\n"
           "Read the shards into batches (raw samples, or decoded images with --decode)\n"
           "and report throughput.\n\n"
           "options:\n"
           "  --epochs N             epochs to read (default 1)\n"
           "  --start-batch N        start the first epoch at batch N (resume)\n"
           "  --json                 print one JSON object instead of text\n"
           "  --plot FILE            draw samples/s (images/s with --decode) and each\n"
           "                         stage's busy share over time into FILE (SVG)\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_BENCH, NULL);
    putchar('\n');
    cli_source_help();
}

struct bench_args {
    struct stk_options opts;
    uint64_t epochs;
    uint64_t start_batch;
    int json;
    int quiet;
    const char *plot;
};

/* The counters over time, for --plot. */
struct timeline {
    struct cli_plot_point *pts;
    size_t n, cap;
    struct stk_stats last;
};

/* When the last point was taken (0: none yet, the run's start). */
static double timeline_last_t(const struct timeline *tl)
{
    return tl->n ? tl->pts[tl->n - 1].t : 0;
}

/* Add the rates since the previous sample. 0, or -1 out of memory. */
static int timeline_add(struct timeline *tl, const struct stk_stats *s, double t)
{
    if (tl->n == tl->cap) {
        size_t cap = tl->cap ? 2 * tl->cap : 256;
        struct cli_plot_point *p = realloc(tl->pts, cap * sizeof *p); /* checksrc: allow (see top) */
        if (p == NULL)
            return -1;
        tl->pts = p;
        tl->cap = cap;
    }
    stk_stats_rates(s, tl->n ? &tl->last : NULL, &tl->pts[tl->n].r);
    tl->pts[tl->n++].t = t;
    tl->last = *s;
    return 0;
}

static int parse(int argc, char **argv, struct bench_args *a)
{
    enum { O_EPOCHS = 256, O_JSON, O_START, O_PLOT };
    static const struct option own[] = {
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"json", no_argument, NULL, O_JSON},
        {"start-batch", required_argument, NULL, O_START},
        {"plot", required_argument, NULL, O_PLOT},
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_BENCH, longopts);
    int c;
    while ((c = getopt_long(argc, argv, "hq", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_EPOCHS: bad = cli_parse_u64(CMD, "--epochs", optarg, 1, 1000000, &a->epochs); break;
        case O_JSON: a->json = 1; break;
        case O_START: bad = cli_parse_u64(CMD, "--start-batch", optarg, 0, UINT64_MAX, &a->start_batch); break;
        case O_PLOT: a->plot = optarg; break;
        case 'q': a->quiet = 1; break;
        case 'h': help(); return 1;
        default: bad = cli_parse_other_option(CMD, c, optarg, &a->opts) == EXIT_OK ? 0 : -1; break;
        }
        if (bad < 0)
            return -1;
    }
    if (optind >= argc) {
        cli_usage_error(CMD, "no URL given");
        return -1;
    }
    return 0;
}

static int run_epochs(stk_loader *l, const struct bench_args *a, double start,
                      double *first_batch_s, struct timeline *tl)
{
    struct cli_progress progress;
    cli_progress_start(&progress, "samples", stk_loader_epoch_samples(l) * a->epochs,
                       a->quiet || a->json);
    int rc = EXIT_OK;
    *first_batch_s = -1;
    for (uint64_t e = 0; e < a->epochs; e++) {
        stk_loader_seek(l, a->opts.epoch + e, e == 0 ? a->start_batch : 0);
        for (;;) {
            struct stk_batch *b;
            int got = stk_loader_next(l, &b);
            if (got == STK_EOF)
                break;
            if (got < 0) {
                rc = cli_fail(CMD, "%s", stk_loader_errmsg(l));
                goto out;
            }
            double now = cli_now_s();
            if (*first_batch_s < 0)
                *first_batch_s = now - start;
            stk_batch_release(b);
            /* One clock read per batch; the counters are copied only when
             * a line is drawn or a point taken. */
            if (a->plot != NULL && now - start - timeline_last_t(tl) >= PLOT_INTERVAL_S) {
                struct stk_stats s;
                stk_loader_stats(l, &s);
                if (timeline_add(tl, &s, now - start) < 0) {
                    rc = cli_fail(CMD, "out of memory recording the plot's points");
                    goto out;
                }
            }
            if (cli_progress_due(&progress, now)) {
                struct stk_stats s;
                stk_loader_stats(l, &s);
                char extra[64];
                snprintf(extra, sizeof extra, "%.1f MB/s",
                         now > start ? (double)s.member_bytes / (now - start) / 1e6 : 0.0);
                cli_progress_update(&progress, s.samples, extra);
            }
        }
    }
out:
    cli_progress_end(&progress);
    return rc;
}

static void report(const struct bench_args *a, const struct stk_stats *s, double seconds,
                   double first_batch_s, size_t n_shards)
{
    double sps = seconds > 0 ? (double)s->samples / seconds : 0;
    double mbs = seconds > 0 ? (double)s->member_bytes / seconds / 1e6 : 0;
    double read_mbs = seconds > 0 ? (double)s->bytes_read / seconds / 1e6 : 0;
    double decode_ms = s->images_decoded ? (double)s->decode_ns / 1e6 / (double)s->images_decoded : 0;
    if (a->json) {
        /* Every counter by its stats() name, then the figures made of them. */
        const struct stk_stats_field *f;
        putchar('{');
        for (size_t i = 0; (f = stk_stats_field_at(i)) != NULL; i++) {
            uint64_t v;
            memcpy(&v, (const char *)s + f->offset, sizeof v);
            printf("\"%s\": %llu, ", f->name, (unsigned long long)v);
        }
        printf("\"shards\": %zu, \"threads\": %u, \"epochs\": %llu, \"seconds\": %.6f, "
               "\"first_batch_seconds\": %.6f, \"samples_per_s\": %.1f, \"mb_per_s\": %.2f, "
               "\"read_mb_per_s\": %.2f, \"images\": %llu, \"images_per_s\": %.1f, "
               "\"decode_ms_per_image\": %.4f}\n",
               n_shards, a->opts.threads, (unsigned long long)a->epochs, seconds, first_batch_s,
               sps, mbs, read_mbs, (unsigned long long)s->images_decoded,
               seconds > 0 ? (double)s->images_decoded / seconds : 0, decode_ms);
        return;
    }
    printf("shards            %zu\n", n_shards);
    printf("threads           %u\n", a->opts.threads);
    printf("epochs            %llu\n", (unsigned long long)a->epochs);
    printf("samples           %llu in %llu batches\n", (unsigned long long)s->samples,
           (unsigned long long)s->batches);
    printf("time              %.3f s (first batch after %.3f s)\n", seconds, first_batch_s);
    printf("throughput        %.0f samples/s, %.1f MB/s of member data, %.1f MB/s read\n", sps,
           mbs, read_mbs);
    if (a->opts.transform != STK_TRANSFORM_NONE)
        printf("images            %.0f images/s, decode + transform %.3f ms per image per "
               "thread, %llu bad images replaced\n",
               seconds > 0 ? (double)s->images_decoded / seconds : 0, decode_ms,
               (unsigned long long)s->images_replaced);
    if (a->opts.cache_dir != NULL)
        printf("cache             %llu hits, %llu misses, %llu evictions, %.1f MB written\n",
               (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
               (unsigned long long)s->cache_evictions, (double)s->cache_bytes_written / 1e6);
    printf("skipped           %llu samples, %llu shards failed, %llu members ignored\n",
           (unsigned long long)s->samples_skipped, (unsigned long long)s->shards_failed,
           (unsigned long long)s->members_ignored);
    printf("remote            %llu requests retried, %llu resumed mid-shard\n",
           (unsigned long long)s->retries, (unsigned long long)s->resumes);
    /* The report is a few lines plus one per augmentation op that ran
     * (17 at most): well under 4 KiB. */
    char where[8192];
    stk_stats_report(s, where, sizeof where);
    printf("\n%s", where);
}

int cmd_bench(int argc, char **argv)
{
    struct bench_args a = {.epochs = 1};
    stk_options_init(&a.opts);
    a.opts.log = cli_log_stderr;
    a.opts.log_data = (void *)CMD;
    int p = parse(argc, argv, &a);
    if (p != 0)
        return p > 0 ? EXIT_OK : EXIT_USAGE;
    a.opts.epochs = (unsigned)a.epochs; /* none read ahead past the last */
    double start = cli_now_s();
    stk_loader *l = cli_create_loader(CMD, &a.opts, (const char *const *)argv + optind,
                                      argc - optind);
    if (l == NULL)
        return EXIT_ERROR;
    double first_batch_s;
    struct timeline tl = {0};
    int rc = run_epochs(l, &a, start, &first_batch_s, &tl);
    double seconds = cli_now_s() - start;
    if (rc == EXIT_OK) {
        struct stk_stats s;
        stk_loader_stats(l, &s);
        if (a.plot != NULL) {
            /* The last interval, up to the end of the run. */
            if (timeline_add(&tl, &s, seconds) < 0)
                rc = cli_fail(CMD, "out of memory recording the plot's points");
            else if (cli_plot_svg(a.plot, tl.pts, tl.n, a.opts.transform != STK_TRANSFORM_NONE) < 0)
                rc = cli_fail(CMD, "%s: cannot write the plot: %s", a.plot, strerror(errno));
        }
        if (rc == EXIT_OK)
            report(&a, &s, seconds, first_batch_s, stk_loader_num_shards(l));
    }
    free(tl.pts); /* checksrc: allow (see top) */
    stk_loader_destroy(l);
    return rc;
}
