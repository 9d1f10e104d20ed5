/* SPDX-License-Identifier: MIT */
/*
 * cache_fill.c - a cache miss streams: a filler thread copies the upstream
 * into the shard's temp file, and the caller reads the same bytes back from
 * that file as soon as they are written, so the first sample does not wait
 * for the whole download.
 *
 * DESIGN (threads). One filler thread per miss, joined by the source's
 * close. fill.mutex guards written, state and fill_err; the filler
 * broadcasts fill.cond after every chunk it has written and when it ends;
 * the caller's read waits on it. Nothing else is shared: the upstream
 * source, the fill lock and the reservation belong to the filler, the read
 * offset to the caller, and the temp fd is written by one (pwrite) and read
 * by the other (pread) at disjoint offsets below `written`.
 *
 * The filler never waits for the caller. It holds the shard's fill lock
 * (H.lock) that other processes block on, and cache.c's deadlock argument
 * needs that holder to wait for nothing but .lock and upstream I/O. A fill
 * paced by its reader would break it: two processes, each with a stalled
 * consumer (its sequencer waiting for a slot that waits for the other's
 * fill), would wait on each other forever.
 *
 * End of stream: as before streaming, the temp file is truncated to size,
 * fsynced, H.url written, the temp renamed to H (keeping the LOCK_SH that
 * protects it from eviction while the caller reads it), and only then is a
 * miss counted and the fill lock released. Closing the source before that
 * abandons the fill: the cancel flag (also the upstream's, so a network or
 * pipe: read returns within about 100 ms) stops the filler, which unlinks
 * the temp and then releases the fill lock; a waiter then fills it itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "base/alloc.h"
#include "cache/cache_impl.h"
#include "stoker.h"
#include "base/threads.h"

#define COPY_CHUNK ((size_t)1 << 20)
/* How often a caller waiting for bytes looks at its cancel flag. */
#define WAIT_SLICE_MS 100

enum fill_state { FILL_RUNNING, FILL_DONE, FILL_FAILED };

struct fill {
    struct stk__source base;
    struct stk__cache *c;   /* one reference, dropped by close */
    const char *name; /* the URL redacted, for messages and base.url */
    char *url_record; /* H.url's content (no secret in it) */
    size_t url_record_len;
    char hex[STK__CACHE_HEX_LEN + 1];
    char tmp[STK__CACHE_NAME_MAX], tmp_url[STK__CACHE_NAME_MAX + 1];
    int fd; /* the temp file (H once renamed), LOCK_SH; closed by close */
    /* The caller's, with cancel pointing at this fill's flag. */
    struct stk__source_config scfg;
    const atomic_int *caller_cancel;
    atomic_int cancel; /* set by close: abandon */

    /* Filler thread only. */
    int lock_fd; /* H.lock, LOCK_EX */
    struct stk__source *up;
    unsigned char *buf;
    uint64_t reserved;

    /* Caller only. */
    uint64_t pos;

    pthread_t thread;
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    uint64_t written;         /* bytes in the temp file, readable */
    enum fill_state state;
    struct stk__err fill_err; /* why it failed, before state becomes FAILED */
};

/* Append n bytes of f->buf at offset written, reserving room first. */
static int append(struct fill *f, uint64_t written, size_t n, struct stk__err *err)
{
    struct stk__cache *c = f->c;
    if (written + n > f->reserved) {
        /* A step ahead, so that small reads (network sources) do not each
         * list the directory, and a full cache evicts a step's worth at a
         * time. Never past the limit: only a shard within a step of
         * cache_size gets there, and it reserves read by read. */
        uint64_t target = f->reserved + c->step;
        if (target < written + n || target > c->max_bytes)
            target = written + n;
        int rc = stk__cache_reserve(c, f->name, f->tmp, f->fd, &f->reserved, target, err);
        if (rc < 0)
            return rc;
    }
    errno = 0;
    if (pwrite(f->fd, f->buf, n, (off_t)written) != (ssize_t)n)
        /* pwrite to a regular file is short only on error (ENOSPC) */
        return stk__errf(err, STK_ECACHE, "%s: cannot write %s/%s at offset %llu: %s", f->name,
                         c->dir, f->tmp, (unsigned long long)written,
                         errno ? strerror(errno) : "short write");
    return 0;
}

