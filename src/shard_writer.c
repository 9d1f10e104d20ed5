/* SPDX-License-Identifier: MIT */
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
 * records, other bytes go out as BINARY, as Python's tarfile writes them.
 *
 * A run is published whole or not at all. Each shard is written to a
 * temporary file of its own beside its final name (atomic_file.h: nothing
 * planted there is followed or overwritten) and finished (synced, closed)
 * when the next one starts; stk_writer_close() renames them all into place
 * at the end and syncs the directory once. A run that fails, or is
 * destroyed unclosed, removes its temporary files (and the directories it
 * made): a reader never sees part of a run, which would read as a whole,
 * smaller dataset. A process killed mid-run leaves only NAME.tmp.PID.N
 * files, which no shard pattern matches.
 *
 * The shards of a run are the files named by the pattern in one directory:
 * PREFIX, a decimal number, SUFFIX ("train-%06d.tar": "train-", ".tar").
 * Every other file of that family in the directory ("train-7.tar",
 * "train-000012.tar" from a run with another width or more shards) would be
 * read with this run's shards by a glob or a listing of the family, so it
 * is an earlier run's shard: refused, or removed once this run is published
 * when overwriting. Files of other families (val-000000.tar beside
 * train-000000.tar) are other datasets and are left alone.
 */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/error.h"
#include "stoker.h"

/* A fixed timestamp (2023-11-14) keeps shards byte-for-byte reproducible. */
#define MEMBER_MTIME 1700000000
/* Finished shards waiting for stk_writer_close(): a bound on the list. */
#define MAX_SHARDS ((size_t)1 << 24)

