/* SPDX-License-Identifier: MIT */
/*
 * seek_plan.c - replay the interleave on per-shard sample counts: where a
 * resumed epoch starts, and what an interrupted one delivered.
 */
#include "plan/seek_plan.h"

#include <stdlib.h>
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

/* The inputs of the epoch: the target, or the pass over the rank's shards
 * that a rank without one makes, counted until limit is reached (the
 * shards past it are not asked for). 1, 0 (a count not known) or <0. */
static int epoch_inputs(const struct stk__seek_request *req, uint64_t limit, uint64_t *total)
{
    *total = req->target;
    if (*total != UINT64_MAX)
        return 1;
    *total = 0;
    for (size_t g = 0; g < req->cursor->count && *total < limit; g++) {
        struct stk__plan_segment seg;
        uint64_t n;
        if (!stk__plan_cursor_segment(req->cursor, g, &seg))
            continue;
        int known = segment_samples(req, &seg, &n);
        if (known <= 0)
            return known;
        *total += n;
    }
    return 1;
}

/* Shard ends charged to marked inputs: pairs (mark, list position). */
struct end_log {
    uint64_t *items;
    size_t count, capacity;
};

#define NO_MARK UINT64_MAX

static int log_end(struct end_log *log, uint64_t mark, uint64_t list_position)
{
    if (log->count == log->capacity) {
        size_t capacity = log->capacity ? 2 * log->capacity : 16;
        uint64_t *items = stk__realloc(log->items, 2 * capacity * sizeof *items);
        if (items == NULL)
            return STK_ENOMEM;
        log->items = items;
        log->capacity = capacity;
    }
    log->items[2 * log->count] = mark;
    log->items[2 * log->count++ + 1] = list_position;
    return 0;
}

/* Replay the interleave on counts until `until` samples are pulled: the
 * sequencer's state then in sp->il, and per slot the samples of its
 * current shard consumed in sp->slot_skip. marks (n_marks input positions,
 * ascending) get the list position and the sample within its segment of
 * each in mark_pos[2 * m], mark_pos[2 * m + 1]. With ends (not NULL), the
 * shard ends up to the next sample are replayed too, and each one whose
 * bad input the sequencer charges to a marked input (pipeline_sequencer.c's
 * charge(): the input in hand when it ends, or the first input for the
 * ends before it) is logged with that mark. 1 reached; 0 the rank's input
 * ends before; STK_ENOMEM. */
static int replay_interleave(struct stk__seek_plan *sp, const struct stk__seek_request *req,
                             uint64_t until, const uint64_t *marks, size_t n_marks,
                             uint64_t *mark_pos, struct end_log *ends)
{
    uint64_t *left = stk__calloc(req->n_slots, sizeof *left); /* of each opened shard */
    unsigned char *opened = stk__calloc(req->n_slots, 1);
    sp->slot_skip = stk__calloc(req->n_slots, sizeof *sp->slot_skip);
    int rc = left == NULL || opened == NULL || sp->slot_skip == NULL ? STK_ENOMEM : 0;
    if (rc == 0)
        rc = stk__interleave_init(&sp->il, req->n_slots, req->cursor->count, req->shuffle,
                                  req->interleave_seed);
    uint64_t pulled = 0;
    size_t m = 0;
    uint64_t in_hand = NO_MARK; /* the mark of input pulled - 1 */
    while (rc == 0 && (pulled < until || ends != NULL)) {
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
            if (pulled == until)
                break;
            in_hand = NO_MARK;
            if (m < n_marks && marks[m] == pulled) {
                mark_pos[2 * m] = sp->il.slot_position[j];
                mark_pos[2 * m + 1] = sp->slot_skip[j];
                /* The ends before the first input are charged to it. */
                for (size_t e = 0; ends != NULL && pulled == 0 && e < ends->count; e++)
                    ends->items[2 * e] = m;
                in_hand = m++;
            }
            left[j]--;
            sp->slot_skip[j]++;
            pulled++;
            stk__interleave_sample(&sp->il);
            continue;
        }
        opened[j] = 0;
        sp->slot_skip[j] = 0;
        if (ends != NULL && (in_hand != NO_MARK || pulled == 0) &&
            (rc = log_end(ends, in_hand, sp->il.slot_position[j])) < 0)
            break;
        if (stk__interleave_shard_end(&sp->il, (unsigned)j) < 0)
            break;
    }
    stk__free(left);
    stk__free(opened);
    if (rc == 0)
        rc = pulled == until;
    if (rc <= 0)
        stk__seek_plan_free(sp);
    return rc;
}

