/* SPDX-License-Identifier: MIT */
/*
 * decode_impl.h - the per-format decoders the dispatcher (decode.c) calls.
 * They share nothing with it but the pixel buffer below them all
 * (pixel_buffer.h) and, for JPEG, the libjpeg state the dispatcher keeps
 * for them (created on first use, freed by stk__jpeg_free).
 */
#ifndef STK_DECODE_IMPL_H
#define STK_DECODE_IMPL_H

#include "base/error.h"
#include "image/decode.h"
#include "image/pixel_buffer.h"

struct stk__jpeg;

void stk__jpeg_free(struct stk__jpeg *j);
int stk__jpeg_size(struct stk__jpeg **state, const struct stk__pixel_buffer *buf,
                   const uint8_t *data, size_t size, int *width, int *height, struct stk__err *err);
int stk__jpeg_decode(struct stk__jpeg **state, struct stk__pixel_buffer *buf, const uint8_t *data,
                     size_t size, const struct stk__decode_request *req, struct stk__decoded *out,
                     struct stk__err *err);

int stk__png_size(const struct stk__pixel_buffer *buf, const uint8_t *data, size_t size, int *width,
                  int *height, struct stk__err *err);
int stk__png_decode(struct stk__pixel_buffer *buf, const uint8_t *data, size_t size,
                    struct stk__decoded *out, struct stk__err *err);

#endif
