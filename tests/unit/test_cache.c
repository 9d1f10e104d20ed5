/* SPDX-License-Identifier: MIT */
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
#include <semaphore.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
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

#include "base/alloc.h"
#include "cache/cache.h"
#include "io/source_seek.h"
#include "stoker.h"
#include "tar_builder.h"

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

static struct stk__source *open_ok2(struct stk__cache *c, const char *url, const char *name)
{
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cache_open(c, url, name, NULL, &src, &err);
    if (rc < 0)
        fail_msg("stk__cache_open(%s): %d %s", url, rc, err.msg);
    return src;
}

/* Local paths carry no secret: their name is the URL itself. */
static struct stk__source *open_ok(struct stk__cache *c, const char *url)
{
    return open_ok2(c, url, url);
}

/* Read src to its end (a miss fills the cache only then), and close it. */
static void read_through(struct stk__source *src)
{
    unsigned char buf[4096];
    ssize_t n;
    while ((n = stk__source_read(src, buf, sizeof buf)) > 0)
        ;
    if (n < 0)
        fail_msg("%s: read: %d %s", src->url, (int)n, src->err.msg);
    stk__source_close(src);
}

/* Read src to its end and close it: 0, or a read's error (in err). */
static int read_all_and_close(struct stk__source *src, struct stk__err *err)
{
    unsigned char buf[4096];
    ssize_t n;
    while ((n = stk__source_read(src, buf, sizeof buf)) > 0)
        ;
    if (n < 0)
        *err = src->err;
    stk__source_close(src);
    return (int)n;
}

/* Open url and read it all: 0, or the error of the open or of a read (a
 * miss meets cache-side errors while it streams) in err. */
