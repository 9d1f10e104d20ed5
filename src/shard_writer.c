/*
 * shard_writer.c - write samples into WebDataset tar shards, rolling over
 * to the next shard at a sample count or a byte size.
 *
 * Members are written as WebDataset's TarWriter writes them (KEY.EXT,
 * regular files, mode 0444, the members of a sample together and in
 * sorted extension order) through libarchive, in POSIX ustar unless a name
 * needs pax. Timestamps and owners are fixed, so the same samples always
 * give the same bytes.
 *
 * Names are bytes and are written as given, in any locale. libarchive's pax
 * writer converts a name from the locale's charset to UTF-8 and, where that
 * fails, writes the bytes as they are under hdrcharset=BINARY and warns. So
 * that the output does not depend on the caller's locale (in the C locale
 * every non-ASCII name would fail to convert), headers are written with the
 * thread switched to C.UTF-8: valid UTF-8 names become standard UTF-8 pax
 * records, other bytes go out as BINARY, as Python's tarfile writes them. Each shard is written to a temporary file of its own
 * and published whole (atomic_file.h): a reader never sees half a shard,
 * and nothing planted beside the output is followed or overwritten.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "alloc.h"
#include "atomic_file.h"
#include "error.h"
#include "stoker.h"

/* A fixed timestamp (2023-11-14) keeps shards byte-for-byte reproducible. */
#define MEMBER_MTIME 1700000000

struct stk_writer {
    char *pattern;
    uint64_t max_samples, max_bytes;
    int overwrite;      /* STK_OUTPUT_OVERWRITE */
    struct archive *ar; /* the open shard, or NULL */
    char *name;         /* its final name */
    struct stk__atomic_file file; /* its temporary file */
    uint64_t shard;     /* number of the open (or next) shard */
    uint64_t samples, bytes; /* in the open shard */
    uint64_t total_samples;
    uint64_t removed;   /* shards of an earlier run removed by close */
    locale_t utf8;      /* C.UTF-8 for writing headers, or 0 where there is none */
    struct stk__err err;
};

/* The name of shard n, allocated; NULL when out of memory. */
static char *shard_name(const char *pattern, uint64_t n)
{
    /* -Wformat-nonliteral is not on: the pattern was checked (pattern_ok). */
    int len = snprintf(NULL, 0, pattern, (int)n);
    char *name = stk__malloc(len > 0 ? (size_t)len + 1 : 1);
    if (name != NULL)
        snprintf(name, len > 0 ? (size_t)len + 1 : 1, pattern, (int)n);
    return name;
}

/* The pattern holds exactly one %d conversion, optionally zero-padded to a
 * width (%06d); any other '%' must be "%%". */
static int pattern_ok(const char *p)
{
    int conversions = 0;
    for (; *p; p++) {
        if (*p != '%')
            continue;
        if (p[1] == '%') {
            p++;
            continue;
        }
        p++;
        for (int digits = 0; *p >= '0' && *p <= '9'; digits++, p++)
            if (digits == 2) /* widths up to 99 */
                return 0;
        if (*p != 'd')
            return 0;
        conversions++;
    }
    return conversions == 1;
}

/* Refuse a run whose first shard would replace an existing file: the
 * shards of an earlier run are there (checked again, atomically, when each
 * shard is renamed into place). */
