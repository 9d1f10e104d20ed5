/* SPDX-License-Identifier: MIT */
/*
 * test_pipeline.c - the loader end to end over shards in a temporary
 * directory: order, determinism, ranks, budgets, shutdown, allocation
 * failures. Also built with ThreadSanitizer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "options_fixture.h"
#include "stoker.h"
#include "tar_builder.h"

static char dir[64];
/* Shard sizes are uneven on purpose: ranks see different sample counts. */
static const int shard_sizes[] = {10, 3, 17, 1, 12, 8, 20, 5, 9, 14, 6};
#define N_SHARDS (sizeof shard_sizes / sizeof shard_sizes[0])
static int total_samples;
static char pattern[128];

static uint64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-pipeline-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    int first = 0;
    for (size_t i = 0; i < N_SHARDS; i++) {
        char path[128];
        snprintf(path, sizeof path, "%s/shard-%02zu.tar", dir, i);
        tb_write_shard(path, "s", first, shard_sizes[i]);
        first += shard_sizes[i];
    }
    total_samples = first;
    snprintf(pattern, sizeof pattern, "%s/shard-{00..%02zu}.tar", dir, N_SHARDS - 1);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path) == 0 ? 0 : -1;
}

/* The whole directory, also what a failed test left in it. */
static int teardown(void **state)
{
    (void)state;
    return nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) == 0 ? 0 : -1;
}

/* The sample numbers (from the .cls member) of one epoch, in order. */
struct epoch {
    int ids[1024];
    int n;
    int batches;
    size_t last_batch;
};

static int run_epoch_of(const char *url, const struct stk_options *o, struct epoch *e)
{
    const char *urls[] = {url};
    stk_loader *l;
    char msg[512];
    int rc = stk_loader_create(o, urls, 1, &l, msg, sizeof msg);
    if (rc < 0)
        return rc;
    memset(e, 0, sizeof *e);
    struct stk_batch *b;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        for (size_t i = 0; i < b->n_samples; i++) {
            const struct stk_sample *s = &b->samples[i];
            assert_int_equal(s->n_members, 2);
            assert_string_equal(s->members[1].ext, "cls");
            if (e->n < 1024)
                e->ids[e->n] = atoi((const char *)s->members[1].data);
            e->n++;
        }
        e->batches++;
        e->last_batch = b->n_samples;
        stk_batch_release(b);
    }
    stk_loader_destroy(l);
    return rc == STK_EOF ? 0 : rc;
}

static int run_epoch(const struct stk_options *o, struct epoch *e)
{
    return run_epoch_of(pattern, o, e);
}

static struct stk_options base_options(void)
{
    struct stk_options o;
    stk_options_init(&o);
    o.rank = 0;
    o.world_size = 1;
    o.batch_size = 7;
    o.shuffle_buffer = 20;
    o.seed = 42;
    return o;
}

static void test_storage_order(void **state)
{
    (void)state;
    static const unsigned threads[] = {1, 2, 8};
    static const unsigned in_flight[] = {1, 3, 4};
    for (size_t t = 0; t < 3; t++) {
        for (size_t k = 0; k < 3; k++) {
            struct stk_options o = base_options();
            o = storage_order(o);
            o.threads = threads[t];
            o.shards_in_flight = in_flight[k];
            struct epoch e;
            assert_int_equal(run_epoch(&o, &e), 0);
            assert_int_equal(e.n, total_samples);
            for (int i = 0; i < e.n; i++)
                assert_int_equal(e.ids[i], i);
        }
    }
}

static void test_same_order_for_any_thread_count(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    o.threads = 1;
    struct epoch one, other;
    assert_int_equal(run_epoch(&o, &one), 0);
    assert_int_equal(one.n, total_samples);
    static const unsigned threads[] = {2, 8};
    for (size_t t = 0; t < 2; t++) {
        for (int repeat = 0; repeat < 3; repeat++) {
            o.threads = threads[t];
            assert_int_equal(run_epoch(&o, &other), 0);
            assert_int_equal(other.n, one.n);
            assert_memory_equal(one.ids, other.ids, sizeof(int) * (size_t)one.n);
        }
    }
    /* Every sample exactly once, and actually shuffled. */
    int seen[1024] = {0}, in_place = 0;
    for (int i = 0; i < one.n; i++) {
        seen[one.ids[i]]++;
        in_place += one.ids[i] == i;
    }
    for (int i = 0; i < total_samples; i++)
        assert_int_equal(seen[i], 1);
    assert_true(in_place < total_samples / 4);
    /* Another epoch or seed gives another order. */
    o.epoch = 1;
    assert_int_equal(run_epoch(&o, &other), 0);
    assert_memory_not_equal(one.ids, other.ids, sizeof(int) * (size_t)one.n);
    o.epoch = 0;
    o.seed = 43;
    assert_int_equal(run_epoch(&o, &other), 0);
    assert_memory_not_equal(one.ids, other.ids, sizeof(int) * (size_t)one.n);
}

static void test_ranks_disjoint(void **state)
{
    (void)state;
    static const int worlds[] = {2, 3, 8};
    for (size_t w = 0; w < 3; w++) {
        int seen[1024] = {0}, total = 0;
        for (int r = 0; r < worlds[w]; r++) {
            struct stk_options o = base_options();
            o.rank = r;
            o.world_size = worlds[w];
            struct epoch e;
            assert_int_equal(run_epoch(&o, &e), 0);
            for (int i = 0; i < e.n; i++)
                seen[e.ids[i]]++;
            total += e.n;
        }
        assert_int_equal(total, total_samples);
        for (int i = 0; i < total_samples; i++)
            assert_int_equal(seen[i], 1);
    }
}

static void test_equal_batches_per_rank(void **state)
{
    (void)state;
    static const int worlds[] = {2, 3, 8};
    static const uint64_t per_rank[] = {13, 40, 100};
    for (size_t w = 0; w < 3; w++) {
        for (size_t s = 0; s < 3; s++) {
            for (int r = 0; r < worlds[w]; r++) {
                struct stk_options o = base_options();
                o.rank = r;
                o.world_size = worlds[w];
                o.samples_per_rank = per_rank[s];
                o.drop_last = (int)(s % 2);
                struct epoch e;
                assert_int_equal(run_epoch(&o, &e), 0);
                uint64_t want_batches = o.drop_last ? per_rank[s] / o.batch_size
                                                    : (per_rank[s] + o.batch_size - 1) / o.batch_size;
                assert_int_equal(e.batches, want_batches);
                assert_int_equal(e.n, o.drop_last ? want_batches * o.batch_size : per_rank[s]);
            }
        }
    }
}

/* With samples_per_rank every rank reads only its own shards, all of them
 * once before any twice: below its share no sample repeats, above it every
 * sample of the share comes before the repeats, and ranks stay disjoint. */