/* The upstream ended after written bytes: put the shard in place. */
static int finish(struct fill *f, uint64_t written, struct stk__err *err)
{
    struct stk__cache *c = f->c;
    uint64_t with_url = written + f->url_record_len;
    if (with_url > f->reserved) {
        int rc = stk__cache_reserve(c, f->name, f->tmp, f->fd, &f->reserved, with_url, err);
        if (rc < 0)
            return rc;
    }
    if (ftruncate(f->fd, (off_t)written) < 0 || fsync(f->fd) < 0)
        return stk__errf(err, STK_ECACHE, "%s: cannot sync %s/%s: %s", f->name, c->dir, f->tmp,
                         strerror(errno));
    int rc = stk__cache_write_url_file(c, f->hex, f->tmp_url, f->url_record, f->url_record_len,
                                       f->name, err);
    if (rc < 0)
        return rc;
    if (renameat(c->dir_fd, f->tmp, c->dir_fd, f->hex) < 0)
        return stk__errf(err, STK_ECACHE, "%s: cannot rename %s/%s to %s: %s", f->name, c->dir,
                         f->tmp, f->hex, strerror(errno));
    (void)fsync(c->dir_fd); /* the rename survives a power cut; failure only costs a refill */
    atomic_fetch_add(&c->misses, 1);
    atomic_fetch_add(&c->bytes_written, written);
    return 0;
}

static void *filler_main(void *arg)
{
    struct fill *f = arg;
    struct stk__err err;
    stk__err_clear(&err);
    uint64_t written = 0;
    int rc = 0, abandoned = 0;
    if (f->c->fill_delay_ms)
        (void)stk__sleep_unless(&f->cancel, f->c->fill_delay_ms);
    for (;;) {
        if (atomic_load(&f->cancel)) {
            abandoned = 1;
            break;
        }
        ssize_t n = stk__source_read(f->up, f->buf, COPY_CHUNK);
        if (atomic_load(&f->cancel)) { /* also an end of stream: the cancel may have cut it */
            abandoned = 1;
            break;
        }
        if (n < 0) {
            err = f->up->err; /* upstream errors pass through with their code */
            rc = (int)n;
            break;
        }
        if (n == 0) {
            rc = finish(f, written, &err);
            break;
        }
        rc = append(f, written, (size_t)n, &err);
        if (rc < 0)
            break;
        written += (uint64_t)n;
        stk__mutex_lock(&f->mutex);
        /* The origin has answered: its stamp is the shard's. The caller
         * reads it only after seeing bytes, under this mutex. */
        if (written == (uint64_t)n)
            f->base.stamp = f->up->stamp;
        f->written = written;
        stk__cond_broadcast(&f->cond);
        stk__mutex_unlock(&f->mutex);
    }
    /* The temp goes before the fill lock: a waiter that gets the lock must
     * not find our partial file (nor count it as another fill's). */
    if (rc < 0 || abandoned)
        unlinkat(f->c->dir_fd, f->tmp, 0);
    close(f->lock_fd);
    f->lock_fd = -1;
    stk__source_close(f->up); /* frees the connection now, not when the caller closes */
    f->up = NULL;
    stk__mutex_lock(&f->mutex);
    if (rc < 0 || abandoned) {
        if (abandoned)
            stk__errf(&err, STK_EIO, "%s: cancelled", f->name);
        f->fill_err = err;
        f->state = FILL_FAILED;
    } else {
        f->state = FILL_DONE;
    }
    stk__cond_broadcast(&f->cond);
    stk__mutex_unlock(&f->mutex);
    return NULL;
}

static ssize_t fill_read(struct stk__source *src, void *buf, size_t cap)
{
    struct fill *f = (struct fill *)src;
    stk__mutex_lock(&f->mutex);
    while (f->written == f->pos && f->state == FILL_RUNNING) {
        if (f->caller_cancel != NULL && atomic_load(f->caller_cancel)) {
            stk__mutex_unlock(&f->mutex);
            return stk__errf(&src->err, STK_EIO, "%s: cancelled", f->name);
        }
        stk__cond_timedwait_ms(&f->cond, &f->mutex, WAIT_SLICE_MS);
    }
    uint64_t avail = f->written - f->pos;
    enum fill_state state = f->state;
    if (avail == 0 && state == FILL_FAILED)
        src->err = f->fill_err;
    stk__mutex_unlock(&f->mutex);
    if (avail == 0)
        return state == FILL_DONE ? 0 : src->err.code;
    size_t want = avail < cap ? (size_t)avail : cap;
    ssize_t n;
    while ((n = pread(f->fd, buf, want, (off_t)f->pos)) < 0 && errno == EINTR)
        ;
    if (n <= 0)
        return stk__errf(&src->err, STK_ECACHE, "%s: cannot read %s/%s at offset %llu: %s",
                         f->name, f->c->dir, f->tmp, (unsigned long long)f->pos,
                         n < 0 ? strerror(errno) : "unexpected end of file");
    f->pos += (uint64_t)n;
    return n;
}

