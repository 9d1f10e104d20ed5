/* SPDX-License-Identifier: MIT */
/*
 * members.c - required members (stk_options.require_members): which ones,
 * and whether each parses as its extension says.
 *
 * The checks are those of the Python binding's parsers (int(), strict
 * UTF-8, json.loads), made stricter where they differ, so a member that
 * passes here also parses there: an integer as strtoll reads it within
 * int64 (Python's int() accepts more), text as strict UTF-8, JSON as
 * described at json_valid().
 */
#include "pipeline/members.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int stk__member_rules_init(struct stk__member_rules *r, const char *spec, struct stk__err *err)
{
    memset(r, 0, sizeof *r);
    while (spec != NULL && *spec != '\0') {
        size_t n = strcspn(spec, ",");
        int optional = n > 0 && spec[n - 1] == '?';
        size_t len = n - (size_t)optional;
        if (len == 0 || len >= STK__MEMBER_EXT_MAX || spec[len - 1] == '?' ||
            r->n == STK__MAX_REQUIRED_MEMBERS || (spec[n] == ',' && spec[n + 1] == '\0'))
            return stk__errf(err, STK_EINVAL,
                             "require_members must be up to %d comma-separated extensions of 1 "
                             "to %d bytes, each optionally followed by '?'",
                             STK__MAX_REQUIRED_MEMBERS, STK__MEMBER_EXT_MAX - 1);
        memcpy(r->items[r->n].ext, spec, len);
        const char *ext = r->items[r->n].ext;
        if (ext[0] == ';' || ext[len - 1] == ';' || strstr(ext, ";;") != NULL)
            return stk__errf(err, STK_EINVAL,
                             "require_members: '%s' has an empty alternative (write e.g. "
                             "\"jpg;png\": either member)", ext);
        r->items[r->n].optional = optional;
        r->n++;
        spec += n + (spec[n] == ',');
    }
    return 0;
}

const char *const stk__image_exts[STK__N_IMAGE_EXTS] = {"jpg", "jpeg", "png"};

int stk_member_kind(const char *ext)
{
    static const struct {
        const char *name;
        enum stk_member_kind kind;
    } kinds[] = {
        {"cls", STK_MEMBER_INT},         {"cls2", STK_MEMBER_INT},  {"class", STK_MEMBER_INT},
        {"count", STK_MEMBER_INT},       {"index", STK_MEMBER_INT}, {"inx", STK_MEMBER_INT},
        {"id", STK_MEMBER_INT},          {"txt", STK_MEMBER_TEXT},  {"text", STK_MEMBER_TEXT},
        {"transcript", STK_MEMBER_TEXT}, {"json", STK_MEMBER_JSON}, {"jsn", STK_MEMBER_JSON},
    };
    const char *dot = strrchr(ext, '.');
    const char *last = dot != NULL ? dot + 1 : ext;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(last, kinds[i].name) == 0)
            return kinds[i].kind;
    for (size_t i = 0; i < STK__N_IMAGE_EXTS; i++)
        if (strcmp(last, stk__image_exts[i]) == 0)
            return STK_MEMBER_IMAGE;
    return STK_MEMBER_BYTES;
}

const struct stk_member *stk__sample_member(const struct stk__sample *s, const char *ext)
{
    for (size_t i = 0; i < s->pub.n_members; i++)
        if (strcmp(s->pub.members[i].ext, ext) == 0)
            return &s->pub.members[i];
    return NULL;
}

int stk__member_int(const struct stk_member *m, int64_t *value)
{
    const char *text = (const char *)m->data; /* NUL-terminated by the reader */
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text) /* no digits: blanks alone are no integer (they once read as 0) */
        return -1;
    while (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')
        end++;
    if (*end != '\0' || errno != 0 || strlen(text) != m->size)
        return -1;
    *value = v;
    return 0;
}

