/* SPDX-License-Identifier: MIT */
/*
 * test_image_workers.c - the image worker threads (image_workers.c):
 * every submitted slot is transformed into its place in the batch buffer,
 * a batch is reported done exactly once, after it is sealed and its last
 * slot finished, and a failed slot is marked, counted and reported with
 * the lowest failed slot's message whichever worker ran first.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "pipeline/batch.h"
#include "image/image.h"
#include "jpeg_fixture.h"
#include "base/buffer_pool.h"
#include "tar/sample.h"
#include "tar/shard_reader.h"
#include "stoker.h"
#include "pipeline/image_workers.h"

#define BATCH 6
#define MAX_BATCHES 3
#define SIZE 8

struct done {
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    int calls[16];
    int total;
    atomic_int logged;
};

static void batch_done(void *data, struct stk__batch *b)
{
    struct done *d = data;
    pthread_mutex_lock(&d->mutex);
    assert_int_equal(atomic_load(&b->pending), 0);
    d->calls[b->pub.index]++;
    d->total++;
    pthread_cond_broadcast(&d->cond);
    pthread_mutex_unlock(&d->mutex);
}

static void log_message(void *data, enum stk_log_level level, const char *message)
{
    struct done *d = data;
    assert_int_equal(level, STK_LOG_WARN);
    assert_non_null(strstr(message, "bad-"));
    atomic_fetch_add(&d->logged, 1);
}

static void add_member(struct stk__sample *s, const char *ext, const void *data, size_t size)
{
    uint8_t *copy = stk__buffer_pool_get(NULL, size + 1);
    assert_non_null(copy);
    memcpy(copy, data, size);
    copy[size] = 0;
    assert_int_equal(stk__sample_add(s, ext, strlen(ext), copy, size), 0);
}

/* A sample with a decodable JPEG and label `label`, or, when bad, a .jpg
 * that is no image. */
static struct stk__sample *sample(int label, int bad)
{
    char key[32], cls[16];
    snprintf(key, sizeof key, "%s%03d", bad ? "bad-" : "good-", label);
    struct stk__sample *s = stk__sample_new(key, strlen(key), "mem://shard", 0, NULL);
    assert_non_null(s);
    snprintf(cls, sizeof cls, "%d", label);
    add_member(s, "cls", cls, strlen(cls));
    if (bad) {
        add_member(s, "jpg", "not a jpeg", 10);
    } else {
        unsigned char *jpeg;
        size_t size;
        jpeg_fixture(24, 16, (unsigned)label, &jpeg, &size);
        add_member(s, "jpg", jpeg, size);
        free(jpeg);
    }
    return s;
}

struct fixture {
    struct stk__image_config image;
    struct stk__sample_rules rules;
    struct stk__image_ring ring;
    struct stk__batch_budget budget;
    struct stk__run run;
    struct done done;
    struct stk__image_workers *workers;
};

static void start(struct fixture *f, unsigned threads, int skip_bad)
{
    memset(f, 0, sizeof *f);
    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_EVAL;
    o.image_size = SIZE;
    struct stk__err err;
    assert_int_equal(stk__image_config_init(&f->image, &o, &err), 0);
    assert_int_equal(stk__sample_rules_init(&f->rules, &o, &err), 0);
    assert_int_equal(stk__image_ring_init(&f->ring, MAX_BATCHES, BATCH, stk__image_bytes(&f->image),
                                          NULL, NULL, NULL), 0);
    stk__budget_init(&f->budget, MAX_BATCHES);
    pthread_mutex_init(&f->done.mutex, NULL);
    pthread_cond_init(&f->done.cond, NULL);
    atomic_init(&f->done.logged, 0);
    stk__run_init(&f->run, NULL);
    f->run.skip_bad = skip_bad;
    f->run.log = log_message;
    f->run.log_data = &f->done;
    struct stk__image_workers_config cfg = {
        .threads = threads,
        .max_tasks = MAX_BATCHES * BATCH, /* as the pipeline sizes it */
        .image = &f->image,
        .rules = &f->rules,
        .run = &f->run,
        .batch_done = batch_done,
        .batch_done_data = &f->done,
    };
    assert_int_equal(stk__image_workers_start(&cfg, &f->workers, &err), 0);
}

