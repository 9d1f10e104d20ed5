/*
 * image.h - one sample to one output image and label.
 *
 * Finds the image and label members, draws the crop, decodes only what the
 * crop needs, resamples it (Pillow-exact antialiased bilinear) and writes
 * the result, flipped if drawn, in the batch's dtype and layout straight
 * into its slot of the batch buffer.
 */
#ifndef STK_IMAGE_H
#define STK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "image/augment.h"
#include "image/augment_policy.h"
#include "base/error.h"
#include "tar/members.h"
#include "tar/sample.h"
#include "stoker.h"

#define STK__MAX_LABEL_EXTS 8

struct stk__image_config {
    enum stk_transform transform;
    int height, width; /* of the output */
    int eval_resize;   /* short side before the eval center crop (0: size / 0.875) */
    enum stk_dtype dtype;
    enum stk_layout layout;
    struct stk__train_params train;
    uint64_t seed;
    uint64_t epoch;
    uint64_t max_pixels;
    int full_decode;
    double dct_margin; /* stk_options.dct_margin, its default resolved */
    char label_exts[STK__MAX_LABEL_EXTS][16];
    int n_label_exts;
    char label_json_field[64]; /* "" when labels come from label_exts */
    struct stk__member_rules members; /* stk_options.require_members */
    struct stk__augment_params augment; /* train only; policy NONE, erase 0: off */
    uint8_t erase_u8[3]; /* RandomErasing's value in uint8 outputs */
    /* Output value of each 8-bit level per channel, in the output dtype
     * (float32, or the 16-bit pattern of float16/bfloat16). */
    float lut_f32[3][256];
    uint16_t lut_u16[3][256];
};

/* Fill cfg from options; fails on bad values (unknown dtype, std == 0, a
 * label extension list that is too long ...). */
int stk__image_config_init(struct stk__image_config *cfg, const struct stk_options *o,
                           struct stk__err *err);

/* The bfloat16 nearest to f (ties to even). */
uint16_t stk__float_to_bfloat16(float f);

/* Bytes of one output image. */
size_t stk__image_bytes(const struct stk__image_config *cfg);

/* Per-thread state: decoder, resampling scratch, an RGB staging image. */
struct stk__image_worker;
struct stk__image_worker *stk__image_worker_new(const struct stk__image_config *cfg);
void stk__image_worker_free(struct stk__image_worker *w);

/* Time one worker spent in each stage of stk__image_render, in ns. convert
 * is the conversion to the output dtype and layout where it runs as a pass
 * of its own (eval crops with padding); elsewhere it runs inside the
 * resampler's last pass and counts in resample. */
struct stk__stage_ns {
    uint64_t decode, resample, convert, augment, erase;
};

/* The worker's stage times since the previous call; resets them. */
void stk__image_worker_take_times(struct stk__image_worker *w, struct stk__stage_ns *out);

/* Test hook: simd = 0 takes the portable kernels for resampling and
 * conversion (else AVX2 where the CPU has it), fuse = 0 converts the
 * resampled image in a pass of its own (else row by row from the
 * resampler). Every choice gives the same bytes. */
void stk__image_worker_force_paths(struct stk__image_worker *w, int simd, int fuse);

/* Decode image bytes and render the crop (eval: the box of a whole-image
 * resize, filter bounded by the image; train: the crop as its own image)
 * into out, without cfg->augment's augmentations (stk__image_transform
 * applies them, from the sample's own stream). */
int stk__image_render(struct stk__image_worker *w, const struct stk__image_config *cfg,
                      const uint8_t *data, size_t size, const struct stk__crop *crop, int eval,
                      void *out, struct stk__err *err);

/* Transform sample s into out (stk__image_bytes() bytes) and *label,
 * after checking its label and required members. Errors name the shard,
 * key and member. */
int stk__image_transform(struct stk__image_worker *w, const struct stk__image_config *cfg,
                         const struct stk__sample *s, void *out, int64_t *label,
                         struct stk__err *err);

/* Check sample s as a training run would use it, without transforming it:
 * its label (as cfg asks; into *label), its required members and its image
 * member, decoded whole. Errors name the shard, key and member. */
int stk__image_check(struct stk__image_worker *w, const struct stk__image_config *cfg,
                     const struct stk__sample *s, int64_t *label, struct stk__err *err);

#endif
