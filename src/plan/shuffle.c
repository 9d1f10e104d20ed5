/*
 * shuffle.c - deterministic windowed shuffle.
 */
#include "shuffle.h"

#include "alloc.h"
#include "rng.h"
#include "stoker.h"

#define FIRST_WINDOW 64

/* Size of window k: FIRST_WINDOW doubled k times, at most capacity. */
static size_t window_size(size_t capacity, uint64_t k)
{
    size_t size = FIRST_WINDOW;
    while (k-- > 0 && size < capacity)
        size *= 2;
    return size < capacity ? size : capacity;
}

void stk__shuffle_window_at(size_t capacity, uint64_t position, uint64_t *window,
                            uint64_t *start)
{
    if (capacity < 1)
        capacity = 1;
    uint64_t k = 0, first = 0;
    size_t size;
    /* At most log2(capacity / FIRST_WINDOW) growing windows, then steps. */
    while ((size = window_size(capacity, k)) < capacity && first + size <= position) {
        first += size;
        k++;
    }
    if (size == capacity) {
        uint64_t steps = (position - first) / capacity;
        k += steps;
        first += steps * capacity;
    }
    *window = k;
    *start = first;
}

int stk__shuffle_init(struct stk__shuffle *sh, size_t capacity, uint64_t seed,
                      uint64_t first_window)
{
    sh->capacity = capacity > 1 ? capacity : 1;
    sh->count = 0;
    sh->next = 0;
    sh->closed = 0;
    sh->bytes = 0;
    sh->seed = seed;
    sh->window = first_window;
    sh->size = window_size(sh->capacity, first_window);
    sh->items = stk__calloc(sh->capacity, sizeof *sh->items);
    return sh->items == NULL ? STK_ENOMEM : 0;
}

static void close_window(struct stk__shuffle *sh)
{
    struct stk__rng rng;
    stk__rng_seed(&rng, stk__mix(sh->seed, sh->window++));
    for (size_t i = sh->count; i > 1; i--) {
        size_t j = (size_t)stk__rng_below(&rng, i);
        struct stk__sample *t = sh->items[i - 1];
        sh->items[i - 1] = sh->items[j];
        sh->items[j] = t;
    }
    sh->closed = 1;
    sh->next = 0;
    sh->size = window_size(sh->capacity, sh->window);
}

void stk__shuffle_push(struct stk__shuffle *sh, struct stk__sample *s)
{
    sh->items[sh->count++] = s;
    sh->bytes += s->bytes;
    if (sh->count == sh->size)
        close_window(sh);
}

void stk__shuffle_finish(struct stk__shuffle *sh)
{
    if (!sh->closed)
        close_window(sh);
}

struct stk__sample *stk__shuffle_pop(struct stk__shuffle *sh)
{
    if (!sh->closed)
        return NULL;
    if (sh->next == sh->count) {
        sh->closed = 0;
        sh->count = 0;
        sh->next = 0;
        return NULL;
    }
    struct stk__sample *s = sh->items[sh->next];
    sh->items[sh->next++] = NULL;
    sh->bytes -= s->bytes;
    return s;
}

void stk__shuffle_free(struct stk__shuffle *sh)
{
    for (size_t i = sh->next; i < sh->count; i++)
        stk__sample_free(sh->items[i]);
    stk__free(sh->items);
    sh->items = NULL;
    sh->count = 0;
    sh->next = 0;
}
