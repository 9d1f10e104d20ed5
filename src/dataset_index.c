/* SPDX-License-Identifier: MIT */
/*
 * dataset_index.c - build, write and read dataset index files.
 */
#include "dataset_index.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/abi.h"
#include "base/alloc.h"
#include "base/atomic_file.h"
#include "base/siphash.h"
#include "list/cloud_list.h"
#include "index_json.h"
#include "options.h"
#include "base/jobs.h"
#include "tar/shard_reader.h"
#include "stoker.h"


/* ---- building ---- */

struct index_build {
    const struct stk__strlist *urls;
    const struct stk__strlist *names; /* urls redacted */
    struct stk__shard_config shard;
    uint64_t *counts;
    struct stk__offsets *offsets; /* items NULL for compressed shards */
    struct stk__shard_stamp *stamps;
};

static int count_job(void *ctx, size_t i, struct stk__err *err)
{
    struct index_build *b = ctx;
    struct stk__shard_reader *r;
    struct stk__shard_config cfg = b->shard;
    /* A remote shard's count costs one download, once per dataset (the
     * index is remembered). */
    stk__shard_config_count(&cfg, b->urls->items[i]);
    int rc = stk__shard_open(b->urls->items[i], b->names->items[i], i, &cfg, &r, err);
    if (rc == 0) {
        rc = stk__shard_count(r, &b->counts[i], &b->offsets[i], err);
        b->stamps[i] = *stk__shard_stamp(r);
        if (!stk__shard_seekable(r))
            stk__offsets_free(&b->offsets[i]);
        stk__shard_close(r);
    }
    return rc;
}

/* A relative local URL names a file from the working directory, but a
 * loader takes an index's relative names from the index's directory
 * (resolve_local below): written as given, `cd shards && stoker index -o
 * /elsewhere/index.json *.tar` made an index that no loader could match.
 * Such a name is written relative to the index's directory instead (the
 * same text when the index sits beside its shards, so a data set moved
 * with its index keeps working). NULL: keep the URL (remote, absolute, or
 * a path that cannot be resolved); *rc < 0 when out of memory. */
static char *name_from_index_dir(const char *url, const char *index_path, int *rc)
{
    if (!stk__source_is_local(url) || url[0] == '/' || strncmp(url, "file://", 7) == 0)
        return NULL;
    char file[PATH_MAX], dir[PATH_MAX], given[PATH_MAX];
    const char *slash = strrchr(index_path, '/');
    snprintf(given, sizeof given, "%.*s", slash == NULL ? 1 : (int)(slash - index_path + 1),
             slash == NULL ? "." : index_path);
    if (realpath(url, file) == NULL || realpath(given, dir) == NULL)
        return NULL;
    /* The longest common prefix of whole components (ending at a '/' of
     * file), then one ".." per component of dir past it. */
    size_t common = 0, d = strcmp(dir, "/") == 0 ? 0 : strlen(dir);
    for (size_t i = 0; i < d && dir[i] == file[i]; i++)
        if (file[i + 1] == '/' && (dir[i + 1] == '/' || dir[i + 1] == '\0'))
            common = i + 1;
    char out[PATH_MAX] = "";
    size_t len = 0;
    for (size_t i = common; i < d; i++)
        if (dir[i] == '/' && len + 3 < sizeof out) {
            memcpy(out + len, "../", 4);
            len += 3;
        }
    snprintf(out + len, sizeof out - len, "%s", file + common + 1);
    char *name = stk__strdup(out);
    if (name == NULL)
        *rc = STK_ENOMEM;
    return name;
}

