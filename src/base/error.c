/*
 * error.c - error codes to text, and per-handle detailed messages.
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stoker.h"

const char *stk_strerror(int code)
{
    switch (code) {
    case STK_OK: return "success";
    case STK_ENOMEM: return "out of memory";
    case STK_EINVAL: return "invalid argument";
    case STK_ENOENT: return "no such shard or member";
    case STK_EIO: return "I/O error";
    case STK_EINTR: return "interrupted";
    case STK_EEXIST: return "output exists";
    case STK_EOF: return "end of epoch";
    case STK_EFORMAT: return "not a readable tar shard";
    case STK_ETRUNC: return "shard is truncated";
    case STK_ELIMIT: return "size or count above the configured limit";
    case STK_EDUPKEY: return "sample key reappears later in the shard";
    case STK_EPLAN: return "cannot split the shards as asked";
    case STK_EBUSY: return "caller holds every batch the loader may have";
    case STK_EINTERNAL: return "internal error in stoker";
    case STK_EDECODE: return "image cannot be decoded";
    case STK_ELABEL: return "sample has no usable label";
    case STK_ECACHE: return "node cache cannot hold or store the shard";
    case STK_EHTTP: return "HTTP request failed";
    case STK_EMEMBER: return "sample lacks a required member, or it does not parse";
    case STK_EINDEX: return "the dataset index is malformed or stale: run `stoker index` again";
    default: return "unknown error";
    }
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

/* The escaped form of the character at p into esc (at most 8 bytes); its
 * length, and in *used the bytes of p it stands for. */
static size_t escape_one(const unsigned char *p, char *esc, size_t *used)
{
    static const char hex[] = "0123456789abcdef";
    size_t len = 0;
    int c1 = p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f; /* UTF-8 of U+0080..U+009F */
    *used = 1 + (size_t)c1;
    if (*p == '\\' || *p == '\n' || *p == '\t' || *p == '\r') {
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
    char esc[8];
    size_t used, total = 0, n = 0;
    /* Does it fit? (Looking no further than size: names can be long.) */
    const unsigned char *p = (const unsigned char *)s;
    for (; *p != '\0' && total < size; p += used)
        total += escape_one(p, esc, &used);
    int fits = *p == '\0' && total < size;
    /* All of it, or as much as leaves room for "...". */
    size_t limit = fits ? size : size - 3;
    for (p = (const unsigned char *)s; *p != '\0'; p += used) {
        size_t len = escape_one(p, esc, &used);
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
