/* SPDX-License-Identifier: MIT */
/*
 * cache.c - node-local shard cache: whole shards on local disk, filled once
 * per node, bounded in size by evicting shards nobody reads: by next use
 * when the loader gave the node's coming reads (cache_next_use.c), else LRU.
 *
 * Layout of the cache directory (H = 32 hex digits, stk__cache_name(url)):
 *   H               the complete shard; its mtime is the LRU stamp
 *   H.url           two lines: the URL redacted (for people listing the
 *                   directory) and a 64-bit digest of the full URL, so that
 *                   a collision of H is caught even between URLs that
 *                   differ only in their secrets, without storing them
 *   H.lock          fill lock: held LOCK_EX by the one filler of H
 *   .tmp.H.PID.SEQ  a fill in progress (and .tmp.H.PID.SEQu for H.url)
 *   .lock           cache-wide lock: held LOCK_EX while the total size is
 *                   computed and shards are evicted to make room
 *
 * The directory is per user: created 0700, refused when another user owns
 * it or may write to it (they could plant shards), and every file is
 * created 0600, whatever the umask. A shard may be private data, and the
 * digest in H.url is a hash of a URL that may carry credentials.
 *
 * DESIGN (locking). All locks are flock(2) locks, which belong to an open
 * file description, so threads of one process exclude each other exactly
 * as processes do, and a killed process drops its locks.
 *  - Readers hold LOCK_SH on the data file H itself for as long as the
 *    returned source is open. An evictor takes LOCK_EX|LOCK_NB on H and
 *    skips the shard when that fails: a shard in use is never removed.
 *  - A filler holds H.lock LOCK_EX from before it checks for H until H is
 *    renamed into place (or its fill is abandoned and the temp unlinked).
 *    The temp is locked LOCK_SH from its creation, for the caller that
 *    reads it while it fills, and a lock follows the inode through rename.
 *    Processes that want the same shard block on H.lock, then find H: one
 *    download per shard per node.
 *  - The temp file grows in reservations: under .lock the filler sums the
 *    sizes of every file in the directory (temps count at their reserved,
 *    ftruncate'd size), evicts LRU shards until its next step fits, and
 *    extends its temp to the new reservation. So every process agrees on
 *    the total, and the directory never holds more than max_bytes.
 *  - Blocking waits are only: H.lock (its holder, a filler thread, waits
 *    for nothing but .lock and upstream I/O, never for its reader) and .lock (its holder only takes non-blocking
 *    locks). Readers never block anybody but an evictor, who does not wait.
 *    Hence no deadlock, whatever each thread holds while it waits.
 *  - A temp file is stale when its H.lock can be taken (its filler died:
 *    the kernel dropped the lock); whoever scans under .lock removes it.
 *    This works across PID namespaces, unlike checking that a PID lives.
 *  - H.url and H.lock without H, whose fill lock is free, are leftovers of
 *    failed fills and go in the same scan.
 *  - Lock files that an evictor unlinks may still be open elsewhere, so
 *    after taking a lock on a named file we check that the name still
 *    refers to the locked inode, and retry otherwise (STK__CACHE_TRIES
 *    times at most: a name that keeps changing is an error, not a spin).
 *  - Every name is opened with O_NOFOLLOW and O_NONBLOCK and must be a
 *    regular file (stk__cache_open_file): a symbolic link, FIFO or
 *    directory planted in the directory fails the open with STK_ECACHE
 *    naming it, instead of making us lock, read or create the link's
 *    target (a retry loop compared the link with its target forever).
 *
 * Streaming fill (cache_fill.c): a miss returns at once a source that
 * reads the temp file behind a filler thread that downloads into it, so
 * the first sample waits for the first chunk, not the whole shard. Other
 * processes still wait on H.lock for the finished file rather than follow
 * a growing one.
 */
#include "cache/cache_impl.h"

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
#include "base/threads.h"
#include "io/source_file.h"
#include "stoker.h"

#define HEX_LEN STK__CACHE_HEX_LEN
#define NAME_MAX_LEN STK__CACHE_NAME_MAX
#define TMP_PREFIX STK__CACHE_TMP_PREFIX


/* ---------------------------------------------------------------------- */
/* A source over a cached file: the file's LOCK_SH lives as long as it.   */

struct cached_source {
    struct stk__source base;
    struct stk__source *file; /* owns the locked fd: closing it drops the lock */
};

static ssize_t cached_read(struct stk__source *src, void *buf, size_t cap)
{
    struct cached_source *cs = (struct cached_source *)src;
    ssize_t n = stk__source_read(cs->file, buf, cap);
    if (n < 0)
        src->err = cs->file->err;
    return n;
}

