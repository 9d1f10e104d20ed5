/* SPDX-License-Identifier: MIT */
/*
 * options.c - options by name: defaults, text values and range checks, all
 * from the one table in options_table.h (as zstd's ZSTD_CCtx_setParameter
 * works from its parameter bounds), and the names of the stats fields.
 */
#include "options.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/error.h"
#include "base/stats_table.h"
#include "options_table.h"

/* How each table type is stored, and a compile-time check that the field
 * has that type. */
#define OK_BOOL(f) _Generic((f), int: 1, default: 0)
#define OK_INT(f) _Generic((f), int: 1, default: 0)
#define OK_UINT(f) _Generic((f), unsigned: 1, default: 0)
#define OK_SIZE(f) _Generic((f), size_t: 1, default: 0)
#define OK_U64(f) _Generic((f), uint64_t: 1, default: 0)
#define OK_FLOAT(f) _Generic((f), float: 1, default: 0)
#define OK_FLOAT3(f) _Generic(&(f), float(*)[3]: 1, default: 0)
#define OK_CHOICE(f) (sizeof(f) == sizeof(int)) /* an enum: stored as an int */
#define OK_STRING(f) _Generic((f), const char *: 1, default: 0)
#define PUB_BOOL STK_OPTION_BOOL
#define PUB_INT STK_OPTION_INTEGER
#define PUB_UINT STK_OPTION_INTEGER
#define PUB_SIZE STK_OPTION_INTEGER
#define PUB_U64 STK_OPTION_INTEGER
#define PUB_FLOAT STK_OPTION_FLOAT
#define PUB_FLOAT3 STK_OPTION_FLOAT3
#define PUB_CHOICE STK_OPTION_CHOICE
#define PUB_STRING STK_OPTION_STRING
#define SIGNED_BOOL 1
#define SIGNED_INT 1
#define SIGNED_CHOICE 1
#define SIGNED_UINT 0
#define SIGNED_SIZE 0
#define SIGNED_U64 0
#define SIGNED_FLOAT 0
#define SIGNED_FLOAT3 0
#define SIGNED_STRING 0