int stk__utf8_valid(const uint8_t *p, size_t size)
{
    size_t i = 0;
    while (i < size) {
        uint8_t c = p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        /* Well-formed sequences (Unicode table 3-7): the second byte's
         * range depends on the first, which rules out overlong forms,
         * surrogates and code points above U+10FFFF. */
        size_t len;
        uint8_t lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            len = 2;
        } else if (c >= 0xE0 && c <= 0xEF) {
            len = 3;
            lo = c == 0xE0 ? 0xA0 : 0x80;
            hi = c == 0xED ? 0x9F : 0xBF;
        } else if (c >= 0xF0 && c <= 0xF4) {
            len = 4;
            lo = c == 0xF0 ? 0x90 : 0x80;
            hi = c == 0xF4 ? 0x8F : 0xBF;
        } else {
            return 0;
        }
        if (size - i < len || p[i + 1] < lo || p[i + 1] > hi)
            return 0;
        for (size_t k = 2; k < len; k++)
            if (p[i + k] < 0x80 || p[i + k] > 0xBF)
                return 0;
        i += len;
    }
    return 1;
}

/*
 * JSON as Python's json.loads reads bytes: RFC 8259 plus NaN, Infinity
 * and -Infinity, which json.dumps writes for such floats (metadata written
 * from pandas rows holds them), an optional UTF-8 byte order mark, and
 * nothing after the document but JSON blanks. Stricter in what Python
 * would still read: strict UTF-8 (Python's decoder passes encoded
 * surrogates), no UTF-16/32 documents, at most JSON_MAX_DEPTH levels
 * (Python gives up near its recursion limit, about 1000), and integers of
 * at most JSON_MAX_INT_DIGITS digits (Python 3.11's int() limit). cJSON
 * refuses NaN and builds a tree; this reads in place with one bit of
 * stack per level and allocates nothing, whatever the member's size.
 */
#define JSON_MAX_DEPTH 512
#define JSON_MAX_INT_DIGITS 4300

