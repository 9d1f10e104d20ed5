/* SPDX-License-Identifier: MIT */
/*
 * cli_common.h - what every stoker subcommand shares: exit codes, number
 * parsing, the options common to commands that read shards, and running a
 * loader to completion.
 */
#ifndef STK_CLI_COMMON_H
#define STK_CLI_COMMON_H

#include <getopt.h>
#include <stdint.h>
#include <stdio.h>

#include "stoker.h"

enum { EXIT_OK = 0, EXIT_ERROR = 1, EXIT_USAGE = 2 };

/* Parse a decimal number in [min, max]; on failure print a usage error
 * naming the option and return -1. */
int cli_parse_u64(const char *cmd, const char *option, const char *text, uint64_t min,
                  uint64_t max, uint64_t *out);

/* Parse a byte count with an optional binary suffix K, M, G or T (KiB...);
 * on failure print a usage error naming the option and return -1. */
int cli_parse_size(const char *cmd, const char *option, const char *text, uint64_t *out);

/* Set option `name` of the option table from arg, a command's own flag
 * for it (ls --on-error, verify --max-pixels): 0, or -1 after a usage
 * error naming the flag and what the option accepts. */
int cli_set_option(const char *cmd, const char *flag, const char *name, const char *arg,
                   struct stk_options *o);

/* Write s to f with its control characters (C0, DEL, and U+0080..U+009F in
 * UTF-8) as \n, \t, \r or \xHH, and with backslash=1 also backslash as
 * \\: keys and member names come from shards, and one of them must not
 * break a line of output in two or drive the terminal. Messages of the
 * library escape the names they quote already (backslash=0 keeps those
 * escapes as they are). */
void cli_put_escaped(FILE *f, const char *s, int backslash);

/* Write prefix, then text escaped (backslash=0), then a newline, as one
 * line under the stream's lock: log callbacks run on several threads. */
void cli_put_line(FILE *f, const char *prefix, const char *text);

/* Log callback printing "stoker CMD: warning: ..." to stderr; data is the
 * command name. */
void cli_log_stderr(void *data, enum stk_log_level level, const char *message);

/* Print "stoker CMD: message" to stderr and return EXIT_ERROR. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Print "stoker CMD: ...\nTry 'stoker CMD --help'." and return EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Loader options come from the library's option table (stk_option_at()):
 * a command takes those whose flags hold its bit (STK_OPTION_CLI_LS, ...),
 * with their --cli_name, values, ranges and help text. cli_longopts() puts
 * its own entries (`own`, ending in a NULL name) and the table's into out
 * (at least CLI_MAX_LONGOPTS entries, ending in a NULL name); the table's
 * carry getopt values from CLI_O_TABLE up. */
#define CLI_MAX_LONGOPTS 128
enum { CLI_O_TABLE = 2000 };
void cli_longopts(const struct option *own, unsigned command, struct option *out);

/* The default case of a command's option switch: apply table option c to
 * o and return EXIT_OK, or print a usage error (bad value, naming the flag
 * and what it accepts; unknown option) and return EXIT_USAGE. */
int cli_parse_other_option(const char *cmd, int c, const char *arg, struct stk_options *o);

/* A command's own default for a table option ({"shuffle_buffer", "10000"}
 * in reshard); lists of them end in a NULL name. */
struct cli_default {
    const char *name, *value;
};

/* Set the defaults into o: 0, or -1 after a usage error (a bad row). */
int cli_apply_defaults(const char *cmd, const struct cli_default *defaults,
                       struct stk_options *o);

/* Print for --help the table's options of command (its bit) that not every
 * command reading shards takes (cli_source_help() shows those), one per
 * line with its meaning and default (the command's own from defaults,
 * NULL allowed). */
void cli_table_help(unsigned command, const struct cli_default *defaults);

/* The help of the options every command that reads shards takes. */
void cli_source_help(void);

/* What pack and reshard write: -o PATTERN, shard limits and the order.
 * Put CLI_OUTPUT_LONGOPTS in the getopt_long table ("o:" in the short
 * options), pass each option to cli_parse_output_option() first and print
 * cli_output_help() in --help. */
struct cli_output {
    const char *pattern;
    uint64_t max_samples, max_bytes, seed;
    int shuffle;
    int force; /* replace existing shards (STK_OUTPUT_OVERWRITE) */
};
enum { CLI_O_MAX_SAMPLES = 1100, CLI_O_MAX_SIZE, CLI_O_SHUFFLE, CLI_O_SORTED, CLI_O_SEED, CLI_O_FORCE };
#define CLI_OUTPUT_LONGOPTS                                                                      \
    {"output", required_argument, NULL, 'o'},                                                    \
        {"max-samples", required_argument, NULL, CLI_O_MAX_SAMPLES},                             \
        {"max-size", required_argument, NULL, CLI_O_MAX_SIZE},                                   \
        {"shuffle", no_argument, NULL, CLI_O_SHUFFLE},                                           \
        {"sorted", no_argument, NULL, CLI_O_SORTED},                                             \
        {"seed", required_argument, NULL, CLI_O_SEED},                                           \
        {"force", no_argument, NULL, CLI_O_FORCE}

/* The defaults: 10000 samples or 1 GiB per shard, shuffled with seed 0:
 * sorted shards (each holding a few classes) train badly on any streaming
 * loader, so storage order is asked for (--sorted), not fallen into. */
struct cli_output cli_output_defaults(void);

/* 1: c was an output option and is applied to out; 0: not one; -1: bad
 * value (a usage error was printed). */
int cli_parse_output_option(const char *cmd, int c, const char *arg, struct cli_output *out);
void cli_output_help(const char *shuffle_help, const char *sorted_help);

/* The shard writer for out, or NULL after printing why (*status: the exit
 * code; existing shards without --force are an error, not a usage one). */
stk_writer *cli_create_writer(const char *cmd, const struct cli_output *out, int *status);

/* Finish the writer's last shard, print what --force removed of an earlier
 * run (to stderr), and return an exit code after printing any failure;
 * *shards and *samples get the numbers written. */
int cli_close_writer(const char *cmd, stk_writer *w, uint64_t *shards, uint64_t *samples);

/* Print the writer's or an output function's failure (rc) with a hint to
 * --force when an output exists; returns EXIT_ERROR. */
int cli_output_fail(const char *cmd, int rc, const char *message);

/* Options for reading shards in storage order on one rank (ls, cat). */
void cli_storage_order_options(struct stk_options *o);

/* Create a loader or print why not; returns NULL on failure. */
stk_loader *cli_create_loader(const char *cmd, const struct stk_options *o,
                              const char *const *urls, int n_urls);

/* Iterate one epoch, calling fn(sample, data) for each sample until it
 * returns nonzero (stop early). Returns an exit code. */
int cli_for_each_sample(const char *cmd, stk_loader *l,
                        int (*fn)(const struct stk_sample *s, void *data), void *data);

int cmd_ls(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_index(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_pack(int argc, char **argv);
int cmd_reshard(int argc, char **argv);

#endif
