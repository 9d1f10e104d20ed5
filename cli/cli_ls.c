/* SPDX-License-Identifier: MIT */
/*
 * cli_ls.c - `stoker ls`: the samples of shards in storage order.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_common.h"

static const char *const CMD = "ls";

static void help(void)
{
    printf("usage: stoker ls [OPTIONS] URL...\n\n"
           "List the samples of the shards in storage order, one line each:\n"
           "  KEY<TAB>EXT:SIZE EXT:SIZE ...\n"
           "with control characters in keys and extensions escaped (\\n, \\t, \\xHH;\n"
           "a backslash as \\\\).\n"
           "URLs are paths, file:// URLs, brace patterns (train-{0000..0009}.tar)\n"
           "or @FILE with one URL per line. A summary goes to standard error.\n\n"
           "options:\n"
           "  --url                  print the shard URL as a first column\n"
           "  -v, --verbose          say where s3:// and gs:// credentials come from (a\n"
           "                         variable, file or endpoint; never a secret)\n"
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_LS, NULL);
    putchar('\n');
    cli_source_help();
}

struct ls_state {
    int show_url;
    unsigned long long samples, members, bytes;
};

static int print_sample(const struct stk_sample *s, void *data)
{
    struct ls_state *st = data;
    /* Keys and extensions come from the shard: escaped, one sample stays
     * one line whatever they hold. */
    if (st->show_url) {
        cli_put_escaped(stdout, s->url, 1);
        putchar('\t');
    }
    cli_put_escaped(stdout, s->key, 1);
    putchar('\t');
    for (size_t i = 0; i < s->n_members; i++) {
        if (i)
            putchar(' ');
        cli_put_escaped(stdout, s->members[i].ext, 1);
        printf(":%zu", s->members[i].size);
        st->bytes += s->members[i].size;
    }
    putchar('\n');
    st->samples++;
    st->members += s->n_members;
    return 0;
}

int cmd_ls(int argc, char **argv)
{
    static const struct option own[] = {
        {"url", no_argument, NULL, 'u'},
        {"verbose", no_argument, NULL, 'v'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct stk_options o;
    stk_options_init(&o);
    cli_storage_order_options(&o);
    o.log = cli_log_stderr;
    o.log_data = (void *)CMD;
    struct ls_state st = {0};
    int c, verbose = 0;
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_LS, longopts);
    while ((c = getopt_long(argc, argv, "hv", longopts, NULL)) != -1) {
        switch (c) {
        case 'u': st.show_url = 1; break;
        case 'v': verbose = 1; break;
        case 'h': help(); return EXIT_OK;
        default:
            if (cli_parse_other_option(CMD, c, optarg, &o) != EXIT_OK)
                return EXIT_USAGE;
        }
    }
    if (optind >= argc)
        return cli_usage_error(CMD, "no URL given");
    for (int i = optind, said = 0; verbose && i < argc; i++) {
        int bit = strncmp(argv[i], "s3://", 5) == 0 ? 1 : strncmp(argv[i], "gs://", 5) == 0 ? 2 : 0;
        if (bit == 0 || (said & bit))
            continue;
        said |= bit;
        char source[1024];
        int ok = stk_cloud_credentials_source(argv[i], source, sizeof source) == 0;
        fprintf(stderr, "stoker ls: %s credentials: %s\n", bit == 1 ? "s3://" : "gs://",
                ok ? source : "none usable");
    }
    stk_loader *l = cli_create_loader(CMD, &o, (const char *const *)argv + optind, argc - optind);
    if (l == NULL)
        return EXIT_ERROR;
    int rc = cli_for_each_sample(CMD, l, print_sample, &st);
    struct stk_stats stats;
    stk_loader_stats(l, &stats);
    fflush(stdout);
    fprintf(stderr, "%llu samples, %llu members, %llu bytes", st.samples, st.members, st.bytes);
    if (stats.samples_skipped || stats.shards_failed || stats.members_ignored)
        fprintf(stderr, "; skipped %llu samples, %llu shards failed, %llu members ignored",
                (unsigned long long)stats.samples_skipped,
                (unsigned long long)stats.shards_failed,
                (unsigned long long)stats.members_ignored);
    fputc('\n', stderr);
    stk_loader_destroy(l);
    return rc;
}
