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
 *
 * A process's clock runs ahead of the node's slower ranks, so a use of the
 * current epoch at or before it may still be to come. The shard's mtime
 * (stamped at every open, cache.c) says whether some process of the node
 * read it since this handle's clock entered the epoch: if so its next use
 * is in a later epoch, else its use in this epoch still stands, however
 * far behind the clock.
 */
#include "cache/cache_impl.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

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
    /* The first time the clock is in a later epoch (or in any, at first):
     * note when, in mtime's clock. */
    const uint64_t epoch = now >> 32;
    uint_fast64_t in = atomic_load(&c->clock_epoch);
    while ((in == UINT64_MAX || in < epoch) &&
           !atomic_compare_exchange_weak(&c->clock_epoch, &in, epoch))
        ;
    if (in == UINT64_MAX || in < epoch) {
        /* The coarse clock is the one the kernel stamps mtimes with: a file
         * touched after this call is never stamped before it. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME_COARSE, &ts);
        atomic_store(&c->epoch_start_ns, (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec);
    }
}

uint64_t stk__cache_next_use(struct stk__cache *c, const char *hex, const struct timespec *used)
{
    const uint64_t now = atomic_load(&c->now);
    const uint64_t used_ns = (uint64_t)used->tv_sec * 1000000000u + (uint64_t)used->tv_nsec;
    const int read_this_epoch = used_ns >= atomic_load(&c->epoch_start_ns);
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
        const uint64_t when = c->uses[i].when;
        const int this_epoch = when >> 32 == now >> 32;
        if (this_epoch ? !read_this_epoch : when > now) {
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
