/* SPDX-License-Identifier: MIT */
/*
 * augment_policy.c - torchvision's augmentation spaces and draws.
 *
 * The magnitude tables are torchvision's _augmentation_space: float32
 * torch.linspace values (computed here as torch's CPU kernel does, from
 * both ends toward the middle) and the posterize bits of
 * 8 - round(arange(bins) / ((bins - 1) / k)). The draws mirror the
 * order of torchvision's forward() calls: an op index, then a bin only for
 * ops with a table, then a sign only for signed ops. The random numbers
 * are stoker's, so the distribution matches torchvision's, not its exact
 * sequence.
 */
#include "image/augment_policy.h"

#include <math.h>

/* torch.linspace(start, end, steps)[i] in float32. */
static double linspace(float start, float end, int steps, int i)
{
    float step = (end - start) / (float)(steps - 1);
    if (i < steps / 2)
        return (double)(start + step * (float)i);
    return (double)(end - step * (float)(steps - i - 1));
}

/* 8 - (arange(bins) / ((bins - 1) / k)).round().int() */
static double posterize_bits(int bins, int i, double k)
{
    float q = (float)i / (float)((double)(bins - 1) / k);
    return 8 - nearbyintf(q);
}

/* Whether op takes a sign in every policy's space. */
static int is_signed(enum stk__aug_op op)
{
    return op >= STK__OP_SHEAR_X && op <= STK__OP_SHARPNESS;
}

static int has_table(enum stk__aug_op op)
{
    return op >= STK__OP_SHEAR_X && op <= STK__OP_SOLARIZE;
}

double stk__augment_magnitude(const struct stk__augment_params *p, enum stk__aug_op op, int bin,
                              int width, int height)
{
    int wide = p->policy == STK_AUTO_AUGMENT_TA_WIDE;
    int bins = p->policy == STK_AUTO_AUGMENT_IMAGENET ? 10 : p->bins;
    switch (op) {
    case STK__OP_SHEAR_X:
    case STK__OP_SHEAR_Y: return linspace(0.0f, wide ? 0.99f : 0.3f, bins, bin);
    case STK__OP_TRANSLATE_X:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * width), bins, bin);
    case STK__OP_TRANSLATE_Y:
        return linspace(0.0f, wide ? 32.0f : (float)(150.0 / 331.0 * height), bins, bin);
    case STK__OP_ROTATE: return linspace(0.0f, wide ? 135.0f : 30.0f, bins, bin);
    case STK__OP_BRIGHTNESS:
    case STK__OP_COLOR:
    case STK__OP_CONTRAST:
    case STK__OP_SHARPNESS: return linspace(0.0f, wide ? 0.99f : 0.9f, bins, bin);
    case STK__OP_POSTERIZE: return posterize_bits(bins, bin, wide ? 6 : 4);
    case STK__OP_SOLARIZE: return linspace(255.0f, 0.0f, bins, bin);
    default: return 0;
    }
}

/* AutoAugment's ImageNet policy: 25 pairs of (op, probability, bin; -1
 * where the op has no magnitude). */
