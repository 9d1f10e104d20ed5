/* SPDX-License-Identifier: MIT */
/*
 * jobs.h - one job per shard on a few threads (index building,
 * verification): whole shards are the unit, so there is no ordering to keep.
 */
#ifndef STK_JOBS_H
#define STK_JOBS_H

#include <stdatomic.h>
#include <stddef.h>

#include "base/error.h"
#include "base/run.h"

/* The job of shard index; 0 or an STK_E* code with a message in err. */
typedef int (*stk__job_fn)(void *ctx, size_t index, struct stk__err *err);

/* Run job(ctx, i, ...) for every i in [0, count) on min(threads, count)
 * threads, each taking the next index. The first failure stops the threads
 * from taking more shards and is returned with its message. After each
 * job, run->progress (when set) gets the jobs done and the run's
 * samples_read. */
int stk__run_jobs(size_t count, unsigned threads, stk__job_fn job, void *ctx,
                  const struct stk__run *run, struct stk__err *err);

#endif
