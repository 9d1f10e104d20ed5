/* SPDX-License-Identifier: MIT */
/*
 * keyset.c - open-addressing set of key tags (linear probing).
 */
#include "base/keyset.h"

#include "base/alloc.h"
#include "base/siphash.h"
#include "stoker.h"

static struct stk__key_tag *find_slot(struct stk__key_tag *slots, size_t capacity,
                                      struct stk__key_tag tag)
{
    size_t i = (size_t)tag.lo & (capacity - 1);
    while ((slots[i].lo | slots[i].hi) != 0 && (slots[i].lo != tag.lo || slots[i].hi != tag.hi))
        i = (i + 1) & (capacity - 1);
    return &slots[i];
}

static int grow(struct stk__keyset *set)
{
    size_t cap = set->capacity ? set->capacity * 2 : 256;
    struct stk__key_tag *slots = stk__calloc(cap, sizeof *slots);
    if (slots == NULL)
        return STK_ENOMEM;
    if (set->capacity == 0)
        stk__siphash_random_key(set->secret);
    for (size_t i = 0; i < set->capacity; i++)
        if ((set->slots[i].lo | set->slots[i].hi) != 0)
            *find_slot(slots, cap, set->slots[i]) = set->slots[i];
    stk__free(set->slots);
    set->slots = slots;
    set->capacity = cap;
    return 0;
}

int stk__keyset_add(struct stk__keyset *set, const char *key, size_t len)
{
    if ((set->count + 1) * 4 > set->capacity * 3) {
        int rc = grow(set);
        if (rc < 0)
            return rc;
    }
    uint64_t h[2];
    stk__siphash128(set->secret, key, len, h);
    struct stk__key_tag tag = {h[0], h[1] | (h[0] == 0 && h[1] == 0)};
    struct stk__key_tag *slot = find_slot(set->slots, set->capacity, tag);
    if ((slot->lo | slot->hi) != 0)
        return 1;
    *slot = tag;
    set->count++;
    return 0;
}

void stk__keyset_clear(struct stk__keyset *set)
{
    stk__free(set->slots);
    set->slots = NULL;
    set->capacity = set->count = 0;
}