/* Data arrives in order from one stream: nothing to skip over but by
 * reading, which the caller then does (and the fill needs anyway). */
static int64_t fill_skip(struct stk__source *src, uint64_t n)
{
    (void)src;
    (void)n;
    return 0;
}

int stk__cache_fill_wait(struct stk__source *src, struct stk__err *err)
{
    struct fill *f = (struct fill *)src;
    int rc = 0;
    stk__mutex_lock(&f->mutex);
    while (f->state == FILL_RUNNING && rc == 0) {
        if (f->caller_cancel != NULL && atomic_load(f->caller_cancel))
            rc = stk__errf(err, STK_EIO, "%s: cancelled", f->name);
        else
            stk__cond_timedwait_ms(&f->cond, &f->mutex, WAIT_SLICE_MS);
    }
    if (rc == 0 && f->state == FILL_FAILED) {
        *err = f->fill_err;
        rc = err->code < 0 ? err->code : STK_ECACHE;
    }
    stk__mutex_unlock(&f->mutex);
    return rc;
}

static void fill_close(struct stk__source *src)
{
    struct fill *f = (struct fill *)src;
    atomic_store(&f->cancel, 1); /* no effect once the filler is done */
    stk__thread_join(f->thread);
    close(f->fd);
    stk__free(f->buf);
    stk__free(f->url_record);
    stk__cond_destroy(&f->cond);
    stk__mutex_destroy(&f->mutex);
    stk__cache_unref(f->c);
    stk__free(f);
}

static const struct stk__source_ops fill_ops = {fill_read, fill_close, fill_skip};

int stk__cache_fill_open(struct stk__cache *c, const char *hex, const char *url,
                         const char *name, const struct stk__source_config *scfg, int lock_fd,
                         struct stk__source **out, struct stk__err *err)
{
    *out = NULL;
    struct fill *f = stk__calloc(1, sizeof *f);
    unsigned char *buf = stk__malloc(COPY_CHUNK);
    size_t rec_len = 0;
    char *rec = stk__cache_url_record(url, name, &rec_len);
    if (f == NULL || buf == NULL || rec == NULL) {
        stk__free(f);
        stk__free(buf);
        stk__free(rec);
        close(lock_fd);
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", name);
    }
    f->c = c;
    f->name = name;
    f->url_record = rec;
    f->url_record_len = rec_len;
    f->buf = buf;
    f->lock_fd = lock_fd;
    f->fd = -1;
    memcpy(f->hex, hex, STK__CACHE_HEX_LEN + 1);
    stk__cache_tmp_name(hex, "", f->tmp);
    snprintf(f->tmp_url, sizeof f->tmp_url, "%su", f->tmp);
    if (scfg != NULL)
        f->scfg = *scfg;
    f->caller_cancel = f->scfg.cancel;
    atomic_init(&f->cancel, 0);
    f->scfg.cancel = &f->cancel;
    int rc = stk__source_open(url, &f->scfg, &f->up, err);
    if (rc < 0)
        goto fail;
    f->fd = stk__cache_create(c, f->tmp, O_RDWR | O_EXCL);
    if (f->fd < 0) {
        rc = stk__errf(err, STK_ECACHE, "%s: cannot create %s/%s: %s", name, c->dir, f->tmp,
                       stk__cache_strerror(-f->fd));
        f->fd = -1;
        goto fail;
    }
    /* Evictors pass over a locked file; the lock follows it through rename. */
    if (stk__cache_flock(f->fd, LOCK_SH) < 0) {
        rc = stk__errf(err, STK_ECACHE, "%s: cannot lock %s/%s: %s", name, c->dir, f->tmp,
                       strerror(errno));
        goto fail;
    }
    stk__mutex_init(&f->mutex);
    stk__cond_init(&f->cond);
    atomic_fetch_add(&c->refs, 1);
    rc = stk__thread_create(&f->thread, filler_main, f);
    if (rc < 0) {
        atomic_fetch_sub(&c->refs, 1);
        stk__cond_destroy(&f->cond);
        stk__mutex_destroy(&f->mutex);
        rc = stk__errf(err, STK_ENOMEM, "%s: cannot start a cache fill thread: %s", name,
                       strerror(-rc));
        goto fail;
    }
    f->base.ops = &fill_ops;
    f->base.url = name;
    *out = &f->base;
    return 0;
fail:
    if (f->fd >= 0) {
        unlinkat(c->dir_fd, f->tmp, 0);
        close(f->fd);
    }
    close(lock_fd);
    stk__source_close(f->up);
    stk__free(buf);
    stk__free(rec);
    stk__free(f);
    return rc;
}
