/* SPDX-License-Identifier: MIT */
/*
 * strlist.h - a growable list of owned strings: shard URLs and their
 * redacted names, which every layer from the listing up passes around.
 */
#ifndef STK_STRLIST_H
#define STK_STRLIST_H

#include <stddef.h>

struct stk__strlist {
    char **items;
    size_t count;
    size_t capacity;
};

void stk__strlist_free(struct stk__strlist *list);
/* Append a copy of s (n bytes). 0 or STK_ENOMEM. */
int stk__strlist_push(struct stk__strlist *list, const char *s, size_t n);

#endif