static int write_index(const char *path, int replace, const struct index_build *b,
                       struct stk__err *err)
{
    struct stk__index_file f = {.n = b->urls->count};
    f.entries = stk__calloc(f.n + 1, sizeof *f.entries);
    if (f.entries == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory writing the index");
    char **local = stk__calloc(f.n + 1, sizeof *local); /* names made relative */
    if (local == NULL) {
        stk__free(f.entries);
        return stk__errf(err, STK_ENOMEM, "out of memory writing the index");
    }
    int rc = 0;
    stk__siphash_random_key(f.url_key);
    for (size_t i = 0; i < f.n && rc == 0; i++) {
        /* Borrowed for the write: f is not freed with stk__index_file_free.
         * The URL redacted, tagged when that hid something (index_json.h). */
        struct stk__index_entry *e = &f.entries[i];
        local[i] = name_from_index_dir(b->urls->items[i], path, &rc);
        if (local[i] != NULL)
            stk__index_entry_for(f.url_key, local[i], local[i], e);
        else
            stk__index_entry_for(f.url_key, b->urls->items[i], b->names->items[i], e);
        e->samples = b->counts[i];
        e->stamp = b->stamps[i];
        e->offsets = b->offsets[i].items;
        f.samples += b->counts[i];
    }
    /* Published whole (atomic_file.h): a reader never sees half an index,
     * a failed run leaves the old one, and nothing planted beside it is
     * followed. 0600: the counts and names of someone's data set are
     * theirs, and a tag is a check of a guessed secret. */
    struct stk__atomic_file af = {.fd = -1};
    if (rc < 0)
        stk__errf(err, rc, "out of memory writing the index");
    else
        rc = stk__atomic_file_open(&af, path, 0600, err);
    if (rc == 0)
        rc = stk__index_json_write(af.fd, path, &f, err);
    if (rc == 0)
        rc = stk__atomic_file_commit(&af, replace, err);
    stk__atomic_file_abort(&af);
    for (size_t i = 0; i < f.n; i++)
        stk__free(local[i]);
    stk__free(local);
    stk__free(f.entries);
    return rc;
}

int stk_index_build_sized(const struct stk_options *caller_opts, const char *const *patterns,
                          size_t n, const char *path, unsigned flags, struct stk_stats *stats_out,
                          size_t stats_size, char *errbuf, size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__run run;
    struct stk__strlist urls = {0}, names = {0};
    struct index_build b = {.urls = &urls, .names = &names};
    struct stk_options imported, *opts = &imported;
    struct stk_stats full, *stats = stats_out != NULL ? &full : NULL;
    int replace = (flags & STK_OUTPUT_OVERWRITE) != 0;
    int rc = stk__options_import(&imported, caller_opts, &err);
    stk__run_init(&run, rc == 0 ? opts : NULL);
    if (rc == 0)
        rc = stk__options_check(opts, &err);
    if (rc == 0 && (flags & ~(unsigned)STK_OUTPUT_OVERWRITE) != 0)
        rc = stk__errf(&err, STK_EINVAL, "unknown flags 0x%x", flags);
    else if (rc == 0 && !replace && stk__path_taken(path) == 1) /* before reading every shard */
        rc = stk__errf(&err, STK_EEXIST, "%s already exists; it is not replaced unless asked "
                       "to overwrite", path);
    if (rc == 0) {
        /* An output that cannot be made (a read-only or missing directory)
         * fails now, not after every shard was read; the file itself is
         * made when there is something to write, so that an interrupted
         * count leaves nothing behind. */
        struct stk__atomic_file probe;
        rc = stk__atomic_file_open(&probe, path, 0600, &err);
        stk__atomic_file_abort(&probe);
    }
    if (rc == 0)
        rc = stk__expand_and_list(opts, patterns, n, &urls, &names, &err);
    if (rc == 0 && urls.count == 0)
        rc = stk__errf(&err, STK_EINVAL, "no shards to index");
    if (rc == 0 && ((b.counts = stk__calloc(urls.count, sizeof *b.counts)) == NULL ||
                    (b.offsets = stk__calloc(urls.count, sizeof *b.offsets)) == NULL ||
                    (b.stamps = stk__calloc(urls.count, sizeof *b.stamps)) == NULL))
        rc = stk__errf(&err, STK_ENOMEM, "out of memory indexing %zu shards", urls.count);
    if (rc == 0) {
        stk__shard_config_init(&b.shard, opts, &run, NULL);
        rc = stk__run_jobs(urls.count, opts->threads, count_job, &b, &run, &err);
    }
    if (rc == 0)
        rc = write_index(path, replace, &b, &err);
    if (stats != NULL) {
        stk__run_snapshot(&run, stats);
        stats->samples = 0; /* the good samples the index records */
        for (size_t i = 0; b.counts != NULL && i < urls.count; i++)
            stats->samples += b.counts[i];
        stk__struct_copy(stats_out, stats_size, &full, sizeof full);
    }
    for (size_t i = 0; b.offsets != NULL && i < urls.count; i++)
        stk__offsets_free(&b.offsets[i]);
    stk__free(b.offsets);
    stk__free(b.counts);
    stk__free(b.stamps);
    stk__strlist_free(&urls);
    stk__strlist_free(&names);
    stk__err_ensure(&err, rc);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}

/* ---- reading ---- */

/* By redacted URL, then tag (an untagged entry first). */
static int compare_entries(const void *a, const void *b)
{
    const struct stk__index_entry *x = a, *y = b;
    int c = strcmp(x->url, y->url);
    if (c != 0 || x->has_tag != y->has_tag)
        return c != 0 ? c : x->has_tag - y->has_tag;
    for (int w = 0; w < 2 && x->has_tag; w++)
        if (x->tag[w] != y->tag[w])
            return x->tag[w] < y->tag[w] ? -1 : 1;
    return 0;
}

/* The file a local URL names, as an absolute path without links, "." or
 * "..", so that an index written with relative paths finds the shards a
 * loader names by absolute ones and the other way round. A relative URL is
 * taken from the working directory, else (base_dir not NULL: an index
 * entry) from the index file's directory. NULL for a remote URL or a file
 * that does not exist. */
static char *resolve_local(const char *url, const char *base_dir)
{
    if (!stk__source_is_local(url))
        return NULL;
    const char *path = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
    char buf[PATH_MAX], joined[PATH_MAX];
    if (realpath(path, buf) == NULL &&
        (base_dir == NULL || path[0] == '/' ||
         (size_t)snprintf(joined, sizeof joined, "%s/%s", base_dir, path) >= sizeof joined ||
         realpath(joined, buf) == NULL))
        return NULL;
    return stk__strdup(buf);
}

/* Index entries by the file they name (resolve_local), made when a URL is
 * not in the index as written. */
struct file_entry {
    char *file;
    size_t k; /* its entry in the index file */
};
struct by_file {
    struct file_entry *items;
    size_t n;
    /* Local entries naming no file (from the index's directory): the
     * message then says so, rather than "not in the index". */
    size_t missing;
    char first_missing[512];
};

static int compare_files(const void *a, const void *b)
{
    return strcmp(((const struct file_entry *)a)->file, ((const struct file_entry *)b)->file);
}

static int by_file_make(const char *path, const struct stk__index_file *f, struct by_file *out,
                        struct stk__err *err)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(dir, sizeof dir, ".");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    out->items = stk__calloc(f->n + 1, sizeof *out->items);
    if (out->items == NULL)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    for (size_t k = 0; k < f->n; k++) {
        const char *url = f->entries[k].url;
        char *file = resolve_local(url, dir);
        if (file != NULL) {
            out->items[out->n++] = (struct file_entry){.file = file, .k = k};
        } else if (stk__source_is_local(url) && out->missing++ == 0) {
            if (url[0] == '/' || strncmp(url, "file://", 7) == 0)
                stk__shown(out->first_missing, sizeof out->first_missing, url);
            else if (snprintf(out->first_missing, sizeof out->first_missing, "%.200s/%.300s",
                              dir, url) < 0)
                out->first_missing[0] = '\0';
        }
    }
    if (out->n > 0)
        qsort(out->items, out->n, sizeof *out->items, compare_files);
    return 0;
}

