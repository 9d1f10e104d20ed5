/* SPDX-License-Identifier: MIT */
/*
 * shuffle.c - deterministic sliding-key shuffle (see shuffle.h).
 *
 * The held samples sit in a binary min-heap by (key, input position): a
 * push and a pop cost log W comparisons, next to a sample's decode. The
 * replay (stk__shuffle_locate) runs the same code with no samples, so the
 * live shuffle and the resume plan cannot disagree.
 */
#include "plan/shuffle.h"

#include <stdlib.h>

#include "base/alloc.h"
#include "base/rng.h"
#include "stoker.h"

/* Fraction bits of a key: u_i * W is kept to 2^-20 of a sample; with W up
 * to 2^24 (the option's limit) a key fits 64 bits for 2^43 inputs. */
#define KEY_BITS 20
#define DRAIN_SEED 0x447261696eull

static uint64_t base_of(const struct stk__shuffle *sh, uint64_t input)
{
    if (sh->reach <= 1)
        return input;
    return input >= sh->reach ? input - sh->reach : 0;
}

static uint64_t key_of(const struct stk__shuffle *sh, uint64_t input)
{
    uint64_t key = base_of(sh, input) << KEY_BITS;
    if (sh->reach > 1)
        key += (stk__mix(sh->seed, input) >> (64 - KEY_BITS)) * (uint64_t)sh->reach;
    return key;
}

static int before(const struct stk__shuffle_entry *a, const struct stk__shuffle_entry *b)
{
    return a->key < b->key || (a->key == b->key && a->input < b->input);
}

int stk__shuffle_init(struct stk__shuffle *sh, size_t reach, uint64_t seed,
                      const struct stk__shuffle_start *start)
{
    static const struct stk__shuffle_start epoch_start = {0, 0, 0};
    sh->reach = reach > 1 ? reach : 1;
    sh->max = 2 * sh->reach + 1;
    sh->count = 0;
    sh->seed = seed;
    sh->start = start != NULL ? *start : epoch_start;
    sh->pushed = sh->start.input;
    sh->draining = 0;
    sh->drain_next = 0;
    sh->bytes = 0;
    sh->heap = stk__calloc(sh->max, sizeof *sh->heap);
    return sh->heap == NULL ? STK_ENOMEM : 0;
}

static void heap_add(struct stk__shuffle *sh, struct stk__shuffle_entry e)
{
    size_t i = sh->count++;
    while (i > 0 && before(&e, &sh->heap[(i - 1) / 2])) {
        sh->heap[i] = sh->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    sh->heap[i] = e;
}

static struct stk__shuffle_entry heap_take(struct stk__shuffle *sh)
{
    struct stk__shuffle_entry top = sh->heap[0], last = sh->heap[--sh->count];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= sh->count)
            break;
        if (c + 1 < sh->count && before(&sh->heap[c + 1], &sh->heap[c]))
            c++;
        if (!before(&sh->heap[c], &last))
            break;
        sh->heap[i] = sh->heap[c];
        i = c;
    }
    if (sh->count > 0)
        sh->heap[i] = last;
    return top;
}

void stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s)
{
    struct stk__shuffle_entry e = {key_of(sh, sh->pushed), sh->pushed, s};
    struct stk__shuffle_entry cut = {sh->start.cut_key, sh->start.cut_input, NULL};
    sh->pushed++;
    if (before(&e, &cut)) { /* delivered before the resumed position */
        stk__sample_free(s);
        return;
    }
    if (s != NULL)
        sh->bytes += s->bytes;
    heap_add(sh, e);
}

static int cmp_entry(const void *a, const void *b)
{
    const struct stk__shuffle_entry *x = a, *y = b;
    return before(y, x) - before(x, y);
}

void stk__shuffle_finish(struct stk__shuffle *sh)
{
    if (sh->draining)
        return;
    /* Key order first, so the permutation below depends on the held set
     * alone, not on the heap's layout. */
    qsort(sh->heap, sh->count, sizeof *sh->heap, cmp_entry);
    struct stk__rng rng;
    stk__rng_seed(&rng, stk__mix(sh->seed ^ DRAIN_SEED, sh->pushed));
    for (size_t i = sh->count; i > 1; i--) {
        size_t j = (size_t)stk__rng_below(&rng, i);
        struct stk__shuffle_entry t = sh->heap[i - 1];
        sh->heap[i - 1] = sh->heap[j];
        sh->heap[j] = t;
    }
    sh->draining = 1;
    sh->drain_next = 0;
}

/* The entry that goes out next, if it may go now. */
static const struct stk__shuffle_entry *ready(const struct stk__shuffle *sh)
{
    if (sh->draining)
        return sh->drain_next < sh->count ? &sh->heap[sh->drain_next] : NULL;
    if (sh->count > 0 && sh->heap[0].key <= base_of(sh, sh->pushed) << KEY_BITS)
        return &sh->heap[0];
    return NULL;
}

