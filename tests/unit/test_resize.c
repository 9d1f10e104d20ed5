/* SPDX-License-Identifier: MIT */
/*
 * test_resize.c - Pillow-exact bilinear and bicubic resize: geometry checks,
 * copies, flips, constants, outputs recorded from Pillow 9.4, a plain
 * two-pass model of Pillow's algorithm on random images (both filters, so
 * the bicubic's negative weights run every kernel under the sanitizers),
 * and the scratch's memory limits.
 * The comparison with Pillow itself on photographs is in
 * tests/integration/test_resize_vs_pil.py.
 */
#include <math.h> /* NAN, INFINITY, fabs (a builtin) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "image/resize.h"
#include "base/rng.h"
#include "stoker.h"

/* An image in a buffer that ends exactly at its last pixel (ASan then
 * catches any read past it). */
struct image {
    uint8_t *pix;
    size_t w, h, stride;
};

static struct image image_new(size_t w, size_t h, size_t pad)
{
    struct image im = {NULL, w, h, w * 3 + pad};
    im.pix = calloc(1, im.stride * (h - 1) + w * 3);
    assert_non_null(im.pix);
    return im;
}

static struct image image_random(size_t w, size_t h, size_t pad, struct stk__rng *rng)
{
    struct image im = image_new(w, h, pad);
    for (size_t y = 0; y < h; y++)
        for (size_t i = 0; i < w * 3; i++)
            im.pix[y * im.stride + i] = (uint8_t)stk__rng_next(rng);
    return im;
}

/* stk__resize_rgb8 with its views and box spelled out, so that each case of
 * the argument tables below fits one line. */
static int resize_args(const uint8_t *src, size_t src_w, size_t src_h, size_t src_stride, double x0,
                       double y0, double x1, double y1, uint8_t *dst, size_t dst_w, size_t dst_h,
                       size_t dst_stride, int flip, struct stk__resize_scratch *s)
{
    const struct stk__rgb8_view in = {src, src_w, src_h, src_stride};
    const struct stk__box box = {x0, y0, x1, y1};
    const struct stk__rgb8_image out = {dst, dst_w, dst_h, dst_stride};
    return stk__resize_rgb8(&in, &box, &out, flip, s);
}

static int resize(const struct image *src, double x0, double y0, double x1, double y1,
                  struct image *dst, int flip, struct stk__resize_scratch *s)
{
    return resize_args(src->pix, src->w, src->h, src->stride, x0, y0, x1, y1, dst->pix, dst->w,
                            dst->h, dst->stride, flip, s);
}

/* Compare two images pixel by pixel; on a difference print where. */
static void assert_same_image(const struct image *a, const struct image *b, const char *what)
{
    assert_int_equal(a->w, b->w);
    assert_int_equal(a->h, b->h);
    for (size_t y = 0; y < a->h; y++) {
        for (size_t i = 0; i < a->w * 3; i++) {
            int va = a->pix[y * a->stride + i], vb = b->pix[y * b->stride + i];
            if (va != vb) {
                print_error("%s: pixel (%zu,%zu) channel %zu: %d != %d\n", what, i / 3, y, i % 3,
                            va, vb);
                fail();
            }
        }
    }
}

/* ------------------------------------------------------------------------
 * A plain model of Pillow's resample (Resample.c): weights per output in
 * double, normalised, rounded to 22-bit fixed point; the horizontal pass over
 * every row from the first to the last the vertical pass uses, into a uint8
 * image; then the vertical pass. No padding, ring, copies or caching. */

struct model_axis {
    int *first, *count;
    int32_t *k;
    int ksize;
};

/* Pillow's filters, written from their definitions in Resample.c. */
static double model_filter(int bicubic, double x)
{
    x = fabs(x);
    if (!bicubic)
        return x < 1.0 ? 1.0 - x : 0.0;
    if (x < 1.0)
        return (1.5 * x - 2.5) * x * x + 1; /* a = -0.5 */
    if (x < 2.0)
        return -0.5 * (((x - 5) * x + 8) * x - 4);
    return 0.0;
}

