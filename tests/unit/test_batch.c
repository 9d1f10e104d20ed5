/* SPDX-License-Identifier: MIT */
/*
 * test_batch.c - batches, the batch budget and the image buffer ring
 * (batch.c): the budget blocks at its limit and wakes on release or stop,
 * a batch sums its samples' bad-input counts, image buffers are made at
 * most limit times and then recycled, and every failure gives the budget
 * back.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "pipeline/batch.h"
#include "tar/sample.h"
#include "stoker.h"

static size_t in_use(struct stk__batch_budget *b)
{
    pthread_mutex_lock(&b->mutex);
    size_t n = b->in_use;
    pthread_mutex_unlock(&b->mutex);
    return n;
}

static struct stk__sample *sample(const char *key, uint64_t bad_samples, uint64_t bad_shards)
{
    struct stk__sample *s = stk__sample_new(key, strlen(key), "mem://shard", 7, NULL);
    assert_non_null(s);
    s->bad_samples = bad_samples;
    s->bad_shards = bad_shards;
    return s;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

struct acquirer {
    struct stk__batch_budget *budget;
    atomic_int *stop;
    atomic_int done;
    int result;
};

static void *acquire_main(void *arg)
{
    struct acquirer *a = arg;
    a->result = stk__budget_acquire(a->budget, a->stop);
    atomic_store(&a->done, 1);
    return NULL;
}

/* At its limit the budget blocks until a batch is freed. */
static void test_budget_blocks_until_release(void **state)
{
    (void)state;
    struct stk__batch_budget budget;
    stk__budget_init(&budget, 2);
    atomic_int stop;
    atomic_init(&stop, 0);
    assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
    struct stk__batch *first = stk__batch_new(4, 0, &budget, NULL);
    assert_non_null(first);
    assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
    struct stk__batch *second = stk__batch_new(4, 1, &budget, NULL);
    assert_non_null(second);
    assert_int_equal(in_use(&budget), 2);

    struct acquirer a = {.budget = &budget, .stop = &stop};
    atomic_init(&a.done, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, acquire_main, &a), 0);
    sleep_ms(50);
    assert_int_equal(atomic_load(&a.done), 0); /* still waiting */
    stk__batch_free(first);
    pthread_join(t, NULL);
    assert_int_equal(a.result, 0);
    assert_int_equal(in_use(&budget), 2);

    /* A waiter also leaves when the pipeline stops, without a unit. */
    atomic_store(&a.done, 0);
    assert_int_equal(pthread_create(&t, NULL, acquire_main, &a), 0);
    sleep_ms(20);
    assert_int_equal(atomic_load(&a.done), 0);
    atomic_store(&stop, 1);
    stk__budget_wake(&budget);
    pthread_join(t, NULL);
    assert_int_equal(a.result, 1);
    assert_int_equal(in_use(&budget), 2);

    stk__batch_free(second);
    assert_int_equal(in_use(&budget), 1); /* the unit taken for the waiter that got through */
    stk__budget_destroy(&budget);
}

/* A batch's public view: index, samples in order, bad input summed. */
static void test_batch_holds_its_samples(void **state)
{
    (void)state;
    struct stk__batch_budget budget;
    stk__budget_init(&budget, 1);
    atomic_int stop;
    atomic_init(&stop, 0);
    assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
    struct stk__batch *b = stk__batch_new(3, 41, &budget, NULL);
    assert_non_null(b);
    stk__batch_add(b, sample("a", 2, 0), 11);
    stk__batch_add(b, sample("b", 0, 1), 12);
    stk__batch_add(b, sample("c", 3, 1), 0xFFFFFFFFFFFFFFF3ull);
    assert_int_equal(b->pub.index, 41);
    assert_int_equal(b->pub.n_samples, 3);
    assert_string_equal(b->pub.samples[0].key, "a");
    assert_string_equal(b->pub.samples[2].key, "c");
    assert_string_equal(b->pub.samples[1].url, "mem://shard");
    assert_int_equal(b->pub.samples[1].shard_index, 7);
    assert_int_equal(b->pub.sample_keys[0], 11); /* each sample's key, in its slot */
    assert_int_equal(b->pub.sample_keys[1], 12);
    assert_true(b->pub.sample_keys[2] == 0xFFFFFFFFFFFFFFF3ull);
    assert_int_equal(b->pub.samples_skipped, 5);
    assert_int_equal(b->pub.shards_failed, 2);
    assert_null(b->pub.images);
    assert_null(b->pub.labels);
    stk__batch_free(b); /* frees the samples: ASan reports a leak otherwise */
    assert_int_equal(in_use(&budget), 0);
    stk__batch_free(NULL);
    stk__budget_destroy(&budget);
}

