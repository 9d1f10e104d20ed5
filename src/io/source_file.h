/* SPDX-License-Identifier: MIT */
/*
 * source_file.h - local files as shard sources.
 */
#ifndef STK_SOURCE_FILE_H
#define STK_SOURCE_FILE_H

#include "io/source.h"

/* url names the shard in messages; path is what is opened. jumps: the
 * reader seeks over most of it (stk__source_config.jumps). */
int stk__source_file_open(const char *url, const char *path, int jumps, struct stk__source **out,
                          struct stk__err *err);

/* A source over an open descriptor (the node cache's files), read from its
 * current offset. The source owns fd from this call on, also on failure. */
/* Whether a local shard can be opened at all, without reading it: 0, or
 * the error stk__source_file_open would give (missing, a directory). */
int stk__source_file_check(const char *url, const char *path, struct stk__err *err);

int stk__source_file_adopt(const char *url, int fd, int jumps, struct stk__source **out,
                           struct stk__err *err);

/* The stamp of the regular file at path now: 1, or 0 when it cannot be
 * stat'ed or is no regular file (opening it will say why). */
int stk__source_file_stamp(const char *path, struct stk__shard_stamp *out);

#endif