static void model_axis(struct model_axis *a, int in_size, float in0, float in1, int out_size,
                       int bicubic)
{
    double scale = (double)(in1 - in0) / out_size;
    double fscale = scale < 1.0 ? 1.0 : scale;
    double support = (bicubic ? 2.0 : 1.0) * fscale;
    int ceil_support = (int)support + ((double)(int)support < support); /* no libm */
    a->ksize = ceil_support * 2 + 1;
    a->first = calloc((size_t)out_size, sizeof(int));
    a->count = calloc((size_t)out_size, sizeof(int));
    a->k = calloc((size_t)out_size * (size_t)a->ksize, sizeof(int32_t));
    double *w = calloc((size_t)a->ksize, sizeof(double));
    assert_true(a->first && a->count && a->k && w);
    for (int i = 0; i < out_size; i++) {
        double center = in0 + (i + 0.5) * scale;
        int lo = (int)(center - support + 0.5), hi = (int)(center + support + 0.5);
        lo = lo < 0 ? 0 : lo;
        hi = hi > in_size ? in_size : hi;
        double sum = 0;
        for (int x = lo; x < hi; x++) {
            w[x - lo] = model_filter(bicubic, (x - center + 0.5) * (1.0 / fscale));
            sum += w[x - lo];
        }
        for (int x = lo; x < hi; x++) {
            double v = sum != 0.0 ? w[x - lo] / sum : w[x - lo];
            a->k[i * a->ksize + x - lo] = (int32_t)(v < 0 ? v * (1 << 22) - 0.5
                                                          : v * (1 << 22) + 0.5);
        }
        a->first[i] = lo;
        a->count[i] = hi - lo;
    }
    free(w);
}

static void model_axis_free(struct model_axis *a)
{
    free(a->first);
    free(a->count);
    free(a->k);
}

static uint8_t model_clip(int32_t v)
{
    if (v < 0)
        return 0;
    v >>= 22;
    return (uint8_t)(v > 255 ? 255 : v);
}

static void model_resize(const struct image *src, float box[4], struct image *dst, int flip,
                         int bicubic)
{
    struct model_axis h, v;
    model_axis(&h, (int)src->w, box[0], box[2], (int)dst->w, bicubic);
    model_axis(&v, (int)src->h, box[1], box[3], (int)dst->h, bicubic);
    int y_first = v.first[0];
    int y_last = v.first[dst->h - 1] + v.count[dst->h - 1];
    uint8_t *mid = calloc((size_t)(y_last - y_first) * dst->w * 3, 1);
    assert_non_null(mid);
    for (int y = y_first; y < y_last; y++) {
        const uint8_t *row = src->pix + (size_t)y * src->stride;
        for (size_t i = 0; i < dst->w; i++) {
            for (int c = 0; c < 3; c++) {
                int32_t acc = 1 << 21;
                for (int t = 0; t < h.count[i]; t++)
                    acc += row[(h.first[i] + t) * 3 + c] * h.k[i * h.ksize + t];
                mid[((size_t)(y - y_first) * dst->w + i) * 3 + c] = model_clip(acc);
            }
        }
    }
    for (size_t j = 0; j < dst->h; j++) {
        for (size_t i = 0; i < dst->w; i++) {
            size_t out_i = flip ? dst->w - 1 - i : i;
            for (int c = 0; c < 3; c++) {
                int32_t acc = 1 << 21;
                for (int t = 0; t < v.count[j]; t++) {
                    size_t y = (size_t)(v.first[j] - y_first + t);
                    acc += mid[(y * dst->w + i) * 3 + c] * v.k[j * v.ksize + t];
                }
                dst->pix[j * dst->stride + out_i * 3 + c] = model_clip(acc);
            }
        }
    }
    free(mid);
    model_axis_free(&h);
    model_axis_free(&v);
}

/* ------------------------------------------------------------------------ */

