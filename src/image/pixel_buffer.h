/* SPDX-License-Identifier: MIT */
/*
 * pixel_buffer.h - the growable buffer a decoder writes pixels into, capped
 * by the pixel limit.
 *
 * Below the decode dispatcher (decode.c) and its codecs (decode_jpeg.c,
 * decode_png.c): each codec grows it without calling back into the
 * dispatcher, which owns it.
 */
#ifndef STK_PIXEL_BUFFER_H
#define STK_PIXEL_BUFFER_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

struct stk__pixel_buffer {
    uint8_t *pixels; /* grown up to max_pixels * 3 bytes */
    size_t capacity;
    uint64_t max_pixels; /* images above it are refused before decoding */
};

/* Make b->pixels hold at least bytes: 0, or STK_ENOMEM with a message. */
int stk__pixel_buffer_reserve(struct stk__pixel_buffer *b, size_t bytes, struct stk__err *err);

/* Free the pixels (the struct is the caller's). */
void stk__pixel_buffer_free(struct stk__pixel_buffer *b);

#endif
