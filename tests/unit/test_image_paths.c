/* SPDX-License-Identifier: MIT */
/*
 * test_image_paths.c - every code path of the image stage gives the same
 * bytes: the AVX2 and the portable kernels, the conversion fused into the
 * resampler and run as a pass of its own, on odd sizes (1 to 17 pixels),
 * crops at every column and several rows, both layouts and every dtype.
 * Batches must be the same bytes on hosts with different CPUs: the Dask
 * offload and the hooks depend on it.
 *
 * The truth for a crop is its uint8 NHWC render through the portable
 * kernels (the resampler alone, checked against Pillow elsewhere); every
 * other dtype and layout must be that image through the configuration's
 * tables, placed where the layout says, on each path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "image/augment.h"
#include "base/error.h"
#include "image/image.h"
#include "jpeg_fixture.h"
#include "stoker.h"

/* Output sides, cycled through by the crops. */
static const int sides[] = {1, 3, 5, 7, 9, 11, 13, 15, 17, 2, 16};
#define N_SIDES (sizeof sides / sizeof sides[0])

/* Every dtype in both layouts, and the four choices of kernels x fusion. */
#define N_FORMS 8
#define N_PATHS 4

struct form {
    struct stk__image_config cfg;
    struct stk__image_worker *w;
};

struct bench {
    int out_w, out_h;
    struct form truth; /* uint8 NHWC */
    struct form forms[N_FORMS];
    uint8_t *rgb;        /* the truth's render */
    uint8_t *got, *want; /* one output, as large as float32's */
};

static void form_init(struct form *f, int out_w, int out_h, enum stk_dtype dtype,
                      enum stk_layout layout)
{
    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_TRAIN;
    o.image_size = 1;
    o.image_width = (unsigned)out_w;
    o.image_height = (unsigned)out_h;
    o.dtype = dtype;
    o.layout = layout;
    struct stk__err err;
    assert_int_equal(stk__image_config_init(&f->cfg, &o, &err), 0);
    f->w = stk__image_worker_new(&f->cfg);
    assert_non_null(f->w);
}

static void bench_init(struct bench *b, int out_w, int out_h)
{
    b->out_w = out_w;
    b->out_h = out_h;
    form_init(&b->truth, out_w, out_h, STK_DTYPE_UINT8, STK_LAYOUT_NHWC);
    stk__image_worker_force_paths(b->truth.w, 0, 0);
    for (int i = 0; i < N_FORMS; i++)
        form_init(&b->forms[i], out_w, out_h, (enum stk_dtype)(i / 2), (enum stk_layout)(i % 2));
    size_t n = (size_t)out_w * (size_t)out_h * 3;
    b->rgb = malloc(n);
    b->got = malloc(n * 4);
    b->want = malloc(n * 4);
    assert_true(b->rgb != NULL && b->got != NULL && b->want != NULL);
}

static void bench_free(struct bench *b)
{
    stk__image_worker_free(b->truth.w);
    for (int i = 0; i < N_FORMS; i++)
        stk__image_worker_free(b->forms[i].w);
    free(b->rgb);
    free(b->got);
    free(b->want);
}

/* rgb, the truth, as cfg's dtype and layout would hold it. */
static void expected(const struct stk__image_config *cfg, const uint8_t *rgb, uint8_t *out)
{
    const size_t n = (size_t)cfg->width * (size_t)cfg->height;
    for (size_t i = 0; i < n; i++)
        for (size_t c = 0; c < 3; c++) {
            const size_t at = cfg->layout == STK_LAYOUT_NCHW ? c * n + i : 3 * i + c;
            const uint8_t v = rgb[3 * i + c];
            switch (cfg->dtype) {
            case STK_DTYPE_UINT8:
                out[at] = v;
                break;
            case STK_DTYPE_FLOAT32:
                memcpy(out + 4 * at, &cfg->lut_f32[c][v], 4);
                break;
            default:
                memcpy(out + 2 * at, &cfg->lut_u16[c][v], 2);
                break;
            }
        }
}

static const char *const dtype_names[] = {"uint8", "float32", "float16", "bfloat16"};

/* Render one crop on every form and path against the truth. Returns the
 * number of renders compared. */