static int check_first_shard(const char *pattern, struct stk__err *err)
{
    char *name = shard_name(pattern, 0);
    if (name == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for a shard writer");
    int rc = 0;
    if (stk__path_taken(name) == 1)
        rc = stk__errf(err, STK_EEXIST,
                       "%s already exists (shards of an earlier run?); it is not replaced "
                       "unless asked to overwrite",
                       name);
    stk__free(name);
    return rc;
}

int stk_writer_create(const char *pattern, uint64_t max_samples, uint64_t max_bytes,
                      unsigned flags, stk_writer **out, char *errbuf, size_t errbuf_size)
{
    *out = NULL;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = 0;
    if (pattern == NULL || !pattern_ok(pattern))
        rc = stk__errf(&err, STK_EINVAL,
                       "the shard name pattern needs exactly one %%d (e.g. train-%%06d.tar): "
                       "'%.200s'",
                       pattern ? pattern : "(null)");
    else if (max_samples == 0 || max_bytes == 0)
        rc = stk__errf(&err, STK_EINVAL, "max_samples and max_bytes must be above 0");
    else if ((flags & ~(unsigned)STK_OUTPUT_OVERWRITE) != 0)
        rc = stk__errf(&err, STK_EINVAL, "unknown flags 0x%x", flags);
    else if (!(flags & STK_OUTPUT_OVERWRITE))
        rc = check_first_shard(pattern, &err);
    stk_writer *w = NULL;
    if (rc == 0 && ((w = stk__calloc(1, sizeof *w)) == NULL ||
                    (w->pattern = stk__strdup(pattern)) == NULL))
        rc = stk__errf(&err, STK_ENOMEM, "out of memory for a shard writer");
    if (rc < 0) {
        if (w != NULL)
            stk__free(w->pattern);
        stk__free(w);
        stk__copy_msg(errbuf, errbuf_size, err.msg);
        return rc;
    }
    w->max_samples = max_samples;
    w->max_bytes = max_bytes;
    /* Without C.UTF-8 (a libc that lacks it) every non-ASCII name is
     * written as bytes (BINARY): still exact, only less standard. */
    w->utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    w->overwrite = (flags & STK_OUTPUT_OVERWRITE) != 0;
    *out = w;
    return 0;
}

static int archive_fail(stk_writer *w, const char *what)
{
    return stk__errf(&w->err, STK_EIO, "%s: %s: %s", w->name, what,
                     archive_error_string(w->ar) ? archive_error_string(w->ar) : "failed");
}

static int open_shard(stk_writer *w)
{
    w->name = shard_name(w->pattern, w->shard);
    if (w->name == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory naming a shard");
    int rc = stk__atomic_file_open(&w->file, w->name, &w->err);
    if (rc < 0)
        return rc;
    w->ar = archive_write_new();
    if (w->ar == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory opening %s", w->name);
    if (archive_write_set_format_pax_restricted(w->ar) != ARCHIVE_OK ||
        archive_write_open_fd(w->ar, w->file.fd) != ARCHIVE_OK)
        return archive_fail(w, "cannot create the shard");
    w->samples = w->bytes = 0;
    return 0;
}

/* Finish the open shard under its final name (keep: 1) or drop it. */
static int close_shard(stk_writer *w, int keep)
{
    int rc = 0;
    if (w->ar != NULL) {
        if (archive_write_close(w->ar) != ARCHIVE_OK && keep)
            rc = archive_fail(w, "cannot finish the shard");
        archive_write_free(w->ar); /* the fd stays open: the file owns it */
        w->ar = NULL;
    }
    if (w->file.path != NULL) {
        if (rc == 0 && keep)
            rc = stk__atomic_file_commit(&w->file, w->overwrite, &w->err);
        else
            stk__atomic_file_abort(&w->file);
        if (rc == 0 && keep)
            w->shard++;
    }
    stk__free(w->name);
    w->name = NULL;
    return rc;
}

static int write_member(stk_writer *w, const char *key, const struct stk_member *m)
{
    struct archive_entry *e = archive_entry_new();
    if (e == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory writing %s", w->name);
    size_t len = strlen(key) + 1 + strlen(m->ext) + 1;
    char *path = stk__malloc(len);
    int rc = 0;
    if (path == NULL) {
        rc = stk__errf(&w->err, STK_ENOMEM, "out of memory writing %s", w->name);
    } else {
        snprintf(path, len, "%s.%s", key, m->ext);
        archive_entry_set_pathname(e, path);
        archive_entry_set_filetype(e, AE_IFREG);
        archive_entry_set_perm(e, 0444);
        archive_entry_set_size(e, (la_int64_t)m->size);
        archive_entry_set_mtime(e, MEMBER_MTIME, 0);
        /* ARCHIVE_WARN: a name that is not UTF-8, written as its bytes. */
        locale_t caller = w->utf8 ? uselocale(w->utf8) : (locale_t)0;
        int r = archive_write_header(w->ar, e);
        if (w->utf8)
            uselocale(caller);
        if (r < ARCHIVE_WARN ||
            (m->size > 0 && archive_write_data(w->ar, m->data, m->size) != (la_ssize_t)m->size))
            rc = archive_fail(w, path);
    }
    stk__free(path);
    archive_entry_free(e);
    return rc;
}

/* A key WebDataset readers split back the same: no dot in its basename, no
 * empty path parts; an extension without '/'. */
static int check_names(stk_writer *w, const char *key, const struct stk_member *members,
                       size_t n)
{
    const char *base = strrchr(key, '/');
    base = base ? base + 1 : key;
    if (key[0] == '\0' || base[0] == '\0' || strchr(base, '.') != NULL || strstr(key, "//"))
        return stk__errf(&w->err, STK_EINVAL,
                         "key '%.200s': must be non-empty, without a '.' in its last part", key);
    if (n == 0)
        return stk__errf(&w->err, STK_EINVAL, "key '%.200s': a sample needs a member", key);
    for (size_t i = 0; i < n; i++) {
        if (members[i].ext == NULL || members[i].ext[0] == '\0' || strchr(members[i].ext, '/'))
            return stk__errf(&w->err, STK_EINVAL, "key '%.200s': bad extension '%.50s'", key,
                             members[i].ext ? members[i].ext : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(members[i].ext, members[j].ext) == 0)
                return stk__errf(&w->err, STK_EINVAL, "key '%.200s': extension '%.50s' twice",
                                 key, members[i].ext);
    }
    return 0;
}

int stk_writer_add(stk_writer *w, const char *key, const struct stk_member *members,
                   size_t n_members)
{
    stk__err_clear(&w->err);
    int rc = check_names(w, key, members, n_members);
    if (rc < 0)
        return rc;
    uint64_t bytes = 0;
    for (size_t i = 0; i < n_members; i++)
        bytes += members[i].size;
    if (w->ar != NULL && (w->samples >= w->max_samples || w->bytes + bytes > w->max_bytes))
        rc = close_shard(w, 1);
    if (rc == 0 && w->ar == NULL)
        rc = open_shard(w);
    /* members in sorted extension order, as WebDataset's TarWriter writes */
    const struct stk_member *next = NULL;
    for (size_t written = 0; rc == 0 && written < n_members; written++) {
        const struct stk_member *pick = NULL;
        for (size_t i = 0; i < n_members; i++)
            if ((next == NULL || strcmp(members[i].ext, next->ext) > 0) &&
                (pick == NULL || strcmp(members[i].ext, pick->ext) < 0))
                pick = &members[i];
        rc = write_member(w, key, pick);
        next = pick;
    }
    if (rc < 0) {
        close_shard(w, 0); /* a shard with half a sample is not kept */
        return rc;
    }
    w->samples++;
    w->bytes += bytes;
    w->total_samples++;
    return 0;
}

/* Shards of an earlier run numbered after this run's last one: removed when
 * overwriting (up to the first free name), else refused. */
static int after_last_shard(stk_writer *w)
{
    for (uint64_t n = w->shard;; n++) {
        char *name = shard_name(w->pattern, n);
        if (name == NULL)
            return stk__errf(&w->err, STK_ENOMEM, "out of memory naming a shard");
        struct stat st;
        int rc = 0, taken = lstat(name, &st) == 0;
        if (taken && !w->overwrite)
            rc = stk__errf(&w->err, STK_EEXIST,
                           "%s exists after the %llu shards written (a shard of an earlier "
                           "run?); remove it, or overwrite to have it removed",
                           name, (unsigned long long)w->shard);
        else if (taken && S_ISDIR(st.st_mode))
            taken = 0; /* never removed: not a shard */
        else if (taken && unlink(name) != 0)
            rc = stk__errf(&w->err, STK_EIO, "%s: cannot remove this shard of an earlier run: %s",
                           name, strerror(errno));
        else if (taken)
            w->removed++;
        stk__free(name);
        if (rc < 0 || !taken)
            return rc;
    }
}

int stk_writer_close(stk_writer *w, uint64_t *shards, uint64_t *samples)
{
    if (w == NULL)
        return 0;
    stk__err_clear(&w->err);
    int rc = close_shard(w, 1);
    if (rc == 0)
        rc = after_last_shard(w);
    if (shards != NULL)
        *shards = w->shard;
    if (samples != NULL)
        *samples = w->total_samples;
    return rc;
}

void stk_writer_destroy(stk_writer *w)
{
    if (w == NULL)
        return;
    close_shard(w, 0);
    if (w->utf8)
        freelocale(w->utf8);
    stk__free(w->pattern);
    stk__free(w);
}

const char *stk_writer_errmsg(const stk_writer *w) { return w->err.msg; }
uint64_t stk_writer_removed(const stk_writer *w) { return w->removed; }
