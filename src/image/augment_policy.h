/* SPDX-License-Identifier: MIT */
/*
 * augment_policy.h - which augmentation operations a sample gets, drawn as
 * torchvision's AutoAugment (ImageNet policy), RandAugment and
 * TrivialAugmentWide draw them, and RandomErasing's box.
 *
 * The draws come from the sample's own stream (augment.h), so a sample
 * gets the same operations in a given epoch whatever thread, process or
 * host makes it. Drawing and applying are separate so tests can compare
 * the drawn distribution with torchvision's.
 */
#ifndef STK_AUGMENT_POLICY_H
#define STK_AUGMENT_POLICY_H

#include <stdint.h>

#include "image/augment.h"
#include "image/augment_ops.h"
#include "stoker.h"

/* Most operations one sample can get: RandAugment's num_ops bound, then
 * ColorJitter's four, RandomGrayscale and GaussianBlur. */
#define STK__AUG_MAX_STEPS 24

struct stk__augment_params {
    enum stk_auto_augment policy;
    int bins;      /* magnitude bins (TrivialAugmentWide, RandAugment) */
    int num_ops;   /* RandAugment */
    int magnitude; /* RandAugment's bin, < bins */
    int bilinear;  /* geometric ops: bilinear, else nearest */
    /* ColorJitter(brightness=contrast=saturation=color_jitter, hue), then
     * RandomGrayscale, then GaussianBlur (kernel 0: off). */
    double color_jitter, hue_jitter;
    double grayscale_probability;
    int blur_kernel;
    double blur_sigma_min, blur_sigma_max;
    double erase_probability;
};

/* 1 when p applies any operation to the pixels of the crop (erasing
 * aside). */
int stk__augment_any(const struct stk__augment_params *p);

struct stk__aug_step {
    enum stk__aug_op op;
    double magnitude;
};

/* The operations for one width x height image: up to STK__AUG_MAX_STEPS
 * into steps, their count returned. */
int stk__augment_draw(const struct stk__augment_params *p, int width, int height,
                      struct stk__draws *d, struct stk__aug_step *steps);

/* Apply the n steps drawn for img. Returns -1 only when the blur found no
 * memory (the image then lacks that step). */
int stk__augment_apply(const struct stk__augment_params *p, const struct stk__aug_image *img,
                       const struct stk__aug_step *steps, int n);

/* Magnitude of bin `bin` of op in the policy's table (torchvision's
 * float32 linspace values); 0 for the operations without magnitudes. */
double stk__augment_magnitude(const struct stk__augment_params *p, enum stk__aug_op op, int bin,
                              int width, int height);

/* RandomErasing(p, scale=(0.02, 0.33), ratio=(0.3, 3.3)).get_params on a
 * width x height image: 1 with the box, or 0 when the coin says no or no
 * attempt fits. */
int stk__augment_erase_box(double probability, int width, int height, struct stk__draws *d,
                           int *top, int *left, int *box_h, int *box_w);

#endif
