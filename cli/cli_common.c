/*
 * cli_common.c - helpers shared by the subcommands.
 */
#include "cli_common.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void cli_put_escaped(FILE *f, const char *s, int backslash)
{
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        int c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f;
        if (*p == '\n')
            fputs("\\n", f);
        else if (*p == '\t')
            fputs("\\t", f);
        else if (*p == '\r')
            fputs("\\r", f);
        else if (*p == '\\' && backslash)
            fputs("\\\\", f);
        else if (*p < 0x20 || *p == 0x7f)
            fprintf(f, "\\x%02x", *p);
        else if (c1) {
            fprintf(f, "\\xc2\\x%02x", p[1]);
            p++;
        } else
            fputc(*p, f);
    }
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
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] == '\0' || text[0] == '-' || *end != '\0' || errno != 0 || v < min || v > max) {
        cli_usage_error(cmd, "%s expects a number from %llu to %llu, not '%s'", option,
                        (unsigned long long)min, (unsigned long long)max, text);
        return -1;
    }
    *out = v;
    return 0;
}

int cli_parse_size(const char *cmd, const char *option, const char *text, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    unsigned shift = 0;
    switch (*end) {
    case 'K': case 'k': shift = 10; end++; break;
    case 'M': case 'm': shift = 20; end++; break;
    case 'G': case 'g': shift = 30; end++; break;
    case 'T': case 't': shift = 40; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'B')) /* accept KiB, KB, MiB, ... as the same */
        end += *end == 'i' ? (end[1] == 'B' ? 2 : 1) : 1;
    if (text[0] == '\0' || text[0] == '-' || end == text || *end != '\0' || errno != 0 ||
        v == 0 || v > (UINT64_MAX >> shift)) {
        cli_usage_error(cmd, "%s expects a size above 0 in bytes, optionally with K, M, G or T "
                        "(binary), not '%s'", option, text);
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

int cli_parse_choice(const char *cmd, const char *option, const char *text,
                     const char *const *names, int *out)
{
    for (int i = 0; names[i] != NULL; i++) {
        if (strcmp(text, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    cli_usage_error(cmd, "%s does not accept '%s'", option, text);
    return -1;
}

int cli_parse_on_error(const char *cmd, const char *text, enum stk_on_error *out)
{
    if (strcmp(text, "fail") == 0)
        *out = STK_ON_ERROR_FAIL;
    else if (strcmp(text, "skip") == 0)
        *out = STK_ON_ERROR_SKIP;
    else {
        cli_usage_error(cmd, "--on-error expects 'fail' or 'skip', not '%s'", text);
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

int cli_parse_other_option(const char *cmd, int c, const char *arg, struct stk_options *o)
{
    uint64_t v;
    switch (c) {
    case CLI_O_IO_TIMEOUT:
        if (cli_parse_u64(cmd, "--io-timeout-ms", arg, 1, 3600000, &v) < 0)
            return EXIT_USAGE;
        o->io_timeout_ms = (unsigned)v;
        return EXIT_OK;
    case CLI_O_IO_RETRIES:
        if (cli_parse_u64(cmd, "--io-retries", arg, 0, 1000, &v) < 0)
            return EXIT_USAGE;
        o->io_retries = (unsigned)v;
        return EXIT_OK;
    case CLI_O_IO_BACKOFF:
        if (cli_parse_u64(cmd, "--io-backoff-ms", arg, 0, 60000, &v) < 0)
            return EXIT_USAGE;
        o->io_backoff_ms = (unsigned)v;
        return EXIT_OK;
    case CLI_O_IO_MIN_RATE:
        v = 0; /* "0": no limit; cli_parse_size wants a size above 0 */
        if (strcmp(arg, "0") != 0 && cli_parse_size(cmd, "--io-min-rate", arg, &v) < 0)
            return EXIT_USAGE;
        if (v > UINT_MAX) {
            cli_usage_error(cmd, "--io-min-rate must be at most %u bytes per second", UINT_MAX);
            return EXIT_USAGE;
        }
        o->io_min_rate = (unsigned)v;
        return EXIT_OK;
    case CLI_O_ALLOW_PIPE:
        o->allow_pipe = 1;
        return EXIT_OK;
    case CLI_O_CA_BUNDLE:
        o->ca_bundle = arg;
        return EXIT_OK;
    case CLI_O_CACHE_DIR:
        if (arg[0] == '\0') {
            cli_usage_error(cmd, "--cache-dir expects a directory");
            return EXIT_USAGE;
        }
        o->cache_dir = arg;
        return EXIT_OK;
    case CLI_O_CACHE_SIZE:
        return cli_parse_size(cmd, "--cache-size", arg, &o->cache_size) < 0 ? EXIT_USAGE : EXIT_OK;
    case CLI_O_MAX_SAMPLES_PER_SHARD:
        return cli_parse_u64(cmd, "--max-samples-per-shard", arg, 1, (uint64_t)1 << 32,
                             &o->max_samples_per_shard) < 0
                   ? EXIT_USAGE
                   : EXIT_OK;
    default:
        return cli_usage_error(cmd, "unknown option");
    }
}

struct cli_output cli_output_defaults(void)
{
    return (struct cli_output){.max_samples = 10000, .max_bytes = (uint64_t)1 << 30};
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
    case CLI_O_SEED: bad = cli_parse_u64(cmd, "--seed", arg, 0, UINT64_MAX, &out->seed); break;
    case CLI_O_FORCE: out->force = 1; break;
    default: return 0;
    }
    return bad < 0 ? -1 : 1;
}

void cli_output_help(const char *shuffle_help)
{
    printf("output:\n"
           "  -o, --output PATTERN   shard names, a printf pattern with one %%d (required)\n"
           "  --max-samples N        samples per shard (default 10000)\n"
           "  --max-size BYTES       member bytes per shard (default 1G; K, M, G, T)\n"
           "  --shuffle              %s\n"
           "  --seed N               shuffle seed (default 0)\n"
           "  --force                replace the shards of an earlier run: every file in the\n"
           "                         output directory named like this run's shards (same\n"
           "                         prefix and suffix, any number), once this run's shards\n"
           "                         are in place. Without it they are an error and stay as\n"
           "                         they are. Other files are never touched.\n"
           "The output directory is created if missing. The shards appear together when\n"
           "the run ends; a run that fails leaves none (and no directory it made).\n\n",
           shuffle_help);
}

int cli_output_fail(const char *cmd, int rc, const char *message)
{
    return cli_fail(cmd, "%s%s", message[0] ? message : stk_strerror(rc),
                    rc == STK_EEXIST ? " (--force replaces it)" : "");
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
    printf("remote sources (http://, https://, pipe:COMMAND):\n"
           "  --io-timeout-ms N      connect timeout and stall limit (default 30000)\n"
           "  --io-retries N         failed attempts in a row retried (default 5)\n"
           "  --io-backoff-ms N      first retry delay, doubled per retry (default 500)\n"
           "  --io-min-rate BYTES    slowest stream accepted while waiting for it, per\n"
           "                         second (default 4K; 0: no limit; K, M, G)\n"
           "  --allow-pipe           run pipe:COMMAND URLs (split into words, no shell)\n"
           "  --ca-bundle FILE       CA certificates for https (default: $STOKER_CA_BUNDLE,\n"
           "                         $CURL_CA_BUNDLE, else the system store)\n"
           "  --cache-dir DIR        node-local cache of remote shards, shared by the\n"
           "                         processes of the node (needs --cache-size)\n"
           "  --cache-size BYTES     bound on the cache directory, e.g. 200G (K, M, G, T)\n\n"
           "shards:\n"
           "  --max-samples-per-shard N  a shard holding more samples fails (default\n"
           "                         1000000; about 32 bytes of memory per sample)\n");
}

void cli_storage_order_options(struct stk_options *o)
{
    o->shuffle = 0;
    o->threads = 1;
    o->shards_in_flight = 1;
    o->batch_size = 1;
    o->rank = 0;
    o->world_size = 1;
}

stk_loader *cli_create_loader(const char *cmd, const struct stk_options *o,
                              const char *const *urls, int n_urls)
{
    stk_loader *l;
    char msg[1024];
    int rc = stk_loader_create(o, urls, (size_t)n_urls, &l, msg, sizeof msg);
    if (rc < 0) {
        cli_fail(cmd, "%s", msg[0] ? msg : stk_strerror(rc));
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
            return cli_fail(cmd, "%s", stk_loader_errmsg(l)[0] ? stk_loader_errmsg(l)
                                                               : stk_strerror(rc));
        int stop = 0;
        for (size_t i = 0; i < b->n_samples && !stop; i++)
            stop = fn(&b->samples[i], data);
        stk_batch_release(b);
        if (stop)
            return EXIT_OK;
    }
}