static void test_geometry_errors(void **state)
{
    (void)state;
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    assert_non_null(s);
    uint8_t src[4 * 3 * 3] = {0}, dst[2 * 2 * 3];
    const size_t big = STK__RESIZE_MAX_DIM + 1;
#define R(...) resize_args(__VA_ARGS__)
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, 2, 2, 6, 0, s), 0);
    assert_int_equal(R(NULL, 4, 3, 12, 0, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, NULL, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, 2, 2, 6, 0, NULL), STK_EINVAL);
    assert_int_equal(R(src, 0, 3, 12, 0, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 0, 12, 0, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, 0, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, 2, 0, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, big, 1, big * 3, 0, 0, 1, 1, dst, 1, 1, 3, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, big, 1, big * 3, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 11, 0, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3, dst, 2, 2, 5, 0, s), STK_EINVAL);
    /* box outside the image, empty, reversed, NaN, or empty once a float */
    assert_int_equal(R(src, 4, 3, 12, -0.5, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, -1, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4.01, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, 3.5, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 2, 0, 2, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 2, 4, 1, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, NAN, 0, 4, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, 4, NAN, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 0, 0, INFINITY, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    assert_int_equal(R(src, 4, 3, 12, 1.0, 0, 1.0 + 1e-12, 3, dst, 2, 2, 6, 0, s), STK_EINVAL);
    /* the scratch still works after errors */
    assert_int_equal(R(src, 4, 3, 12, 0.5, 0.5, 3.5, 2.5, dst, 2, 2, 6, 1, s), 0);
#undef R
    stk__resize_scratch_free(s);
    stk__resize_scratch_free(NULL);
}

/* An integer box the size of dst is a crop, mirrored with flip; strides
 * with padding are honoured and the padding is left alone. */
static void test_identity_copy(void **state)
{
    (void)state;
    struct stk__rng rng;
    stk__rng_seed(&rng, 1);
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    struct image src = image_random(37, 29, 5, &rng);
    struct image dst = image_new(37, 29, 7);
    memset(dst.pix, 0xAB, dst.stride * (dst.h - 1) + dst.w * 3);
    assert_int_equal(resize(&src, 0, 0, 37, 29, &dst, 0, s), 0);
    assert_same_image(&src, &dst, "full copy");
    for (size_t y = 0; y + 1 < dst.h; y++)
        for (size_t i = dst.w * 3; i < dst.stride; i++)
            assert_int_equal(dst.pix[y * dst.stride + i], 0xAB);

    struct image crop = image_new(11, 6, 0);
    assert_int_equal(resize(&src, 20, 17, 31, 23, &crop, 0, s), 0);
    for (size_t y = 0; y < 6; y++)
        assert_memory_equal(crop.pix + y * crop.stride, src.pix + (17 + y) * src.stride + 20 * 3,
                            11 * 3);
    assert_int_equal(resize(&src, 20, 17, 31, 23, &crop, 1, s), 0);
    for (size_t y = 0; y < 6; y++)
        for (size_t x = 0; x < 11; x++)
            assert_memory_equal(crop.pix + y * crop.stride + x * 3,
                                src.pix + (17 + y) * src.stride + (20 + 10 - x) * 3, 3);

    /* One axis a crop, the other resampled: the same as the model. */
    struct image got = image_new(11, 9, 0), want = image_new(11, 9, 0);
    float box[4] = {20, 3.25f, 31, 28.5f};
    for (int flip = 0; flip <= 1; flip++) {
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, flip, s), 0);
        model_resize(&src, box, &want, flip, 0);
        assert_same_image(&got, &want, "crop x, resample y");
    }
    free(got.pix);
    free(want.pix);
    free(crop.pix);
    free(src.pix);
    free(dst.pix);
    stk__resize_scratch_free(s);
}

/* Geometries that exercise every kernel: up and down, by small and large
 * factors, fractional boxes, windows at the edges, single rows/columns. */
