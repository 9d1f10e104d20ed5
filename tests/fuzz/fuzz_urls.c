/* SPDX-License-Identifier: MIT */
/*
 * fuzz_urls.c - libFuzzer target: arbitrary bytes as a URL brace pattern.
 *
 * The input, cut at 4 KiB and at its first NUL, is expanded with
 * stk__brace_expand into a list that already holds one entry (results are
 * appended). Every expansion is made under stoker's allocation failure
 * injection (alloc.h): at most FUZZ_URLS_MAX_ALLOCS allocations, after which
 * stoker sees out-of-memory. That bounds time and memory per input: the
 * library's own caps (STK__MAX_SHARDS results, STK__MAX_URL_BYTES of text)
 * still allow a 200-byte pattern a million results and seconds of work,
 * far too slow for fuzzing. An STK_ENOMEM result is accepted only when the
 * cap was actually reached.
 *
 * Rules checked on every result, also the partial results of a failed
 * expansion (a violation is a __builtin_trap):
 *  - it has no '{' or '}' (every group was expanded, stray '}' rejected);
 *  - it is no longer than the pattern, and at least 2 bytes shorter when the
 *    pattern has a '{' (a group loses its braces; an alternative or a number
 *    is never longer than the group's text);
 *  - it starts with the pattern's text before the first '{', ends with the
 *    text after the last '}', and is at least as long as the pattern's text
 *    outside every group; it is never empty (an empty URL is an error, so
 *    "{,a}" fails);
 * and on the outcome:
 *  - a pattern without braces expands to exactly itself;
 *  - a pattern with unbalanced braces is an error;
 *  - an error leaves err.code == rc, a message, and is one of STK_EINVAL,
 *    STK_ELIMIT, or STK_ENOMEM after the injected cap;
 *  - the entry already in the list is untouched;
 *  - at most STK__MAX_SHARDS results and STK__MAX_URL_BYTES of text;
 *  - "P{A..B}S" with decimal A, B of up to 9 digits: more than
 *    STK__MAX_SHARDS numbers is STK_ELIMIT (before anything is built),
 *    else the results are compared with a direct expansion, as they are
 *    for "P{x,y,...}S" with plain alternatives.
 * The input is also redacted (stk__redact_url): the reported length
 * matches, truncation gives a prefix, a second pass changes nothing, and a
 * pipe: command splits into as many words redacted as it did before (a
 * hidden value never merges or splits words).
 */
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "stoker.h"
#include "io/redact.h"
#include "io/command.h"
#include "list/urls.h"

#define FUZZ_URLS_MAX_INPUT 4096
#define FUZZ_URLS_MAX_ALLOCS 8192ul

static const char sentinel[] = "already-in-the-list";

struct shape {
    size_t len;
    int has_open, has_close;
    int balanced;
    size_t first_open;   /* index of the first '{' (len if none) */
    size_t after_close;  /* index just after the last '}' (0 if none) */
    size_t top_literals; /* characters outside every group */
    size_t groups;       /* top-level groups */
};

static void describe(const char *p, struct shape *sh) {
    memset(sh, 0, sizeof *sh);
    sh->len = strlen(p);
    sh->first_open = sh->len;
    sh->balanced = 1;
    long depth = 0;
    for (size_t i = 0; i < sh->len; i++) {
        if (p[i] == '{') {
            if (!sh->has_open)
                sh->first_open = i;
            sh->has_open = 1;
            if (depth == 0)
                sh->groups++;
            depth++;
        } else if (p[i] == '}') {
            sh->has_close = 1;
            sh->after_close = i + 1;
            if (--depth < 0)
                sh->balanced = 0;
        } else if (depth == 0) {
            sh->top_literals++;
        }
    }
    if (depth != 0)
        sh->balanced = 0;
}

