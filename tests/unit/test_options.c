/* SPDX-License-Identifier: MIT */
/*
 * test_options.c - options by name (stk_options_set and the option table):
 * defaults, parsing, ranges that never wrap, messages that name the option
 * and what it accepts; and that every failing call leaves a message, also
 * when stk_loader_create fails at any allocation.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "stoker.h"
#include "tar_builder.h"

static char dir[] = "/tmp/stk-options-XXXXXX";
static char shard[256];

static int setup(void **state)
{
    (void)state;
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(shard, sizeof shard, "%s/s-000000.tar", dir);
    tb_write_shard(shard, "k", 0, 10);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

static void assert_contains(const char *text, const char *part)
{
    if (strstr(text, part) == NULL)
        fail_msg("'%s' does not contain '%s'", text, part);
}

/* set must fail, leave opts as they were, and say name, accepted values
 * and value. */
static void refused(const char *name, const char *value, const char *accepted)
{
    struct stk_options o, before;
    stk_options_init(&o);
    before = o;
    char msg[512] = "";
    assert_int_equal(stk_options_set(&o, name, value, msg, sizeof msg), STK_EINVAL);
    assert_memory_equal(&o, &before, sizeof o);
    assert_contains(msg, name);
    assert_contains(msg, accepted);
    assert_contains(msg, value);
}

static void test_defaults_come_from_the_table(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    assert_int_equal(o.batch_size, 64);
    assert_int_equal(o.threads, 2);
    assert_int_equal(o.shuffle_buffer_bytes, (size_t)2 << 30);
    assert_int_equal(o.read_buffer_bytes, 256u << 10);
    assert_int_equal(o.rank, -1);
    assert_int_equal(o.world_size, -1);
    assert_int_equal(o.shuffle, 1);
    assert_int_equal(o.io_min_rate, 4096);
    assert_int_equal(o.max_member_bytes, 256u << 20);
    assert_true(o.ratio_min == 3.0f / 4.0f && o.ratio_max == 4.0f / 3.0f);
    assert_true(o.mean[0] == 0.485f && o.mean[2] == 0.406f && o.std[1] == 0.224f);
    assert_string_equal(o.label_exts, "cls");
    assert_null(o.cache_dir);
    assert_int_equal(o.transform, STK_TRANSFORM_NONE);
    /* every default is accepted back as a value */
    const struct stk_option_info *info;
    size_t n = 0;
    for (; (info = stk_option_at(n)) != NULL; n++) {
        assert_ptr_equal(stk_option_find(info->name), info);
        assert_non_null(info->doc);
        char msg[512];
        if (stk_options_set(&o, info->name, info->default_value, msg, sizeof msg) != 0)
            fail_msg("default of %s: %s", info->name, msg);
    }
    assert_true(n > 40);
    assert_null(stk_option_find("shuffel"));
}

static void test_values_by_name(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    char msg[512];
    assert_int_equal(stk_options_set(&o, "batch_size", "128", msg, sizeof msg), 0);
    assert_string_equal(msg, "");
    assert_int_equal(o.batch_size, 128);
    assert_int_equal(stk_options_set(&o, "cache_size", "1GiB", msg, sizeof msg), 0);
    assert_int_equal(o.cache_size, (uint64_t)1 << 30);
    assert_int_equal(stk_options_set(&o, "io_min_rate", "0", msg, sizeof msg), 0);
    assert_int_equal(o.io_min_rate, 0);
    assert_int_equal(stk_options_set(&o, "seed", "18446744073709551615", msg, sizeof msg), 0);
    assert_true(o.seed == UINT64_MAX);
    assert_int_equal(stk_options_set(&o, "rank", "-1", msg, sizeof msg), 0); /* the default */
    assert_int_equal(stk_options_set(&o, "rank", "7", msg, sizeof msg), 0);
    assert_int_equal(o.rank, 7);
    assert_int_equal(stk_options_set(&o, "layout", "nhwc", msg, sizeof msg), 0);
    assert_int_equal(o.layout, STK_LAYOUT_NHWC);
    assert_int_equal(stk_options_set(&o, "on_error", "skip", msg, sizeof msg), 0);
    assert_int_equal(o.on_error, STK_ON_ERROR_SKIP);
    assert_int_equal(stk_options_set(&o, "mean", "1,2.5,3", msg, sizeof msg), 0);
    assert_true(o.mean[0] == 1.0f && o.mean[1] == 2.5f && o.mean[2] == 3.0f);
    assert_int_equal(stk_options_set(&o, "ratio_min", "1/2", msg, sizeof msg), 0);
    assert_true(o.ratio_min == 0.5f);
    assert_int_equal(stk_options_set(&o, "shuffle", "0", msg, sizeof msg), 0);
    assert_int_equal(o.shuffle, 0);
    const char *text = "txt,json?";
    assert_int_equal(stk_options_set(&o, "require_members", text, msg, sizeof msg), 0);
    assert_ptr_equal(o.require_members, text); /* borrowed, not copied */
    assert_int_equal(stk_options_set(&o, "require_members", NULL, msg, sizeof msg), 0);
    assert_null(o.require_members);
}