static const struct geometry {
    size_t sw, sh, dw, dh;
    float box[4]; /* x1 == 0: the whole image */
} geometries[] = {
    {500, 375, 224, 224, {61.5f, 10.25f, 400.75f, 350}},
    {100, 80, 224, 224, {0}},
    {100, 80, 37, 23, {0}},
    {64, 64, 64, 64, {0.5f, 0.5f, 64, 64}},
    {64, 48, 13, 7, {3.3f, 1.7f, 60.9f, 47.2f}},
    {300, 200, 3, 2, {0}},
    {9, 7, 200, 150, {0}},
    {9, 7, 200, 150, {2.5f, 1.5f, 3.5f, 2.5f}},
    {1, 1, 5, 4, {0}},
    {1, 40, 3, 5, {0}},
    {40, 1, 5, 3, {0}},
    {5, 5, 1, 1, {0}},
    {256, 17, 16, 17, {0}},
    {17, 256, 17, 16, {0}},
    {1000, 20, 2, 3, {0}},
    {33, 33, 32, 34, {0.1f, 0, 33, 32.9f}},
};

static void geometry_box(const struct geometry *g, float box[4])
{
    if (g->box[2] == 0) {
        box[0] = box[1] = 0;
        box[2] = (float)g->sw;
        box[3] = (float)g->sh;
    } else {
        memcpy(box, g->box, 4 * sizeof(float));
    }
}

static void test_flip_mirrors(void **state)
{
    (void)state;
    struct stk__rng rng;
    stk__rng_seed(&rng, 2);
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    for (size_t n = 0; n < sizeof geometries / sizeof geometries[0]; n++) {
        const struct geometry *g = &geometries[n];
        float box[4];
        geometry_box(g, box);
        struct image src = image_random(g->sw, g->sh, 0, &rng);
        struct image a = image_new(g->dw, g->dh, 0), b = image_new(g->dw, g->dh, 0);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &a, 0, s), 0);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &b, 1, s), 0);
        for (size_t y = 0; y < g->dh; y++)
            for (size_t x = 0; x < g->dw; x++)
                assert_memory_equal(a.pix + y * a.stride + x * 3,
                                    b.pix + y * b.stride + (g->dw - 1 - x) * 3, 3);
        free(a.pix);
        free(b.pix);
        free(src.pix);
    }
    stk__resize_scratch_free(s);
}

static void test_constant_stays_constant(void **state)
{
    (void)state;
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    const uint8_t colours[][3] = {{0, 0, 0}, {255, 255, 255}, {1, 128, 254}, {77, 3, 200}};
    for (size_t c = 0; c < sizeof colours / sizeof colours[0]; c++) {
        for (size_t n = 0; n < sizeof geometries / sizeof geometries[0]; n++) {
            const struct geometry *g = &geometries[n];
            float box[4];
            geometry_box(g, box);
            struct image src = image_new(g->sw, g->sh, 0);
            for (size_t i = 0; i < g->sw * g->sh; i++)
                memcpy(src.pix + 3 * i, colours[c], 3);
            struct image dst = image_new(g->dw, g->dh, 0);
            assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &dst, (int)(n & 1), s),
                             0);
            for (size_t i = 0; i < g->dw * g->dh; i++)
                assert_memory_equal(dst.pix + 3 * i, colours[c], 3);
            free(dst.pix);
            free(src.pix);
        }
    }
    stk__resize_scratch_free(s);
}

/* Outputs of Pillow 9.4: Image.frombytes("RGB", (sw, sh), src).resize((dw,
 * dh), Image.BILINEAR, box=box) with box None (full) where x1 is 0. */