int stk__seek_plan_compute(struct stk__seek_plan *sp, const struct stk__seek_request *req)
{
    memset(sp, 0, sizeof *sp);
    /* The shuffle holds at most 2 x window + 1 inputs (shuffle.c), so when
     * output_position comes out at most that many more have been pushed:
     * inputs past them cannot change where it is found, and their shards
     * are not counted. */
    const uint64_t enough = req->output_position + 2 * (uint64_t)req->window + 2;
    struct stk__shuffle_start start;
    uint64_t drop, total = req->target;
    int found;
    /* Counts asked for cost a header scan each (resume_scan.h), about a
     * twentieth of the samples' bytes (the sample set: 1 byte in 22). Where
     * should the epoch hold enough inputs, the resumed one would still be
     * below a sixteenth of them (early in an epoch, or a window as long as
     * the epoch), the jump saves less than the scan costs: none. A shorter
     * epoch only moves it earlier (the oldest input held never decreases). */
    if (req->shard_samples == NULL) {
        found = stk__shuffle_locate(req->window, req->shuffle_seed, req->output_position,
                                    total < enough ? total : enough, &start, &drop);
        if (found <= 0 || start.input < enough / 16)
            return found < 0 ? found : 0;
    }
    int known = epoch_inputs(req, enough, &total);
    if (known <= 0)
        return known;
    found = stk__shuffle_locate(req->window, req->shuffle_seed, req->output_position, total,
                                &start, &drop);
    if (found <= 0)
        return found;
    int rc = replay_interleave(sp, req, start.input, NULL, 0, NULL, NULL);
    if (rc <= 0)
        return rc;
    sp->input_start = start.input;
    sp->start = start;
    sp->drop = drop;
    return 1;
}

/* Add run positions [from, to) to the ascending ranges out[0..*n). */
static void add_range(uint64_t *out, size_t *n, uint64_t from, uint64_t to)
{
    if (from >= to)
        return;
    if (*n > 0 && out[2 * *n - 1] == from) {
        out[2 * *n - 1] = to;
        return;
    }
    out[2 * *n] = from;
    out[2 * ++*n - 1] = to;
}