/* Fill a batch as the sequencer does: each slot counted, then submitted;
 * bad_mask marks the slots given a bad image. */
static struct stk__batch *submit_batch(struct fixture *f, uint64_t index, unsigned bad_mask)
{
    atomic_int stop;
    atomic_init(&stop, 0);
    assert_int_equal(stk__budget_acquire(&f->budget, &stop), 0);
    struct stk__batch *b = stk__batch_new(BATCH, index, &f->budget, &f->ring);
    assert_non_null(b);
    for (int i = 0; i < BATCH; i++) {
        stk__batch_add(b, sample((int)index * 100 + i, (bad_mask >> i) & 1), 0);
        atomic_fetch_add(&b->pending, 1);
        stk__image_workers_submit(f->workers, b, (size_t)i);
    }
    return b;
}

static void wait_done(struct fixture *f, int total)
{
    pthread_mutex_lock(&f->done.mutex);
    while (f->done.total < total)
        pthread_cond_wait(&f->done.cond, &f->done.mutex);
    pthread_mutex_unlock(&f->done.mutex);
}

static void finish(struct fixture *f)
{
    stk__image_workers_stop(f->workers);
    stk__image_ring_destroy(&f->ring);
    stk__budget_destroy(&f->budget);
    pthread_cond_destroy(&f->done.cond);
    pthread_mutex_destroy(&f->done.mutex);
}

/* Every slot of every batch the budget allows at once is transformed, and
 * each batch is reported once, only after it is sealed. */
static void test_every_slot_transformed_once(void **state)
{
    (void)state;
    for (unsigned threads = 1; threads <= 4; threads += 3) {
        struct fixture f;
        start(&f, threads, 0);
        struct stk__batch *b[MAX_BATCHES];
        for (int i = 0; i < MAX_BATCHES; i++)
            b[i] = submit_batch(&f, (uint64_t)i, 0);
        /* Not sealed: the sequencer's count keeps them pending. */
        for (int i = 0; i < MAX_BATCHES; i++)
            while (atomic_load(&b[i]->pending) > 1)
                ;
        pthread_mutex_lock(&f.done.mutex);
        assert_int_equal(f.done.total, 0);
        pthread_mutex_unlock(&f.done.mutex);
        for (int i = 0; i < MAX_BATCHES; i++)
            stk__image_workers_seal(f.workers, b[i]);
        wait_done(&f, MAX_BATCHES);
        for (int i = 0; i < MAX_BATCHES; i++) {
            assert_int_equal(f.done.calls[i], 1);
            assert_int_equal(b[i]->error.code, 0);
            for (int s = 0; s < BATCH; s++) {
                assert_int_equal(b[i]->pub.labels[s], i * 100 + s);
                assert_int_equal(b[i]->failed[s], 0);
            }
        }
        assert_int_equal(atomic_load(&f.run.counters.images_decoded), MAX_BATCHES * BATCH);
        /* Equal input, equal pixels, whichever worker rendered them into
         * whichever recycled buffer. */
        size_t bytes = BATCH * f.ring.image_bytes;
        unsigned char *first = malloc(bytes);
        assert_non_null(first);
        memcpy(first, b[1]->buffer, bytes);
        stk__batch_free(b[1]);
        struct stk__batch *again = submit_batch(&f, 1, 0);
        stk__image_workers_seal(f.workers, again);
        wait_done(&f, MAX_BATCHES + 1);
        assert_memory_equal(again->buffer, first, bytes);
        free(first);
        stk__batch_free(again);
        stk__batch_free(b[0]);
        stk__batch_free(b[2]);
        finish(&f);
    }
}

/* Bad slots are marked; the batch keeps the lowest one's message, and
 * under the skip policy each is logged. */
