/* SPDX-License-Identifier: MIT */
/*
 * source_filter.h - the decompressed bytes of a bzip2, xz, zstd or lz4
 * shard, through libarchive's filters (gzip has its own layer,
 * source_gzip.h, that checks the CRC).
 *
 * Decompressing below the tar reader rather than inside it lets the tar
 * reader see every byte of the tar stream whatever the compression, which
 * is how it checks what follows the end-of-archive marker. Only filters
 * libarchive implements with linked libraries are used: nothing here runs
 * an external program.
 */
#ifndef STK_SOURCE_FILTER_H
#define STK_SOURCE_FILTER_H

#include <stddef.h>

#include "io/source.h"

/* The name of the compression whose magic head starts with ("bzip2",
 * "xz", "zstd", "lz4"), or NULL. */
const char *stk__filter_sniff(const void *head, size_t len);

/* Bytes stk__filter_sniff needs to tell (fewer only at the end of a stream). */
#define STK__SNIFF_BYTES 10

/* A source of inner's decompressed bytes, head[0..head_len) being bytes
 * already read from inner; name is what stk__filter_sniff said. Takes
 * ownership of inner (closed with the layer, also when this fails). Cannot
 * skip; its url is inner's; inner->bytes_read counts compressed bytes.
 * STK_EFORMAT when this libarchive lacks the filter. */
int stk__source_filter_open(struct stk__source *inner, const char *name, const void *head,
                            size_t head_len, struct stk__source **out, struct stk__err *err);

#endif
