/* SPDX-License-Identifier: MIT */
/*
 * resume_scan.c - count local shards from their headers for a resume.
 */
#include "pipeline/resume_scan.h"

#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

int stk__resume_scan_init(struct stk__resume_scan *sc, const struct stk__strlist *urls,
                          const struct stk__strlist *names, const struct stk__shard_config *shard,
                          const char *purpose, const char *otherwise)
{
    memset(sc, 0, sizeof *sc);
    sc->urls = urls;
    sc->names = names;
    sc->purpose = purpose;
    sc->otherwise = otherwise;
    sc->owner = shard->run;
    stk__run_init(&sc->run, NULL);
    sc->run.skip_bad = shard->run->skip_bad;
    sc->shard = *shard;
    sc->shard.run = &sc->run;
    sc->shard.source.counters = &sc->run.counters;
    sc->shard.pool = NULL;  /* headers only: no member data */
    sc->shard.cache = NULL; /* local files are opened as they are */
    sc->shard.cache_whole = 0;
    sc->shard.gate = NULL;
    sc->counts = stk__calloc(urls->count + 1, sizeof *sc->counts);
    sc->offsets = stk__calloc(urls->count + 1, sizeof *sc->offsets);
    sc->counted = stk__calloc(urls->count + 1, 1);
    if (sc->counts == NULL || sc->offsets == NULL || sc->counted == NULL) {
        stk__resume_scan_free(sc);
        return STK_ENOMEM;
    }
    return 0;
}

/* Say why the counts stop there and what it costs (once: the plan stops at
 * the first shard not counted). */
static int not_counted(const struct stk__resume_scan *sc, size_t i, const char *why)
{
    stk__run_log(sc->owner, STK_LOG_INFO, "%s: %s %s, so %s", sc->purpose, sc->names->items[i],
                 why, sc->otherwise);
    return 0;
}

/* Count shard i: 1, 0 not counted, STK_ENOMEM. */
static int scan(struct stk__resume_scan *sc, size_t i)
{
    const char *url = sc->urls->items[i];
    if (!stk__source_is_local(url))
        return not_counted(sc, i, "is remote (a request per tar header)");
    struct stk__shard_config cfg = sc->shard;
    stk__shard_config_count(&cfg, url);
    struct stk__err err;
    stk__err_clear(&err);
    struct stk__shard_reader *r;
    int rc = stk__shard_open(url, sc->names->items[i], i, &cfg, &r, &err);
    if (rc < 0)
        return rc == STK_ENOMEM ? rc : not_counted(sc, i, "cannot be opened");
    /* A compressed shard is known from its first bytes: skipping its
     * members would decompress them all. */
    const int compressed = !stk__shard_seekable(r);
    if (!compressed)
        rc = stk__shard_count(r, &sc->counts[i], &sc->offsets[i], &err);
    const int reappears = rc == 0 && !compressed && !stk__shard_seekable(r);
    stk__shard_close(r);
    if (rc == STK_ENOMEM)
        return rc;
    if (compressed || reappears || rc < 0) {
        stk__offsets_free(&sc->offsets[i]);
        return not_counted(sc, i,
                           compressed  ? "is compressed (no member can be skipped unread)"
                           : reappears ? "has a key that reappears after others"
                                       : "cannot be read to its end");
    }
    sc->counted[i] = 1;
    return 1;
}

int stk__resume_scan_count(void *data, size_t shard, uint64_t *samples)
{
    struct stk__resume_scan *sc = data;
    int rc = sc->counted[shard] ? 1 : scan(sc, shard);
    *samples = sc->counts[shard];
    return rc;
}

uint64_t stk__resume_scan_offset(const struct stk__resume_scan *sc, size_t shard, uint64_t sample,
                                 uint64_t *from)
{
    const uint64_t n = sc->counts[shard];
    *from = 0;
    if (!sc->counted[shard] || n == 0)
        return 0;
    *from = sample < n ? sample : n - 1;
    return sc->offsets[shard].items[*from];
}

void stk__resume_scan_free(struct stk__resume_scan *sc)
{
    if (sc->owner != NULL)
        atomic_fetch_add(&sc->owner->counters.bytes_read,
                         atomic_load(&sc->run.counters.bytes_read));
    for (size_t i = 0; sc->offsets != NULL && i < sc->urls->count; i++)
        stk__offsets_free(&sc->offsets[i]);
    stk__free(sc->offsets);
    stk__free(sc->counts);
    stk__free(sc->counted);
    memset(sc, 0, sizeof *sc);
}
