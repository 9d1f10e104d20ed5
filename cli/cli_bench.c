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
           "Read the shards into batches of raw samples and report throughput.\n\n"
           "options:\n"
           "  --threads N            reader threads (default 2)\n"
           "  --batch-size N         samples per batch (default 64)\n"
           "  --shards-in-flight N   shards read and interleaved at once (default 4)\n"
           "  --shuffle-buffer N     samples in the shuffle buffer (default 1000)\n"
           "  --shuffle-buffer-bytes SIZE  member bytes it may hold (default 2G; a\n"
           "                         window of samples that hold more fails: for samples\n"
           "                         of S bytes keep N * S below it; batches hold\n"
           "                         --batch-size samples each, whatever their size)\n"
           "  --no-shuffle           storage order\n"
           "  --seed N               shuffle seed (default 0)\n"
           "  --epochs N             epochs to read (default 1)\n"
           "  --samples-per-rank N   samples per epoch (default: all)\n"
           "  --rank N --world-size N  read the share of one rank\n"
           "  --on-error MODE        fail (default) or skip bad samples and shards\n"
           "  --index FILE           dataset index from 'stoker index' (equal samples\n"
           "                         per rank; fast --start-batch)\n"
           "  --start-batch N        start the first epoch at batch N (resume)\n"
           "  --decode MODE          train (RandomResizedCrop + flip) or eval (resize +\n"
           "                         center crop): decode images into batches\n"
           "  --size N               output image size with --decode (default 224)\n"
           "  --dtype T              uint8 (default), float32, float16, bfloat16\n"
           "  --layout L             nchw (default) or nhwc\n"
           "  --full-decode          decode whole images at full scale (for comparison)\n"
           "  --json                 print one JSON object instead of text\n"
           "  --plot FILE            draw samples/s (images/s with --decode) and each\n"
           "                         stage's busy share over time into FILE (SVG)\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n\n");
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
    double last_t;
};

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
    tl->last_t = t;
    return 0;
}

static const char *const transforms[] = {"none", "train", "eval", NULL};
static const char *const dtypes[] = {"uint8", "float32", "float16", "bfloat16", NULL};
static const char *const layouts[] = {"nchw", "nhwc", NULL};

