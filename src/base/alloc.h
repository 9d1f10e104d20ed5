/* SPDX-License-Identifier: MIT */
/*
 * alloc.h - the one place stoker allocates memory.
 *
 * Every allocation goes through these wrappers so that tests can make the
 * Nth allocation fail (curl's torture tests) and check that each caller
 * cleans up and reports STK_ENOMEM instead of crashing or leaking.
 */
#ifndef STK_ALLOC_H
#define STK_ALLOC_H

#include <stddef.h>

void *stk__malloc(size_t size);
void *stk__calloc(size_t count, size_t size);
void *stk__realloc(void *ptr, size_t size);
void stk__free(void *ptr);
char *stk__strdup(const char *s);
char *stk__strndup(const char *s, size_t n);

/* Test hook: make the allocation numbered `n` (1-based, counted from this
 * call) and every later one fail; 0 turns failure injection off. Returns the
 * number of allocations made since the previous call. Not for production. */
unsigned long stk__alloc_fail_after(unsigned long n);

#endif
