/* SPDX-License-Identifier: MIT */
/*
 * urls.c - brace expansion and URL list files.
 *
 * Written by hand because no Debian C library offers shell-style brace
 * expansion without also doing globbing, tilde and variable expansion
 * (wordexp(3) runs the shell's rules, which would be unsafe on URLs).
 * Expansion is recursive on the first top-level brace group; the total
 * number of results is capped so a hostile pattern cannot exhaust memory.
 */
#include "list/urls.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/redact.h"
#include "stoker.h"

#define MAX_PATTERN_BYTES 65536
#define MAX_DEPTH 32

/* Find the '}' matching the '{' at open; -1 when unbalanced. */
static long matching_brace(const char *s, size_t open)
{
    int depth = 0;
    for (size_t i = open; s[i] != '\0'; i++) {
        if (s[i] == '{')
            depth++;
        else if (s[i] == '}' && --depth == 0)
            return (long)i;
    }
    return -1;
}

/* Parse an optionally negative decimal of 1..18 digits (so every sum and
 * difference below fits in 64 bits) spanning [s, end). */
static int parse_bound(const char *s, const char *end, long long *value, size_t *digits,
                       int *leading_zero)
{
    int negative = s < end && *s == '-';
    const char *p = s + negative;
    if (p == end || end - p > 18)
        return 0;
    long long v = 0;
    for (const char *q = p; q < end; q++) {
        if (*q < '0' || *q > '9')
            return 0;
        v = v * 10 + (*q - '0');
    }
    *value = negative ? -v : v;
    *digits = (size_t)(end - s);
    *leading_zero = end - p > 1 && *p == '0';
    return 1;
}

/* Parse "A..B" or "A..B..STEP" (decimal, STEP nonzero). Returns 1 if body
 * is a numeric range. */
static int parse_range(const char *body, size_t len, long long *lo, long long *hi,
                       long long *step, int *width)
{
    const char *end = body + len;
    const char *dots = memmem(body, len, "..", 2);
    if (dots == NULL)
        return 0;
    const char *second = dots + 2;
    const char *dots2 = memmem(second, (size_t)(end - second), "..", 2);
    const char *second_end = dots2 ? dots2 : end;
    size_t wa, wb, ws;
    int za, zb, zs;
    if (!parse_bound(body, dots, lo, &wa, &za) || !parse_bound(second, second_end, hi, &wb, &zb))
        return 0;
    *step = 1;
    if (dots2 != NULL) {
        if (!parse_bound(dots2 + 2, end, step, &ws, &zs) || *step == 0)
            return 0;
        if (*step < 0)
            *step = -*step;
    }
    /* Zero padding: bash pads to the longer endpoint when either has a
     * leading zero, which is what shard names like 000000 need. */
    *width = (za || zb) ? (int)(wa > wb ? wa : wb) : 0;
    return 1;
}

struct expand_ctx {
    struct stk__strlist *out;
    struct stk__err *err;
    char pattern[256];   /* for messages: redacted (its credentials never shown), cut */
    size_t bytes;        /* URL text produced so far */
    size_t work;         /* bytes of intermediate patterns built so far */
};

static int expand(struct expand_ctx *ctx, const char *s, int depth);

/* Expand prefix + alternative + suffix. */
static int expand_joined(struct expand_ctx *ctx, const char *prefix, size_t prefix_len,
                         const char *alt, size_t alt_len, const char *suffix, int depth)
{
    size_t suffix_len = strlen(suffix);
    size_t total = prefix_len + alt_len + suffix_len;
    /* Every brace group copies the pattern once per alternative; bound the
     * copying too, not just the output ("{0..999999}{0..0}{0..0}..."). */
    ctx->work += total;
    if (ctx->work > 4 * (size_t)STK__MAX_URL_BYTES)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' is too expensive to expand",
                         ctx->pattern);
    if (total > MAX_PATTERN_BYTES)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' expands to a URL longer than %d bytes",
                         ctx->pattern, MAX_PATTERN_BYTES);
    char *joined = stk__malloc(total + 1);
    if (joined == NULL)
        return stk__errf(ctx->err, STK_ENOMEM, "out of memory expanding '%.200s'", ctx->pattern);
    memcpy(joined, prefix, prefix_len);
    memcpy(joined + prefix_len, alt, alt_len);
    memcpy(joined + prefix_len + alt_len, suffix, suffix_len + 1);
    int rc = expand(ctx, joined, depth + 1);
    stk__free(joined);
    return rc;
}