static const struct known {
    size_t sw, sh, dw, dh;
    float box[4];
    uint8_t src[60];
    uint8_t out[60];
} known_cases[] = {
    {4,
     3,
     2,
     2,
     {0},
     {68, 32,  130, 60, 253, 230, 241, 194, 107, 48, 249, 14,  199, 221, 1,   228, 136, 117,
      52, 162, 15,  11, 13,  4,   195, 110, 216, 14, 113, 224, 253, 119, 176, 118, 112, 235},
     {127, 160, 126, 105, 177, 63, 150, 137, 154, 123, 107, 139}},
    {3,
     2,
     5,
     4,
     {0},
     {28, 46, 43, 184, 86, 157, 128, 108, 18, 81, 220, 201, 190, 227, 137, 18, 14, 186},
     {28, 46,  43,  90,  62,  89,  184, 86,  157, 150, 99, 74,  128, 108, 18,
      41, 90,  83,  99,  102, 111, 186, 121, 152, 134, 99, 97,  101, 85,  60,
      68, 177, 162, 116, 183, 154, 189, 192, 142, 103, 99, 143, 46,  38,  144,
      81, 220, 201, 125, 223, 175, 190, 227, 137, 87,  99, 166, 18,  14,  186}},
    {5,
     4,
     3,
     2,
     {0.5f, 0.25f, 4.75f, 3.5f},
     {121, 66,  189, 242, 33,  6,   240, 132, 119, 98,  240, 243, 203, 77,  118,
      77,  199, 7,   32,  81,  21,  154, 15,  137, 242, 198, 218, 202, 227, 68,
      187, 49,  18,  69,  253, 111, 132, 223, 154, 215, 197, 179, 208, 118, 172,
      14,  143, 83,  167, 53,  108, 136, 145, 63,  32,  246, 247, 45,  176, 34},
     {123, 94, 52, 178, 115, 140, 191, 183, 159, 104, 142, 76, 138, 177, 141, 161, 181, 158}},
    {6,
     1,
     2,
     1,
     {0},
     {120, 155, 52, 202, 245, 79, 46, 34, 10, 205, 148, 30, 113, 184, 141, 88, 54, 134},
     {143, 158, 49, 121, 124, 95}},
    {1,
     5,
     3,
     2,
     {0, 1.5f, 1, 5},
     {130, 183, 14, 238, 127, 26, 80, 57, 190, 240, 126, 194, 52, 127, 6},
     {156, 90, 145, 156, 90, 145, 156, 90, 145, 134, 123, 95, 134, 123, 95, 134, 123, 95}},
};

static void test_known_cases(void **state)
{
    (void)state;
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    for (size_t n = 0; n < sizeof known_cases / sizeof known_cases[0]; n++) {
        const struct known *k = &known_cases[n];
        float box[4] = {0, 0, (float)k->sw, (float)k->sh};
        if (k->box[2] != 0)
            memcpy(box, k->box, sizeof box);
        uint8_t out[60];
        memset(out, 0, sizeof out);
        assert_int_equal(resize_args(k->src, k->sw, k->sh, k->sw * 3, box[0], box[1], box[2],
                                          box[3], out, k->dw, k->dh, k->dw * 3, 0, s),
                         0);
        if (memcmp(out, k->out, k->dw * k->dh * 3) != 0)
            print_error("known case %zu differs\n", n);
        assert_memory_equal(out, k->out, k->dw * k->dh * 3);
    }
    stk__resize_scratch_free(s);
}

/* The optimised paths (padded windows, the row ring, copies, cached tables,
 * reused scratch) against the plain model, on fixed and random geometries,
 * with the filter of the scratches. */
