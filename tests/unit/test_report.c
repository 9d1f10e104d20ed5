/* SPDX-License-Identifier: MIT */
/*
 * test_report.c - the input-bound report (stk_stats_report) on made-up
 * counters: the verdict follows the waiting share and the busiest stage.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "stoker.h"

#define SECOND 1000000000ull

/* 10 s of a loader with 4 image threads and 2 readers, all idle. */
static struct stk_stats idle_loader(void)
{
    struct stk_stats s;
    memset(&s, 0, sizeof s);
    s.wall_ns = 10 * SECOND;
    s.batches = 100;
    s.samples = s.samples_read = s.images_decoded = 6400;
    s.bytes_read = 640000000;
    s.read_threads = 2;
    s.decode_threads = 4;
    return s;
}

static void report(const struct stk_stats *s, char *buf, size_t size)
{
    size_t n = stk_stats_report(s, buf, size);
    assert_int_equal(n, strlen(buf));
    assert_true(n > 0 && buf[n - 1] == '\n');
}

static void assert_contains(const char *text, const char *part)
{
    if (strstr(text, part) == NULL)
        fail_msg("\"%s\" not in:\n%s", part, text);
}

static void test_nothing_yet(void **state)
{
    (void)state;
    struct stk_stats s;
    memset(&s, 0, sizeof s);
    char buf[512];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "no batches delivered yet");
}

/* Skipped input gets a line when there is any, and none otherwise. */
static void test_bad_input_line(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    char buf[2048];
    report(&s, buf, sizeof buf);
    assert_null(strstr(buf, "bad input"));
    s.samples_skipped = 7;
    s.images_replaced = 2;
    s.shards_failed = 1;
    report(&s, buf, sizeof buf);
    assert_contains(buf, "bad input skipped: 7 samples (2 images replaced), 1 shard cut short");
}

/* The node cache gets a line with the epoch's hits, misses and origin
 * bytes when it was used, and none otherwise. */
static void test_cache_line(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    char buf[2048];
    report(&s, buf, sizeof buf);
    assert_null(strstr(buf, "node cache"));
    s.cache_hits = 40;
    s.cache_misses = 10;
    s.cache_evictions = 3;
    s.cache_epoch_hits = 9;
    s.cache_epoch_misses = 1;
    s.cache_epoch_origin_bytes = 2500000;
    report(&s, buf, sizeof buf);
    assert_contains(buf, "node cache this epoch: 9 hits, 1 miss (90% hits), 2.5 MB from the "
                         "origin; run: 40 hits, 10 misses, 3 evictions");
}

static void test_not_input_bound(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.wait_ns = SECOND / 25; /* 0.4% */
    s.decode_ns = 39 * SECOND; /* decoding saturated, yet the caller never waits */
    char buf[1024];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "not input-bound: the caller waited for batches 0% of 10.00 s");
    assert_contains(buf, "(640 samples/s delivered)");
    assert_contains(buf, "image decoding: 4 threads 98% busy");
    assert_contains(buf, "verdict: the consumer, not the input, sets the pace");
}

static void test_decode_bound(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.wait_ns = 6 * SECOND;
    s.decode_ns = 36 * SECOND; /* 90% of 4 threads */
    s.image_decode_ns = 6400ull * 1000000; /* 1 ms per image */
    s.image_resample_ns = 6400ull * 200000;
    s.image_convert_ns = 6400ull * 100000;
    s.read_ns = 12 * SECOND; /* 60% of 2 */
    char buf[1024];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "input-bound: the caller waited for batches 60% of 10.00 s");
    assert_true(strstr(buf, "not input-bound") == NULL);
    assert_contains(buf, "reading: 2 threads 60% busy, 1.875 ms per sample");
    assert_contains(buf, "per image 1.000 ms decode, 0.200 ms resample, 0.100 ms convert");
    assert_contains(buf, "verdict: image decoding is the limit");
    assert_true(strstr(buf, "augmentations") == NULL); /* none ran */
    s.image_augment_ns = 6400ull * 300000;
    s.image_erase_ns = 6400ull * 10000;
    s.batch_mix_ns = 6400ull * 50000;
    report(&s, buf, sizeof buf);
    assert_contains(buf, "augmentations: per image 0.300 ms crop ops, 0.010 ms random "
                         "erasing, 0.050 ms Mixup/CutMix");
    assert_true(strstr(buf, "per run") == NULL); /* no op counted */
    s.aug_rotate_ns = 640ull * 200000; /* a tenth of the images, 0.2 ms each */
    s.aug_rotate_runs = 640;
    s.aug_hue_ns = 6400ull * 90000;
    s.aug_hue_runs = 6400;
    report(&s, buf, sizeof buf);
    assert_contains(buf, "  Rotate: 0.200 ms per run, 0.10 runs per image, 0.020 ms per image\n");
    assert_contains(buf, "  Hue: 0.090 ms per run, 1.00 runs per image, 0.090 ms per image\n");
    assert_true(strstr(buf, "ShearX") == NULL); /* ops that never ran are left out */
}

