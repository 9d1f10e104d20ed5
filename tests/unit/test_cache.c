/*
 * test_cache.c - the node cache over local files (cache_local): fill and
 * hit, LRU order, shards in use survive eviction, size errors, stale temp
 * and orphan files, one download for many concurrent openers, allocation failures.
 * Also built with ThreadSanitizer.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "alloc.h"
#include "cache.h"
#include "stoker.h"

static char root[64];      /* per test: root/up (upstream) and root/cache */
static char cache_dir[96];

#define KIB 1024u

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/stk-cache-XXXXXX");
    if (mkdtemp(root) == NULL)
        return -1;
    char up[96];
    snprintf(up, sizeof up, "%s/up", root);
    snprintf(cache_dir, sizeof cache_dir, "%s/cache", root);
    return mkdir(up, 0755);
}

static void remove_all(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[512];
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(dir);
}

static int teardown(void **state)
{
    (void)state;
    char up[96];
    snprintf(up, sizeof up, "%s/up", root);
    remove_all(up);
    remove_all(cache_dir);
    rmdir(root);
    return 0;
}

/* Bytes of upstream file `name`, a function of (seed, offset). */
static unsigned char byte_at(unsigned seed, size_t i)
{
    return (unsigned char)((i * 131u + seed * 7u + (i >> 9)) % 251u);
}

/* Write root/up/name (size bytes from seed); its path goes to path. */
static void upstream(const char *name, size_t size, unsigned seed, char *path, size_t cap)
{
    snprintf(path, cap, "%s/up/%s", root, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    for (size_t i = 0; i < size; i++)
        fputc(byte_at(seed, i), f);
    assert_int_equal(fclose(f), 0);
}

static struct stk__cache *new_cache(uint64_t max_bytes)
{
    struct stk__cache_config cfg = {
        .dir = cache_dir, .max_bytes = max_bytes, .shards_in_flight = 4, .cache_local = 1};
    struct stk__cache *c;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cache_new(&cfg, &c, &err);
    if (rc < 0)
        fail_msg("stk__cache_new: %s", err.msg);
    return c;
}

/* Read src to the end and check it holds size bytes from seed. */
static void expect_bytes(struct stk__source *src, size_t size, unsigned seed)
{
    unsigned char buf[4096];
    size_t off = 0;
    ssize_t n;
    while ((n = stk__source_read(src, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != byte_at(seed, off + (size_t)i))
                fail_msg("byte %zu is %u, expected %u", off + (size_t)i, buf[i],
                         byte_at(seed, off + (size_t)i));
        off += (size_t)n;
    }
    assert_int_equal(n, 0);
    assert_int_equal(off, size);
}

static struct stk__source *open_ok(struct stk__cache *c, const char *url)
{
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cache_open(c, url, NULL, &src, &err);
    if (rc < 0)
        fail_msg("stk__cache_open(%s): %d %s", url, rc, err.msg);
    return src;
}

static int cached(const char *url)
{
    char hex[33], path[256];
    stk__cache_name(url, hex);
    snprintf(path, sizeof path, "%s/%s", cache_dir, hex);
    return access(path, F_OK) == 0;
}

/* Total size of the regular files in the cache, and the number of temps. */
static uint64_t cache_total(int *temps)
{
    uint64_t total = 0;
    *temps = 0;
    DIR *d = opendir(cache_dir);
    assert_non_null(d);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char path[512];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", cache_dir, de->d_name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode)) {
            total += (uint64_t)st.st_size;
            *temps += strncmp(de->d_name, ".tmp.", 5) == 0;
        }
    }
    closedir(d);
    return total;
}

