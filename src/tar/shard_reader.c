/* SPDX-License-Identifier: MIT */
/*
 * shard_reader.c - members to samples, with the bad-input policy.
 *
 * A header that starts a new key is read before the previous sample can be
 * returned, so its name and size are kept as "pending" and its data is read
 * on the next call (libarchive keeps an entry's data readable until the
 * next header is requested).
 */
#include "tar/shard_reader.h"

#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "cache/cache.h"
#include "base/keyset.h"
#include "tar/tar_reader.h"
#include "io/source_seek.h"

struct stk__shard_reader {
    struct stk__tar *tar;
    const struct stk__source *src; /* the shard's own source (tar owns it), for its stamp */
    struct stk__shard_expect expect;
    int expecting;     /* expect was given */
    int stamp_checked; /* once, when the source has answered */
    const char *url; /* the owner's redacted name: samples point at it */
    uint64_t shard_index;
    struct stk__shard_config cfg;
    struct stk__keyset seen;
    struct stk__sample *current;
    int current_bad;
    int done;
    int passing_over; /* skip/count: samples are not counted as read */
    int key_reappeared; /* some sample was bad because its key came back */
    int failed;         /* the rest of the shard was skipped as unreadable */
    uint64_t bytes_reported;
    uint64_t next_position; /* number of the next good sample */
    uint64_t opened_at;     /* number of the sample it was opened at (0: the start) */
    /* Samples started, good or bad (a reader opened mid-shard starts at its
     * position): what max_samples_per_shard bounds (the key set holds one
     * tag for each), and 0 for a shard without samples. */
    uint64_t started;
    /* Bad samples since the last good one, and where that run began: the
     * next good sample accounts for them (stk__sample.bad_samples) and
     * its offset is the run's, so a reader opened there meets them again. */
    uint64_t bad_run;
    uint64_t run_start;
    /* The member read ahead that starts the next sample. */
    int have_pending;
    char *pending_name;
    size_t pending_key_len;
    uint64_t pending_size;
    uint64_t pending_offset;
    int pending_sparse;
    uint64_t pending_stored;
    /* The end: the archive ended cleanly (its trailing bytes still to be
     * checked), then the shard is finished. */
    int archive_ended;
    int finished;
    int empty; /* finished cleanly without a sample */
    uint64_t ignored;         /* members without a key in this shard */
    char first_ignored[128];  /* the name of the first one, shown for messages */
};

void stk__shard_config_init(struct stk__shard_config *cfg, const struct stk_options *o,
                            struct stk__run *run, struct stk__buffer_pool *pool)
{
    *cfg = (struct stk__shard_config){
        .block_size = o->read_buffer_bytes,
        .max_member_bytes = o->max_member_bytes,
        .max_members = o->max_members_per_sample,
        .max_key_bytes = o->max_key_bytes,
        .max_samples = o->max_samples_per_shard,
        .run = run,
        .pool = pool,
        .source = {
            .io_timeout_ms = o->io_timeout_ms,
            .io_retries = o->io_retries,
            .io_backoff_ms = o->io_backoff_ms,
            .io_min_rate = o->io_min_rate,
            .allow_pipe = o->allow_pipe,
            .ca_bundle = o->ca_bundle,
            .counters = &run->counters,
        },
    };
}

/* Read per header by a local scan: a tar header is 512 bytes, and a pax
 * record or a long name rarely needs more than one page. */
#define SCAN_BLOCK 4096

void stk__shard_config_count(struct stk__shard_config *cfg, const char *url)
{
    /* The sample dataset: 1 byte read in 22. */
    if (stk__source_is_local(url)) {
        cfg->headers_only = 1;
        cfg->source.jumps = 1;
        cfg->block_size = SCAN_BLOCK;
    }
}