static int open_and_read(struct stk__cache *c, const char *url, struct stk__err *err)
{
    struct stk__source *src;
    stk__err_clear(err);
    int rc = stk__cache_open(c, url, url, NULL, &src, err);
    return rc < 0 ? rc : read_all_and_close(src, err);
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

/* Nothing in the cache directory: no shard, URL file or temp file. */
static void assert_cache_empty(void)
{
    int temps;
    assert_int_equal(cache_total(&temps), 0);
    assert_int_equal(temps, 0);
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

    /* The sidecar names the URL (by the name given: its redacted form). */
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
        read_through(open_ok(c, urls[i]));
        pause_ms(20); /* distinct mtimes even on coarse timestamps */
    }
    read_through(open_ok(c, a));
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

/* Told the coming reads, the cache evicts the shard used farthest ahead
 * (Belady), not the least recently used; a shard with no coming use goes
 * before any; a use of the clock's epoch counts until some process read
 * the shard in that epoch (its mtime), even behind the clock. */
#define AT(epoch, along) (((uint64_t)(epoch) << 32) | (along))
static void test_eviction_by_next_use(void **state)
{
    (void)state;
    char a[256], b[256], cc[256], d[256], e[256];
    const size_t size = 100 * KIB;
    upstream("a.tar", size, 1, a, sizeof a);
    upstream("b.tar", size, 2, b, sizeof b);
    upstream("c.tar", size, 3, cc, sizeof cc);
    upstream("d.tar", size, 4, d, sizeof d);
    upstream("e.tar", size, 5, e, sizeof e);
    struct stk__cache *c = new_cache(3 * (size + 256));
    const char *urls[] = {a, b, cc};
    for (int i = 0; i < 3; i++) {
        read_through(open_ok(c, urls[i]));
        pause_ms(20); /* distinct mtimes: LRU alone would evict a */
    }
    const struct stk__cache_use uses[] = {
        {a, AT(0, 10)}, {a, AT(1, 5)}, {b, AT(0, 30)}, {cc, AT(0, 20)}, {d, AT(0, 5)}};
    assert_int_equal(stk__cache_set_uses(c, uses, 5), 0);
    stk__cache_advance(c, AT(0, 5));
    pause_ms(20);
    read_through(open_ok(c, d)); /* b is read last */
    assert_true(cached(a));
    assert_false(cached(b));
    assert_true(cached(cc));
    /* Read in this epoch, a's next use is in the next one; d's only use is
     * past; c's is to come, though behind the clock (a slower rank). */
    read_through(open_ok(c, a));
    stk__cache_advance(c, AT(0, 25));
    stk__cache_advance(c, AT(0, 1)); /* never back */
    pause_ms(20);
    read_through(open_ok(c, e));
    assert_false(cached(d));
    assert_true(cached(a));
    assert_true(cached(cc));
    /* In epoch 1, c's use is past and goes before a, which is still to come. */
    stk__cache_advance(c, AT(1, 0));
    pause_ms(20);
    read_through(open_ok(c, b));
    assert_false(cached(cc));
    assert_true(cached(a));
    /* No uses: least recently used again (a, read before e was filled). */
    assert_int_equal(stk__cache_set_uses(c, NULL, 0), 0);
    pause_ms(20);
    read_through(open_ok(c, d));
    assert_false(cached(a));
    assert_true(cached(e));
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.evictions, 4);
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
    /* Both filled: read to their ends now, still open (in use). */
    expect_bytes(sa, size, 1);
    expect_bytes(sb, size, 2);
    struct stk__source *src;
    struct stk__err err;
    int rc = open_and_read(c, d, &err);
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
    /* The readers still see their bytes (the fill handed them over). */
    char hex[33], path[256];
    stk__cache_name(a, hex);
    snprintf(path, sizeof path, "%s/%s", cache_dir, hex);
    FILE *fa = fopen(path, "rb");
    assert_non_null(fa);
    for (size_t i = 0; i < size; i++)
        assert_int_equal(fgetc(fa), byte_at(1, i));
    fclose(fa);
    stk__source_close(sa);
    /* With A closed, it is the one to go. */
    src = open_ok(c, d);
    expect_bytes(src, size, 4);
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
    struct stk__err err;
    assert_int_equal(open_and_read(c, url, &err), STK_ECACHE);
    assert_non_null(strstr(err.msg, url));
    assert_non_null(strstr(err.msg, "larger than cache_size (100.0 KiB)"));
    assert_false(cached(url));
    assert_cache_empty();
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
    assert_int_equal(stk__cache_open(c, url, url, NULL, &src, &err), STK_ENOENT);
    assert_non_null(strstr(err.msg, url));
    assert_cache_empty();
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
    read_through(open_ok(c, url));
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
    assert_int_equal(stk__cache_open(c, url, url, NULL, &src, &err), STK_ECACHE);
    assert_non_null(strstr(err.msg, "does not belong to this URL"));
    stk__cache_free(c);
}

/* Mode of cache_dir/name (lstat), or -1. */
static int mode_of(const char *name)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof path, "%s%s%s", cache_dir, name[0] ? "/" : "", name);
    return lstat(path, &st) == 0 ? (int)(st.st_mode & 07777) : -1;
}

/* Replace url's H.url by n bytes of content. */
static void write_url_file(const char *url, const char *content, size_t n)
{
    char hex[33], path[512];
    stk__cache_name(url, hex);
    snprintf(path, sizeof path, "%s/%s.url", cache_dir, hex);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(content, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

/* Whole content of cache_dir/name into buf (NUL-terminated); its length. */
static size_t read_cache_file(const char *name, char *buf, size_t cap)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", cache_dir, name);
    return tb_read_file(path, buf, cap);
}

/* The cache is per user: whatever the umask, the directory is 0700 and
 * every file 0600; H.url holds the name it was given (the redacted URL),
 * never the URL itself, which may carry credentials. */
static void test_private_files_without_secrets(void **state)
{
    (void)state;
    char url[256];
    upstream("secret-token-abc.tar", 100 * KIB, 1, url, sizeof url);
    const char *name = "https://***@example/shard.tar?sig=***";
    mode_t old = umask(0);
    struct stk__cache *c = new_cache(1u << 20);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open(c, url, name, NULL, &src, &err), 0);
    assert_string_equal(src->url, name);
    read_through(src);
    umask(old);
    assert_int_equal(mode_of(""), 0700);
    char hex[33], file[64], buf[512];
    stk__cache_name(url, hex);
    assert_int_equal(mode_of(hex), 0600);
    snprintf(file, sizeof file, "%s.url", hex);
    assert_int_equal(mode_of(file), 0600);
    snprintf(file, sizeof file, "%s.lock", hex);
    int lock_mode = mode_of(file);
    assert_true(lock_mode == 0600 || lock_mode == -1); /* removed once unused is fine */
    assert_int_equal(mode_of(".lock"), 0600);
    snprintf(file, sizeof file, "%s.url", hex);
    read_cache_file(file, buf, sizeof buf);
    assert_null(strstr(buf, "secret-token-abc"));
    assert_int_equal(strncmp(buf, name, strlen(name)), 0);
    assert_int_equal(buf[strlen(name)], '\n');
    /* and a hit knows it by URL and name */
    src = open_ok2(c, url, name);
    expect_bytes(src, 100 * KIB, 1);
    stk__source_close(src);
    stk__cache_free(c);
}