static void test_read_bound(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.wait_ns = 8 * SECOND;
    s.decode_ns = 20 * SECOND; /* 50% */
    s.read_ns = 19 * SECOND;   /* 95% */
    char buf[1024];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "reading: 2 threads 95% busy, 2.969 ms per sample, 64.0 MB/s read");
    assert_contains(buf, "verdict: reading is the limit");
}

static void test_batching_bound(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.decode_threads = 0; /* raw samples: no image line */
    s.wait_ns = 9 * SECOND;
    s.read_ns = 10 * SECOND;
    s.sequence_ns = 9 * SECOND;
    char buf[1024];
    report(&s, buf, sizeof buf);
    assert_true(strstr(buf, "image decoding") == NULL);
    assert_contains(buf, "batching (interleave, shuffle, assemble): 1 thread 90% busy");
    assert_contains(buf, "verdict: batching is the limit");
}

static void test_starved(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.wait_ns = 5 * SECOND;
    s.decode_ns = 20 * SECOND;
    s.read_ns = 10 * SECOND;
    s.sequence_ns = SECOND;
    char buf[1024];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "verdict: no stage is saturated");
}

/* snprintf's contract: the full length back, the buffer cut and terminated. */
static void test_small_buffers(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.wait_ns = 6 * SECOND;
    char full[1024], cut[16];
    size_t n = stk_stats_report(&s, full, sizeof full);
    memset(cut, 'x', sizeof cut);
    assert_int_equal(stk_stats_report(&s, cut, sizeof cut), n);
    assert_int_equal(strlen(cut), sizeof cut - 1);
    assert_memory_equal(cut, full, sizeof cut - 1);
    assert_int_equal(stk_stats_report(&s, NULL, 0), n);
}

/* Rates over an interval are the differences over its wall time; thread
 * counts come from the later snapshot. */
static void test_rates_between_snapshots(void **state)
{
    (void)state;
    struct stk_stats a = idle_loader(), b = idle_loader();
    b.wall_ns += 2 * SECOND;
    b.samples += 1000;
    b.images_decoded += 500;
    b.wait_ns = a.wait_ns + SECOND;
    b.read_ns = a.read_ns + 2 * SECOND;     /* 2 readers for 2 s: 50% */
    b.decode_ns = a.decode_ns + 4 * SECOND; /* 4 threads for 2 s: 50% */
    b.sequence_ns = a.sequence_ns + SECOND / 2;
    struct stk_rates r;
    stk_stats_rates(&b, &a, &r);
    assert_true(r.seconds == 2.0);
    assert_true(r.samples_per_s == 500.0 && r.images_per_s == 250.0);
    assert_true(r.wait_share == 0.5 && r.read_busy == 0.5 && r.decode_busy == 0.5);
    assert_true(r.batching_busy == 0.25);
    /* No time between them: zeros, no division by zero. */
    stk_stats_rates(&a, &a, &r);
    assert_true(r.seconds == 0 && r.samples_per_s == 0);
}

/* k_eff is the pooled pair ratio; the perfect shuffle's comes from the
 * shard sizes seen, scaled to the epoch's shards; a poor one gets the hint
 * naming the options that raise it. */