int stk__shard_open_source(struct stk__source *src, const char *name, uint64_t shard_index,
                           const struct stk__shard_config *cfg, struct stk__shard_reader **out,
                           struct stk__err *err)
{
    *out = NULL;
    struct stk__shard_reader *r = stk__calloc(1, sizeof *r);
    if (r == NULL) {
        int rc = stk__errf(err, STK_ENOMEM, "%s: out of memory", name);
        stk__source_close(src);
        return rc;
    }
    /* Not src->url: a source's own name dies with it (HTTP redacts into
     * memory it frees on close), and samples outlive their source. */
    r->url = name;
    r->shard_index = shard_index;
    r->cfg = *cfg;
    atomic_fetch_add(&cfg->run->counters.shards_opened, 1);
    r->src = src;
    int rc = stk__tar_open(src, cfg->block_size, &r->tar, err);
    if (rc < 0) {
        stk__free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int stk__shard_open(const char *url, const char *name, uint64_t shard_index,
                    const struct stk__shard_config *cfg, struct stk__shard_reader **out,
                    struct stk__err *err)
{
    return stk__shard_open_at(url, name, shard_index, cfg, 0, 0, out, err);
}

int stk__shard_open_at(const char *url, const char *name, uint64_t shard_index,
                       const struct stk__shard_config *cfg, uint64_t offset, uint64_t position,
                       struct stk__shard_reader **out, struct stk__err *err)
{
    struct stk__source *src;
    *out = NULL;
    int rc;
    if (cfg->cache == NULL)
        rc = stk__source_open(url, &cfg->source, &src, err);
    else if (cfg->cache_whole)
        rc = stk__cache_open_whole(cfg->cache, url, name, &cfg->source, &src, err);
    else
        rc = stk__cache_open(cfg->cache, url, name, &cfg->source, &src, err);
    if (rc < 0)
        return rc;
    if (offset > 0 && (rc = stk__source_seek(src, offset)) < 0) {
        *err = src->err;
        stk__source_close(src);
        return rc;
    }
    rc = stk__shard_open_source(src, name, shard_index, cfg, out, err);
    if (rc == 0) {
        (*out)->next_position = (*out)->started = (*out)->opened_at = position;
        (*out)->run_start = offset;
    }
    return rc;
}

int stk__shard_seekable(const struct stk__shard_reader *r)
{
    return !stk__tar_compressed(r->tar) && !r->key_reappeared;
}

void stk__shard_tail(const struct stk__shard_reader *r, uint64_t *skipped, int *failed)
{
    *skipped = r->bad_run;
    *failed = r->failed;
}

static void account_bytes(struct stk__shard_reader *r)
{
    uint64_t now = stk__tar_source_bytes(r->tar);
    atomic_fetch_add(&r->cfg.run->counters.bytes_read, now - r->bytes_reported);
    r->bytes_reported = now;
}

/* WebDataset's base_plus_ext (stoker.h). */
int stk_split_name(const char *name, size_t *key_len, const char **ext)
{
    const char *slash = strrchr(name, '/');
    const char *base = slash ? slash + 1 : name;
    size_t base_len = strlen(base);
    if (slash == NULL && base_len >= 4 && strncmp(base, "__", 2) == 0 &&
        strcmp(base + base_len - 2, "__") == 0)
        return 0;
    const char *dot = strchr(base, '.');
    if (dot == NULL || dot == base)
        return 0;
    *key_len = (size_t)(dot - name);
    *ext = dot + 1;
    return 1;
}

/* A sample-level problem: fatal under FAIL, else marks the current sample
 * bad so it is dropped when complete. */
static int bad_sample(struct stk__shard_reader *r, struct stk__err *err, int code)
{
    if (!r->cfg.run->skip_bad)
        return code;
    stk__run_log(r->cfg.run, STK_LOG_WARN, "%s", err->msg);
    r->current_bad = 1;
    return 0;
}

/* The shard cannot be read further: fatal under FAIL, else the shard ends
 * here, dropping the partial sample. */
static int bad_shard(struct stk__shard_reader *r, struct stk__err *err, int code)
{
    /* A cache that cannot take the shard is a configuration problem, not
     * bad input (a miss meets it while the shard streams). */
    if (!r->cfg.run->skip_bad || !stk__error_is_bad_input(code))
        return code;
    stk__run_log(r->cfg.run, STK_LOG_WARN, "%s (rest of shard skipped)", err->msg);
    atomic_fetch_add(&r->cfg.run->counters.shards_failed, 1);
    if (r->current != NULL) {
        atomic_fetch_add(&r->cfg.run->counters.samples_skipped, 1);
        r->bad_run++;
        stk__sample_free(r->current);
        r->current = NULL;
    }
    r->have_pending = 0;
    r->done = 1;
    r->failed = 1;
    stk__err_clear(err);
    return 0;
}

/* Add the pending member to the current sample (starting one if needed):
 * 0, 2 if the gate said "not now" (the member stays pending), or <0. */
static int take_pending(struct stk__shard_reader *r, struct stk__err *err)
{
    const char *name = r->pending_name;
    size_t key_len = r->pending_key_len;
    const char *ext = name + key_len + 1;
    char shown_name[STK__SHOWN_MAX], shown_key[STK__SHOWN_MAX]; /* for messages */
    r->have_pending = 0;

    if (r->current == NULL) {
        /* The sample's number decides, not the keys kept, so a resumed
         * reader (which never saw the samples before its offset) stops at
         * the same sample as one that read the shard from its start. */
        if (r->cfg.max_samples != 0 && r->started >= r->cfg.max_samples)
            return bad_shard(r, err,
                             stk__errf(err, STK_ELIMIT,
                                       "%s: the shard holds more than %llu samples (the next "
                                       "starts at offset %llu); raise max_samples_per_shard",
                                       r->url, (unsigned long long)r->cfg.max_samples,
                                       (unsigned long long)r->pending_offset));
        r->current = stk__sample_new(name, key_len, r->url, r->shard_index, r->cfg.pool);
        if (r->current == NULL)
            return stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
        r->started++;
        r->current->offset = r->pending_offset;
        r->current_bad = 0;
        /* A key over the limit is refused below (its name is longer still)
         * without being kept. */
        int seen = key_len > r->cfg.max_key_bytes ? 0
                                                  : stk__keyset_add(&r->seen, name, key_len);
        if (seen < 0)
            return stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
        if (seen) {
            r->key_reappeared = 1;
            return bad_sample(r, err,
                              stk__errf(err, STK_EDUPKEY,
                                        "%s: key '%s' reappears at offset %llu after other "
                                        "keys (the members of a sample must be adjacent)",
                                        r->url,
                                        stk__shown(shown_key, sizeof shown_key, r->current->key),
                                        (unsigned long long)r->pending_offset));
        }
    }
    if (r->current_bad)
        return 0;
    size_t name_len = strlen(name);
    if (name_len > r->cfg.max_key_bytes)
        return bad_sample(r, err,
                          stk__errf(err, STK_ELIMIT,
                                    "%s: member name at offset %llu is %zu bytes, above the limit "
                                    "of %zu",
                                    r->url, (unsigned long long)r->pending_offset, name_len,
                                    r->cfg.max_key_bytes));
    if (stk__sample_has_ext(r->current, ext, strlen(ext)))
        return bad_sample(r, err,
                          stk__errf(err, STK_EDUPKEY,
                                    "%s: member '%s' at offset %llu appears twice in sample '%s'",
                                    r->url, stk__shown(shown_name, sizeof shown_name, name),
                                    (unsigned long long)r->pending_offset,
                                    stk__shown(shown_key, sizeof shown_key, r->current->key)));
    if (r->current->pub.n_members >= r->cfg.max_members)
        return bad_sample(r, err,
                          stk__errf(err, STK_ELIMIT,
                                    "%s: sample '%s' has more than %zu members (offset %llu)",
                                    r->url,
                                    stk__shown(shown_key, sizeof shown_key, r->current->key),
                                    r->cfg.max_members,
                                    (unsigned long long)r->pending_offset));
    /* A sparse member's holes are not in the shard: a few KB of tar can
     * describe terabytes of zeros, so no budget that follows the shard's
     * size bounds it. WebDataset writers never produce them (Python's
     * tarfile cannot write one; GNU tar only with --sparse), so they are
     * bad samples, refused before any of their data is read. */
    if (r->pending_sparse)
        return bad_sample(r, err,
                          stk__errf(err, STK_EFORMAT,
                                    "%s: member '%s' at offset %llu is a sparse file (%llu "
                                    "bytes, of which %llu are stored); sparse members are "
                                    "refused: write the shard without --sparse",
                                    r->url, stk__shown(shown_name, sizeof shown_name, name),
                                    (unsigned long long)r->pending_offset,
                                    (unsigned long long)r->pending_size,
                                    (unsigned long long)r->pending_stored));
    if (r->pending_size > r->cfg.max_member_bytes)
        return bad_sample(r, err,
                          stk__errf(err, STK_ELIMIT,
                                    "%s: member '%s' at offset %llu is %llu bytes, above the "
                                    "limit of %llu",
                                    r->url, stk__shown(shown_name, sizeof shown_name, name),
                                    (unsigned long long)r->pending_offset,
                                    (unsigned long long)r->pending_size,
                                    (unsigned long long)r->cfg.max_member_bytes));
    size_t size = (size_t)r->pending_size;
    if (r->cfg.headers_only) {
        int rc = stk__tar_skip(r->tar, size, err);
        if (rc != 0)
            return rc > 0 ? bad_sample(r, err, STK_EFORMAT) : bad_shard(r, err, rc);
        if (stk__sample_add(r->current, ext, strlen(ext), NULL, 0) < 0)
            return stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
        return 0;
    }
    if (r->cfg.gate != NULL && !r->passing_over) {
        int go = r->cfg.gate(r->cfg.gate_data, r->current->bytes + size);
        if (go < 0)
            return stk__errf(err, STK_EINTR, "%s: cancelled before member '%s'", r->url,
                             stk__shown(shown_name, sizeof shown_name, name));
        if (go > 0) { /* asked again on the next call, the sample as it was */
            r->have_pending = 1;
            return 2;
        }
    }
    /* A header that claims bytes the shard does not store costs nothing. */
    int rc = stk__tar_start(r->tar, size, err);
    if (rc != 0)
        return rc > 0 ? bad_sample(r, err, STK_EFORMAT) : bad_shard(r, err, rc);
    uint8_t *data = stk__buffer_pool_get(r->cfg.pool, size + 1);
    if (data == NULL)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory for member '%s' (%zu bytes)",
                         r->url, stk__shown(shown_name, sizeof shown_name, name), size);
    rc = stk__tar_read(r->tar, data, size, err);
    if (rc != 0) {
        stk__buffer_pool_put(r->cfg.pool, data, size + 1);
        return rc > 0 ? bad_sample(r, err, STK_EFORMAT) : bad_shard(r, err, rc);
    }
    data[size] = '\0';
    if (stk__sample_add(r->current, ext, strlen(ext), data, size) < 0)
        return stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
    return 0;
}

void stk__shard_expect(struct stk__shard_reader *r, const struct stk__shard_expect *e)
{
    r->expect = *e;
    r->expecting = 1;
}

const struct stk__shard_stamp *stk__shard_stamp(const struct stk__shard_reader *r)
{
    return &r->src->stamp;
}

static int stale(struct stk__shard_reader *r, struct stk__err *err, const char *why)
{
    return stk__errf(err, STK_EINDEX, "the index is stale for %s: run `stoker index` again (%s)",
                     r->url, why);
}

/* Once the source has answered: is this the shard the index counted? */
static int check_stamp(struct stk__shard_reader *r, struct stk__err *err)
{
    char why[STK__ERRMSG_MAX / 2];
    r->stamp_checked = 1;
    if (r->expect.stamp != NULL && stk__stamp_differs(r->expect.stamp, &r->src->stamp, why,
                                                      sizeof why))
        return stale(r, err, why);
    return 0;
}

/* Read the next header with a key into the pending slot. 1 pending, 0 end. */
static int read_header(struct stk__shard_reader *r, struct stk__err *err)
{
    for (;;) {
        struct stk__tar_member m;
        int rc = stk__tar_next(r->tar, &m, err);
        /* Before rc: a shard rewritten as something else is stale, not bad. */
        if (r->expecting && !r->stamp_checked) {
            int stale_rc = check_stamp(r, err);
            if (stale_rc < 0)
                return stale_rc;
        }
        if (rc < 0)
            return bad_shard(r, err, rc);
        if (rc == 0) {
            r->archive_ended = 1;
            return 0;
        }
        size_t key_len;
        const char *ext;
        if (!m.regular || !stk_split_name(m.name, &key_len, &ext)) {
            atomic_fetch_add(&r->cfg.run->counters.members_ignored, 1);
            if (r->ignored++ == 0)
                stk__shown(r->first_ignored, sizeof r->first_ignored, m.name);
            continue;
        }
        size_t name_len = strlen(m.name);
        stk__free(r->pending_name);
        r->pending_name = stk__strndup(m.name, name_len);
        if (r->pending_name == NULL)
            return stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
        r->pending_key_len = key_len;
        r->pending_size = m.size;
        r->pending_offset = m.offset;
        r->pending_sparse = m.sparse;
        r->pending_stored = m.stored;
        r->have_pending = 1;
        return 1;
    }
}

static int same_key(const struct stk__sample *s, const char *name, size_t key_len)
{
    return strlen(s->key) == key_len && memcmp(s->key, name, key_len) == 0;
}

/* Hand out the finished current sample, or drop it if bad. 1 if handed out.
 * Only good samples are numbered, so a sample's number is its place in the
 * index's offsets and a resumed reader numbers (and crops) it the same. */
static int finish_sample(struct stk__shard_reader *r, struct stk__sample **out)
{
    struct stk__sample *s = r->current;
    r->current = NULL;
    if (s == NULL)
        return 0;
    if (r->current_bad) {
        atomic_fetch_add(&r->cfg.run->counters.samples_skipped, 1);
        r->bad_run++;
        stk__sample_free(s);
        return 0;
    }
    s->position = r->next_position++;
    s->bad_samples = r->bad_run;
    if (r->bad_run > 0)
        s->offset = r->run_start;
    r->bad_run = 0;
    r->run_start = r->have_pending ? r->pending_offset : s->offset;
    *out = s;
    return 1;
}

/* The archive ended and its last sample was handed out: check the rest of
 * the stream (stk__tar_finish), and count a shard without samples. */
static int end_of_shard(struct stk__shard_reader *r, struct stk__err *err)
{
    r->finished = 1;
    int rc = stk__tar_finish(r->tar, err);
    if (rc < 0)
        return bad_shard(r, err, rc);
    r->empty = r->started == 0;
    if (r->empty)
        atomic_fetch_add(&r->cfg.run->counters.shards_empty, 1);
    if (r->expecting && r->next_position != r->expect.samples) {
        /* Opened at a sample's offset (a resume, a global order), the reader
         * saw only what follows it: say so, not a count of the shard. */
        char why[160];
        if (r->opened_at > 0)
            snprintf(why, sizeof why,
                     "it counts %llu samples; read from the offset it records for sample %llu, "
                     "the shard ended after %llu",
                     (unsigned long long)r->expect.samples, (unsigned long long)r->opened_at,
                     (unsigned long long)(r->next_position - r->opened_at));
        else
            snprintf(why, sizeof why, "it counts %llu samples, the shard holds %llu",
                     (unsigned long long)r->expect.samples, (unsigned long long)r->next_position);
        return stale(r, err, why);
    }
    return 0;
}

int stk__shard_next(struct stk__shard_reader *r, struct stk__sample **out, struct stk__err *err)
{
    *out = NULL;
    int rc = 0;
    /* The part of the shard to read ends here: what follows is another
     * rank's, so nothing more is read (and no bad input past it counted). */
    if (r->expecting && r->expect.end != 0 && r->next_position >= r->expect.end)
        return 0;
    while (!r->done) {
        if (!r->have_pending) {
            rc = read_header(r, err);
            if (rc < 0)
                goto out;
            if (rc == 0) {
                r->done = 1;
                break;
            }
        }
        if (r->current != NULL && !same_key(r->current, r->pending_name, r->pending_key_len)) {
            if (finish_sample(r, out)) {
                rc = 1;
                goto out;
            }
            continue;
        }
        rc = take_pending(r, err);
        if (rc != 0)
            goto out;
    }
    rc = finish_sample(r, out);
    if (rc == 0 && r->archive_ended && !r->finished)
        rc = end_of_shard(r, err);
out:
    account_bytes(r);
    if (rc == 1 && !r->passing_over)
        atomic_fetch_add(&r->cfg.run->counters.samples_read, 1);
    return rc;
}

/* Pass over up to n samples; *passed says how many. The member data is
 * read, not seeked over (unless the reader is headers_only: the index's
 * scan of a local shard, whose stk__tar_skip tells a hole by where the data
 * ends): which samples a malformed shard yields can depend on it, and a
 * count that differs from what the loader delivers would shift every later
 * sample of a resumed epoch. */
static int pass_over(struct stk__shard_reader *r, uint64_t n, uint64_t *passed,
                     struct stk__offsets *offsets, struct stk__err *err)
{
    int rc = 1;
    r->passing_over = 1;
    for (*passed = 0; *passed < n; (*passed)++) {
        struct stk__sample *s;
        rc = stk__shard_next(r, &s, err);
        if (rc <= 0)
            break;
        uint64_t offset = s->offset;
        stk__sample_free(s);
        if (offsets != NULL && stk__offsets_push(offsets, offset) < 0) {
            rc = stk__errf(err, STK_ENOMEM, "%s: out of memory", r->url);
            break;
        }
    }
    r->passing_over = 0;
    return rc < 0 ? rc : 0;
}

int stk__shard_skip(struct stk__shard_reader *r, uint64_t n, struct stk__err *err)
{
    uint64_t passed;
    int rc = pass_over(r, n, &passed, NULL, err);
    if (rc == 0 && passed < n) {
        char why[96];
        snprintf(why, sizeof why, "the shard ended after %llu of the %llu samples a resume skips",
                 (unsigned long long)passed, (unsigned long long)n);
        rc = stale(r, err, why);
    }
    return rc;
}

int stk__shard_count(struct stk__shard_reader *r, uint64_t *n, struct stk__offsets *offsets,
                     struct stk__err *err)
{
    return pass_over(r, UINT64_MAX, n, offsets, err);
}

int stk__offsets_push(struct stk__offsets *v, uint64_t offset)
{
    if (v->count == v->capacity) {
        size_t cap = v->capacity ? 2 * v->capacity : 256;
        uint64_t *items = stk__realloc(v->items, cap * sizeof *items);
        if (items == NULL)
            return STK_ENOMEM;
        v->items = items;
        v->capacity = cap;
    }
    v->items[v->count++] = offset;
    return 0;
}

void stk__offsets_free(struct stk__offsets *v)
{
    stk__free(v->items);
    *v = (struct stk__offsets){0};
}

uint64_t stk__shard_ignored(const struct stk__shard_reader *r, const char **first)
{
    *first = r->first_ignored;
    return r->ignored;
}

int stk__shard_empty(const struct stk__shard_reader *r)
{
    return r->empty;
}

void stk__shard_close(struct stk__shard_reader *r)
{
    if (r == NULL)
        return;
    stk__tar_close(r->tar);
    stk__sample_free(r->current);
    stk__keyset_clear(&r->seen);
    stk__free(r->pending_name);
    stk__free(r);
}
