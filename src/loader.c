/* SPDX-License-Identifier: MIT */
/*
 * loader.c - the public stk_loader API over plan and pipeline.
 *
 * A loader owns the expanded URL list, the options, the counters and the
 * batch budget; each epoch gets a fresh pipeline, started lazily by the
 * first stk_loader_next() (or ahead of it by stk_loader_start()) and
 * stopped by stk_loader_set_epoch() or stk_loader_destroy().
 *
 * DESIGN (the epoch boundary). The window shuffle must read about
 * shuffle_buffer inputs before its first output (plan/shuffle.h), and an
 * epoch's pipeline started when the last one ended made the loop wait for
 * them at every boundary (3.2x one batch locally, 4.7x over http). The
 * next epoch's plan is known in advance, so once this epoch's input is
 * over (its readers are done, the window drains its tail) look_ahead()
 * starts the next epoch's pipeline ahead (pipeline.h): its readers fill its
 * window meanwhile, within the same member-byte budget (pipeline_impl.h);
 * once this epoch made its last batch the next one may take batch buffers
 * and decode its first batches. stk_loader_seek() to that epoch's start
 * (what the Python loop does at each epoch) continues it: the same
 * pipeline a fresh start would run, so the same batches; a seek anywhere
 * else stops it, after it read at most one window. Ranges (Dask tasks) and
 * elastic remainders jump elsewhere next: none is started ahead for them.
 *
 * DESIGN (threads). Every call but stk_loader_interrupt(), stk_loader_stats()
 * and stk_batch_release() comes from one thread at a time, the owner; only
 * the owner starts and stops pipelines. stk_loader_interrupt() may come
 * from any thread meanwhile: it sets l->interrupt, then wakes the pipeline
 * the owner may be waiting in; stk_loader_stats() adds the current
 * pipeline's counts to the loader's. wake_mutex guards l->pipeline against
 * those readers: the owner publishes a new pipeline under wake_mutex, and
 * halts one (joins its threads), then merges its counts and unpublishes it
 * in one step under wake_mutex, then frees it (retire); the interrupter
 * wakes a pipeline and stats reads one only while holding wake_mutex, so
 * neither touches one being freed, and no count is seen twice or missed.
 * The owner reads l->pipeline without the lock (it is the only writer).
 * Lock order: wake_mutex, then the pipeline's mutex; the owner never holds
 * a pipeline's mutex while taking wake_mutex.
 */
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif

#include "base/abi.h"
#include "base/alloc.h"
#include "pipeline/batch.h"
#include "dataset_index.h"
#include "cache/cache.h"
#include "list/cloud_list.h"
#include "base/error.h"
#include "option_rules.h"
#include "options.h"
#include "base/rng.h"
#include "base/run.h"
#include "pipeline/pipeline.h"
#include "image/image.h"
#include "pipeline/sample_image.h"
#include "plan/mixing.h"
#include "plan/node_uses.h"
#include "plan/plan.h"
#include "plan/remainder.h"
#include "base/buffer_pool.h"
#include "tar/shard_reader.h"
#include "io/source.h"
#include "stoker.h"
#include "base/threads.h"
#include "list/urls.h"

struct stk_loader {
    struct stk_options opts; /* imported (abi.h), strings owned */
    struct stk__strlist urls;
    struct stk__strlist names; /* urls redacted: samples point here until released */
    int any_remote;            /* some url is not a local file */
    int split_by_sample;       /* the index splits the epoch by sample over the ranks (plan.h) */
    int global_order;          /* ... in a global order of the samples, read by offset */
    int rank;
    int world_size;
    /* Repeated augmentation (stk_options.ra_reps, plan.h): where reps
     * divides world_size, the shard plan of rank rank / reps among
     * world_size / reps, so reps consecutive ranks read the same samples
     * and draw their own augmentations (reps 1: the rank's own plan); else
     * the rank's own, made of plan_slots of the epoch's plan_parts parts,
     * slot_samples of each. */
    int plan_rank;
    int plan_world;
    int plan_parts;
    int plan_slots;
    uint64_t slot_samples;
    int plan_ranks_per_node; /* node affinity in the plan's ranks; 0: off */
    int node_ranks;          /* plan ranks on this node, for the cache's next uses */
    /* The cache's counts when the current epoch started, and while the
     * next one reads ahead (ahead_cache_set) when that one started: stats
     * show those until it begins, so that what it reads counts in its own
     * epoch, as its pipeline's counts do (retire). Guarded by wake_mutex:
     * stats reads them from any thread. */
    struct stk__cache_counts epoch_cache, ahead_cache;
    int ahead_cache_set;
    /* Counters (wait_ns: callers inside stk_loader_next; started_ns: the
     * first of them), log, error policy, the epoch's cancel flag. */
    struct stk__run run;
    struct stk__batch_budget budget;
    struct stk__buffer_pool *pool;
    struct stk__cache *cache; /* NULL without cache_dir */
    struct stk__image_config image; /* when opts.transform != NONE */
    struct stk__sample_rules rules; /* the same: labels, required members */
    struct stk__image_ring ring;
    int has_ring; /* ring is initialised (with a transform) */
    struct stk__pipeline *pipeline; /* written by the owner under wake_mutex */
    /* The next epoch's pipeline started ahead (look_ahead), NULL if none;
     * owner only: nothing waits in it before it becomes l->pipeline. */
    struct stk__pipeline *ahead;
    uint64_t ahead_epoch;
    int ahead_released;          /* its limit was raised: this epoch made its last batch */
    _Atomic uint64_t held_bytes; /* member bytes of every pipeline (pipeline.h) */
    pthread_mutex_t wake_mutex;
    atomic_int interrupt; /* set by stk_loader_interrupt, cleared by the call it ends */
    int epoch_failed;
    uint64_t first_batch; /* of the next epoch started (stk_loader_seek) */
    uint64_t first_epoch; /* opts.epoch at creation (stk_options.epochs counts from it) */
    uint64_t batch_limit; /* its end (stk_loader_seek_range), UINT64_MAX: none */
    struct stk__dataset_index index; /* counts NULL without one */
    uint64_t index_total;            /* samples the index counts */
    int auto_share;                  /* use_index chose samples_per_rank (equal shares) */
    /* Elastic resume (stk_loader_set_remainder): epoch remainder_epoch
     * delivers only these n_remainder ranges of its sequence; NULL: none. */
    uint64_t *remainder;
    size_t n_remainder;
    uint64_t remainder_epoch;
    int remainder_nodes;             /* the ranges are of so many nodes' sequences (plan.h) */
    struct stk__label_mixing labels; /* of delivered batches (with a transform) */
    int counts_labels;
    /* Copies of the caller's option strings, which need only outlive
     * stk_loader_create(): every string field of opts points here. */
    char *strings[STK__N_OPTION_STRINGS];
    struct stk__err err;
};

