/* SPDX-License-Identifier: MIT */
/*
 * augment_color.c - ColorJitter's hue shift and GaussianBlur, with
 * torchvision's uint8 tensor arithmetic (functional_tensor.py).
 *
 * Hand-written for the same reason as augment_ops.c: no Debian library
 * reproduces torchvision's rounding. The hue shift goes through float32
 * HSV exactly as _rgb2hsv/_hsv2rgb do and truncates v * 255. The blur is
 * torch's 2-D kernel (the outer product of two normalised 1-D Gaussians)
 * with reflect padding, applied as two 1-D passes in float32 and rounded
 * half to even: a separable sum in another order than torch's conv2d, so a
 * value on a rounding boundary can differ by one level.
 */
#include "image/augment_ops.h"

#include <math.h>
#include <string.h>

#include "base/alloc.h"

/* One pixel's hue moved by factor (in [-0.5, 0.5]) of a turn. */
static void hue_pixel(uint8_t *px, float factor)
{
    float r = (float)px[0] / 255.0f, g = (float)px[1] / 255.0f, b = (float)px[2] / 255.0f;
    float maxc = fmaxf(r, fmaxf(g, b)), minc = fminf(r, fminf(g, b));
    int eqc = maxc == minc;
    float cr = maxc - minc;
    float s = cr / (eqc ? 1.0f : maxc);
    float div = eqc ? 1.0f : cr;
    float rc = (maxc - r) / div, gc = (maxc - g) / div, bc = (maxc - b) / div;
    /* torch sums the three masked terms; the masks exclude each other, so
     * the sum is the one term (and +0.0f for the others) */
    float hr = maxc == r ? bc - gc : 0.0f;
    float hg = maxc == g && maxc != r ? 2.0f + rc - bc : 0.0f;
    float hb = maxc != g && maxc != r ? 4.0f + gc - rc : 0.0f;
    float h = fmodf((hr + hg + hb) / 6.0f + 1.0f, 1.0f);
    /* (h + factor) % 1.0: Python's modulo, non-negative */
    h = fmodf(h + factor, 1.0f);
    if (h < 0)
        h += 1.0f;
    float v = maxc;
    float i = floorf(h * 6.0f), f = h * 6.0f - i;
    float p = fminf(fmaxf(v * (1.0f - s), 0.0f), 1.0f);
    float q = fminf(fmaxf(v * (1.0f - s * f), 0.0f), 1.0f);
    float t = fminf(fmaxf(v * (1.0f - s * (1.0f - f)), 0.0f), 1.0f);
    int sector = ((int)i % 6 + 6) % 6;
    const float out[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    for (int c = 0; c < 3; c++) {
        float x = out[sector][c] * 255.0f;
        px[c] = x >= 255.0f ? 255 : x > 0.0f ? (uint8_t)x : 0;
    }
}

void stk__aug_hue(const struct stk__aug_image *img, double factor)
{
    if (factor == 0)
        return; /* torchvision returns the image as it is */
    uint8_t *p = img->pixels;
    for (size_t i = 0, n = (size_t)img->width * (size_t)img->height * 3; i < n; i += 3)
        hue_pixel(p + i, (float)factor);
}

/* Index i of a line of n pixels reflected at its ends (torch's "reflect"
 * padding, which does not repeat the edge), folded as often as a kernel
 * wider than the image needs. */
static size_t reflect(long i, long n)
{
    if (n == 1)
        return 0;
    long period = 2 * (n - 1);
    i %= period;
    if (i < 0)
        i += period;
    return (size_t)(i < n ? i : period - i);
}

int stk__aug_gaussian_blur(const struct stk__aug_image *img, int kernel, double sigma)
{
    if (kernel < 1 || kernel > STK__AUG_MAX_BLUR_KERNEL || kernel % 2 == 0)
        return -1;
    /* _get_gaussian_kernel1d: float32 linspace, exp, normalised */
    float k[STK__AUG_MAX_BLUR_KERNEL], sum = 0;
    float half = (float)(kernel - 1) * 0.5f;
    for (int i = 0; i < kernel; i++) {
        float x = kernel == 1 ? -half : -half + (2 * half) / (float)(kernel - 1) * (float)i;
        float z = x / (float)sigma;
        k[i] = expf(-0.5f * z * z);
        sum += k[i];
    }
    for (int i = 0; i < kernel; i++)
        k[i] /= sum;
    long w = img->width, h = img->height, r = kernel / 2;
    /* the reflected source column and row of every tap position (-r to
     * size + r), then the float image between the passes */
    size_t floats = (size_t)w * (size_t)h * 3, taps = (size_t)(w + h + 4 * r);
    /* the size_t tables first: after an odd count of floats they would be
     * misaligned (UBSan) */
    size_t *col = stk__malloc(taps * sizeof(size_t) + floats * sizeof(float));
    if (col == NULL)
        return -1;
    size_t *row = col + w + 2 * r;
    float *tmp = (float *)(void *)(col + taps);
    for (long i = -r; i < w + r; i++)
        col[i + r] = reflect(i, w) * 3;
    for (long i = -r; i < h + r; i++)
        row[i + r] = reflect(i, h) * (size_t)w * 3;
    const uint8_t *src = img->pixels;
    for (long y = 0; y < h; y++) { /* horizontal pass into float */
        const uint8_t *line = src + (size_t)y * (size_t)w * 3;
        float *t = tmp + (size_t)y * (size_t)w * 3;
        for (long x = 0; x < w; x++)
            for (int c = 0; c < 3; c++) {
                float acc = 0;
                for (long j = 0; j < kernel; j++)
                    acc += k[j] * (float)line[col[x + j] + (size_t)c];
                t[x * 3 + c] = acc;
            }
    }
    uint8_t *out = img->pixels;
    for (long y = 0; y < h; y++) /* vertical pass, rounded */
        for (size_t i = 0; i < (size_t)w * 3; i++) {
            float acc = 0;
            for (long j = 0; j < kernel; j++)
                acc += k[j] * tmp[row[y + j] + i];
            out[(size_t)y * (size_t)w * 3 + i] = stk__clamp_round_u8(acc);
        }
    stk__free(col);
    return 0;
}
