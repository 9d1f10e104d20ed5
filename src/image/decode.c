/* SPDX-License-Identifier: MIT */
/*
 * decode.c - format sniffing, the decoder object, dispatch by format.
 */
#include "image/decode.h"

#include <string.h>

#include "base/alloc.h"
#include "image/decode_impl.h"
#include "stoker.h"

enum stk__image_format stk__image_format(const uint8_t *data, size_t size)
{
    static const uint8_t png_magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        return STK__IMAGE_JPEG;
    if (size >= 8 && memcmp(data, png_magic, 8) == 0)
        return STK__IMAGE_PNG;
    return STK__IMAGE_UNKNOWN;
}

struct stk__decoder {
    struct stk__pixel_buffer buf;
    struct stk__jpeg *jpeg; /* libjpeg state, created on first use */
};

struct stk__decoder *stk__decoder_new(uint64_t max_pixels)
{
    struct stk__decoder *d = stk__calloc(1, sizeof *d);
    if (d != NULL)
        d->buf.max_pixels = max_pixels;
    return d;
}

void stk__decoder_free(struct stk__decoder *d)
{
    if (d == NULL)
        return;
    stk__jpeg_free(d->jpeg);
    stk__pixel_buffer_free(&d->buf);
    stk__free(d);
}

int stk__decode_size(struct stk__decoder *d, const uint8_t *data, size_t size, int *width,
                     int *height, struct stk__err *err)
{
    switch (stk__image_format(data, size)) {
    case STK__IMAGE_JPEG: return stk__jpeg_size(&d->jpeg, &d->buf, data, size, width, height, err);
    case STK__IMAGE_PNG: return stk__png_size(&d->buf, data, size, width, height, err);
    default: return stk__errf(err, STK_EDECODE, "not a JPEG or PNG image");
    }
}

int stk__decode_region(struct stk__decoder *d, const uint8_t *data, size_t size,
                       const struct stk__decode_request *req, struct stk__decoded *out,
                       struct stk__err *err)
{
    switch (stk__image_format(data, size)) {
    case STK__IMAGE_JPEG: return stk__jpeg_decode(&d->jpeg, &d->buf, data, size, req, out, err);
    case STK__IMAGE_PNG: return stk__png_decode(&d->buf, data, size, out, err);
    default: return stk__errf(err, STK_EDECODE, "not a JPEG or PNG image");
    }
}