struct stk_writer {
    char *pattern;
    char *dir;            /* the shards' directory ("." when the pattern names none) */
    const char *sep;      /* "/" after dir in messages; "" (and no dir) when the pattern has none */
    char *prefix, *suffix; /* a shard's file name: prefix, number, suffix */
    int dir_fd;           /* dir, open from create to destroy; -1 if not */
    size_t made_len;      /* create() made the directories of dir past this length */
    int made_dirs;        /* ... if any; removed again unless the run is published */
    uint64_t max_samples, max_bytes;
    int overwrite;        /* STK_OUTPUT_OVERWRITE */
    int failed;           /* a write failed: only destroy is left */
    int published;
    struct archive *ar;   /* the open shard, or NULL */
    struct stk__atomic_file file;  /* its temporary file; file.path: its final name */
    struct stk__atomic_file *done; /* finished shards 0 .. shard-1, unpublished */
    size_t done_cap;
    uint64_t shard;       /* number of the open (or next) shard */
    uint64_t samples, bytes; /* in the open shard */
    uint64_t total_samples;
    uint64_t removed;     /* shards of an earlier run removed by close */
    locale_t utf8;        /* C.UTF-8 for writing headers, or 0 where there is none */
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
 * width (%06d), in its file name (no '/' after it); any other '%' must be
 * "%%". */
static int pattern_ok(const char *p)
{
    int conversions = 0;
    for (; *p; p++) {
        if (*p == '/' && conversions > 0)
            return 0;
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

/* Copy src[0, len) into a new string with "%%" as '%'; NULL when out of
 * memory. */
static char *unescape(const char *src, size_t len)
{
    char *out = stk__malloc(len + 1), *o = out;
    for (size_t i = 0; out != NULL && i < len; i++) {
        *o++ = src[i];
        if (src[i] == '%')
            i++;
    }
    if (out != NULL)
        *o = '\0';
    return out;
}

/* w->dir, w->prefix and w->suffix from a checked pattern. */
static int split_pattern(stk_writer *w)
{
    const char *p = w->pattern, *conv = p;
    while (!(conv[0] == '%' && conv[1] != '%'))
        conv += conv[0] == '%' ? 2 : 1;
    const char *after = conv + 1 + strspn(conv + 1, "0123456789") + 1;
    const char *slash = NULL;
    for (const char *q = p; q < conv; q++)
        if (*q == '/')
            slash = q;
    const char *base = slash ? slash + 1 : p;
    w->dir = slash == NULL ? stk__strdup(".") : unescape(p, slash == p ? 1 : (size_t)(slash - p));
    w->sep = slash == NULL ? "" : "/";
    w->prefix = unescape(base, (size_t)(conv - base));
    w->suffix = unescape(after, strlen(after));
    if (w->dir == NULL || w->prefix == NULL || w->suffix == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory for a shard writer");
    return 0;
}

/* Create the missing directories of w->dir (as mkdir -p does, mode 0777
 * less the umask), remembering which, and open it. */
static int open_dir(stk_writer *w)
{
    char *path = w->dir;
    size_t len = strlen(path);
    int rc = 0;
    for (size_t end = 1; rc == 0 && end <= len; end++) {
        if (end < len && path[end] != '/')
            continue;
        if (path[end - 1] == '/') /* "a//b", "/": no new part */
            continue;
        char saved = path[end];
        path[end] = '\0';
        int made = mkdir(path, 0777) == 0;
        if (made && !w->made_dirs) {
            w->made_dirs = 1;
            const char *parent = strrchr(path, '/');
            w->made_len = parent ? (size_t)(parent - path) : 0;
        } else if (!made && errno != EEXIST) {
            rc = stk__errf(&w->err, errno == ENOMEM ? STK_ENOMEM : STK_EIO,
                           "%s: cannot create the output directory: %s", path, strerror(errno));
        }
        path[end] = saved;
    }
    if (rc == 0 && (w->dir_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        rc = stk__errf(&w->err, STK_EIO, "%s: cannot open the output directory: %s", path,
                       strerror(errno));
    return rc;
}

/* Remove the directories open_dir() made (those still empty). */
static void remove_made_dirs(stk_writer *w)
{
    char *path = w->dir;
    while (w->made_dirs && strlen(path) > w->made_len) {
        rmdir(path);
        char *slash = strrchr(path, '/');
        if (slash == NULL)
            break;
        *slash = '\0';
    }
    w->made_dirs = 0;
}

/* Whether name is PREFIX DIGITS SUFFIX; *number gets the number. */
static int in_family(const stk_writer *w, const char *name, uint64_t *number)
{
    size_t len = strlen(name), pre = strlen(w->prefix), suf = strlen(w->suffix);
    if (len <= pre + suf || strncmp(name, w->prefix, pre) != 0 ||
        strcmp(name + len - suf, w->suffix) != 0)
        return 0;
    *number = 0;
    for (size_t i = pre; i < len - suf; i++) {
        if (name[i] < '0' || name[i] > '9')
            return 0;
        *number = *number > UINT64_MAX / 20 ? UINT64_MAX : *number * 10 + (uint64_t)(name[i] - '0');
    }
    return 1;
}

/* Whether name is the name of shard n of this run (not "7" for "%06d"). */
static int is_own_shard(const stk_writer *w, const char *name, uint64_t n)
{
    if (n >= w->shard)
        return 0;
    const char *base = strrchr(w->done[n].path, '/');
    return strcmp(base ? base + 1 : w->done[n].path, name) == 0;
}

/* The files of this run's family in the directory that are not its own
 * published shards (directories are never shards): without overwrite the
 * first one (by name) fails the run with STK_EEXIST; with overwrite each
 * is removed (remove set: after this run's shards are in place). */
static int earlier_shards(stk_writer *w, int remove)
{
    int fd = dup(w->dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (d == NULL) {
        if (fd >= 0)
            close(fd);
        return stk__errf(&w->err, STK_EIO, "%s: cannot list the output directory: %s", w->dir,
                         strerror(errno));
    }
    rewinddir(d); /* the dup shares its position with dir_fd */
    char first[256] = "";
    size_t found = 0;
    int rc = 0;
    for (struct dirent *e; rc == 0 && (e = readdir(d)) != NULL;) {
        uint64_t n;
        struct stat st;
        if (!in_family(w, e->d_name, &n) || (w->published && is_own_shard(w, e->d_name, n)) ||
            (fstatat(w->dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)))
            continue;
        if (remove && unlinkat(w->dir_fd, e->d_name, 0) != 0 && errno != ENOENT)
            rc = stk__errf(&w->err, STK_EIO,
                           "%s/%s: cannot remove this shard of an earlier run: %s", w->dir,
                           e->d_name, strerror(errno));
        else if (remove)
            w->removed++;
        else if (found++ == 0 || strcmp(e->d_name, first) < 0)
            snprintf(first, sizeof first, "%s", e->d_name);
    }
    closedir(d);
    const char *dir = w->sep[0] ? w->dir : "";
    if (rc == 0 && found > 0)
        rc = stk__errf(&w->err, STK_EEXIST,
                       "%s%s%s already exists (%zu file(s) named %s%s%s<number>%s: shards of an "
                       "earlier run?); they are not replaced unless asked to overwrite",
                       dir, w->sep, first, found, dir, w->sep, w->prefix, w->suffix);
    return rc;
}

static void writer_free(stk_writer *w)
{
    if (w->dir_fd >= 0)
        close(w->dir_fd);
    if (w->utf8)
        freelocale(w->utf8);
    stk__free(w->done);
    stk__free(w->pattern);
    stk__free(w->dir);
    stk__free(w->prefix);
    stk__free(w->suffix);
    stk__free(w);
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
                       "the shard name pattern needs exactly one %%d, in the file name (e.g. "
                       "out/train-%%06d.tar): '%.200s'",
                       pattern ? pattern : "(null)");
    else if (max_samples == 0 || max_bytes == 0)
        rc = stk__errf(&err, STK_EINVAL, "max_samples and max_bytes must be above 0");
    else if ((flags & ~(unsigned)STK_OUTPUT_OVERWRITE) != 0)
        rc = stk__errf(&err, STK_EINVAL, "unknown flags 0x%x", flags);
    stk_writer *w = NULL;
    if (rc == 0 && ((w = stk__calloc(1, sizeof *w)) == NULL ||
                    (w->pattern = stk__strdup(pattern)) == NULL))
        rc = stk__errf(&err, STK_ENOMEM, "out of memory for a shard writer");
    if (w != NULL) {
        w->dir_fd = -1;
        w->max_samples = max_samples;
        w->max_bytes = max_bytes;
        w->overwrite = (flags & STK_OUTPUT_OVERWRITE) != 0;
        /* Without C.UTF-8 (a libc that lacks it) every non-ASCII name is
         * written as bytes (BINARY): still exact, only less standard. */
        w->utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    }
    if (rc == 0)
        rc = split_pattern(w);
    if (rc == 0)
        rc = open_dir(w);
    if (rc == 0 && !w->overwrite)
        rc = earlier_shards(w, 0); /* before writing anything */
    if (rc < 0) {
        /* The steps after the allocation report into w->err. */
        struct stk__err *why = w != NULL && w->err.msg[0] ? &w->err : &err;
        stk__err_ensure(why, rc);
        stk__copy_msg(errbuf, errbuf_size, why->msg);
        if (w != NULL) {
            remove_made_dirs(w);
            writer_free(w);
        }
        return rc;
    }
    *out = w;
    return 0;
}

static int archive_fail(stk_writer *w, const char *what)
{
    return stk__errf(&w->err, STK_EIO, "%s: %s: %s", w->file.path, what,
                     archive_error_string(w->ar) ? archive_error_string(w->ar) : "failed");
}

static int open_shard(stk_writer *w)
{
    if (w->shard >= MAX_SHARDS)
        return stk__errf(&w->err, STK_EINVAL, "more than %zu shards in one run", MAX_SHARDS);
    if (w->shard == w->done_cap) {
        size_t cap = w->done_cap ? 2 * w->done_cap : 16;
        struct stk__atomic_file *done = stk__realloc(w->done, cap * sizeof *done);
        if (done == NULL)
            return stk__errf(&w->err, STK_ENOMEM, "out of memory for a shard writer");
        w->done = done;
        w->done_cap = cap;
    }
    char *name = shard_name(w->pattern, w->shard);
    if (name == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory naming a shard");
    int rc = stk__atomic_file_open_at(&w->file, w->dir_fd, name, 0666, &w->err);
    stk__free(name); /* the file keeps its own copy */
    if (rc < 0)
        return rc;
    w->ar = archive_write_new();
    if (w->ar == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory opening %s", w->file.path);
    if (archive_write_set_format_pax_restricted(w->ar) != ARCHIVE_OK ||
        archive_write_open_fd(w->ar, w->file.fd) != ARCHIVE_OK)
        return archive_fail(w, "cannot create the shard");
    w->samples = w->bytes = 0;
    return 0;
}

/* Finish the open shard and add it to those waiting for close (keep: 1),
 * or drop it. */
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
            rc = stk__atomic_file_finish(&w->file, &w->err);
        else
            stk__atomic_file_abort(&w->file);
        if (rc == 0 && keep) {
            w->done[w->shard++] = w->file;
            w->file = (struct stk__atomic_file){.dir_fd = -1, .fd = -1};
        }
    }
    return rc;
}

static int write_member(stk_writer *w, const char *key, const struct stk_member *m)
{
    struct archive_entry *e = archive_entry_new();
    if (e == NULL)
        return stk__errf(&w->err, STK_ENOMEM, "out of memory writing %s", w->file.path);
    size_t len = strlen(key) + 1 + strlen(m->ext) + 1;
    char *path = stk__malloc(len);
    int rc = 0;
    if (path == NULL) {
        rc = stk__errf(&w->err, STK_ENOMEM, "out of memory writing %s", w->file.path);
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

/* Whether member name KEY.EXT splits back into key and ext as every reader
 * splits it (stk_split_name, the one home of that rule); -1: no memory. */
static int splits_back(const char *key, const char *ext)
{
    size_t klen = strlen(key), elen = strlen(ext);
    char *name = stk__malloc(klen + elen + 2);
    if (name == NULL)
        return -1;
    memcpy(name, key, klen);
    name[klen] = '.';
    memcpy(name + klen + 1, ext, elen + 1);
    size_t key_len;
    const char *split_ext;
    int same = stk_split_name(name, &key_len, &split_ext) && key_len == klen &&
               strcmp(split_ext, ext) == 0;
    stk__free(name);
    return same;
}

/* Members a reader gives back as this sample: each name splits back into
 * the key and its extension, which is non-empty and stays in the key's
 * directory; the key has no empty path part; no extension twice. */
static int check_names(stk_writer *w, const char *key, const struct stk_member *members,
                       size_t n)
{
    char shown[STK__SHOWN_MAX], ext[64]; /* for messages */
    stk__shown(shown, sizeof shown, key);
    if (n == 0)
        return stk__errf(&w->err, STK_EINVAL, "key '%s': a sample needs a member", shown);
    for (size_t i = 0; i < n; i++) {
        if (members[i].ext == NULL || members[i].ext[0] == '\0' || strchr(members[i].ext, '/'))
            return stk__errf(&w->err, STK_EINVAL, "key '%s': bad extension '%s'", shown,
                             members[i].ext ? stk__shown(ext, sizeof ext, members[i].ext)
                                            : "(null)");
        int same = splits_back(key, members[i].ext);
        if (same < 0)
            return stk__errf(&w->err, STK_ENOMEM, "out of memory checking key '%s'", shown);
        if (!same || strstr(key, "//"))
            return stk__errf(&w->err, STK_EINVAL,
                             "key '%s': must be non-empty, without a '.' in its last part",
                             shown);
        for (size_t j = 0; j < i; j++)
            if (strcmp(members[i].ext, members[j].ext) == 0)
                return stk__errf(&w->err, STK_EINVAL, "key '%s': extension '%s' twice", shown,
                                 stk__shown(ext, sizeof ext, members[i].ext));
    }
    return 0;
}

/* After a failed write or close, or a successful close, the run is over. */
static int refuse_after_end(stk_writer *w)
{
    return stk__errf(&w->err, STK_EINVAL, "%s",
                     w->published ? "the run is closed: its shards are published"
                                  : "an earlier call failed: this run cannot be finished "
                                    "(nothing of it is published)");
}

int stk_writer_add(stk_writer *w, const char *key, const struct stk_member *members,
                   size_t n_members)
{
    stk__err_clear(&w->err);
    if (w->failed || w->published)
        return refuse_after_end(w);
    int rc = check_names(w, key, members, n_members);
    if (rc < 0) {
        stk__err_ensure(&w->err, rc);
        return rc;
    }
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
        w->failed = 1;
        stk__err_ensure(&w->err, rc);
        return rc;
    }
    w->samples++;
    w->bytes += bytes;
    w->total_samples++;
    return 0;
}

/* Rename every finished shard into place; on failure, take back those
 * already renamed. Each entry of w->done is left holding either its
 * temporary file (tmp set) or only its final name. */
static int publish_all(stk_writer *w)
{
    int rc = 0;
    uint64_t n = 0;
    for (; n < w->shard; n++) {
        char *path = stk__strdup(w->done[n].path); /* publishing clears the entry */
        rc = path == NULL ? stk__errf(&w->err, STK_ENOMEM, "out of memory publishing shards")
                          : stk__atomic_file_publish(&w->done[n], w->overwrite, &w->err);
        if (rc < 0) {
            stk__free(path);
            break;
        }
        w->done[n].path = path;
    }
    for (uint64_t i = 0; rc < 0 && i < n; i++) {
        const char *base = strrchr(w->done[i].path, '/');
        unlinkat(w->dir_fd, base ? base + 1 : w->done[i].path, 0);
    }
    if (rc == 0)
        w->published = 1;
    return rc;
}

int stk_writer_close(stk_writer *w, uint64_t *shards, uint64_t *samples)
{
    if (w == NULL)
        return 0;
    stk__err_clear(&w->err);
    int rc = w->failed || w->published ? refuse_after_end(w) : close_shard(w, 1);
    /* Without overwrite, a shard of another run that appeared since
     * create() (another writer with this pattern) fails this run whole. */
    if (rc == 0 && !w->overwrite)
        rc = earlier_shards(w, 0);
    if (rc == 0)
        rc = publish_all(w);
    if (rc == 0 && w->overwrite)
        rc = earlier_shards(w, 1);
    /* The renames and removals are durable once the directory is; EINVAL:
     * a filesystem that cannot sync directories. */
    if (rc == 0 && fsync(w->dir_fd) != 0 && errno != EINVAL)
        rc = stk__errf(&w->err, STK_EIO, "%s: shards written, but the directory cannot be "
                       "synced: %s", w->dir, strerror(errno));
    if (rc < 0 && !w->published)
        w->failed = 1;
    if (shards != NULL)
        *shards = w->shard;
    if (samples != NULL)
        *samples = w->total_samples;
    stk__err_ensure(&w->err, rc);
    return rc;
}

void stk_writer_destroy(stk_writer *w)
{
    if (w == NULL)
        return;
    close_shard(w, 0);
    for (uint64_t n = 0; n < w->shard; n++) {
        if (w->done[n].tmp != NULL)
            stk__atomic_file_abort(&w->done[n]); /* never published */
        else
            stk__free(w->done[n].path); /* only its name is left */
    }
    if (!w->published)
        remove_made_dirs(w);
    writer_free(w);
}

const char *stk_writer_errmsg(const stk_writer *w) { return w->err.msg; }
uint64_t stk_writer_removed(const stk_writer *w) { return w->removed; }