static void test_passes_stay_on_the_ranks_own_shards(void **state)
{
    (void)state;
    static const unsigned in_flight[] = {1, 3, 4};
    for (size_t k = 0; k < 3; k++) {
        int owner[1024];
        memset(owner, -1, sizeof owner);
        for (int r = 0; r < 2; r++) {
            struct stk_options o = base_options();
            o.rank = r;
            o.world_size = 2;
            o.shards_in_flight = in_flight[k];
            o.shuffle_buffer = 0; /* the read order itself */
            o.samples_per_rank = 200;
            struct epoch e;
            assert_int_equal(run_epoch(&o, &e), 0);
            int seen[1024] = {0}, share = 0;
            for (int i = 0; i < e.n && i < 1024; i++) {
                assert_true(owner[e.ids[i]] == -1 || owner[e.ids[i]] == r);
                owner[e.ids[i]] = r;
                seen[e.ids[i]]++;
            }
            for (int i = 0; i < total_samples; i++)
                share += owner[i] == r;
            /* The first `share` samples are the whole share, once each. */
            int first[1024] = {0};
            for (int i = 0; i < share; i++)
                assert_int_equal(first[e.ids[i]]++, 0);
        }
    }
}

static void test_too_few_shards(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    o.world_size = (int)N_SHARDS + 1;
    const char *urls[] = {pattern};
    stk_loader *l;
    char msg[512];
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EPLAN);
    assert_null(l);
    assert_non_null(strstr(msg, "cannot be split over 12 ranks"));
}

static void test_shutdown_mid_epoch(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    o.batch_size = 2;
    o.max_batches = 3;
    const char *urls[] = {pattern};
    stk_loader *l;
    /* Destroy before anything was read, and right after the first batch. */
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    stk_loader_destroy(l);
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct stk_batch *b, *held;
    assert_int_equal(stk_loader_next(l, &b), 0);
    stk_batch_release(b);
    stk_loader_destroy(l);

    /* Stop mid-epoch while the caller holds a batch; it stays valid. */
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    assert_int_equal(stk_loader_next(l, &held), 0);
    char key[64];
    snprintf(key, sizeof key, "%s", held->samples[0].key);
    assert_int_equal(stk_loader_set_epoch(l, 1), 0);
    assert_string_equal(held->samples[0].key, key);
    stk_batch_release(held);
    int n = 0, rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        n += (int)b->n_samples;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(n, total_samples);
    assert_int_equal(stk_loader_next(l, &b), STK_EOF);
    stk_loader_destroy(l);
}

static void test_caller_holding_every_batch(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    o.max_batches = 2;
    const char *urls[] = {pattern};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct stk_batch *a, *b, *c;
    assert_int_equal(stk_loader_next(l, &a), 0);
    assert_int_equal(stk_loader_next(l, &b), 0);
    assert_int_equal(stk_loader_next(l, &c), STK_EBUSY);
    assert_non_null(strstr(stk_loader_errmsg(l), "release"));
    stk_batch_release(a);
    assert_int_equal(stk_loader_next(l, &c), 0);
    assert_int_equal(c->index, 2);
    stk_batch_release(b);
    stk_batch_release(c);
    stk_loader_destroy(l);
}

static void test_missing_shard(void **state)
{
    (void)state;
    char two[256];
    snprintf(two, sizeof two, "{%s/shard-00.tar,%s/nope.tar,%s/shard-01.tar}", dir, dir, dir);
    const char *urls[] = {two};
    struct stk_options o = base_options();
    o = storage_order(o);
    stk_loader *l;
    char msg[512];
    /* A missing local shard fails at creation, naming it. */
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_ENOENT);
    assert_null(l);
    assert_non_null(strstr(msg, "nope.tar"));
    struct stk_batch *b;
    int rc;

    o.on_error = STK_ON_ERROR_SKIP;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    int n = 0;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        n += (int)b->n_samples;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(n, shard_sizes[0] + shard_sizes[1]);
    struct stk_stats st;
    stk_loader_stats(l, &st);
    assert_int_equal(st.shards_failed, 1);
    assert_int_equal(st.samples, (uint64_t)n);
    stk_loader_destroy(l);
}

/* Seek to each batch of starts and check the rest of the epoch equals an
 * uninterrupted run's, with any thread count. With a dataset index, or
 * without one from a scan of the local shards' headers, the readers jump to
 * the oldest input the shuffle holds at the batch: at most twice its reach
 * of samples before it is read again (shuffle.h). jumps 0: they may not
 * (some shard the plan reaches cannot be placed), only the order counts. */
static void check_resume_of(const char *url, struct stk_options o, const char *index_path,
                            int jumps)
{
    struct epoch full;
    if (!o.shuffle)
        o = storage_order(o);
    o.index_path = index_path;
    assert_int_equal(run_epoch_of(url, &o, &full), 0);
    assert_true(full.n > 0 && full.n <= 1024);
    size_t window = o.shuffle ? o.shuffle_buffer : 1;
    const char *urls[] = {url};
    o.prefetch_bytes_per_shard = 1;
    for (uint64_t start = 0; start <= (uint64_t)full.batches; start += 1 + start / 4) {
        o.threads = 1 + (unsigned)start % 3;
        stk_loader *l;
        assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
        assert_int_equal(stk_loader_seek(l, o.epoch, start), 0);
        struct stk_batch *b;
        int n = (int)(start * o.batch_size), rc;
        uint64_t index = start;
        while ((rc = stk_loader_next(l, &b)) == 0) {
            assert_int_equal(b->index, index++);
            for (size_t i = 0; i < b->n_samples; i++, n++)
                assert_int_equal(atoi((const char *)b->samples[i].members[1].data), full.ids[n]);
            stk_batch_release(b);
        }
        assert_int_equal(rc, STK_EOF);
        assert_int_equal(n, start < (uint64_t)full.batches ? full.n : (int)(start * o.batch_size));
        struct stk_stats st;
        stk_loader_stats(l, &st);
        uint64_t delivered = (uint64_t)full.n - start * o.batch_size;
        if (start >= (uint64_t)full.batches)
            delivered = 0;
        /* Readers run ahead of the sequencer by about one sample per slot
         * (prefetch_bytes_per_shard = 1), also past the rank's last sample. */
        size_t read_ahead = 2 * o.shards_in_flight;
        if (jumps) {
            assert_true(st.samples_read <= delivered + 2 * window + read_ahead);
            /* The index, or without one a scan of the shards' headers,
             * locates every sample: a slot passes over at most the last
             * sample of a shard it had read to the end. */
            assert_true(st.samples_passed_over <= o.shards_in_flight);
        }
        stk_loader_destroy(l);
    }
}

static void check_resume(struct stk_options o, const char *index_path)
{
    check_resume_of(pattern, o, index_path, 1);
}

