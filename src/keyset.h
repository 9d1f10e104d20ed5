/*
 * keyset.h - the set of sample keys already seen in one shard.
 *
 * WebDataset requires a sample's members to be adjacent; a key that comes
 * back later means the shard was written unordered, and merging or
 * splitting such samples silently corrupts training data. Full keys are
 * stored (not hashes) so a report is never a false positive.
 */
#ifndef STK_KEYSET_H
#define STK_KEYSET_H

#include <stddef.h>
#include <stdint.h>

struct stk__keyset {
    char **slots;
    size_t capacity; /* power of two */
    size_t count;
};

/* 1 if present, 0 if added, STK_ENOMEM. */
int stk__keyset_add(struct stk__keyset *set, const char *key);
void stk__keyset_clear(struct stk__keyset *set);

#endif
