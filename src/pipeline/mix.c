/* SPDX-License-Identifier: MIT */
/*
 * mix.c - Mixup and CutMix draws and their application to a batch.
 *
 * lambda ~ Beta(alpha, alpha) is drawn as the reference draws it
 * (torch._sample_dirichlet([alpha, alpha])[0]): the first of two Gamma(alpha)
 * variates over their sum, each by Marsaglia and Tsang's method (with the
 * u^(1/alpha) boost below alpha = 1), from a stream of stoker's own random
 * numbers. CutMix's box follows RandomCutmix: a center uniform over the
 * pixels, half-sides int(0.5 * sqrt(1 - lambda) * size), clipped to the
 * image, and lambda recomputed from the clipped area.
 */
#include "pipeline/mix.h"

#include <math.h>
#include <string.h>

#include "image/augment.h"
#include "image/augment_ops.h"
#include "base/rng.h"

static const double PI = 3.14159265358979323846;

/* Tag of the batch stream (a batch has no sample position). */
#define MIX_STREAM 0x6d697863757474ull

int stk__mix_enabled(const struct stk__mix_params *p)
{
    return p->mixup_alpha > 0 || p->cutmix_alpha > 0;
}

static double normal(struct stk__draws *d)
{
    double u1 = 1.0 - stk__draw_uniform(d), u2 = stk__draw_uniform(d);
    return sqrt(-2.0 * log(u1)) * cos(2 * PI * u2);
}

static double gamma_variate(double alpha, struct stk__draws *d)
{
    double boost = 1;
    if (alpha < 1) {
        boost = pow(1.0 - stk__draw_uniform(d), 1.0 / alpha);
        alpha += 1;
    }
    double k = alpha - 1.0 / 3, c = 1.0 / sqrt(9 * k);
    for (;;) {
        double x = normal(d), v = 1 + c * x;
        if (v <= 0)
            continue;
        v = v * v * v;
        double u = 1.0 - stk__draw_uniform(d);
        if (u < 1 - 0.0331 * x * x * x * x || log(u) < 0.5 * x * x + k * (1 - v + log(v)))
            return k * v * boost;
    }
}

static double beta_variate(double alpha, struct stk__draws *d)
{
    double a = gamma_variate(alpha, d), b = gamma_variate(alpha, d);
    if (!(a + b > 0)) /* both underflowed (a tiny alpha): Beta's mass is at 0 and 1 */
        return stk__draw_uniform(d) < 0.5 ? 0.0 : 1.0;
    return a / (a + b);
}

void stk__mix_draw(const struct stk__mix_params *p, uint64_t index, int width, int height,
                   struct stk__mix_draw *out)
{
    struct stk__draws d;
    d.key = stk__mix(stk__mix(stk__mix(stk__mix(p->seed, p->epoch), (uint64_t)p->rank), index),
                     MIX_STREAM);
    d.counter = 0;
    memset(out, 0, sizeof *out);
    out->cutmix = p->cutmix_alpha > 0 &&
                  (p->mixup_alpha <= 0 || stk__draw_uniform(&d) < p->switch_probability);
    out->lambda = beta_variate(out->cutmix ? p->cutmix_alpha : p->mixup_alpha, &d);
    if (!out->cutmix)
        return;
    int rx = (int)stk__draw_int(&d, 0, width), ry = (int)stk__draw_int(&d, 0, height);
    double r = 0.5 * sqrt(1.0 - out->lambda);
    int half_w = (int)(r * width), half_h = (int)(r * height);
    out->x1 = rx - half_w < 0 ? 0 : rx - half_w;
    out->y1 = ry - half_h < 0 ? 0 : ry - half_h;
    out->x2 = rx + half_w > width ? width : rx + half_w;
    out->y2 = ry + half_h > height ? height : ry + half_h;
    out->lambda =
        1.0 - (double)(out->x2 - out->x1) * (out->y2 - out->y1) / ((double)width * height);
}

/* dst = lambda * dst + (1 - lambda) * src over count elements, in float
 * as torch mixes float32 batches (mul_, mul_, add_). */
static void blend(const struct stk__image_config *cfg, void *dst, const void *src, size_t count,
                  float lambda, float rest)
{
    switch (cfg->dtype) {
    case STK_DTYPE_UINT8: {
        uint8_t *o = dst;
        const uint8_t *s = src;
        for (size_t i = 0; i < count; i++)
            o[i] = stk__clamp_round_u8(lambda * (float)o[i] + rest * (float)s[i]);
        break;
    }
    case STK_DTYPE_FLOAT32: {
        float *o = dst;
        const float *s = src;
        for (size_t i = 0; i < count; i++)
            o[i] = lambda * o[i] + rest * s[i];
        break;
    }
    default: { /* bfloat16 (float16 is refused at configuration) */
        uint16_t *o = dst;
        const uint16_t *s = src;
        for (size_t i = 0; i < count; i++) {
            uint32_t a = (uint32_t)o[i] << 16, b = (uint32_t)s[i] << 16;
            float fa, fb;
            memcpy(&fa, &a, 4);
            memcpy(&fb, &b, 4);
            o[i] = stk__float_to_bfloat16(lambda * fa + rest * fb);
        }
        break;
    }
    }
}

/* Copy the CutMix box of src into dst (one image each). */
static void paste_box(const struct stk__mix_draw *d, const struct stk__image_config *cfg,
                      void *dst, const void *src, size_t elem)
{
    size_t w = (size_t)cfg->width, h = (size_t)cfg->height;
    size_t x1 = (size_t)d->x1, x2 = (size_t)d->x2;
    for (size_t y = (size_t)d->y1; y < (size_t)d->y2; y++) {
        if (cfg->layout == STK_LAYOUT_NHWC) {
            size_t at = (y * w + x1) * 3 * elem;
            memcpy((char *)dst + at, (const char *)src + at, (x2 - x1) * 3 * elem);
        } else {
            for (size_t c = 0; c < 3; c++) {
                size_t at = ((c * h + y) * w + x1) * elem;
                memcpy((char *)dst + at, (const char *)src + at, (x2 - x1) * elem);
            }
        }
    }
}

void stk__mix_apply(const struct stk__mix_draw *d, const struct stk__image_config *cfg,
                    void *images, size_t n, const int64_t *labels, int64_t *mix_labels,
                    void *scratch)
{
    size_t bytes = stk__image_bytes(cfg);
    size_t elem = bytes / ((size_t)cfg->width * (size_t)cfg->height * 3);
    for (size_t i = 0; i < n; i++)
        mix_labels[i] = labels[(i + n - 1) % n];
    if (n == 0)
        return;
    /* The batch rolled by one: image i takes from image i - 1, image 0
     * from the last. Going down from the last, each source is still as it
     * was; the last image's original is kept for image 0. */
    memcpy(scratch, (char *)images + (n - 1) * bytes, bytes);
    float lambda = (float)d->lambda, rest = (float)(1.0 - d->lambda);
    for (size_t k = n; k-- > 0;) {
        void *dst = (char *)images + k * bytes;
        const void *src = k > 0 ? (const char *)images + (k - 1) * bytes : scratch;
        if (d->cutmix)
            paste_box(d, cfg, dst, src, elem);
        else
            blend(cfg, dst, src, bytes / elem, lambda, rest);
    }
}