/* A cache holding upstream a.tar (1000 bytes of seed 1), filled under
 * name; url gets its URL and file the name of its H.url. */
static struct stk__cache *cache_with_a_tar(const char *name, char url[256], char file[64])
{
    char hex[33];
    upstream("a.tar", 1000, 1, url, 256);
    struct stk__cache *c = new_cache(1u << 20);
    read_through(open_ok2(c, url, name));
    stk__cache_name(url, hex);
    snprintf(file, 64, "%s.url", hex);
    return c;
}

/* Two URLs that differ only in their secrets have the same redacted name:
 * H.url also holds a digest of the full URL, so a file of another URL under
 * the same name is still caught. */
static void test_url_file_catches_same_name_other_secret(void **state)
{
    (void)state;
    char url[256], file[64], buf[512];
    struct stk__cache *c = cache_with_a_tar("https://***@host/a.tar", url, file);
    size_t n = read_cache_file(file, buf, sizeof buf);
    /* The same first line, another digest (the last hex digit changed). */
    assert_true(n > 2 && buf[n - 1] == '\n');
    buf[n - 2] = buf[n - 2] == '0' ? '1' : '0';
    write_url_file(url, buf, n);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open(c, url, "https://***@host/a.tar", NULL, &src, &err),
                     STK_ECACHE);
    assert_non_null(strstr(err.msg, "does not belong to this URL"));
    stk__cache_free(c);
}

/* A cache written by an earlier version holds the URL itself in H.url: it
 * is still a hit, and the file is rewritten without the URL. */
static void test_legacy_url_file_rewritten(void **state)
{
    (void)state;
    char url[256], file[64], buf[512];
    struct stk__cache *c = cache_with_a_tar("NAME", url, file);
    snprintf(buf, sizeof buf, "%s\n", url);
    write_url_file(url, buf, strlen(buf));
    struct stk__source *src = open_ok2(c, url, "NAME");
    expect_bytes(src, 1000, 1);
    stk__source_close(src);
    read_cache_file(file, buf, sizeof buf);
    assert_int_equal(strncmp(buf, "NAME\n", 5), 0);
    assert_int_equal(mode_of(file), 0600);
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.hits, 1);
    stk__cache_free(c);
}

/* A directory other users can write is refused: they could plant shards. */
static void test_shared_directory_refused(void **state)
{
    (void)state;
    assert_int_equal(mkdir(cache_dir, 0700), 0);
    assert_int_equal(chmod(cache_dir, 0770), 0);
    struct stk__cache_config cfg = {.dir = cache_dir, .max_bytes = 1u << 20};
    struct stk__cache *c = NULL;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__cache_new(&cfg, &c, &err), STK_ECACHE);
    assert_null(c);
    if (strstr(err.msg, "writable by other users") == NULL)
        fail_msg("message: %s", err.msg);
    assert_int_equal(chmod(cache_dir, 0755), 0); /* readable is fine: files are 0600 */
    assert_int_equal(stk__cache_new(&cfg, &c, &err), 0);
    stk__cache_free(c);
    if (geteuid() == 0) { /* only root can give the directory away */
        assert_int_equal(chown(cache_dir, 65534, 65534), 0);
        assert_int_equal(stk__cache_new(&cfg, &c, &err), STK_ECACHE);
        if (strstr(err.msg, "belongs to another user") == NULL)
            fail_msg("message: %s", err.msg);
    }
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

    read_through(open_ok(c, url));
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

    read_through(open_ok(c, url));
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

