/* SPDX-License-Identifier: MIT */
/*
 * resize.h - antialiased bilinear or bicubic resampling of RGB8 images,
 * bit-exact with Pillow's Image.resize(size, Image.BILINEAR or
 * Image.BICUBIC, box=...).
 *
 * torchvision's Resize and RandomResizedCrop call exactly that on PIL
 * images, so a model trained through torchvision sees the same pixels when
 * stoker does the transform in C. The work runs once per image on every
 * core; all memory it needs lives in a per-thread scratch that grows to a
 * hard cap, so a call allocates nothing once the scratch is warm.
 */
#ifndef STK_RESIZE_H
#define STK_RESIZE_H

#include <stddef.h>
#include <stdint.h>

/* Most bytes one scratch may hold; a geometry that needs more fails with
 * STK_ENOMEM. Typical crops need well under 1 MiB. */
#define STK__RESIZE_SCRATCH_CAP ((size_t)64 << 20)

/* Largest width or height accepted (Pillow passes the box as C floats,
 * which hold every integer up to 2^24 exactly). */
#define STK__RESIZE_MAX_DIM ((size_t)1 << 24)

/* Coefficient tables, the intermediate rows and accumulators, reused from
 * call to call. Owned by one thread at a time. */
struct stk__resize_scratch;

/* An empty scratch (it grows on first use); NULL when out of memory. */
struct stk__resize_scratch *stk__resize_scratch_new(void);
/* Free a scratch and its buffers; NULL is a no-op. */
void stk__resize_scratch_free(struct stk__resize_scratch *s);

/* Test hook: use the AVX2 kernels (enable != 0, the default where the CPU
 * has AVX2) or the portable ones. Returns whether AVX2 is now in use. */
int stk__resize_scratch_set_simd(struct stk__resize_scratch *s, int enable);

/* Pillow's resampling filters that the resize reproduces. */
enum stk__resize_filter {
    STK__RESIZE_BILINEAR = 0, /* triangle, support 1 (the default) */
    STK__RESIZE_BICUBIC = 1   /* Keys' cubic convolution, a = -0.5, support 2 */
};

/* The filter of every later resize through scratch (a new scratch has
 * STK__RESIZE_BILINEAR). It is a property of the scratch, as the kernels
 * are, because the coefficient tables it keeps are the filter's. */
void stk__resize_scratch_set_filter(struct stk__resize_scratch *s, enum stk__resize_filter filter);

/* The filter's support in source pixels at scale 1 (1 or 2); downscaling
 * by s reads s times as far on each side of a sample's centre. */
double stk__resize_filter_support(enum stk__resize_filter filter);

/* An RGB8 image in memory: width x height pixels, rows stride bytes apart. */
struct stk__rgb8_view {
    const uint8_t *pixels;
    size_t width, height, stride;
};

/* The same, to be written. */
struct stk__rgb8_image {
    uint8_t *pixels;
    size_t width, height, stride;
};

/* A box (x0,y0)-(x1,y1) in pixel coordinates. */
struct stk__box {
    double x0, y0, x1, y1;
};

/*
 * Resample the box of the RGB8 image src into dst, exactly as Pillow's
 * resize(BILINEAR or BICUBIC, box) does, with the scratch's filter.
 * The box is in source pixel coordinates and, like Pillow's, is rounded to
 * C float; it must satisfy 0 <= x0 < x1 <= src width and 0 <= y0 < y1 <= src
 * height.
 * Pixels outside the box but inside the image take part at its edges, as in
 * Pillow. An integer box of exactly dst's size is a plain crop (a copy).
 *
 * flip != 0 mirrors the result left to right while writing it (torchvision's
 * RandomHorizontalFlip after the resize), at no extra cost.
 *
 * src and dst must not overlap. scratch is used by this call only; one
 * scratch per thread. Returns 0, STK_EINVAL (NULL pointer or pixels, zero or
 * too large size, stride below the row size, box outside the image or empty) or
 * STK_ENOMEM (the scratch would exceed STK__RESIZE_SCRATCH_CAP or an
 * allocation failed; the scratch stays usable). dst is unspecified after an
 * error.
 */
int stk__resize_rgb8(const struct stk__rgb8_view *src, const struct stk__box *box,
                     const struct stk__rgb8_image *dst, int flip,
                     struct stk__resize_scratch *scratch);

/* Where stk__resize_rgb8_rows puts the output: row(ctx, y, rgb) for
 * y = 0 .. dst_h-1 in order, rgb the dst_w RGB8 pixels of row y, valid
 * during the call only. */
struct stk__resize_sink {
    void (*row)(void *ctx, size_t y, const uint8_t *rgb);
    void *ctx;
};

/*
 * stk__resize_rgb8 with each output row handed to sink as soon as it is
 * final instead of stored, from a row buffer in the scratch that stays in
 * L1: a caller that converts the rows to another form (dtype, layout)
 * touches each once. The same bytes as stk__resize_rgb8; the same errors,
 * STK_EINVAL too for a NULL sink. Nothing is passed to sink after an
 * error.
 */
int stk__resize_rgb8_rows(const struct stk__rgb8_view *src, const struct stk__box *box,
                          size_t dst_w, size_t dst_h, int flip, const struct stk__resize_sink *sink,
                          struct stk__resize_scratch *scratch);

#endif