/* Point every string field of l->opts at a copy the loader owns, so that
 * no later reader of l->opts (each epoch's pipeline copies it) meets a
 * string the caller has freed. */
static int own_strings(stk_loader *l)
{
    for (size_t i = 0; i < STK__N_OPTION_STRINGS; i++) {
        const char **field = stk__option_string(&l->opts, i);
        if (*field == NULL)
            continue;
        if ((l->strings[i] = stk__strdup(*field)) == NULL)
            return STK_ENOMEM;
        *field = l->strings[i];
    }
    return 0;
}

static void free_strings(stk_loader *l)
{
    for (size_t i = 0; i < STK__N_OPTION_STRINGS; i++)
        stk__free(l->strings[i]);
}

/* The ranges in the options table (options_table.h), then what depends on
 * two fields at once: an option that acts only beside another
 * (option_rules.h), and the pairs below. */
static int check_options(const struct stk_options *o, struct stk__err *err)
{
    int rc = stk__options_check(o, err);
    if (rc == 0)
        rc = stk__option_rules_check(o, err);
    if (rc < 0)
        return rc;
    if ((o->alloc_batch_memory == NULL) != (o->free_batch_memory == NULL))
        return stk__errf(err, STK_EINVAL, "set both alloc_batch_memory and free_batch_memory, or neither");
    if (o->uneven && o->samples_per_rank != 0)
        return stk__errf(err, STK_EINVAL,
                         "samples_per_rank=%llu asks every rank for an equal count, uneven=1 for "
                         "each rank's own shards once: give one of them",
                         (unsigned long long)o->samples_per_rank);
    if (o->cache_dir != NULL && o->cache_dir[0] != '\0' && o->cache_size == 0)
        return stk__errf(err, STK_EINVAL, "cache_dir %s needs a cache_size above 0", o->cache_dir);
    return 0;
}

/* The plan's rank and world under repeated augmentation. */
static int plan_ranks(stk_loader *l, struct stk__err *err)
{
    /* torchvision's RASampler deals the copies of its index list round
     * robin, so any pair works there: with 3 copies on 4 ranks, sample 0
     * goes to ranks 0-2 and sample 1 to 3, 0, 1. Where reps divides the
     * world, reps consecutive ranks read one plan share; else each rank
     * reads several shares, one per copy it holds (plan.h). */
    int reps = l->opts.ra_reps ? (int)l->opts.ra_reps : 1;
    stk__plan_repeats(reps, l->world_size, &l->plan_parts, &l->plan_slots);
    l->node_ranks = 1;
    if (l->plan_slots > 1) {
        l->plan_rank = l->rank;
        l->plan_world = l->world_size;
        if (l->opts.node_affinity == 1)
            return stk__errf(err, STK_EINVAL,
                             "node_affinity with ra_reps=%d and world_size=%d: where ra_reps "
                             "does not divide world_size each rank reads the parts of several "
                             "copies, dealt over the ranks of every node; node affinity needs "
                             "ra_reps to divide the ranks per node",
                             reps, l->world_size);
        return 0;
    }
    l->plan_rank = l->rank / reps;
    l->plan_world = l->world_size / reps;
    int rpn;
    /* Auto (-1): on with a cache and several nodes the launcher names
     * (mixing is the same either way: docs/node-cache.md). Without affinity
     * the launcher may still say which ranks share this node and its cache,
     * for the cache's next uses; else the rank plans for itself. */
    struct stk__err quiet;
    int known = l->opts.node_affinity != 1
                    ? stk__plan_resolve_node(l->opts.ranks_per_node, l->rank, l->world_size,
                                             &rpn, &quiet) == 0
                    : 0;
    const int caches = l->opts.cache_dir != NULL && l->opts.cache_dir[0] != '\0';
    int affinity = l->opts.node_affinity == 1 || (l->opts.node_affinity < 0 && known && caches &&
                                                  l->world_size > rpn && rpn % reps == 0);
    if (!affinity) {
        if (known && rpn % reps == 0)
            l->node_ranks = rpn / reps;
        return 0;
    }
    int rc = known ? 0 : stk__plan_resolve_node(l->opts.ranks_per_node, l->rank, l->world_size,
                                                &rpn, err);
    if (rc == 0 && rpn % reps != 0)
        rc = stk__errf(err, STK_EINVAL, "ra_reps (%d) must divide the ranks per node (%d) under "
                                        "node_affinity: a sample's ranks share a node",
                       reps, rpn);
    l->plan_ranks_per_node = rpn / reps;
    l->node_ranks = rpn / reps;
    return rc;
}

/* Load the dataset index. With several ranks its counts split the epoch by
 * sample (plan.h; whole_shards=1: by shard), and with no samples_per_rank
 * and equal shares (uneven=0, the default) each rank then yields the same
 * share of the dataset: equal batches per rank without the user counting
 * samples. That share is ceil(total / world) split by sample (the padding
 * is the plan's), floor(total / world) by shard or under ra_reps (whose
 * ranks repeat each sample already). uneven=1 (evaluation) reads each
 * sample once, whatever each rank's count. */
static int use_index(stk_loader *l, struct stk__err *err)
{
    int rc = stk__index_load(l->opts.index_path, &l->urls, &l->names,
                             l->opts.max_samples_per_shard, &l->index, err);
    if (rc < 0)
        return rc;
    l->split_by_sample = l->plan_parts > 1 && !l->opts.whole_shards;
    const int reps = l->opts.ra_reps ? (int)l->opts.ra_reps : 1;
    uint64_t total = 0;
    for (size_t i = 0; i < l->urls.count; i++)
        total += l->index.counts[i];
    l->index_total = total;
    if ((l->world_size > 1 || reps > 1) && l->opts.samples_per_rank == 0 && !l->opts.uneven) {
        const uint64_t world = (uint64_t)l->world_size;
        l->auto_share = 1;
        l->opts.samples_per_rank = l->split_by_sample && reps == 1 ? (total + world - 1) / world
                                                                   : total / world;
        if (l->opts.samples_per_rank == 0)
            return stk__errf(err, STK_EPLAN, "the dataset index counts %llu samples: too few for %d ranks",
                             (unsigned long long)total, l->world_size);
    }
    /* A rank holding several copies' parts reads the same count of each,
     * so every rank holding a part reads the same samples of it: the share
     * rounds down to a multiple of the parts (at most plan_slots - 1
     * samples a rank, as RASampler truncates to num_selected_samples). */
    if (l->plan_slots > 1 && l->opts.samples_per_rank != 0) {
        l->slot_samples = l->opts.samples_per_rank / (uint64_t)l->plan_slots;
        if (l->slot_samples == 0)
            return stk__errf(err, STK_EINVAL,
                             "samples_per_rank=%llu with ra_reps=%d and world_size=%d: each rank "
                             "reads %d parts of the epoch, one per copy it holds, and needs at "
                             "least one sample of each",
                             (unsigned long long)l->opts.samples_per_rank, reps, l->world_size,
                             l->plan_slots);
        l->opts.samples_per_rank = l->slot_samples * (uint64_t)l->plan_slots;
    }
    return 0;
}