/* Index the test shards into dir/index.json (path: 128 bytes). */
static void build_index(char *path)
{
    snprintf(path, 128, "%s/index.json", dir);
    unlink(path); /* one a failed test left: stk_index_build refuses to replace it */
    struct stk_options o = base_options();
    const char *urls[] = {pattern};
    char msg[512];
    struct stk_stats st;
    if (stk_index_build(&o, urls, 1, path, 0, &st, msg, sizeof msg) < 0)
        fail_msg("stk_index_build: %s", msg);
    assert_int_equal(st.samples, (uint64_t)total_samples);
}

/* stk_index_check: what a process given an index checks before trusting
 * it. A shard touched after indexing (another time, same bytes) is stale,
 * as is a malformed file; the same checks fail a loader's creation. */
static void test_index_check(void **state)
{
    (void)state;
    char path[128], shard[160], msg[512];
    build_index(path);
    struct stk_options o = base_options();
    const char *urls[] = {pattern};
    assert_int_equal(stk_index_check(&o, urls, 1, path, msg, sizeof msg), 0);
    snprintf(shard, sizeof shard, "%s/shard-01.tar", dir);
    struct stat st;
    assert_int_equal(stat(shard, &st), 0);
    struct timespec times[2] = {st.st_atim, {st.st_mtim.tv_sec + 5, st.st_mtim.tv_nsec}};
    assert_int_equal(utimensat(AT_FDCWD, shard, times, 0), 0);
    assert_int_equal(stk_index_check(&o, urls, 1, path, msg, sizeof msg), STK_EINDEX);
    assert_non_null(strstr(msg, "the index is stale for "));
    assert_non_null(strstr(msg, "shard-01.tar: run `stoker index` again"));
    stk_loader *l;
    o.index_path = path;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), STK_EINDEX);
    times[1] = st.st_mtim;
    assert_int_equal(utimensat(AT_FDCWD, shard, times, 0), 0);
    assert_int_equal(stk_index_check(&o, urls, 1, path, msg, sizeof msg), 0);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"format\": \"stoker-index\", \"version\": 2, \"extra\": 1}", f);
    fclose(f);
    assert_int_equal(stk_index_check(&o, urls, 1, path, msg, sizeof msg), STK_EINDEX);
    assert_non_null(strstr(msg, "unknown key \"extra\""));
    unlink(path);
}

/* The index is an output like the shards: a link planted at the name it
 * used to be written through (PATH.tmp.PID) is not followed, an existing
 * index is refused before any shard is read, and replaced when asked. */
static void test_index_output(void **state)
{
    (void)state;
    char path[128], tmp[160], victim[128], msg[512];
    snprintf(path, sizeof path, "%s/out-index.json", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(victim, sizeof victim, "%s/victim", dir);
    FILE *f = fopen(victim, "w");
    assert_non_null(f);
    fputs("precious", f);
    fclose(f);
    assert_int_equal(symlink(victim, tmp), 0);
    struct stk_options o = base_options();
    const char *urls[] = {pattern};
    assert_int_equal(stk_index_build(&o, urls, 1, path, 0, NULL, msg, sizeof msg), 0);
    char buf[16] = "";
    f = fopen(victim, "r");
    assert_non_null(f);
    assert_int_equal(fread(buf, 1, sizeof buf - 1, f), 8);
    fclose(f);
    assert_string_equal(buf, "precious");
    const char *missing[] = {"/no/such/shard-{0..3}.tar"};
    assert_int_equal(stk_index_build(&o, missing, 1, path, 0, NULL, msg, sizeof msg),
                     STK_EEXIST); /* not ENOENT: refused before reading */
    assert_non_null(strstr(msg, "out-index.json"));
    assert_int_equal(stk_index_build(&o, urls, 1, path, STK_OUTPUT_OVERWRITE, NULL, msg,
                                     sizeof msg), 0);
    assert_int_equal(stk_index_build(&o, urls, 1, path, 2, NULL, msg, sizeof msg), STK_EINVAL);
    unlink(tmp);
    unlink(victim);
    unlink(path);
}

static void test_seek_resumes_exactly(void **state)
{
    (void)state;
    char index_path[128];
    build_index(index_path);
    struct stk_options o;
    for (int with_index = 0; with_index < 2; with_index++) {
        for (int shuffle = 0; shuffle < 2; shuffle++) {
            o = base_options();
            o.shuffle = shuffle;
            o.epoch = 2;
            o.samples_per_rank = 100; /* one pass, stops inside it */
            check_resume(o, with_index ? index_path : NULL);
            o.samples_per_rank = 150; /* a second pass over the rank's shards */
            check_resume(o, with_index ? index_path : NULL);
            o.samples_per_rank = 0;
            o.shuffle_buffer = 100; /* windows of 64, then 100 samples */
            check_resume(o, with_index ? index_path : NULL);
            o.shuffle_buffer = 20;
            o.rank = 1;
            o.world_size = 3; /* uneven shards; with the index an equal share */
            check_resume(o, with_index ? index_path : NULL);
            o.rank = 3; /* node affinity: the second rank of the second node */
            o.world_size = 4;
            o.node_affinity = 1;
            o.ranks_per_node = 2;
            check_resume(o, with_index ? index_path : NULL);
        }
    }
    unlink(index_path);
}

/* Append sample id of BIG_MEMBER bytes of data (its .bin) and its number
 * (its .cls) to tb. */
#define BIG_MEMBER (64 * 1024)
static void big_sample(struct tar_builder *tb, int id, size_t bin_bytes)
{
    static unsigned char data[4 * BIG_MEMBER];
    char name[64], text[16];
    memset(data, id & 0xff, bin_bytes);
    snprintf(name, sizeof name, "b%06d.bin", id);
    tb_file(tb, name, data, bin_bytes);
    snprintf(name, sizeof name, "b%06d.cls", id);
    int len = snprintf(text, sizeof text, "%d", id);
    tb_file(tb, name, text, (size_t)len);
}

/* Write tb to path, its first `size` bytes (0: all), and free it. */
static void write_builder(struct tar_builder *tb, const char *path, size_t size)
{
    FILE *f = fopen(path, "wb");
    size = size ? size : tb->size;
    if (f == NULL || fwrite(tb->data, 1, size, f) != size || fclose(f) != 0)
        abort();
    tb_free(tb);
}

/* A resume without an index over local shards (issue 35) reads their
 * headers and what the shuffle holds at its batch, not every sample before
 * it: bytes read before the first batch at most a header scan of every
 * shard (what `stoker index` reads), 2 x shuffle_buffer samples, the
 * read-ahead (a sample per slot, max_batches batches) and a block per slot,
 * where reading again all 350 samples before batch 50 is 23 MB. */
static void test_seek_without_index_reads_headers(void **state)
{
    (void)state;
    enum { SHARDS = 8, PER_SHARD = 50, START = 50 };
    char path[160], url[160];
    for (int i = 0; i < SHARDS; i++) {
        struct tar_builder tb = {0};
        for (int k = 0; k < PER_SHARD; k++)
            big_sample(&tb, i * PER_SHARD + k, BIG_MEMBER);
        tb_finish(&tb);
        snprintf(path, sizeof path, "%s/big-%d.tar", dir, i);
        write_builder(&tb, path, 0);
    }
    snprintf(url, sizeof url, "%s/big-{0..%d}.tar", dir, SHARDS - 1);
    const char *urls[] = {url};
    struct stk_options o = base_options();
    o.shuffle_buffer = 10;
    o.prefetch_bytes_per_shard = 1;
    o.read_buffer_bytes = BIG_MEMBER;
    struct epoch full;
    assert_int_equal(run_epoch_of(url, &o, &full), 0);
    assert_int_equal(full.n, SHARDS * PER_SHARD);
    struct stk_stats st;
    char msg[512], index_path[160];
    snprintf(index_path, sizeof index_path, "%s/big-index.json", dir);
    if (stk_index_build(&o, urls, 1, index_path, 0, &st, msg, sizeof msg) < 0)
        fail_msg("stk_index_build: %s", msg);
    unlink(index_path);
    const uint64_t headers = st.bytes_read;
    const uint64_t sample_bytes = BIG_MEMBER + 3 * 512;
    const uint64_t bound = headers +
                           (2 * o.shuffle_buffer + 1 + 2 * o.shards_in_flight +
                            (o.max_batches + 1) * o.batch_size) * sample_bytes +
                           o.shards_in_flight * o.read_buffer_bytes;
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, msg, sizeof msg), 0);
    assert_int_equal(stk_loader_seek(l, 0, START), 0);
    struct stk_batch *b;
    assert_int_equal(stk_loader_next(l, &b), 0);
    stk_loader_stats(l, &st);
    print_message("bytes read before batch %d: %llu (bound %llu: headers %llu)\n", START,
                  (unsigned long long)st.bytes_read, (unsigned long long)bound,
                  (unsigned long long)headers);
    assert_true(st.bytes_read <= bound);
    int n = START * (int)o.batch_size, rc = 0;
    do {
        for (size_t i = 0; i < b->n_samples; i++, n++)
            assert_int_equal(atoi((const char *)b->samples[i].members[1].data), full.ids[n]);
        stk_batch_release(b);
    } while ((rc = stk_loader_next(l, &b)) == 0);
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(n, full.n);
    stk_loader_destroy(l);
    for (int i = 0; i < SHARDS; i++) {
        snprintf(path, sizeof path, "%s/big-%d.tar", dir, i);
        unlink(path);
    }
}

