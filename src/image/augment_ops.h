/* SPDX-License-Identifier: MIT */
/*
 * augment_ops.h - the image operations of AutoAugment, RandAugment and
 * TrivialAugmentWide on an RGB8 image (rows width * 3 bytes apart), with
 * the arithmetic of torchvision.transforms.functional on uint8 tensors.
 *
 * They run on the crop at output size, in place, between the resampling
 * and the conversion to the batch's dtype and layout. Each takes its
 * parameter already drawn (augment_policy.c draws them), so the result is
 * a function of the image and the parameter alone.
 */
#ifndef STK_AUGMENT_OPS_H
#define STK_AUGMENT_OPS_H

#include <stdint.h>

/* The operations, in TrivialAugmentWide's order (its op index is this
 * value), then those only other policies use. */
enum stk__aug_op {
    STK__OP_IDENTITY,
    STK__OP_SHEAR_X,
    STK__OP_SHEAR_Y,
    STK__OP_TRANSLATE_X,
    STK__OP_TRANSLATE_Y,
    STK__OP_ROTATE,
    STK__OP_BRIGHTNESS,
    STK__OP_COLOR,
    STK__OP_CONTRAST,
    STK__OP_SHARPNESS,
    STK__OP_POSTERIZE,
    STK__OP_SOLARIZE,
    STK__OP_AUTOCONTRAST,
    STK__OP_EQUALIZE,
    STK__OP_INVERT, /* AutoAugment's policies only */
    STK__OP_HUE,       /* ColorJitter: magnitude is the hue factor */
    STK__OP_GRAYSCALE, /* RandomGrayscale */
    STK__OP_BLUR,      /* GaussianBlur: magnitude is sigma (the kernel is a parameter) */
    STK__OP_COUNT
};

/* Round half to even of 0 <= v < 2^23, as nearbyintf in the default
 * rounding mode: adding 2^23 leaves no fraction bits. nearbyintf itself is
 * a libm call on baseline x86-64 (no SSE4.1 roundss), which made the
 * sharpness blur and the affine sampling three times slower, and the
 * Gaussian blur's and uint8 Mixup's rounding a call per byte. */
static inline float stk__round_even_nonneg(float v)
{
    return (v + 0x1p23f) - 0x1p23f;
}

/* torch.round, then to(uint8): clamped to [0, 255] first (NaN to 0). */
static inline uint8_t stk__clamp_round_u8(float v)
{
    v = v >= 0.0f ? (v > 255.0f ? 255.0f : v) : 0.0f;
    return (uint8_t)stk__round_even_nonneg(v);
}

/* Bytes a scratch holds past the image: the vector kernel's 32-bit
 * gathers read one byte past the last pixel. */
#define STK__AUG_SCRATCH_SLACK 4

/* One RGB8 image, modified in place. scratch holds width * height * 3 +
 * STK__AUG_SCRATCH_SLACK bytes for the geometric operations (they read a
 * copy of the input). */
struct stk__aug_image {
    uint8_t *pixels;
    int width, height;
    uint8_t *scratch;
};

/* Apply op with torchvision's _apply_op magnitude: shear (the tangent),
 * translate (pixels, truncated toward zero as int()), rotate (degrees,
 * counter-clockwise), brightness/color/contrast/sharpness (factor - 1),
 * posterize (bits kept), solarize (threshold), hue (the factor); ignored
 * by the others (STK__OP_BLUR is stk__aug_gaussian_blur's).
 * bilinear selects grid_sample's bilinear mode instead of nearest; fill
 * is the value of pixels mapped from outside the image (NULL: zeros,
 * torchvision's fill=None). Any finite or infinite magnitude is safe:
 * nothing outside the image is read. */
void stk__aug_apply(const struct stk__aug_image *img, enum stk__aug_op op, double magnitude,
                    int bilinear, const uint8_t *fill);

/* torchvision's functional operations, used by the op above and by
 * ColorJitter and RandomGrayscale. factor is the adjust_* factor (>= 0). */
void stk__aug_affine(const struct stk__aug_image *img, const double inverse[6], int bilinear,
                     const uint8_t *fill);
void stk__aug_brightness(const struct stk__aug_image *img, double factor);
void stk__aug_saturation(const struct stk__aug_image *img, double factor);
void stk__aug_contrast(const struct stk__aug_image *img, double factor);
void stk__aug_sharpness(const struct stk__aug_image *img, double factor);
void stk__aug_grayscale(const struct stk__aug_image *img);

/* ColorJitter's adjust_hue (factor in [-0.5, 0.5]), in augment_color.c. */
void stk__aug_hue(const struct stk__aug_image *img, double factor);

/* Largest GaussianBlur kernel size. */
#define STK__AUG_MAX_BLUR_KERNEL 63 /* STK__AUG_BLUR_KERNEL_MAX of options_table.h */

/* F.gaussian_blur(kernel x kernel, sigma) with reflect padding; kernel
 * odd, 1 to STK__AUG_MAX_BLUR_KERNEL. -1 on a bad kernel or no memory
 * (the image is then unchanged). */
int stk__aug_gaussian_blur(const struct stk__aug_image *img, int kernel, double sigma);

/* torchvision's _get_inverse_affine_matrix (angle and shear in degrees,
 * center and translate in pixels from the image center). */
void stk__aug_inverse_matrix(double center_x, double center_y, double angle, double translate_x,
                             double translate_y, double scale, double shear_x, double shear_y,
                             double out[6]);

#endif
