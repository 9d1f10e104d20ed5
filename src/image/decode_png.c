/* SPDX-License-Identifier: MIT */
/*
 * decode_png.c - PNG through libspng, to RGB8 like Pillow's convert("RGB").
 *
 * SPNG_FMT_RGB8 expands palette and gray images, reduces 16-bit samples to
 * their high byte (Pillow's "RGB;16B" raw mode does the same) and drops
 * alpha without compositing, which is what convert("RGB") does. The pixel
 * limit is checked on the header before the image buffer is sized.
 */
#include <spng.h>

#include "base/alloc.h"
#include "image/decode_impl.h"
#include "stoker.h"

static int open_png(spng_ctx **ctx, const uint8_t *data, size_t size, struct spng_ihdr *ihdr,
                    struct stk__err *err)
{
    *ctx = spng_ctx_new(0);
    if (*ctx == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory for a PNG decoder");
    /* Chunk and cache limits keep hostile files from making spng allocate. */
    spng_set_chunk_limits(*ctx, 1u << 24, 1u << 26);
    int r = spng_set_png_buffer(*ctx, data, size);
    if (r == 0)
        r = spng_get_ihdr(*ctx, ihdr);
    if (r != 0)
        return stk__errf(err, STK_EDECODE, "PNG header: %s", spng_strerror(r));
    return 0;
}

/* Both entry points reject images above the pixel limit from the header. */
static int check_limit(const struct stk__pixel_buffer *buf, const struct spng_ihdr *ihdr,
                       struct stk__err *err)
{
    if ((uint64_t)ihdr->width * ihdr->height > buf->max_pixels)
        return stk__errf(err, STK_ELIMIT, "PNG of %ux%u pixels is above the limit of %llu pixels",
                         ihdr->width, ihdr->height, (unsigned long long)buf->max_pixels);
    return 0;
}

int stk__png_size(const struct stk__pixel_buffer *buf, const uint8_t *data, size_t size,
                  int *width, int *height, struct stk__err *err)
{
    spng_ctx *ctx;
    struct spng_ihdr ihdr;
    int rc = open_png(&ctx, data, size, &ihdr, err);
    if (rc == 0)
        rc = check_limit(buf, &ihdr, err);
    if (rc == 0) {
        *width = (int)ihdr.width;
        *height = (int)ihdr.height;
    }
    spng_ctx_free(ctx);
    return rc;
}

int stk__png_decode(struct stk__pixel_buffer *buf, const uint8_t *data, size_t size,
                    struct stk__decoded *out, struct stk__err *err)
{
    spng_ctx *ctx;
    struct spng_ihdr ihdr;
    size_t bytes;
    int rc = open_png(&ctx, data, size, &ihdr, err);
    if (rc < 0)
        goto out;
    rc = check_limit(buf, &ihdr, err);
    if (rc < 0)
        goto out;
    int r = spng_decoded_image_size(ctx, SPNG_FMT_RGB8, &bytes);
    if (r != 0) {
        rc = stk__errf(err, STK_EDECODE, "PNG: %s", spng_strerror(r));
        goto out;
    }
    rc = stk__pixel_buffer_reserve(buf, bytes, err);
    if (rc < 0)
        goto out;
    r = spng_decode_image(ctx, buf->pixels, bytes, SPNG_FMT_RGB8, 0);
    if (r != 0) {
        rc = stk__errf(err, STK_EDECODE, "PNG: %s", spng_strerror(r));
        goto out;
    }
    out->pixels = buf->pixels;
    out->width = out->scaled_width = (int)ihdr.width;
    out->height = out->scaled_height = (int)ihdr.height;
    out->stride = (size_t)ihdr.width * 3;
    out->origin_x = out->origin_y = 0;
    out->scale_x = out->scale_y = 1.0;
out:
    spng_ctx_free(ctx);
    return rc;
}