static void cached_close(struct stk__source *src)
{
    struct cached_source *cs = (struct cached_source *)src;
    stk__source_close(cs->file);
    stk__free(cs);
}

static int64_t cached_skip(struct stk__source *src, uint64_t n)
{
    struct cached_source *cs = (struct cached_source *)src;
    return cs->file->ops->skip != NULL ? cs->file->ops->skip(cs->file, n) : 0;
}

static const struct stk__source_ops cached_ops = {cached_read, cached_close, cached_skip};

/* name: the shard's redacted URL, borrowed (stk__cache_open). */
static int cached_source_new(const char *name, int fd, struct stk__source **out,
                             struct stk__err *err)
{
    struct cached_source *cs = stk__calloc(1, sizeof *cs);
    if (cs == NULL) {
        close(fd);
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", name);
    }
    int rc = stk__source_file_adopt(name, fd, 0, &cs->file, err);
    if (rc < 0) {
        stk__free(cs);
        return rc;
    }
    cs->base.ops = &cached_ops;
    cs->base.url = name;
    /* The copy's size is the shard's; its time is the copy's own. */
    cs->base.stamp.size = cs->file->stamp.size;
    cs->base.stamp.has_size = cs->file->stamp.has_size;
    *out = &cs->base;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Hits                                                                   */

/* Check that H.url is url's record: another one means a hash collision (or
 * a foreign file), which must not be served as this shard. A cache of an
 * earlier version held the URL itself there, secrets included: that is
 * still this shard, and the file is rewritten in the current form (if that
 * fails the hit stands, and the next one tries again). */
static int check_url_file(const struct stk__cache *c, const char *hex, const char *url,
                          const char *shown, struct stk__err *err)
{
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.url", hex);
    size_t url_len = strlen(url), len;
    char *rec = stk__cache_url_record(url, shown, &len);
    size_t cap = (len > url_len + 1 ? len : url_len + 1) + 1;
    char *buf = rec != NULL ? stk__malloc(cap) : NULL;
    if (buf == NULL) {
        stk__free(rec);
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", shown);
    }
    int fd = stk__cache_open_file(c, name, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : pread(fd, buf, cap, 0);
    int same = n == (ssize_t)len && memcmp(buf, rec, len) == 0;
    int legacy = n == (ssize_t)url_len + 1 && memcmp(buf, url, url_len) == 0 &&
                 buf[url_len] == '\n';
    if (fd >= 0)
        close(fd);
    if (legacy) {
        char tmp[NAME_MAX_LEN];
        struct stk__err ignored;
        stk__cache_tmp_name(hex, "u", tmp);
        (void)stk__cache_write_url_file(c, hex, tmp, rec, len, shown, &ignored);
    }
    stk__free(buf);
    stk__free(rec);
    if (fd < 0 && fd != -ENOENT)
        return stk__errf(err, STK_ECACHE, "%s: cannot read cache file %s/%s: %s", shown, c->dir,
                         name, stk__cache_strerror(-fd));
    if (!same && !legacy)
        return stk__errf(err, STK_ECACHE,
                         "%s: cache file %s/%s does not belong to this URL (%s/%s is missing "
                         "or names another URL); remove both files",
                         shown, c->dir, hex, c->dir, name);
    return 0;
}

/* With H present: 1 and *fd_out (LOCK_SH held) on a hit, 0 when absent. */
static int open_entry(struct stk__cache *c, const char *hex, const char *url, const char *shown,
                      int *fd_out, struct stk__err *err)
{
    for (int tries = 0; tries < STK__CACHE_TRIES; tries++) {
        int fd = stk__cache_open_file(c, hex, O_RDONLY);
        if (fd < 0) {
            if (fd == -ENOENT)
                return 0;
            return stk__errf(err, STK_ECACHE, "%s: cannot open cache file %s/%s: %s", shown, c->dir,
                             hex, stk__cache_strerror(-fd));
        }
        if (stk__cache_flock(fd, LOCK_SH) < 0) {
            int e = errno;
            close(fd);
            return stk__errf(err, STK_ECACHE, "%s: cannot lock cache file %s/%s: %s", shown, c->dir,
                             hex, strerror(e));
        }
        if (!stk__cache_still_named(c, fd, hex)) { /* evicted before we locked it */
            close(fd);
            continue;
        }
        int rc = check_url_file(c, hex, url, shown, err);
        if (rc < 0) {
            close(fd);
            return rc;
        }
        /* Both stamps to "now" (NULL) needs only write permission, not
         * ownership, so processes of other users sharing the cache can
         * stamp too where the mode allows; failure only ages the LRU. */
        (void)futimens(fd, NULL);
        *fd_out = fd;
        return 1;
    }
    return stk__errf(err, STK_ECACHE, "%s: cannot open cache file %s/%s: %s", shown, c->dir, hex,
                     stk__cache_strerror(STK__CACHE_EREPLACED));
}

/* ---------------------------------------------------------------------- */

/* A miss opened whole: fill the shard to its end (holding the fill lock
 * lk, which the fill owns), then return a source over the finished file,
 * opened before the fill's source lets go of its LOCK_SH so that no
 * evictor can take the shard in between. */
static int open_filled(struct stk__cache *c, const char *hex, const char *url, const char *name,
                       const struct stk__source_config *scfg, int lk, struct stk__source **out,
                       struct stk__err *err)
{
    struct stk__source *fill;
    int rc = stk__cache_fill_open(c, hex, url, name, scfg, lk, &fill, err);
    if (rc < 0)
        return rc;
    int fd = -1;
    rc = stk__cache_fill_wait(fill, err);
    if (rc == 0)
        rc = open_entry(c, hex, url, name, &fd, err);
    stk__source_close(fill);
    if (rc == 0)
        rc = stk__errf(err, STK_ECACHE, "%s: cache file %s/%s is gone right after its fill", name,
                       c->dir, hex);
    if (rc < 0)
        return rc;
    return cached_source_new(name, fd, out, err); /* the fill counted the miss */
}

/* A plain path or file:// URL. "pipe:CMD" is not local: the command
 * usually fetches from remote storage, and its output is cached by the
 * full command string like any other URL. */
static int open_url(struct stk__cache *c, const char *url, const char *name,
                    const struct stk__source_config *scfg, int whole, struct stk__source **out,
                    struct stk__err *err)
{
    *out = NULL;
    /* Copying a local file to local disk gains nothing and doubles the I/O. */
    if (!c->cache_local && stk__source_is_local(url))
        return stk__source_open(url, scfg, out, err);
    char hex[HEX_LEN + 1], lock[NAME_MAX_LEN];
    stk__cache_name(url, hex);
    snprintf(lock, sizeof lock, "%s.lock", hex);
    int fd = -1;
    int rc = open_entry(c, hex, url, name, &fd, err);
    if (rc == 0) {
        int lk = stk__cache_lock_file(c, lock, LOCK_EX, 1);
        if (lk < 0)
            return stk__errf(err, STK_ECACHE, "%s: cannot lock %s/%s: %s", name, c->dir, lock,
                             stk__cache_strerror(-lk));
        rc = open_entry(c, hex, url, name, &fd, err); /* filled while we waited? */
        if (rc == 0 && whole)
            return open_filled(c, hex, url, name, scfg, lk, out, err);
        if (rc == 0) /* a miss: stream it while it fills; the fill owns lk */
            return stk__cache_fill_open(c, hex, url, name, scfg, lk, out, err);
        close(lk);
    }
    if (rc < 0)
        return rc;
    atomic_fetch_add(&c->hits, 1);
    return cached_source_new(name, fd, out, err);
}

int stk__cache_open(struct stk__cache *c, const char *url, const char *name,
                    const struct stk__source_config *scfg, struct stk__source **out,
                    struct stk__err *err)
{
    return open_url(c, url, name, scfg, 0, out, err);
}

int stk__cache_open_whole(struct stk__cache *c, const char *url, const char *name,
                          const struct stk__source_config *scfg, struct stk__source **out,
                          struct stk__err *err)
{
    return open_url(c, url, name, scfg, 1, out, err);
}

/* The cache is per user. A directory we just made gets exactly 0700 (the
 * umask may have taken bits); one that exists must be ours and writable by
 * nobody else, who could otherwise plant shards (readable is fine: every
 * file in it is 0600). */
static int check_private_dir(const char *dir, int dfd, int created, struct stk__err *err)
{
    struct stat st;
    if (created && fchmod(dfd, 0700) < 0)
        return stk__errf(err, STK_ECACHE, "cache_dir %s: cannot make it private: %s", dir,
                         strerror(errno));
    if (fstat(dfd, &st) < 0)
        return stk__errf(err, STK_ECACHE, "cache_dir %s: cannot stat: %s", dir, strerror(errno));
    if (st.st_uid != geteuid())
        return stk__errf(err, STK_ECACHE,
                         "cache_dir %s belongs to another user (uid %lu); the cache is per user: "
                         "use a directory of your own",
                         dir, (unsigned long)st.st_uid);
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return stk__errf(err, STK_ECACHE,
                         "cache_dir %s is writable by other users (mode %03o); the cache is per "
                         "user: chmod 700 it or use another directory",
                         dir, (unsigned)(st.st_mode & 0777));
    return 0;
}

/* Each fill over-reserves at most one step: small against the limit,
 * large enough that the directory is not listed for every megabyte. */
static uint64_t fill_step(uint64_t max_bytes)
{
    uint64_t step = max_bytes / 64;
    if (step < ((uint64_t)64 << 10))
        step = (uint64_t)64 << 10;
    if (step > ((uint64_t)16 << 20))
        step = (uint64_t)16 << 20;
    return step;
}

/* An H.url file holds the redacted URL and a digest: a block of the file
 * system at most, for any URL of sane length. */
#define URL_FILE_BYTES 4096

int stk__cache_holds(uint64_t max_bytes, uint64_t bytes, size_t n_shards, unsigned fills)
{
    const uint64_t need =
        bytes + (uint64_t)n_shards * URL_FILE_BYTES + fills * fill_step(max_bytes);
    return need >= bytes && need <= max_bytes;
}

int stk__cache_new(const struct stk__cache_config *cfg, struct stk__cache **out,
                   struct stk__err *err)
{
    *out = NULL;
    if (cfg->dir == NULL || cfg->dir[0] == '\0' || cfg->max_bytes == 0)
        return stk__errf(err, STK_EINVAL, "the cache needs a directory and a size above 0");
    int created = mkdir(cfg->dir, 0700) == 0;
    if (!created && errno != EEXIST)
        return stk__errf(err, STK_ECACHE, "cache_dir %s: cannot create: %s", cfg->dir,
                         strerror(errno));
    int dfd = open(cfg->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return stk__errf(err, STK_ECACHE, "cache_dir %s: cannot open: %s", cfg->dir,
                         strerror(errno));
    int rc = check_private_dir(cfg->dir, dfd, created, err);
    if (rc < 0) {
        close(dfd);
        return rc;
    }
    struct stk__cache *c = stk__calloc(1, sizeof *c);
    char *dir = stk__strdup(cfg->dir);
    if (c == NULL || dir == NULL) {
        stk__free(c);
        stk__free(dir);
        close(dfd);
        return stk__errf(err, STK_ENOMEM, "out of memory opening cache %s", cfg->dir);
    }
    c->dir = dir;
    c->dir_fd = dfd;
    atomic_init(&c->refs, 1);
    stk__mutex_init(&c->uses_mutex);
    atomic_init(&c->clock_epoch, UINT64_MAX);
    c->max_bytes = cfg->max_bytes;
    c->step = fill_step(cfg->max_bytes);
    c->shards_in_flight = cfg->shards_in_flight;
    const char *local = getenv("STOKER_CACHE_LOCAL");
    c->cache_local = cfg->cache_local || (local != NULL && strcmp(local, "1") == 0);
#ifdef STK_TEST_HOOKS
    /* Test builds only (-Dtest_hooks=true): each fill sleeps this long after
     * it starts, so that concurrent openers surely wait on it. */
    const char *delay = getenv("STOKER_CACHE_TEST_FILL_DELAY_MS");
    if (delay != NULL)
        c->fill_delay_ms = (unsigned)strtoul(delay, NULL, 10);
#endif
    *out = c;
    return 0;
}

void stk__cache_free(struct stk__cache *c)
{
    if (c != NULL)
        stk__cache_unref(c);
}

int stk__cache_set_uses(struct stk__cache *c, const struct stk__cache_use *uses, size_t n)
{
    struct stk__cache_next *next = NULL;
    if (n > 0 && (next = stk__calloc(n, sizeof *next)) == NULL)
        return STK_ENOMEM;
    for (size_t i = 0; i < n; i++) {
        stk__cache_name(uses[i].url, next[i].hex);
        next[i].when = uses[i].when;
    }
    stk__cache_uses_replace(c, next, n);
    return 0;
}

void stk__cache_counts(const struct stk__cache *c, struct stk__cache_counts *out)
{
    /* Cast drops const: atomic loads do not modify the counters. */
    struct stk__cache *m = (struct stk__cache *)c;
    out->hits = atomic_load(&m->hits);
    out->misses = atomic_load(&m->misses);
    out->evictions = atomic_load(&m->evictions);
    out->bytes_written = atomic_load(&m->bytes_written);
}
