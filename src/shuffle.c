/*
 * shuffle.c - deterministic buffer shuffle.
 */
#include "shuffle.h"

#include "alloc.h"
#include "stoker.h"

int stk__shuffle_init(struct stk__shuffle *sh, size_t capacity, uint64_t seed)
{
    sh->capacity = capacity > 1 ? capacity : 0;
    sh->count = 0;
    sh->items = NULL;
    stk__rng_seed(&sh->rng, seed);
    if (sh->capacity) {
        sh->items = stk__calloc(sh->capacity, sizeof *sh->items);
        if (sh->items == NULL)
            return STK_ENOMEM;
    }
    return 0;
}

struct stk__sample *stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s)
{
    if (sh->capacity == 0)
        return s;
    if (sh->count < sh->capacity) {
        sh->items[sh->count++] = s;
        return NULL;
    }
    size_t k = (size_t)stk__rng_below(&sh->rng, sh->count);
    struct stk__sample *out = sh->items[k];
    sh->items[k] = s;
    return out;
}

struct stk__sample *stk__shuffle_drain(struct stk__shuffle *sh)
{
    if (sh->count == 0)
        return NULL;
    size_t k = (size_t)stk__rng_below(&sh->rng, sh->count);
    struct stk__sample *out = sh->items[k];
    sh->items[k] = sh->items[--sh->count];
    return out;
}

void stk__shuffle_free(struct stk__shuffle *sh)
{
    for (size_t i = 0; i < sh->count; i++)
        stk__sample_free(sh->items[i]);
    stk__free(sh->items);
    sh->items = NULL;
    sh->count = 0;
}