/* A log that counts the messages containing a text. */
struct log_match {
    const char *text;
    atomic_int seen;
};

static void match_log(void *data, enum stk_log_level level, const char *message)
{
    struct log_match *m = data;
    (void)level;
    if (strstr(message, m->text) != NULL)
        atomic_fetch_add(&m->seen, 1);
}

/* dir/bad-0.tar .. bad-4.tar, 21 samples of 100 bytes each but for their
 * bad input: bad-0 a bad tail (a sample over max_member_bytes after its
 * last good one), bad-1 such a sample between good ones, bad-2 a corrupt
 * header (the rest of the shard skipped) after members without a key,
 * bad-3 cut inside a member's data, bad-4 a key that comes back after
 * others. */
#define BAD_SHARDS 5
static void write_bad_shards(void)
{
    char path[160];
    int id = 0;
    for (int i = 0; i < BAD_SHARDS; i++) {
        struct tar_builder tb = {0};
        size_t cut = 0;
        for (int k = 0; k < 12; k++)
            big_sample(&tb, id++, 100);
        if (i == 1)
            big_sample(&tb, id++, 2 * BIG_MEMBER); /* over the limit: dropped */
        if (i == 2) {
            tb_entry(&tb, "dir", '5', "", 0); /* no key: ignored */
            tb_file(&tb, "b-corrupt.bin", "", 0);
            memset(tb.data + tb.size - 512, 'x', 512); /* not a header: the rest is skipped */
        }
        if (i == 4)
            big_sample(&tb, id - 3, 100); /* a key that comes back after others */
        if (i == 3)
            cut = tb.size + 512 + 50; /* inside the next sample's .bin */
        for (int k = 0; k < 9; k++)
            big_sample(&tb, id++, 100);
        if (i == 0)
            big_sample(&tb, id++, 2 * BIG_MEMBER); /* the shard's bad tail */
        tb_finish(&tb);
        snprintf(path, sizeof path, "%s/bad-%d.tar", dir, i);
        write_builder(&tb, path, cut);
    }
}

static void remove_bad_shards(void)
{
    char path[160];
    for (int i = 0; i < BAD_SHARDS; i++) {
        snprintf(path, sizeof path, "%s/bad-%d.tar", dir, i);
        unlink(path);
    }
}

/* Bad input in the mix, under the skip policy: the header scan of a resume
 * without an index must count each shard exactly as its readers do, else
 * every later sample of the epoch moves. A member over max_member_bytes
 * (a sample dropped), a corrupt header (the rest of the shard skipped), a
 * shard cut inside a member's data, members without a key; and a key that
 * reappears, which no scan can place: where the plan reaches that shard the
 * epoch is read again from its start, and the batches are the same. */
static void test_seek_without_index_bad_input(void **state)
{
    (void)state;
    char url[160];
    write_bad_shards();
    struct stk_options o = base_options();
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_member_bytes = BIG_MEMBER;
    o.batch_size = 5;
    for (int shuffle = 1; shuffle >= 0; shuffle--) {
        o.shuffle = shuffle;
        o.shuffle_buffer = 8;
        snprintf(url, sizeof url, "%s/bad-{0..%d}.tar", dir, BAD_SHARDS - 2);
        check_resume_of(url, o, NULL, 1);
        snprintf(url, sizeof url, "%s/bad-{0..%d}.tar", dir, BAD_SHARDS - 1);
        struct log_match m = {.text = "bad-4.tar has a key that reappears after others, so "
                                      "the epoch is read again from its start"};
        o.log = match_log;
        o.log_data = &m;
        check_resume_of(url, o, NULL, 0);
        assert_true(atomic_load(&m.seen) > 0);
        o.log = NULL;
    }
    remove_bad_shards();
}

/* One batch as the loop sees it: its samples and the bad input charged to it. */
struct batch_view {
    int ids[8];
    size_t n;
    uint64_t skipped, shards_failed;
};

/* The batches of o's epoch from batch `start` on (at most max) into v;
 * *fast: samples_fast_start. Returns how many. */