static void check_result(const char *pattern, const struct shape *sh, const char *r) {
    FUZZ_CHECK(r != NULL);
    size_t len = strlen(r);
    FUZZ_CHECK(len > 0); /* an empty URL is an error, never a result */
    FUZZ_CHECK(strchr(r, '{') == NULL && strchr(r, '}') == NULL);
    FUZZ_CHECK(len <= sh->len);
    if (sh->has_open)
        FUZZ_CHECK(len + 2 <= sh->len);
    /* Literal prefix and suffix survive. */
    FUZZ_CHECK(len >= sh->first_open && memcmp(r, pattern, sh->first_open) == 0);
    if (sh->has_close) {
        size_t tail = sh->len - sh->after_close;
        FUZZ_CHECK(len >= tail && memcmp(r + len - tail, pattern + sh->after_close, tail) == 0);
    }
    FUZZ_CHECK(len >= sh->top_literals);
}

/* "P{A..B}S" with A and B of 1..9 digits (optionally after '-'), no step,
 * no other brace: more than STK__MAX_SHARDS results must be refused with
 * STK_ELIMIT; otherwise a successful expansion must be exactly P, each
 * number from A to B (zero-padded to the longer endpoint when either has a
 * leading zero), S, in order. */
static int is_short_int(const char *s, size_t n, int *leading_zero) {
    size_t i = (n > 0 && s[0] == '-') ? 1 : 0;
    if (n == i || n - i > 9)
        return 0;
    *leading_zero = n - i > 1 && s[i] == '0';
    for (; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return 0;
    return 1;
}

static void check_simple_range(const char *p, const struct shape *sh,
                               const struct stk__strlist *out, size_t first, int rc) {
    if (sh->groups != 1 || !sh->balanced)
        return;
    const char *open = strchr(p, '{');
    const char *close = strchr(p, '}');
    if (strchr(open + 1, '{') != NULL || strchr(close + 1, '}') != NULL)
        return;
    const char *body = open + 1;
    const char *dots = strstr(body, "..");
    if (dots == NULL || dots > close)
        return;
    const char *b = dots + 2;
    size_t na = (size_t)(dots - body), nb = (size_t)(close - b);
    int za, zb;
    if (!is_short_int(body, na, &za) || !is_short_int(b, nb, &zb))
        return;
    long long lo = strtoll(body, NULL, 10), hi = strtoll(b, NULL, 10);
    unsigned long long count = (unsigned long long)(lo <= hi ? hi - lo : lo - hi) + 1;
    if (count > STK__MAX_SHARDS) {
        FUZZ_CHECK(rc == STK_ELIMIT && out->count == first);
        return;
    }
    if (rc != 0)
        return;
    int width = (za || zb) ? (int)(na > nb ? na : nb) : 0;
    FUZZ_CHECK(out->count - first == count);
    size_t plen = (size_t)(open - p);
    const char *suffix = close + 1;
    long long v = lo;
    for (size_t i = 0; i < count; i++, v += lo <= hi ? 1 : -1) {
        char num[32];
        snprintf(num, sizeof num, "%0*lld", width, v);
        const char *r = out->items[first + i];
        FUZZ_CHECK(strncmp(r, p, plen) == 0);
        FUZZ_CHECK(strncmp(r + plen, num, strlen(num)) == 0);
        FUZZ_CHECK(strcmp(r + plen + strlen(num), suffix) == 0);
    }
}

/* "P{x,y,...}S" with one group, alternatives free of braces and of "..". */
static void check_simple_list(const char *p, const struct shape *sh, const struct stk__strlist *out,
                              size_t first, int rc) {
    if (rc != 0 || sh->groups != 1 || !sh->balanced)
        return;
    const char *open = strchr(p, '{');
    const char *close = strchr(p, '}');
    if (strchr(open + 1, '{') != NULL || strchr(close + 1, '}') != NULL)
        return;
    size_t body_len = (size_t)(close - open - 1);
    if (memchr(open + 1, ',', body_len) == NULL)
        return;
    for (const char *q = open + 1; q + 1 < close; q++)
        if (q[0] == '.' && q[1] == '.')
            return;
    size_t plen = (size_t)(open - p);
    const char *suffix = close + 1;
    size_t i = first;
    const char *alt = open + 1;
    for (;;) {
        const char *end = alt;
        while (end < close && *end != ',')
            end++;
        FUZZ_CHECK(i < out->count);
        const char *r = out->items[i++];
        size_t alen = (size_t)(end - alt);
        FUZZ_CHECK(strncmp(r, p, plen) == 0 && strncmp(r + plen, alt, alen) == 0 &&
                   strcmp(r + plen + alen, suffix) == 0);
        if (end == close)
            break;
        alt = end + 1;
    }
    FUZZ_CHECK(i == out->count);
}

/* The redacted form: reported length matches, truncation gives a prefix,
 * and redacting twice changes nothing (no secret survives a first pass in
 * a form a second pass would still find). */
static void check_redaction(const char *url)
{
    size_t n = stk__redact_url(url, NULL, 0);
    char *full = malloc(n + 1);
    FUZZ_CHECK(full != NULL);
    FUZZ_CHECK(stk__redact_url(url, full, n + 1) == n && strlen(full) == n);
    char small[16];
    stk__redact_url(url, small, sizeof small);
    FUZZ_CHECK(strncmp(small, full, sizeof small - 1) == 0);
    size_t m = stk__redact_url(full, NULL, 0);
    char *again = malloc(m + 1);
    FUZZ_CHECK(again != NULL);
    stk__redact_url(full, again, m + 1);
    FUZZ_CHECK(strcmp(again, full) == 0);
    if (strncmp(url, "pipe:", 5) == 0) {
        char **before = NULL, **after = NULL;
        size_t nb = 0, na = 0;
        struct stk__err err;
        int rb = stk__split_command(url + 5, &before, &nb, &err);
        int ra = stk__split_command(full + 5, &after, &na, &err);
        FUZZ_CHECK(rb != 0 || (ra == 0 && na == nb) || ra == STK_ENOMEM);
        stk__free(before);
        stk__free(after);
    }
    free(again);
    free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n = size < FUZZ_URLS_MAX_INPUT ? size : FUZZ_URLS_MAX_INPUT;
    char *pattern = malloc(n + 1);
    FUZZ_CHECK(pattern != NULL);
    memcpy(pattern, data, n);
    pattern[n] = '\0';
    struct shape sh;
    describe(pattern, &sh);

    struct stk__strlist out = {0};
    FUZZ_CHECK(stk__strlist_push(&out, sentinel, strlen(sentinel)) == 0);
    struct stk__err err;
    stk__err_clear(&err);

    stk__alloc_fail_after(FUZZ_URLS_MAX_ALLOCS);
    int rc = stk__brace_expand(pattern, &out, &err);
    unsigned long allocs = stk__alloc_fail_after(0);

    FUZZ_CHECK(out.count >= 1 && strcmp(out.items[0], sentinel) == 0);
    FUZZ_CHECK(out.count - 1 <= STK__MAX_SHARDS);
    size_t bytes = 0;
    for (size_t i = 1; i < out.count; i++) {
        check_result(pattern, &sh, out.items[i]);
        bytes += strlen(out.items[i]) + 1;
    }
    FUZZ_CHECK(bytes <= STK__MAX_URL_BYTES);
    check_simple_range(pattern, &sh, &out, 1, rc);
    if (rc == 0) {
        FUZZ_CHECK(err.code == 0);
        FUZZ_CHECK(out.count >= 2);
        FUZZ_CHECK(sh.balanced);
        if (!sh.has_open && !sh.has_close)
            FUZZ_CHECK(out.count == 2 && strcmp(out.items[1], pattern) == 0);
        check_simple_list(pattern, &sh, &out, 1, rc);
    } else {
        FUZZ_CHECK(rc < 0 && err.code == rc);
        size_t len = strnlen(err.msg, sizeof err.msg);
        FUZZ_CHECK(len > 0 && len < sizeof err.msg);
        FUZZ_CHECK(rc == STK_EINVAL || rc == STK_ELIMIT || rc == STK_ENOMEM);
        if (rc == STK_ENOMEM)
            FUZZ_CHECK(allocs >= FUZZ_URLS_MAX_ALLOCS);
        if (!sh.has_open && !sh.has_close)
            FUZZ_CHECK(pattern[0] == '\0'); /* only the empty URL fails */
    }
    stk__strlist_free(&out);
    FUZZ_CHECK(out.items == NULL && out.count == 0);
    check_redaction(pattern);
    free(pattern);
    return 0;
}