static void test_shuffle_quality(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    struct stk_rates r;
    stk_stats_rates(&s, NULL, &r);
    assert_true(r.shuffle_k_eff == 0 && r.shuffle_k_perfect == 0);
    s.shuffle_pairs = 100 * 64 * 63;
    s.shuffle_shard_pairs = 100 * 64 * 63 / 4; /* four shards per batch, evenly */
    s.shuffle_epoch_shards = 100;
    s.shuffle_shards_sized = 10; /* of 64 samples each */
    s.shuffle_sized_samples = 640;
    s.shuffle_sized_pairs = 10 * 64 * 63;
    stk_stats_rates(&s, NULL, &r);
    assert_true(r.shuffle_k_eff == 4.0);
    /* 100 shards of 64: N = 6400, k = 6400 * 6399 / (100 * 64 * 63) */
    assert_true(fabs(r.shuffle_k_perfect - 6400.0 * 6399 / (100.0 * 64 * 63)) < 1e-9);
    char buf[2048];
    report(&s, buf, sizeof buf);
    assert_contains(buf, "batches mix 4.0 shards (k_eff); a perfect shuffle of the epoch: 101.6");
    assert_contains(buf, "raise shards_in_flight");
    assert_contains(buf, "shuffle_buffer");
    /* Close to perfect: no hint. */
    s.shuffle_shard_pairs = s.shuffle_pairs / 100;
    report(&s, buf, sizeof buf);
    assert_true(strstr(buf, "hint:") == NULL);
    /* No two samples of a batch from one shard. */
    s.shuffle_shard_pairs = 0;
    stk_stats_rates(&s, NULL, &r);
    assert_true(isinf(r.shuffle_k_eff));
    report(&s, buf, sizeof buf);
    assert_contains(buf, "no two samples of a batch came from the same shard");
}

/* Label mixing: the pair ratio over labels against a uniform permutation
 * of the labels seen; shards mixed perfectly can still be class-sorted, and
 * the hint says so and names the fix. */
static void test_label_mixing(void **state)
{
    (void)state;
    struct stk_stats s = idle_loader();
    s.shuffle_pairs = 100 * 64 * 63; /* shards: mixed perfectly */
    s.shuffle_shard_pairs = s.shuffle_pairs / 100;
    s.shuffle_epoch_shards = 100;
    s.shuffle_shards_sized = 10;
    s.shuffle_sized_samples = 640;
    s.shuffle_sized_pairs = 10 * 64 * 63;
    char buf[2048];
    report(&s, buf, sizeof buf);
    assert_true(strstr(buf, "labels:") == NULL); /* no labels counted: no line */
    /* 100 batches of 64, each of 4 labels evenly (16 each); 6400 samples of
     * 32 labels, 200 each: a uniform shuffle mixes 6400*6399/(32*200*199). */
    s.label_pairs = 100 * 64 * 63;
    s.label_same_pairs = 100 * 4 * 16 * 15;
    s.label_distinct = 100 * 4;
    s.label_batches = 100;
    s.label_samples = 6400;
    s.label_sample_pairs = 32 * 200 * 199;
    struct stk_rates r;
    stk_stats_rates(&s, NULL, &r);
    assert_true(fabs(r.label_mix_eff - 64.0 * 63 / (4.0 * 16 * 15)) < 1e-9);
    assert_true(fabs(r.label_mix_perfect - 6400.0 * 6399 / (32.0 * 200 * 199)) < 1e-9);
    assert_true(r.labels_per_batch == 4.0);
    report(&s, buf, sizeof buf);
    assert_contains(buf, "labels: 4.0 distinct per batch; batches mix 4.2 labels (L_eff); a "
                         "uniform shuffle of the labels seen: 32.2");
    assert_contains(buf, "hint: batches mix labels poorly");
    assert_contains(buf, "stoker reshard --shuffle");
    /* Mixed like a permutation: no hint. */
    s.label_same_pairs = (uint64_t)(100 * 64 * 63 / 31.0);
    s.label_distinct = 100 * 28;
    report(&s, buf, sizeof buf);
    assert_contains(buf, "labels: 28.0 distinct per batch");
    assert_true(strstr(buf, "hint:") == NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rates_between_snapshots), cmocka_unit_test(test_shuffle_quality),
        cmocka_unit_test(test_nothing_yet),    cmocka_unit_test(test_not_input_bound),
        cmocka_unit_test(test_bad_input_line),
        cmocka_unit_test(test_cache_line),
        cmocka_unit_test(test_decode_bound),   cmocka_unit_test(test_read_bound),
        cmocka_unit_test(test_batching_bound), cmocka_unit_test(test_starved),
        cmocka_unit_test(test_small_buffers),   cmocka_unit_test(test_label_mixing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