static int view_epoch(const char *url, const struct stk_options *o, uint64_t start,
                      struct batch_view *v, int max, uint64_t *fast)
{
    const char *urls[] = {url};
    stk_loader *l;
    char msg[512];
    if (stk_loader_create(o, urls, 1, &l, msg, sizeof msg) < 0)
        fail_msg("stk_loader_create: %s", msg);
    assert_int_equal(stk_loader_seek(l, o->epoch, start), 0);
    struct stk_batch *b;
    int n = 0, rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_true(n < max && b->n_samples <= 8);
        v[n].n = b->n_samples;
        for (size_t i = 0; i < b->n_samples; i++)
            v[n].ids[i] = atoi((const char *)b->samples[i].members[1].data);
        v[n].skipped = b->samples_skipped;
        v[n++].shards_failed = b->shards_failed;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    struct stk_stats st;
    stk_loader_stats(l, &st);
    *fast = st.samples_fast_start;
    stk_loader_destroy(l);
    return n;
}

static void assert_same_views(const struct batch_view *want, int n_want,
                              const struct batch_view *got, int n_got)
{
    assert_int_equal(n_got, n_want);
    for (int i = 0; i < n_want; i++) {
        assert_int_equal(got[i].n, want[i].n);
        for (size_t k = 0; k < want[i].n; k++)
            if (got[i].ids[k] != want[i].ids[k])
                fail_msg("batch %d sample %zu: %d, not %d", i, k, got[i].ids[k], want[i].ids[k]);
        if (got[i].skipped != want[i].skipped || got[i].shards_failed != want[i].shards_failed)
            fail_msg("batch %d: skipped %llu / %llu, shards failed %llu / %llu", i,
                     (unsigned long long)got[i].skipped, (unsigned long long)want[i].skipped,
                     (unsigned long long)got[i].shards_failed,
                     (unsigned long long)want[i].shards_failed);
    }
}

/* The first batches of an epoch read by offset while its window fills
 * (pipeline_head.c) are the stream's: the same samples in the same order,
 * with the same bad input charged to each batch (bad samples between good
 * ones, a shard's bad tail, a shard cut short, members ignored), fresh and
 * resumed, with an index and with a scan of the headers. A window as long
 * as the epoch makes the first batches come from its final drain, where
 * every shard's end is charged to a sample the head delivers. In test
 * builds $STOKER_TEST_HEAD_FIRST holds the stream until the head delivered
 * what it planned, so the head surely delivers; without it the two race. */
static void test_first_batches_by_offset(void **state)
{
    (void)state;
    enum { MAX = 64 };
    char url[160], index[128];
    write_bad_shards();
    /* Not bad-4: a key that comes back keeps the scan from placing samples
     * (resume_scan.h), and the head from reading by offset. */
    snprintf(url, sizeof url, "%s/bad-{0..%d}.tar", dir, BAD_SHARDS - 2);
    snprintf(index, sizeof index, "%s/head-index.json", dir);
    unlink(index);
    struct stk_options o = base_options();
    o.on_error = STK_ON_ERROR_SKIP;
    o.max_member_bytes = BIG_MEMBER;
    o.batch_size = 5;
    o.shuffle_buffer = 1000;
    const char *urls[] = {url};
    char msg[512];
    struct stk_stats built;
    if (stk_index_build(&o, urls, 1, index, 0, &built, msg, sizeof msg) < 0)
        fail_msg("stk_index_build: %s", msg);
    static struct batch_view want[MAX], got[MAX];
    for (int indexed = 0; indexed <= 1; indexed++) {
        o.index_path = indexed ? index : NULL;
        for (uint64_t start = 0; start <= 4; start += 4) {
            uint64_t fast;
            o.sequential_start = 1;
            int n = view_epoch(url, &o, start, want, MAX, &fast);
            assert_true(n > 8 && n < MAX);
            assert_int_equal(fast, 0);
            uint64_t total_skipped = 0;
            for (int i = 0; i < n; i++)
                total_skipped += want[i].skipped;
            assert_true(start > 0 || total_skipped >= 3); /* the bad input above is charged */
            o.sequential_start = 0;
            setenv("STOKER_TEST_HEAD_FIRST", "1", 1);
            assert_same_views(want, n, got, view_epoch(url, &o, start, got, MAX, &fast));
#ifdef STK_TEST_HOOKS
            assert_true(fast >= 2 * o.batch_size); /* the head delivered what it planned */
#endif
            unsetenv("STOKER_TEST_HEAD_FIRST");
            assert_same_views(want, n, got, view_epoch(url, &o, start, got, MAX, &fast));
        }
    }
    unlink(index);
    remove_bad_shards();
}

/* The loader's samples_read once its readers stopped: unchanged over 20
 * looks 10 ms apart (at most 30 s, so a reader that never stops fails the
 * bound that follows rather than hanging). */
static uint64_t samples_read_when_still(stk_loader *l)
{
    struct stk_stats st;
    stk_loader_stats(l, &st);
    uint64_t last = st.samples_read, start = now_ms();
    for (int still = 0; still < 20 && now_ms() - start < 30000;) {
        usleep(10000);
        stk_loader_stats(l, &st);
        still = st.samples_read == last ? still + 1 : 0;
        last = st.samples_read;
    }
    return last;
}

/* Read batches [first, first + n) of a range into ids[first * batch..]. */
static void read_range(stk_loader *l, uint64_t first, uint64_t n, size_t batch_size,
                       const struct epoch *full)
{
    struct stk_batch *b;
    uint64_t index = first;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_int_equal(b->index, index);
        for (size_t i = 0; i < b->n_samples; i++)
            assert_int_equal(atoi((const char *)b->samples[i].members[1].data),
                             full->ids[index * batch_size + i]);
        index++;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(index, first + n);
}

/* A range of batches in the global order (stk_loader_seek_range: a Dask
 * task) reads its own samples and the two the sequencer takes past its end
 * before it stops, not what 16 slots read ahead (issue 35: 300 to 400
 * samples a task); continued by the next range, the readers read on. */
static void test_range_reads_its_samples(void **state)
{
    (void)state;
    char index_path[128];
    build_index(index_path);
    struct stk_options o;
    stk_options_init(&o); /* the default shuffle_buffer: the global order */
    o.rank = 0;
    o.world_size = 1;
    o.batch_size = 7;
    o.seed = 42;
    o.index_path = index_path;
    struct epoch full;
    assert_int_equal(run_epoch(&o, &full), 0);
    assert_int_equal(full.n, total_samples);
    const char *urls[] = {pattern};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    assert_int_equal(stk_loader_seek_range(l, 0, 3, 2), 0);
    read_range(l, 3, 2, o.batch_size, &full);
    uint64_t read = samples_read_when_still(l);
    print_message("range [3, 5): %llu samples read for 14\n", (unsigned long long)read);
    assert_true(read <= 2 * o.batch_size + 2);
    assert_int_equal(stk_loader_seek_range(l, 0, 5, 4), 0); /* where the last ended */
    read_range(l, 5, 4, o.batch_size, &full);
    read = samples_read_when_still(l);
    print_message("ranges [3, 9): %llu samples read for 42\n", (unsigned long long)read);
    assert_true(read <= 6 * o.batch_size + 2);
    stk_loader_destroy(l);
    unlink(index_path);
}

