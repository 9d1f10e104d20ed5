/* SPDX-License-Identifier: MIT */
/*
 * source_seek.h - start a source at a byte offset, whatever its backend:
 * apart from source.c because the sources that wrap another (the cloud
 * source resuming with new credentials) need it too, and source.c opens
 * those.
 */
#ifndef STK_SOURCE_SEEK_H
#define STK_SOURCE_SEEK_H

#include <stdint.h>

#include "io/source.h"

/* Before the first read: start the stream at byte offset of the shard,
 * through the backend's skip where it has one (a seek, a Range request),
 * else by reading and dropping. 0 or an error in src->err. */
int stk__source_seek(struct stk__source *src, uint64_t offset);

#endif
