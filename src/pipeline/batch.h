/* SPDX-License-Identifier: MIT */
/*
 * batch.h - batches handed to the caller, and the budget that bounds them.
 *
 * The budget lives as long as the loader (batches may be released after
 * the epoch that made them was stopped); it caps how many batches exist at
 * once, queued or held by the caller, so memory does not grow when the
 * caller is slow.
 */
#ifndef STK_BATCH_H
#define STK_BATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "base/error.h"
#include "tar/sample.h"
#include "stoker.h"

struct stk__batch_budget {
    pthread_mutex_t mutex;
    pthread_cond_t cond;       /* signalled when a batch is released */
    size_t limit;
    size_t in_use;             /* guarded by mutex */
    atomic_size_t held_by_caller;
};

/*
 * Image batches: one buffer per batch holding batch_size images followed by
 * batch_size int64 labels. Buffers are allocated once (by the loader or the
 * caller's allocator) and recycled; the batch budget bounds how many exist.
 */
struct stk__image_ring {
    pthread_mutex_t mutex;
    void **idle;
    size_t n_idle;
    void **all;          /* every buffer made, for destroy */
    size_t n_all;
    size_t n_growing;    /* buffers being allocated (outside the mutex) */
    size_t limit;
    size_t image_bytes;  /* one image */
    size_t labels_offset;
    size_t buffer_bytes;
    void *(*alloc)(void *data, size_t bytes);
    void (*release)(void *data, void *memory, size_t bytes);
    void *alloc_data;
};

struct stk__batch {
    struct stk_batch pub;
    struct stk_sample *pubs;          /* pub.samples points here */
    struct stk__sample **samples;     /* owned */
    size_t capacity;
    uint64_t *keys;                   /* pub.sample_keys points here */
    struct stk__batch_budget *budget;
    struct stk__batch *next;          /* queue link */
    /* Image batches only. */
    struct stk__image_ring *ring;
    void *buffer;
    atomic_size_t pending;            /* slots not transformed yet, +1 until sealed */
    unsigned char *failed;            /* per slot: the transform failed */
    struct stk__err error;            /* failure of the lowest failed slot (code 0: none) */
    size_t error_slot;
    int not_bad_input;                /* a slot failed for other than bad input (no memory) */
    int64_t *mix_labels;              /* Mixup/CutMix partners (pub.mix_labels), or NULL */
};

void stk__budget_init(struct stk__batch_budget *b, size_t limit);
void stk__budget_destroy(struct stk__batch_budget *b);

/* Wait for room for one more batch; returns 0, or 1 if *stop became true
 * (checked whenever the budget's condition is signalled). */
int stk__budget_acquire(struct stk__batch_budget *b, const atomic_int *stop);
/* Room for one more batch now: 0 taken, 1 none (nothing waited for). */
int stk__budget_try_acquire(struct stk__batch_budget *b);
/* Wake waiters so they re-check their stop flag. */
void stk__budget_wake(struct stk__batch_budget *b);

int stk__image_ring_init(struct stk__image_ring *r, size_t limit, size_t batch_size,
                         size_t image_bytes, void *(*alloc)(void *, size_t),
                         void (*release)(void *, void *, size_t), void *alloc_data);
void stk__image_ring_destroy(struct stk__image_ring *r);

/* A batch for up to capacity samples, charged to budget (already acquired;
 * given back when this fails). With a ring, the batch gets an image buffer. */
struct stk__batch *stk__batch_new(size_t capacity, uint64_t index, struct stk__batch_budget *budget,
                                  struct stk__image_ring *ring);
/* Append s, whose random stream has key `key` (stk__draws_key). */
void stk__batch_add(struct stk__batch *b, struct stk__sample *s, uint64_t key);
/* Free the batch and give its budget back. */
void stk__batch_free(struct stk__batch *b);

#endif
