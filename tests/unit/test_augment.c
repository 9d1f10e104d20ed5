/* SPDX-License-Identifier: MIT */
/*
 * test_augment.c - properties of the augmentation ops, draws and batch
 * mixing: every op on tiny, odd and large images with tiny, odd, huge,
 * infinite and NaN magnitudes reads nothing outside the image (the image
 * and scratch end exactly at their last byte, so ASan sees any over-read);
 * identities (zero shift, factor 1, 8 bits, threshold 256); a shift past
 * the image leaves only the fill; random geometric ops on random sizes
 * only take values of the image or the fill (nearest) or within their
 * range (bilinear); the draws stay within their tables; and
 * Mixup/CutMix keep their box inside the image and mix the rolled batch.
 * Fidelity against torchvision is tests/integration/test_augment_vs_torchvision.py.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "image/augment.h"
#include "image/augment_ops.h"
#include "image/augment_policy.h"
#include "image/image.h"
#include "pipeline/mix.h"
#include "base/rng.h"

struct img {
    uint8_t *pix, *scratch;
    struct stk__aug_image view;
    size_t n;
};

static void img_new(struct img *im, int w, int h, uint64_t seed)
{
    im->n = (size_t)w * (size_t)h * 3;
    im->pix = stk__malloc(im->n);
    im->scratch = stk__malloc(im->n + STK__AUG_SCRATCH_SLACK); /* the pixels end exactly */
    assert_non_null(im->pix);
    assert_non_null(im->scratch);
    struct stk__rng r;
    stk__rng_seed(&r, seed);
    for (size_t i = 0; i < im->n; i++)
        im->pix[i] = (uint8_t)stk__rng_next(&r);
    im->view = (struct stk__aug_image){im->pix, w, h, im->scratch};
}

static void img_free(struct img *im)
{
    stk__free(im->pix);
    stk__free(im->scratch);
}

static const int sizes[][2] = {{1, 1}, {1, 7}, {7, 1}, {2, 2}, {3, 5}, {17, 13}, {64, 3}, {176, 176}};

static void test_every_op_on_extreme_magnitudes(void **state)
{
    (void)state;
    const double mags[] = {0,    1e-30, -1e-30, 0.5,  -0.5,  0.99,  1,    -1,   7,
                           89.9, -90,   135,    1e9,  -1e9,  1e300, -1e300, INFINITY,
                           -INFINITY, NAN, 255, 256, -3, 8, 9};
    const uint8_t fill[3] = {7, 8, 9};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int op = 0; op < STK__OP_COUNT; op++)
            for (size_t m = 0; m < sizeof mags / sizeof mags[0]; m++)
                for (int mode = 0; mode < 4; mode++) {
                    struct img im;
                    img_new(&im, sizes[s][0], sizes[s][1], s * 1000 + (size_t)op);
                    stk__aug_apply(&im.view, (enum stk__aug_op)op, mags[m], mode & 1,
                                   mode & 2 ? fill : NULL);
                    img_free(&im);
                }
}

static void test_blur_on_any_size(void **state)
{
    (void)state;
    const int kernels[] = {1, 3, 5, 63};
    const double sigmas[] = {1e-30, 0.1, 2, 1e30};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t k = 0; k < sizeof kernels / sizeof kernels[0]; k++)
            for (size_t g = 0; g < sizeof sigmas / sizeof sigmas[0]; g++) {
                struct img im;
                img_new(&im, sizes[s][0], sizes[s][1], s);
                assert_int_equal(stk__aug_gaussian_blur(&im.view, kernels[k], sigmas[g]), 0);
                img_free(&im);
            }
    struct img im;
    img_new(&im, 3, 3, 1);
    assert_int_equal(stk__aug_gaussian_blur(&im.view, 2, 1), -1);
    assert_int_equal(stk__aug_gaussian_blur(&im.view, 65, 1), -1);
    img_free(&im);
}

static void test_identities(void **state)
{
    (void)state;
    const struct {
        enum stk__aug_op op;
        double magnitude;
    } same[] = {{STK__OP_IDENTITY, 0},   {STK__OP_TRANSLATE_X, 0}, {STK__OP_TRANSLATE_Y, 0.9},
                {STK__OP_ROTATE, 0},     {STK__OP_SHEAR_X, 0},     {STK__OP_BRIGHTNESS, 0},
                {STK__OP_COLOR, 0},      {STK__OP_CONTRAST, 0},    {STK__OP_SHARPNESS, 0},
                {STK__OP_POSTERIZE, 8},  {STK__OP_SOLARIZE, 256}};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t k = 0; k < sizeof same / sizeof same[0]; k++)
            for (int bilinear = 0; bilinear < 2; bilinear++) {
                struct img im;
                img_new(&im, sizes[s][0], sizes[s][1], 99 + s);
                uint8_t *before = stk__malloc(im.n);
                memcpy(before, im.pix, im.n);
                stk__aug_apply(&im.view, same[k].op, same[k].magnitude, bilinear, NULL);
                if (memcmp(before, im.pix, im.n) != 0)
                    fail_msg("op %d magnitude %g on %dx%d changed the image", (int)same[k].op,
                             same[k].magnitude, sizes[s][0], sizes[s][1]);
                stk__free(before);
                img_free(&im);
            }
}

