/* SPDX-License-Identifier: MIT */
/*
 * dataset_index.h - the number of samples of every shard, in a JSON file.
 *
 * `stoker index` (stk_index_build) counts the samples of each shard by
 * reading it with the loader's own grouping and bad-input rules, and
 * writes them with each shard's stamp (size, and modification time or
 * ETag) and its samples' byte offsets (index_json.h has the format).
 * A loader given the file (index_path) knows each shard's size before
 * reading it: equal samples per rank by default, len() of an epoch, and a
 * resume that re-reads at most one shuffle window (seek_plan.h).
 *
 * Counts that no longer match their shards deliver wrong data (repeated or
 * missing samples, endless epochs, a resume at other batches), so they are
 * checked: the stamps of local shards when the index is loaded (one stat
 * each), and every shard's stamp and count as it is read
 * (stk__shard_expect), by the trainer's loader and a Dask worker's alike.
 */
#ifndef STK_DATASET_INDEX_H
#define STK_DATASET_INDEX_H

#include <stdint.h>

#include "base/error.h"
#include "io/source.h"
#include "list/urls.h"

/* What a loader keeps of an index, by URL index. */
struct stk__dataset_index {
    size_t n;
    uint64_t *counts;   /* samples per shard */
    uint64_t **offsets; /* per shard counts[i] sample offsets, or NULL */
    struct stk__shard_stamp *stamps; /* as recorded */
};

/* Read the index at path for the URLs of urls; every URL must be in it
 * (by its name as written, which the index holds redacted with a tag of
 * the whole URL (index_json.h), or, for a local file, by the file it names: a
 * relative name in the index is taken from the working directory, else
 * from the index file's directory, so "a.tar" and "/data/a.tar" are one
 * shard), count at most max_samples samples (max_samples_per_shard: a reader
 * never gets past it; 0: no limit), and every local shard must still have
 * the stamp it records (else STK_EINDEX: "the index is stale for SHARD:
 * run `stoker index` again"). names: the same URLs redacted
 * (stk__expand_and_list), for messages. */
int stk__index_load(const char *path, const struct stk__strlist *urls,
                    const struct stk__strlist *names, uint64_t max_samples,
                    struct stk__dataset_index *idx, struct stk__err *err);

void stk__index_free(struct stk__dataset_index *idx);

#endif
