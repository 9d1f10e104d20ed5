/*
 * keyset.c - open-addressing string set (linear probing, FNV-1a).
 */
#include "keyset.h"

#include <string.h>

#include "alloc.h"
#include "stoker.h"

static uint64_t fnv1a(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static char **find_slot(char **slots, size_t capacity, const char *key)
{
    size_t i = (size_t)fnv1a(key) & (capacity - 1);
    while (slots[i] != NULL && strcmp(slots[i], key) != 0)
        i = (i + 1) & (capacity - 1);
    return &slots[i];
}

static int grow(struct stk__keyset *set)
{
    size_t cap = set->capacity ? set->capacity * 2 : 256;
    char **slots = stk__calloc(cap, sizeof *slots);
    if (slots == NULL)
        return STK_ENOMEM;
    for (size_t i = 0; i < set->capacity; i++)
        if (set->slots[i] != NULL)
            *find_slot(slots, cap, set->slots[i]) = set->slots[i];
    stk__free(set->slots);
    set->slots = slots;
    set->capacity = cap;
    return 0;
}

int stk__keyset_add(struct stk__keyset *set, const char *key)
{
    if ((set->count + 1) * 4 > set->capacity * 3) {
        int rc = grow(set);
        if (rc < 0)
            return rc;
    }
    char **slot = find_slot(set->slots, set->capacity, key);
    if (*slot != NULL)
        return 1;
    *slot = stk__strdup(key);
    if (*slot == NULL)
        return STK_ENOMEM;
    set->count++;
    return 0;
}

void stk__keyset_clear(struct stk__keyset *set)
{
    for (size_t i = 0; i < set->capacity; i++)
        stk__free(set->slots[i]);
    stk__free(set->slots);
    set->slots = NULL;
    set->capacity = set->count = 0;
}