static int by_value(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int stk__seek_plan_delivered(const struct stk__seek_request *req, uint64_t **out, size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    const size_t count = req->cursor->count;
    uint64_t *held = NULL, *held_pos = NULL, *first = NULL, *res = NULL, pushed;
    size_t n_held = 0, n = 0;
    struct stk__seek_plan sp;
    memset(&sp, 0, sizeof sp);
    uint64_t total;
    int rc = epoch_inputs(req, UINT64_MAX, &total);
    if (rc <= 0) /* counts come from the index here: 0 cannot be */
        return rc < 0 ? rc : STK_EINVAL;
    rc = stk__shuffle_held(req->window, req->shuffle_seed, req->output_position, total, &pushed,
                           &held, &n_held);
    if (rc < 0)
        return rc;
    held_pos = stk__calloc(2 * n_held + 1, sizeof *held_pos);
    first = stk__calloc(count + 1, sizeof *first); /* run position of each list position */
    res = stk__calloc(2 * (count + n_held + 1), sizeof *res);
    rc = held_pos == NULL || first == NULL || res == NULL ? STK_ENOMEM : 0;
    for (size_t g = 0; rc == 0 && g < count; g++) {
        struct stk__plan_segment seg;
        uint64_t samples = 0;
        if (stk__plan_cursor_segment(req->cursor, g, &seg) &&
            segment_samples(req, &seg, &samples) <= 0)
            rc = STK_EINVAL;
        first[g + 1] = first[g] + samples;
    }
    if (rc == 0) {
        rc = replay_interleave(&sp, req, pushed, held, n_held, held_pos, NULL);
        if (rc == 0) /* the list ends before what the shuffle read: another rank's count */
            rc = STK_EINVAL;
    }
    if (rc < 0)
        goto out;
    rc = 0;
    /* The held inputs' run positions; those past the list (an extra pass)
     * are not of the run. */
    size_t n_points = 0;
    for (size_t m = 0; m < n_held; m++)
        if (held_pos[2 * m] < count)
            held[n_points++] = first[held_pos[2 * m]] + held_pos[2 * m + 1];
    qsort(held, n_points, sizeof *held, by_value);
    /* What was read: each list position's consumed front (a slot reads the
     * positions j, j + K, ... in turn), less what is held. */
    size_t h = 0;
    for (size_t g = 0; g < count; g++) {
        const unsigned j = (unsigned)(g % req->n_slots);
        const uint64_t at = sp.il.slot_position[j];
        const uint64_t read = g < at ? first[g + 1] - first[g] : g == at ? sp.slot_skip[j] : 0;
        uint64_t from = first[g];
        for (; h < n_points && held[h] < first[g] + read; h++) {
            add_range(res, &n, from, held[h]);
            from = held[h] + 1;
        }
        add_range(res, &n, from, first[g] + read);
    }
    *out = res;
    *n_out = n;
    res = NULL;
out:
    stk__seek_plan_free(&sp);
    stk__free(held);
    stk__free(held_pos);
    stk__free(first);
    stk__free(res);
    return rc;
}

int stk__seek_plan_outputs(const struct stk__seek_request *req, uint64_t first, size_t n,
                           struct stk__seek_place *places, size_t *n_out, uint64_t **ends,
                           size_t *n_ends)
{
    *n_out = 0;
    *ends = NULL;
    *n_ends = 0;
    /* As in stk__seek_plan_compute: past this many inputs the outputs wanted
     * are out whatever follows, so later shards are not counted. */
    const uint64_t enough = first + n + 2 * (uint64_t)req->window + 2;
    uint64_t total;
    int rc = epoch_inputs(req, enough, &total);
    if (rc <= 0)
        return rc;
    uint64_t *inputs = stk__calloc(n + 1, sizeof *inputs);
    uint64_t *pairs = stk__calloc(2 * n + 1, sizeof *pairs);
    uint64_t *marks = stk__calloc(n + 1, sizeof *marks);
    uint64_t *mark_pos = stk__calloc(2 * n + 1, sizeof *mark_pos);
    struct end_log log = {0};
    size_t got = 0;
    rc = inputs == NULL || pairs == NULL || marks == NULL || mark_pos == NULL ? STK_ENOMEM : 0;
    if (rc == 0)
        rc = stk__shuffle_outputs(req->window, req->shuffle_seed, first, n,
                                  total < enough ? total : enough, inputs, &got);
    if (rc == 0 && got > 0) {
        /* The interleave replay marks inputs in ascending order. */
        for (size_t m = 0; m < got; m++) {
            pairs[2 * m] = inputs[m];
            pairs[2 * m + 1] = m;
        }
        qsort(pairs, got, 2 * sizeof *pairs, by_value); /* by input: each is one output's */
        for (size_t m = 0; m < got; m++)
            marks[m] = pairs[2 * m];
        struct stk__seek_plan sp;
        memset(&sp, 0, sizeof sp);
        rc = replay_interleave(&sp, req, marks[got - 1] + 1, marks, got, mark_pos, &log);
        stk__seek_plan_free(&sp);
    }
    /* The ends by output: counted per output, then laid out in output order. */
    uint64_t *by_output = rc == 1 ? stk__calloc(log.count + 1, sizeof *by_output) : NULL;
    if (rc == 1 && by_output == NULL)
        rc = STK_ENOMEM;
    for (size_t m = 0; rc == 1 && m < got; m++) {
        struct stk__seek_place *pl = &places[pairs[2 * m + 1]];
        pl->input = marks[m];
        pl->list_position = mark_pos[2 * m];
        pl->sample = mark_pos[2 * m + 1];
        pl->n_ends = 0;
    }
    for (size_t e = 0; rc == 1 && e < log.count; e++)
        if (log.items[2 * e] != NO_MARK)
            places[pairs[2 * log.items[2 * e] + 1]].n_ends++;
    size_t next = 0;
    for (size_t i = 0; rc == 1 && i < got; i++) {
        places[i].first_end = next;
        next += places[i].n_ends;
        places[i].n_ends = 0;
    }
    for (size_t e = 0; rc == 1 && e < log.count; e++) {
        if (log.items[2 * e] == NO_MARK)
            continue;
        struct stk__seek_place *pl = &places[pairs[2 * log.items[2 * e] + 1]];
        by_output[pl->first_end + pl->n_ends++] = log.items[2 * e + 1];
    }
    if (rc == 1) {
        *n_out = got;
        *ends = by_output;
        *n_ends = next;
    }
    stk__free(log.items);
    stk__free(inputs);
    stk__free(pairs);
    stk__free(marks);
    stk__free(mark_pos);
    return rc < 0 ? rc : *n_out > 0;
}

void stk__seek_plan_free(struct stk__seek_plan *sp)
{
    stk__interleave_free(&sp->il);
    stk__free(sp->slot_skip);
    sp->slot_skip = NULL;
}
