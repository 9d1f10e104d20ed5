/* SPDX-License-Identifier: MIT */
/*
 * buffer_pool.h - recycled buffers for member data.
 *
 * Member buffers are allocated by reader threads and freed by whichever
 * thread releases the batch, at tens of thousands per second. Through
 * malloc, glibc trims the freed memory back to the kernel and the next
 * buffer faults it in again, page by page: one page fault per 4 KiB read,
 * which cost more than parsing the tar (perf: 40k faults per 350 MB).
 * The pool keeps freed buffers in size classes (four per power of two, so
 * at most 25% waste) up to a byte cap, and hands them out again.
 */
#ifndef STK_BUFFER_POOL_H
#define STK_BUFFER_POOL_H

#include <stddef.h>

struct stk__buffer_pool;

/* A pool holding at most cap_bytes of idle buffers. NULL when out of memory. */
struct stk__buffer_pool *stk__buffer_pool_new(size_t cap_bytes);
/* Destroy the pool and its idle buffers (buffers in use must be back). */
void stk__buffer_pool_free(struct stk__buffer_pool *pool);

/* A buffer of at least size bytes (pool may be NULL: plain allocation). */
void *stk__buffer_pool_get(struct stk__buffer_pool *pool, size_t size);
/* Give back a buffer from stk__buffer_pool_get() with the same size. */
void stk__buffer_pool_put(struct stk__buffer_pool *pool, void *buf, size_t size);

#endif