/* Remote shards have cheap random access only through a node cache that
 * keeps every shard the node reads: each is then downloaded whole once
 * (stk__cache_open_whole) and its samples read by offset from the local
 * copy, for the run, where a request per sample would double the origin's
 * bytes and a cache evicting mid-epoch would fetch shards again and again
 * (a global order reads every shard of the node throughout the epoch).
 * Under node affinity a node reads its own shards (plan.h): the busiest
 * node's must fit. Without it every rank's share of the permutation spans
 * nearly every shard: all of them must fit (with several nodes each then
 * fetches the whole dataset once, in the first epoch, where the window
 * fetches a part of it every epoch). The choice is a pure function of the
 * options and the index: never of what the cache holds now, nor of the
 * launcher's environment (a Dask worker has none), so every rank, a resume
 * and a Dask worker plan the same order. 1: it fits; 0: the window (why
 * in *why); STK_ENOMEM. */
static int cache_serves_order(const stk_loader *l, const char **why)
{
    const int caches = l->opts.cache_dir != NULL && l->opts.cache_dir[0] != '\0';
    *why = "no cache_dir";
    if (!caches)
        return 0;
    *why = "the index records no size for some remote shard";
    for (size_t i = 0; i < l->urls.count; i++)
        if (l->index.stamps == NULL || !l->index.stamps[i].has_size)
            return 0;
    const int nodes = l->plan_ranks_per_node > 0 ? l->plan_world / l->plan_ranks_per_node : 1;
    uint32_t *node_of = stk__calloc(l->urls.count ? l->urls.count : 1, sizeof *node_of);
    uint64_t *bytes = stk__calloc((size_t)nodes, sizeof *bytes);
    size_t *shards = stk__calloc((size_t)nodes, sizeof *shards);
    int rc = node_of == NULL || bytes == NULL || shards == NULL ? STK_ENOMEM : 0;
    if (rc == 0 && nodes > 1)
        rc = stk__plan_node_split(l->urls.count, l->opts.seed, l->opts.shuffle, nodes,
                                  l->index.counts, node_of);
    for (size_t i = 0; rc == 0 && i < l->urls.count; i++) {
        bytes[node_of[i]] += l->index.stamps[i].size;
        shards[node_of[i]]++;
    }
    *why = "cache_size is below the shards of a node";
    for (int n = 0; rc == 0 && n < nodes; n++)
        if (!stk__cache_holds(l->opts.cache_size, bytes[n], shards[n], l->opts.shards_in_flight))
            rc = -1;
    stk__free(node_of);
    stk__free(bytes);
    stk__free(shards);
    return rc == STK_ENOMEM ? rc : rc == 0;
}

/* A global order of the samples (plan.h) where random access is cheap:
 * each sample is then opened at its own offset, which for a local file is
 * a seek, for a remote one a request unless the node cache holds its shard
 * (cache_serves_order). The index must locate every sample (compressed
 * shards have no offsets), and a shuffle_buffer given by the caller asks
 * for the window. Pure streams keep the window. */
static int choose_order(stk_loader *l)
{
    struct stk_options defaults;
    stk_options_init(&defaults);
    /* A shuffle_buffer given asks for the window: it is honoured. */
    if (l->index.counts == NULL || !l->opts.shuffle || l->opts.window_shuffle ||
        l->opts.whole_shards || l->opts.shuffle_buffer != defaults.shuffle_buffer)
        return 0;
    uint64_t total = 0;
    for (size_t i = 0; i < l->urls.count; i++) {
        if (l->index.counts[i] > 0 && l->index.offsets[i] == NULL)
            return 0;
        total += l->index.counts[i];
    }
    if (total == 0 || total > UINT32_MAX)
        return 0;
    if (l->any_remote) {
        const char *why;
        int rc = cache_serves_order(l, &why);
        if (rc <= 0) {
            if (rc == 0)
                stk__run_log(&l->run, STK_LOG_INFO,
                             "remote shards: the shuffle window, not a global order (%s)", why);
            return rc;
        }
    }
    l->global_order = 1;
    l->split_by_sample = 1;
    return 0;
}