static void pause_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_fill_then_hit(void **state)
{
    (void)state;
    char url[256];
    upstream("a.tar", 300 * KIB + 17, 1, url, sizeof url);
    struct stk__cache *c = new_cache(16u << 20);
    struct stk__source *src = open_ok(c, url);
    expect_bytes(src, 300 * KIB + 17, 1);
    stk__source_close(src);
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses, 1);
    assert_int_equal(n.hits, 0);
    assert_int_equal(n.bytes_written, 300 * KIB + 17);
    assert_true(cached(url));

    /* The sidecar names the URL. */
    char hex[33], path[256], line[300] = {0};
    stk__cache_name(url, hex);
    snprintf(path, sizeof path, "%s/%s.url", cache_dir, hex);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(line, sizeof line, f));
    fclose(f);
    assert_int_equal(strlen(line), strlen(url) + 1);
    assert_memory_equal(line, url, strlen(url));

    /* A hit reads the cached copy, not the upstream (which changed). */
    upstream("a.tar", 10, 2, url, sizeof url);
    src = open_ok(c, url);
    expect_bytes(src, 300 * KIB + 17, 1);
    stk__source_close(src);
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses, 1);
    assert_int_equal(n.hits, 1);
    stk__cache_free(c);
}

static void test_local_paths_bypass_unless_asked(void **state)
{
    (void)state;
    char url[256];
    upstream("a.tar", 1000, 1, url, sizeof url);
    struct stk__cache_config cfg = {.dir = cache_dir, .max_bytes = 1u << 20};
    struct stk__cache *c;
    struct stk__err err;
    assert_int_equal(stk__cache_new(&cfg, &c, &err), 0);
    if (getenv("STOKER_CACHE_LOCAL") == NULL) { /* the env var would force caching */
        struct stk__source *src = open_ok(c, url);
        expect_bytes(src, 1000, 1);
        stk__source_close(src);
        struct stk__cache_counts n;
        stk__cache_counts(c, &n);
        assert_int_equal(n.hits + n.misses, 0);
        assert_false(cached(url));
    }
    stk__cache_free(c);
}

/* Three shards fit; using A again makes B the least recently used. */
static void test_eviction_order(void **state)
{
    (void)state;
    char a[256], b[256], cc[256], d[256];
    const size_t size = 100 * KIB;
    upstream("a.tar", size, 1, a, sizeof a);
    upstream("b.tar", size, 2, b, sizeof b);
    upstream("c.tar", size, 3, cc, sizeof cc);
    upstream("d.tar", size, 4, d, sizeof d);
    struct stk__cache *c = new_cache(3 * (size + 256));
    const char *urls[] = {a, b, cc};
    for (int i = 0; i < 3; i++) {
        stk__source_close(open_ok(c, urls[i]));
        pause_ms(20); /* distinct mtimes even on coarse timestamps */
    }
    stk__source_close(open_ok(c, a));
    pause_ms(20);
    struct stk__source *src = open_ok(c, d);
    expect_bytes(src, size, 4);
    stk__source_close(src);
    assert_true(cached(a));
    assert_false(cached(b));
    assert_true(cached(cc));
    assert_true(cached(d));
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.evictions, 1);
    assert_int_equal(n.misses, 4);
    int temps;
    assert_true(cache_total(&temps) <= 3 * (size + 256));
    assert_int_equal(temps, 0);
    stk__cache_free(c);
}

/* Open shards are never evicted; when nothing else can go, a clear error. */
static void test_in_use_shards_stay(void **state)
{
    (void)state;
    char a[256], b[256], d[256];
    const size_t size = 100 * KIB;
    upstream("a.tar", size, 1, a, sizeof a);
    upstream("b.tar", size, 2, b, sizeof b);
    upstream("d.tar", size, 4, d, sizeof d);
    struct stk__cache *c = new_cache(2 * (size + 256));
    struct stk__source *sa = open_ok(c, a);
    struct stk__source *sb = open_ok(c, b);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cache_open(c, d, NULL, &src, &err);
    assert_int_equal(rc, STK_ECACHE);
    assert_non_null(strstr(err.msg, d));
    assert_non_null(strstr(err.msg, "smaller than the shards in flight (2 in use"));
    assert_non_null(strstr(err.msg, "raise cache_size or lower shards_in_flight"));
    assert_true(cached(a));
    assert_true(cached(b));
    assert_false(cached(d));
    int temps;
    assert_true(cache_total(&temps) <= 2 * (size + 256));
    assert_int_equal(temps, 0);
    /* The readers still see their bytes. */
    expect_bytes(sa, size, 1);
    stk__source_close(sa);
    /* With A closed, it is the one to go. */
    src = open_ok(c, d);
    expect_bytes(src, size, 4);
    expect_bytes(sb, size, 2);
    stk__source_close(sb);
    stk__source_close(src);
    assert_false(cached(a));
    assert_true(cached(b));
    assert_true(cached(d));
    stk__cache_free(c);
}

