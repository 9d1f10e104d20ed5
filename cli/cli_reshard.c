/* SPDX-License-Identifier: MIT */
/*
 * cli_reshard.c - `stoker reshard`: rewrite shards with other sizes or a
 * shuffled order, samples unchanged (read by the loader, written by
 * stk_writer).
 */
#include <getopt.h>
#include <stdio.h>

#include "cli_common.h"
#include "cli_progress.h"

static const char *const CMD = "reshard";

/* Reshard mixes harder than a loader does by default: a wider shuffle, more
 * shards interleaved (used only when shuffling). */
static const struct cli_default defaults[] = {
    {"shuffle_buffer", "10000"},
    {"shards_in_flight", "64"},
    {NULL, NULL},
};

static void help(void)
{
    printf("usage: stoker reshard [OPTIONS] -o PATTERN URL...\n\n"
           "Read the samples of the shards and write them into new shards named by\n"
           "PATTERN (a printf pattern with one %%d, e.g. out/train-%%06d.tar), keys and\n"
           "member bytes unchanged (extensions lower-cased, as the loader reads\n"
           "them). Shuffled by default, as the loader shuffles an epoch: shards in a\n"
           "seeded order, --shards-in-flight of them interleaved, then a sliding\n"
           "window of --shuffle-buffer samples; --sorted keeps the input order. The\n"
           "same seed gives the same shards. Class-sorted input is mixed best with\n"
           "every shard in flight and a buffer of a few samples per class or more.\n\n"
           "The shuffle holds up to twice --shuffle-buffer samples: keep that many\n"
           "samples' bytes below --shuffle-buffer-bytes.\n\n"
           "options:\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_RESHARD, defaults);
    putchar('\n');
    cli_output_help("shuffle as the loader does", "keep the input order");
    cli_source_help();
}

struct reshard_state {
    stk_writer *writer;
    int failed;
    uint64_t written;
    struct cli_progress progress;
};

static int write_sample(const struct stk_sample *s, void *data)
{
    struct reshard_state *st = data;
    if (stk_writer_add(st->writer, s->key, s->members, s->n_members) == 0) {
        cli_progress_update(&st->progress, ++st->written, NULL);
        return 0;
    }
    cli_fail(CMD, "%s: sample '%s': %s", s->url, s->key, stk_writer_errmsg(st->writer));
    st->failed = 1;
    return 1; /* stop */
}

int cmd_reshard(int argc, char **argv)
{
    static const struct option own[] = {
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        CLI_OUTPUT_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct stk_options o;
    stk_options_init(&o);
    cli_storage_order_options(&o);
    o.log = cli_log_stderr;
    o.log_data = (void *)CMD;
    if (cli_apply_defaults(CMD, defaults, &o) < 0)
        return EXIT_USAGE;
    struct cli_output out = cli_output_defaults();
    int c, quiet = 0;
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_RESHARD, longopts);
    while ((c = getopt_long(argc, argv, "hqo:", longopts, NULL)) != -1) {
        int r = cli_parse_output_option(CMD, c, optarg, &out);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0)
            continue;
        switch (c) {
        case 'q': quiet = 1; break;
        case 'h': help(); return EXIT_OK;
        default:
            if (cli_parse_other_option(CMD, c, optarg, &o) != EXIT_OK)
                return EXIT_USAGE;
        }
    }
    if (out.pattern == NULL)
        return cli_usage_error(CMD, "-o PATTERN is required");
    if (optind >= argc)
        return cli_usage_error(CMD, "no URL given");
    if (out.shuffle) {
        o.shuffle = 1;
        o.seed = out.seed;
    } else {
        o.shards_in_flight = 1; /* storage order */
        /* The shuffle's own default above is no request without shuffling
         * (the loader refuses a shuffle_buffer it would ignore); another
         * --shuffle-buffer given with --sorted is refused. */
        struct stk_options shuffled, plain;
        stk_options_init(&shuffled);
        stk_options_init(&plain);
        if (cli_apply_defaults(CMD, defaults, &shuffled) < 0)
            return EXIT_USAGE;
        if (o.shuffle_buffer == shuffled.shuffle_buffer)
            o.shuffle_buffer = plain.shuffle_buffer;
    }
    struct reshard_state st = {0};
    int rc = EXIT_OK;
    if ((st.writer = cli_create_writer(CMD, &out, &rc)) == NULL)
        return rc;
    stk_loader *l = cli_create_loader(CMD, &o, (const char *const *)argv + optind, argc - optind);
    if (l != NULL) {
        /* The total is known with a dataset index only; else no ETA. */
        cli_progress_start(&st.progress, "samples", stk_loader_epoch_samples(l), quiet);
        rc = cli_for_each_sample(CMD, l, write_sample, &st);
        cli_progress_end(&st.progress);
    } else {
        rc = EXIT_ERROR;
    }
    if (rc == EXIT_OK && st.failed)
        rc = EXIT_ERROR;
    uint64_t shards = 0, samples = 0;
    if (rc == EXIT_OK)
        rc = cli_close_writer(CMD, st.writer, &shards, &samples);
    stk_writer_destroy(st.writer); /* after a failure: removes the unfinished shard */
    if (rc == EXIT_OK) {
        struct stk_stats s;
        stk_loader_stats(l, &s);
        printf("%llu samples in %llu shards: %s", (unsigned long long)samples,
               (unsigned long long)shards, out.pattern);
        if (s.samples_skipped || s.shards_failed)
            printf(" (%llu bad samples and %llu cut-short shards left out)",
                   (unsigned long long)s.samples_skipped, (unsigned long long)s.shards_failed);
        putchar('\n');
    }
    stk_loader_destroy(l);
    return rc;
}
