/*
 * error.c - error codes to text, and per-handle detailed messages.
 */
#include "error.h"

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
