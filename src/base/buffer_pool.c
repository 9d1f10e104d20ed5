/* SPDX-License-Identifier: MIT */
/*
 * buffer_pool.c - size-class free lists for member buffers.
 *
 * DESIGN: one mutex guards every list and the idle byte count; it is held
 * only to push or pop a list head. Each idle buffer stores the list link in
 * its own first bytes, so the pool allocates nothing itself. Classes cover
 * 4 KiB .. 256 MiB; larger (or rejected) buffers go straight to the
 * allocator.
 */
#include "base/buffer_pool.h"

#include <pthread.h>

#include "base/alloc.h"
#include "base/threads.h"

#define MIN_SHIFT 12 /* 4 KiB */
#define MAX_SHIFT 28 /* 256 MiB */
#define STEPS 4      /* classes per power of two */
#define N_CLASSES ((MAX_SHIFT - MIN_SHIFT) * STEPS + 1)

struct idle {
    struct idle *next;
};

struct stk__buffer_pool {
    pthread_mutex_t mutex;
    struct idle *lists[N_CLASSES];
    size_t idle_bytes;
    size_t cap_bytes;
};

/* The class of a size and that class's buffer size; -1 if above the top. */
static int size_class(size_t size, size_t *class_size)
{
    if (size <= ((size_t)1 << MIN_SHIFT)) {
        *class_size = (size_t)1 << MIN_SHIFT;
        return 0;
    }
    if (size > ((size_t)1 << MAX_SHIFT))
        return -1;
    int shift = 63 - __builtin_clzll((unsigned long long)(size - 1)); /* size in (2^shift, 2^(shift+1)] */
    size_t base = (size_t)1 << shift;
    size_t step = base / STEPS;
    size_t k = (size - base + step - 1) / step; /* 1..STEPS */
    *class_size = base + k * step;
    return (shift - MIN_SHIFT) * STEPS + (int)k;
}

struct stk__buffer_pool *stk__buffer_pool_new(size_t cap_bytes)
{
    struct stk__buffer_pool *pool = stk__calloc(1, sizeof *pool);
    if (pool == NULL)
        return NULL;
    stk__mutex_init(&pool->mutex);
    pool->cap_bytes = cap_bytes;
    return pool;
}

void stk__buffer_pool_free(struct stk__buffer_pool *pool)
{
    if (pool == NULL)
        return;
    for (int c = 0; c < N_CLASSES; c++) {
        while (pool->lists[c] != NULL) {
            struct idle *b = pool->lists[c];
            pool->lists[c] = b->next;
            stk__free(b);
        }
    }
    stk__mutex_destroy(&pool->mutex);
    stk__free(pool);
}

void *stk__buffer_pool_get(struct stk__buffer_pool *pool, size_t size)
{
    size_t class_size;
    int c = size_class(size, &class_size);
    if (pool == NULL || c < 0)
        return stk__malloc(size);
    stk__mutex_lock(&pool->mutex);
    struct idle *b = pool->lists[c];
    if (b != NULL) {
        pool->lists[c] = b->next;
        pool->idle_bytes -= class_size;
    }
    stk__mutex_unlock(&pool->mutex);
    return b != NULL ? (void *)b : stk__malloc(class_size);
}

void stk__buffer_pool_put(struct stk__buffer_pool *pool, void *buf, size_t size)
{
    if (buf == NULL)
        return;
    size_t class_size;
    int c = size_class(size, &class_size);
    if (pool == NULL || c < 0) {
        stk__free(buf);
        return;
    }
    stk__mutex_lock(&pool->mutex);
    int keep = pool->idle_bytes + class_size <= pool->cap_bytes;
    if (keep) {
        struct idle *b = buf;
        b->next = pool->lists[c];
        pool->lists[c] = b;
        pool->idle_bytes += class_size;
    }
    stk__mutex_unlock(&pool->mutex);
    if (!keep)
        stk__free(buf);
}