static const struct {
    enum stk__aug_op op;
    float probability;
    int bin;
} imagenet[25][2] = {
    {{STK__OP_POSTERIZE, 0.4f, 8}, {STK__OP_ROTATE, 0.6f, 9}},
    {{STK__OP_SOLARIZE, 0.6f, 5}, {STK__OP_AUTOCONTRAST, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.8f, -1}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_POSTERIZE, 0.6f, 7}, {STK__OP_POSTERIZE, 0.6f, 6}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_SOLARIZE, 0.2f, 4}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_ROTATE, 0.8f, 8}},
    {{STK__OP_SOLARIZE, 0.6f, 3}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_POSTERIZE, 0.8f, 5}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_ROTATE, 0.2f, 3}, {STK__OP_SOLARIZE, 0.6f, 8}},
    {{STK__OP_EQUALIZE, 0.6f, -1}, {STK__OP_POSTERIZE, 0.4f, 6}},
    {{STK__OP_ROTATE, 0.8f, 8}, {STK__OP_COLOR, 0.4f, 0}},
    {{STK__OP_ROTATE, 0.4f, 9}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.0f, -1}, {STK__OP_EQUALIZE, 0.8f, -1}},
    {{STK__OP_INVERT, 0.6f, -1}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.6f, 4}, {STK__OP_CONTRAST, 1.0f, 8}},
    {{STK__OP_ROTATE, 0.8f, 8}, {STK__OP_COLOR, 1.0f, 2}},
    {{STK__OP_COLOR, 0.8f, 8}, {STK__OP_SOLARIZE, 0.8f, 7}},
    {{STK__OP_SHARPNESS, 0.4f, 7}, {STK__OP_INVERT, 0.6f, -1}},
    {{STK__OP_SHEAR_X, 0.6f, 5}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.4f, 0}, {STK__OP_EQUALIZE, 0.6f, -1}},
    {{STK__OP_EQUALIZE, 0.4f, -1}, {STK__OP_SOLARIZE, 0.2f, 4}},
    {{STK__OP_SOLARIZE, 0.6f, 5}, {STK__OP_AUTOCONTRAST, 0.6f, -1}},
    {{STK__OP_INVERT, 0.6f, -1}, {STK__OP_EQUALIZE, 1.0f, -1}},
    {{STK__OP_COLOR, 0.6f, 4}, {STK__OP_CONTRAST, 1.0f, 8}},
    {{STK__OP_EQUALIZE, 0.8f, -1}, {STK__OP_EQUALIZE, 0.6f, -1}},
};

/* AutoAugment.get_params then forward: the pair, two uniforms, two signs
 * (drawn together up front, as torch.rand((2,)) and randint(2, (2,))). */
static int draw_imagenet(const struct stk__augment_params *p, int width, int height,
                         struct stk__draws *d, struct stk__aug_step *steps)
{
    int pair = (int)stk__draw_int(d, 0, 25);
    double u[2], negative[2];
    for (int i = 0; i < 2; i++)
        u[i] = stk__draw_uniform(d);
    for (int i = 0; i < 2; i++)
        negative[i] = stk__draw_int(d, 0, 2) == 0;
    int n = 0;
    for (int i = 0; i < 2; i++) {
        enum stk__aug_op op = imagenet[pair][i].op;
        /* torch.rand gives float32; probs[i] <= p compares it with the
         * double p, which holds exactly the float literal's value */
        if ((float)u[i] > imagenet[pair][i].probability)
            continue;
        int bin = imagenet[pair][i].bin;
        double m = bin < 0 ? 0 : stk__augment_magnitude(p, op, bin, width, height);
        steps[n].op = op;
        steps[n++].magnitude = is_signed(op) && negative[i] ? -m : m;
    }
    return n;
}

/* One op of TrivialAugmentWide or RandAugment (bin < 0: a random bin). */
static void draw_one(const struct stk__augment_params *p, int bin, int width, int height,
                     struct stk__draws *d, struct stk__aug_step *step)
{
    /* both spaces list the 14 ops in enum order, Invert excluded */
    enum stk__aug_op op = (enum stk__aug_op)stk__draw_int(d, 0, STK__OP_INVERT);
    double m = 0;
    if (has_table(op))
        m = stk__augment_magnitude(p, op, bin < 0 ? (int)stk__draw_int(d, 0, p->bins) : bin,
                                   width, height);
    if (is_signed(op) && stk__draw_int(d, 0, 2) == 1)
        m = -m;
    step->op = op;
    step->magnitude = m;
}

static int draw_policy(const struct stk__augment_params *p, int width, int height,
                       struct stk__draws *d, struct stk__aug_step *steps)
{
    switch (p->policy) {
    case STK_AUTO_AUGMENT_TA_WIDE: draw_one(p, -1, width, height, d, steps); return 1;
    case STK_AUTO_AUGMENT_RA:
        for (int i = 0; i < p->num_ops; i++)
            draw_one(p, p->magnitude, width, height, d, &steps[i]);
        return p->num_ops;
    case STK_AUTO_AUGMENT_IMAGENET: return draw_imagenet(p, width, height, d, steps);
    default: return 0;
    }
}

