/*
 * dataset_index.h - the number of samples of every shard, in a JSON file.
 *
 * `stoker index` (stk_index_build) counts the samples of each shard by
 * reading it with the loader's own grouping and bad-input rules,
 * and writes
 *   {"format": "stoker-index", "version": 1, "samples": TOTAL,
 *    "shards": [{"url": "...", "samples": N, "offsets": [O0, O1, ...]}, ...]}
 * where Ok is the byte offset of sample k's first tar header (left out for
 * compressed shards, whose offsets are not file offsets).
 * A loader given the file (index_path) knows each shard's size before
 * reading it: equal samples per rank by default, len() of an epoch, and a
 * resume that re-reads at most one shuffle window (seek_plan.h).
 */
#ifndef STK_DATASET_INDEX_H
#define STK_DATASET_INDEX_H

#include <stdint.h>

#include "error.h"
#include "urls.h"

/* What a loader keeps of an index, by URL index. */
struct stk__dataset_index {
    size_t n;
    uint64_t *counts;   /* samples per shard */
    uint64_t **offsets; /* per shard counts[i] sample offsets, or NULL */
};

/* Read the index at path for the URLs of urls; every URL must be in it.
 * names: the same URLs redacted (stk__expand_and_list), for messages. */
int stk__index_load(const char *path, const struct stk__strlist *urls,
                    const struct stk__strlist *names, struct stk__dataset_index *idx,
                    struct stk__err *err);

void stk__index_free(struct stk__dataset_index *idx);

#endif
