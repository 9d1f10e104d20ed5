/* SPDX-License-Identifier: MIT */
/*
 * test_abi.c - caller structs of another header version (abi.c, stoker.h
 * "Binary compatibility"), and the lifetime of the caller's option strings:
 * the library reads and writes only the caller's struct size, takes older
 * options with defaults for what they lack, refuses settings it does not
 * know, and keeps no pointer into the caller's strings.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/abi.h"
#include "base/alloc.h"
#include "stoker.h"
#include "tar_builder.h"

#define GUARD 0xab
#define N_SAMPLES 23

static char dir[64], shard[128], index_path[128], cache_dir[128];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-abi-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(shard, sizeof shard, "%s/shard.tar", dir);
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", dir);
    tb_write_shard(shard, "s", 0, N_SAMPLES);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(shard);
    unlink(index_path);
    rmdir(cache_dir);
    rmdir(dir);
    return 0;
}

/* One epoch over the shard: the samples delivered, or a negative code. */
static long run_epoch(const struct stk_options *o, char *msg, size_t msg_size)
{
    const char *urls[] = {shard};
    stk_loader *l;
    int rc = stk_loader_create(o, urls, 1, &l, msg, msg_size);
    if (rc < 0)
        return rc;
    long n = 0;
    struct stk_batch *b;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        n += (long)b->n_samples;
        stk_batch_release(b);
    }
    stk_loader_destroy(l);
    return rc == STK_EOF ? n : rc;
}

static void assert_guard(const unsigned char *p, size_t from, size_t to)
{
    for (size_t i = from; i < to; i++)
        if (p[i] != GUARD)
            fail_msg("byte %zu written past the caller's size %zu", i, from);
}

/* A caller whose header has fewer fields gets only those written. */
static void test_init_writes_only_the_callers_size(void **state)
{
    (void)state;
    union {
        struct stk_options o;
        unsigned char bytes[sizeof(struct stk_options) + 64];
    } u;
    size_t older = offsetof(struct stk_options, require_members);
    memset(&u, GUARD, sizeof u);
    stk_options_init_sized(&u.o, older);
    assert_int_equal(u.o.struct_size, older);
    assert_int_equal(u.o.batch_size, 64);
    assert_guard(u.bytes, older, sizeof u.bytes);
}

/* Options of an older header: the fields it lacks take their defaults
 * (zero), whatever lies beyond its size. */
static void test_older_options_are_read_to_their_size(void **state)
{
    (void)state;
    struct stk_options o;
    size_t older = offsetof(struct stk_options, require_members);
    stk_options_init_sized(&o, older);
    o.require_members = "not-in-the-older-struct"; /* past struct_size: never read */
    struct stk_options lib;
    struct stk__err err;
    assert_int_equal(stk__options_import(&lib, &o, &err), 0);
    assert_null(lib.require_members);
    assert_int_equal(lib.struct_size, sizeof lib);
    char msg[256];
    assert_int_equal(run_epoch(&o, msg, sizeof msg), N_SAMPLES);
}

/* Options of a newer header: zeros past this library's struct are the
 * defaults of fields it does not know; anything else is refused. */
static void test_newer_options_refused_only_when_set(void **state)
{
    (void)state;
    union {
        struct stk_options o;
        unsigned char bytes[sizeof(struct stk_options) + 16];
    } u;
    stk_options_init_sized(&u.o, sizeof u);
    assert_int_equal(u.o.struct_size, sizeof u);
    assert_int_equal(u.bytes[sizeof(struct stk_options) + 3], 0);
    char msg[256];
    assert_int_equal(run_epoch(&u.o, msg, sizeof msg), N_SAMPLES);
    u.bytes[sizeof(struct stk_options) + 3] = 1;
    assert_int_equal(run_epoch(&u.o, msg, sizeof msg), STK_EINVAL);
    assert_non_null(strstr(msg, "newer stoker.h"));
}

static void test_options_without_init_refused(void **state)
{
    (void)state;
    struct stk_options o;
    memset(&o, 0, sizeof o);
    o.batch_size = 4;
    char msg[256];
    assert_int_equal(run_epoch(&o, msg, sizeof msg), STK_EINVAL);
    assert_non_null(strstr(msg, "stk_options_init()"));
    const char *urls[] = {shard};
    assert_int_equal(stk_verify(&o, urls, 1, NULL, msg, sizeof msg), STK_EINVAL);
    assert_int_equal(stk_index_build(&o, urls, 1, index_path, 0, NULL, msg, sizeof msg),
                     STK_EINVAL);
}