/* ColorJitter.get_params: a random order of the four (torch.randperm),
 * then a factor for each one that is on, in the order b, c, s, h. The
 * steps come out in the drawn order; a factor f is the magnitude f - 1
 * that stk__aug_apply turns back into f. */
static int draw_jitter(const struct stk__augment_params *p, struct stk__draws *d,
                       struct stk__aug_step *steps)
{
    int order[4] = {0, 1, 2, 3};
    for (int i = 3; i > 0; i--) {
        int j = (int)stk__draw_int(d, 0, i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    double factor[4];
    int on[4] = {p->color_jitter > 0, p->color_jitter > 0, p->color_jitter > 0, p->hue_jitter > 0};
    for (int k = 0; k < 4; k++) {
        double lo = k < 3 ? fmax(0, 1 - p->color_jitter) : -p->hue_jitter;
        double hi = k < 3 ? 1 + p->color_jitter : p->hue_jitter;
        if (on[k])
            factor[k] = lo + (hi - lo) * stk__draw_uniform(d);
    }
    static const enum stk__aug_op ops[4] = {STK__OP_BRIGHTNESS, STK__OP_CONTRAST, STK__OP_COLOR,
                                            STK__OP_HUE};
    int n = 0;
    for (int i = 0; i < 4; i++) {
        int k = order[i];
        if (!on[k])
            continue;
        steps[n].op = ops[k];
        steps[n++].magnitude = k < 3 ? factor[k] - 1 : factor[k];
    }
    return n;
}

int stk__augment_any(const struct stk__augment_params *p)
{
    return p->policy != STK_AUTO_AUGMENT_NONE || p->color_jitter > 0 || p->hue_jitter > 0 ||
           p->grayscale_probability > 0 || p->blur_kernel > 0;
}

int stk__augment_draw(const struct stk__augment_params *p, int width, int height,
                      struct stk__draws *d, struct stk__aug_step *steps)
{
    int n = draw_policy(p, width, height, d, steps);
    if (p->color_jitter > 0 || p->hue_jitter > 0)
        n += draw_jitter(p, d, steps + n);
    if (p->grayscale_probability > 0 && stk__draw_uniform(d) < p->grayscale_probability)
        steps[n++] = (struct stk__aug_step){STK__OP_GRAYSCALE, 0};
    if (p->blur_kernel > 0) {
        double sigma =
            p->blur_sigma_min + (p->blur_sigma_max - p->blur_sigma_min) * stk__draw_uniform(d);
        steps[n++] = (struct stk__aug_step){STK__OP_BLUR, sigma};
    }
    return n;
}

int stk__augment_apply(const struct stk__augment_params *p, const struct stk__aug_image *img,
                       const struct stk__aug_step *steps, int n)
{
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (steps[i].op == STK__OP_BLUR)
            rc |= stk__aug_gaussian_blur(img, p->blur_kernel, steps[i].magnitude);
        else
            stk__aug_apply(img, steps[i].op, steps[i].magnitude, p->bilinear, NULL);
    }
    return rc;
}

/* Python's int(round(x)) for the box sides (round half to even). */
static double py_round(double x)
{
    return nearbyint(x);
}

int stk__augment_erase_box(double probability, int width, int height, struct stk__draws *d,
                           int *top, int *left, int *box_h, int *box_w)
{
    if (!(stk__draw_uniform(d) < probability))
        return 0;
    double area = (double)width * height;
    double log_lo = log(0.3), log_hi = log(3.3);
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (0.02 + (0.33 - 0.02) * stk__draw_uniform(d));
        double ratio = exp(log_lo + (log_hi - log_lo) * stk__draw_uniform(d));
        double h = py_round(sqrt(target * ratio)), w = py_round(sqrt(target / ratio));
        if (!(h < height && w < width))
            continue;
        *box_h = (int)h;
        *box_w = (int)w;
        *top = (int)stk__draw_int(d, 0, height - *box_h + 1);
        *left = (int)stk__draw_int(d, 0, width - *box_w + 1);
        return 1;
    }
    return 0;
}
