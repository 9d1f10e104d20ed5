/* SPDX-License-Identifier: MIT */
/*
 * atomic_file.c - output files that appear whole, never through a planted
 * link, never over another file unless asked (see atomic_file.h).
 */
#include "base/atomic_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "stoker.h"

/* Names already taken (a crashed run's temporary file with a recycled pid,
 * or something planted) are skipped; this many in a row is no accident. */
#define MAX_NAME_ATTEMPTS 100

static atomic_uint next_tmp_number;

/* Outputs fail with STK_EIO (a missing directory included), or ENOMEM. */
static int io_error(int e)
{
    return e == ENOMEM ? STK_ENOMEM : STK_EIO;
}

/* Free and close what is open; f->path is non-NULL exactly while the
 * temporary file exists. */
static void clear(struct stk__atomic_file *f)
{
    stk__free(f->path);
    stk__free(f->tmp);
    if (f->dir_fd >= 0 && f->own_dir)
        close(f->dir_fd);
    f->path = f->tmp = NULL;
    f->base = NULL;
    f->dir_fd = f->fd = -1;
    f->own_dir = 0;
}

/* The temporary file, beside base in f->dir_fd. */
static int create_tmp(struct stk__atomic_file *f, size_t tmp_size, unsigned mode,
                      struct stk__err *err)
{
    for (int attempt = 0; attempt < MAX_NAME_ATTEMPTS; attempt++) {
        snprintf(f->tmp, tmp_size, "%s.tmp.%ld.%u", f->base, (long)getpid(),
                 atomic_fetch_add(&next_tmp_number, 1));
        f->fd = openat(f->dir_fd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                       (mode_t)mode);
        if (f->fd >= 0 || errno != EEXIST)
            break;
    }
    if (f->fd < 0) {
        int e = errno;
        int rc = stk__errf(err, io_error(e), "%s: cannot create a temporary file beside it: %s",
                           f->path, strerror(e));
        clear(f);
        return rc;
    }
    return 0;
}

/* f->path, f->tmp (room for the temporary name) and f->base set, or
 * STK_ENOMEM/STK_EINVAL with f cleared. */
static int names(struct stk__atomic_file *f, const char *path, size_t *tmp_size,
                 struct stk__err *err)
{
    f->dir_fd = f->fd = -1;
    f->own_dir = 0;
    f->base = NULL;
    *tmp_size = strlen(path) + 48;
    f->path = stk__strdup(path);
    f->tmp = stk__malloc(*tmp_size);
    if (f->path == NULL || f->tmp == NULL) {
        clear(f);
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", path);
    }
    char *slash = strrchr(f->path, '/');
    f->base = slash ? slash + 1 : f->path;
    if (f->base[0] == '\0') {
        clear(f);
        return stk__errf(err, STK_EINVAL, "%s: names a directory, not a file", path);
    }
    return 0;
}

int stk__atomic_file_open_at(struct stk__atomic_file *f, int dir_fd, const char *path,
                             unsigned mode, struct stk__err *err)
{
    size_t tmp_size;
    int rc = names(f, path, &tmp_size, err);
    if (rc < 0)
        return rc;
    f->dir_fd = dir_fd;
    return create_tmp(f, tmp_size, mode, err);
}

int stk__atomic_file_open(struct stk__atomic_file *f, const char *path, unsigned mode,
                          struct stk__err *err)
{
    size_t tmp_size;
    int rc = names(f, path, &tmp_size, err);
    if (rc < 0)
        return rc;
    char *slash = strrchr(f->path, '/');
    if (slash == NULL) {
        f->dir_fd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else if (slash == f->path) {
        f->dir_fd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    } else {
        *slash = '\0'; /* f->path is the directory for a moment */
        f->dir_fd = open(f->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        *slash = '/';
    }
    if (f->dir_fd < 0) {
        int e = errno;
        clear(f);
        return stk__errf(err, io_error(e), "%s: cannot open its directory: %s", path,
                         strerror(e));
    }
    f->own_dir = 1;
    return create_tmp(f, tmp_size, mode, err);
}

/* Rename the temporary file to the final name, refusing an existing one
 * unless replace. */
static int publish(struct stk__atomic_file *f, int replace, struct stk__err *err)
{
    int rc;
    if (replace)
        rc = renameat(f->dir_fd, f->tmp, f->dir_fd, f->base);
    else if ((rc = renameat2(f->dir_fd, f->tmp, f->dir_fd, f->base, RENAME_NOREPLACE)) != 0 &&
             (errno == EINVAL || errno == ENOSYS)) {
        /* No RENAME_NOREPLACE here (NFS, older kernels): a hard link fails
         * on an existing name the same way. */
        rc = linkat(f->dir_fd, f->tmp, f->dir_fd, f->base, 0);
        if (rc == 0)
            unlinkat(f->dir_fd, f->tmp, 0);
    }
    if (rc == 0)
        return 0;
    int e = errno;
    if (e == EEXIST)
        return stk__errf(err, STK_EEXIST, "%s already exists; it was not replaced", f->path);
    return stk__errf(err, io_error(e), "%s: cannot rename into place: %s", f->path, strerror(e));
}

int stk__atomic_file_finish(struct stk__atomic_file *f, struct stk__err *err)
{
    int rc = 0;
    if (fsync(f->fd) != 0)
        rc = stk__errf(err, STK_EIO, "%s: cannot write it to disk (fsync): %s", f->path,
                       strerror(errno));
    if (close(f->fd) != 0 && rc == 0)
        rc = stk__errf(err, STK_EIO, "%s: cannot write it (close): %s", f->path,
                       strerror(errno));
    f->fd = -1;
    if (rc < 0) {
        unlinkat(f->dir_fd, f->tmp, 0);
        clear(f);
    }
    return rc;
}

int stk__atomic_file_publish(struct stk__atomic_file *f, int replace, struct stk__err *err)
{
    int rc = publish(f, replace, err);
    if (rc < 0)
        unlinkat(f->dir_fd, f->tmp, 0);
    clear(f);
    return rc;
}

int stk__atomic_file_commit(struct stk__atomic_file *f, int replace, struct stk__err *err)
{
    int rc = stk__atomic_file_finish(f, err);
    if (rc < 0)
        return rc;
    rc = publish(f, replace, err);
    if (rc < 0)
        unlinkat(f->dir_fd, f->tmp, 0);
    /* The rename is durable once the directory is; EINVAL: a filesystem
     * that cannot sync directories (nothing more to do there). */
    if (rc == 0 && fsync(f->dir_fd) != 0 && errno != EINVAL)
        rc = stk__errf(err, STK_EIO, "%s: written, but its directory cannot be synced: %s",
                       f->path, strerror(errno));
    clear(f);
    return rc;
}

void stk__atomic_file_abort(struct stk__atomic_file *f)
{
    if (f->path == NULL) /* never opened, open failed, or done */
        return;
    if (f->fd >= 0) /* not finished */
        close(f->fd);
    unlinkat(f->dir_fd, f->tmp, 0);
    clear(f);
}

int stk__path_taken(const char *path)
{
    struct stat st;
    if (lstat(path, &st) == 0)
        return 1;
    return errno == ENOENT ? 0 : -errno;
}