/* stk_loader_stats and stk_verify write only the caller's stk_stats. */
static void test_stats_written_to_the_callers_size(void **state)
{
    (void)state;
    union {
        struct stk_stats s;
        unsigned char bytes[sizeof(struct stk_stats) + 64];
    } u;
    size_t older = offsetof(struct stk_stats, samples) + sizeof u.s.samples;
    struct stk_options o;
    stk_options_init(&o);
    const char *urls[] = {shard};
    char msg[256];
    memset(&u, GUARD, sizeof u);
    assert_int_equal(stk_verify_sized(&o, urls, 1, &u.s, older, msg, sizeof msg), 0);
    assert_int_equal(u.s.samples, N_SAMPLES);
    assert_guard(u.bytes, older, sizeof u.bytes);

    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), 0);
    struct stk_batch *b;
    assert_int_equal(stk_loader_next(l, &b), 0);
    stk_batch_release(b);
    memset(&u, GUARD, sizeof u);
    stk_loader_stats_sized(l, &u.s, older);
    assert_int_equal(u.s.shards_opened, 1);
    assert_guard(u.bytes, older, sizeof u.bytes);
    memset(&u, GUARD, sizeof u);
    stk_loader_stats(l, &u.s);
    assert_int_equal(u.s.batches, 1);
    assert_guard(u.bytes, sizeof u.s, sizeof u.bytes);
    stk_loader_destroy(l);
}

/* The report reads no counter past the caller's size: an older stk_stats
 * without wall_ns reads as a loader that has not started. */
static void test_report_reads_the_callers_size(void **state)
{
    (void)state;
    struct stk_stats s;
    memset(&s, 0, sizeof s);
    s.batches = 10;
    s.wall_ns = 1000000000;
    s.wait_ns = 900000000;
    char buf[1024];
    stk_stats_report(&s, buf, sizeof buf);
    assert_null(strstr(buf, "nothing to report"));
    stk_stats_report_sized(&s, offsetof(struct stk_stats, wall_ns), buf, sizeof buf);
    assert_non_null(strstr(buf, "nothing to report"));
}

static char *copy(const char *s)
{
    char *c = malloc(strlen(s) + 1);
    assert_non_null(c);
    return strcpy(c, s); /* checksrc: allow (test copy of a literal into its own size) */
}

/* Every string option need only outlive stk_loader_create(): the strings
 * are freed right after it (ASan reports any later read) and the loader
 * still runs epochs; every allocation of its copies can fail cleanly. */
static void test_option_strings_need_only_outlive_create(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    const char *urls[] = {shard};
    char msg[256];
    assert_int_equal(stk_index_build(&o, urls, 1, index_path, STK_OUTPUT_OVERWRITE, NULL, msg,
                                     sizeof msg), 0);
    int created = 0;
    for (unsigned long n = 1; n < 1000 && !created; n++) {
        /* not require_members: it acts (and is taken) only where samples
         * are decoded, and these hold no image */
        char *strings[] = {copy("cls"), copy("label"), copy(index_path), copy(cache_dir),
                           copy("/nonexistent/ca.pem")};
        o.label_exts = strings[0];
        o.label_json_field = strings[1];
        o.index_path = strings[2];
        o.cache_dir = strings[3];
        o.cache_size = 1 << 30;
        o.ca_bundle = strings[4];
        stk_loader *l;
        stk__alloc_fail_after(n);
        int rc = stk_loader_create(&o, urls, 1, &l, msg, sizeof msg);
        stk__alloc_fail_after(0);
        for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
            memset(strings[i], 'x', strlen(strings[i]));
            free(strings[i]);
        }
        if (rc < 0) {
            assert_int_equal(rc, STK_ENOMEM);
            continue;
        }
        created = 1;
        for (int epoch = 0; epoch < 2; epoch++) {
            long samples = 0;
            struct stk_batch *b;
            assert_int_equal(stk_loader_set_epoch(l, (uint64_t)epoch), 0);
            while ((rc = stk_loader_next(l, &b)) == 0) {
                samples += (long)b->n_samples;
                stk_batch_release(b);
            }
            assert_int_equal(rc, STK_EOF);
            assert_int_equal(samples, N_SAMPLES);
        }
        assert_int_equal(stk_loader_epoch_samples(l), N_SAMPLES);
        stk_loader_destroy(l);
    }
    assert_true(created);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_writes_only_the_callers_size),
        cmocka_unit_test(test_older_options_are_read_to_their_size),
        cmocka_unit_test(test_newer_options_refused_only_when_set),
        cmocka_unit_test(test_options_without_init_refused),
        cmocka_unit_test(test_stats_written_to_the_callers_size),
        cmocka_unit_test(test_report_reads_the_callers_size),
        cmocka_unit_test(test_option_strings_need_only_outlive_create),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
