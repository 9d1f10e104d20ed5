/* SPDX-License-Identifier: MIT */
/*
 * verify.c - stk_verify: read a whole dataset once and report every bad
 * sample and shard, without stopping at any.
 *
 * The checks are the training path's own: the shard reader with its skip
 * policy (tar structure, grouping, limits; it logs and counts what it
 * drops, data after the end-of-archive marker included) and
 * stk__sample_check (label, image member decoded whole), so a dataset that
 * verifies clean trains without a skipped sample. A shard that reads
 * cleanly but holds no sample is reported too. Shards are
 * independent jobs on opts->threads threads.
 *
 * The labels of each shard are counted as one batch of the label mixing
 * statistic (mixing.h): shards of a few classes each, against what
 * shuffled shards would hold, is how class-sorted data shows.
 * labels_mutex guards v->labels (jobs add a whole shard at a time).
 */
#include <stdatomic.h>
#include <string.h>

#include "base/abi.h"
#include "base/alloc.h"
#include "list/cloud_list.h"
#include "image/image.h"
#include "pipeline/sample_image.h"
#include "options.h"
#include "tar/sample.h"
#include "base/jobs.h"
#include "plan/mixing.h"
#include "tar/shard_reader.h"
#include "stoker.h"
#include "base/threads.h"

struct verify {
    const struct stk__strlist *urls;
    const struct stk__strlist *names; /* urls redacted */
    struct stk__shard_config shard;
    const struct stk__image_config *image; /* NULL: tar and grouping only */
    const struct stk__sample_rules *rules; /* with image */
    /* counters.samples: returned by the readers; bad_images: of those,
     * failing stk__sample_check (added to samples_skipped at the end). */
    struct stk__run *run;
    atomic_uint_fast64_t bad_images;
    pthread_mutex_t labels_mutex;
    struct stk__label_mixing labels;
};

/* The labels of the good samples of one shard. */
struct shard_labels {
    int64_t *items;
    size_t n, capacity;
};

/* 0, or STK_ENOMEM. */
static int add_label(struct shard_labels *sl, int64_t label)
{
    if (sl->n == sl->capacity) {
        size_t capacity = sl->capacity ? 2 * sl->capacity : 1024;
        int64_t *items = stk__realloc(sl->items, capacity * sizeof *items);
        if (items == NULL)
            return STK_ENOMEM;
        sl->items = items;
        sl->capacity = capacity;
    }
    sl->items[sl->n++] = label;
    return 0;
}

/* Check one sample; 0 whether good or bad input, <0 (the image stage's
 * message in *fatal) when the check itself failed (out of memory). */
static int check_sample(struct verify *v, struct stk__image_worker *w,
                        const struct stk__sample *s, struct shard_labels *labels,
                        struct stk__err *fatal)
{
    atomic_fetch_add(&v->run->counters.samples, 1);
    if (v->image == NULL)
        return 0;
    struct stk__err err;
    int64_t label;
    int rc = stk__sample_check(w, v->rules, s, &label, &err);
    if (rc < 0 && !stk__error_is_bad_input(rc)) {
        *fatal = err;
        return rc;
    }
    if (rc < 0) {
        stk__run_log(v->run, STK_LOG_WARN, "%s", err.msg);
        atomic_fetch_add(&v->bad_images, 1);
        return 0;
    }
    atomic_fetch_add(&v->run->counters.images_decoded, 1);
    int labelled = stk__sample_rules_labelled(v->rules);
    rc = labelled ? add_label(labels, label) : 0;
    return rc < 0 ? stk__errf(fatal, rc, "out of memory for the labels") : rc;
}

