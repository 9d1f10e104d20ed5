/*
 * urls.c - brace expansion and URL list files.
 *
 * Written by hand because no Debian C library offers shell-style brace
 * expansion without also doing globbing, tilde and variable expansion
 * (wordexp(3) runs the shell's rules, which would be unsafe on URLs).
 * Expansion is recursive on the first top-level brace group; the total
 * number of results is capped so a hostile pattern cannot exhaust memory.
 */
#include "urls.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "stoker.h"

#define MAX_PATTERN_BYTES 65536
#define MAX_DEPTH 32

void stk__strlist_free(struct stk__strlist *list)
{
    for (size_t i = 0; i < list->count; i++)
        stk__free(list->items[i]);
    stk__free(list->items);
    list->items = NULL;
    list->count = list->capacity = 0;
}

int stk__strlist_push(struct stk__strlist *list, const char *s, size_t n)
{
    if (list->count == list->capacity) {
        size_t cap = list->capacity ? list->capacity * 2 : 16;
        char **items = stk__realloc(list->items, cap * sizeof *items);
        if (items == NULL)
            return STK_ENOMEM;
        list->items = items;
        list->capacity = cap;
    }
    char *copy = stk__strndup(s, n);
    if (copy == NULL)
        return STK_ENOMEM;
    list->items[list->count++] = copy;
    return 0;
}

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

/* Parse "A..B" or "A..B..STEP" with decimal A, B. Returns 1 if body is a
 * numeric range. */
static int parse_range(const char *body, size_t len, long long *lo, long long *hi,
                       long long *step, int *width)
{
    char buf[96];
    if (len == 0 || len >= sizeof buf)
        return 0;
    memcpy(buf, body, len);
    buf[len] = '\0';
    char *dots = strstr(buf, "..");
    if (dots == NULL)
        return 0;
    *dots = '\0';
    char *second = dots + 2;
    char *third = strstr(second, "..");
    if (third != NULL) {
        *third = '\0';
        third += 2;
    }
    char *end;
    errno = 0;
    *lo = strtoll(buf, &end, 10);
    if (buf[0] == '\0' || *end != '\0' || errno)
        return 0;
    *hi = strtoll(second, &end, 10);
    if (second[0] == '\0' || *end != '\0' || errno)
        return 0;
    *step = 1;
    if (third != NULL) {
        *step = llabs(strtoll(third, &end, 10));
        if (third[0] == '\0' || *end != '\0' || errno || *step == 0)
            return 0;
    }
    /* Zero padding: bash pads to the longer endpoint when either has a
     * leading zero, which is what shard names like 000000 need. */
    size_t wa = strlen(buf), wb = strlen(second);
    int padded = (wa > 1 && buf[0] == '0') || (wb > 1 && second[0] == '0') ||
                 (wa > 2 && buf[0] == '-' && buf[1] == '0');
    *width = padded ? (int)(wa > wb ? wa : wb) : 0;
    return 1;
}

struct expand_ctx {
    struct stk__strlist *out;
    struct stk__err *err;
    const char *pattern; /* for messages */
};

static int expand(struct expand_ctx *ctx, const char *s, int depth);

/* Expand prefix + alternative + suffix. */
static int expand_joined(struct expand_ctx *ctx, const char *prefix, size_t prefix_len,
                         const char *alt, size_t alt_len, const char *suffix, int depth)
{
    size_t suffix_len = strlen(suffix);
    size_t total = prefix_len + alt_len + suffix_len;
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
    long long count = (lo <= hi ? hi - lo : lo - hi) / step + 1;
    if (count > (long long)STK__MAX_SHARDS)
        return stk__errf(ctx->err, STK_ELIMIT, "URL pattern '%.200s' names more than %u shards",
                         ctx->pattern, STK__MAX_SHARDS);
    long long dir = lo <= hi ? step : -step;
    char num[64];
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
        int rc = stk__strlist_push(ctx->out, s, strlen(s));
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
    struct expand_ctx ctx = {out, err, pattern};
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
