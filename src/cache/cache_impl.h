/* SPDX-License-Identifier: MIT */
/*
 * cache_impl.h - what the node cache's parts share: the cache handle, the
 * directory's files, locks and room (cache_dir.c), and the streaming fill
 * of a miss (cache_fill.c), both used by the lookups in cache.c. Not for
 * other modules: they use cache.h.
 */
#ifndef STK_CACHE_IMPL_H
#define STK_CACHE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cache/cache.h"

#define STK__CACHE_HEX_LEN 32
#define STK__CACHE_NAME_MAX 96
#define STK__CACHE_TMP_PREFIX ".tmp."

struct stk__cache {
    char *dir;
    int dir_fd;
    uint64_t max_bytes;
    uint64_t step; /* reservation granularity of a fill */
    unsigned shards_in_flight;
    int cache_local;
    unsigned fill_delay_ms; /* test hook, 0 unless built with -Dtest_hooks=true */
    atomic_uint_fast64_t hits, misses, evictions, bytes_written;
    /* The owner's reference plus one per fill still running: a fill
     * outlives stk__cache_free() when its source is closed later. */
    atomic_uint refs;
    /* The node's coming reads (cache_next_use.c): sorted by hex, then
     * when; guarded by uses_mutex (the loader replaces them each epoch
     * while fills evict). */
    pthread_mutex_t uses_mutex;
    struct stk__cache_next *uses;
    size_t n_uses;
    atomic_uint_fast64_t now;
    atomic_uint_fast64_t clock_epoch;    /* now's epoch, UINT64_MAX before the first advance */
    atomic_uint_fast64_t epoch_start_ns; /* CLOCK_REALTIME when the clock entered it */
};

struct stk__cache_next {
    char hex[STK__CACHE_HEX_LEN + 1];
    uint64_t when;
};

/* The next use of shard hex, last opened at used (its mtime): the first
 * after the handle's clock, or one of the clock's epoch not yet read (see
 * cache_next_use.c); UINT64_MAX for none known. Thread-safe. */
uint64_t stk__cache_next_use(struct stk__cache *c, const char *hex, const struct timespec *used);

/* Take next (n entries, stk__calloc'd; NULL when n is 0) as the handle's
 * uses, freeing the old ones. */
void stk__cache_uses_replace(struct stk__cache *c, struct stk__cache_next *next, size_t n);

/* Free the uses and their mutex (the handle's last reference). */
void stk__cache_uses_free(struct stk__cache *c);

/* flock(2), retried on EINTR. */
int stk__cache_flock(int fd, int how);

/* Does name (in the cache directory) still refer to the inode open as fd? */
int stk__cache_still_named(const struct stk__cache *c, int fd, const char *name);

/* Lock the file called name (flock how, LOCK_NB allowed), creating it if
 * create is set. Returns the locked fd, -EWOULDBLOCK when LOCK_NB found it
 * busy, -ENOENT when it does not exist and create is 0, or -errno
 * (stk__cache_strerror). */
int stk__cache_lock_file(const struct stk__cache *c, const char *name, int how, int create);

/* Wait for the fill behind src (a source of stk__cache_fill_open, not yet
 * read) to end: 0 once the shard is in place under its final name (src
 * still holding its LOCK_SH), else the fill's error, or STK_EIO when the
 * caller's cancel flag (scfg->cancel) was set meanwhile. */
int stk__cache_fill_wait(struct stk__source *src, struct stk__err *err);

/* Beyond errno values, for names in the cache directory: not a regular
 * file; replaced each time it was locked (after STK__CACHE_TRIES opens). */
#define STK__CACHE_ENOTREG 10001
#define STK__CACHE_EREPLACED 10002
#define STK__CACHE_TRIES 64

/* Open the regular file name in the cache directory with flags (O_CLOEXEC,
 * O_NOFOLLOW and O_NONBLOCK added): the fd, or -errno: -ELOOP for a
 * symbolic link, -STK__CACHE_ENOTREG for a FIFO, directory, device... */
int stk__cache_open_file(const struct stk__cache *c, const char *name, int flags);

/* Same with O_CREAT, as a file of mode 0600 whatever the umask. */
int stk__cache_create(const struct stk__cache *c, const char *name, int flags);

/* Text for an errno value or one of the codes above (positive). */
const char *stk__cache_strerror(int e);

/* A new temp file name for shard hex: ".tmp.H.PID.SEQ" + suffix, unique
 * within the process. */
void stk__cache_tmp_name(const char *hex, const char *suffix, char name[STK__CACHE_NAME_MAX]);

/* H.url's content for url: "NAME\nDIGEST\n", name being url redacted and
 * DIGEST 16 hex digits of a hash of url other than H's (see cache.c). A new
 * string (*len bytes, not NUL-terminated), or NULL when out of memory. */
char *stk__cache_url_record(const char *url, const char *name, size_t *len);

/* Write H.url (rec, len bytes) through the temp file tmp and a rename, so
 * that a crash leaves only a stale temp. 0, or STK_ECACHE naming shown. */
int stk__cache_write_url_file(const struct stk__cache *c, const char *hex, const char *tmp,
                              const char *rec, size_t len, const char *shown,
                              struct stk__err *err);

/*
 * Grow the fill's temp file (own_tmp, open as tmp_fd, *reserved bytes so
 * far) to target bytes, evicting shards not in use (the farthest next use first, then the
 * least recently used)
 * until the directory total fits max_bytes. 0, or STK_ECACHE / STK_ENOMEM
 * with a message naming name (the shard's redacted URL).
 */
int stk__cache_reserve(struct stk__cache *c, const char *name, const char *own_tmp, int tmp_fd,
                       uint64_t *reserved, uint64_t target, struct stk__err *err);

/* Drop one reference; the last frees the handle. */
void stk__cache_unref(struct stk__cache *c);

/*
 * A miss (cache_fill.c): start filling shard hex from url and return a
 * source that hands the caller the shard's bytes as they arrive. lock_fd is
 * hex's fill lock, held LOCK_EX; the fill owns it from this call on, also
 * on failure, and releases it when the shard is in place or the fill is
 * abandoned. name (url redacted: messages, the source's url, H.url) is
 * borrowed and must outlive the source; url need only live until the call
 * returns.
 */
int stk__cache_fill_open(struct stk__cache *c, const char *hex, const char *url,
                         const char *name, const struct stk__source_config *scfg, int lock_fd,
                         struct stk__source **out, struct stk__err *err);

#endif