static void matches_model(int bicubic)
{
    struct stk__rng rng;
    stk__rng_seed(&rng, 3 + (uint64_t)bicubic);
    const enum stk__resize_filter filter = bicubic ? STK__RESIZE_BICUBIC : STK__RESIZE_BILINEAR;
    /* The AVX2 kernels where the CPU has them, and the portable ones. */
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    struct stk__resize_scratch *portable = stk__resize_scratch_new();
    assert_int_equal(stk__resize_scratch_set_simd(portable, 0), 0);
    stk__resize_scratch_set_filter(s, filter);
    stk__resize_scratch_set_filter(portable, filter);
    print_message("AVX2 kernels: %s\n", stk__resize_scratch_set_simd(s, 1) ? "yes" : "no");
    char what[160];
    const size_t n_fixed = sizeof geometries / sizeof geometries[0];
    for (size_t n = 0; n < n_fixed + 300; n++) {
        struct geometry g;
        float box[4];
        if (n < n_fixed) {
            g = geometries[n];
            geometry_box(&g, box);
        } else {
            /* mostly small, every tenth photo-sized */
            const uint64_t big = n % 10 == 0 ? 6 : 1;
            g.sw = 1 + stk__rng_below(&rng, 120 * big);
            g.sh = 1 + stk__rng_below(&rng, 120 * big);
            g.dw = 1 + stk__rng_below(&rng, 150 * big);
            g.dh = 1 + stk__rng_below(&rng, 150 * big);
            /* boxes of random position and size, in steps of 1/8 pixel or
             * integers (then sometimes exactly the output size) */
            for (int axis = 0; axis < 2; axis++) {
                size_t size = axis ? g.sh : g.sw, out = axis ? g.dh : g.dw;
                float lo, hi;
                if (stk__rng_below(&rng, 3) == 0) {
                    lo = (float)stk__rng_below(&rng, size);
                    hi = lo + 1 + (float)stk__rng_below(&rng, size - (size_t)lo);
                    if (out <= size - (size_t)lo && stk__rng_below(&rng, 2) == 0)
                        hi = lo + (float)out;
                } else {
                    uint64_t a = stk__rng_below(&rng, size * 8 + 1);
                    uint64_t b = stk__rng_below(&rng, size * 8 + 1);
                    if (a == b)
                        b = a == 0 ? 1 : a - 1;
                    lo = (float)(a < b ? a : b) / 8;
                    hi = (float)(a < b ? b : a) / 8;
                }
                box[axis] = lo;
                box[axis + 2] = hi;
            }
        }
        int flip = (int)stk__rng_below(&rng, 2);
        struct image src = image_random(g.sw, g.sh, stk__rng_below(&rng, 2) * 5, &rng);
        struct image got = image_new(g.dw, g.dh, stk__rng_below(&rng, 2) * 3);
        struct image want = image_new(g.dw, g.dh, 0);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, flip, s), 0);
        model_resize(&src, box, &want, flip, bicubic);
        snprintf(what, sizeof what, "%s %zux%zu box (%g,%g,%g,%g) -> %zux%zu flip %d",
                 bicubic ? "bicubic" : "bilinear", g.sw, g.sh, (double)box[0], (double)box[1],
                 (double)box[2], (double)box[3], g.dw, g.dh, flip);
        assert_same_image(&got, &want, what);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, flip, portable), 0);
        assert_same_image(&got, &want, what);
        /* The same call again (cached tables) and on a fresh scratch. */
        struct stk__resize_scratch *fresh = stk__resize_scratch_new();
        stk__resize_scratch_set_filter(fresh, filter);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, flip, fresh), 0);
        assert_same_image(&got, &want, what);
        assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, flip, fresh), 0);
        assert_same_image(&got, &want, what);
        stk__resize_scratch_free(fresh);
        free(got.pix);
        free(want.pix);
        free(src.pix);
    }
    stk__resize_scratch_free(s);
    stk__resize_scratch_free(portable);
}

static void test_matches_model(void **state)
{
    (void)state;
    matches_model(0);
}

static void test_bicubic_matches_model(void **state)
{
    (void)state;
    matches_model(1);
}

/* A geometry whose buffers exceed the cap fails cleanly, and the scratch
 * keeps working. A column of rows shrunk to one row widened to many columns
 * needs a ring of every source row times the output row. */
static void test_scratch_cap(void **state)
{
    (void)state;
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    const size_t rows = 1024, wide = (size_t)1 << 15;
    uint8_t *src = calloc(rows, 3);
    uint8_t *dst = malloc(wide * 3);
    assert_true(src != NULL && dst != NULL);
    for (size_t y = 0; y < rows; y++)
        src[3 * y] = (uint8_t)y;
    /* 256 rows x 2^14 x 3 bytes: 12 MiB of ring, under the cap */
    assert_int_equal(
        resize_args(src, 1, 256, 3, 0, 0, 1, 256, dst, wide / 2, 1, wide * 3, 0, s), 0);
    for (size_t x = 0; x < wide / 2; x++)
        assert_int_equal(dst[3 * x], 128); /* as Pillow: the mean of 0..255 */
    /* 1024 rows x 2^15 x 3 bytes: 96 MiB */
    assert_int_equal(
        resize_args(src, 1, rows, 3, 0, 0, 1, (double)rows, dst, wide, 1, wide * 3, 0, s),
        STK_ENOMEM);
    uint8_t small[2 * 2 * 3] = {10, 20, 30, 10, 20, 30, 10, 20, 30, 10, 20, 30};
    assert_int_equal(resize_args(small, 2, 2, 6, 0.5, 0, 2, 2, dst, 3, 5, 9, 0, s), 0);
    for (size_t i = 0; i < 15; i++)
        assert_memory_equal(dst + 3 * i, small, 3);
    free(src);
    free(dst);
    stk__resize_scratch_free(s);
}

