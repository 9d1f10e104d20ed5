/* SPDX-License-Identifier: MIT */
/*
 * test_ranges.c - stk_loader_seek_range: any range of batches, made by any
 * loader in any order, holds exactly the batches (pixels, labels and the
 * bad input they account for) of an uninterrupted epoch, and a range that
 * follows the previous one continues it without reading anything again.
 * The shards hold every kind of bad input the skip policy meets, at a
 * shard's start, middle and end. Also built with ThreadSanitizer.
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

#include "jpeg_fixture.h"
#include "stoker.h"
#include "tar_builder.h"

#define N_SHARDS 8
#define MAX_BATCHES 64
#define MAX_MEMBERS 3
#define MAX_KEY 40

static char dir[64];
static char pattern[128];
static char index_path[128];
static int label = 0;

static void add_image(struct tar_builder *tb, const char *key)
{
    unsigned char *jpeg;
    size_t size;
    jpeg_fixture(30 + 9 * (label % 4), 28 + 5 * (label % 3), (unsigned)label, &jpeg, &size);
    char name[128], text[16];
    snprintf(name, sizeof name, "%s.jpg", key);
    tb_file(tb, name, jpeg, size);
    free(jpeg);
    snprintf(name, sizeof name, "%s.cls", key);
    int n = snprintf(text, sizeof text, "%d", label++);
    tb_file(tb, name, text, (size_t)n);
}

static void add_good(struct tar_builder *tb, int shard, int n)
{
    for (int i = 0; i < n; i++) {
        char key[32];
        snprintf(key, sizeof key, "s%d-%03d", shard, label);
        add_image(tb, key);
    }
}

/* Bad samples of three kinds the shard reader drops: a member name above
 * max_key_bytes, a member twice in one sample, too many members. */
static void add_bad(struct tar_builder *tb, int shard, int kind)
{
    char key[32], name[160];
    snprintf(key, sizeof key, "bad%d-%d-%d", shard, kind, label++);
    if (kind == 0) {
        snprintf(name, sizeof name, "%s-%050d.jpg", key, 0);
        tb_file(tb, name, "x", 1);
    } else if (kind == 1) {
        snprintf(name, sizeof name, "%s.jpg", key);
        tb_file(tb, name, "x", 1);
        tb_file(tb, name, "y", 1);
    } else {
        static const char *const exts[] = {"a", "b", "c", "d"};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "%s.%s", key, exts[i]);
            tb_file(tb, name, "z", 1);
        }
    }
}

static void write_shard(int shard, struct tar_builder *tb, size_t cut)
{
    char path[128];
    snprintf(path, sizeof path, "%s/shard-%d.tar", dir, shard);
    tb_finish(tb);
    size_t size = cut > 0 ? cut : tb->size;
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(tb->data, 1, size, f) != size || fclose(f) != 0)
        abort();
    tb_free(tb);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-ranges-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    struct tar_builder tb = {0};
    /* 0: bad samples first, in the middle and last. */
    add_bad(&tb, 0, 0);
    add_good(&tb, 0, 6);
    add_bad(&tb, 0, 1);
    add_bad(&tb, 0, 2);
    add_good(&tb, 0, 4);
    add_bad(&tb, 0, 2);
    write_shard(0, &tb, 0);
    /* 1, 4, 6: a bad sample early on, so that resumed readers open them
     * past it. */
    add_good(&tb, 1, 2);
    add_bad(&tb, 1, 1);
    add_good(&tb, 1, 11);
    write_shard(1, &tb, 0);
    /* 2: no good sample at all. */
    add_bad(&tb, 2, 0);
    add_bad(&tb, 2, 1);
    write_shard(2, &tb, 0);
    /* 3: cut inside a member: the rest of the shard is skipped. */
    add_good(&tb, 3, 7);
    size_t cut = tb.size + 700;
    add_good(&tb, 3, 3);
    write_shard(3, &tb, cut);
    add_good(&tb, 4, 1);
    add_bad(&tb, 4, 2);
    add_good(&tb, 4, 10);
    write_shard(4, &tb, 0);
    /* 5: an image that does not decode, replaced in its batch. */
    add_good(&tb, 5, 4);
    tb_file(&tb, "broken.jpg", "not a jpeg", 10);
    tb_file(&tb, "broken.cls", "99", 2);
    add_good(&tb, 5, 5);
    write_shard(5, &tb, 0);
    add_good(&tb, 6, 3);
    add_bad(&tb, 6, 0);
    add_good(&tb, 6, 6);
    write_shard(6, &tb, 0);
    /* 7: a key that comes back after others (unordered shard). */
    add_good(&tb, 7, 3);
    char again[32];
    snprintf(again, sizeof again, "s7-%03d", label - 2);
    add_image(&tb, again);
    add_good(&tb, 7, 2);
    add_bad(&tb, 7, 1); /* the last bad sample of an unshuffled epoch */
    write_shard(7, &tb, 0);
    snprintf(pattern, sizeof pattern, "%s/shard-{0..%d}.tar", dir, N_SHARDS - 1);
    snprintf(index_path, sizeof index_path, "%s/index.json", dir);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char path[128];
    for (int i = 0; i < N_SHARDS; i++) {
        snprintf(path, sizeof path, "%s/shard-%d.tar", dir, i);
        unlink(path);
    }
    unlink(index_path);
    rmdir(dir);
    return 0;
}