static void test_bad_values_name_the_option(void **state)
{
    (void)state;
    refused("threads", "0", "between 1 and 1024");
    refused("threads", "4294967297", "between 1 and 1024"); /* never wraps to 1 */
    refused("threads", "99999999999999999999999", "between 1 and 1024");
    refused("threads", "2x", "between 1 and 1024");
    refused("threads", "", "between 1 and 1024");
    refused("threads", " 2", "between 1 and 1024");
    refused("threads", "2 ", "between 1 and 1024");
    refused("threads", "+2", "between 1 and 1024");
    refused("seed", "-1", "between 0 and 18446744073709551615");
    refused("rank", "-2", "or -1 (the default)");
    refused("rank", "2147483648", "between 0 and 2147483647");
    refused("world_size", "0", "between 1 and 2147483647");
    refused("samples_per_rank", "1500.0", "between 1 and");
    refused("shuffle_buffer_bytes", "3X", "K, M, G, T");
    refused("shuffle_buffer_bytes", "17179869184T", "K, M, G, T"); /* overflows */
    refused("read_buffer_bytes", "256", "between 512 and 268435456");
    refused("layout", "NHWC", "one of nchw,nhwc");
    refused("transform", "", "one of none,train,eval");
    refused("on_error", "ignore", "one of fail,skip");
    refused("mean", "0.5,0.5", "3 finite numbers");
    refused("mean", "0.5,0.5,0.5,0.5", "3 finite numbers");
    refused("flip_probability", "half", "a finite number");
    refused("ratio_min", "1/0", "a finite number");
    /* strtod takes these; no option has a use for them, and a nan passes
     * every range check written as a comparison */
    refused("hue_jitter", "nan", "a finite number");
    refused("mixup_alpha", "inf", "a finite number");
    refused("scale_min", "-infinity", "a finite number");
    refused("color_jitter", "1e39", "a finite number"); /* overflows a float */
    refused("mean", "0.5,nan,0.5", "3 finite numbers");
    refused("drop_last", "2", "0 or 1");
    struct stk_options o;
    stk_options_init(&o);
    char msg[512];
    assert_int_equal(stk_options_set(&o, "shuffel", "0", msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "unknown option 'shuffel'");
    assert_int_equal(stk_options_set(&o, "batch_size", NULL, msg, sizeof msg), STK_EINVAL);
    char words[128];
    assert_true(stk_option_describe(stk_option_find("io_retries"), words, sizeof words) > 0);
    assert_string_equal(words, "between 0 and 1000");
}

/* A C caller that fills the struct by hand meets the same ranges. */
/* The one reader of counts and sizes ("4G"), the stoker command's too. */
static void test_parse_count(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(stk_parse_count("4G", 1, &v), 0);
    assert_int_equal(v, (uint64_t)4 << 30);
    assert_int_equal(stk_parse_count("3Ki", 1, &v), 0);
    assert_int_equal(v, 3072);
    assert_int_equal(stk_parse_count("2MB", 1, &v), 0);
    assert_int_equal(v, (uint64_t)2 << 20);
    assert_int_equal(stk_parse_count("18446744073709551615", 0, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    const char *bad[] = {"", "-1", " 1", "+1", "1X", "4G", "18446744073709551616", "1.5", NULL};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(stk_parse_count(bad[i], 0, &v), STK_EINVAL);
    const char *bad_sizes[] = {"16777216T", "4Gx", "G", "4 G", "3kib"};
    for (size_t i = 0; i < sizeof bad_sizes / sizeof bad_sizes[0]; i++)
        assert_int_equal(stk_parse_count(bad_sizes[i], 1, &v), STK_EINVAL);
    assert_int_equal(v, 7); /* unchanged by a failure */
}

static void test_create_checks_the_table(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    o.threads = 5000;
    const char *urls[] = {shard};
    stk_loader *l;
    char msg[512];
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_null(l);
    assert_contains(msg, "threads must be between 1 and 1024, not 5000");
    stk_options_init(&o);
    o.layout = (enum stk_layout)7;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "layout must be one of nchw,nhwc");
    stk_options_init(&o);
    o.hue_jitter = NAN; /* set by hand: no text parser saw it */
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "hue_jitter must be a finite number, not nan");
    stk_options_init(&o);
    o.std[2] = INFINITY;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "std must be 3 finite numbers, not inf");
    stk_options_init(&o);
    o.threads = 0;
    struct stk_stats s;
    assert_int_equal(stk_verify(&o, urls, 1, &s, msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "threads");
}

/* An option that acts only beside another is refused without it, named
 * with what it needs; its default, or the recipe's own values, are not. */
static void test_create_refuses_an_option_it_would_ignore(void **state)
{
    (void)state;
    const char *urls[] = {shard};
    stk_loader *l;
    char msg[512];
    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_EVAL;
    o.scale_min = 0.5f;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_null(l);
    assert_contains(msg, "scale_min is set but acts only with transform=train");
    o.transform = STK_TRANSFORM_TRAIN;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), 0);
    stk_loader_destroy(l);
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_EVAL;
    o.recipe = STK_RECIPE_TORCHVISION_V2; /* fills in train-only values itself */
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), 0);
    stk_loader_destroy(l);
    stk_options_init(&o);
    o.cache_size = 1 << 20;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINVAL);
    assert_contains(msg, "cache_size is set but acts only with cache_dir");
    assert_string_equal(stk_option_needs(stk_option_find("cache_size")), "cache_dir");
    assert_null(stk_option_needs(stk_option_find("batch_size")));
}

