/*
 * dataset_index.c - build, write and read dataset index files.
 */
#include "dataset_index.h"

#include <cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "abi.h"
#include "alloc.h"
#include "atomic_file.h"
#include "cloud_list.h"
#include "options.h"
#include "jobs.h"
#include "shard_reader.h"
#include "stoker.h"

#define INDEX_FORMAT "stoker-index"
#define INDEX_VERSION 1
#define MAX_INDEX_BYTES ((long)1 << 30)

/* ---- building ---- */

struct index_build {
    const struct stk__strlist *urls;
    const struct stk__strlist *names; /* urls redacted */
    struct stk__shard_config shard;
    uint64_t *counts;
    struct stk__offsets *offsets; /* items NULL for compressed shards */
};

static int count_job(void *ctx, size_t i, struct stk__err *err)
{
    struct index_build *b = ctx;
    struct stk__shard_reader *r;
    int rc = stk__shard_open(b->urls->items[i], b->names->items[i], i, &b->shard, &r, err);
    if (rc == 0) {
        rc = stk__shard_count(r, &b->counts[i], &b->offsets[i], err);
        if (!stk__shard_seekable(r))
            stk__offsets_free(&b->offsets[i]);
        stk__shard_close(r);
    }
    return rc;
}

static int write_index(const char *path, int replace, const struct stk__strlist *urls,
                       const uint64_t *counts, const struct stk__offsets *offsets,
                       struct stk__err *err)
{
    uint64_t total = 0;
    for (size_t i = 0; i < urls->count; i++)
        total += counts[i];
    cJSON *root = cJSON_CreateObject();
    cJSON *shards = NULL;
    int ok = root != NULL && cJSON_AddStringToObject(root, "format", INDEX_FORMAT) != NULL &&
             cJSON_AddNumberToObject(root, "version", INDEX_VERSION) != NULL &&
             cJSON_AddNumberToObject(root, "samples", (double)total) != NULL &&
             (shards = cJSON_AddArrayToObject(root, "shards")) != NULL;
    for (size_t i = 0; ok && i < urls->count; i++) {
        cJSON *s = cJSON_CreateObject();
        ok = s != NULL && cJSON_AddItemToArray(shards, s) &&
             cJSON_AddStringToObject(s, "url", urls->items[i]) != NULL &&
             cJSON_AddNumberToObject(s, "samples", (double)counts[i]) != NULL;
        if (ok && offsets[i].items != NULL) {
            cJSON *list = cJSON_AddArrayToObject(s, "offsets");
            for (size_t k = 0; ok && k < offsets[i].count; k++) {
                cJSON *v = cJSON_CreateNumber((double)offsets[i].items[k]);
                ok = list != NULL && v != NULL && cJSON_AddItemToArray(list, v);
            }
        }
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (text == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory writing the index");
    /* Published whole (atomic_file.h): a reader never sees half an index,
     * a failed run leaves the old one, and nothing planted beside it is
     * followed. */
    struct stk__atomic_file f;
    int rc = stk__atomic_file_open(&f, path, err);
    size_t len = strlen(text);
    text[len] = '\n'; /* in place of the NUL: the file ends with a newline */
    for (size_t done = 0; rc == 0 && done <= len;) {
        ssize_t n = write(f.fd, text + done, len + 1 - done);
        if (n > 0)
            done += (size_t)n;
        else if (n == 0 || errno != EINTR)
            rc = stk__errf(err, STK_EIO, "%s: cannot write the index: %s", path,
                           n == 0 ? "no progress" : strerror(errno));
    }
    if (rc == 0)
        rc = stk__atomic_file_commit(&f, replace, err);
    stk__atomic_file_abort(&f);
    cJSON_free(text);
    return rc;
}

int stk_index_build_sized(const struct stk_options *caller_opts, const char *const *patterns,
                          size_t n, const char *path, unsigned flags, struct stk_stats *stats_out,
                          size_t stats_size, char *errbuf, size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__counters counters = {0};
    struct stk__strlist urls = {0}, names = {0};
    struct index_build b = {.urls = &urls, .names = &names};
    struct stk_options imported, *opts = &imported;
    struct stk_stats full, *stats = stats_out != NULL ? &full : NULL;
    int replace = (flags & STK_OUTPUT_OVERWRITE) != 0;
    int rc = stk__options_import(&imported, caller_opts, &err);
    if (rc == 0)
        rc = stk__options_check(opts, &err);
    if (rc == 0 && (flags & ~(unsigned)STK_OUTPUT_OVERWRITE) != 0)
        rc = stk__errf(&err, STK_EINVAL, "unknown flags 0x%x", flags);
    else if (rc == 0 && !replace && stk__path_taken(path) == 1) /* before reading every shard */
        rc = stk__errf(&err, STK_EEXIST, "%s already exists; it is not replaced unless asked "
                       "to overwrite", path);
    if (rc == 0)
        rc = stk__expand_and_list(opts, patterns, n, &urls, &names, &err);
    if (rc == 0 && urls.count == 0)
        rc = stk__errf(&err, STK_EINVAL, "no shards to index");
    if (rc == 0 && ((b.counts = stk__calloc(urls.count, sizeof *b.counts)) == NULL ||
                    (b.offsets = stk__calloc(urls.count, sizeof *b.offsets)) == NULL))
        rc = stk__errf(&err, STK_ENOMEM, "out of memory indexing %zu shards", urls.count);
    if (rc == 0) {
        stk__shard_config_init(&b.shard, opts, &counters, NULL);
        rc = stk__run_jobs(urls.count, opts->threads, count_job, &b, opts,
                           &counters.samples_read, &err);
    }
    if (rc == 0)
        rc = write_index(path, replace, &urls, b.counts, b.offsets, &err);
    if (stats != NULL) {
        memset(stats, 0, sizeof *stats);
        stats->shards_opened = atomic_load(&counters.shards_opened);
        stats->shards_failed = atomic_load(&counters.shards_failed);
        stats->shards_empty = atomic_load(&counters.shards_empty);
        stats->samples_skipped = atomic_load(&counters.samples_skipped);
        stats->members_ignored = atomic_load(&counters.members_ignored);
        stats->bytes_read = atomic_load(&counters.bytes_read);
        for (size_t i = 0; b.counts != NULL && i < urls.count; i++)
            stats->samples += b.counts[i];
        stk__struct_copy(stats_out, stats_size, &full, sizeof full);
    }
    for (size_t i = 0; b.offsets != NULL && i < urls.count; i++)
        stk__offsets_free(&b.offsets[i]);
    stk__free(b.offsets);
    stk__free(b.counts);
    stk__strlist_free(&urls);
    stk__strlist_free(&names);
    stk__err_ensure(&err, rc);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}

/* ---- reading ---- */

static char *read_file(const char *path, struct stk__err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return stk__errf(err, errno == ENOENT ? STK_ENOENT : STK_EIO,
                         "%s: cannot open the dataset index: %s", path, strerror(errno)),
               NULL;
    char *text = NULL;
    long size = -1;
    if (fseek(f, 0, SEEK_END) == 0)
        size = ftell(f);
    if (size < 0 || size > MAX_INDEX_BYTES || fseek(f, 0, SEEK_SET) != 0) {
        stk__errf(err, STK_EINVAL, "%s: not a readable dataset index (size %ld)", path, size);
    } else if ((text = stk__malloc((size_t)size + 1)) == NULL) {
        stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    } else if (fread(text, 1, (size_t)size, f) != (size_t)size) {
        stk__errf(err, STK_EIO, "%s: cannot read the dataset index", path);
        stk__free(text);
        text = NULL;
    } else {
        text[size] = '\0';
    }
    fclose(f);
    return text;
}

struct entry {
    const char *url;
    uint64_t samples;
    const cJSON *offsets; /* NULL or an array of samples numbers */
};

static int compare_entries(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->url, ((const struct entry *)b)->url);
}

/* The shard entries of a parsed index, sorted by URL for lookups. */
static int parse_entries(const char *path, const cJSON *root, struct entry **out, size_t *n,
                         struct stk__err *err)
{
    const cJSON *format = cJSON_GetObjectItemCaseSensitive(root, "format");
    const cJSON *version = cJSON_GetObjectItemCaseSensitive(root, "version");
    const cJSON *shards = cJSON_GetObjectItemCaseSensitive(root, "shards");
    if (!cJSON_IsString(format) || strcmp(format->valuestring, INDEX_FORMAT) != 0 ||
        !cJSON_IsArray(shards))
        return stk__errf(err, STK_EFORMAT, "%s: not a stoker dataset index", path);
    if (!cJSON_IsNumber(version) || version->valuedouble != INDEX_VERSION)
        return stk__errf(err, STK_EFORMAT, "%s: dataset index version %g is not supported (%d is)",
                         path, cJSON_IsNumber(version) ? version->valuedouble : -1.0,
                         INDEX_VERSION);
    *n = (size_t)cJSON_GetArraySize(shards);
    *out = stk__calloc(*n + 1, sizeof **out);
    if (*out == NULL)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    size_t i = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, shards)
    {
        const cJSON *url = cJSON_GetObjectItemCaseSensitive(s, "url");
        const cJSON *samples = cJSON_GetObjectItemCaseSensitive(s, "samples");
        if (!cJSON_IsString(url) || !cJSON_IsNumber(samples) || samples->valuedouble < 0 ||
            samples->valuedouble > 9007199254740992.0) /* 2^53: exact in a double */
            return stk__errf(err, STK_EFORMAT, "%s: shard entry %zu needs a url and a sample count",
                             path, i);
        const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(s, "offsets");
        if (offsets != NULL &&
            (!cJSON_IsArray(offsets) || (double)cJSON_GetArraySize(offsets) != samples->valuedouble))
            return stk__errf(err, STK_EFORMAT,
                             "%s: shard entry %zu has offsets that do not match its samples", path,
                             i);
        (*out)[i].url = url->valuestring;
        (*out)[i].samples = (uint64_t)samples->valuedouble;
        (*out)[i].offsets = offsets;
        i++;
    }
    qsort(*out, *n, sizeof **out, compare_entries);
    return 0;
}