static int parse(int argc, char **argv, struct bench_args *a)
{
    enum { O_THREADS = 256, O_BATCH, O_INFLIGHT, O_SHUFBUF, O_NOSHUF, O_SEED, O_EPOCHS,
           O_SPR, O_RANK, O_WORLD, O_ONERR, O_JSON, O_DECODE, O_SIZE, O_DTYPE, O_LAYOUT, O_FULL,
           O_INDEX, O_START, O_SHUFBYTES, O_PLOT };
    static const struct option longopts[] = {
        {"threads", required_argument, NULL, O_THREADS},
        {"batch-size", required_argument, NULL, O_BATCH},
        {"shards-in-flight", required_argument, NULL, O_INFLIGHT},
        {"shuffle-buffer", required_argument, NULL, O_SHUFBUF},
        {"shuffle-buffer-bytes", required_argument, NULL, O_SHUFBYTES},
        {"no-shuffle", no_argument, NULL, O_NOSHUF},
        {"seed", required_argument, NULL, O_SEED},
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"samples-per-rank", required_argument, NULL, O_SPR},
        {"rank", required_argument, NULL, O_RANK},
        {"world-size", required_argument, NULL, O_WORLD},
        {"on-error", required_argument, NULL, O_ONERR},
        {"json", no_argument, NULL, O_JSON},
        {"decode", required_argument, NULL, O_DECODE},
        {"size", required_argument, NULL, O_SIZE},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"layout", required_argument, NULL, O_LAYOUT},
        {"full-decode", no_argument, NULL, O_FULL},
        {"index", required_argument, NULL, O_INDEX},
        {"start-batch", required_argument, NULL, O_START},
        {"plot", required_argument, NULL, O_PLOT},
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        CLI_SOURCE_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct stk_options *o = &a->opts;
    uint64_t v;
    int c;
    while ((c = getopt_long(argc, argv, "hq", longopts, NULL)) != -1) {
        int bad = 0;
        switch (c) {
        case O_THREADS: if ((bad = cli_parse_u64(CMD, "--threads", optarg, 1, 1024, &v)) == 0) o->threads = (unsigned)v; break;
        case O_BATCH: if ((bad = cli_parse_u64(CMD, "--batch-size", optarg, 1, 1u << 24, &v)) == 0) o->batch_size = v; break;
        case O_INFLIGHT: if ((bad = cli_parse_u64(CMD, "--shards-in-flight", optarg, 1, 4096, &v)) == 0) o->shards_in_flight = (unsigned)v; break;
        case O_SHUFBUF: if ((bad = cli_parse_u64(CMD, "--shuffle-buffer", optarg, 0, 1u << 24, &v)) == 0) o->shuffle_buffer = v; break;
        case O_SHUFBYTES: if ((bad = cli_parse_size(CMD, "--shuffle-buffer-bytes", optarg, &v)) == 0) o->shuffle_buffer_bytes = (size_t)v; break;
        case O_NOSHUF: o->shuffle = 0; break;
        case O_SEED: bad = cli_parse_u64(CMD, "--seed", optarg, 0, UINT64_MAX, &o->seed); break;
        case O_EPOCHS: bad = cli_parse_u64(CMD, "--epochs", optarg, 1, 1000000, &a->epochs); break;
        case O_SPR: bad = cli_parse_u64(CMD, "--samples-per-rank", optarg, 1, UINT64_MAX, &o->samples_per_rank); break;
        case O_RANK: if ((bad = cli_parse_u64(CMD, "--rank", optarg, 0, 1000000, &v)) == 0) o->rank = (int)v; break;
        case O_WORLD: if ((bad = cli_parse_u64(CMD, "--world-size", optarg, 1, 1000000, &v)) == 0) o->world_size = (int)v; break;
        case O_ONERR: bad = cli_parse_on_error(CMD, optarg, &o->on_error); break;
        case O_JSON: a->json = 1; break;
        case O_DECODE: bad = cli_parse_choice(CMD, "--decode", optarg, transforms, (int *)&o->transform); break;
        case O_SIZE: if ((bad = cli_parse_u64(CMD, "--size", optarg, 1, 8192, &v)) == 0) o->image_size = (unsigned)v; break;
        case O_DTYPE: bad = cli_parse_choice(CMD, "--dtype", optarg, dtypes, (int *)&o->dtype); break;
        case O_FULL: o->full_decode = 1; break;
        case O_LAYOUT: bad = cli_parse_choice(CMD, "--layout", optarg, layouts, (int *)&o->layout); break;
        case O_INDEX: o->index_path = optarg; break;
        case O_START: bad = cli_parse_u64(CMD, "--start-batch", optarg, 0, UINT64_MAX, &a->start_batch); break;
        case O_PLOT: a->plot = optarg; break;
        case 'q': a->quiet = 1; break;
        case 'h': help(); return 1;
        default: bad = cli_parse_other_option(CMD, c, optarg, o) == EXIT_OK ? 0 : -1; break;
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
                rc = cli_fail(CMD, "%s", stk_loader_errmsg(l)[0] ? stk_loader_errmsg(l)
                                                                 : stk_strerror(got));
                goto out;
            }
            double now = cli_now_s();
            if (*first_batch_s < 0)
                *first_batch_s = now - start;
            stk_batch_release(b);
            /* Two clock reads per batch; the counters are copied only when
             * a line is drawn or a point taken. */
            if (a->plot != NULL && now - start - tl->last_t >= PLOT_INTERVAL_S) {
                struct stk_stats s;
                stk_loader_stats(l, &s);
                if (timeline_add(tl, &s, now - start) < 0) {
                    rc = cli_fail(CMD, "out of memory recording the plot's points");
                    goto out;
                }
            }
            if (progress.on && now - progress.last_draw >= 0.25) {
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
        printf("{\"shards\": %zu, \"threads\": %u, \"epochs\": %llu, \"samples\": %llu, "
               "\"batches\": %llu, \"member_bytes\": %llu, \"bytes_read\": %llu, "
               "\"seconds\": %.6f, \"first_batch_seconds\": %.6f, \"samples_per_s\": %.1f, "
               "\"mb_per_s\": %.2f, \"read_mb_per_s\": %.2f, \"samples_skipped\": %llu, "
               "\"shards_failed\": %llu, \"members_ignored\": %llu, \"images\": %llu, "
               "\"images_per_s\": %.1f, \"images_replaced\": %llu, \"decode_ms_per_image\": %.4f, "
               "\"samples_read\": %llu, \"samples_passed_over\": %llu, \"cache_hits\": %llu, "
               "\"cache_misses\": %llu, "
               "\"cache_evictions\": %llu, \"cache_bytes_written\": %llu, \"retries\": %llu, "
               "\"resumes\": %llu, \"read_ns\": %llu, \"image_decode_ns\": %llu, "
               "\"image_resample_ns\": %llu, \"image_convert_ns\": %llu, \"wait_ns\": %llu, "
               "\"wall_ns\": %llu, \"read_threads\": %llu, \"decode_threads\": %llu}\n",
               n_shards, a->opts.threads, (unsigned long long)a->epochs,
               (unsigned long long)s->samples, (unsigned long long)s->batches,
               (unsigned long long)s->member_bytes, (unsigned long long)s->bytes_read, seconds,
               first_batch_s, sps, mbs, read_mbs, (unsigned long long)s->samples_skipped,
               (unsigned long long)s->shards_failed, (unsigned long long)s->members_ignored,
               (unsigned long long)s->images_decoded,
               seconds > 0 ? (double)s->images_decoded / seconds : 0,
               (unsigned long long)s->images_replaced, decode_ms,
               (unsigned long long)s->samples_read, (unsigned long long)s->samples_passed_over,
               (unsigned long long)s->cache_hits,
               (unsigned long long)s->cache_misses, (unsigned long long)s->cache_evictions,
               (unsigned long long)s->cache_bytes_written, (unsigned long long)s->retries,
               (unsigned long long)s->resumes, (unsigned long long)s->read_ns,
               (unsigned long long)s->image_decode_ns, (unsigned long long)s->image_resample_ns,
               (unsigned long long)s->image_convert_ns, (unsigned long long)s->wait_ns,
               (unsigned long long)s->wall_ns, (unsigned long long)s->read_threads,
               (unsigned long long)s->decode_threads);
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
    char where[1024];
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
