/*
 * test_writer.c - stk_writer: patterns, names, rollover, atomic shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "stoker.h"

static char dir[64];

static int exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

static stk_writer *create(const char *name, uint64_t max_samples, uint64_t max_bytes)
{
    char pattern[128], msg[256];
    snprintf(pattern, sizeof pattern, "%s/%s", dir, name);
    stk_writer *w = NULL;
    assert_int_equal(stk_writer_create(pattern, max_samples, max_bytes, &w, msg, sizeof msg), 0);
    return w;
}

static void test_patterns(void **state)
{
    (void)state;
    static const char *const bad[] = {"x.tar", "%d-%d.tar", "%s.tar", "%-3d.tar", "%123d.tar",
                                      "%", "%%.tar"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        stk_writer *w = (stk_writer *)1;
        char msg[256] = "";
        assert_int_equal(stk_writer_create(bad[i], 1, 1, &w, msg, sizeof msg), STK_EINVAL);
        assert_null(w);
        assert_non_null(strstr(msg, "exactly one %d"));
    }
    stk_writer *w;
    char msg[256];
    assert_int_equal(stk_writer_create("a%%b-%06d.tar", 0, 1, &w, msg, sizeof msg), STK_EINVAL);
    assert_int_equal(stk_writer_create("a%%b-%06d.tar", 1, 1, &w, msg, sizeof msg), 0);
    stk_writer_destroy(w);
}

static void test_bad_names_write_nothing(void **state)
{
    (void)state;
    stk_writer *w = create("names-%d.tar", 10, 1000);
    const struct stk_member ok = {"jpg", (const uint8_t *)"x", 1};
    static const char *const keys[] = {"", "a.b", "dir/", "a//b", "dir/x.y"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_int_equal(stk_writer_add(w, keys[i], &ok, 1), STK_EINVAL);
    const struct stk_member twice[] = {ok, ok};
    assert_int_equal(stk_writer_add(w, "k", twice, 2), STK_EINVAL);
    assert_non_null(strstr(stk_writer_errmsg(w), "twice"));
    const struct stk_member bad_ext[] = {{"", NULL, 0}, {"a/b", NULL, 0}};
    assert_int_equal(stk_writer_add(w, "k", &bad_ext[0], 1), STK_EINVAL);
    assert_int_equal(stk_writer_add(w, "k", &bad_ext[1], 1), STK_EINVAL);
    assert_int_equal(stk_writer_add(w, "k", NULL, 0), STK_EINVAL);
    uint64_t shards = 9, samples = 9;
    assert_int_equal(stk_writer_close(w, &shards, &samples), 0);
    assert_int_equal(shards, 0);
    assert_int_equal(samples, 0);
    stk_writer_destroy(w);
    assert_false(exists("names-0.tar"));
    assert_false(exists("names-0.tar.tmp"));
}

/* 5 samples of 10 bytes: max 2 samples gives 3 shards, max 25 bytes too. */
static void test_rollover(void **state)
{
    (void)state;
    for (int by_size = 0; by_size < 2; by_size++) {
        stk_writer *w = by_size ? create("size-%d.tar", 100, 25) : create("count-%d.tar", 2, 1000);
        const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10}};
        for (int i = 0; i < 5; i++) {
            char key[8];
            snprintf(key, sizeof key, "k%d", i);
            assert_int_equal(stk_writer_add(w, key, m, 1), 0);
            /* the shard being written is not visible under its name */
            assert_false(exists(by_size ? "size-2.tar" : "count-2.tar"));
        }
        uint64_t shards, samples;
        assert_int_equal(stk_writer_close(w, &shards, &samples), 0);
        stk_writer_destroy(w);
        assert_int_equal(shards, 3);
        assert_int_equal(samples, 5);
        assert_true(exists(by_size ? "size-2.tar" : "count-2.tar"));
        assert_false(exists(by_size ? "size-3.tar" : "count-3.tar"));
        assert_false(exists(by_size ? "size-2.tar.tmp" : "count-2.tar.tmp"));
    }
    /* a sample larger than max_bytes gets a shard of its own */
    stk_writer *w = create("big-%d.tar", 100, 5);
    const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10}};
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    assert_int_equal(stk_writer_add(w, "b", m, 1), 0);
    uint64_t shards;
    assert_int_equal(stk_writer_close(w, &shards, NULL), 0);
    stk_writer_destroy(w);
    assert_int_equal(shards, 2);
}

static void test_destroy_without_close_and_io_errors(void **state)
{
    (void)state;
    stk_writer *w = create("open-%d.tar", 10, 1000);
    const struct stk_member m[] = {{"txt", (const uint8_t *)"x", 1}};
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    assert_true(exists("open-0.tar.tmp"));
    stk_writer_destroy(w); /* the unfinished shard goes */
    assert_false(exists("open-0.tar.tmp"));
    assert_false(exists("open-0.tar"));

    w = create("missing/%d.tar", 10, 1000);
    assert_int_equal(stk_writer_add(w, "a", m, 1), STK_EIO);
    assert_non_null(strstr(stk_writer_errmsg(w), "missing/0.tar"));
    stk_writer_destroy(w);
    stk_writer_destroy(NULL);
}

/* Failing the Nth allocation for every N: a clean STK_ENOMEM, no leak (ASan),
 * and never a shard with half a sample under its final name. */
static void test_allocation_failures(void **state)
{
    (void)state;
    const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10},
                                   {"cls", (const uint8_t *)"3", 1}};
    int failures = 0;
    for (unsigned long n = 1; n < 1000; n++) {
        char pattern[128], msg[256];
        snprintf(pattern, sizeof pattern, "%s/alloc-%lu-%%d.tar", dir, n);
        stk__alloc_fail_after(n);
        stk_writer *w = NULL;
        int rc = stk_writer_create(pattern, 2, 1000, &w, msg, sizeof msg);
        for (int i = 0; rc == 0 && i < 5; i++) {
            char key[8];
            snprintf(key, sizeof key, "k%d", i);
            rc = stk_writer_add(w, key, m, 2);
        }
        uint64_t shards = 0;
        if (rc == 0)
            rc = stk_writer_close(w, &shards, NULL);
        stk__alloc_fail_after(0);
        stk_writer_destroy(w);
        if (rc == 0) {
            assert_int_equal(shards, 3);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        failures++;
    }
    assert_true(failures >= 3);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-writer-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_bad_names_write_nothing),
        cmocka_unit_test(test_rollover),
        cmocka_unit_test(test_destroy_without_close_and_io_errors),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
