/* SPDX-License-Identifier: MIT */
/*
 * mix.h - Mixup and CutMix of whole image batches, as the classification
 * reference of torchvision (references/classification/transforms.py:
 * RandomMixup and RandomCutmix, p=1, behind RandomChoice) does them in its
 * collate function: each image is mixed with the one before it in the
 * batch (the batch rolled by one), the labels likewise.
 *
 * The draws are keyed by (seed, epoch, rank, batch index) alone, so a
 * batch is mixed the same way whichever thread, process or host makes it,
 * and after a resume.
 */
#ifndef STK_MIX_H
#define STK_MIX_H

#include <stddef.h>
#include <stdint.h>

#include "image/image.h"

struct stk__mix_params {
    double mixup_alpha, cutmix_alpha; /* 0: that kind is off */
    double switch_probability;        /* CutMix's share when both are on */
    uint64_t seed, epoch;
    int rank;
};

/* What one batch gets: Mixup (weight lambda for each image's own pixels)
 * or CutMix (the box x1..x2, y1..y2 comes from the previous image; lambda
 * is the share of the image left as it was). */
struct stk__mix_draw {
    int cutmix;
    double lambda;
    int x1, y1, x2, y2;
};

/* 1 when any mixing is on. */
int stk__mix_enabled(const struct stk__mix_params *p);

/* The draw of batch `index` for width x height images. */
void stk__mix_draw(const struct stk__mix_params *p, uint64_t index, int width, int height,
                   struct stk__mix_draw *out);

/* Mix the n images of images (in cfg's dtype, layout and size) and write
 * each image's partner label into mix_labels. float16 images are refused
 * earlier (stk__image_config_init). scratch holds one image. */
void stk__mix_apply(const struct stk__mix_draw *d, const struct stk__image_config *cfg,
                    void *images, size_t n, const int64_t *labels, int64_t *mix_labels,
                    void *scratch);

#endif
