/* SPDX-License-Identifier: MIT */
/*
 * error.c - error codes to text and kind (from errors_table.h), and per-handle
 * detailed messages.
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/errors_table.h"
#include "stoker.h"

enum error_kind { KIND_NONE, KIND_INPUT, KIND_CONFIG, KIND_SYSTEM };

struct error_row {
    enum error_kind kind;
    const char *text;
};

#define ROW(name, kind, python_class, text) {KIND_##kind, (text)},
static const struct error_row rows[] = {STK__ERRORS(ROW)};
#undef ROW
#define INDEX(name, kind, python_class, text) ROW_##name,
enum { STK__ERRORS(INDEX) N_ROWS };
#undef INDEX

/* The row of code, NULL for none. A switch over the enum with no default:
 * -Wswitch (an error under werror) names a code of stoker.h without a row,
 * and a row naming a code that stoker.h lacks does not compile. */
static const struct error_row *row_of(int code)
{
#define CASE(name, kind, python_class, text)                                                      \
    case STK_##name: return &rows[ROW_##name];
    switch ((enum stk_error)code) {
        STK__ERRORS(CASE)
    }
#undef CASE
    return NULL;
}

const char *stk_strerror(int code)
{
    const struct error_row *r = row_of(code);
    return r != NULL ? r->text : "unknown error";
}

int stk__error_is_bad_input(int code)
{
    const struct error_row *r = row_of(code);
    return r != NULL && r->kind == KIND_INPUT;
}

const char *stk_version(void)
{
    return STK_VERSION_STRING;
}

int stk__errf(struct stk__err *err, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    err->code = code;
    return code;
}

void stk__err_clear(struct stk__err *err)
{
    err->code = 0;
    err->msg[0] = '\0';
}

void stk__copy_msg(char *dst, size_t dst_size, const char *msg)
{
    if (dst == NULL || dst_size == 0)
        return;
    snprintf(dst, dst_size, "%s", msg);
}

size_t stk_escape_char(const char *s, int backslash, char esc[STK_ESCAPED_MAX], size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)s;
    size_t len = 0;
    int c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f; /* UTF-8 of U+0080..U+009F */
    *used = 1 + (size_t)c1;
    if ((*p == '\\' && backslash) || *p == '\n' || *p == '\t' || *p == '\r') {
        esc[len++] = '\\';
        esc[len++] = *p == '\\' ? '\\' : *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
    } else if (*p < 0x20 || *p == 0x7f || c1) {
        for (size_t i = 0; i < *used; i++) {
            esc[len++] = '\\';
            esc[len++] = 'x';
            esc[len++] = hex[p[i] >> 4];
            esc[len++] = hex[p[i] & 15];
        }
    } else {
        esc[len++] = (char)*p;
    }
    return len;
}

const char *stk__shown(char *buf, size_t size, const char *s)
{
    char esc[STK_ESCAPED_MAX];
    size_t used, total = 0, n = 0;
    /* Does it fit? (Looking no further than size: names can be long.) */
    const unsigned char *p = (const unsigned char *)s;
    for (; *p != '\0' && total < size; p += used)
        total += stk_escape_char((const char *)p, 1, esc, &used);
    int fits = *p == '\0' && total < size;
    /* All of it, or as much as leaves room for "...". */
    size_t limit = fits ? size : size - 3;
    for (p = (const unsigned char *)s; *p != '\0'; p += used) {
        size_t len = stk_escape_char((const char *)p, 1, esc, &used);
        if (n + len >= limit)
            break;
        memcpy(buf + n, esc, len);
        n += len;
    }
    if (!fits) {
        memcpy(buf + n, "...", 3);
        n += 3;
    }
    buf[n] = '\0';
    return buf;
}

void stk__err_ensure(struct stk__err *err, int code)
{
    if (code < 0 && err->msg[0] == '\0')
        stk__errf(err, code, "%s", stk_strerror(code));
}
