/* SPDX-License-Identifier: MIT */
/*
 * threads.c - pthread wrappers that abort on impossible failures.
 */
#include "base/threads.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static void check(int rc, const char *what)
{
    if (rc != 0) {
        fprintf(stderr, "stoker: %s failed with error %d\n", what, rc);
        abort();
    }
}

void stk__mutex_init(pthread_mutex_t *m) { check(pthread_mutex_init(m, NULL), "pthread_mutex_init"); }
void stk__mutex_destroy(pthread_mutex_t *m) { check(pthread_mutex_destroy(m), "pthread_mutex_destroy"); }
void stk__mutex_lock(pthread_mutex_t *m) { check(pthread_mutex_lock(m), "pthread_mutex_lock"); }
void stk__mutex_unlock(pthread_mutex_t *m) { check(pthread_mutex_unlock(m), "pthread_mutex_unlock"); }

void stk__cond_init(pthread_cond_t *c) { check(pthread_cond_init(c, NULL), "pthread_cond_init"); }
void stk__cond_destroy(pthread_cond_t *c) { check(pthread_cond_destroy(c), "pthread_cond_destroy"); }
void stk__cond_wait(pthread_cond_t *c, pthread_mutex_t *m) { check(pthread_cond_wait(c, m), "pthread_cond_wait"); }
void stk__cond_timedwait_ms(pthread_cond_t *c, pthread_mutex_t *m, unsigned ms)
{
    /* Condition variables here use the default clock, CLOCK_REALTIME. */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    ts.tv_sec += (time_t)(ms / 1000) + ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    int rc = pthread_cond_timedwait(c, m, &ts);
    if (rc != ETIMEDOUT)
        check(rc, "pthread_cond_timedwait");
}

void stk__cond_signal(pthread_cond_t *c) { check(pthread_cond_signal(c), "pthread_cond_signal"); }
void stk__cond_broadcast(pthread_cond_t *c) { check(pthread_cond_broadcast(c), "pthread_cond_broadcast"); }

int stk__thread_create(pthread_t *t, void *(*fn)(void *), void *arg)
{
    int rc = pthread_create(t, NULL, fn, arg);
    return rc == 0 ? 0 : -rc;
}

void stk__thread_join(pthread_t t)
{
    check(pthread_join(t, NULL), "pthread_join");
}

static uint64_t clock_ns(clockid_t clock)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t stk__now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t stk__thread_cpu_ns(void) { return clock_ns(CLOCK_THREAD_CPUTIME_ID); }

int stk__sleep_unless(const atomic_int *flag, uint64_t ms)
{
    const uint64_t slice_ms = 100;
    for (uint64_t slept = 0; slept < ms; slept += slice_ms) {
        if (flag != NULL && atomic_load(flag))
            return 1;
        uint64_t slice = ms - slept < slice_ms ? ms - slept : slice_ms;
        struct timespec ts = {0, (long)slice * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    return flag != NULL && atomic_load(flag);
}