static void test_failed_slots_reported(void **state)
{
    (void)state;
    for (int skip = 0; skip <= 1; skip++) {
        struct fixture f;
        start(&f, 4, skip);
        const unsigned bad = (1u << 1) | (1u << 4);
        struct stk__batch *b = submit_batch(&f, 0, bad);
        stk__image_workers_seal(f.workers, b);
        wait_done(&f, 1);
        for (int s = 0; s < BATCH; s++)
            assert_int_equal(b->failed[s], (bad >> s) & 1);
        assert_int_equal(b->error_slot, 1);
        assert_int_equal(b->error.code, STK_EDECODE);
        assert_non_null(strstr(b->error.msg, "bad-001"));
        assert_int_equal(b->not_bad_input, 0);
        assert_int_equal(atomic_load(&f.done.logged), skip ? 2 : 0);
        assert_int_equal(atomic_load(&f.run.counters.images_decoded), BATCH - 2);
        stk__batch_free(b);
        finish(&f);
    }
}

/* Stopping with tasks queued drops them and joins every worker. */
static void test_stop_with_queued_tasks(void **state)
{
    (void)state;
    struct fixture f;
    start(&f, 1, 0);
    struct stk__batch *b[MAX_BATCHES];
    for (int i = 0; i < MAX_BATCHES; i++)
        b[i] = submit_batch(&f, (uint64_t)i, 0);
    stk__image_workers_stop(f.workers);
    f.workers = NULL;
    for (int i = 0; i < MAX_BATCHES; i++)
        stk__batch_free(b[i]);
    finish(&f);
}

static atomic_int worker_blocked;

/* Holds the only worker inside its task for good. */
static void block_forever(void *data, enum stk_log_level level, const char *message)
{
    (void)data, (void)level, (void)message;
    atomic_store(&worker_blocked, 1);
    for (;;)
        pause();
}

/* A task that finds the ring full is a sizing bug: the process aborts
 * saying so instead of dropping the task (its batch would never finish). */
static void test_full_ring_aborts(void **state)
{
    (void)state;
    int fds[2];
    assert_int_equal(pipe(fds), 0);
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        dup2(fds[1], 2);
        struct fixture f;
        start(&f, 1, 1);
        stk__image_workers_stop(f.workers);
        atomic_init(&worker_blocked, 0);
        struct stk__err err;
        struct stk__image_workers_config cfg = {
            .threads = 1, .max_tasks = 1, .image = &f.image, .rules = &f.rules, .run = &f.run,
            .batch_done = batch_done, .batch_done_data = &f.done,
        };
        f.run.log = block_forever;
        if (stk__image_workers_start(&cfg, &f.workers, &err) < 0)
            _exit(3);
        atomic_int stop;
        atomic_init(&stop, 0);
        stk__budget_acquire(&f.budget, &stop);
        struct stk__batch *b = stk__batch_new(BATCH, 0, &f.budget, &f.ring);
        for (int i = 0; i < 3; i++) {
            stk__batch_add(b, sample(i, 1), 0);
            atomic_fetch_add(&b->pending, 1);
            stk__image_workers_submit(f.workers, b, (size_t)i);
            while (i == 0 && !atomic_load(&worker_blocked))
                ; /* slot 0 holds the worker; slot 1 fills the ring */
        }
        _exit(0); /* the third submit did not abort */
    }
    close(fds[1]);
    char out[512] = "";
    size_t len = 0;
    ssize_t n;
    while (len < sizeof out - 1 && (n = read(fds[0], out + len, sizeof out - 1 - len)) > 0)
        len += (size_t)n;
    close(fds[0]);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
        fail_msg("expected an abort, got status 0x%x; stderr: %s", status, out);
    assert_non_null(strstr(out, "image task ring full (1 tasks)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_slot_transformed_once),
        cmocka_unit_test(test_failed_slots_reported),
        cmocka_unit_test(test_stop_with_queued_tasks),
        cmocka_unit_test(test_full_ring_aborts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
