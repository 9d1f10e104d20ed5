/*
 * dataset_index.h - the number of samples of every shard, in a JSON file.
 *
 * `stoker index` (stk_index_build) counts the samples of each shard by
 * reading it with the loader's own grouping and bad-input rules,
 * and writes
 *   {"format": "stoker-index", "version": 1, "samples": TOTAL,
 *    "shards": [{"url": "...", "samples": N}, ...]}
 * A loader given the file (index_path) knows each shard's size before
 * reading it: equal samples per rank by default, len() of an epoch, and a
 * resume that re-reads at most one shuffle window (seek_plan.h).
 */
#ifndef STK_DATASET_INDEX_H
#define STK_DATASET_INDEX_H

#include <stdint.h>

#include "error.h"
#include "urls.h"

/* Read the index at path and give the sample count of every URL of urls
 * (*counts, caller frees with stk__free). Every URL must be in the index. */
int stk__index_load(const char *path, const struct stk__strlist *urls, uint64_t **counts,
                    struct stk__err *err);

#endif
