/* SPDX-License-Identifier: MIT */
/*
 * command.c - scan the words of a pipe: command.
 */
#include "io/command.h"

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int stk__command_word(const char *p, const char **start, const char **end, char *out,
                      size_t *len, char *quote)
{
    size_t n = 0;
    while (is_blank(*p))
        p++;
    *start = p;
    *end = p;
    *len = 0;
    if (*p == '\0')
        return 0;
    while (*p != '\0' && !is_blank(*p)) {
        if (*p != '\'' && *p != '"') {
            if (*p == '\\' && p[1] != '\0')
                p++;
            out[n++] = *p++;
            continue;
        }
        char q = *p++;
        while (*p != '\0' && *p != q) {
            if (q == '"' && *p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            out[n++] = *p++;
        }
        if (*p == '\0') {
            *quote = q;
            *end = p;
            *len = n;
            return -1;
        }
        p++;
    }
    *end = p;
    *len = n;
    return 1;
}
