/* SPDX-License-Identifier: MIT */
/*
 * keyset.h - the set of sample keys already seen in one shard.
 *
 * WebDataset requires a sample's members to be adjacent; a key that comes
 * back later means the shard was written unordered, and merging or
 * splitting such samples silently corrupts training data. The set keeps a
 * 128-bit SipHash tag of each key under a random per-set key, not the key:
 * 16 bytes a key whatever its length (a shard of 200,000 keys of 4,000
 * bytes held 800 MB as strings), and a false "reappears" report needs a
 * tag collision, which no input can be made to cause (2^-128 per pair of
 * keys). The tag also places keys in the table, so hostile keys cannot
 * pile up in one run of slots either.
 *
 * Memory: a table of 16-byte slots, a power of two at most 3/4 full: 21
 * to 43 bytes per key, and the old table too while it doubles. Callers
 * bound the number of keys (stk_options.max_samples_per_shard).
 */
#ifndef STK_KEYSET_H
#define STK_KEYSET_H

#include <stddef.h>
#include <stdint.h>

struct stk__key_tag {
    uint64_t lo, hi; /* {0, 0} marks an empty slot */
};

struct stk__keyset {
    struct stk__key_tag *slots;
    size_t capacity; /* power of two */
    size_t count;
    uint64_t secret[2]; /* drawn when the table is first allocated */
};

/* key[0..len): 1 if present, 0 if added, STK_ENOMEM. */
int stk__keyset_add(struct stk__keyset *set, const char *key, size_t len);
void stk__keyset_clear(struct stk__keyset *set);

#endif