static void by_file_free(struct by_file *b)
{
    for (size_t k = 0; k < b->n; k++)
        stk__free(b->items[k].file);
    stk__free(b->items);
}

/* The entry of url (name: url redacted): by its name as written and its
 * tag (index_json.h), else by the file it names. NULL when there is none
 * (or *rc < 0: out of memory). */
static struct stk__index_entry *find_entry(const char *path, struct stk__index_file *f,
                                           const char *url, const char *name, struct by_file *b,
                                           struct stk__err *err, int *rc)
{
    struct stk__index_entry key;
    stk__index_entry_for(f->url_key, url, name, &key);
    struct stk__index_entry *e =
        f->n > 0 ? bsearch(&key, f->entries, f->n, sizeof *f->entries, compare_entries) : NULL;
    if (e != NULL || !stk__source_is_local(url))
        return e;
    if (b->items == NULL && (*rc = by_file_make(path, f, b, err)) < 0)
        return NULL;
    struct file_entry want = {.file = resolve_local(url, NULL)};
    if (want.file == NULL)
        return NULL;
    struct file_entry *found =
        b->n > 0 ? bsearch(&want, b->items, b->n, sizeof *b->items, compare_files) : NULL;
    stk__free(want.file);
    return found == NULL ? NULL : &f->entries[found->k];
}