static int expand_range(struct expand_ctx *ctx, const char *s, size_t open, long close,
                        long long lo, long long hi, long long step, int width, int depth)
{
    long long count = (lo <= hi ? hi - lo : lo - hi) / step + 1; /* no overflow: |lo|, |hi| < 1e18 */
    if (count > (long long)STK__MAX_SHARDS)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' names more than %u shards",
                         ctx->pattern, STK__MAX_SHARDS);
    long long dir = lo <= hi ? step : -step;
    char num[32]; /* at most 19 digits and a sign: parse_bound's limit */
    for (long long i = 0, v = lo; i < count; i++, v += dir) {
        int n = width ? snprintf(num, sizeof num, "%0*lld", width, v)
                      : snprintf(num, sizeof num, "%lld", v);
        int rc = expand_joined(ctx, s, open, num, (size_t)n, s + close + 1, depth);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int expand(struct expand_ctx *ctx, const char *s, int depth)
{
    if (depth > MAX_DEPTH)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' nests braces too deeply", ctx->pattern);
    if (ctx->out->count >= STK__MAX_SHARDS)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' names more than %u shards",
                         ctx->pattern, STK__MAX_SHARDS);
    const char *brace = strchr(s, '{');
    if (brace == NULL) {
        if (strchr(s, '}') != NULL)
            return stk__errf(ctx->err, STK_EINVAL, "URL pattern '%.200s' has an unmatched '}'", ctx->pattern);
        size_t len = strlen(s);
        if (len == 0)
            return stk__errf(ctx->err, STK_EINVAL, "URL pattern '%.200s' expands to an empty URL",
                             ctx->pattern);
        ctx->bytes += len + 1;
        if (ctx->bytes > STK__MAX_URL_BYTES)
            return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' expands to more than %u MiB of URLs",
                             ctx->pattern, STK__MAX_URL_BYTES >> 20);
        int rc = stk__strlist_push(ctx->out, s, len);
        return rc < 0 ? stk__errf(ctx->err, rc, "out of memory expanding '%.200s'", ctx->pattern) : 0;
    }
    size_t open = (size_t)(brace - s);
    long close = matching_brace(s, open);
    if (close < 0)
        return stk__errf(ctx->err, STK_EINVAL, "URL pattern '%.200s' has an unmatched '{' at position %zu",
                         ctx->pattern, open);
    const char *body = s + open + 1;
    size_t body_len = (size_t)close - open - 1;

    long long lo, hi, step;
    int width;
    if (parse_range(body, body_len, &lo, &hi, &step, &width))
        return expand_range(ctx, s, open, close, lo, hi, step, width, depth);

    /* Alternatives separated by top-level commas. */
    int saw_comma = 0, level = 0;
    for (size_t i = 0; i < body_len; i++) {
        if (body[i] == '{')
            level++;
        else if (body[i] == '}')
            level--;
        else if (body[i] == ',' && level == 0)
            saw_comma = 1;
    }
    if (!saw_comma)
        return stk__errf(ctx->err, STK_EINVAL,
                         "URL pattern '%.200s': '{%.*s}' is neither a list {a,b} nor a range {0..9}",
                         ctx->pattern, (int)(body_len > 100 ? 100 : body_len), body);
    size_t start = 0;
    level = 0;
    for (size_t i = 0; i <= body_len; i++) {
        if (i < body_len && body[i] == '{')
            level++;
        else if (i < body_len && body[i] == '}')
            level--;
        else if (i == body_len || (body[i] == ',' && level == 0)) {
            int rc = expand_joined(ctx, s, open, body + start, i - start, s + close + 1, depth);
            if (rc < 0)
                return rc;
            start = i + 1;
        }
    }
    return 0;
}

int stk__brace_expand(const char *pattern, struct stk__strlist *out, struct stk__err *err)
{
    if (strlen(pattern) > MAX_PATTERN_BYTES)
        return stk__errf(err, STK_ELIMIT, "URL pattern longer than %d bytes", MAX_PATTERN_BYTES);
    struct expand_ctx ctx = {out, err, {0}, 0, 0};
    stk__redact_url(pattern, ctx.pattern, sizeof ctx.pattern);
    return expand(&ctx, pattern, 0);
}

/* Read "@FILE": one pattern per line, '#' comments and blank lines ignored. */
static int expand_list_file(const char *path, struct stk__strlist *out, struct stk__err *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return stk__errf(err, -errno, "cannot open URL list '%s': %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    unsigned long lineno = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ' ||
                           line[len - 1] == '\t'))
            line[--len] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p == '\0' || *p == '#')
            continue;
        if (*p == '@') {
            rc = stk__errf(err, STK_EINVAL, "URL list '%s' line %lu: nested @lists are not allowed",
                           path, lineno);
            break;
        }
        rc = stk__brace_expand(p, out, err);
        if (rc < 0)
            break;
    }
    free(line); /* checksrc: allow: allocated by getline(3), not by stk__malloc */
    fclose(f);
    return rc;
}

int stk__expand_urls(const char *const *patterns, size_t n, struct stk__strlist *out,
                     struct stk__err *err)
{
    for (size_t i = 0; i < n; i++) {
        if (patterns[i] == NULL || patterns[i][0] == '\0')
            return stk__errf(err, STK_EINVAL, "URL %zu is empty", i);
        int rc = patterns[i][0] == '@' ? expand_list_file(patterns[i] + 1, out, err)
                                       : stk__brace_expand(patterns[i], out, err);
        if (rc < 0)
            return rc;
    }
    if (out->count == 0)
        return stk__errf(err, STK_EPLAN, "no shard URLs given");
    return 0;
}
