/* SPDX-License-Identifier: MIT */
/*
 * cli_cat.c - `stoker cat URL KEY.EXT`: one member's bytes to stdout.
 */
#include <ctype.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli_common.h"

static const char *const CMD = "cat";

static void help(void)
{
    printf("usage: stoker cat [OPTIONS] URL KEY.EXT\n\n"
           "Write the bytes of member EXT of sample KEY to standard output.\n"
           "The key is the member path up to the first dot of its basename,\n"
           "as in WebDataset. Exit status 1 when no such member exists.\n\n"
           "options:\n"
           "  -h, --help             this help\n");
    cli_table_help(STK_OPTION_CLI_CAT, NULL);
    putchar('\n');
    cli_source_help();
}

struct cat_state {
    const char *key;
    size_t key_len;
    const char *ext;
    int found;
    int write_failed;
};

static int find_member(const struct stk_sample *s, void *data)
{
    struct cat_state *st = data;
    if (strlen(s->key) != st->key_len || memcmp(s->key, st->key, st->key_len) != 0)
        return 0;
    for (size_t i = 0; i < s->n_members; i++) {
        if (strcmp(s->members[i].ext, st->ext) != 0)
            continue;
        st->found = 1;
        if (fwrite(s->members[i].data, 1, s->members[i].size, stdout) != s->members[i].size ||
            fflush(stdout) != 0)
            st->write_failed = 1;
        return 1;
    }
    return 0;
}

int cmd_cat(int argc, char **argv)
{
    static const struct option own[] = {
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct stk_options o;
    stk_options_init(&o);
    cli_storage_order_options(&o);
    int c;
    struct option longopts[CLI_MAX_LONGOPTS];
    cli_longopts(own, STK_OPTION_CLI_CAT, longopts);
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            help();
            return EXIT_OK;
        }
        if (cli_parse_other_option(CMD, c, optarg, &o) != EXIT_OK)
            return EXIT_USAGE;
    }
    if (argc - optind != 2)
        return cli_usage_error(CMD, "expected URL and KEY.EXT");
    const char *url = argv[optind];
    const char *name = argv[optind + 1];
    const char *slash = strrchr(name, '/');
    const char *dot = strchr(slash ? slash + 1 : name, '.');
    if (dot == NULL || dot == (slash ? slash + 1 : name))
        return cli_usage_error(CMD, "'%s' is not KEY.EXT", name);
    /* Extensions are lower-cased like WebDataset's, so "x.JPG" finds the
     * member stored as x.JPG (reported as ext "jpg"). */
    char ext[256];
    size_t ext_len = strlen(dot + 1);
    if (ext_len >= sizeof ext)
        return cli_usage_error(CMD, "extension of '%.40s...' is too long", name);
    for (size_t i = 0; i <= ext_len; i++)
        ext[i] = (char)tolower((unsigned char)dot[1 + i]);
    struct cat_state st = {name, (size_t)(dot - name), ext, 0, 0};

    const char *urls[] = {url};
    stk_loader *l = cli_create_loader(CMD, &o, urls, 1);
    if (l == NULL)
        return EXIT_ERROR;
    int rc = cli_for_each_sample(CMD, l, find_member, &st);
    stk_loader_destroy(l);
    if (rc != EXIT_OK)
        return rc;
    if (st.write_failed)
        return cli_fail(CMD, "cannot write to standard output");
    if (!st.found) {
        char shown[1024];
        stk_redact_url(url, shown, sizeof shown);
        return cli_fail(CMD, "no member '%s' in %s", name, shown);
    }
    return EXIT_OK;
}