static struct stk_options range_options(int shuffle)
{
    struct stk_options o;
    stk_options_init(&o);
    o.rank = 0;
    o.world_size = 1;
    o.transform = STK_TRANSFORM_TRAIN;
    o.image_size = 16;
    o.batch_size = 5;
    o.threads = 2;
    o.shards_in_flight = 3;
    o.shuffle = shuffle;
    if (shuffle) /* a window without shuffling is refused */
        o.shuffle_buffer = 16;
    o.seed = 7;
    o.epoch = 3;
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_members_per_sample = MAX_MEMBERS;
    o.max_key_bytes = MAX_KEY;
    return o;
}

/* What identifies a delivered batch. */
struct batch_record {
    uint64_t pixels; /* FNV-1a of the image bytes */
    int64_t labels[8];
    size_t n;
    uint64_t skipped, replaced, shards_failed;
};

static uint64_t fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static void record(const struct stk_batch *b, struct batch_record *r)
{
    assert_true(b->n_samples <= 8);
    r->pixels = fnv(b->images, b->n_samples * b->image_bytes);
    memcpy(r->labels, b->labels, b->n_samples * sizeof *b->labels);
    r->n = b->n_samples;
    r->skipped = b->samples_skipped;
    r->replaced = b->images_replaced;
    r->shards_failed = b->shards_failed;
}

static void assert_same_batch(const struct batch_record *want, const struct stk_batch *b,
                              uint64_t index)
{
    struct batch_record got;
    record(b, &got);
    if (got.n != want->n || got.pixels != want->pixels ||
        memcmp(got.labels, want->labels, got.n * sizeof *got.labels) != 0 ||
        got.skipped != want->skipped || got.replaced != want->replaced ||
        got.shards_failed != want->shards_failed)
        fail_msg("batch %llu differs: n %zu/%zu, pixels %llx/%llx, skipped %llu/%llu, "
                 "replaced %llu/%llu, shards_failed %llu/%llu",
                 (unsigned long long)index, got.n, want->n, (unsigned long long)got.pixels,
                 (unsigned long long)want->pixels, (unsigned long long)got.skipped,
                 (unsigned long long)want->skipped, (unsigned long long)got.replaced,
                 (unsigned long long)want->replaced, (unsigned long long)got.shards_failed,
                 (unsigned long long)want->shards_failed);
}

struct full_epoch {
    struct batch_record batches[MAX_BATCHES];
    uint64_t n;
    struct stk_stats stats;
};

static stk_loader *create(const struct stk_options *o)
{
    const char *urls[] = {pattern};
    stk_loader *l;
    char msg[512];
    if (stk_loader_create(o, urls, 1, &l, msg, sizeof msg) < 0)
        fail_msg("stk_loader_create: %s", msg);
    return l;
}