/* The shard holding sample id (ids are consecutive over the shards). */
static int shard_of(int id)
{
    int first = 0;
    for (size_t i = 0; i < N_SHARDS; i++) {
        if (id < first + shard_sizes[i])
            return (int)i;
        first += shard_sizes[i];
    }
    return -1;
}

/* Node affinity end to end, with and without an index: over epochs every
 * shard is read by one node only, and with the index every rank still
 * yields ceil(total / world) samples. */
static void test_node_affinity(void **state)
{
    (void)state;
    char index_path[128];
    build_index(index_path);
    for (int with_index = 0; with_index < 2; with_index++) {
        struct stk_options o = base_options();
        o.world_size = 4;
        o.node_affinity = 1;
        o.ranks_per_node = 2;
        o.index_path = with_index ? index_path : NULL;
        int home[N_SHARDS];
        for (size_t i = 0; i < N_SHARDS; i++)
            home[i] = -1;
        for (uint64_t epoch = 0; epoch < 3; epoch++) {
            o.epoch = epoch;
            for (int r = 0; r < 4; r++) {
                o.rank = r;
                static struct epoch e;
                assert_int_equal(run_epoch(&o, &e), 0);
                if (with_index)
                    assert_int_equal(e.n, (total_samples + 3) / 4);
                for (int i = 0; i < e.n && i < 1024; i++) {
                    int shard = shard_of(e.ids[i]);
                    if (home[shard] < 0)
                        home[shard] = r / 2;
                    assert_int_equal(home[shard], r / 2);
                }
            }
        }
    }
    unlink(index_path);
}

/* node_affinity's default (-1) is on with a cache_dir and several nodes
 * named by the launcher (LOCAL_WORLD_SIZE), off otherwise: the same
 * sample order as 1 or 0. */
static void test_node_affinity_default(void **state)
{
    (void)state;
    char cache[96];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    static struct epoch on, off, deflt;
    struct stk_options o = base_options();
    o.world_size = 4;
    o.rank = 2;
    o.epoch = 1;
    setenv("LOCAL_WORLD_SIZE", "2", 1);
    assert_int_equal(o.node_affinity, -1);
    o.node_affinity = 1;
    assert_int_equal(run_epoch(&o, &on), 0);
    o.node_affinity = 0;
    assert_int_equal(run_epoch(&o, &off), 0);
    assert_true(on.n != off.n || memcmp(on.ids, off.ids, sizeof on.ids) != 0);
    o.node_affinity = -1;
    assert_int_equal(run_epoch(&o, &deflt), 0); /* no cache: off */
    assert_int_equal(deflt.n, off.n);
    assert_memory_equal(deflt.ids, off.ids, sizeof off.ids);
    o.cache_dir = cache;
    o.cache_size = 1u << 20;
    assert_int_equal(run_epoch(&o, &deflt), 0); /* a cache on several nodes: on */
    assert_int_equal(deflt.n, on.n);
    assert_memory_equal(deflt.ids, on.ids, sizeof on.ids);
    setenv("LOCAL_WORLD_SIZE", "4", 1); /* one node: off */
    assert_int_equal(run_epoch(&o, &deflt), 0);
    assert_memory_equal(deflt.ids, off.ids, sizeof off.ids);
    unsetenv("LOCAL_WORLD_SIZE");
    char lock[128];
    snprintf(lock, sizeof lock, "%s/.lock", cache);
    unlink(lock);
    rmdir(cache);
}

/* The index gives every rank ceil(total / world) samples by default, split
 * by sample: together the ranks deliver every sample, repeating only the
 * padding (at most world - 1); whole_shards keeps floor(total / world). */
static void test_index_equal_shares(void **state)
{
    (void)state;
    char index_path[128];
    build_index(index_path);
    struct stk_options o = base_options();
    const char *urls[] = {pattern};
    o.index_path = index_path;
    o.world_size = 4;
    const int share = (total_samples + 3) / 4;
    static int seen[1024];
    memset(seen, 0, sizeof seen);
    for (int r = 0; r < 4; r++) {
        o.rank = r;
        stk_loader *l;
        assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
        assert_int_equal(stk_loader_epoch_samples(l), (uint64_t)share);
        stk_loader_destroy(l);
        static struct epoch e;
        assert_int_equal(run_epoch(&o, &e), 0);
        assert_int_equal(e.n, share);
        for (int i = 0; i < e.n; i++)
            seen[e.ids[i]]++;
    }
    int repeated = 0;
    for (int id = 0; id < total_samples; id++) {
        assert_true(seen[id] >= 1);
        repeated += seen[id] - 1;
    }
    assert_int_equal(repeated, 4 * share - total_samples);
    o.whole_shards = 1;
    o.rank = 0;
    stk_loader *whole;
    assert_int_equal(stk_loader_create(&o, urls, 1, &whole, NULL, 0), 0);
    assert_int_equal(stk_loader_epoch_samples(whole), (uint64_t)total_samples / 4);
    stk_loader_destroy(whole);
    o.whole_shards = 0;
    /* Without sharing out, the rank's shards per the index. */
    o.world_size = 1;
    o.rank = 0;
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    assert_int_equal(stk_loader_epoch_samples(l), (uint64_t)total_samples);
    stk_loader_destroy(l);
    /* A shard missing from the index is named. */
    const char *more[] = {pattern, "/nonexistent/extra.tar"};
    char msg[512];
    assert_int_equal(stk_loader_create(&o, more, 2, &l, msg, sizeof msg), STK_EINDEX);
    assert_non_null(strstr(msg, "/nonexistent/extra.tar"));
    unlink(index_path);
}

/* ---- stk_loader_interrupt: the one call another thread may make ---- */

struct next_call {
    stk_loader *l;
    int rc;
    struct stk_batch *b;
};

static void *call_next(void *arg)
{
    struct next_call *c = arg;
    c->rc = stk_loader_next(c->l, &c->b);
    return NULL;
}

/* A loader over one pipe: shard, in storage order. */
static stk_loader *pipe_loader(const char *url)
{
    const char *urls[] = {url};
    struct stk_options o = base_options();
    o = storage_order(o);
    o.allow_pipe = 1;
    stk_loader *l;
    char msg[512];
    if (stk_loader_create(&o, urls, 1, &l, msg, sizeof msg) < 0)
        fail_msg("stk_loader_create: %s", msg);
    return l;
}