struct allocator {
    int calls, releases;
    int fail;
    size_t bytes;
};

static void *counting_alloc(void *data, size_t bytes)
{
    struct allocator *a = data;
    a->calls++;
    a->bytes = bytes;
    return a->fail ? NULL : malloc(bytes);
}

static void counting_release(void *data, void *memory, size_t bytes)
{
    struct allocator *a = data;
    assert_int_equal(bytes, a->bytes);
    a->releases++;
    free(memory);
}

/* Image buffers: images then 64-byte aligned labels; at most limit are
 * made, then freed batches' buffers are reused. */
static void test_image_ring_recycles(void **state)
{
    (void)state;
    struct allocator a = {0};
    struct stk__image_ring ring;
    assert_int_equal(stk__image_ring_init(&ring, 2, 3, 10, counting_alloc, counting_release, &a),
                     0);
    assert_int_equal(ring.labels_offset, 64);
    assert_int_equal(ring.buffer_bytes, 64 + 3 * sizeof(int64_t));
    struct stk__batch_budget budget;
    stk__budget_init(&budget, 2);
    atomic_int stop;
    atomic_init(&stop, 0);
    void *seen[2];
    for (int round = 0; round < 5; round++) {
        struct stk__batch *b[2];
        for (int i = 0; i < 2; i++) {
            assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
            b[i] = stk__batch_new(3, (uint64_t)i, &budget, &ring);
            assert_non_null(b[i]);
            assert_ptr_equal(b[i]->pub.images, b[i]->buffer);
            assert_ptr_equal(b[i]->pub.labels, (int64_t *)((char *)b[i]->buffer + 64));
            assert_int_equal(b[i]->pub.image_bytes, 10);
            assert_int_equal(atomic_load(&b[i]->pending), 1);
            if (round == 0)
                seen[i] = b[i]->buffer;
            else
                assert_true(b[i]->buffer == seen[0] || b[i]->buffer == seen[1]);
        }
        stk__batch_free(b[1]);
        stk__batch_free(b[0]);
    }
    assert_int_equal(a.calls, 2);
    stk__image_ring_destroy(&ring);
    assert_int_equal(a.releases, 2);
    assert_int_equal(in_use(&budget), 0);
    stk__budget_destroy(&budget);
}

/* The caller's allocator failing, or any of the batch's own allocations,
 * gives the budget unit back and leaks nothing. */
static void test_failures_give_the_budget_back(void **state)
{
    (void)state;
    struct allocator a = {.fail = 1};
    struct stk__image_ring ring;
    assert_int_equal(stk__image_ring_init(&ring, 1, 4, 16, counting_alloc, counting_release, &a),
                     0);
    struct stk__batch_budget budget;
    stk__budget_init(&budget, 1);
    atomic_int stop;
    atomic_init(&stop, 0);
    assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
    assert_null(stk__batch_new(4, 0, &budget, &ring));
    assert_int_equal(in_use(&budget), 0);
    a.fail = 0;
    int failures = 0;
    for (unsigned long n = 1;; n++) {
        assert_int_equal(stk__budget_acquire(&budget, &stop), 0);
        stk__alloc_fail_after(n);
        struct stk__batch *b = stk__batch_new(4, 0, &budget, &ring);
        stk__alloc_fail_after(0);
        if (b != NULL) {
            stk__batch_free(b);
            break;
        }
        assert_int_equal(in_use(&budget), 0);
        failures++;
    }
    assert_true(failures >= 3);
    assert_int_equal(in_use(&budget), 0);
    stk__image_ring_destroy(&ring);
    assert_int_equal(a.releases, a.calls - 1); /* the failed call made nothing */
    stk__budget_destroy(&budget);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_budget_blocks_until_release),
        cmocka_unit_test(test_batch_holds_its_samples),
        cmocka_unit_test(test_image_ring_recycles),
        cmocka_unit_test(test_failures_give_the_budget_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
