/* SPDX-License-Identifier: MIT */
/*
 * cli_common.c - helpers shared by the subcommands.
 */
#include "cli_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

void cli_put_escaped(FILE *f, const char *s, int backslash)
{
    char esc[STK_ESCAPED_MAX];
    size_t used;
    for (; *s != '\0'; s += used)
        fwrite(esc, 1, stk_escape_char(s, backslash, esc, &used), f);
}

void cli_put_line(FILE *f, const char *prefix, const char *text)
{
    flockfile(f);
    /* A progress line (cli_progress.h) may be on the terminal: start at its
     * beginning and erase it, so this line is not appended to it; the
     * progress line is drawn again below at its next update. */
    if (isatty(fileno(f)) && isatty(STDERR_FILENO))
        fputs("\r\033[K", f);
    fputs(prefix, f);
    cli_put_escaped(f, text, 0);
    fputc('\n', f);
    funlockfile(f);
}

static void vreport(const char *cmd, const char *fmt, va_list ap)
{
    char text[4096], prefix[64];
    vsnprintf(text, sizeof text, fmt, ap);
    snprintf(prefix, sizeof prefix, "stoker %s: ", cmd);
    cli_put_line(stderr, prefix, text);
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    return EXIT_ERROR;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vreport(cmd, fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'stoker %s --help'.\n", cmd);
    return EXIT_USAGE;
}

int cli_parse_u64(const char *cmd, const char *option, const char *text, uint64_t min,
                  uint64_t max, uint64_t *out)
{
    uint64_t v;
    if (stk_parse_count(text, 0, &v) < 0 || v < min || v > max) {
        cli_usage_error(cmd, "%s expects a number from %llu to %llu, not '%s'", option,
                        (unsigned long long)min, (unsigned long long)max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_size(const char *cmd, const char *option, const char *text, uint64_t *out)
{
    uint64_t v;
    if (stk_parse_count(text, 1, &v) < 0 || v == 0) {
        cli_usage_error(cmd, "%s expects a size above 0 in bytes, optionally with K, M, G or T "
                        "(binary), not '%s'", option, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_set_option(const char *cmd, const char *flag, const char *name, const char *arg,
                   struct stk_options *o)
{
    char msg[512];
    if (stk_options_set(o, name, arg, msg, sizeof msg) < 0) {
        cli_usage_error(cmd, "%s: %s", flag, msg);
        return -1;
    }
    return 0;
}

void cli_log_stderr(void *data, enum stk_log_level level, const char *message)
{
    static const char *const names[] = {"error", "warning", "info"};
    char prefix[64];
    snprintf(prefix, sizeof prefix, "stoker %s: %s: ", (const char *)data, names[level]);
    cli_put_line(stderr, prefix, message);
}

/* A BOOL that defaults to 1: its flag (--no-NAME) turns it off. */
static int flag_turns_off(const struct stk_option_info *info)
{
    return info->type == STK_OPTION_BOOL && strcmp(info->default_value, "1") == 0;
}

/* The long name of table option i as a flag: "no-NAME" when the flag turns
 * the option off. Names live as long as the process. */
static const char *flag_name(size_t i)
{
    static char names[CLI_MAX_LONGOPTS][64];
    const struct stk_option_info *info = stk_option_at(i);
    int off = flag_turns_off(info);
    if (i >= CLI_MAX_LONGOPTS)
        return info->cli_name;
    snprintf(names[i], sizeof names[i], "%s%s", off ? "no-" : "", info->cli_name);
    return names[i];
}

static int in_scope(const struct stk_option_info *info, unsigned command)
{
    return info->cli_name != NULL && (info->flags & command) != 0;
}

/* Every command that reads shards takes it: shown in cli_source_help(). */
static int shared(const struct stk_option_info *info)
{
    return (info->flags & STK_OPTION_CLI_SOURCE) == STK_OPTION_CLI_SOURCE;
}

void cli_longopts(const struct option *own, unsigned command, struct option *out)
{
    size_t n = 0;
    for (; own[n].name != NULL; n++)
        out[n] = own[n];
    const struct stk_option_info *info;
    for (size_t i = 0; (info = stk_option_at(i)) != NULL && n + 1 < CLI_MAX_LONGOPTS; i++)
        if (in_scope(info, command))
            out[n++] = (struct option){flag_name(i),
                                       info->type == STK_OPTION_BOOL ? no_argument
                                                                     : required_argument,
                                       NULL, CLI_O_TABLE + (int)i};
    out[n] = (struct option){NULL, 0, NULL, 0};
}

int cli_parse_other_option(const char *cmd, int c, const char *arg, struct stk_options *o)
{
    const struct stk_option_info *info = c >= CLI_O_TABLE ? stk_option_at((size_t)(c - CLI_O_TABLE))
                                                          : NULL;
    if (info == NULL)
        return cli_usage_error(cmd, "unknown option");
    if (info->type == STK_OPTION_BOOL) /* the flag flips the default */
        arg = flag_turns_off(info) ? "0" : "1";
    char flag[80];
    snprintf(flag, sizeof flag, "--%s", info->cli_name);
    return cli_set_option(cmd, flag, info->name, arg, o) < 0 ? EXIT_USAGE : EXIT_OK;
}

/* Print text from column `indent` (the cursor is at column `at`), wrapped
 * at 79 columns. */
static void put_wrapped(const char *text, int at, int indent)
{
    while (*text != '\0') {
        int room = 79 - indent, n = (int)strlen(text);
        if (at >= indent) /* the name reaches the text's column */
            printf("\n%*s", indent, "");
        else
            printf("%*s", indent - at, "");
        if (n > room) {
            int cut = room;
            while (cut > 0 && text[cut] != ' ')
                cut--;
            n = cut > 0 ? cut : room;
        }
        printf("%.*s\n", n, text);
        text += n + (text[n] == ' ');
        at = 0;
    }
}

int cli_apply_defaults(const char *cmd, const struct cli_default *defaults,
                       struct stk_options *o)
{
    for (; defaults != NULL && defaults->name != NULL; defaults++)
        if (cli_set_option(cmd, defaults->name, defaults->name, defaults->value, o) < 0)
            return -1;
    return 0;
}

/* The default help shows for option info: the command's own, else the table's. */
static const char *default_of(const struct stk_option_info *info, const struct cli_default *own)
{
    for (; own != NULL && own->name != NULL; own++)
        if (strcmp(own->name, info->name) == 0)
            return own->value;
    return info->default_value != NULL ? info->default_value : "none";
}

/* Print the table's options of command that all commands reading shards
 * share (shared_ones) or that they do not, one per line with its meaning
 * and default. */
static void table_help(unsigned command, int shared_ones, const struct cli_default *defaults)
{
    const struct stk_option_info *info;
    for (size_t i = 0; (info = stk_option_at(i)) != NULL; i++) {
        if (!in_scope(info, command) || shared(info) != shared_ones)
            continue;
        char head[96], text[512], meta[64] = "";
        if (info->type != STK_OPTION_BOOL) {
            snprintf(meta, sizeof meta, " %s", info->metavar);
            for (char *p = meta; *p != '\0'; p++)
                *p = info->type == STK_OPTION_CHOICE && *p == ',' ? '|' : *p;
        }
        int at = snprintf(head, sizeof head, "  --%s%s", flag_name(i), meta);
        if (info->type == STK_OPTION_BOOL)
            snprintf(text, sizeof text, "%s%s", flag_turns_off(info) ? "turn off: " : "",
                     info->doc);
        else
            snprintf(text, sizeof text, "%s (default %s)", info->doc, default_of(info, defaults));
        fputs(head, stdout);
        put_wrapped(text, at, 25);
    }
}

void cli_table_help(unsigned command, const struct cli_default *defaults)
{
    table_help(command, 0, defaults);
}

struct cli_output cli_output_defaults(void)
{
    return (struct cli_output){.max_samples = 10000, .max_bytes = (uint64_t)1 << 30, .shuffle = 1};
}

int cli_parse_output_option(const char *cmd, int c, const char *arg, struct cli_output *out)
{
    int bad = 0;
    switch (c) {
    case 'o': out->pattern = arg; break;
    case CLI_O_MAX_SAMPLES:
        bad = cli_parse_u64(cmd, "--max-samples", arg, 1, UINT64_MAX, &out->max_samples);
        break;
    case CLI_O_MAX_SIZE: bad = cli_parse_size(cmd, "--max-size", arg, &out->max_bytes); break;
    case CLI_O_SHUFFLE: out->shuffle = 1; break;
    case CLI_O_SORTED: out->shuffle = 0; break;
    case CLI_O_SEED: bad = cli_parse_u64(cmd, "--seed", arg, 0, UINT64_MAX, &out->seed); break;
    case CLI_O_FORCE: out->force = 1; break;
    default: return 0;
    }
    return bad < 0 ? -1 : 1;
}

void cli_output_help(const char *shuffle_help, const char *sorted_help)
{
    printf("output:\n"
           "  -o, --output PATTERN   shard names, a printf pattern with one %%d (required)\n"
           "  --max-samples N        samples per shard (default 10000)\n"
           "  --max-size BYTES       member bytes per shard (default 1G; K, M, G, T)\n"
           "  --shuffle              %s (the default)\n"
           "  --sorted               %s\n"
           "  --seed N               shuffle seed (default 0)\n"
           "  --force                replace the shards of an earlier run: every file in the\n"
           "                         output directory named like this run's shards (same\n"
           "                         prefix and suffix, any number), once this run's shards\n"
           "                         are in place. Without it they are an error and stay as\n"
           "                         they are. Other files are never touched.\n"
           "The output directory is created if missing. The shards appear together when\n"
           "the run ends; a run that fails leaves none (and no directory it made).\n\n",
           shuffle_help, sorted_help);
}

int cli_output_fail(const char *cmd, int rc, const char *message)
{
    return cli_fail(cmd, "%s%s", message, rc == STK_EEXIST ? " (--force replaces it)" : "");
}

stk_writer *cli_create_writer(const char *cmd, const struct cli_output *out, int *status)
{
    char msg[1024];
    stk_writer *w;
    int rc = stk_writer_create(out->pattern, out->max_samples, out->max_bytes,
                               out->force ? STK_OUTPUT_OVERWRITE : 0, &w, msg, sizeof msg);
    if (rc == STK_EINVAL) /* the pattern or a size */
        *status = cli_usage_error(cmd, "%s", msg);
    else if (rc < 0)
        *status = cli_output_fail(cmd, rc, msg);
    return rc < 0 ? NULL : w;
}

int cli_close_writer(const char *cmd, stk_writer *w, uint64_t *shards, uint64_t *samples)
{
    int rc = stk_writer_close(w, shards, samples);
    uint64_t removed = stk_writer_removed(w);
    if (removed > 0)
        fprintf(stderr, "stoker %s: removed %llu shard(s) of an earlier run (named like the %llu "
                "written)\n", cmd, (unsigned long long)removed, (unsigned long long)*shards);
    return rc < 0 ? cli_output_fail(cmd, rc, stk_writer_errmsg(w)) : EXIT_OK;
}

void cli_source_help(void)
{
    printf("reading shards (remote sources http://, https://, s3://, gs://, pipe:COMMAND;\n"
           "the node cache; limits):\n");
    table_help(STK_OPTION_CLI_SOURCE, 1, NULL);
}

void cli_storage_order_options(struct stk_options *o)
{
    o->shuffle = 0;
    o->threads = 1;
    o->shards_in_flight = 1;
    o->batch_size = 1;
    o->rank = 0;
    o->world_size = 1;
    o->epochs = 1; /* nothing of a next epoch read ahead */
}

stk_loader *cli_create_loader(const char *cmd, const struct stk_options *o,
                              const char *const *urls, int n_urls)
{
    stk_loader *l;
    char msg[1024];
    int rc = stk_loader_create(o, urls, (size_t)n_urls, &l, msg, sizeof msg);
    if (rc < 0) {
        cli_fail(cmd, "%s", msg);
        return NULL;
    }
    return l;
}

int cli_for_each_sample(const char *cmd, stk_loader *l,
                        int (*fn)(const struct stk_sample *s, void *data), void *data)
{
    for (;;) {
        struct stk_batch *b;
        int rc = stk_loader_next(l, &b);
        if (rc == STK_EOF)
            return EXIT_OK;
        if (rc < 0)
            return cli_fail(cmd, "%s", stk_loader_errmsg(l));
        int stop = 0;
        for (size_t i = 0; i < b->n_samples && !stop; i++)
            stop = fn(&b->samples[i], data);
        stk_batch_release(b);
        if (stop)
            return EXIT_OK;
    }
}