int stk_loader_create(const struct stk_options *caller_opts, const char *const *urls,
                      size_t n_urls, stk_loader **out, char *errbuf, size_t errbuf_size)
{
    struct stk__err err;
    stk__err_clear(&err);
    *out = NULL;
    stk_loader *l = NULL;
    struct stk_options imported;
    const struct stk_options *opts = &imported;
    int rc = stk__options_import(&imported, caller_opts, &err);
    /* What the caller gave, before the recipe fills in its own values. */
    if (rc == 0)
        rc = check_options(opts, &err);
    if (rc == 0)
        stk__options_apply_recipe(&imported);
    if (rc < 0)
        goto fail;
    if (urls == NULL && n_urls > 0) {
        rc = stk__errf(&err, STK_EINVAL, "urls is NULL");
        goto fail;
    }
    l = stk__calloc(1, sizeof *l);
    if (l == NULL) {
        rc = stk__errf(&err, STK_ENOMEM, "out of memory creating a loader");
        goto fail;
    }
    /* From here on stk_loader_destroy() undoes whatever was made. */
    stk__budget_init(&l->budget, opts->max_batches);
    stk__mutex_init(&l->wake_mutex);
    atomic_init(&l->interrupt, 0);
    atomic_init(&l->held_bytes, 0);
    l->batch_limit = UINT64_MAX;
    l->opts = *opts;
    l->first_epoch = opts->epoch;
    stk__run_init(&l->run, opts);
    atomic_store(&l->run.counters.decode_threads,
                 opts->transform != STK_TRANSFORM_NONE ? opts->threads : 0);
    if (stk__label_mixing_init(&l->labels, opts->batch_size, &l->run.counters) < 0) {
        rc = stk__errf(&err, STK_ENOMEM, "out of memory creating a loader");
        goto fail;
    }
    l->counts_labels = opts->transform != STK_TRANSFORM_NONE;
    if (own_strings(l) < 0) {
        rc = stk__errf(&err, STK_ENOMEM, "out of memory creating a loader");
        goto fail;
    }
    /* "s3://bucket/prefix/" is listed once, here, so that every rank and
     * epoch plans over the same sorted list. */
    rc = stk__expand_and_list(&l->opts, urls, n_urls, &l->urls, &l->names, &err);
    if (rc == 0)
        rc = stk__plan_resolve_rank(opts->rank, opts->world_size, &l->rank, &l->world_size, &err);
    if (rc == 0)
        rc = plan_ranks(l, &err);
    if (rc == 0 && opts->index_path != NULL)
        rc = use_index(l, &err);
    if (rc == 0 && !l->split_by_sample)
        rc = stk__plan_check(l->urls.count, l->plan_parts, &err);
    /* A local shard that is missing fails now, not when its turn comes (a
     * stat each); under the skip policy it is skipped then, and counted. */
    for (size_t i = 0; rc == 0 && opts->on_error == STK_ON_ERROR_FAIL && i < l->urls.count; i++)
        rc = stk__source_check(l->urls.items[i], l->names.items[i], &err);
    /* Whether some shard is remote decides the reader count of every epoch
     * (pipeline.c): once, here, not at each epoch start. */
    for (size_t i = 0; rc == 0 && i < l->urls.count && !l->any_remote; i++)
        l->any_remote = !stk__source_is_local(l->urls.items[i]);
    if (rc == 0)
        rc = choose_order(l);
    if (rc < 0)
        goto fail;
    if (opts->transform != STK_TRANSFORM_NONE) {
        rc = stk__image_config_init(&l->image, opts, &err);
        if (rc == 0)
            rc = stk__sample_rules_init(&l->rules, opts, &err);
        if (rc < 0)
            goto fail;
        /* Repeated augmentation: the ranks that share a plan draw their
         * own crops, augmentations and mixing. */
        if (l->opts.ra_reps > 1)
            l->image.seed = stk__mix(opts->seed, (uint64_t)l->rank);
        l->has_ring = 1; /* destroyable even when its init fails */
        if (stk__image_ring_init(&l->ring, opts->max_batches, opts->batch_size,
                                 stk__image_bytes(&l->image), opts->alloc_batch_memory,
                                 opts->free_batch_memory, opts->batch_memory_data) < 0) {
            rc = stk__errf(&err, STK_ENOMEM, "out of memory creating a loader");
            goto fail;
        }
    }
    /* Idle buffers kept for reuse: enough for the read-ahead of every
     * shard in flight plus a batch ring's worth of turnover. */
    l->pool = stk__buffer_pool_new(opts->prefetch_bytes_per_shard * opts->shards_in_flight +
                                   ((size_t)64 << 20));
    if (l->pool == NULL) {
        rc = stk__errf(&err, STK_ENOMEM, "out of memory creating a loader");
        goto fail;
    }
    if (opts->cache_dir != NULL && opts->cache_dir[0] != '\0') {
        struct stk__cache_config cc = {
            .dir = opts->cache_dir,
            .max_bytes = opts->cache_size,
            .shards_in_flight = opts->shards_in_flight,
        };
        rc = stk__cache_new(&cc, &l->cache, &err);
        if (rc < 0)
            goto fail;
    }
    *out = l;
    return 0;
fail:
    stk_loader_destroy(l);
    stk__err_ensure(&err, rc);
    stk__copy_msg(errbuf, errbuf_size, err.msg);
    return rc;
}

/* The current epoch is the rest of an interrupted one (elastic resume). */
static int in_remainder(const stk_loader *l)
{
    return l->remainder != NULL && l->opts.epoch == l->remainder_epoch;
}

/* Samples this rank yields in the current epoch (0: all of its list): an
 * equal share of the remainder's positions in a resumed epoch, as
 * use_index() sets it for a whole one. */
static uint64_t epoch_target(const stk_loader *l)
{
    if (!in_remainder(l) || !l->auto_share)
        return l->opts.samples_per_rank;
    const uint64_t w = (uint64_t)l->world_size;
    return (stk__plan_ranges_total(l->remainder, l->n_remainder) + w - 1) / w;
}

/* What decides this rank's list in the current epoch (plan.h) when it is
 * a whole one. */
static struct stk__plan_spec whole_spec(const stk_loader *l)
{
    return (struct stk__plan_spec){
        .n_shards = l->urls.count,
        .seed = l->opts.seed,
        .epoch = l->opts.epoch,
        .rank = l->plan_rank,
        .world = l->plan_world,
        .shuffle = l->opts.shuffle,
        .unbounded = l->opts.samples_per_rank != 0,
        .ranks_per_node = l->plan_ranks_per_node,
        .counts = l->index.counts,
        .by_sample = l->split_by_sample,
        .pad = !l->opts.uneven,
        .global = l->global_order,
        .reps = l->plan_slots > 1 ? (int)l->opts.ra_reps : 0,
        .slot_samples = l->slot_samples,
    };
}

/* The same in the current epoch, also the rest of an interrupted one:
 * split by sample over all ranks, without node affinity (the old ranks
 * split one sequence, not one per node; a node gets its own shards again
 * from the next epoch). */
static struct stk__plan_spec plan_spec(const stk_loader *l)
{
    struct stk__plan_spec spec = whole_spec(l);
    if (in_remainder(l)) {
        spec.by_sample = 1;
        spec.ranges = l->remainder;
        spec.n_ranges = l->n_remainder;
        spec.seq_nodes = l->remainder_nodes;
        spec.unbounded = epoch_target(l) != 0;
        spec.ranks_per_node = 0;
    }
    return spec;
}

/* Tell the node cache when this node reads its shards in this epoch and
 * the next (node_uses.h), so that it evicts by next use. Out of memory
 * only leaves it evicting by the uses it knew, or by LRU. */
