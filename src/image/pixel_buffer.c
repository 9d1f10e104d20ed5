/* SPDX-License-Identifier: MIT */
/*
 * pixel_buffer.c - the decoders' growable pixel buffer (see pixel_buffer.h).
 */
#include "image/pixel_buffer.h"

#include "base/alloc.h"
#include "stoker.h"

int stk__pixel_buffer_reserve(struct stk__pixel_buffer *b, size_t bytes, struct stk__err *err) {
    if (bytes <= b->capacity)
        return 0;
    uint8_t *p = stk__realloc(b->pixels, bytes);
    if (p == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for %zu bytes of pixels", bytes);
    b->pixels = p;
    b->capacity = bytes;
    return 0;
}

void stk__pixel_buffer_free(struct stk__pixel_buffer *b) {
    stk__free(b->pixels);
    b->pixels = NULL;
    b->capacity = 0;
}
