/* SPDX-License-Identifier: MIT */
/*
 * strlist.c - a growable list of owned strings (see strlist.h).
 */
#include "base/strlist.h"

#include "base/alloc.h"
#include "stoker.h"

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