/* Calls that spun forever before the cache refused symbolic links end the
 * process with a message instead (SIGALRM after this long). */
#define BOUND_S 20

static void on_alarm(int sig)
{
    (void)sig;
    static const char msg[] = "test_cache: a cache call did not return within 20 s "
                              "(an unbounded retry loop?)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

enum plant_kind { PLANT_SYMLINK, PLANT_DANGLING, PLANT_FIFO, PLANT_DIR };

/* Put something that is not a regular file at cache_dir/name: a link to a
 * file outside the cache, a link to a name outside that does not exist yet,
 * a FIFO (an open for reading would block) or a directory. */
static void plant(const char *name, enum plant_kind kind)
{
    char path[512], target[256];
    snprintf(path, sizeof path, "%s/%s", cache_dir, name);
    unlink(path);
    rmdir(path);
    int rc = -1;
    switch (kind) {
    case PLANT_SYMLINK:
        snprintf(target, sizeof target, "%s/outside", root);
        rc = symlink(target, path);
        break;
    case PLANT_DANGLING:
        snprintf(target, sizeof target, "%s/created-outside", root);
        rc = symlink(target, path);
        break;
    case PLANT_FIFO:
        rc = mkfifo(path, 0600);
        break;
    case PLANT_DIR:
        rc = mkdir(path, 0700);
        break;
    }
    if (rc != 0)
        fail_msg("planting %s: %s", path, strerror(errno));
}

/* A name in the cache directory that is a symbolic link (the directory may
 * be reachable by others who plant one), a FIFO or a directory fails the
 * open with STK_ECACHE naming it, within BOUND_S, and nothing is created or
 * changed outside the cache. Before O_NOFOLLOW the loader spun forever on a
 * link at a lock file or shard, and created the link's target. */
static void test_planted_names_fail_cleanly(void **state)
{
    (void)state;
    char url[256], hex[33], outside[256], created[256];
    upstream("a.tar", 70 * KIB, 1, url, sizeof url);
    stk__cache_name(url, hex);
    snprintf(outside, sizeof outside, "%s/outside", root);
    snprintf(created, sizeof created, "%s/created-outside", root);
    const char *kinds[] = {"symlink", "dangling symlink", "FIFO", "directory"};
    const char *suffixes[] = {".lock", "", ".url", "/.lock"}; /* H.lock, H, H.url, .lock */
    signal(SIGALRM, on_alarm);
    for (size_t i = 0; i < sizeof suffixes / sizeof suffixes[0]; i++) {
        for (int kind = PLANT_SYMLINK; kind <= PLANT_DIR; kind++) {
            char name[64];
            if (i == 3)
                snprintf(name, sizeof name, ".lock");
            else
                snprintf(name, sizeof name, "%s%s", hex, suffixes[i]);
            FILE *f = fopen(outside, "w");
            assert_non_null(f);
            fputs("not the cache's\n", f);
            fclose(f);
            remove_all(cache_dir);
            struct stk__cache *c = new_cache(1u << 20);
            if (i == 2) /* H.url is only read with H in place */
                read_through(open_ok(c, url));
            plant(name, (enum plant_kind)kind);
            struct stk__err err;
            alarm(BOUND_S);
            int rc = open_and_read(c, url, &err);
            alarm(0);
            char where[512];
            snprintf(where, sizeof where, "%s/%s", cache_dir, name);
            if (rc != STK_ECACHE || strstr(err.msg, where) == NULL)
                fail_msg("%s at %s: rc %d (want %d), message '%s'", kinds[kind], name, rc,
                         STK_ECACHE, err.msg);
            assert_int_equal(access(created, F_OK), -1);
            char buf[64] = {0};
            f = fopen(outside, "r");
            assert_non_null(f);
            assert_non_null(fgets(buf, sizeof buf, f));
            fclose(f);
            assert_string_equal(buf, "not the cache's\n");
            stk__cache_free(c);
            char path[512];
            snprintf(path, sizeof path, "%s/%s", cache_dir, name);
            rmdir(path); /* remove_all unlinks only */
        }
    }
    unlink(outside);
}

/* An upstream the test feeds by hand: a FIFO a thread writes `first` bytes
 * into, then (once the reader posts `go`, or after 10 s) the rest, or
 * nothing more when close_early is set. */
struct fifo_writer {
    char path[256];
    unsigned char *data;
    size_t size, first;
    int close_early;
    sem_t go;
    int timed_out; /* nobody posted go: the reader got nothing before the end */
};

static void write_fully(int fd, const unsigned char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void *fifo_writer_main(void *arg)
{
    struct fifo_writer *w = arg;
    int fd = open(w->path, O_WRONLY); /* blocks until the upstream opens it */
    if (fd < 0)
        return NULL;
    write_fully(fd, w->data, w->first);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    while (sem_timedwait(&w->go, &until) < 0) {
        if (errno != EINTR) {
            w->timed_out = 1;
            break;
        }
    }
    if (!w->close_early)
        write_fully(fd, w->data + w->first, w->size - w->first);
    close(fd);
    return NULL;
}

static void fifo_writer_start(struct fifo_writer *w, pthread_t *t, const char *name, size_t size,
                              size_t first, int close_early)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s/up/%s", root, name);
    if (access(w->path, F_OK) != 0)
        assert_int_equal(mkfifo(w->path, 0644), 0);
    w->data = malloc(size);
    assert_non_null(w->data);
    for (size_t i = 0; i < size; i++)
        w->data[i] = byte_at(7, i);
    w->size = size;
    w->first = first;
    w->close_early = close_early;
    sem_init(&w->go, 0, 0);
    assert_int_equal(pthread_create(t, NULL, fifo_writer_main, w), 0);
}

static void fifo_writer_join(struct fifo_writer *w, pthread_t t)
{
    sem_post(&w->go);
    pthread_join(t, NULL);
    sem_destroy(&w->go);
    free(w->data);
}

/* Read exactly n bytes of seed 7 from offset off. */
static void expect_prefix(struct stk__source *src, size_t off, size_t n)
{
    unsigned char buf[4096];
    size_t end = off + n;
    while (off < end) {
        size_t want = end - off < sizeof buf ? end - off : sizeof buf;
        ssize_t got = stk__source_read(src, buf, want);
        if (got <= 0)
            fail_msg("read at %zu: %zd %s", off, got, src->err.msg);
        for (ssize_t i = 0; i < got; i++)
            if (buf[i] != byte_at(7, off + (size_t)i))
                fail_msg("byte %zu is %u, expected %u", off + (size_t)i, buf[i],
                         byte_at(7, off + (size_t)i));
        off += (size_t)got;
    }
}

/* A miss streams: the caller reads the first half while the upstream has
 * not sent the second (before streaming, the open itself waited for the
 * whole shard, so the writer timed out). The full read leaves the shard
 * cached, also when the handle was freed meanwhile. */
static void test_miss_streams_before_upstream_ends(void **state)
{
    (void)state;
    const size_t size = 3u << 20, half = size / 2;
    struct fifo_writer w;
    pthread_t t;
    fifo_writer_start(&w, &t, "slow.tar", size, half, 0);
    struct stk__cache *c = new_cache(64u << 20);
    struct stk__source *src = open_ok(c, w.path);
    expect_prefix(src, 0, half);
    int temps;
    cache_total(&temps);
    assert_int_equal(temps, 1);
    assert_false(cached(w.path));
    stk__cache_free(c); /* the fill keeps what it needs */
    sem_post(&w.go);
    expect_prefix(src, half, size - half);
    unsigned char b;
    assert_int_equal(stk__source_read(src, &b, 1), 0);
    stk__source_close(src);
    assert_int_equal(w.timed_out, 0);
    fifo_writer_join(&w, t);
    assert_true(cached(w.path));
    /* the shard, and H.url: its name (here the path), '\n', 16 hex digits, '\n' */
    assert_int_equal(cache_total(&temps), size + strlen(w.path) + 18);
    assert_int_equal(temps, 0);

    /* A hit now, though nobody writes the FIFO any more. */
    c = new_cache(64u << 20);
    src = open_ok(c, w.path);
    expect_prefix(src, 0, size);
    stk__source_close(src);
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.hits, 1);
    assert_int_equal(n.misses, 0);
    stk__cache_free(c);
}