static void test_shift_out_leaves_fill(void **state)
{
    (void)state;
    const uint8_t fill[3] = {7, 8, 9};
    for (int bilinear = 0; bilinear < 2; bilinear++)
        for (int op = STK__OP_TRANSLATE_X; op <= STK__OP_TRANSLATE_Y; op++) {
            struct img im;
            img_new(&im, 17, 13, 5);
            stk__aug_apply(&im.view, (enum stk__aug_op)op, -40, bilinear, fill);
            for (size_t i = 0; i < im.n; i++)
                assert_int_equal(im.pix[i], fill[i % 3]);
            img_free(&im);
        }
}

/* A property check over random geometric ops: image sizes 1 to 300 on
 * each side, magnitudes log-uniform from 1e-9 to 1e9 of either sign. The
 * buffers end at their last byte, so ASan sees any read outside; nearest
 * sampling may only copy pixels of the image or the fill, and bilinear
 * sampling only blend them, so each channel stays within the range of the
 * image's values and the fill's. */
static void test_geometric_ops_random_property(void **state)
{
    (void)state;
    struct stk__rng r;
    stk__rng_seed(&r, 22);
    const uint8_t fill[3] = {7, 250, 128};
    for (int n = 0; n < 600; n++) {
        const int w = 1 + (int)stk__rng_below(&r, n % 20 == 0 ? 300 : 40);
        const int h = 1 + (int)stk__rng_below(&r, n % 20 == 0 ? 300 : 40);
        const enum stk__aug_op op = (enum stk__aug_op)(STK__OP_SHEAR_X + stk__rng_below(&r, 5));
        const double exponent = (double)stk__rng_below(&r, 1 << 20) / (1 << 20) * 18 - 9;
        const double magnitude = (stk__rng_below(&r, 2) ? 1 : -1) * pow(10, exponent);
        const int bilinear = (int)stk__rng_below(&r, 2);
        struct img im;
        img_new(&im, w, h, (uint64_t)n);
        /* A few levels only, so a value from nowhere is likely to show. */
        for (size_t i = 0; i < im.n; i++)
            im.pix[i] = (uint8_t)(40 + 10 * (im.pix[i] % 4) + 3 * (int)(i % 3));
        uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
        int seen[3][256] = {{0}};
        for (size_t i = 0; i < im.n; i++) {
            const size_t c = i % 3;
            lo[c] = im.pix[i] < lo[c] ? im.pix[i] : lo[c];
            hi[c] = im.pix[i] > hi[c] ? im.pix[i] : hi[c];
            seen[c][im.pix[i]] = 1;
        }
        stk__aug_apply(&im.view, op, magnitude, bilinear, fill);
        for (size_t i = 0; i < im.n; i++) {
            const size_t c = i % 3;
            const uint8_t v = im.pix[i];
            const int ok = bilinear ? (v >= (lo[c] < fill[c] ? lo[c] : fill[c]) &&
                                       v <= (hi[c] > fill[c] ? hi[c] : fill[c]))
                                    : (seen[c][v] || v == fill[c]);
            if (!ok)
                fail_msg("op %d magnitude %g %s on %dx%d: value %d in channel %zu", (int)op,
                         magnitude, bilinear ? "bilinear" : "nearest", w, h, v, c);
        }
        img_free(&im);
    }
}