static void run_full(const struct stk_options *o, struct full_epoch *e)
{
    stk_loader *l = create(o);
    memset(e, 0, sizeof *e);
    struct stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_int_equal(b->index, e->n);
        assert_true(e->n < MAX_BATCHES);
        record(b, &e->batches[e->n++]);
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    stk_loader_stats(l, &e->stats);
    stk_loader_destroy(l);
}

/* Take l's batches to the end of what was sought, each the same as e's
 * batch *index, *index counting on. */
static void take_same_until_eof(stk_loader *l, const struct full_epoch *e, uint64_t *index)
{
    struct stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_same_batch(&e->batches[*index], b, *index);
        (*index)++;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
}

/* Every kind of bad input is charged to exactly one batch. */
static void check_charges_add_up(const struct full_epoch *e)
{
    uint64_t skipped = 0, replaced = 0, failed = 0;
    for (uint64_t i = 0; i < e->n; i++) {
        skipped += e->batches[i].skipped;
        replaced += e->batches[i].replaced;
        failed += e->batches[i].shards_failed;
    }
    assert_int_equal(skipped, e->stats.samples_skipped);
    assert_int_equal(replaced, e->stats.images_replaced);
    assert_int_equal(failed, e->stats.shards_failed);
    /* The shards hold 10 bad samples, a key that comes back, a sample cut
     * short with its shard, and a broken image. */
    assert_int_equal(e->stats.images_replaced, 1);
    assert_int_equal(e->stats.shards_failed, 1);
    assert_int_equal(e->stats.samples_skipped, 10 + 1 + 1 + 1);
}

/* Ranges of m batches taken in a scrambled order by one loader, which
 * restarts for each (another process would do the same). */
static void check_ranges(const struct stk_options *o, const struct full_epoch *e, uint64_t m)
{
    stk_loader *l = create(o);
    uint64_t ranges = (e->n + m - 1) / m;
    for (uint64_t k = 0; k < ranges; k++) {
        uint64_t r = (k * 5 + 3) % ranges; /* 5 is prime to every count used here */
        if (ranges % 5 == 0)
            r = ranges - 1 - k;
        uint64_t first = r * m;
        assert_int_equal(stk_loader_seek_range(l, o->epoch, first, m), 0);
        struct stk_batch *b;
        uint64_t index = first;
        int rc;
        while ((rc = stk_loader_next(l, &b)) == 0) {
            assert_int_equal(b->index, index);
            assert_same_batch(&e->batches[index], b, index);
            index++;
            stk_batch_release(b);
        }
        assert_int_equal(rc, STK_EOF);
        assert_int_equal(index, first + m < e->n ? first + m : e->n);
    }
    stk_loader_destroy(l);
}

static void build_index(const struct stk_options *o)
{
    const char *urls[] = {pattern};
    char msg[512];
    if (stk_index_build(o, urls, 1, index_path, STK_OUTPUT_OVERWRITE, NULL, msg, sizeof msg) < 0)
        fail_msg("stk_index_build: %s", msg);
}

static void test_ranges_equal_the_epoch(void **state)
{
    (void)state;
    for (int shuffle = 0; shuffle < 2; shuffle++) {
        struct stk_options o = range_options(shuffle);
        struct full_epoch full;
        run_full(&o, &full);
        check_charges_add_up(&full);
        assert_true(full.n >= 10);
        build_index(&o);
        for (int with_index = 0; with_index < 2; with_index++) {
            o.index_path = with_index ? index_path : NULL;
            struct full_epoch again;
            run_full(&o, &again); /* the index changes nothing */
            assert_int_equal(again.n, full.n);
            for (uint64_t i = 0; i < full.n; i++)
                assert_memory_equal(&again.batches[i], &full.batches[i], sizeof full.batches[i]);
            for (uint64_t m = 1; m <= 4; m++)
                check_ranges(&o, &full, m);
        }
    }
}

/* Consecutive ranges continue one pipeline: every shard is opened once and
 * no sample is read twice; and nothing past a range is decoded. */
