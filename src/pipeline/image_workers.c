/* SPDX-License-Identifier: MIT */
/*
 * image_workers.c - the image worker threads.
 *
 * DESIGN (locking): workers->mutex guards the task ring and the stop flag;
 * workers wait on workers->cond for tasks. A batch's error field is written
 * only under workers->mutex, first failure wins. batch->pending is atomic; the
 * decrement that reaches zero hands the batch to batch_done() once, with no
 * lock held (batch_done takes the pipeline's lock).
 */
#include "pipeline/image_workers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "base/threads.h"

struct task {
    struct stk__batch *batch;
    size_t slot;
};

struct stk__image_workers {
    struct stk__image_workers_config cfg;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    struct task *ring;
    size_t head, count;
    int stop;
    pthread_t *tids;
    unsigned started;
};

static void finish_slot(struct stk__image_workers *workers, struct stk__batch *b)
{
    if (atomic_fetch_sub(&b->pending, 1) == 1)
        workers->cfg.batch_done(workers->cfg.batch_done_data, b);
}

static void run_task(struct stk__image_workers *workers, struct stk__image_worker *w,
                     struct task *t)
{
    struct stk__batch *b = t->batch;
    struct stk__err err;
    int64_t *labels = (int64_t *)((char *)b->buffer + b->ring->labels_offset);
    void *out = (char *)b->buffer + t->slot * b->ring->image_bytes;
    uint64_t start = stk__now_ns();
    int rc = stk__sample_transform(w, workers->cfg.rules, workers->cfg.image, b->samples[t->slot],
                                   b->keys[t->slot], out, &labels[t->slot], &err);
    struct stk__counters *c = &workers->cfg.run->counters;
    atomic_fetch_add(&c->decode_ns, stk__now_ns() - start);
    struct stk__stage_ns stages;
    stk__image_worker_take_times(w, &stages);
    atomic_fetch_add(&c->image_decode_ns, stages.decode);
    atomic_fetch_add(&c->image_resample_ns, stages.resample);
    atomic_fetch_add(&c->image_convert_ns, stages.convert);
    atomic_fetch_add(&c->image_augment_ns, stages.augment);
    atomic_fetch_add(&c->image_erase_ns, stages.erase);
#define ADD_OP(X, name, label, op)                                                                 \
    if (stages.op_runs[op] > 0) {                                                                  \
        atomic_fetch_add(&c->aug_##name##_ns, stages.op_ns[op]);                                   \
        atomic_fetch_add(&c->aug_##name##_runs, stages.op_runs[op]);                               \
    }
    STK__AUG_OP_STATS(ADD_OP, _)
#undef ADD_OP
    if (rc == 0) {
        atomic_fetch_add(&c->images_decoded, 1);
        return;
    }
    b->failed[t->slot] = 1;
    int bad_input = stk__error_is_bad_input(rc);
    if (workers->cfg.run->skip_bad && bad_input)
        stk__run_log(workers->cfg.run, STK_LOG_WARN, "%s", err.msg);
    /* Report the lowest failed slot, so the message does not depend on
     * which worker finished first. */
    stk__mutex_lock(&workers->mutex);
    b->not_bad_input |= !bad_input;
    if (b->error.code == 0 || t->slot < b->error_slot) {
        b->error = err;
        b->error_slot = t->slot;
    }
    stk__mutex_unlock(&workers->mutex);
}

static void *worker_main(void *arg)
{
    struct stk__image_workers *workers = arg;
    struct stk__image_worker *w = stk__image_worker_new(workers->cfg.image);
    stk__mutex_lock(&workers->mutex);
    for (;;) {
        while (workers->count == 0 && !workers->stop)
            stk__cond_wait(&workers->cond, &workers->mutex);
        if (workers->stop)
            break;
        struct task t = workers->ring[workers->head];
        workers->head = (workers->head + 1) % workers->cfg.max_tasks;
        workers->count--;
        stk__mutex_unlock(&workers->mutex);
        if (w != NULL) {
            run_task(workers, w, &t);
        } else {
            t.batch->failed[t.slot] = 1;
            stk__mutex_lock(&workers->mutex);
            stk__errf(&t.batch->error, STK_ENOMEM, "out of memory for an image worker");
            t.batch->error_slot = 0;
            t.batch->not_bad_input = 1;
            stk__mutex_unlock(&workers->mutex);
        }
        finish_slot(workers, t.batch);
        stk__mutex_lock(&workers->mutex);
    }
    stk__mutex_unlock(&workers->mutex);
    stk__image_worker_free(w);
    return NULL;
}

void stk__image_workers_submit(struct stk__image_workers *workers, struct stk__batch *b,
                               size_t slot)
{
    stk__mutex_lock(&workers->mutex);
    if (workers->count == workers->cfg.max_tasks) {
        /* max_tasks covers every slot of every batch the budget lets exist,
         * so this is a bug in that sizing; dropping the task would leave
         * its batch pending forever, a hang far from the cause. */
        fprintf(stderr, "stoker: image task ring full (%zu tasks): the batch budget allows more "
                        "slots than the ring holds\n", workers->cfg.max_tasks);
        abort();
    }
    if (!workers->stop) { /* stopping drops queued tasks, and so this one */
        size_t tail = (workers->head + workers->count) % workers->cfg.max_tasks;
        workers->ring[tail] = (struct task){b, slot};
        workers->count++;
        stk__cond_signal(&workers->cond);
    }
    stk__mutex_unlock(&workers->mutex);
}

void stk__image_workers_seal(struct stk__image_workers *workers, struct stk__batch *b)
{
    finish_slot(workers, b);
}

void stk__image_workers_stop(struct stk__image_workers *workers)
{
    if (workers == NULL)
        return;
    stk__mutex_lock(&workers->mutex);
    workers->stop = 1;
    stk__cond_broadcast(&workers->cond);
    stk__mutex_unlock(&workers->mutex);
    for (unsigned i = 0; i < workers->started; i++)
        stk__thread_join(workers->tids[i]);
    stk__cond_destroy(&workers->cond);
    stk__mutex_destroy(&workers->mutex);
    stk__free(workers->tids);
    stk__free(workers->ring);
    stk__free(workers);
}

int stk__image_workers_start(const struct stk__image_workers_config *cfg,
                             struct stk__image_workers **out, struct stk__err *err)
{
    *out = NULL;
    struct stk__image_workers *workers = stk__calloc(1, sizeof *workers);
    if (workers == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for the image workers");
    workers->cfg = *cfg;
    stk__mutex_init(&workers->mutex);
    stk__cond_init(&workers->cond);
    workers->ring = stk__calloc(cfg->max_tasks, sizeof *workers->ring);
    workers->tids = stk__calloc(cfg->threads, sizeof *workers->tids);
    if (workers->ring == NULL || workers->tids == NULL) {
        stk__image_workers_stop(workers);
        return stk__errf(err, STK_ENOMEM, "out of memory for the image workers");
    }
    for (unsigned i = 0; i < cfg->threads; i++) {
        int rc = stk__thread_create(&workers->tids[i], worker_main, workers);
        if (rc < 0) {
            stk__image_workers_stop(workers);
            return stk__errf(err, rc, "cannot start an image worker: %s", strerror(-rc));
        }
        workers->started++;
    }
    *out = workers;
    return 0;
}
