/* SPDX-License-Identifier: MIT */
/*
 * alloc.c - allocation wrappers with failure injection for tests.
 *
 * The counters are atomics because loader threads allocate concurrently;
 * the check costs one relaxed load when injection is off.
 */
#include "base/alloc.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

static atomic_ulong fail_at;    /* 0: never fail */
static atomic_ulong alloc_count;

static int should_fail(void)
{
    unsigned long at = atomic_load_explicit(&fail_at, memory_order_relaxed);
    unsigned long n = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;
    return at != 0 && n >= at;
}

unsigned long stk__alloc_fail_after(unsigned long n)
{
    unsigned long made = atomic_exchange(&alloc_count, 0);
    atomic_store(&fail_at, n);
    return made;
}

void *stk__malloc(size_t size)
{
    return should_fail() ? NULL : malloc(size ? size : 1);
}

void *stk__calloc(size_t count, size_t size)
{
    return should_fail() ? NULL : calloc(count ? count : 1, size ? size : 1);
}

void *stk__realloc(void *ptr, size_t size)
{
    return should_fail() ? NULL : realloc(ptr, size ? size : 1);
}

void stk__free(void *ptr)
{
    free(ptr);
}

char *stk__strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *copy = stk__malloc(len + 1);
    if (copy == NULL)
        return NULL;
    memcpy(copy, s, len);
    copy[len] = '\0';
    return copy;
}

char *stk__strdup(const char *s)
{
    return stk__strndup(s, strlen(s));
}