static void plan_cache_uses(stk_loader *l, uint64_t epoch)
{
    struct stk__plan_spec spec = plan_spec(l);
    spec.epoch = epoch; /* the next one's, started ahead: never a remainder */
    uint64_t epochs = 2;
    if (in_remainder(l)) { /* it reads a bit of every shard: tell the next epoch's uses */
        spec = whole_spec(l);
        spec.epoch++;
        epochs = 1;
    }
    const int first = l->plan_rank / l->node_ranks * l->node_ranks;
    struct stk__plan_use *uses;
    size_t n;
    if (stk__plan_node_uses(&spec, first, l->node_ranks, epochs, &uses, &n) < 0)
        return;
    struct stk__cache_use *cu = stk__calloc(n + 1, sizeof *cu);
    for (size_t i = 0; cu != NULL && i < n; i++)
        cu[i] = (struct stk__cache_use){l->urls.items[uses[i].shard], uses[i].when};
    if (cu != NULL)
        (void)stk__cache_set_uses(l->cache, cu, n);
    stk__free(cu);
    stk__free(uses);
}

/* Start the pipeline of epoch (the current one, or ahead the next one from
 * its start: look_ahead). The cache's epoch counts start here, when the
 * epoch's reads do. */
static int start_pipeline(stk_loader *l, uint64_t epoch, int ahead, struct stk__pipeline **out,
                          struct stk__err *err)
{
    const struct stk_options *o = &l->opts;
    if (l->cache != NULL) {
        /* A global order keeps every shard of the node in the cache
         * (cache_serves_order): no eviction to order, and its uses, one
         * per sample, would cost memory for nothing. */
        if (!l->global_order)
            plan_cache_uses(l, epoch);
        struct stk__cache_counts cc;
        stk__cache_counts(l->cache, &cc);
        stk__mutex_lock(&l->wake_mutex);
        if (ahead) {
            l->ahead_cache = cc;
            l->ahead_cache_set = 1;
        } else {
            l->epoch_cache = cc;
        }
        stk__mutex_unlock(&l->wake_mutex);
    }
    struct stk__pipeline_config cfg = {
        .opts = *o,
        .rank = l->plan_rank,
        .world_size = l->plan_world,
        .urls = &l->urls,
        .names = &l->names,
        .any_remote = l->any_remote,
        .first_batch = ahead ? 0 : l->first_batch,
        .batch_limit = ahead ? UINT64_MAX : l->batch_limit,
        .shard_samples = l->index.counts,
        .shard_offsets = (const uint64_t *const *)l->index.offsets,
        .shard_stamps = l->index.stamps,
        .plan = plan_spec(l),
        .budget = &l->budget,
        .held_bytes = &l->held_bytes,
        .ahead = ahead,
        .interrupt = &l->interrupt,
        .run = &l->run,
    };
    cfg.opts.epoch = epoch;
    cfg.plan.epoch = epoch;
    /* A global order is a uniform permutation already: no window, and no
     * random interleave of its one-sample segments either. Taking the
     * shard slots in turn delivers the rank's list front to back, which is
     * what lets an elastic resume know what each rank delivered from its
     * count alone (plan/remainder.h). */
    if (l->global_order) {
        cfg.opts.shuffle_buffer = 1;
        cfg.opts.shuffle = 0;
    }
    cfg.opts.samples_per_rank = epoch_target(l);
    stk__shard_config_init(&cfg.shard, o, &l->run, l->pool);
    cfg.shard.cache = l->cache;
    cfg.shard.cache_whole = l->global_order;
    if (o->transform != STK_TRANSFORM_NONE) {
        cfg.image = &l->image;
        cfg.rules = &l->rules;
        cfg.ring = &l->ring;
    }
    int rc = stk__pipeline_start(&cfg, out, err);
    if (rc < 0 && ahead) {
        stk__mutex_lock(&l->wake_mutex);
        l->ahead_cache_set = 0;
        stk__mutex_unlock(&l->wake_mutex);
    }
    return rc;
}

static int start_epoch(stk_loader *l)
{
    struct stk__pipeline *p;
    int rc = start_pipeline(l, l->opts.epoch, 0, &p, &l->err);
    if (rc == 0) {
        stk__mutex_lock(&l->wake_mutex);
        l->pipeline = p;
        stk__mutex_unlock(&l->wake_mutex);
    }
    return rc;
}

/* Stop a pipeline and free it, its counts merged into the loader's: under
 * wake_mutex, unpublished in the same step if it is the current one, so
 * that stats (which add the current pipeline's counts) never count them
 * twice nor miss them. Then give back to the system the memory its
 * threads freed: glibc keeps it in per-thread arenas, where decode buffers
 * of every size fragment it, and RSS grew for about 25 epochs before it
 * levelled (docs/failures.md); a trim once an epoch costs a few ms. */
static void retire(stk_loader *l, struct stk__pipeline *p)
{
    if (p == NULL)
        return;
    stk__pipeline_halt(p);
    stk__mutex_lock(&l->wake_mutex);
    stk__run_merge(&l->run, stk__pipeline_counts(p));
    if (l->pipeline == p)
        l->pipeline = NULL;
    stk__mutex_unlock(&l->wake_mutex);
    stk__pipeline_stop(p);
#ifdef __GLIBC__
    malloc_trim(0);
#endif
}

/* Stop the current epoch's pipeline. stk_loader_interrupt() may still wake
 * it while it halts: it is freed only once unpublished. */
static void stop_epoch(stk_loader *l) { retire(l, l->pipeline); }

/* The caller will read the epoch after the current one (stk_options.epochs:
 * counted from the epoch it was created with, which first_epoch keeps). */
static int wants_next_epoch(const stk_loader *l)
{
    if (l->opts.epoch == UINT64_MAX)
        return 0;
    return l->opts.epochs == 0 || l->opts.epoch + 1 < l->first_epoch + l->opts.epochs;
}

/* At most one window of the next epoch is read ahead (pipeline_impl.h):
 * it starts once this epoch's input is over, so its readers never compete
 * with this epoch's, and makes batches only once this one made its last,
 * so it never takes a batch buffer this one needs. Not for a range or an
 * elastic remainder, whose next call jumps elsewhere. If it cannot start
 * (out of memory), the next epoch starts at its boundary as it would
 * have, and says so then. */
static void look_ahead(stk_loader *l)
{
    if (l->pipeline == NULL || l->epoch_failed)
        return;
    if (l->ahead == NULL) {
        struct stk__err ignored;
        if (l->batch_limit != UINT64_MAX || l->remainder != NULL || !wants_next_epoch(l) ||
            !stk__pipeline_input_over(l->pipeline) ||
            start_pipeline(l, l->opts.epoch + 1, 1, &l->ahead, &ignored) < 0)
            return;
        l->ahead_epoch = l->opts.epoch + 1;
        l->ahead_released = 0;
    }
    if (!l->ahead_released && stk__pipeline_finished(l->pipeline)) {
        stk__pipeline_set_limit(l->ahead, UINT64_MAX);
        l->ahead_released = 1;
    }
}