/* Copy an entry's offsets: increasing numbers below 2^53, else an error
 * naming the shard as shown (its URL redacted). */
static int copy_offsets(const char *path, const struct entry *e, const char *shown,
                        uint64_t **out, struct stk__err *err)
{
    *out = NULL;
    if (e->offsets == NULL)
        return 0;
    *out = stk__calloc(e->samples + 1, sizeof **out);
    if (*out == NULL)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    size_t k = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, e->offsets)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > 9007199254740992.0 ||
            (k > 0 && (uint64_t)v->valuedouble <= (*out)[k - 1]))
            return stk__errf(err, STK_EFORMAT, "%s: shard %s has a bad offset (number %zu)", path,
                             shown, k);
        (*out)[k++] = (uint64_t)v->valuedouble;
    }
    return 0;
}

int stk__index_load(const char *path, const struct stk__strlist *urls,
                    const struct stk__strlist *names, struct stk__dataset_index *idx,
                    struct stk__err *err)
{
    memset(idx, 0, sizeof *idx);
    char *text = read_file(path, err);
    if (text == NULL)
        return err->code;
    cJSON *root = cJSON_Parse(text);
    stk__free(text);
    struct entry *entries = NULL;
    size_t n = 0;
    int rc = root == NULL ? stk__errf(err, STK_EFORMAT, "%s: the dataset index is not valid JSON",
                                      path)
                          : parse_entries(path, root, &entries, &n, err);
    idx->n = urls->count;
    if (rc == 0 && ((idx->counts = stk__calloc(urls->count + 1, sizeof *idx->counts)) == NULL ||
                    (idx->offsets = stk__calloc(urls->count + 1, sizeof *idx->offsets)) == NULL))
        rc = stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    for (size_t i = 0; rc == 0 && i < urls->count; i++) {
        struct entry key = {.url = urls->items[i]};
        const struct entry *e = bsearch(&key, entries, n, sizeof *entries, compare_entries);
        if (e == NULL) {
            rc = stk__errf(err, STK_EINVAL,
                           "%s: shard %s is not in the dataset index (index the same URLs the "
                           "loader reads)",
                           path, names->items[i]);
        } else {
            idx->counts[i] = e->samples;
            rc = copy_offsets(path, e, names->items[i], &idx->offsets[i], err);
        }
    }
    if (rc < 0)
        stk__index_free(idx);
    stk__free(entries);
    cJSON_Delete(root);
    return rc;
}

void stk__index_free(struct stk__dataset_index *idx)
{
    for (size_t i = 0; idx->offsets != NULL && i < idx->n; i++)
        stk__free(idx->offsets[i]);
    stk__free(idx->offsets);
    stk__free(idx->counts);
    memset(idx, 0, sizeof *idx);
}
