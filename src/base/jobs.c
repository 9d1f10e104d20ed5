/* SPDX-License-Identifier: MIT */
/*
 * jobs.c - one job per shard on a few threads.
 *
 * DESIGN (locking): the next index is an atomic counter; the first error is
 * written, and the progress callback called, under the mutex (so the
 * caller's callback needs no lock of its own). A failure pushes the counter
 * past the end, so every thread stops after its current job.
 */
#include "base/jobs.h"

#include <string.h>

#include "base/alloc.h"
#include "base/threads.h"

struct run {
    size_t count;
    stk__job_fn job;
    void *ctx;
    atomic_size_t next;
    const struct stk__run *run;
    pthread_mutex_t mutex;
    struct stk__err err; /* first failure, guarded by mutex */
    size_t done;         /* jobs finished, guarded by mutex */
};

static void *job_main(void *arg)
{
    struct run *r = arg;
    for (;;) {
        size_t i = atomic_fetch_add(&r->next, 1);
        if (i >= r->count)
            return NULL;
        struct stk__err err;
        stk__err_clear(&err);
        int rc = r->job(r->ctx, i, &err);
        if (rc < 0) {
            stk__mutex_lock(&r->mutex);
            if (r->err.code == 0)
                r->err = err;
            stk__mutex_unlock(&r->mutex);
            atomic_store(&r->next, r->count); /* the others stop too */
            return NULL;
        }
        if (r->run->progress != NULL) {
            stk__mutex_lock(&r->mutex);
            r->done++;
            /* The cast drops const: an atomic load does not modify it. */
            r->run->progress(r->run->progress_data, r->done, r->count,
                             atomic_load((atomic_uint_fast64_t *)&r->run->counters.samples_read));
            stk__mutex_unlock(&r->mutex);
        }
    }
}

int stk__run_jobs(size_t count, unsigned threads, stk__job_fn job, void *ctx,
                  const struct stk__run *run, struct stk__err *err)
{
    struct run r = {.count = count, .job = job, .ctx = ctx, .run = run};
    stk__err_clear(&r.err);
    if (threads > count)
        threads = (unsigned)count;
    if (threads == 0)
        return 0;
    pthread_t *tids = stk__calloc(threads, sizeof *tids);
    if (tids == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory starting %u threads", threads);
    stk__mutex_init(&r.mutex);
    unsigned started = 0;
    int rc = 0;
    while (started < threads) {
        rc = stk__thread_create(&tids[started], job_main, &r);
        if (rc < 0) {
            stk__errf(err, rc, "cannot start a thread: %s", strerror(-rc));
            atomic_store(&r.next, count);
            break;
        }
        started++;
    }
    for (unsigned t = 0; t < started; t++)
        stk__thread_join(tids[t]);
    stk__free(tids);
    stk__mutex_destroy(&r.mutex);
    if (rc == 0 && r.err.code != 0) {
        *err = r.err;
        rc = r.err.code;
    }
    return rc;
}