/* Closing a miss before its end (a stopped epoch) abandons the fill: no
 * temp, no shard, no miss, the fill lock free; the next open fills it. */
static void test_early_close_abandons_fill(void **state)
{
    (void)state;
    const size_t size = 2u << 20, first = 256 * KIB;
    struct fifo_writer w;
    pthread_t t;
    fifo_writer_start(&w, &t, "stopped.tar", size, first, 1);
    char url[300];
    snprintf(url, sizeof url, "pipe:cat %s", w.path);
    const struct stk__source_config scfg = {.allow_pipe = 1};
    struct stk__cache *c = new_cache(64u << 20);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    if (stk__cache_open(c, url, url, &scfg, &src, &err) < 0)
        fail_msg("open: %s", err.msg);
    expect_prefix(src, 0, first);
    /* The upstream stalls (the writer waits): close must not wait for it. */
    uint64_t t0 = (uint64_t)time(NULL);
    stk__source_close(src);
    assert_true((uint64_t)time(NULL) - t0 < 5);
    assert_cache_empty();
    assert_false(cached(url));
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses + n.bytes_written, 0);
    fifo_writer_join(&w, t);

    fifo_writer_start(&w, &t, "stopped.tar", size, size, 0);
    sem_post(&w.go); /* all of it, then the end */
    stk__err_clear(&err);
    if (stk__cache_open(c, url, url, &scfg, &src, &err) < 0)
        fail_msg("open: %s", err.msg);
    expect_prefix(src, 0, size);
    unsigned char b;
    assert_int_equal(stk__source_read(src, &b, 1), 0);
    stk__source_close(src);
    fifo_writer_join(&w, t);
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses, 1);
    assert_int_equal(n.bytes_written, size);
    assert_true(cached(url));
    stk__cache_free(c);
}