/* The current epoch's pipeline, started here unless it runs already. */
static int ensure_epoch(stk_loader *l)
{
    if (l->epoch_failed)
        return stk__errf(&l->err, l->epoch_failed,
                         "the epoch failed earlier (%s); call stk_loader_set_epoch() to restart",
                         stk_strerror(l->epoch_failed));
    if (l->pipeline != NULL)
        return 0;
    int rc = start_epoch(l);
    if (rc < 0)
        l->epoch_failed = rc;
    return rc;
}

int stk_loader_start(stk_loader *l)
{
    stk__err_clear(&l->err);
    int rc = ensure_epoch(l);
    stk__err_ensure(&l->err, rc);
    return rc;
}

static int next_batch(stk_loader *l, struct stk_batch **out, unsigned timeout_ms);

int stk_loader_next(stk_loader *l, struct stk_batch **out)
{
    return stk_loader_next_timed(l, out, 0);
}

int stk_loader_next_timed(stk_loader *l, struct stk_batch **out, unsigned timeout_ms)
{
    uint64_t start = stk__now_ns(), unset = 0;
    atomic_compare_exchange_strong(&l->run.started_ns, &unset, start);
    int rc = next_batch(l, out, timeout_ms);
    atomic_fetch_add(&l->run.counters.wait_ns, stk__now_ns() - start);
    stk__err_ensure(&l->err, rc);
    return rc;
}

static int next_batch(stk_loader *l, struct stk_batch **out, unsigned timeout_ms)
{
    *out = NULL;
    stk__err_clear(&l->err);
    if (atomic_exchange(&l->interrupt, 0))
        return stk__errf(&l->err, STK_EINTR, "interrupted (stk_loader_interrupt) before "
                         "waiting for a batch; the epoch goes on");
    int rc = ensure_epoch(l);
    if (rc < 0)
        return rc;
    struct stk__batch *b;
    rc = stk__pipeline_next(l->pipeline, &b, timeout_ms, &l->err);
    if (rc == 0) {
        atomic_fetch_add(&l->run.counters.samples, b->pub.n_samples);
        atomic_fetch_add(&l->run.counters.batches, 1);
        uint64_t bytes = 0;
        for (size_t i = 0; i < b->pub.n_samples; i++)
            bytes += b->samples[i]->bytes;
        atomic_fetch_add(&l->run.counters.member_bytes, bytes);
        if (l->counts_labels)
            stk__label_mixing_batch(&l->labels, b->pub.labels, b->pub.n_samples);
        *out = &b->pub;
        look_ahead(l);
        return 0;
    }
    if (rc == STK_EOF)
        look_ahead(l);
    if (rc != STK_EOF && rc != STK_EBUSY && rc != STK_EINTR)
        l->epoch_failed = rc;
    return rc;
}

void stk_loader_interrupt(stk_loader *l)
{
    atomic_store(&l->interrupt, 1);
    stk__mutex_lock(&l->wake_mutex);
    if (l->pipeline != NULL)
        stk__pipeline_wake(l->pipeline);
    stk__mutex_unlock(&l->wake_mutex);
}

void stk_batch_release(struct stk_batch *batch)
{
    if (batch == NULL)
        return;
    struct stk__batch *b = (struct stk__batch *)((char *)batch - offsetof(struct stk__batch, pub));
    atomic_fetch_sub(&b->budget->held_by_caller, 1);
    stk__batch_free(b);
}

/* Stop the epoch's threads; the next stk_loader_next() starts a pipeline
 * for batches [first, limit) of epoch, unless the one started ahead for
 * that epoch's start goes on (look_ahead). */
static void restart(stk_loader *l, uint64_t epoch, uint64_t first, uint64_t limit)
{
    struct stk__pipeline *next = l->ahead;
    l->ahead = NULL;
    if (next != NULL && (epoch != l->ahead_epoch || first != 0)) {
        retire(l, next);
        next = NULL;
    }
    stop_epoch(l);
    l->epoch_failed = 0;
    l->opts.epoch = epoch;
    l->first_batch = first;
    l->batch_limit = limit;
    stk__mutex_lock(&l->wake_mutex);
    if (next != NULL) {
        stk__pipeline_begin(next, limit);
        l->pipeline = next;
        l->epoch_cache = l->ahead_cache;
    }
    l->ahead_cache_set = 0;
    stk__mutex_unlock(&l->wake_mutex);
}

int stk_loader_seek_range(stk_loader *l, uint64_t epoch, uint64_t first_batch,
                          uint64_t n_batches)
{
    stk__err_clear(&l->err);
    uint64_t limit = n_batches > 0 && n_batches <= UINT64_MAX - first_batch
                         ? first_batch + n_batches
                         : UINT64_MAX;
    if (l->pipeline != NULL && !l->epoch_failed && epoch == l->opts.epoch &&
        stk__pipeline_next_index(l->pipeline) == first_batch)
        stk__pipeline_set_limit(l->pipeline, limit);
    else
        restart(l, epoch, first_batch, limit);
    return 0;
}

int stk_loader_seek(stk_loader *l, uint64_t epoch, uint64_t batch)
{
    stk__err_clear(&l->err);
    restart(l, epoch, batch, UINT64_MAX);
    return 0;
}

int stk_loader_set_epoch(stk_loader *l, uint64_t epoch)
{
    return stk_loader_seek(l, epoch, 0);
}

/* The index has every sample's offset (no compressed shard). */
static int locates_all(const stk_loader *l)
{
    for (size_t i = 0; i < l->urls.count; i++)
        if (l->index.counts[i] > 0 && l->index.offsets[i] == NULL)
            return 0;
    return 1;
}

/* Why the samples the ranks delivered are not known from their counts
 * alone, or 0 when they are (remainder.h): each rank must deliver its run
 * of the sequence front to back or through a window replayed on the
 * index's counts, and the split must be the index's equal shares (or
 * uneven's), the same at any world size. */
