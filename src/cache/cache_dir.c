/* SPDX-License-Identifier: MIT */
/*
 * cache_dir.c - the node cache's directory: file names, opening files
 * without following links, flock locks that follow renames, temp and .url
 * files, and room for a fill (scanning, stale temps, eviction by next use or LRU). The
 * layout and the locking design are described at the top of cache.c; this
 * file holds the primitives both cache.c (lookups) and cache_fill.c (a
 * miss being filled) build on, and calls neither of them.
 */
#include "cache/cache_impl.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stoker.h"

#define HEX_LEN STK__CACHE_HEX_LEN
#define NAME_MAX_LEN STK__CACHE_NAME_MAX
#define TMP_PREFIX STK__CACHE_TMP_PREFIX

void stk__cache_name(const char *url, char hex[HEX_LEN + 1])
{
    /* FNV-1a, 128-bit: short, dependency-free and well spread; URLs are
     * the user's own, so a cryptographic hash buys nothing, and a collision
     * is still detected through H.url. */
    __extension__ typedef unsigned __int128 u128;
    u128 h = ((u128)0x6c62272e07bb0142ULL << 64) | 0x62b821756295c58dULL;
    const u128 prime = ((u128)1 << 88) | 0x13b;
    for (const unsigned char *p = (const unsigned char *)url; *p != '\0'; p++) {
        h ^= *p;
        h *= prime;
    }
    snprintf(hex, HEX_LEN + 1, "%016llx%016llx", (unsigned long long)(h >> 64),
             (unsigned long long)h);
}

/* FNV-1a, 64-bit: another function than the name's (other prime, other
 * width), so that two URLs colliding in H almost surely differ here. */
static uint64_t url_digest(const char *url)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)url; *p != '\0'; p++) {
        h ^= *p;
        h *= 0x100000001b3ULL;
    }
    return h;
}

char *stk__cache_url_record(const char *url, const char *name, size_t *len)
{
    size_t n = strlen(name);
    char *rec = stk__malloc(n + 19);
    if (rec == NULL)
        return NULL;
    memcpy(rec, name, n);
    snprintf(rec + n, 19, "\n%016llx\n", (unsigned long long)url_digest(url));
    *len = n + 18;
    return rec;
}

static int is_hex_name(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

/* "12.3 MiB" */
static const char *fmt_size(char *buf, size_t cap, uint64_t n)
{
    if (n < 1024)
        snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    else if (n < ((uint64_t)1 << 20))
        snprintf(buf, cap, "%.1f KiB", (double)n / 1024.0);
    else if (n < ((uint64_t)1 << 30))
        snprintf(buf, cap, "%.1f MiB", (double)n / 1048576.0);
    else
        snprintf(buf, cap, "%.2f GiB", (double)n / 1073741824.0);
    return buf;
}

int stk__cache_flock(int fd, int how)
{
    int rc;
    while ((rc = flock(fd, how)) < 0 && errno == EINTR)
        ;
    return rc;
}

/* Every name in the cache directory is opened here: never through a
 * symbolic link (O_NOFOLLOW: whoever can write to the directory could point
 * one outside it), never blocking on a FIFO (O_NONBLOCK, which changes
 * nothing for the regular files accepted), and only a regular file is
 * returned. */
int stk__cache_open_file(const struct stk__cache *c, const char *name, int flags)
{
    int fd = openat(c->dir_fd, name, flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0600);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -STK__CACHE_ENOTREG;
    }
    return fd;
}

int stk__cache_create(const struct stk__cache *c, const char *name, int flags)
{
    int fd = stk__cache_open_file(c, name, flags | O_CREAT);
    /* The umask may have taken bits the owner needs; fails harmlessly on a
     * lock file another user created in a cache of an earlier version. */
    if (fd >= 0)
        (void)fchmod(fd, 0600);
    return fd;
}

const char *stk__cache_strerror(int e)
{
    switch (e) {
    case ELOOP:
        return "it is a symbolic link, and the cache directory holds only stoker's own "
               "regular files (remove it)";
    case STK__CACHE_ENOTREG:
        return "it is not a regular file, and the cache directory holds only stoker's own "
               "regular files (remove it)";
    case STK__CACHE_EREPLACED:
        return "it was replaced each time it was locked (is another program renaming files "
               "in the cache directory?)";
    default:
        return strerror(e);
    }
}

