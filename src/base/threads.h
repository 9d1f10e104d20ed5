/* SPDX-License-Identifier: MIT */
/*
 * threads.h - thin pthread wrappers (libuv's uv_mutex_* shape).
 *
 * Locking a valid mutex or signalling a valid condition variable cannot fail
 * in a correct program, so these abort on failure instead of making every
 * caller handle an impossible error. Creating a thread can fail and returns
 * a code.
 */
#ifndef STK_THREADS_H
#define STK_THREADS_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

void stk__mutex_init(pthread_mutex_t *m);
void stk__mutex_destroy(pthread_mutex_t *m);
void stk__mutex_lock(pthread_mutex_t *m);
void stk__mutex_unlock(pthread_mutex_t *m);

void stk__cond_init(pthread_cond_t *c);
void stk__cond_destroy(pthread_cond_t *c);
void stk__cond_wait(pthread_cond_t *c, pthread_mutex_t *m);
/* Wait at most ms milliseconds (spurious and timed-out returns look alike). */
void stk__cond_timedwait_ms(pthread_cond_t *c, pthread_mutex_t *m, unsigned ms);
void stk__cond_signal(pthread_cond_t *c);
void stk__cond_broadcast(pthread_cond_t *c);

/* 0 or a negative errno. */
int stk__thread_create(pthread_t *t, void *(*fn)(void *), void *arg);
void stk__thread_join(pthread_t t);

/* Sleep ms milliseconds in slices of 100 ms, ending early once flag (may be
 * NULL) is set, so that a stopping loader is not kept waiting: 0 after the
 * whole wait, 1 when the flag ended it. */
int stk__sleep_unless(const atomic_int *flag, uint64_t ms);

/* Monotonic clock in nanoseconds. */
uint64_t stk__now_ns(void);

/* CPU time of the calling thread in nanoseconds (a system call: not per
 * item on a hot path). */
uint64_t stk__thread_cpu_ns(void);

#endif