int stk__index_load(const char *path, const struct stk__strlist *urls,
                    const struct stk__strlist *names, uint64_t max_samples,
                    struct stk__dataset_index *idx, struct stk__err *err)
{
    memset(idx, 0, sizeof *idx);
    struct stk__index_file f;
    int rc = stk__index_json_read(path, &f, err);
    if (rc < 0)
        return rc;
    if (f.n > 0)
        qsort(f.entries, f.n, sizeof *f.entries, compare_entries);
    idx->n = urls->count;
    struct by_file files = {0};
    unsigned char *taken = stk__calloc(f.n + 1, 1); /* entries whose offsets moved to idx */
    if (taken == NULL ||
        (idx->counts = stk__calloc(urls->count + 1, sizeof *idx->counts)) == NULL ||
        (idx->offsets = stk__calloc(urls->count + 1, sizeof *idx->offsets)) == NULL ||
        (idx->stamps = stk__calloc(urls->count + 1, sizeof *idx->stamps)) == NULL)
        rc = stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    for (size_t i = 0; rc == 0 && i < urls->count; i++) {
        struct stk__index_entry *e =
            find_entry(path, &f, urls->items[i], names->items[i], &files, err, &rc);
        struct stk__shard_stamp now;
        char why[STK__ERRMSG_MAX / 2];
        if (rc < 0) {
            break;
        } else if (e == NULL && files.missing > 0) {
            rc = stk__errf(err, STK_EINDEX,
                           "%s: shard %s is not in the dataset index, and %zu of the index's "
                           "shards name no file from where the index is (%s: not found): index "
                           "the shards again, with the index written beside them or absolute "
                           "paths",
                           path, names->items[i], files.missing, files.first_missing);
        } else if (e == NULL) {
            rc = stk__errf(err, STK_EINDEX,
                           "%s: shard %s is not in the dataset index (index the same URLs the "
                           "loader reads)",
                           path, names->items[i]);
        } else if (max_samples != 0 && e->samples > max_samples) {
            /* Such a count would make every rank's share, and len(), that large. */
            rc = stk__errf(err, STK_EINDEX,
                           "%s: shard %s counts %llu samples in the dataset index, more than "
                           "max_samples_per_shard (%llu) lets a shard hold: run `stoker index` "
                           "again",
                           path, names->items[i], (unsigned long long)e->samples,
                           (unsigned long long)max_samples);
        } else if (stk__source_local_stamp(urls->items[i], &now) &&
                   stk__stamp_differs(&e->stamp, &now, why, sizeof why)) {
            rc = stk__errf(err, STK_EINDEX,
                           "the index is stale for %s: run `stoker index` again (%s)",
                           names->items[i], why);
        } else {
            idx->counts[i] = e->samples;
            idx->stamps[i] = e->stamp;
            size_t k = (size_t)(e - f.entries);
            if (e->offsets == NULL || !taken[k]) { /* moved, not copied */
                idx->offsets[i] = e->offsets;
                taken[k] = 1;
            } else if ((idx->offsets[i] = stk__malloc((e->samples + 1) * sizeof **idx->offsets)) ==
                       NULL) { /* the same URL twice in the list */
                rc = stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index",
                               path);
            } else {
                memcpy(idx->offsets[i], e->offsets, e->samples * sizeof **idx->offsets);
            }
        }
    }
    for (size_t k = 0; taken != NULL && k < f.n; k++)
        if (taken[k])
            f.entries[k].offsets = NULL; /* idx owns them */
    if (rc < 0)
        stk__index_free(idx);
    stk__index_file_free(&f);
    by_file_free(&files);
    stk__free(taken);
    return rc;
}

int stk_index_check(const struct stk_options *caller_opts, const char *const *patterns,
                    size_t n, const char *path, char *errbuf, size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__strlist urls = {0}, names = {0};
    struct stk__dataset_index idx = {0};
    struct stk_options opts;
    int rc = stk__options_import(&opts, caller_opts, &err);
    if (rc == 0)
        rc = stk__options_check(&opts, &err);
    if (rc == 0 && path == NULL)
        rc = stk__errf(&err, STK_EINVAL, "no dataset index to check");
    if (rc == 0)
        rc = stk__expand_and_list(&opts, patterns, n, &urls, &names, &err);
    if (rc == 0)
        rc = stk__index_load(path, &urls, &names, opts.max_samples_per_shard, &idx, &err);
    stk__index_free(&idx);
    stk__strlist_free(&urls);
    stk__strlist_free(&names);
    stk__err_ensure(&err, rc);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}

void stk__index_free(struct stk__dataset_index *idx)
{
    for (size_t i = 0; idx->offsets != NULL && i < idx->n; i++)
        stk__free(idx->offsets[i]);
    stk__free(idx->offsets);
    stk__free(idx->counts);
    stk__free(idx->stamps);
    memset(idx, 0, sizeof *idx);
}
