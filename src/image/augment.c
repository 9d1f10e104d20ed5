/* SPDX-License-Identifier: MIT */
/*
 * augment.c - torchvision's crop geometry with stoker's random numbers.
 *
 * Rounding follows Python: round() ties to even (nearbyint in the default
 * rounding mode), int() truncates. The random numbers are stoker's own, so
 * boxes match torchvision's distribution, not its exact draws.
 */
#include "image/augment.h"

#include <limits.h>
#include <math.h>

#include "base/rng.h"

uint64_t stk__draws_key(uint64_t seed, uint64_t epoch, uint64_t shard, uint64_t pass,
                        uint64_t position)
{
    return stk__mix(stk__mix(stk__mix(stk__mix(seed, epoch), shard), pass),
                    position ^ 0x417567ull);
}

void stk__draws_from_key(struct stk__draws *d, uint64_t key)
{
    d->key = key;
    d->counter = 0;
}

void stk__draws_init(struct stk__draws *d, uint64_t seed, uint64_t epoch, uint64_t shard,
                     uint64_t pass, uint64_t position)
{
    stk__draws_from_key(d, stk__draws_key(seed, epoch, shard, pass, position));
}

void stk__draws_fork(const struct stk__draws *d, uint64_t tag, struct stk__draws *out)
{
    out->key = stk__mix(d->key, tag);
    out->counter = 0;
}

double stk__draw_uniform(struct stk__draws *d)
{
    uint64_t bits = stk__mix(d->key, d->counter++);
    return (double)(bits >> 11) * 0x1.0p-53;
}

int64_t stk__draw_int(struct stk__draws *d, int64_t lo, int64_t hi)
{
    struct stk__rng r;
    stk__rng_seed(&r, stk__mix(d->key, d->counter++));
    return lo + (int64_t)stk__rng_below(&r, (uint64_t)(hi - lo));
}

void stk__draw_normals(struct stk__draws *d, double out[2])
{
    /* 1 - u lies in (0, 1], so the logarithm is finite: |z| <= 8.6. */
    const double r = sqrt(-2.0 * log(1.0 - stk__draw_uniform(d)));
    const double theta = 2.0 * M_PI * stk__draw_uniform(d);
    out[0] = r * cos(theta);
    out[1] = r * sin(theta);
}

static int py_round(double x)
{
    double r = nearbyint(x);
    return r >= INT_MAX ? INT_MAX : (int)r; /* the result is compared with the image size */
}

void stk__crop_train(const struct stk__train_params *p, int width, int height,
                     struct stk__draws *d, struct stk__crop *out)
{
    double area = (double)width * height;
    double log_lo = log(p->ratio_min), log_hi = log(p->ratio_max);
    int found = 0;
    for (int attempt = 0; attempt < 10 && !found; attempt++) {
        double target = area * (p->scale_min + (p->scale_max - p->scale_min) * stk__draw_uniform(d));
        double ratio = exp(log_lo + (log_hi - log_lo) * stk__draw_uniform(d));
        int w = py_round(sqrt(target * ratio));
        int h = py_round(sqrt(target / ratio));
        if (w > 0 && w <= width && h > 0 && h <= height) {
            out->top = (double)stk__draw_int(d, 0, height - h + 1);
            out->left = (double)stk__draw_int(d, 0, width - w + 1);
            out->height = h;
            out->width = w;
            found = 1;
        }
    }
    if (!found) {
        double in_ratio = (double)width / height;
        int w = width, h = height;
        if (in_ratio < p->ratio_min)
            h = py_round(w / p->ratio_min);
        else if (in_ratio > p->ratio_max)
            w = py_round(h * p->ratio_max);
        out->top = (height - h) / 2;
        out->left = (width - w) / 2;
        out->height = h;
        out->width = w;
    }
    out->flip = stk__draw_uniform(d) < p->flip_probability;
    out->pad_top = out->pad_left = out->pad_bottom = out->pad_right = 0;
}

/* One axis of CenterCrop(out) on an image resized to r pixels from src:
 * the box in source pixels and the padding. torchvision's center_crop pads
 * a side shorter than the crop with zeros, (out - r) // 2 before and the
 * rest after, and then crops it whole; else it crops from
 * int(round((r - out) / 2)). */
static void center_axis(double r, int out, double src, double *start, double *len, int *pad_before,
                        int *pad_after)
{
    double scale = src / r;
    if (r < out) {
        *pad_before = (int)floor((out - r) / 2);
        *pad_after = out - (int)r - *pad_before;
        *start = 0;
        *len = src;
    } else {
        *pad_before = *pad_after = 0;
        *start = nearbyint((r - out) / 2.0) * scale;
        *len = out * scale;
    }
}

void stk__crop_eval(int width, int height, int out_height, int out_width, struct stk__crop *out)
{
    stk__crop_eval_resized(width, height, 0, out_height, out_width, out);
}

void stk__crop_eval_resized(int width, int height, int short_side, int out_height, int out_width,
                            struct stk__crop *out)
{
    /* torchvision Resize(int): the short side becomes `resize`, the long
     * side int(resize * long / short) (truncated). */
    /* Doubles throughout: extreme aspect ratios (1 x 20,000,000) overflow
     * int, and floor/nearbyint are exact on these magnitudes. */
    double resize = short_side > 0
                        ? short_side
                        : floor((out_height < out_width ? out_height : out_width) / 0.875);
    double rw, rh;
    if (width <= height) {
        rw = resize;
        rh = floor(resize * height / width);
    } else {
        rh = resize;
        rw = floor(resize * width / height);
    }
    center_axis(rh, out_height, height, &out->top, &out->height, &out->pad_top, &out->pad_bottom);
    center_axis(rw, out_width, width, &out->left, &out->width, &out->pad_left, &out->pad_right);
    out->flip = 0;
}
