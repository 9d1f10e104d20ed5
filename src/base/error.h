/* SPDX-License-Identifier: MIT */
/*
 * error.h - detailed error messages.
 *
 * Codes say what kind of failure happened; the message says where (URL,
 * key, byte offset). A struct stk__err travels with each handle that can
 * fail and holds the message of its latest failure: each stk__errf()
 * replaces the last, so a caller that must keep the first failure (the
 * lowest failed slot of a batch, image_workers.c) checks
 * err->code before recording another.
 */
#ifndef STK_ERROR_H
#define STK_ERROR_H

#include <stddef.h>

#define STK__ERRMSG_MAX 1024

struct stk__err {
    int code;
    char msg[STK__ERRMSG_MAX];
};

/* Record code and a printf-style message; returns code so callers can write
 * `return stk__errf(err, STK_EFORMAT, "...")`. */
int stk__errf(struct stk__err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

void stk__err_clear(struct stk__err *err);

/* Whether code is bad input (a shard, sample, image or label, or a shard
 * that cannot be reached: kind INPUT in errors_table.h), which
 * on_error=skip skips and counts. Out of memory, configuration (a cache
 * that cannot take a shard, a stale index, options) and bugs are not:
 * skipping them would drop good shards. The one place that decides. */
int stk__error_is_bad_input(int code);

/* At the exit of a public call that returns code: a failure (code < 0)
 * whose path left no message gets the code's text, so that every failing
 * call of the API has one and callers print it without a fallback. */
void stk__err_ensure(struct stk__err *err, int code);

/* Copy a message into a caller buffer (NULL or size 0 allowed). */
void stk__copy_msg(char *dst, size_t dst_size, const char *msg);

/* Keys and member names come from shards: a message quotes them through
 * stk__shown(), which escapes each character as stk_escape_char() does
 * with backslash (stoker.h: backslash as \\, newline, tab and CR as \n \t
 * \r, other control characters, C1 included, as \xHH), so a name can
 * neither break a message into several lines nor drive a terminal, and
 * cuts the result with "..." to fit buf (size >= 4). Returns buf, for use
 * as a printf argument. */
#define STK__SHOWN_MAX 256
const char *stk__shown(char *buf, size_t size, const char *s);

#endif