/* The batches of shard-00 in storage order from the loader's position to
 * STK_EOF, nothing lost or doubled (timeout_ms as stk_loader_next_timed
 * takes it: a slice that ends first just calls again). */
static void read_shard_00_to_the_end(stk_loader *l, unsigned timeout_ms)
{
    struct stk_batch *b;
    int rc, n = -1;
    while ((rc = stk_loader_next_timed(l, &b, timeout_ms)) == 0 || rc == STK_EINTR) {
        if (rc == STK_EINTR)
            continue;
        if (n < 0)
            n = (int)b->index * 7; /* the batches of 7 before it were read */
        assert_int_equal(b->index, (uint64_t)(n / 7));
        n += (int)b->n_samples;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(n, shard_sizes[0]);
}

static void test_interrupt_wakes_a_waiting_next(void **state)
{
    (void)state;
    /* The shard arrives after 2 s: the first call waits, is interrupted
     * (or finds the interrupt pending when it starts: the same result), and
     * the epoch goes on from where it was, nothing lost. */
    char url[256];
    snprintf(url, sizeof url, "pipe:sh -c 'sleep 2; exec cat %s/shard-00.tar'", dir);
    stk_loader *l = pipe_loader(url);
    struct next_call c = {l, 1, NULL};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, call_next, &c), 0);
    usleep(50 * 1000);
    uint64_t start = now_ms();
    stk_loader_interrupt(l);
    pthread_join(t, NULL);
    assert_true(now_ms() - start < 1500); /* woken, not returned with the data */
    assert_int_equal(c.rc, STK_EINTR);
    assert_null(c.b);
    assert_non_null(strstr(stk_loader_errmsg(l), "interrupt"));
    read_shard_00_to_the_end(l, 0);
    stk_loader_destroy(l);

    /* A shard that never comes: interrupt, then destroy stops the command
     * at once (what the Python binding's close() does from another thread). */
    l = pipe_loader("pipe:sleep 60");
    c = (struct next_call){l, 1, NULL};
    assert_int_equal(pthread_create(&t, NULL, call_next, &c), 0);
    usleep(100 * 1000);
    start = now_ms();
    stk_loader_interrupt(l);
    pthread_join(t, NULL);
    assert_int_equal(c.rc, STK_EINTR);
    stk_loader_destroy(l);
    assert_true(now_ms() - start < 5000);
}

static void test_next_timed_returns_after_its_timeout(void **state)
{
    (void)state;
    /* The shard arrives after 1 s: calls with a 100 ms timeout return
     * STK_EINTR after about that long each, and then the batches come, in
     * order, nothing lost (the Python binding checks for Ctrl-C between). */
    char url[256];
    snprintf(url, sizeof url, "pipe:sh -c 'sleep 1; exec cat %s/shard-00.tar'", dir);
    stk_loader *l = pipe_loader(url);
    struct stk_batch *b;
    int rc, timeouts = 0;
    uint64_t start = now_ms();
    while ((rc = stk_loader_next_timed(l, &b, 100)) == STK_EINTR) {
        assert_null(b);
        assert_non_null(strstr(stk_loader_errmsg(l), "no batch within 100 ms"));
        assert_true(now_ms() - start >= 100u * (unsigned)++timeouts - 5);
    }
    assert_true(timeouts >= 3);
    assert_int_equal(rc, 0);
    stk_batch_release(b);
    read_shard_00_to_the_end(l, 100);
    stk_loader_destroy(l);
}

static void test_interrupt_pending_for_the_next_call(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    const char *urls[] = {pattern};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct stk_batch *b;
    /* Before the epoch started, and twice: interrupts do not accumulate. */
    stk_loader_interrupt(l);
    stk_loader_interrupt(l);
    assert_int_equal(stk_loader_next(l, &b), STK_EINTR);
    assert_null(b);
    assert_int_equal(stk_loader_next(l, &b), 0);
    assert_int_equal(b->index, 0);
    stk_batch_release(b);
    /* Mid-epoch: the next call returns STK_EINTR, the one after batch 1. */
    stk_loader_interrupt(l);
    assert_int_equal(stk_loader_next(l, &b), STK_EINTR);
    int n = 7, rc;
    uint64_t index = 1;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_int_equal(b->index, index++);
        n += (int)b->n_samples;
        stk_batch_release(b);
    }
    assert_int_equal(rc, STK_EOF);
    assert_int_equal(n, total_samples);
    stk_loader_destroy(l);
}

struct interrupter {
    stk_loader *l;
    atomic_int stop;
    int sent;
};

static void *interrupt_often(void *arg)
{
    struct interrupter *it = arg;
    while (!atomic_load(&it->stop)) {
        stk_loader_interrupt(it->l);
        it->sent++;
        usleep(200);
    }
    return NULL;
}

static void test_interrupts_at_any_time_lose_nothing(void **state)
{
    (void)state;
    /* Another thread interrupts every 0.2 ms for whole epochs: each
     * STK_EINTR is retried, and the batches are exactly those of an
     * uninterrupted run. Under ThreadSanitizer this also checks the wake-up
     * path against the pipeline's own threads and its stop. */
    struct stk_options o = base_options();
    o.threads = 2;
    struct epoch ref;
    assert_int_equal(run_epoch(&o, &ref), 0);
    const char *urls[] = {pattern};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct interrupter it = {.l = l};
    atomic_init(&it.stop, 0);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, interrupt_often, &it), 0);
    int interrupted = 0;
    for (int epoch = 0; epoch < 3; epoch++) {
        assert_int_equal(stk_loader_set_epoch(l, 0), 0);
        int n = 0, rc;
        uint64_t index = 0;
        struct stk_batch *b;
        while ((rc = stk_loader_next(l, &b)) != STK_EOF) {
            if (rc == STK_EINTR) {
                interrupted++;
                continue;
            }
            assert_int_equal(rc, 0);
            assert_int_equal(b->index, index++);
            for (size_t i = 0; i < b->n_samples; i++, n++)
                assert_int_equal(atoi((const char *)b->samples[i].members[1].data), ref.ids[n]);
            stk_batch_release(b);
        }
        assert_int_equal(n, total_samples);
    }
    atomic_store(&it.stop, 1);
    pthread_join(t, NULL);
    stk_loader_destroy(l);
    assert_true(interrupted > 0);
}

/* Take the batches of the loader's current epoch into e (its ids, in order). */
static int take_epoch(stk_loader *l, struct epoch *e)
{
    memset(e, 0, sizeof *e);
    struct stk_batch *b;
    int rc;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        for (size_t i = 0; i < b->n_samples; i++, e->n++)
            if (e->n < 1024)
                e->ids[e->n] = atoi((const char *)b->samples[i].members[1].data);
        e->batches++;
        stk_batch_release(b);
    }
    return rc == STK_EOF ? 0 : rc;
}