/* Fail the Nth allocation for every N: a clean STK_ENOMEM (or NULL from
 * _new), no leak, and the same result once memory is back. */
static void test_allocation_failures(void **state)
{
    (void)state;
    struct stk__rng rng;
    stk__rng_seed(&rng, 4);
    struct image src = image_random(50, 40, 0, &rng);
    struct image want = image_new(23, 31, 0), got = image_new(23, 31, 0);
    const float box[4] = {1.5f, 2, 47, 39.5f};
    model_resize(&src, (float *)box, &want, 1, 0);
    int succeeded = 0;
    for (unsigned long n = 1; n < 50 && !succeeded; n++) {
        stk__alloc_fail_after(n);
        struct stk__resize_scratch *s = stk__resize_scratch_new();
        int rc = s == NULL ? STK_ENOMEM : resize(&src, box[0], box[1], box[2], box[3], &got, 1, s);
        stk__alloc_fail_after(0);
        if (rc == 0) {
            succeeded = 1;
            assert_same_image(&got, &want, "after failures");
        } else {
            assert_int_equal(rc, STK_ENOMEM);
            if (s != NULL) {
                /* the same scratch recovers */
                assert_int_equal(resize(&src, box[0], box[1], box[2], box[3], &got, 1, s), 0);
                assert_same_image(&got, &want, "recovered");
            }
        }
        stk__resize_scratch_free(s);
    }
    assert_true(succeeded);
    free(src.pix);
    free(want.pix);
    free(got.pix);
}

/* Once the scratch has grown for a geometry, calls of that size or smaller
 * allocate nothing (the hot path of an image worker). */
static void test_no_allocation_when_warm(void **state)
{
    (void)state;
    struct stk__rng rng;
    stk__rng_seed(&rng, 5);
    struct stk__resize_scratch *s = stk__resize_scratch_new();
    struct image src = image_random(500, 375, 0, &rng);
    struct image dst = image_new(224, 224, 0);
    /* warm up on the largest windows: the whole image, both flips */
    assert_int_equal(resize(&src, 0, 0, 500, 375, &dst, 0, s), 0);
    assert_int_equal(resize(&src, 0, 0, 500, 375, &dst, 1, s), 0);
    stk__alloc_fail_after(0); /* reset the count */
    for (int n = 0; n < 50; n++) {
        double w = 20 + (double)stk__rng_below(&rng, 480),
               h = 20 + (double)stk__rng_below(&rng, 355);
        double x0 = (double)stk__rng_below(&rng, (uint64_t)(500 - w) + 1);
        double y0 = (double)stk__rng_below(&rng, (uint64_t)(375 - h) + 1);
        assert_int_equal(resize(&src, x0, y0, x0 + w, y0 + h, &dst, n & 1, s), 0);
    }
    assert_int_equal(stk__alloc_fail_after(0), 0);
    free(src.pix);
    free(dst.pix);
    stk__resize_scratch_free(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_geometry_errors),
        cmocka_unit_test(test_identity_copy),
        cmocka_unit_test(test_flip_mirrors),
        cmocka_unit_test(test_constant_stays_constant),
        cmocka_unit_test(test_known_cases),
        cmocka_unit_test(test_matches_model),
        cmocka_unit_test(test_bicubic_matches_model),
        cmocka_unit_test(test_scratch_cap),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_no_allocation_when_warm),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