/* Numbers temp files: process-wide, so that handles of one process never
 * pick the same name. */
static atomic_uint_fast64_t tmp_seq;

void stk__cache_tmp_name(const char *hex, const char *suffix, char name[STK__CACHE_NAME_MAX])
{
    unsigned long long seq = (unsigned long long)atomic_fetch_add(&tmp_seq, 1);
    snprintf(name, STK__CACHE_NAME_MAX, TMP_PREFIX "%s.%ld.%llu%s", hex, (long)getpid(), seq,
             suffix);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int stk__cache_write_url_file(const struct stk__cache *c, const char *hex, const char *tmp,
                              const char *rec, size_t len, const char *shown,
                              struct stk__err *err)
{
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.url", hex);
    int fd = stk__cache_create(c, tmp, O_WRONLY | O_EXCL);
    int rc = fd < 0 ? fd : write_all(fd, rec, len);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (rc == 0 && renameat(c->dir_fd, tmp, c->dir_fd, name) < 0)
        rc = -errno;
    if (fd >= 0)
        close(fd);
    if (rc < 0) {
        unlinkat(c->dir_fd, tmp, 0);
        return stk__errf(err, STK_ECACHE, "%s: cannot write %s/%s: %s", shown, c->dir, name,
                         stk__cache_strerror(-rc));
    }
    return 0;
}

int stk__cache_still_named(const struct stk__cache *c, int fd, const char *name)
{
    struct stat a, b;
    return fstat(fd, &a) == 0 && fstatat(c->dir_fd, name, &b, AT_SYMLINK_NOFOLLOW) == 0 &&
           a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* A lock file that an evictor unlinks between our open and our lock is
 * opened again, a bounded number of times. */
int stk__cache_lock_file(const struct stk__cache *c, const char *name, int how, int create)
{
    for (int tries = 0; tries < STK__CACHE_TRIES; tries++) {
        /* Read-only is enough for flock. */
        int fd = create ? stk__cache_create(c, name, O_RDONLY)
                        : stk__cache_open_file(c, name, O_RDONLY);
        if (fd < 0)
            return fd;
        if (stk__cache_flock(fd, how) < 0) {
            int e = errno;
            close(fd);
            return -e;
        }
        if (stk__cache_still_named(c, fd, name))
            return fd;
        close(fd); /* evicted between open and lock: the name is another file now */
        if (!create)
            return -ENOENT;
    }
    return -STK__CACHE_EREPLACED;
}


/* ---------------------------------------------------------------------- */
/* Room: scanning, stale temps, eviction                                  */

struct entry {
    char hex[HEX_LEN + 1];
    struct timespec used;
    uint64_t next; /* its next use (UINT64_MAX: none known) */
};

struct scan {
    uint64_t total; /* every regular file in the directory */
    struct entry *shards;
    size_t n, cap;
    size_t fills;       /* live temps of other fills */
    uint64_t fill_bytes;
};

/* Eviction order: no known next use, then the farthest next use (Belady),
 * and among equals the least recently used. */
static int evict_first(const void *a, const void *b)
{
    const struct entry *x = a, *y = b;
    if (x->next != y->next)
        return x->next > y->next ? -1 : 1;
    if (x->used.tv_sec != y->used.tv_sec)
        return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
    if (x->used.tv_nsec != y->used.tv_nsec)
        return x->used.tv_nsec < y->used.tv_nsec ? -1 : 1;
    return strcmp(x->hex, y->hex);
}

/* A temp whose fill lock can be taken has no filler: remove it. So has
 * another temp of the shard that own_tmp fills (we hold its lock: it is a
 * leftover of a filler that died before us). Returns 1 if removed. Called
 * under .lock. */
static int remove_if_stale(const struct stk__cache *c, const char *name, const char *own_tmp)
{
    const char *hex = name + sizeof TMP_PREFIX - 1;
    if (strlen(name) < sizeof TMP_PREFIX - 1 + HEX_LEN || !is_hex_name(hex, HEX_LEN))
        return 0; /* not ours: count it, never delete it */
    if (strncmp(hex, own_tmp + sizeof TMP_PREFIX - 1, HEX_LEN) == 0) {
        unlinkat(c->dir_fd, name, 0);
        return 1;
    }
    char lock[NAME_MAX_LEN];
    snprintf(lock, sizeof lock, "%.*s.lock", HEX_LEN, hex);
    int fd = stk__cache_lock_file(c, lock, LOCK_EX | LOCK_NB, 0);
    if (fd == -EWOULDBLOCK)
        return 0;
    unlinkat(c->dir_fd, name, 0);
    if (fd >= 0)
        close(fd);
    return 1;
}

/* H.url or H.lock without H while nobody fills H: left by a fill that
 * failed or was killed (or an evictor that was). Returns 1 if removed.
 * Called under .lock. */
static int remove_if_orphan(const struct stk__cache *c, const char *name)
{
    size_t len = strlen(name);
    if (len <= HEX_LEN || !is_hex_name(name, HEX_LEN) ||
        (strcmp(name + HEX_LEN, ".url") != 0 && strcmp(name + HEX_LEN, ".lock") != 0))
        return 0;
    char hex[HEX_LEN + 1], lock[NAME_MAX_LEN];
    memcpy(hex, name, HEX_LEN);
    hex[HEX_LEN] = '\0';
    snprintf(lock, sizeof lock, "%s.lock", hex);
    struct stat st;
    if (fstatat(c->dir_fd, hex, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return 0;
    int fd = stk__cache_lock_file(c, lock, LOCK_EX | LOCK_NB, 0);
    if (fd == -EWOULDBLOCK)
        return 0;
    /* Again under the fill lock: a fill may have completed meanwhile. */
    int removed = fstatat(c->dir_fd, hex, &st, AT_SYMLINK_NOFOLLOW) < 0 &&
                  unlinkat(c->dir_fd, name, 0) == 0;
    if (fd >= 0)
        close(fd);
    return removed;
}

static int scan_dir(const struct stk__cache *c, const char *own_tmp, struct scan *s)
{
    memset(s, 0, sizeof *s);
    int fd = openat(c->dir_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd < 0 ? NULL : fdopendir(fd);
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return -errno;
    }
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        const char *name = de->d_name;
        struct stat st;
        if (fstatat(c->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        int is_tmp = strncmp(name, TMP_PREFIX, sizeof TMP_PREFIX - 1) == 0;
        if (is_tmp && strcmp(name, own_tmp) != 0) {
            if (remove_if_stale(c, name, own_tmp))
                continue;
            s->fills++;
            s->fill_bytes += (uint64_t)st.st_size;
        }
        if (!is_tmp && remove_if_orphan(c, name))
            continue;
        s->total += (uint64_t)st.st_size;
        if (strlen(name) == HEX_LEN && is_hex_name(name, HEX_LEN)) {
            if (s->n == s->cap) {
                size_t cap = s->cap ? s->cap * 2 : 64;
                struct entry *e = stk__realloc(s->shards, cap * sizeof *e);
                if (e == NULL) {
                    rc = -ENOMEM;
                    break;
                }
                s->shards = e;
                s->cap = cap;
            }
            memcpy(s->shards[s->n].hex, name, HEX_LEN + 1);
            s->shards[s->n].used = st.st_mtim;
            s->n++;
        }
    }
    closedir(d);
    return rc;
}

/* Remove shard hex if nobody reads it. Returns the bytes freed, 0 if in use. */
static uint64_t evict(const struct stk__cache *c, const char *hex)
{
    int fd = stk__cache_open_file(c, hex, O_RDONLY);
    if (fd < 0)
        return 0;
    struct stat st;
    if (stk__cache_flock(fd, LOCK_EX | LOCK_NB) < 0 || !stk__cache_still_named(c, fd, hex) || fstat(fd, &st) < 0) {
        close(fd);
        return 0;
    }
    uint64_t freed = (uint64_t)st.st_size;
    char name[NAME_MAX_LEN];
    unlinkat(c->dir_fd, hex, 0);
    snprintf(name, sizeof name, "%s.url", hex);
    if (fstatat(c->dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        unlinkat(c->dir_fd, name, 0) == 0)
        freed += (uint64_t)st.st_size;
    /* The fill lock goes too, unless a filler waits on it: lock files
     * would otherwise pile up, one per shard ever cached. */
    snprintf(name, sizeof name, "%s.lock", hex);
    int lk = stk__cache_lock_file(c, name, LOCK_EX | LOCK_NB, 0);
    if (lk >= 0) {
        unlinkat(c->dir_fd, name, 0);
        close(lk);
    }
    close(fd);
    return freed;
}

int stk__cache_reserve(struct stk__cache *c, const char *name, const char *own_tmp, int tmp_fd,
                       uint64_t *reserved, uint64_t target, struct stk__err *err)
{
    char a[32], b[32], d[32], e[32], f[32];
    if (target > c->max_bytes)
        return stk__errf(err, STK_ECACHE,
                         "%s: shard is larger than cache_size (%s): at least %s; raise "
                         "cache_size or do not cache it",
                         name, fmt_size(a, sizeof a, c->max_bytes), fmt_size(b, sizeof b, target));
    int g = stk__cache_lock_file(c, ".lock", LOCK_EX, 1);
    if (g < 0)
        return stk__errf(err, STK_ECACHE, "%s: cannot lock %s/.lock: %s", name, c->dir,
                         stk__cache_strerror(-g));
    struct scan s;
    int rc = scan_dir(c, own_tmp, &s);
    if (rc < 0) {
        rc = stk__errf(err, rc == -ENOMEM ? STK_ENOMEM : STK_ECACHE, "%s: cannot list cache %s: %s",
                       name, c->dir, strerror(-rc));
        goto out;
    }
    uint64_t need = target - *reserved;
    if (s.total + need > c->max_bytes) {
        for (size_t i = 0; i < s.n; i++)
            s.shards[i].next = stk__cache_next_use(c, s.shards[i].hex, &s.shards[i].used);
        if (s.n > 0)
            qsort(s.shards, s.n, sizeof *s.shards, evict_first);
        size_t busy = 0;
        uint64_t busy_bytes = 0;
        for (size_t i = 0; i < s.n && s.total + need > c->max_bytes; i++) {
            uint64_t freed = evict(c, s.shards[i].hex);
            if (freed > 0) {
                s.total = s.total > freed ? s.total - freed : 0;
                atomic_fetch_add(&c->evictions, 1);
                continue;
            }
            struct stat st;
            busy++;
            if (fstatat(c->dir_fd, s.shards[i].hex, &st, AT_SYMLINK_NOFOLLOW) == 0)
                busy_bytes += (uint64_t)st.st_size;
        }
        if (s.total + need > c->max_bytes) {
            rc = stk__errf(err, STK_ECACHE,
                           "%s: cache_size %s is smaller than the shards in flight (%zu in use "
                           "holding %s, %zu other fills holding %s, this one %s and needs %s "
                           "more); raise cache_size or lower shards_in_flight (%u per process)",
                           name, fmt_size(a, sizeof a, c->max_bytes), busy,
                           fmt_size(b, sizeof b, busy_bytes), s.fills,
                           fmt_size(d, sizeof d, s.fill_bytes),
                           fmt_size(e, sizeof e, *reserved),
                           fmt_size(f, sizeof f, need), c->shards_in_flight);
            goto out;
        }
    }
    if (ftruncate(tmp_fd, (off_t)target) < 0) {
        rc = stk__errf(err, STK_ECACHE, "%s: cannot extend %s/%s: %s", name, c->dir, own_tmp,
                       strerror(errno));
        goto out;
    }
    *reserved = target;
out:
    stk__free(s.shards);
    close(g);
    return rc;
}

void stk__cache_unref(struct stk__cache *c)
{
    if (atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    close(c->dir_fd);
    stk__cache_uses_free(c);
    stk__free(c->dir);
    stk__free(c);
}