/* A global order opens a shard at many offsets (plan.h): opened whole, a
 * miss returns only once the shard is complete in the cache (the first
 * read already finds it there, and a seek lands in the cached file), one
 * download, and the next opens are hits. A caller cancelled meanwhile gets
 * an error and leaves nothing behind. */
static void test_open_whole_fills_before_returning(void **state)
{
    (void)state;
    const size_t size = 300 * KIB, off = 100000;
    struct fifo_writer w;
    pthread_t t;
    fifo_writer_start(&w, &t, "whole.tar", size, size, 0);
    sem_post(&w.go);
    char url[300];
    snprintf(url, sizeof url, "pipe:cat %s", w.path);
    const struct stk__source_config scfg = {.allow_pipe = 1};
    struct stk__cache *c = new_cache(4u << 20);
    struct stk__source *src;
    struct stk__err err;
    stk__err_clear(&err);
    if (stk__cache_open_whole(c, url, url, &scfg, &src, &err) < 0)
        fail_msg("open: %s", err.msg);
    fifo_writer_join(&w, t);
    assert_true(cached(url)); /* before any read */
    struct stk__cache_counts n;
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses, 1);
    assert_int_equal(n.bytes_written, size);
    assert_int_equal(stk__source_seek(src, off), 0);
    expect_prefix(src, off, size - off);
    stk__source_close(src);
    stk__err_clear(&err);
    if (stk__cache_open_whole(c, url, url, &scfg, &src, &err) < 0)
        fail_msg("reopen: %s", err.msg);
    expect_prefix(src, 0, size);
    stk__source_close(src);
    stk__cache_counts(c, &n);
    assert_int_equal(n.misses, 1);
    assert_int_equal(n.hits, 1);

    stk__cache_free(c);

    /* A cancelled caller: an error, no shard, no temp. The fill sleeps
     * first (a test hook), so the cancel surely comes before its end. */
#ifndef STK_TEST_HOOKS
    fail_msg("built without -Dtest_hooks=true: the fill delay this test needs is compiled out");
