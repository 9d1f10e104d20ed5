/* SPDX-License-Identifier: MIT */
/*
 * cli_index.c - `stoker index`: count the samples of every shard and write
 * the dataset index a loader uses for equal per-rank shares, epoch lengths
 * and fast resumes.
 */
#include <getopt.h>
#include <stdio.h>

#include "cli_common.h"
#include "cli_progress.h"

static const char *const CMD = "index";

static void help(void)
{
    printf("usage: stoker index [OPTIONS] -o FILE URL...\n\n"
           "Count the samples of every shard (read with the loader's own rules, never\n"
           "decoded) and write a JSON dataset index. Give the\n"
           "loader the same URLs and the file (--index, index_path, Loader(index=)).\n\n"
           "options:\n"
           "  -o, --output FILE      where to write the index (required)\n"
           "  --force                replace FILE if it exists (else an error, checked\n"
           "                         before anything is read)\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_INDEX, NULL);
    putchar('\n');
    cli_source_help();
}

int cmd_index(int argc, char **argv)
{
    enum { O_FORCE = 256 };
    static const struct option own[] = {
        {"output", required_argument, NULL, 'o'},
        {"force", no_argument, NULL, O_FORCE},
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        {NULL, 0, NULL, 0},
    };
    struct stk_options o;
    stk_options_init(&o);
    o.log = cli_log_stderr;
    o.log_data = (void *)CMD;
    const char *output = NULL;
    unsigned flags = 0;
    int c, quiet = 0;
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_INDEX, longopts);
    while ((c = getopt_long(argc, argv, "hqo:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': output = optarg; break;
        case O_FORCE: flags |= STK_OUTPUT_OVERWRITE; break;
        case 'q': quiet = 1; break;
        case 'h': help(); return EXIT_OK;
        default:
            if (cli_parse_other_option(CMD, c, optarg, &o) != EXIT_OK)
                return EXIT_USAGE;
        }
    }
    if (output == NULL)
        return cli_usage_error(CMD, "-o FILE is required");
    if (optind >= argc)
        return cli_usage_error(CMD, "no URL given");
    char msg[1024];
    struct stk_stats s;
    struct cli_progress progress;
    cli_progress_start_shards(&progress, &o, quiet);
    int rc = stk_index_build(&o, (const char *const *)argv + optind, (size_t)(argc - optind),
                             output, flags, &s, msg, sizeof msg);
    cli_progress_end(&progress);
    if (rc < 0)
        return cli_output_fail(CMD, rc, msg);
    printf("%llu samples in %llu shards -> %s", (unsigned long long)s.samples,
           (unsigned long long)s.shards_opened, output);
    if (s.samples_skipped || s.shards_failed)
        printf(" (%llu bad samples and %llu cut-short shards not counted)",
               (unsigned long long)s.samples_skipped, (unsigned long long)s.shards_failed);
    putchar('\n');
    return EXIT_OK;
}
