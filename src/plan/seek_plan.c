/* SPDX-License-Identifier: MIT */
/*
 * seek_plan.c - replay the interleave on per-shard sample counts.
 */
#include "plan/seek_plan.h"

#include <string.h>

#include "base/alloc.h"
#include "plan/shuffle.h"
#include "stoker.h"

/* The samples a position of the rank's list holds: a whole shard's, or its
 * part's. 1, 0 (not known) or <0. */
static int segment_samples(const struct stk__seek_request *req, const struct stk__plan_segment *seg,
                           uint64_t *n)
{
    if (seg->count != STK__PLAN_WHOLE || req->shard_samples != NULL) {
        *n = seg->count != STK__PLAN_WHOLE ? seg->count : req->shard_samples[seg->shard];
        return 1;
    }
    return req->count(req->count_data, seg->shard, n);
}

int stk__seek_plan_compute(struct stk__seek_plan *sp, const struct stk__seek_request *req)
{
    memset(sp, 0, sizeof *sp);
    /* The inputs of the epoch: the target, or the pass over the rank's
     * shards that a rank without one makes. The shuffle holds at most
     * 2 x window + 1 inputs (shuffle.c), so when output_position comes out
     * at most that many more have been pushed: inputs past them cannot
     * change where it is found, and their shards are not counted. */
    const uint64_t enough = req->output_position + 2 * (uint64_t)req->window + 2;
    uint64_t total = req->target;
    struct stk__shuffle_start start;
    uint64_t drop;
    /* Counts asked for cost a header scan each (resume_scan.h), about a
     * twentieth of the samples' bytes (the sample set: 1 byte in 22). Where
     * should the epoch hold enough inputs, the resumed one would still be
     * below a sixteenth of them (early in an epoch, or a window as long as
     * the epoch), the jump saves less than the scan costs: none. A shorter
     * epoch only moves it earlier (the oldest input held never decreases). */
    if (req->shard_samples == NULL) {
        int found = stk__shuffle_locate(req->window, req->shuffle_seed, req->output_position,
                                        total < enough ? total : enough, &start, &drop);
        if (found <= 0 || start.input < enough / 16)
            return found < 0 ? found : 0;
    }
    if (total == UINT64_MAX) {
        total = 0;
        for (size_t g = 0; g < req->cursor->count && total < enough; g++) {
            struct stk__plan_segment seg;
            uint64_t n;
            if (!stk__plan_cursor_segment(req->cursor, g, &seg))
                continue;
            int known = segment_samples(req, &seg, &n);
            if (known <= 0)
                return known;
            total += n;
        }
    }
    int found = stk__shuffle_locate(req->window, req->shuffle_seed, req->output_position, total,
                                    &start, &drop);
    if (found <= 0)
        return found;
    uint64_t input_start = start.input;
    uint64_t *left = stk__calloc(req->n_slots, sizeof *left); /* of each opened shard */
    unsigned char *opened = stk__calloc(req->n_slots, 1);
    sp->slot_skip = stk__calloc(req->n_slots, sizeof *sp->slot_skip);
    int rc = left == NULL || opened == NULL || sp->slot_skip == NULL ? STK_ENOMEM : 0;
    if (rc == 0)
        rc = stk__interleave_init(&sp->il, req->n_slots, req->cursor->count, req->shuffle,
                                  req->interleave_seed);
    if (rc < 0) {
        stk__free(left);
        stk__free(opened);
        stk__seek_plan_free(sp);
        return rc;
    }
    uint64_t pulled = 0;
    while (pulled < input_start) {
        int j = stk__interleave_pick(&sp->il);
        if (j < 0)
            break;
        if (!opened[j]) {
            struct stk__plan_segment seg;
            if (!stk__plan_cursor_segment(req->cursor, sp->il.slot_position[j], &seg)) {
                if (stk__interleave_stream_end(&sp->il))
                    break;
                continue;
            }
            int known = segment_samples(req, &seg, &left[j]);
            if (known <= 0) {
                rc = known;
                break;
            }
            opened[j] = 1;
            sp->slot_skip[j] = 0;
        }
        if (left[j] > 0) {
            left[j]--;
            sp->slot_skip[j]++;
            pulled++;
            stk__interleave_sample(&sp->il);
            continue;
        }
        opened[j] = 0;
        sp->slot_skip[j] = 0;
        if (stk__interleave_shard_end(&sp->il, (unsigned)j) < 0)
            break;
    }
    stk__free(left);
    stk__free(opened);
    if (rc < 0 || pulled < input_start) {
        stk__seek_plan_free(sp);
        return rc;
    }
    sp->input_start = input_start;
    sp->start = start;
    sp->drop = drop;
    return 1;
}

void stk__seek_plan_free(struct stk__seek_plan *sp)
{
    stk__interleave_free(&sp->il);
    stk__free(sp->slot_skip);
    sp->slot_skip = NULL;
}
