/* SPDX-License-Identifier: MIT */
/*
 * source_file.c - read a local shard sequentially.
 *
 * posix_fadvise(SEQUENTIAL) doubles the kernel's read-ahead window and
 * WILLNEED starts it at once, so a cold shard streams at disk speed while
 * the tar reader parses what already arrived. Reads go straight into the
 * caller's buffer (the tar reader's 1 MiB block), one copy out of the page
 * cache like cat(1). A header scan (source.h, jumps) gets no advice: see
 * stk__source_file_adopt.
 */
#include "io/source_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stoker.h"

struct file_source {
    struct stk__source base;
    int fd;
    int regular;
    uint64_t size; /* of a regular file at open */
};

static ssize_t file_read(struct stk__source *src, void *buf, size_t cap)
{
    struct file_source *f = (struct file_source *)src;
    for (;;) {
        ssize_t n = read(f->fd, buf, cap);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        return stk__errf(&src->err, STK_EIO, "%s: read failed at offset %llu: %s", src->url,
                         (unsigned long long)src->bytes_read, strerror(errno));
    }
}

static void file_close(struct stk__source *src)
{
    struct file_source *f = (struct file_source *)src;
    close(f->fd);
    stk__free(f);
}

/* Never past the end: lseek would succeed there and a member whose header
 * promises more bytes than the file holds would look complete. */
static int64_t file_skip(struct stk__source *src, uint64_t n)
{
    struct file_source *f = (struct file_source *)src;
    if (!f->regular)
        return 0; /* a FIFO or device: the caller reads instead */
    off_t at = lseek(f->fd, 0, SEEK_CUR);
    if (at < 0 || (uint64_t)at >= f->size)
        return 0;
    if (n > f->size - (uint64_t)at)
        n = f->size - (uint64_t)at;
    if (lseek(f->fd, (off_t)n, SEEK_CUR) < 0)
        return 0;
    return (int64_t)n;
}

static const struct stk__source_ops file_ops = {file_read, file_close, file_skip};

/* A directory where a shard was expected: most often a folder of images. */
static int not_a_shard(const char *url, struct stk__err *err)
{
    return stk__errf(err, STK_EINVAL,
                     "%s: is a directory, not a tar shard (a folder of images? pack it into "
                     "shards with `stoker pack -o OUT/train-%%06d.tar FOLDER`)",
                     url);
}

int stk__source_file_open(const char *url, const char *path, int jumps, struct stk__source **out,
                          struct stk__err *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return stk__errf(err, e == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot open: %s", url,
                         strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0)
        memset(&st, 0, sizeof st);
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return not_a_shard(url, err);
    }
    return stk__source_file_adopt(url, fd, jumps, out, err);
}

int stk__source_file_check(const char *url, const char *path, struct stk__err *err)
{
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return stk__errf(err, e == ENOENT ? STK_ENOENT : STK_EIO, "%s: cannot open: %s", url,
                         strerror(e));
    }
    return S_ISDIR(st.st_mode) ? not_a_shard(url, err) : 0;
}

static void set_stamp(const struct stat *st, struct stk__shard_stamp *out)
{
    *out = (struct stk__shard_stamp){
        .size = (uint64_t)st->st_size,
        .has_size = 1,
        .mtime_ns = (uint64_t)st->st_mtim.tv_sec * 1000000000u + (uint64_t)st->st_mtim.tv_nsec,
    };
}

int stk__source_file_stamp(const char *path, struct stk__shard_stamp *out)
{
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
        return 0;
    set_stamp(&st, out);
    return 1;
}

int stk__source_file_adopt(const char *url, int fd, int jumps, struct stk__source **out,
                           struct stk__err *err)
{
    *out = NULL;
    /* A header scan (jumps) gets the kernel's own read-ahead, which adapts:
     * WILLNEED would fetch the whole file, and RANDOM made a cold scan of
     * 20,000 samples of 2-30 KB 2.5x slower than a full read (1.18 s
     * against 0.46 s) for 148 MB from disk instead of 357; with no advice
     * it reads them all in 0.39 s, and samples of 60-400 KB in 15 MB of
     * 183-508 (bench/index_scan.py, `make bench-index`). */
    if (!jumps) {
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
        (void)posix_fadvise(fd, 0, 0, POSIX_FADV_WILLNEED);
    }
    struct file_source *f = stk__calloc(1, sizeof *f);
    if (f == NULL) {
        close(fd);
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", url);
    }
    f->base.ops = &file_ops;
    f->base.url = url;
    f->fd = fd;
    struct stat st;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        f->regular = 1;
        f->size = (uint64_t)st.st_size;
        set_stamp(&st, &f->base.stamp);
    }
    *out = &f->base;
    return 0;
}