static int verify_job(void *ctx, size_t i, struct stk__err *err)
{
    struct verify *v = ctx;
    struct stk__image_worker *w = NULL;
    if (v->image != NULL && (w = stk__image_worker_new(v->image)) == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for an image decoder");
    struct stk__shard_reader *r = NULL;
    struct shard_labels labels = {0};
    int rc = stk__shard_open(v->urls->items[i], v->names->items[i], i, &v->shard, &r, err);
    while (rc == 0) {
        struct stk__sample *s;
        rc = stk__shard_next(r, &s, err);
        if (rc <= 0)
            break;
        struct stk__err failure;
        rc = check_sample(v, w, s, &labels, &failure);
        stk__sample_free(s);
        if (rc < 0)
            stk__errf(err, rc, "%s checking the images of %s", failure.msg, v->names->items[i]);
    }
    if (rc == 0 && stk__shard_empty(r)) {
        /* It read cleanly and trains nothing: a dataset with it is not
         * what its writer meant. */
        const char *first;
        uint64_t ignored = stk__shard_ignored(r, &first);
        const char *shown = v->names->items[i];
        if (ignored == 0)
            stk__run_log(v->run, STK_LOG_WARN, "%s: no samples: the shard has no members", shown);
        else
            stk__run_log(v->run, STK_LOG_WARN,
                         "%s: no samples: its %llu members are all ignored (directories, "
                         "links, names without a key such as '%s')",
                         shown, (unsigned long long)ignored, first);
    }
    stk__shard_close(r);
    stk__image_worker_free(w);
    stk__mutex_lock(&v->labels_mutex);
    stk__label_mixing_batch(&v->labels, labels.items, labels.n);
    stk__mutex_unlock(&v->labels_mutex);
    stk__free(labels.items);
    if (rc >= 0 || !stk__error_is_bad_input(rc))
        return rc;
    /* The reader skips what it can; what is left cut the shard short. */
    stk__run_log(v->run, STK_LOG_WARN, "%s (%s)", err->msg,
                 r == NULL ? "shard not read" : "rest of the shard not read");
    atomic_fetch_add(&v->run->counters.shards_failed, 1);
    return 0;
}

int stk_verify_sized(const struct stk_options *opts, const char *const *patterns, size_t n,
                     struct stk_stats *stats_out, size_t stats_size, char *errbuf,
                     size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__run run;
    struct stk__strlist urls = {0}, names = {0};
    struct stk__image_config image;
    struct stk__sample_rules rules;
    struct verify v = {.urls = &urls, .names = &names, .run = &run};
    struct stk_options o;
    struct stk_stats full, *stats = stats_out != NULL ? &full : NULL;
    int rc = stk__options_import(&o, opts, &err);
    o.on_error = STK_ON_ERROR_SKIP; /* never stop at bad data */
    stk__run_init(&run, rc == 0 ? &o : NULL);
    run.skip_bad = 1;
    if (rc == 0)
        rc = stk__options_check(&o, &err);
    if (rc == 0 && o.transform != STK_TRANSFORM_NONE) {
        rc = stk__image_config_init(&image, &o, &err);
        if (rc == 0)
            rc = stk__sample_rules_init(&rules, &o, &err);
        v.image = &image;
        v.rules = &rules;
    }
    stk__mutex_init(&v.labels_mutex);
    if (stk__label_mixing_init(&v.labels, 1, &run.counters) < 0 && rc == 0)
        rc = stk__errf(&err, STK_ENOMEM, "out of memory starting to verify");
    if (rc == 0)
        rc = stk__expand_and_list(&o, patterns, n, &urls, &names, &err);
    if (rc == 0 && urls.count == 0)
        rc = stk__errf(&err, STK_EINVAL, "no shards to verify");
    if (rc == 0) {
        stk__shard_config_init(&v.shard, &o, &run, NULL);
        rc = stk__run_jobs(urls.count, o.threads, verify_job, &v, &run, &err);
    }
    if (stats != NULL) {
        /* samples: every sample read, the readers' drops (in samples_skipped
         * so far) included; then the bad images join the skipped ones. */
        atomic_fetch_add(&run.counters.samples, atomic_load(&run.counters.samples_skipped));
        atomic_fetch_add(&run.counters.samples_skipped, atomic_load(&v.bad_images));
        stk__run_snapshot(&run, stats);
        stk__struct_copy(stats_out, stats_size, &full, sizeof full);
    }
    stk__label_mixing_free(&v.labels);
    stk__mutex_destroy(&v.labels_mutex);
    stk__strlist_free(&urls);
    stk__strlist_free(&names);
    stk__err_ensure(&err, rc);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}
