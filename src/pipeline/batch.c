/* SPDX-License-Identifier: MIT */
/*
 * batch.c - batch allocation, release and the batch budget.
 *
 * DESIGN: budget->mutex guards in_use; budget->cond wakes the pipeline's
 * sequencer when a batch is freed or the pipeline is stopping.
 * held_by_caller is an atomic read without the mutex by stk_loader_next()
 * to detect a caller that holds every batch (STK_EBUSY). ring->mutex guards
 * the ring's lists and counts; it is never held while calling the caller's
 * allocator (see ring_get) and never together with the budget's mutex.
 */
#include "pipeline/batch.h"

#include <string.h>

#include "base/alloc.h"
#include "base/threads.h"

void stk__budget_init(struct stk__batch_budget *b, size_t limit)
{
    stk__mutex_init(&b->mutex);
    stk__cond_init(&b->cond);
    b->limit = limit;
    b->in_use = 0;
    atomic_init(&b->held_by_caller, 0);
}

void stk__budget_destroy(struct stk__batch_budget *b)
{
    stk__cond_destroy(&b->cond);
    stk__mutex_destroy(&b->mutex);
}

int stk__budget_acquire(struct stk__batch_budget *b, const atomic_int *stop)
{
    int stopped = 0;
    stk__mutex_lock(&b->mutex);
    while (b->in_use >= b->limit && !(stopped = atomic_load(stop)))
        stk__cond_wait(&b->cond, &b->mutex);
    if (!stopped)
        b->in_use++;
    stk__mutex_unlock(&b->mutex);
    return stopped;
}

int stk__budget_try_acquire(struct stk__batch_budget *b)
{
    stk__mutex_lock(&b->mutex);
    const int full = b->in_use >= b->limit;
    if (!full)
        b->in_use++;
    stk__mutex_unlock(&b->mutex);
    return full;
}

void stk__budget_wake(struct stk__batch_budget *b)
{
    stk__mutex_lock(&b->mutex);
    stk__cond_broadcast(&b->cond);
    stk__mutex_unlock(&b->mutex);
}

static void budget_release(struct stk__batch_budget *b)
{
    stk__mutex_lock(&b->mutex);
    b->in_use--;
    stk__cond_signal(&b->cond);
    stk__mutex_unlock(&b->mutex);
}

int stk__image_ring_init(struct stk__image_ring *r, size_t limit, size_t batch_size,
                         size_t image_bytes, void *(*alloc)(void *, size_t),
                         void (*release)(void *, void *, size_t), void *alloc_data)
{
    memset(r, 0, sizeof *r);
    stk__mutex_init(&r->mutex);
    r->limit = limit;
    r->image_bytes = image_bytes;
    r->labels_offset = (batch_size * image_bytes + 63) / 64 * 64;
    r->buffer_bytes = r->labels_offset + batch_size * sizeof(int64_t);
    r->alloc = alloc;
    r->release = release;
    r->alloc_data = alloc_data;
    r->idle = stk__calloc(limit, sizeof *r->idle);
    r->all = stk__calloc(limit, sizeof *r->all);
    return r->idle != NULL && r->all != NULL ? 0 : STK_ENOMEM;
}

void stk__image_ring_destroy(struct stk__image_ring *r)
{
    for (size_t i = 0; i < r->n_all; i++) {
        if (r->release != NULL)
            r->release(r->alloc_data, r->all[i], r->buffer_bytes);
        else
            stk__free(r->all[i]);
    }
    stk__free(r->idle);
    stk__free(r->all);
    stk__mutex_destroy(&r->mutex);
}

/* An idle buffer, or a new one while fewer than limit exist. The caller's
 * allocator is called without r->mutex: it may block on a lock of its own
 * (the Python binding takes the GIL) that a thread releasing a batch into
 * this ring holds while it waits for r->mutex. */
static void *ring_get(struct stk__image_ring *r)
{
    void *buf = NULL;
    int grow = 0;
    stk__mutex_lock(&r->mutex);
    if (r->n_idle > 0) {
        buf = r->idle[--r->n_idle];
    } else if (r->n_all + r->n_growing < r->limit) {
        r->n_growing++;
        grow = 1;
    }
    stk__mutex_unlock(&r->mutex);
    if (!grow)
        return buf;
    buf = r->alloc != NULL ? r->alloc(r->alloc_data, r->buffer_bytes) : stk__malloc(r->buffer_bytes);
    stk__mutex_lock(&r->mutex);
    r->n_growing--;
    if (buf != NULL)
        r->all[r->n_all++] = buf;
    stk__mutex_unlock(&r->mutex);
    return buf;
}

static void ring_put(struct stk__image_ring *r, void *buf)
{
    stk__mutex_lock(&r->mutex);
    r->idle[r->n_idle++] = buf;
    stk__mutex_unlock(&r->mutex);
}

struct stk__batch *stk__batch_new(size_t capacity, uint64_t index, struct stk__batch_budget *budget,
                                  struct stk__image_ring *ring)
{
    struct stk__batch *b = stk__calloc(1, sizeof *b);
    if (b == NULL) {
        budget_release(budget);
        return NULL;
    }
    b->pubs = stk__calloc(capacity, sizeof *b->pubs);
    b->samples = stk__calloc(capacity, sizeof *b->samples);
    b->keys = stk__calloc(capacity, sizeof *b->keys);
    if (ring != NULL) {
        b->ring = ring;
        b->buffer = ring_get(ring);
        b->failed = stk__calloc(capacity, 1);
    }
    if (b->pubs == NULL || b->samples == NULL || b->keys == NULL ||
        (ring != NULL && (b->buffer == NULL || b->failed == NULL))) {
        if (b->buffer != NULL)
            ring_put(ring, b->buffer);
        stk__free(b->failed);
        stk__free(b->pubs);
        stk__free(b->samples);
        stk__free(b->keys);
        stk__free(b);
        budget_release(budget);
        return NULL;
    }
    atomic_init(&b->pending, 1);
    if (ring != NULL) {
        b->pub.images = b->buffer;
        b->pub.image_bytes = ring->image_bytes;
        b->pub.labels = (const int64_t *)((char *)b->buffer + ring->labels_offset);
    }
    b->pub.mix_weight = 1.0;
    b->capacity = capacity;
    b->budget = budget;
    b->pub.index = index;
    b->pub.samples = b->pubs;
    b->pub.sample_keys = b->keys;
    return b;
}

void stk__batch_add(struct stk__batch *b, struct stk__sample *s, uint64_t key)
{
    b->keys[b->pub.n_samples] = key;
    b->pubs[b->pub.n_samples] = s->pub;
    b->samples[b->pub.n_samples++] = s;
    b->pub.samples_skipped += s->bad_samples;
    b->pub.shards_failed += s->bad_shards;
}

void stk__batch_free(struct stk__batch *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->pub.n_samples; i++)
        stk__sample_free(b->samples[i]);
    stk__free(b->pubs);
    stk__free(b->samples);
    stk__free(b->keys);
    if (b->buffer != NULL)
        ring_put(b->ring, b->buffer);
    stk__free(b->failed);
    stk__free(b->mix_labels);
    struct stk__batch_budget *budget = b->budget;
    stk__free(b);
    budget_release(budget);
}