static int check_crop(struct bench *b, const uint8_t *jpeg, size_t size, int img_w, int img_h,
                      const struct stk__crop *crop, int eval)
{
    struct stk__err err;
    int rc = stk__image_render(b->truth.w, &b->truth.cfg, jpeg, size, crop, eval, b->rgb, &err);
    if (rc != 0)
        fail_msg("%dx%d crop (%g,%g %gx%g) -> %dx%d: %s", img_w, img_h, crop->left, crop->top,
                 crop->width, crop->height, b->out_w, b->out_h, err.msg);
    int renders = 1;
    for (int i = 0; i < N_FORMS; i++) {
        struct form *f = &b->forms[i];
        const size_t bytes = stk__image_bytes(&f->cfg);
        expected(&f->cfg, b->rgb, b->want);
        for (int path = 0; path < N_PATHS; path++) {
            const int simd = path & 1, fuse = path >> 1;
            stk__image_worker_force_paths(f->w, simd, fuse);
            memset(b->got, 0xa5, bytes);
            assert_int_equal(stk__image_render(f->w, &f->cfg, jpeg, size, crop, eval, b->got, &err),
                             0);
            renders++;
            if (memcmp(b->got, b->want, bytes) == 0)
                continue;
            size_t at = 0;
            while (b->got[at] == b->want[at])
                at++;
            fail_msg("%dx%d image, %s crop (left %g top %g %gx%g, flip %d) -> %dx%d %s %s, "
                     "simd %d fuse %d: byte %zu is %u, the truth gives %u",
                     img_w, img_h, eval ? "eval" : "train", crop->left, crop->top, crop->width,
                     crop->height, crop->flip, b->out_w, b->out_h, dtype_names[f->cfg.dtype],
                     f->cfg.layout == STK_LAYOUT_NCHW ? "NCHW" : "NHWC", simd, fuse, at, b->got[at],
                     b->want[at]);
        }
    }
    return renders;
}

/* One image: train crops starting at every column and at three rows, to
 * the image's edge and narrow ones, both flips, then its eval crop; each
 * output size in turn. */
static int check_image(int img_w, int img_h, int h_samp, int v_samp, unsigned seed)
{
    unsigned char *jpeg;
    size_t size;
    jpeg_fixture_sampled(img_w, img_h, seed, h_samp, v_samp, &jpeg, &size);
    int renders = 0, k = (int)seed;
    const int tops[] = {0, img_h / 2, img_h - 1};
    for (int left = 0; left < img_w; left++)
        for (int t = 0; t < 3; t++)
            for (int narrow = 0; narrow < 2; narrow++) {
                const int top = tops[t];
                const int cw = narrow ? (img_w - left + 1) / 2 : img_w - left;
                const int ch = narrow ? (img_h - top + 2) / 3 : img_h - top;
                struct stk__crop crop = {.top = top,
                                         .left = left,
                                         .height = ch,
                                         .width = cw,
                                         .flip = (left + t + narrow) & 1};
                struct bench b;
                bench_init(&b, sides[k % N_SIDES], sides[(k * 5 + 3) % N_SIDES]);
                k++;
                renders += check_crop(&b, jpeg, size, img_w, img_h, &crop, 0);
                bench_free(&b);
            }
    for (int flip = 0; flip < 2; flip++) {
        struct bench b;
        bench_init(&b, sides[k % N_SIDES], sides[(k * 7 + 1) % N_SIDES]);
        k++;
        struct stk__crop crop;
        stk__crop_eval(img_w, img_h, b.out_h, b.out_w, &crop);
        crop.flip = flip;
        renders += check_crop(&b, jpeg, size, img_w, img_h, &crop, 1);
        bench_free(&b);
    }
    free(jpeg);
    return renders;
}

/* Widths 1 to 17 at heights from 1 to 17, in 4:2:0 and 4:4:4. */
static void test_odd_sizes(void **state)
{
    (void)state;
    static const int heights[] = {1, 2, 9, 17};
    int renders = 0;
    for (int w = 1; w <= 17; w++)
        for (size_t h = 0; h < sizeof heights / sizeof heights[0]; h++) {
            const int full = (w + (int)h) % 2; /* 4:4:4 every other image */
            renders += check_image(w, heights[h], full ? 1 : 2, full ? 1 : 2, (unsigned)(w + h));
        }
    print_message("%d renders agree\n", renders);
}

/* Images wide enough for the AVX2 kernels' main loops (groups of four
 * outputs, 32-byte vertical blocks) with the odd output sizes. */
static void test_wider_images(void **state)
{
    (void)state;
    int renders = check_image(61, 45, 2, 2, 7) + check_image(100, 23, 1, 1, 8);
    print_message("%d renders agree\n", renders);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_odd_sizes),
        cmocka_unit_test(test_wider_images),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
