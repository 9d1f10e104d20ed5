/*
 * decode_impl.h - what the per-format decoders share: the decoder object
 * and its growable pixel buffer.
 */
#ifndef STK_DECODE_IMPL_H
#define STK_DECODE_IMPL_H

#include "base/alloc.h"
#include "image/decode.h"
#include "base/error.h"
#include "stoker.h"

struct stk__jpeg;

struct stk__decoder {
    uint64_t max_pixels;
    uint8_t *pixels;        /* region buffer, grown up to max_pixels * 3 */
    size_t capacity;
    struct stk__jpeg *jpeg; /* libjpeg state, created on first use */
};

/* Make d->pixels hold at least bytes; STK_ENOMEM with a message on failure.
 * Here rather than in decode.c, which dispatches to the format decoders:
 * they would otherwise call back into it. */
static inline int stk__decoder_reserve(struct stk__decoder *d, size_t bytes,
                                       struct stk__err *err)
{
    if (bytes <= d->capacity)
        return 0;
    uint8_t *p = stk__realloc(d->pixels, bytes);
    if (p == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for %zu bytes of pixels", bytes);
    d->pixels = p;
    d->capacity = bytes;
    return 0;
}

void stk__jpeg_free(struct stk__jpeg *j);
int stk__jpeg_size(struct stk__decoder *d, const uint8_t *data, size_t size, int *width,
                   int *height, struct stk__err *err);
int stk__jpeg_decode(struct stk__decoder *d, const uint8_t *data, size_t size,
                     const struct stk__decode_request *req, struct stk__decoded *out,
                     struct stk__err *err);

int stk__png_size(struct stk__decoder *d, const uint8_t *data, size_t size, int *width,
                  int *height, struct stk__err *err);
int stk__png_decode(struct stk__decoder *d, const uint8_t *data, size_t size,
                    struct stk__decoded *out, struct stk__err *err);

#endif