static void test_draws_stay_in_their_tables(void **state)
{
    (void)state;
    for (int policy = STK_AUTO_AUGMENT_TA_WIDE; policy <= STK_AUTO_AUGMENT_IMAGENET; policy++) {
        struct stk__augment_params p = {.policy = (enum stk_auto_augment)policy, .bins = 31,
                                        .num_ops = 16, .magnitude = 30, .color_jitter = 0.4,
                                        .hue_jitter = 0.5, .grayscale_probability = 0.5,
                                        .blur_kernel = 5, .blur_sigma_min = 0.1,
                                        .blur_sigma_max = 2};
        for (uint64_t i = 0; i < 5000; i++) {
            struct stk__draws d;
            stk__draws_init(&d, 1, 2, 3, 0, i);
            struct stk__aug_step steps[STK__AUG_MAX_STEPS];
            int n = stk__augment_draw(&p, 176, 160, &d, steps);
            assert_true(n >= 1 && n <= (policy == STK_AUTO_AUGMENT_RA ? 16 : 2) + 6);
            assert_true(n <= STK__AUG_MAX_STEPS);
            for (int k = 0; k < n; k++) {
                double m = fabs(steps[k].magnitude);
                assert_true(steps[k].op >= STK__OP_IDENTITY && steps[k].op < STK__OP_COUNT);
                assert_true(m <= 255.0 && isfinite(m));
                if (steps[k].op == STK__OP_HUE)
                    assert_true(m <= 0.5);
                if (steps[k].op == STK__OP_POSTERIZE)
                    assert_true(m >= 2 && m <= 8 && m == floor(m));
            }
        }
    }
}

static void test_erase_box_inside(void **state)
{
    (void)state;
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (uint64_t i = 0; i < 2000; i++) {
            struct stk__draws d;
            stk__draws_init(&d, 3, 0, 0, 0, i);
            int top, left, h, w, W = sizes[s][0], H = sizes[s][1];
            if (stk__augment_erase_box(1.0, W, H, &d, &top, &left, &h, &w))
                assert_true(top >= 0 && left >= 0 && h < H && w < W && top + h <= H &&
                            left + w <= W);
        }
}

/* A batch of n uint8 NHWC images of w x h, image i filled with 10 * i + 1
 * (and an odd pixel), mixed by draw d; checks each image against its own
 * and its predecessor's value. */
static void check_mix(const struct stk__mix_draw *d, int w, int h, size_t n)
{
    struct stk__image_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.width = w;
    cfg.height = h;
    cfg.dtype = STK_DTYPE_UINT8;
    cfg.layout = STK_LAYOUT_NHWC;
    size_t bytes = stk__image_bytes(&cfg);
    uint8_t *images = stk__malloc(n * bytes), *scratch = stk__malloc(bytes);
    int64_t labels[8], partners[8];
    for (size_t i = 0; i < n; i++) {
        memset(images + i * bytes, (int)(10 * i + 1), bytes);
        labels[i] = (int64_t)i;
    }
    stk__mix_apply(d, &cfg, images, n, labels, partners, scratch);
    for (size_t i = 0; i < n; i++) {
        size_t prev = (i + n - 1) % n;
        assert_int_equal(partners[i], labels[prev]);
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) {
                int in_box = d->cutmix && x >= d->x1 && x < d->x2 && y >= d->y1 && y < d->y2;
                double want = d->cutmix ? (in_box ? 10.0 * prev + 1 : 10.0 * i + 1)
                                        : d->lambda * (10.0 * i + 1) +
                                              (1 - d->lambda) * (10.0 * prev + 1);
                uint8_t got = images[i * bytes + ((size_t)y * (size_t)w + (size_t)x) * 3];
                assert_true(fabs(got - want) <= 0.5 + 1e-4);
            }
    }
    stk__free(images);
    stk__free(scratch);
}

static void test_mix(void **state)
{
    (void)state;
    const double alphas[][2] = {{0.2, 0}, {0, 1.0}, {0.2, 1.0}, {1e-9, 1e-9}, {50, 50}};
    for (size_t a = 0; a < sizeof alphas / sizeof alphas[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            for (uint64_t b = 0; b < 20; b++) {
                struct stk__mix_params p = {alphas[a][0], alphas[a][1], 0.5, 7, 1, 2};
                struct stk__mix_draw d;
                int w = sizes[s][0], h = sizes[s][1];
                stk__mix_draw(&p, b, w, h, &d);
                assert_true(d.lambda >= 0 && d.lambda <= 1);
                assert_true(d.cutmix == (alphas[a][0] == 0) || alphas[a][0] * alphas[a][1] > 0);
                if (d.cutmix)
                    assert_true(0 <= d.x1 && d.x1 <= d.x2 && d.x2 <= w && 0 <= d.y1 &&
                                d.y1 <= d.y2 && d.y2 <= h);
                if (w * h <= 64 * 13)
                    check_mix(&d, w, h, 1 + b % 8);
            }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_op_on_extreme_magnitudes),
        cmocka_unit_test(test_blur_on_any_size),
        cmocka_unit_test(test_identities),
        cmocka_unit_test(test_shift_out_leaves_fill),
        cmocka_unit_test(test_geometric_ops_random_property),
        cmocka_unit_test(test_draws_stay_in_their_tables),
        cmocka_unit_test(test_erase_box_inside),
        cmocka_unit_test(test_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