static int is_blank(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(uint8_t c)
{
    return c >= '0' && c <= '9';
}

static const uint8_t *skip_blanks(const uint8_t *p, const uint8_t *end)
{
    while (p < end && is_blank(*p))
        p++;
    return p;
}

/* The end of the string starting at p (a '"'), or NULL. */
static const uint8_t *json_string(const uint8_t *p, const uint8_t *end)
{
    for (p++; p < end; p++) {
        if (*p == '"')
            return p + 1;
        if (*p < 0x20) /* control characters must be escaped */
            return NULL;
        if (*p != '\\')
            continue;
        if (++p == end)
            return NULL;
        switch (*p) {
        case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't': break;
        case 'u':
            for (int k = 0; k < 4; k++)
                if (++p == end || !((*p >= '0' && *p <= '9') || ((*p | 0x20) >= 'a' &&
                                                                   (*p | 0x20) <= 'f')))
                    return NULL;
            break;
        default: return NULL;
        }
    }
    return NULL;
}

/* The end of the number or constant starting at p, or NULL. */
static const uint8_t *json_scalar(const uint8_t *p, const uint8_t *end)
{
    static const char *const words[] = {"true", "false", "null", "NaN", "Infinity", "-Infinity"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        size_t n = strlen(words[i]);
        if ((size_t)(end - p) >= n && memcmp(p, words[i], n) == 0)
            return p + n;
    }
    if (p < end && *p == '-')
        p++;
    const uint8_t *digits = p;
    if (p < end && *p == '0')
        p++;
    else if (p < end && *p >= '1' && *p <= '9')
        while (p < end && is_digit(*p))
            p++;
    else
        return NULL;
    size_t n_digits = (size_t)(p - digits);
    int integer = 1;
    if (p < end && *p == '.') {
        if (++p == end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
        integer = 0;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        if (++p < end && (*p == '+' || *p == '-'))
            p++;
        if (p == end || !is_digit(*p))
            return NULL;
        while (p < end && is_digit(*p))
            p++;
        integer = 0;
    }
    return integer && n_digits > JSON_MAX_INT_DIGITS ? NULL : p;
}

static int json_valid(const uint8_t *p, size_t size)
{
    const uint8_t *end = p + size;
    if (!stk__utf8_valid(p, size))
        return 0;
    if (size >= 3 && memcmp(p, "\xEF\xBB\xBF", 3) == 0)
        p += 3;
    uint8_t objects[JSON_MAX_DEPTH / 8] = {0}; /* per open level: 1 object, 0 array */
    int depth = 0, want_key = 0;
    p = skip_blanks(p, end);
    for (;;) {
        if (want_key) { /* "key" : */
            p = p < end && *p == '"' ? json_string(p, end) : NULL;
            p = p != NULL ? skip_blanks(p, end) : NULL;
            if (p == NULL || p == end || *p != ':')
                return 0;
            p = skip_blanks(p + 1, end);
            want_key = 0;
        }
        /* A value. */
        if (p == end)
            return 0;
        if (*p == '{' || *p == '[') {
            int object = *p == '{';
            if (depth == JSON_MAX_DEPTH)
                return 0;
            objects[depth / 8] = (uint8_t)((objects[depth / 8] & ~(1u << (depth % 8))) |
                                           ((unsigned)object << (depth % 8)));
            depth++;
            p = skip_blanks(p + 1, end);
            if (p < end && *p == (object ? '}' : ']')) {
                depth--;
                p++;
            } else {
                want_key = object;
                continue;
            }
        } else {
            p = *p == '"' ? json_string(p, end) : json_scalar(p, end);
            if (p == NULL)
                return 0;
        }
        /* After a value: a separator or the ends of containers. */
        for (;;) {
            p = skip_blanks(p, end);
            if (depth == 0)
                return p == end;
            int object = (objects[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
            if (p < end && *p == ',') {
                p = skip_blanks(p + 1, end);
                want_key = object;
                break;
            }
            if (p == end || *p != (object ? '}' : ']'))
                return 0;
            depth--;
            p++;
        }
    }
}

/* The sample's member of the first of the ';'-separated extensions of
 * exts that it has (WebDataset's "jpg;png"), or NULL. */
static const struct stk_member *first_member(const struct stk__sample *s, const char *exts)
{
    char one[STK__MEMBER_EXT_MAX];
    while (*exts != '\0') {
        size_t len = strcspn(exts, ";");
        snprintf(one, sizeof one, "%.*s", (int)len, exts);
        const struct stk_member *m = stk__sample_member(s, one);
        if (m != NULL)
            return m;
        exts += len + (exts[len] == ';');
    }
    return NULL;
}

int stk__members_check(const struct stk__member_rules *r, const struct stk__sample *s,
                       struct stk__err *err)
{
    char shown[STK__SHOWN_MAX]; /* the key, for messages */
    for (int i = 0; i < r->n; i++) {
        const char *ext = r->items[i].ext;
        const struct stk_member *m = first_member(s, ext);
        if (m == NULL) {
            if (r->items[i].optional)
                continue;
            return stk__errf(err, STK_EMEMBER, "%s: sample '%s' has no %s member%s", s->pub.url,
                             stk__shown(shown, sizeof shown, s->pub.key), ext,
                             strchr(ext, ';') != NULL ? " (none of these)" : "");
        }
        const char *problem = NULL;
        int64_t v;
        switch (stk_member_kind(m->ext)) {
        case STK_MEMBER_INT:
            problem = stk__member_int(m, &v) < 0 ? "is not an integer" : NULL;
            break;
        case STK_MEMBER_TEXT:
            problem = stk__utf8_valid(m->data, m->size) ? NULL : "is not UTF-8";
            break;
        case STK_MEMBER_JSON:
            problem = json_valid(m->data, m->size) ? NULL : "is not valid JSON";
            break;
        case STK_MEMBER_IMAGE: /* decoded by the image stage, checked there */
        case STK_MEMBER_BYTES: break;
        }
        if (problem != NULL)
            return stk__errf(err, STK_EMEMBER, "%s: sample '%s': %s member %s", s->pub.url,
                             stk__shown(shown, sizeof shown, s->pub.key), ext, problem);
    }
    return 0;
}
