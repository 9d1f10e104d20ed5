/* SPDX-License-Identifier: MIT */
/*
 * resume_scan.h - sample counts for a resume without a dataset index (and
 * for an epoch's first batches read by offset, pipeline_head.c).
 *
 * A resumed epoch jumps to the shuffle window of its first batch when it
 * knows how many samples each shard holds (seek_plan.h). Without an index
 * the counts of local, uncompressed shards cost only their tar headers: each
 * is counted here as `stoker index` counts it (stk__shard_count over its
 * headers, with the loader's grouping and bad-input rules), when the seek
 * plan first asks for it, and its samples' offsets let a reader open it at
 * the sample the plan puts it at. A shard whose count would cost a read of
 * its data is not counted, and the epoch is read again from its start as
 * before: a remote shard (a request per header), a compressed one (no byte
 * offsets), one whose keys reappear (telling its samples apart needs every
 * key before them), or one the scan cannot read (the readers then meet the
 * error and report it by the policy).
 */
#ifndef STK_RESUME_SCAN_H
#define STK_RESUME_SCAN_H

#include <stddef.h>
#include <stdint.h>

#include "base/run.h"
#include "base/strlist.h"
#include "tar/shard_reader.h"

struct stk__resume_scan {
    const struct stk__strlist *urls;
    const struct stk__strlist *names; /* urls redacted */
    struct stk__shard_config shard;   /* the readers' rules, counting into run */
    /* The scan's own counters: bad input it meets is the readers' to count
     * and log when they read it; its bytes are added to owner's bytes_read. */
    struct stk__run run;
    struct stk__run *owner;
    uint64_t *counts;
    struct stk__offsets *offsets; /* by URL index; items NULL until counted */
    unsigned char *counted;       /* by URL index: 1 counted */
    const char *purpose;          /* what counts, and what a shard not counted costs */
    const char *otherwise;
};

/* Prepare to count the shards of urls (names: redacted) with the rules of
 * shard, whose run is the owner's. A shard not counted is logged at info
 * level as "PURPOSE: SHARD WHY, so OTHERWISE" (static strings). 0 or
 * STK_ENOMEM. */
int stk__resume_scan_init(struct stk__resume_scan *sc, const struct stk__strlist *urls,
                          const struct stk__strlist *names, const struct stk__shard_config *shard,
                          const char *purpose, const char *otherwise);

/* stk__seek_request.count: the samples of shard (counted on the first
 * call): 1, 0 when it is not counted (see above), STK_ENOMEM. */
int stk__resume_scan_count(void *sc, size_t shard, uint64_t *samples);

/* Where a reader resuming in a counted shard at sample `sample` opens it:
 * the byte offset of the last sample at or before it (*from: its number),
 * so that it passes over at most one sample. */
uint64_t stk__resume_scan_offset(const struct stk__resume_scan *sc, size_t shard, uint64_t sample,
                                 uint64_t *from);

/* Add the scan's bytes to the owner's bytes_read and free the counts. */
void stk__resume_scan_free(struct stk__resume_scan *sc);

#endif