#define FIELD(name) (((struct stk_options *)0)->name)
#define CHECK_ROW(name, type, flags, def, min, max, cli, metavar, doc)                            \
    _Static_assert(OK_##type(FIELD(name)), "stk_options." #name " is not of type " #type);
STK__OPTIONS(CHECK_ROW)
#undef CHECK_ROW

struct option_row {
    struct stk_option_info pub;
    size_t offset, size;
    int is_signed;
};

#define ROW(name, type, flags, def, min, max, cli, metavar, doc)                                  \
    {{#name, PUB_##type, (flags), (def), (int64_t)(min), (uint64_t)(max), (cli), (metavar),      \
      (doc)},                                                                                     \
     offsetof(struct stk_options, name), sizeof FIELD(name), SIGNED_##type},
static const struct option_row rows[] = {STK__OPTIONS(ROW)};
#undef ROW
#define N_ROWS (sizeof rows / sizeof rows[0])

const struct stk_option_info *stk_option_at(size_t i)
{
    return i < N_ROWS ? &rows[i].pub : NULL;
}

static const struct option_row *find(const char *name)
{
    for (size_t i = 0; name != NULL && i < N_ROWS; i++)
        if (strcmp(rows[i].pub.name, name) == 0)
            return &rows[i];
    return NULL;
}

const struct stk_option_info *stk_option_find(const char *name)
{
    const struct option_row *r = find(name);
    return r != NULL ? &r->pub : NULL;
}

int stk_parse_count(const char *text, int bytes, uint64_t *out)
{
    /* strtoull would skip blanks and take a sign */
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return STK_EINVAL;
    char *end;
    errno = 0;
    uint64_t v = strtoull(text, &end, 10);
    if (errno != 0)
        return STK_EINVAL;
    unsigned shift = 0;
    if (bytes) {
        const char *units = "KMGT", *at = *end != '\0' ? strchr(units, *end & ~0x20) : NULL;
        if (at != NULL) {
            shift = 10 * (unsigned)(at - units + 1);
            end++;
            end += end[0] == 'i' ? (end[1] == 'B' ? 2 : 1) : end[0] == 'B';
        }
    }
    if (*end != '\0' || v > (UINT64_MAX >> shift))
        return STK_EINVAL;
    *out = v << shift;
    return 0;
}

/* Text to a 64-bit integer as the row stores it: decimal, with a binary
 * K/M/G/T suffix for unsigned byte counts (stk_parse_count()); no blanks.
 * 0, or -1 when it is no such number (or overflows). */
static int parse_int(const struct option_row *r, const char *text, int64_t *s, uint64_t *u)
{
    if (!r->is_signed)
        return stk_parse_count(text, (r->pub.flags & STK_OPTION_BYTES) != 0, u) < 0 ? -1 : 0;
    /* strtoll would skip blanks */
    if (!(isdigit((unsigned char)text[0]) || text[0] == '-'))
        return -1;
    char *end;
    errno = 0;
    *s = strtoll(text, &end, 10);
    return errno != 0 || end == text || *end != '\0' ? -1 : 0;
}

/* A float, or a fraction such as "3/4". Not nan or inf (strtod takes
 * both), nor what overflows a float: no option has a use for them, and a
 * nan passes every range check written as a comparison. */
static int parse_float(const char *text, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (end != text && *end == '/') {
        const char *den = end + 1;
        double d = strtod(den, &end);
        if (end == den || d == 0)
            return -1;
        v /= d;
    }
    if (text[0] == '\0' || *end != '\0' || errno != 0 || !isfinite((float)v))
        return -1;
    *out = (float)v;
    return 0;
}

static int in_range(const struct option_row *r, int64_t s, uint64_t u)
{
    if (r->is_signed)
        return s >= r->pub.min && (s < 0 || (uint64_t)s <= r->pub.max);
    return u >= (uint64_t)r->pub.min && u <= r->pub.max;
}

size_t stk_option_describe(const struct stk_option_info *o, char *buf, size_t size)
{
    /* o is the first member of its row (stk_option_at() hands out no other) */
    const struct option_row *r = (const struct option_row *)o;
    int n = 0;
    switch (o->type) {
    case STK_OPTION_BOOL: n = snprintf(buf, size, "0 or 1"); break;
    case STK_OPTION_FLOAT: n = snprintf(buf, size, "a finite number"); break;
    case STK_OPTION_FLOAT3: n = snprintf(buf, size, "3 finite numbers separated by commas"); break;
    case STK_OPTION_CHOICE: n = snprintf(buf, size, "one of %s", o->metavar); break;
    case STK_OPTION_STRING: n = snprintf(buf, size, "a string"); break;
    case STK_OPTION_INTEGER: {
        n = r->is_signed ? snprintf(buf, size, "between %lld and %llu", (long long)o->min,
                                        (unsigned long long)o->max)
                             : snprintf(buf, size, "between %llu and %llu",
                                        (unsigned long long)o->min, (unsigned long long)o->max);
        if (n > 0 && (size_t)n < size && (o->flags & STK_OPTION_BYTES))
            n += snprintf(buf + n, size - (size_t)n, " bytes (K, M, G, T: binary units)");
        int64_t s = 0;
        uint64_t u = 0;
        if (n > 0 && (size_t)n < size && o->default_value != NULL &&
            parse_int(r, o->default_value, &s, &u) == 0 && !in_range(r, s, u))
            n += snprintf(buf + n, size - (size_t)n, ", or %s (the default)", o->default_value);
        break;
    }
    }
    return n > 0 ? (size_t)n : 0;
}

/* Is (s, u) the row's default? It is accepted outside the range: -1 for
 * "auto", 0 for "none". */
static int is_default(const struct option_row *r, int64_t s, uint64_t u)
{
    int64_t ds = 0;
    uint64_t du = 0;
    if (r->pub.default_value == NULL || parse_int(r, r->pub.default_value, &ds, &du) < 0)
        return 0;
    return r->is_signed ? s == ds : u == du;
}

/* The field's value as (s, u): s for signed rows, u for unsigned ones. */
static void load_int(const struct option_row *r, const void *field, int64_t *s, uint64_t *u)
{
    if (r->size == 8) {
        memcpy(u, field, 8);
    } else if (r->is_signed) {
        int v;
        memcpy(&v, field, sizeof v);
        *s = v;
    } else {
        unsigned v;
        memcpy(&v, field, sizeof v);
        *u = v;
    }
}

static void store_int(const struct option_row *r, void *field, int64_t s, uint64_t u)
{
    if (r->size == 8) {
        memcpy(field, &u, 8);
    } else if (r->is_signed) {
        int v = (int)s;
        memcpy(field, &v, sizeof v);
    } else {
        unsigned v = (unsigned)u;
        memcpy(field, &v, sizeof v);
    }
}

static int set_row(struct stk_options *o, const struct option_row *r, const char *value,
                   struct stk__err *err)
{
    void *field = (char *)o + r->offset;
    const struct stk_option_info *info = &r->pub;
    char accepted[160];
    if (info->type == STK_OPTION_STRING) {
        memcpy(field, &value, sizeof value);
        return 0;
    }
    if (value == NULL)
        goto bad;
    switch (info->type) {
    case STK_OPTION_BOOL:
        if (strcmp(value, "0") != 0 && strcmp(value, "1") != 0)
            goto bad;
        store_int(r, field, value[0] - '0', 0);
        return 0;
    case STK_OPTION_INTEGER: {
        int64_t s = 0;
        uint64_t u = 0;
        if (parse_int(r, value, &s, &u) < 0 || !(in_range(r, s, u) || is_default(r, s, u)))
            goto bad;
        store_int(r, field, s, u);
        return 0;
    }
    case STK_OPTION_FLOAT:
        if (parse_float(value, field) < 0)
            goto bad;
        return 0;
    case STK_OPTION_FLOAT3: {
        float v[3];
        char part[64];
        const char *p = value;
        for (int i = 0; i < 3; i++) {
            size_t n = strcspn(p, ",");
            if (n >= sizeof part || (p[n] == ',') != (i < 2))
                goto bad;
            memcpy(part, p, n);
            part[n] = '\0';
            if (parse_float(part, &v[i]) < 0)
                goto bad;
            p += n + (i < 2);
        }
        memcpy(field, v, sizeof v);
        return 0;
    }
    case STK_OPTION_CHOICE: {
        size_t len = strlen(value);
        int index = 0;
        for (const char *p = info->metavar; *p != '\0'; index++) {
            size_t n = strcspn(p, ",");
            if (n == len && len > 0 && memcmp(p, value, n) == 0) {
                store_int(r, field, index, 0);
                return 0;
            }
            p += n + (p[n] == ',');
        }
        goto bad;
    }
    case STK_OPTION_STRING:
        break;
    }
bad:
    stk_option_describe(&r->pub, accepted, sizeof accepted);
    char shown[STK__SHOWN_MAX];
    return stk__errf(err, STK_EINVAL, "%s must be %s, not '%s'", info->name, accepted,
                     value != NULL ? stk__shown(shown, sizeof shown, value) : "(null)");
}

int stk__options_set(struct stk_options *o, const char *name, const char *value,
                     struct stk__err *err)
{
    const struct option_row *r = find(name);
    if (r == NULL) {
        char shown[STK__SHOWN_MAX];
        return stk__errf(err, STK_EINVAL, "unknown option '%s'",
                         name != NULL ? stk__shown(shown, sizeof shown, name) : "(null)");
    }
    /* A program built against an older stoker.h has a smaller struct. */
    if (r->offset + r->size > o->struct_size)
        return stk__errf(err, STK_EINVAL, "option %s is newer than these options (struct_size "
                         "%zu; set up by stk_options_init() of an older stoker.h?)",
                         r->pub.name, o->struct_size);
    return set_row(o, r, value, err);
}

int stk_options_set(struct stk_options *o, const char *name, const char *value, char *errbuf,
                    size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__options_set(o, name, value, &err);
    stk__copy_msg(errbuf, errbuf_size, rc < 0 ? err.msg : "");
    return rc;
}

void stk_options_init_sized(struct stk_options *o, size_t size)
{
    struct stk_options d;
    memset(&d, 0, sizeof d);
    struct stk__err err;
    for (size_t i = 0; i < N_ROWS; i++) {
        /* The table's defaults parse (a unit test sets each one): nothing
         * here can fail but a broken table, which must not pass quietly. */
        if (rows[i].pub.default_value != NULL &&
            set_row(&d, &rows[i], rows[i].pub.default_value, &err) < 0)
            abort();
    }
    d.struct_size = size;
    /* A caller built against an older header gets the fields it knows. */
    stk__struct_copy(o, size, &d, sizeof d);
}

const char **stk__option_string(struct stk_options *o, size_t i)
{
    for (size_t r = 0; r < N_ROWS; r++)
        if (rows[r].pub.type == STK_OPTION_STRING && i-- == 0)
            return (const char **)(void *)((char *)o + rows[r].offset);
    return NULL;
}

int stk__options_check(const struct stk_options *o, struct stk__err *err)
{
    for (size_t i = 0; i < N_ROWS; i++) {
        const struct option_row *r = &rows[i];
        const char *field = (const char *)o + r->offset;
        int64_t s = 0;
        uint64_t u = 0;
        if (r->pub.type == STK_OPTION_CHOICE) {
            int v;
            memcpy(&v, field, sizeof v);
            size_t n = 1;
            for (const char *p = r->pub.metavar; *p != '\0'; p++)
                n += *p == ',';
            if (v < 0 || (size_t)v >= n)
                return stk__errf(err, STK_EINVAL, "%s must be one of %s (0 to %zu), not %d",
                                 r->pub.name, r->pub.metavar, n - 1, v);
            continue;
        }
        /* A C caller sets fields without stk_options_set(): its floats are
         * checked as parse_float() checks text. */
        if (r->pub.type == STK_OPTION_FLOAT || r->pub.type == STK_OPTION_FLOAT3) {
            float v[3];
            size_t n = r->size / sizeof v[0];
            memcpy(v, field, r->size);
            for (size_t k = 0; k < n; k++)
                if (!isfinite(v[k]))
                    return stk__errf(err, STK_EINVAL, "%s must be %s, not %g", r->pub.name,
                                     n == 1 ? "a finite number" : "3 finite numbers",
                                     (double)v[k]);
            continue;
        }
        /* A C caller's bool is any int: nonzero is true. */
        if (r->pub.type != STK_OPTION_INTEGER)
            continue;
        load_int(r, field, &s, &u);
        if (!in_range(r, s, u) && !is_default(r, s, u)) {
            char accepted[160], value[32];
            stk_option_describe(&r->pub, accepted, sizeof accepted);
            if (r->is_signed)
                snprintf(value, sizeof value, "%lld", (long long)s);
            else
                snprintf(value, sizeof value, "%llu", (unsigned long long)u);
            return stk__errf(err, STK_EINVAL, "%s must be %s, not %s", r->pub.name, accepted,
                             value);
        }
    }
    return 0;
}

#define STATS_ROW(name, kind, doc) {#name, offsetof(struct stk_stats, name), doc, STK_STAT_##kind},
static const struct stk_stats_field stats_rows[] = {STK__STATS(STATS_ROW)};
#undef STATS_ROW
/* Every counter has a row: a field added to struct stk_stats without one
 * fails here, not as a key missing from stats(). */
_Static_assert(sizeof stats_rows / sizeof stats_rows[0] == sizeof(struct stk_stats) / 8,
               "struct stk_stats and STK__STATS in base/stats_table.h disagree");

const struct stk_stats_field *stk_stats_field_at(size_t i)
{
    return i < sizeof stats_rows / sizeof stats_rows[0] ? &stats_rows[i] : NULL;
}

void stk__options_apply_recipe(struct stk_options *o)
{
    if (o->recipe != STK_RECIPE_TORCHVISION_V2)
        return;
    /* pytorch/vision references/classification/README.md, the recipe of
     * the 2021 "How to train state-of-the-art models" weights */
    if (o->auto_augment == STK_AUTO_AUGMENT_NONE)
        o->auto_augment = STK_AUTO_AUGMENT_TA_WIDE;
    if (o->augment_interpolation == STK_INTERPOLATION_NEAREST)
        o->augment_interpolation = STK_INTERPOLATION_BILINEAR;
    if (o->random_erase == 0)
        o->random_erase = 0.1f;
    if (o->mixup_alpha == 0)
        o->mixup_alpha = 0.2f;
    if (o->cutmix_alpha == 0)
        o->cutmix_alpha = 1.0f;
    if (o->eval_resize == 0)
        o->eval_resize = 232;
}
