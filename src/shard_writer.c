/*
 * shard_writer.c - write samples into WebDataset tar shards, rolling over
 * to the next shard at a sample count or a byte size.
 *
 * Members are written as WebDataset's TarWriter writes them (KEY.EXT,
 * regular files, mode 0444, the members of a sample together and in
 * sorted extension order) through libarchive, in POSIX ustar unless a name
 * needs pax. Timestamps and owners are fixed, so the same samples always
 * give the same bytes. Each shard is written to NAME.tmp and renamed when
 * complete: a reader never sees half a shard.
 */
#include <archive.h>
#include <archive_entry.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "error.h"
#include "stoker.h"

/* A fixed timestamp (2023-11-14) keeps shards byte-for-byte reproducible. */
#define MEMBER_MTIME 1700000000

struct stk_writer {
    char *pattern;
    uint64_t max_samples, max_bytes;
    struct archive *ar; /* the open shard, or NULL */
    char *name, *tmp;   /* its final and temporary names */
    uint64_t shard;     /* number of the open (or next) shard */
    uint64_t samples, bytes; /* in the open shard */
    uint64_t total_samples;
    struct stk__err err;
};

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

int stk_writer_create(const char *pattern, uint64_t max_samples, uint64_t max_bytes,
                      stk_writer **out, char *errbuf, size_t errbuf_size)
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
    /* -Wformat-nonliteral is not on: the pattern was checked above. */
    int n = snprintf(NULL, 0, w->pattern, (int)w->shard);
    size_t len = n > 0 ? (size_t)n : 0;
    w->name = stk__malloc(len + 1);
    w->tmp = stk__malloc(len + 5);
    if (w->name == NULL || w->tmp == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory naming a shard");
    snprintf(w->name, len + 1, w->pattern, (int)w->shard);
    snprintf(w->tmp, len + 5, "%s.tmp", w->name);
    w->ar = archive_write_new();
    if (w->ar == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory opening %s", w->name);
    if (archive_write_set_format_pax_restricted(w->ar) != ARCHIVE_OK ||
        archive_write_open_filename(w->ar, w->tmp) != ARCHIVE_OK)
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
        archive_write_free(w->ar);
        w->ar = NULL;
        if (rc == 0 && keep && rename(w->tmp, w->name) != 0)
            rc = stk__errf(&w->err, STK_EIO, "%s: cannot rename into place: %s", w->name,
                           strerror(errno));
        if (rc < 0 || !keep)
            remove(w->tmp);
        if (rc == 0 && keep)
            w->shard++;
    }
    stk__free(w->name);
    stk__free(w->tmp);
    w->name = w->tmp = NULL;
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
        if (archive_write_header(w->ar, e) != ARCHIVE_OK ||
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
    char shown[STK__SHOWN_MAX], ext[64]; /* for messages */
    stk__shown(shown, sizeof shown, key);
    if (key[0] == '\0' || base[0] == '\0' || strchr(base, '.') != NULL || strstr(key, "//"))
        return stk__errf(&w->err, STK_EINVAL,
                         "key '%s': must be non-empty, without a '.' in its last part", shown);
    if (n == 0)
        return stk__errf(&w->err, STK_EINVAL, "key '%s': a sample needs a member", shown);
    for (size_t i = 0; i < n; i++) {
        if (members[i].ext == NULL || members[i].ext[0] == '\0' || strchr(members[i].ext, '/'))
            return stk__errf(&w->err, STK_EINVAL, "key '%s': bad extension '%s'", shown,
                             members[i].ext ? stk__shown(ext, sizeof ext, members[i].ext)
                                            : "(null)");
        for (size_t j = 0; j < i; j++)
            if (strcmp(members[i].ext, members[j].ext) == 0)
                return stk__errf(&w->err, STK_EINVAL, "key '%s': extension '%s' twice", shown,
                                 stk__shown(ext, sizeof ext, members[i].ext));
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

int stk_writer_close(stk_writer *w, uint64_t *shards, uint64_t *samples)
{
    if (w == NULL)
        return 0;
    stk__err_clear(&w->err);
    int rc = close_shard(w, 1);
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
    stk__free(w->pattern);
    stk__free(w);
}

const char *stk_writer_errmsg(const stk_writer *w) { return w->err.msg; }