static struct stk__shuffle_entry take(struct stk__shuffle *sh)
{
    struct stk__shuffle_entry e = sh->draining ? sh->heap[sh->drain_next++] : heap_take(sh);
    if (e.sample != NULL)
        sh->bytes -= e.sample->bytes;
    return e;
}

struct stk__sample *stk__shuffle_pop(struct stk__shuffle *sh)
{
    if (ready(sh) == NULL)
        return NULL;
    return take(sh).sample;
}

static uint64_t oldest_held(const struct stk__shuffle *sh)
{
    uint64_t oldest = sh->pushed;
    for (size_t i = 0; i < sh->count; i++)
        oldest = sh->heap[i].input < oldest ? sh->heap[i].input : oldest;
    return oldest;
}

/* Replay on positions until output `output` may go out next (1), or until
 * the input is over with nothing ready (0: `output` falls in the final
 * drain); *emitted: the outputs taken before. */
static int replay_to(struct stk__shuffle *sh, uint64_t output, uint64_t total, uint64_t *emitted)
{
    *emitted = 0;
    for (;;) {
        if (ready(sh) != NULL && *emitted == output)
            return 1;
        if (ready(sh) != NULL) {
            take(sh);
            ++*emitted;
            continue;
        }
        if (sh->pushed == total)
            return 0;
        stk__shuffle_push(sh, NULL);
    }
}

int stk__shuffle_locate(size_t reach, uint64_t seed, uint64_t output, uint64_t total,
                        struct stk__shuffle_start *start, uint64_t *drop)
{
    if (output >= total)
        return 0;
    struct stk__shuffle sh;
    if (stk__shuffle_init(&sh, reach, seed, NULL) < 0)
        return STK_ENOMEM;
    uint64_t emitted;
    if (replay_to(&sh, output, total, &emitted)) {
        /* Output `output` is the heap's top: everything held and
         * everything not yet read comes at or after it. */
        start->input = oldest_held(&sh);
        start->cut_key = sh.heap[0].key;
        start->cut_input = sh.heap[0].input;
        *drop = 0;
    } else {
        /* Output falls in the final drain: keep only what is held now
         * (keys above the last base), drain it, drop what went before. */
        start->input = oldest_held(&sh);
        start->cut_key = (base_of(&sh, total) << KEY_BITS) + 1;
        start->cut_input = 0;
        *drop = output - emitted;
    }
    stk__shuffle_free(&sh);
    return 1;
}

static int by_value(const void *a, const void *b)
{
    const uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int stk__shuffle_held(size_t reach, uint64_t seed, uint64_t output, uint64_t total,
                      uint64_t *pushed, uint64_t **held, size_t *n_held)
{
    *held = NULL;
    *n_held = 0;
    struct stk__shuffle sh;
    if (stk__shuffle_init(&sh, reach, seed, NULL) < 0)
        return STK_ENOMEM;
    uint64_t emitted;
    if (!replay_to(&sh, output < total ? output : total, total, &emitted)) {
        stk__shuffle_finish(&sh);
        while (emitted < output && ready(&sh) != NULL) {
            take(&sh);
            emitted++;
        }
    }
    const size_t from = sh.draining ? sh.drain_next : 0;
    uint64_t *in = stk__calloc(sh.count - from + 1, sizeof *in);
    if (in == NULL) {
        stk__shuffle_free(&sh);
        return STK_ENOMEM;
    }
    for (size_t i = from; i < sh.count; i++)
        in[i - from] = sh.heap[i].input;
    qsort(in, sh.count - from, sizeof *in, by_value);
    *pushed = sh.pushed;
    *held = in;
    *n_held = sh.count - from;
    stk__shuffle_free(&sh);
    return 0;
}

int stk__shuffle_outputs(size_t reach, uint64_t seed, uint64_t first, size_t n, uint64_t total,
                         uint64_t *inputs, size_t *n_out)
{
    *n_out = 0;
    struct stk__shuffle sh;
    if (stk__shuffle_init(&sh, reach, seed, NULL) < 0)
        return STK_ENOMEM;
    uint64_t emitted = 0;
    while (*n_out < n) {
        if (ready(&sh) == NULL) {
            if (sh.pushed < total) {
                stk__shuffle_push(&sh, NULL);
                continue;
            }
            if (sh.draining)
                break;
            stk__shuffle_finish(&sh);
            continue;
        }
        uint64_t input = take(&sh).input;
        if (emitted++ >= first)
            inputs[(*n_out)++] = input;
    }
    stk__shuffle_free(&sh);
    return 0;
}

void stk__shuffle_free(struct stk__shuffle *sh)
{
    size_t from = sh->draining ? sh->drain_next : 0;
    for (size_t i = from; i < sh->count; i++)
        stk__sample_free(sh->heap[i].sample);
    stk__free(sh->heap);
    sh->heap = NULL;
    sh->count = 0;
}
