/* SPDX-License-Identifier: MIT */
/*
 * decode.h - compressed image bytes to an RGB8 region.
 *
 * JPEG goes through libjpeg-turbo, decoding only the rows and (iMCU-aligned)
 * columns a crop needs, at the smallest DCT scale (1/8, 2/8, 4/8 or 8/8)
 * that keeps the crop at least as large as the request's minimum. PNG goes through libspng (8/16
 * bit, palette, gray; alpha dropped, as Pillow's convert("RGB") does). Both
 * check the pixel count against a limit before allocating anything.
 */
#ifndef STK_DECODE_H
#define STK_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

enum stk__image_format { STK__IMAGE_JPEG, STK__IMAGE_PNG, STK__IMAGE_UNKNOWN };

/* Sniff the format from the first bytes. */
enum stk__image_format stk__image_format(const uint8_t *data, size_t size);

/* A per-thread decoder: libjpeg state and the pixel buffer, reused. */
struct stk__decoder;

struct stk__decoder *stk__decoder_new(uint64_t max_pixels);
void stk__decoder_free(struct stk__decoder *d);

/* Image dimensions from the header. */
int stk__decode_size(struct stk__decoder *d, const uint8_t *data, size_t size, int *width,
                     int *height, struct stk__err *err);

/* What to decode: a rectangle of the full-resolution image, and the
 * smallest size (in output pixels) it must still have after DCT scaling.
 * Rows and columns outside it may be dropped. */
struct stk__decode_request {
    double x0, y0, x1, y1; /* in full-resolution pixels */
    double min_width, min_height;
    int full; /* ignore the above: the whole image at full scale */
};

/* The decoded pixels: a region of the image scaled by scale_x/scale_y
 * (decoded size / full size) whose top-left pixel is (origin_x, origin_y)
 * in scaled coordinates; rows are stride bytes apart, RGB8. Valid until the
 * decoder's next call. */
struct stk__decoded {
    const uint8_t *pixels;
    int width, height;      /* of the region */
    size_t stride;
    int origin_x, origin_y;
    int scaled_width, scaled_height; /* of the whole scaled image */
    double scale_x, scale_y;
};

int stk__decode_region(struct stk__decoder *d, const uint8_t *data, size_t size,
                       const struct stk__decode_request *req, struct stk__decoded *out,
                       struct stk__err *err);

#endif
