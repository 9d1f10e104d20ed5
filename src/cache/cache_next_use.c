/* SPDX-License-Identifier: MIT */
/*
 * cache_next_use.c - what the node cache knows of the node's coming reads,
 * for eviction by next use (Belady's rule, cache_dir.c).
 *
 * LRU keeps what was read last; a node that reads its shards in a new
 * order every epoch with a cache smaller than them then re-downloads
 * nearly all of them each epoch (an LRU cache below the working set is a
 * FIFO). The plan knows the coming order, so the shard to drop is the one
 * needed farthest ahead. Each process of the node holds the same uses and
 * its own clock; the directory-wide lock orders their evictions as before.
 */
#include "cache/cache_impl.h"

#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/threads.h"

static int next_order(const void *a, const void *b)
{
    const struct stk__cache_next *x = a, *y = b;
    int c = strcmp(x->hex, y->hex);
    if (c != 0)
        return c;
    return x->when < y->when ? -1 : x->when > y->when;
}

void stk__cache_uses_replace(struct stk__cache *c, struct stk__cache_next *next, size_t n)
{
    if (n > 0)
        qsort(next, n, sizeof *next, next_order);
    stk__mutex_lock(&c->uses_mutex);
    struct stk__cache_next *old = c->uses;
    c->uses = next;
    c->n_uses = n;
    stk__mutex_unlock(&c->uses_mutex);
    stk__free(old);
}

void stk__cache_advance(struct stk__cache *c, uint64_t now)
{
    uint_fast64_t was = atomic_load(&c->now);
    while (was < now && !atomic_compare_exchange_weak(&c->now, &was, now))
        ;
}

uint64_t stk__cache_next_use(struct stk__cache *c, const char *hex)
{
    const uint64_t now = atomic_load(&c->now);
    uint64_t next = UINT64_MAX;
    stk__mutex_lock(&c->uses_mutex);
    /* The first entry of hex: a lower bound by binary search. */
    size_t lo = 0, hi = c->n_uses;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (strcmp(c->uses[mid].hex, hex) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (size_t i = lo; i < c->n_uses && strcmp(c->uses[i].hex, hex) == 0; i++) {
        if (c->uses[i].when > now) {
            next = c->uses[i].when;
            break;
        }
    }
    stk__mutex_unlock(&c->uses_mutex);
    return next;
}

void stk__cache_uses_free(struct stk__cache *c)
{
    stk__mutex_destroy(&c->uses_mutex);
    stk__free(c->uses);
}
