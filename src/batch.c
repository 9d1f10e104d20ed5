/*
 * batch.c - batch allocation, release and the batch budget.
 *
 * DESIGN: budget->mutex guards in_use; budget->cond wakes the pipeline's
 * sequencer when a batch is freed or the pipeline is stopping.
 * held_by_caller is an atomic read without the mutex by stk_loader_next()
 * to detect a caller that holds every batch (STK_EBUSY).
 */
#include "batch.h"

#include "alloc.h"
#include "threads.h"

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

struct stk__batch *stk__batch_new(size_t capacity, uint64_t index, struct stk__batch_budget *budget)
{
    struct stk__batch *b = stk__calloc(1, sizeof *b);
    if (b == NULL) {
        budget_release(budget);
        return NULL;
    }
    b->pubs = stk__calloc(capacity, sizeof *b->pubs);
    b->samples = stk__calloc(capacity, sizeof *b->samples);
    if (b->pubs == NULL || b->samples == NULL) {
        stk__free(b->pubs);
        stk__free(b->samples);
        stk__free(b);
        budget_release(budget);
        return NULL;
    }
    b->capacity = capacity;
    b->budget = budget;
    b->pub.index = index;
    b->pub.samples = b->pubs;
    return b;
}

void stk__batch_add(struct stk__batch *b, struct stk__sample *s)
{
    b->pubs[b->pub.n_samples] = s->pub;
    b->samples[b->pub.n_samples++] = s;
}

void stk__batch_free(struct stk__batch *b)
{
    if (b == NULL)
        return;
    for (size_t i = 0; i < b->pub.n_samples; i++)
        stk__sample_free(b->samples[i]);
    stk__free(b->pubs);
    stk__free(b->samples);
    struct stk__batch_budget *budget = b->budget;
    stk__free(b);
    budget_release(budget);
}