static void test_shard_larger_than_cache(void **state)
{
    (void)state;
    char url[256];
    upstream("big.tar", 200 * KIB, 1, url, sizeof url);
    struct stk__cache *c = new_cache(100 * KIB);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open(c, url, NULL, &src, &err), STK_ECACHE);
    assert_non_null(strstr(err.msg, url));
    assert_non_null(strstr(err.msg, "larger than cache_size (100.0 KiB)"));
    assert_false(cached(url));
    int temps;
    assert_int_equal(cache_total(&temps), 0);
    assert_int_equal(temps, 0);
    stk__cache_free(c);
}

static void test_upstream_error_leaves_nothing(void **state)
{
    (void)state;
    char url[256];
    snprintf(url, sizeof url, "%s/up/missing.tar", root);
    struct stk__cache *c = new_cache(1u << 20);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open(c, url, NULL, &src, &err), STK_ENOENT);
    assert_non_null(strstr(err.msg, url));
    int temps;
    assert_int_equal(cache_total(&temps), 0);
    assert_int_equal(temps, 0);
    stk__cache_free(c);
}

/* A URL file naming another URL (a collision, or a foreign file) is an
 * error, never another shard's bytes. */
static void test_foreign_url_file(void **state)
{
    (void)state;
    char url[256];
    upstream("a.tar", 1000, 1, url, sizeof url);
    struct stk__cache *c = new_cache(1u << 20);
    stk__source_close(open_ok(c, url));
    char hex[33], path[256];
    stk__cache_name(url, hex);
    snprintf(path, sizeof path, "%s/%s.url", cache_dir, hex);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("https://elsewhere/x.tar\n", f);
    fclose(f);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open(c, url, NULL, &src, &err), STK_ECACHE);
    assert_non_null(strstr(err.msg, "does not belong to this URL"));
    stk__cache_free(c);
}

/* A temp file whose filler is gone (its fill lock is free) is removed by
 * the next fill; one whose filler holds the lock is kept. */
static void test_stale_temp_removed(void **state)
{
    (void)state;
    char dead[256], live[256], url[256];
    upstream("dead.tar", 10, 1, dead, sizeof dead);
    upstream("live.tar", 10, 2, live, sizeof live);
    upstream("new.tar", 50 * KIB, 3, url, sizeof url);
    struct stk__cache *c = new_cache(1u << 20);
    char hd[33], hl[33], path[256];
    stk__cache_name(dead, hd);
    stk__cache_name(live, hl);
    snprintf(path, sizeof path, "%s/.tmp.%s.999999.0", cache_dir, hd);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/%s.lock", cache_dir, hl);
    int lk = open(path, O_RDWR | O_CREAT, 0644);
    assert_true(lk >= 0);
    assert_int_equal(flock(lk, LOCK_EX), 0);
    snprintf(path, sizeof path, "%s/.tmp.%s.999999.1", cache_dir, hl);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("in progress", f);
    fclose(f);

    /* A leftover of the very shard being filled: its lock is ours now. */
    char hn[33];
    stk__cache_name(url, hn);
    snprintf(path, sizeof path, "%s/.tmp.%s.999999.2", cache_dir, hn);
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("partial", f);
    fclose(f);

    stk__source_close(open_ok(c, url));
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/.tmp.%s.999999.0", cache_dir, hd);
    assert_int_equal(access(path, F_OK), -1);
    snprintf(path, sizeof path, "%s/.tmp.%s.999999.1", cache_dir, hl);
    assert_int_equal(access(path, F_OK), 0);
    close(lk);
    unlink(path);
    stk__cache_free(c);
}

/* Lock and URL files of shards that are not there (a failed fill) go at
 * the next fill, unless somebody holds that shard's fill lock. */