/* Every failing call leaves a message, whatever fails. */
static void test_failures_always_have_a_message(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    char msg[512], missing[300];
    snprintf(missing, sizeof missing, "%s/missing-000000.tar", dir);
    const char *urls[] = {missing};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_ENOENT);
    assert_contains(msg, missing);
    struct stk_stats s;
    assert_true(stk_verify(&o, urls, 0, &s, msg, sizeof msg) < 0); /* no shards */
    assert_true(msg[0] != '\0');
    stk_writer *w;
    assert_int_equal(stk_writer_create("no-number.tar", 1, 1, 0, &w, msg, sizeof msg), STK_EINVAL);
    assert_true(msg[0] != '\0');
    /* under skip, a missing shard is found by a reader: next() says which */
    o.on_error = STK_ON_ERROR_SKIP;
    const char *both[] = {shard, missing};
    o.rank = 0;
    o.world_size = 1;
    assert_int_equal(stk_loader_create(&o, both, 2, &l, msg, sizeof msg), 0);
    struct stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 0)
        stk_batch_release(b);
    assert_int_equal(rc, STK_EOF);
    assert_true(stk_loader_errmsg(l)[0] != '\0');
    stk_loader_destroy(l);
}

/* stk_loader_create failing at its Nth allocation, with every part a
 * loader may own (image ring, cache, index-less plan): an error with a
 * message each time and nothing leaked (ASan), until it succeeds. */
static void test_create_allocation_failures(void **state)
{
    (void)state;
    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_EVAL;
    o.image_size = 16;
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    o.cache_dir = cache;
    o.cache_size = 1 << 20;
    o.rank = 0;
    o.world_size = 1;
    const char *urls[] = {shard};
    int failures = 0;
    for (unsigned long n = 1; n < 10000; n++) {
        stk_loader *l = NULL;
        char msg[512] = "";
        stk__alloc_fail_after(n);
        int rc = stk_loader_create(&o, urls, 1, &l, msg, sizeof msg);
        stk__alloc_fail_after(0);
        if (rc == 0) {
            stk_loader_destroy(l);
            break;
        }
        assert_null(l);
        if (msg[0] == '\0')
            fail_msg("allocation %lu: error %d without a message", n, rc);
        failures++;
    }
    assert_true(failures > 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_come_from_the_table),
        cmocka_unit_test(test_values_by_name),
        cmocka_unit_test(test_bad_values_name_the_option),
        cmocka_unit_test(test_create_checks_the_table),
        cmocka_unit_test(test_parse_count),
        cmocka_unit_test(test_create_refuses_an_option_it_would_ignore),
        cmocka_unit_test(test_failures_always_have_a_message),
        cmocka_unit_test(test_create_allocation_failures),
    };
    return cmocka_run_group_tests_name("options", tests, setup, teardown);
}
