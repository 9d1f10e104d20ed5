/* SPDX-License-Identifier: MIT */
/*
 * main.c - the stoker command: dispatch to subcommands.
 *
 * The CLI uses only the public API in stoker.h, so it is also the first
 * client that shows whether that API is enough.
 */
#include <stdio.h>
#include <string.h>

#include "cli_common.h"
#include "stoker.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"ls", cmd_ls, "list the samples of shards with their members and sizes"},
    {"cat", cmd_cat, "write one member of one sample to standard output"},
    {"bench", cmd_bench, "measure how fast shards are read into batches"},
    {"index", cmd_index, "count the samples of every shard into a dataset index"},
    {"pack", cmd_pack, "write a directory of files (ImageFolder or by key) into shards"},
    {"reshard", cmd_reshard, "rewrite shards with other sizes or a shuffled order"},
    {"verify", cmd_verify, "read a dataset once and list every bad sample and shard"},
};

static void usage(FILE *out)
{
    fprintf(out, "usage: stoker COMMAND [OPTIONS] ...\n\n"
                 "stoker streams WebDataset-style tar shards into training batches.\n\n"
                 "commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'stoker COMMAND --help' describes a command.\n"
                 "Exit status: 0 success, 1 error while reading, 2 usage error.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return EXIT_OK;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("stoker %s\n", stk_version());
        return EXIT_OK;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "stoker: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return EXIT_USAGE;
}