static void test_orphans_removed(void **state)
{
    (void)state;
    char gone[256], held[256], url[256], path[256];
    upstream("gone.tar", 10, 1, gone, sizeof gone);
    upstream("held.tar", 10, 2, held, sizeof held);
    upstream("new.tar", 20 * KIB, 3, url, sizeof url);
    struct stk__cache *c = new_cache(1u << 20);
    char hg[33], hh[33];
    stk__cache_name(gone, hg);
    stk__cache_name(held, hh);
    const char *suffixes[] = {".lock", ".url"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s%s", cache_dir, hg, suffixes[i]);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
        snprintf(path, sizeof path, "%s/%s%s", cache_dir, hh, suffixes[i]);
        f = fopen(path, "w");
        assert_non_null(f);
        fclose(f);
    }
    snprintf(path, sizeof path, "%s/%s.lock", cache_dir, hh);
    int lk = open(path, O_RDONLY);
    assert_true(lk >= 0);
    assert_int_equal(flock(lk, LOCK_EX), 0);

    stk__source_close(open_ok(c, url));
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s%s", cache_dir, hg, suffixes[i]);
        assert_int_equal(access(path, F_OK), -1);
        snprintf(path, sizeof path, "%s/%s%s", cache_dir, hh, suffixes[i]);
        assert_int_equal(access(path, F_OK), 0);
    }
    /* The new shard's own lock and URL file stay. */
    char hn[33];
    stk__cache_name(url, hn);
    snprintf(path, sizeof path, "%s/%s.url", cache_dir, hn);
    assert_int_equal(access(path, F_OK), 0);
    close(lk);
    stk__cache_free(c);
}

/* Eight openers at once, each with its own handle as separate processes
 * would have: one download, seven hits, everybody reads the same bytes. */
#define OPENERS 8

struct opener {
    pthread_barrier_t *start;
    const char *url;
    size_t size;
    struct stk__cache_counts counts;
};

static void *opener_main(void *arg)
{
    struct opener *o = arg;
    struct stk__cache *c = new_cache(64u << 20);
    pthread_barrier_wait(o->start);
    struct stk__source *src = open_ok(c, o->url);
    expect_bytes(src, o->size, 5);
    stk__source_close(src);
    stk__cache_counts(c, &o->counts);
    stk__cache_free(c);
    return NULL;
}

static void test_concurrent_fills_download_once(void **state)
{
    (void)state;
    char url[256];
    const size_t size = 3u << 20;
    upstream("shared.tar", size, 5, url, sizeof url);
    /* The filler sleeps after it starts, so the others surely wait on it. */
    setenv("STOKER_CACHE_TEST_FILL_DELAY_MS", "100", 1);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, OPENERS);
    pthread_t t[OPENERS];
    struct opener o[OPENERS];
    for (int i = 0; i < OPENERS; i++) {
        o[i] = (struct opener){.start = &start, .url = url, .size = size};
        assert_int_equal(pthread_create(&t[i], NULL, opener_main, &o[i]), 0);
    }
    uint64_t misses = 0, hits = 0;
    for (int i = 0; i < OPENERS; i++) {
        pthread_join(t[i], NULL);
        misses += o[i].counts.misses;
        hits += o[i].counts.hits;
    }
    pthread_barrier_destroy(&start);
    unsetenv("STOKER_CACHE_TEST_FILL_DELAY_MS");
    assert_int_equal(misses, 1);
    assert_int_equal(hits, OPENERS - 1);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    char url[256];
    upstream("a.tar", 5000, 1, url, sizeof url);
    int failures = 0;
    for (unsigned long n = 1; n < 1000; n++) {
        remove_all(cache_dir);
        struct stk__cache *c = new_cache(1u << 20);
        stk__alloc_fail_after(n);
        struct stk__source *src;
        struct stk__err err;
        stk__err_clear(&err);
        int rc = stk__cache_open(c, url, NULL, &src, &err);
        stk__alloc_fail_after(0);
        if (rc == 0) {
            expect_bytes(src, 5000, 1);
            stk__source_close(src);
            stk__cache_free(c);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        int temps;
        cache_total(&temps);
        assert_int_equal(temps, 0);
        stk__cache_free(c);
        failures++;
    }
    assert_true(failures >= 3);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_then_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_paths_bypass_unless_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_use_shards_stay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_larger_than_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upstream_error_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_url_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_temp_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orphans_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_fills_download_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