static void test_consecutive_ranges_continue(void **state)
{
    (void)state;
    struct stk_options o = range_options(1);
    struct full_epoch full;
    run_full(&o, &full);
    stk_loader *l = create(&o);
    uint64_t index = 0;
    const uint64_t m = 3;
    for (uint64_t first = 0; first < full.n; first += m) {
        assert_int_equal(stk_loader_seek_range(l, o.epoch, first, m), 0);
        take_same_until_eof(l, &full, &index);
        assert_int_equal(index, first + m < full.n ? first + m : full.n);
        if (first == 0) {
            struct stk_stats st;
            stk_loader_stats(l, &st);
            assert_int_equal(st.images_decoded, m * o.batch_size);
        }
    }
    struct stk_stats st;
    stk_loader_stats(l, &st);
    assert_int_equal(st.shards_opened, full.stats.shards_opened);
    assert_int_equal(st.samples_read, full.stats.samples_read);
    assert_int_equal(st.samples_skipped, full.stats.samples_skipped);
    stk_loader_destroy(l);
}

/* A range past the end is empty; n_batches 0 runs to the epoch's end. */
static void test_range_edges(void **state)
{
    (void)state;
    struct stk_options o = range_options(1);
    struct full_epoch full;
    run_full(&o, &full);
    stk_loader *l = create(&o);
    struct stk_batch *b;
    assert_int_equal(stk_loader_seek_range(l, o.epoch, full.n + 3, 2), 0);
    assert_int_equal(stk_loader_next(l, &b), STK_EOF);
    assert_int_equal(stk_loader_seek_range(l, o.epoch, full.n - 2, 0), 0);
    uint64_t index = full.n - 2;
    while (stk_loader_next(l, &b) == 0) {
        assert_same_batch(&full.batches[index], b, index);
        index++;
        stk_batch_release(b);
    }
    assert_int_equal(index, full.n);
    /* A range that does not follow the last one restarts at its start. */
    assert_int_equal(stk_loader_seek_range(l, o.epoch, 1, 1), 0);
    assert_int_equal(stk_loader_next(l, &b), 0);
    assert_same_batch(&full.batches[1], b, 1);
    stk_batch_release(b);
    assert_int_equal(stk_loader_next(l, &b), STK_EOF);
    stk_loader_destroy(l);
}

/* stk_loader_start() reads before any batch is asked for, and the calls
 * that follow continue its threads: the same batches, every shard opened
 * once, no sample read twice (issue 35: the first window is read while the
 * caller builds its model). Also after a seek to a later batch. */
static void test_start_reads_ahead_and_next_continues(void **state)
{
    (void)state;
    struct stk_options o = range_options(1);
    struct full_epoch full;
    run_full(&o, &full);
    for (uint64_t first = 0; first <= 2; first += 2) {
        stk_loader *l = create(&o);
        assert_int_equal(stk_loader_seek_range(l, o.epoch, first, 0), 0);
        assert_int_equal(stk_loader_start(l), 0);
        assert_int_equal(stk_loader_start(l), 0); /* started already: nothing more */
        struct stk_stats st;
        for (int waited_ms = 0;; waited_ms += 10) { /* 30 s: a loaded machine, never a hang */
            stk_loader_stats(l, &st);
            if (st.samples_read > 0)
                break;
            if (waited_ms >= 30000)
                fail_msg("nothing read 30 s after stk_loader_start()");
            usleep(10000);
        }
        assert_int_equal(st.batches, 0);
        assert_int_equal(stk_loader_seek_range(l, o.epoch, first, 0), 0); /* kept */
        uint64_t index = first;
        take_same_until_eof(l, &full, &index);
        assert_int_equal(index, full.n);
        stk_loader_stats(l, &st);
        if (first == 0) {
            assert_int_equal(st.shards_opened, full.stats.shards_opened);
            assert_int_equal(st.samples_read, full.stats.samples_read);
        }
        stk_loader_destroy(l);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranges_equal_the_epoch),
        cmocka_unit_test(test_consecutive_ranges_continue),
        cmocka_unit_test(test_range_edges),
        cmocka_unit_test(test_start_reads_ahead_and_next_continues),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