static int elastic_refusal(stk_loader *l)
{
    const char *why = NULL;
    if (l->index.counts == NULL)
        why = "it needs a dataset index (index_path, from `stoker index`): the samples no rank "
              "delivered are found from the index's counts";
    else if (l->opts.shuffle && !l->global_order && !locates_all(l))
        why = "under the shuffle window it needs uncompressed shards (an index with every "
              "sample's offset): the samples the window held are read again one by one, by "
              "offset";
    else if (l->opts.whole_shards)
        why = "whole_shards splits the epoch by shard: the rest of a shard a rank was reading "
              "is no run of one sequence";
    else if (l->opts.ra_reps > 1)
        why = "ra_reps repeats each sample on several ranks";
    else if (l->opts.samples_per_rank != 0 && !l->auto_share)
        why = "samples_per_rank is set: a rank's count then depends on the world size given, "
              "not on the index (leave it out: equal shares)";
    if (why == NULL)
        return 0;
    return stk__errf(&l->err, STK_EINVAL, "elastic resume (a state saved at another world "
                     "size): %s", why);
}

/* Ranges of the sequence as stk_loader_remainder() takes them: refused
 * unless ascending, disjoint and within the index's samples. */
static int check_ranges(stk_loader *l, const uint64_t *ranges, size_t n_ranges)
{
    if (stk__plan_ranges_check(ranges, n_ranges, l->index_total) == 0)
        return 0;
    return stk__errf(&l->err, STK_EINVAL, "elastic resume: the remaining ranges are not "
                     "ascending disjoint ranges of the %llu samples the index counts",
                     (unsigned long long)l->index_total);
}

/* The rest under the shuffle window (plan/remainder.h): each old rank's
 * epoch replayed on the index's counts as it ran, rank r of old_world with
 * this loader's options (the states' dataset fingerprint says they are the
 * old run's), gives the pieces of its run it delivered. */
static int window_rest(stk_loader *l, uint64_t epoch, int old_world, const uint64_t *delivered,
                       const uint64_t *ranges, size_t n_ranges, uint64_t **rest, size_t *n)
{
    const uint64_t w = (uint64_t)old_world;
    const uint64_t span =
        ranges != NULL ? stk__plan_ranges_total(ranges, n_ranges) : l->index_total;
    struct stk__pipeline_config cfg = {
        .opts = l->opts,
        .world_size = old_world,
        .shard_samples = l->index.counts,
        .plan = whole_spec(l),
    };
    cfg.opts.epoch = epoch;
    /* The old ranks' equal shares (use_index, epoch_target). */
    cfg.opts.samples_per_rank = old_world > 1 && !l->opts.uneven ? (span + w - 1) / w : 0;
    cfg.plan.epoch = epoch;
    cfg.plan.world = old_world;
    cfg.plan.unbounded = cfg.opts.samples_per_rank != 0;
    cfg.plan.ranks_per_node = 0;
    cfg.plan.by_sample = old_world > 1 || ranges != NULL;
    cfg.plan.ranges = ranges;
    cfg.plan.n_ranges = n_ranges;
    uint64_t **done = stk__calloc(w, sizeof *done);
    size_t *n_done = stk__calloc(w, sizeof *n_done);
    int rc = done == NULL || n_done == NULL ? STK_ENOMEM : 0;
    for (int r = 0; rc == 0 && r < old_world; r++) {
        cfg.rank = cfg.plan.rank = r;
        rc = stk__pipeline_delivered(&cfg, delivered[r], &done[r], &n_done[r]);
    }
    if (rc == 0)
        rc = stk__plan_remainder_runs(l->index_total, ranges, n_ranges, old_world,
                                      !l->opts.uneven, (const uint64_t *const *)done, n_done,
                                      rest, n);
    for (int r = 0; done != NULL && r < old_world; r++)
        stk__free(done[r]);
    stk__free(done);
    stk__free(n_done);
    return rc;
}

/* What the ranks of a whole epoch under node affinity delivered
 * (remainder.h): each node's sequence is its shards' samples, dealt as a
 * run at that many nodes dealt them. */
static int node_remainder(stk_loader *l, int old_world, int old_ranks_per_node,
                          const uint64_t *delivered, uint64_t **rest, size_t *n)
{
    const int nodes = old_world / old_ranks_per_node;
    uint32_t *node_of = stk__calloc(l->urls.count + 1, sizeof *node_of);
    uint64_t *lengths = stk__calloc((size_t)nodes, sizeof *lengths);
    int rc = node_of == NULL || lengths == NULL ? STK_ENOMEM : 0;
    if (rc == 0)
        rc = stk__plan_node_split(l->urls.count, l->opts.seed, l->opts.shuffle, nodes,
                                  l->index.counts, node_of);
    for (size_t i = 0; rc == 0 && i < l->urls.count; i++)
        lengths[node_of[i]] += l->index.counts[i];
    const uint64_t share = (l->index_total + (uint64_t)old_world - 1) / (uint64_t)old_world;
    if (rc == 0)
        rc = stk__plan_node_remainder(lengths, nodes, old_ranks_per_node, share, !l->opts.uneven,
                                      delivered, rest, n);
    stk__free(node_of);
    stk__free(lengths);
    return rc;
}

int stk_loader_remainder(stk_loader *l, uint64_t epoch, int old_world, int old_ranks_per_node,
                         const uint64_t *delivered, const uint64_t *ranges, size_t n_ranges,
                         uint64_t *out, size_t capacity, size_t *n_out)
{
    stk__err_clear(&l->err);
    *n_out = 0;
    int rc = elastic_refusal(l);
    if (rc < 0)
        return rc;
    if (old_world < 1 || delivered == NULL)
        return stk__errf(&l->err, STK_EINVAL, "elastic resume: %d ranks' delivered counts given",
                         old_world);
    if (old_ranks_per_node < 0 || (old_ranks_per_node > 0 && old_world % old_ranks_per_node))
        return stk__errf(&l->err, STK_EINVAL,
                         "elastic resume: %d ranks per node do not divide "
                         "the old world size %d",
                         old_ranks_per_node, old_world);
    if (ranges != NULL && (rc = check_ranges(l, ranges, n_ranges)) < 0)
        return rc;
    uint64_t *rest;
    size_t n;
    const int window = l->opts.shuffle && !l->global_order;
    /* A resumed epoch is split over all ranks, node affinity or not. */
    const int by_node = ranges == NULL && old_ranks_per_node > 0 && old_world > old_ranks_per_node;
    if (by_node && window)
        return stk__errf(&l->err, STK_EINVAL, "elastic resume (a state saved at another world "
                         "size): states saved under node affinity and a shuffle window are not "
                         "built (each node's ranks would be replayed over its own shards); resume "
                         "at the same world size, or use the global order (an index, and a node "
                         "cache that holds each node's shards)");
    if (by_node)
        rc = node_remainder(l, old_world, old_ranks_per_node, delivered, &rest, &n);
    else if (window)
        rc = window_rest(l, epoch, old_world, delivered, ranges, n_ranges, &rest, &n);
    else
        rc = stk__plan_remainder(l->index_total, ranges, n_ranges, old_world, !l->opts.uneven,
                                 delivered, &rest, &n);
    if (rc == STK_EINVAL)
        return stk__errf(&l->err, rc, "elastic resume: a delivered count is past what its rank "
                         "of %d read in epoch %llu under the shuffle window (states of other "
                         "options?)", old_world, (unsigned long long)epoch);
    if (rc < 0)
        return stk__errf(&l->err, rc, "out of memory planning an elastic resume");
    *n_out = n;
    if (n <= capacity)
        memcpy(out, rest, 2 * n * sizeof *rest);
    else
        rc = stk__errf(&l->err, STK_ELIMIT, "elastic resume: %zu ranges remain, room for %zu",
                       n, capacity);
    stk__free(rest);
    return rc;
}

