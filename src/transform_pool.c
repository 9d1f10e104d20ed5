/*
 * transform_pool.c - the image worker threads.
 *
 * DESIGN (locking): pool->mutex guards the task ring and the stop flag;
 * workers wait on pool->cond for tasks. A batch's error field is written
 * only under pool->mutex, first failure wins. batch->pending is atomic; the
 * decrement that reaches zero hands the batch to batch_done() once, with no
 * lock held (batch_done takes the pipeline's lock).
 */
#include "transform_pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "threads.h"

struct task {
    struct stk__batch *batch;
    size_t slot;
};

struct stk__transform_pool {
    struct stk__transform_pool_config cfg;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    struct task *ring;
    size_t head, count;
    int stop;
    pthread_t *tids;
    unsigned started;
};

static void finish_slot(struct stk__transform_pool *pool, struct stk__batch *b)
{
    if (atomic_fetch_sub(&b->pending, 1) == 1)
        pool->cfg.batch_done(pool->cfg.batch_done_data, b);
}

static void run_task(struct stk__transform_pool *pool, struct stk__image_worker *w,
                     struct task *t)
{
    struct stk__batch *b = t->batch;
    struct stk__err err;
    int64_t *labels = (int64_t *)((char *)b->buffer + b->ring->labels_offset);
    void *out = (char *)b->buffer + t->slot * b->ring->image_bytes;
    uint64_t start = stk__now_ns();
    int rc = stk__image_transform(w, pool->cfg.image, b->samples[t->slot], out,
                                  &labels[t->slot], &err);
    struct stk__counters *c = pool->cfg.counters;
    atomic_fetch_add(&c->decode_ns, stk__now_ns() - start);
    struct stk__stage_ns stages;
    stk__image_worker_take_times(w, &stages);
    atomic_fetch_add(&c->image_decode_ns, stages.decode);
    atomic_fetch_add(&c->image_resample_ns, stages.resample);
    atomic_fetch_add(&c->image_convert_ns, stages.convert);
    if (rc == 0) {
        atomic_fetch_add(&c->images_decoded, 1);
        return;
    }
    b->failed[t->slot] = 1;
    if (pool->cfg.skip_bad && rc != STK_ENOMEM && pool->cfg.log != NULL)
        pool->cfg.log(pool->cfg.log_data, STK_LOG_WARN, err.msg);
    /* Report the lowest failed slot, so the message does not depend on
     * which worker finished first. */
    stk__mutex_lock(&pool->mutex);
    b->out_of_memory |= rc == STK_ENOMEM;
    if (b->error.code == 0 || t->slot < b->error_slot) {
        b->error = err;
        b->error_slot = t->slot;
    }
    stk__mutex_unlock(&pool->mutex);
}

static void *worker_main(void *arg)
{
    struct stk__transform_pool *pool = arg;
    struct stk__image_worker *w = stk__image_worker_new(pool->cfg.image);
    stk__mutex_lock(&pool->mutex);
    for (;;) {
        while (pool->count == 0 && !pool->stop)
            stk__cond_wait(&pool->cond, &pool->mutex);
        if (pool->stop)
            break;
        struct task t = pool->ring[pool->head];
        pool->head = (pool->head + 1) % pool->cfg.max_tasks;
        pool->count--;
        stk__mutex_unlock(&pool->mutex);
        if (w != NULL) {
            run_task(pool, w, &t);
        } else {
            t.batch->failed[t.slot] = 1;
            stk__mutex_lock(&pool->mutex);
            stk__errf(&t.batch->error, STK_ENOMEM, "out of memory for an image worker");
            t.batch->error_slot = 0;
            t.batch->out_of_memory = 1;
            stk__mutex_unlock(&pool->mutex);
        }
        finish_slot(pool, t.batch);
        stk__mutex_lock(&pool->mutex);
    }
    stk__mutex_unlock(&pool->mutex);
    stk__image_worker_free(w);
    return NULL;
}

void stk__transform_pool_submit(struct stk__transform_pool *pool, struct stk__batch *b,
                                size_t slot)
{
    stk__mutex_lock(&pool->mutex);
    if (pool->count == pool->cfg.max_tasks) {
        /* max_tasks covers every slot of every batch the budget lets exist,
         * so this is a bug in that sizing; dropping the task would leave
         * its batch pending forever, a hang far from the cause. */
        fprintf(stderr, "stoker: image task ring full (%zu tasks): the batch budget allows more "
                        "slots than the ring holds\n", pool->cfg.max_tasks);
        abort();
    }
    if (!pool->stop) { /* stopping drops queued tasks, and so this one */
        pool->ring[(pool->head + pool->count) % pool->cfg.max_tasks] = (struct task){b, slot};
        pool->count++;
        stk__cond_signal(&pool->cond);
    }
    stk__mutex_unlock(&pool->mutex);
}

void stk__transform_pool_seal(struct stk__transform_pool *pool, struct stk__batch *b)
{
    finish_slot(pool, b);
}

void stk__transform_pool_stop(struct stk__transform_pool *pool)
{
    if (pool == NULL)
        return;
    stk__mutex_lock(&pool->mutex);
    pool->stop = 1;
    stk__cond_broadcast(&pool->cond);
    stk__mutex_unlock(&pool->mutex);
    for (unsigned i = 0; i < pool->started; i++)
        stk__thread_join(pool->tids[i]);
    stk__cond_destroy(&pool->cond);
    stk__mutex_destroy(&pool->mutex);
    stk__free(pool->tids);
    stk__free(pool->ring);
    stk__free(pool);
}

int stk__transform_pool_start(const struct stk__transform_pool_config *cfg,
                              struct stk__transform_pool **out, struct stk__err *err)
{
    *out = NULL;
    struct stk__transform_pool *pool = stk__calloc(1, sizeof *pool);
    if (pool == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for the image workers");
    pool->cfg = *cfg;
    stk__mutex_init(&pool->mutex);
    stk__cond_init(&pool->cond);
    pool->ring = stk__calloc(cfg->max_tasks, sizeof *pool->ring);
    pool->tids = stk__calloc(cfg->threads, sizeof *pool->tids);
    if (pool->ring == NULL || pool->tids == NULL) {
        stk__transform_pool_stop(pool);
        return stk__errf(err, STK_ENOMEM, "out of memory for the image workers");
    }
    for (unsigned i = 0; i < cfg->threads; i++) {
        int rc = stk__thread_create(&pool->tids[i], worker_main, pool);
        if (rc < 0) {
            stk__transform_pool_stop(pool);
            return stk__errf(err, rc, "cannot start an image worker: %s", strerror(-rc));
        }
        pool->started++;
    }
    *out = pool;
    return 0;
}