#endif
    upstream("cancelled.tar", size, 3, url, sizeof url);
    setenv("STOKER_CACHE_TEST_FILL_DELAY_MS", "60000", 1);
    c = new_cache(4u << 20);
    unsetenv("STOKER_CACHE_TEST_FILL_DELAY_MS");
    atomic_int cancel = 1;
    const struct stk__source_config cancelled = {.cancel = &cancel};
    stk__err_clear(&err);
    assert_int_equal(stk__cache_open_whole(c, url, url, &cancelled, &src, &err), STK_EIO);
    assert_non_null(strstr(err.msg, "cancelled"));
    assert_false(cached(url));
    int temps;
    cache_total(&temps);
    assert_int_equal(temps, 0);
    stk__cache_free(c);
}

/* Whether a cache keeps a set of shards whole: their bytes, a block for
 * each H.url, and a reservation step (max / 64, 64 KiB .. 16 MiB) for each
 * fill in flight. */
static void test_holds(void **state)
{
    (void)state;
    const uint64_t mib = 1u << 20;
    /* 64 MiB: a 1 MiB step, 4 fills, 10 H.url files of 4 KiB. */
    assert_true(stk__cache_holds(64 * mib, 59 * mib, 10, 4));
    assert_false(stk__cache_holds(64 * mib, 60 * mib, 10, 4));
    assert_false(stk__cache_holds(64 * mib, 65 * mib, 0, 0));
    assert_false(stk__cache_holds(64 * mib, UINT64_MAX - 1, 1, 1)); /* no wrap-around */
    assert_true(stk__cache_holds(64 * mib, 0, 0, 0));
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
#ifndef STK_TEST_HOOKS
    fail_msg("built without -Dtest_hooks=true: the fill delay this test needs is compiled out");
#endif
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

/* Open url whole (stk__cache_open_whole) and read it all: as open_and_read. */
static int open_whole_and_read(struct stk__cache *c, const char *url, struct stk__err *err)
{
    struct stk__source *src;
    stk__err_clear(err);
    int rc = stk__cache_open_whole(c, url, url, NULL, &src, err);
    return rc < 0 ? rc : read_all_and_close(src, err);
}

static void allocation_failures(int whole)
{
    char url[256];
    upstream("a.tar", 5000, 1, url, sizeof url);
    int failures = 0;
    for (unsigned long n = 1; n < 1000; n++) {
        remove_all(cache_dir);
        struct stk__cache *c = new_cache(1u << 20);
        /* Through the reads too: the fill allocates while it streams. */
        stk__alloc_fail_after(n);
        struct stk__err err;
        int rc = whole ? open_whole_and_read(c, url, &err) : open_and_read(c, url, &err);
        stk__alloc_fail_after(0);
        if (rc == 0) {
            struct stk__source *src = open_ok(c, url);
            expect_bytes(src, 5000, 1);
            stk__source_close(src);
            stk__cache_free(c);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        if (whole && cached(url)) {
            /* The fill ended, and an allocation after it failed: the
             * shard is in place, and complete. */
            struct stk__source *src = open_ok(c, url);
            expect_bytes(src, 5000, 1);
            stk__source_close(src);
        } else {
            assert_false(cached(url));
        }
        int temps;
        cache_total(&temps);
        assert_int_equal(temps, 0);
        stk__cache_free(c);
        failures++;
    }
    assert_true(failures >= 3);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    allocation_failures(0);
    allocation_failures(1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fill_then_hit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_paths_bypass_unless_asked, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_eviction_by_next_use, setup, teardown),
        cmocka_unit_test_setup_teardown(test_in_use_shards_stay, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shard_larger_than_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upstream_error_leaves_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_foreign_url_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_private_files_without_secrets, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url_file_catches_same_name_other_secret, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_legacy_url_file_rewritten, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shared_directory_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_temp_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_orphans_removed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_planted_names_fail_cleanly, setup, teardown),
        cmocka_unit_test_setup_teardown(test_miss_streams_before_upstream_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(test_early_close_abandons_fill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_concurrent_fills_download_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_allocation_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_whole_fills_before_returning, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holds, setup, teardown),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