/* Until the next epoch's readers read at least `want` samples ahead of it;
 * fails after 30 s (a loaded machine; none started ahead never gets there). */
static void wait_read_ahead(stk_loader *l, uint64_t want)
{
    const uint64_t deadline = now_ms() + 30000;
    struct stk_stats st;
    for (;;) {
        stk_loader_stats(l, &st);
        if (st.samples_read_ahead >= want)
            return;
        if (now_ms() > deadline)
            fail_msg("%llu samples read ahead of the next epoch after 30 s, want %llu",
                     (unsigned long long)st.samples_read_ahead, (unsigned long long)want);
        usleep(2000);
    }
}

static uint64_t ahead_now(stk_loader *l)
{
    struct stk_stats st;
    stk_loader_stats(l, &st);
    return st.samples_read_ahead;
}

/* At an epoch boundary the next epoch's window is read while the last
 * one's tail is delivered, and the loop continues those threads: the same
 * batches as a loader started at that epoch, whatever the threads, and
 * what was read ahead (a window of 20 at least) is not read again, and is
 * counted in the epoch that read it, not the last one. A seek
 * elsewhere in the middle of it, and a destroy, stop it cleanly (ASan,
 * TSan). */
static void test_next_epoch_read_ahead(void **state)
{
    (void)state;
    const char *urls[] = {pattern};
    for (unsigned threads = 1; threads <= 2; threads++) {
        struct stk_options o = base_options();
        o.threads = threads;
        struct epoch fresh[3], got;
        for (int e = 0; e < 3; e++) {
            o.epoch = (uint64_t)e;
            assert_int_equal(run_epoch(&o, &fresh[e]), 0);
        }
        o.epoch = 0;
        stk_loader *l;
        assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
        /* samples_read_ahead when the current epoch began: the next
         * epoch's are counted from there */
        uint64_t base = 0;
        for (int e = 0; e < 3; e++) {
            struct stk_stats before, after;
            if (e > 0) /* epoch e's first window is read before the loop asks */
                wait_read_ahead(l, base + 20);
            stk_loader_stats(l, &before);
            assert_int_equal(stk_loader_set_epoch(l, (uint64_t)e), 0);
            base = ahead_now(l);
            assert_int_equal(take_epoch(l, &got), 0);
            assert_int_equal(got.n, fresh[e].n);
            assert_memory_equal(got.ids, fresh[e].ids, sizeof(int) * (size_t)got.n);
            /* ... and not again: the loop continued those threads, whose
             * counts are the epoch's own (none of them before it began) */
            stk_loader_stats(l, &after);
            assert_int_equal(after.samples_read - before.samples_read, total_samples);
        }
        /* Destroyed while epoch 3 reads ahead. */
        wait_read_ahead(l, base + 1);
        stk_loader_destroy(l);

        /* Seek to another epoch, and destroy, while the next one reads ahead. */
        assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
        assert_int_equal(take_epoch(l, &got), 0);
        wait_read_ahead(l, 1);
        assert_int_equal(stk_loader_set_epoch(l, 2), 0);
        base = ahead_now(l);
        assert_int_equal(take_epoch(l, &got), 0);
        assert_memory_equal(got.ids, fresh[2].ids, sizeof(int) * (size_t)got.n);
        wait_read_ahead(l, base + 1);
        stk_loader_destroy(l);
    }
}

/* Fail the Nth allocation for N = 1, 2, ... until a whole epoch succeeds:
 * every failure must surface as an error, never a crash, hang or leak. */
static void test_allocation_failures(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    o.threads = 2;
    int failures = 0;
    for (unsigned long n = 1; n < 100000; n++) {
        stk__alloc_fail_after(n);
        struct epoch e;
        int rc = run_epoch(&o, &e);
        stk__alloc_fail_after(0);
        if (rc == 0 && e.n == total_samples)
            break;
        assert_true(rc < 0);
        failures++;
    }
    assert_true(failures > 10);
}

/* The same for a resume without an index (its header scan and seek plan):
 * each failed allocation is a clean error, never a leak or other batches. */
static void test_allocation_failures_in_a_resume(void **state)
{
    (void)state;
    struct stk_options o = base_options();
    struct epoch full;
    assert_int_equal(run_epoch(&o, &full), 0);
    const uint64_t start = 8;
    const char *urls[] = {pattern};
    int failures = 0;
    for (unsigned long n = 1; n < 100000; n++) {
        stk__alloc_fail_after(n);
        stk_loader *l;
        int rc = stk_loader_create(&o, urls, 1, &l, NULL, 0);
        int got = (int)(start * o.batch_size);
        if (rc == 0) {
            stk_loader_seek(l, 0, start);
            struct stk_batch *b;
            while ((rc = stk_loader_next(l, &b)) == 0) {
                for (size_t i = 0; i < b->n_samples; i++, got++)
                    assert_int_equal(atoi((const char *)b->samples[i].members[1].data),
                                     full.ids[got]);
                stk_batch_release(b);
            }
            stk_loader_destroy(l);
        }
        stk__alloc_fail_after(0);
        if (rc == STK_EOF && got == full.n)
            break;
        assert_true(rc < 0 && rc != STK_EOF);
        failures++;
    }
    assert_true(failures > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_storage_order),
        cmocka_unit_test(test_same_order_for_any_thread_count),
        cmocka_unit_test(test_ranks_disjoint),
        cmocka_unit_test(test_equal_batches_per_rank),
        cmocka_unit_test(test_passes_stay_on_the_ranks_own_shards),
        cmocka_unit_test(test_too_few_shards),
        cmocka_unit_test(test_shutdown_mid_epoch),
        cmocka_unit_test(test_caller_holding_every_batch),
        cmocka_unit_test(test_missing_shard),
        cmocka_unit_test(test_seek_resumes_exactly),
        cmocka_unit_test(test_seek_without_index_reads_headers),
        cmocka_unit_test(test_seek_without_index_bad_input),
        cmocka_unit_test(test_range_reads_its_samples),
        cmocka_unit_test(test_first_batches_by_offset),
        cmocka_unit_test(test_next_epoch_read_ahead),
        cmocka_unit_test(test_node_affinity),
        cmocka_unit_test(test_node_affinity_default),
        cmocka_unit_test(test_index_equal_shares),
        cmocka_unit_test(test_index_output),
        cmocka_unit_test(test_index_check),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_allocation_failures_in_a_resume),
        cmocka_unit_test(test_interrupt_wakes_a_waiting_next),
        cmocka_unit_test(test_next_timed_returns_after_its_timeout),
        cmocka_unit_test(test_interrupt_pending_for_the_next_call),
        cmocka_unit_test(test_interrupts_at_any_time_lose_nothing),
    };
    return cmocka_run_group_tests_name("pipeline", tests, setup, teardown);
}
