/* SPDX-License-Identifier: MIT */
/*
 * cli_verify.c - `stoker verify`: read a dataset once and list every bad
 * sample and shard, so a training run does not find them hours in.
 */
#include <getopt.h>
#include <stdio.h>

#include "cli_common.h"
#include "cli_progress.h"

static const char *const CMD = "verify";

static void help(void)
{
    printf("usage: stoker verify [OPTIONS] URL...\n\n"
           "Read every sample of the shards with the loader's own rules and check\n"
           "the tar structure, the grouping of members into samples and, unless\n"
           "--no-images, that each sample has a jpg/jpeg/png member that decodes\n"
           "whole and a label; also that nothing follows a shard's end-of-archive\n"
           "marker and that every shard holds a sample. Never stops at bad data:\n"
           "each problem is printed on standard output, one line naming the shard\n"
           "and the key, member or offset, then a summary. Exit status 0: all\n"
           "good; 1: problems found or the shards could not be listed; 2: usage.\n\n"
           "options:\n"
           "  --no-images            check tar structure and grouping only\n"
           "  --no-labels            unlabelled data: do not look for labels\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_VERIFY, NULL);
    putchar('\n');
    cli_source_help();
}

/* Problems are the command's output: one line each on stdout. */
static void print_problem(void *data, enum stk_log_level level, const char *msg)
{
    (void)data;
    if (level <= STK_LOG_WARN)
        cli_put_line(stdout, "", msg);
    else
        cli_put_line(stderr, "stoker verify: ", msg);
}

int cmd_verify(int argc, char **argv)
{
    enum { O_NO_IMAGES = 256, O_NO_LABELS };
    static const struct option own[] = {
        {"no-images", no_argument, NULL, O_NO_IMAGES},
        {"no-labels", no_argument, NULL, O_NO_LABELS},
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct stk_options o;
    stk_options_init(&o);
    o.log = print_problem;
    o.transform = STK_TRANSFORM_EVAL; /* any transform: images are decoded whole */
    int c, quiet = 0;
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_VERIFY, longopts);
    while ((c = getopt_long(argc, argv, "hq", longopts, NULL)) != -1) {
        switch (c) {
        case O_NO_IMAGES: o.transform = STK_TRANSFORM_NONE; break;
        case O_NO_LABELS: o.label_exts = ""; break;
        case 'q': quiet = 1; break;
        case 'h': help(); return EXIT_OK;
        default:
            if (cli_parse_other_option(CMD, c, optarg, &o) != EXIT_OK)
                return EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error(CMD, "no URL given");
    char msg[1024];
    struct stk_stats s;
    struct cli_progress progress;
    cli_progress_start_shards(&progress, &o, quiet);
    int rc = stk_verify(&o, (const char *const *)argv + optind, (size_t)(argc - optind), &s, msg,
                        sizeof msg);
    cli_progress_end(&progress);
    if (rc < 0)
        return cli_fail(CMD, "%s", msg);
    printf("%llu samples in %llu shards", (unsigned long long)s.samples,
           (unsigned long long)s.shards_opened);
    if (o.transform != STK_TRANSFORM_NONE)
        printf(", %llu images decoded", (unsigned long long)s.images_decoded);
    printf(": %llu bad samples, %llu shards not read to the end",
           (unsigned long long)s.samples_skipped, (unsigned long long)s.shards_failed);
    if (s.shards_empty)
        printf(", %llu shards without samples", (unsigned long long)s.shards_empty);
    putchar('\n');
    /* Each shard's labels were counted as one batch: the label mixing of
     * the report, with its rule that below half of a uniform shuffle's is
     * poor. Not bad data, so the exit status stays. */
    struct stk_rates r;
    stk_stats_rates(&s, NULL, &r);
    if (s.label_batches > 0 && r.label_mix_eff < 0.5 * r.label_mix_perfect)
        printf("note: the shards look sorted by class: each mixes %.1f labels (effective), "
               "%.1f distinct, where shuffled shards would mix %.1f; a streaming loader "
               "mixes such shards poorly: rewrite them shuffled (stoker reshard --shuffle)\n",
               r.label_mix_eff, r.labels_per_batch, r.label_mix_perfect);
    return s.samples_skipped || s.shards_failed || s.shards_empty ? EXIT_ERROR : EXIT_OK;
}
