/* SPDX-License-Identifier: MIT */
/*
 * source_gzip.h - the decompressed bytes of a gzip-compressed shard.
 *
 * A source layer over another source (file, HTTP, cache ...) that inflates
 * gzip with zlib and checks what gzip -t checks: every member's CRC-32 and
 * length (ISIZE), the headers, and what follows the last member.
 * libarchive's gzip filter checks neither trailer field, so a flipped byte
 * reached training as data. Members are concatenated, as gzip -d does
 * (`cat a.gz b.gz`); zeros after the last member are padding; anything else
 * there is an error, as is a stream that ends inside a member.
 */
#ifndef STK_SOURCE_GZIP_H
#define STK_SOURCE_GZIP_H

#include <stddef.h>

#include "io/source.h"

/* 1 if bytes start a gzip member (magic and the deflate method). */
int stk__is_gzip(const void *head, size_t len);

/* A source of inner's decompressed bytes; head[0..head_len) are bytes
 * already read from inner (they come first). Takes ownership of inner
 * (closed with the layer, also when this fails). It cannot skip; its url
 * is inner's; inner->bytes_read keeps counting compressed bytes. Errors
 * name the shard and the compressed offset. */
int stk__source_gzip_open(struct stk__source *inner, const void *head, size_t head_len,
                          struct stk__source **out, struct stk__err *err);

#endif