int stk_loader_set_remainder(stk_loader *l, uint64_t epoch, int nodes, const uint64_t *ranges,
                             size_t n_ranges)
{
    stk__err_clear(&l->err);
    if (ranges == NULL) {
        if (l->remainder != NULL && in_remainder(l))
            restart(l, l->opts.epoch, 0, UINT64_MAX);
        stk__free(l->remainder);
        l->remainder = NULL;
        l->n_remainder = 0;
        return 0;
    }
    /* The same again (a Dask worker's loader, told before each range):
     * the epoch in flight goes on. */
    if (l->remainder != NULL && l->remainder_epoch == epoch && l->n_remainder == n_ranges &&
        l->remainder_nodes == nodes &&
        memcmp(l->remainder, ranges, 2 * n_ranges * sizeof *ranges) == 0)
        return 0;
    if (nodes < 1 || (size_t)nodes > l->urls.count)
        return stk__errf(&l->err, STK_EINVAL,
                         "elastic resume: the remaining ranges are of %d "
                         "nodes' sequences, for %zu shards",
                         nodes, l->urls.count);
    int rc = elastic_refusal(l);
    if (rc == 0)
        rc = check_ranges(l, ranges, n_ranges);
    if (rc < 0)
        return rc;
    uint64_t *copy = stk__calloc(2 * n_ranges + 1, sizeof *copy);
    if (copy == NULL)
        return stk__errf(&l->err, STK_ENOMEM, "out of memory planning an elastic resume");
    if (n_ranges > 0)
        memcpy(copy, ranges, 2 * n_ranges * sizeof *copy);
    restart(l, l->opts.epoch, 0, UINT64_MAX);
    stk__free(l->remainder);
    l->remainder = copy;
    l->n_remainder = n_ranges;
    l->remainder_epoch = epoch;
    l->remainder_nodes = nodes;
    return 0;
}

uint64_t stk_loader_epoch_samples(const stk_loader *l)
{
    if (epoch_target(l) != 0)
        return epoch_target(l);
    if (l->index.counts == NULL)
        return 0;
    struct stk__plan_spec spec = plan_spec(l);
    spec.global = 0; /* the same counts, without drawing the order */
    struct stk__plan_cursor c;
    if (stk__plan_cursor_open(&c, &spec) < 0)
        return 0;
    uint64_t total = 0;
    struct stk__plan_segment seg;
    for (uint64_t g = 0; stk__plan_cursor_segment(&c, g, &seg); g++)
        total += seg.count != STK__PLAN_WHOLE ? seg.count : l->index.counts[seg.shard];
    stk__plan_cursor_free(&c);
    return total;
}

size_t stk_loader_num_shards(const stk_loader *l) { return l->urls.count; }
int stk_loader_rank(const stk_loader *l) { return l->rank; }
int stk_loader_world_size(const stk_loader *l) { return l->world_size; }
int stk_loader_global_order(const stk_loader *l) { return l->global_order; }
int stk_loader_ranks_per_node(const stk_loader *l)
{
    const int reps = l->opts.ra_reps ? (int)l->opts.ra_reps : 1;
    return l->plan_ranks_per_node * reps;
}
const char *stk_loader_errmsg(const stk_loader *l) { return l->err.msg; }

void stk_loader_stats_sized(const stk_loader *l, struct stk_stats *out, size_t out_size)
{
    struct stk_stats full = {0};
    /* The current epoch's counts are its pipeline's until it stops
     * (retire); the lock keeps it from being merged meanwhile. */
    stk_loader *owned = (stk_loader *)l;
    stk__mutex_lock(&owned->wake_mutex);
    stk__run_snapshot(&l->run, &full);
    if (l->pipeline != NULL)
        stk__run_snapshot_add(stk__pipeline_counts(l->pipeline), &full);
    /* The node cache counts per handle (cache.h), not into the run: its
     * fills report when they end, on their own threads. */
    struct stk__cache_counts cc = {0}, base = l->epoch_cache;
    if (l->cache != NULL && l->ahead_cache_set)
        cc = l->ahead_cache;
    else if (l->cache != NULL)
        stk__cache_counts(l->cache, &cc);
    stk__mutex_unlock(&owned->wake_mutex);
    full.cache_hits = cc.hits;
    full.cache_misses = cc.misses;
    full.cache_evictions = cc.evictions;
    full.cache_bytes_written = cc.bytes_written;
    if (l->cache != NULL) {
        full.cache_epoch_hits = cc.hits - base.hits;
        full.cache_epoch_misses = cc.misses - base.misses;
        full.cache_epoch_origin_bytes = cc.bytes_written - base.bytes_written;
    }
    stk__struct_copy(out, out_size, &full, sizeof full);
}

void stk_loader_destroy(stk_loader *l)
{
    if (l == NULL)
        return;
    retire(l, l->ahead);
    stop_epoch(l);
    stk__mutex_destroy(&l->wake_mutex);
    stk__budget_destroy(&l->budget);
    if (l->has_ring)
        stk__image_ring_destroy(&l->ring);
    stk__buffer_pool_free(l->pool);
    stk__cache_free(l->cache);
    stk__strlist_free(&l->urls);
    stk__strlist_free(&l->names);
    stk__index_free(&l->index);
    stk__label_mixing_free(&l->labels);
    stk__free(l->remainder);
    free_strings(l);
    stk__free(l);
}
