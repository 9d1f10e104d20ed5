/* SPDX-License-Identifier: MIT */
/*
 * image.h - image bytes to one output image.
 *
 * Draws the crop, decodes only what the crop needs, resamples it
 * (Pillow-exact antialiased bilinear or
 * bicubic) and writes the result, flipped if
 * drawn, in the batch's dtype and layout straight into its slot of the
 * batch buffer. Pixels only: which member of a sample is its image, and its
 * label, are pipeline/sample_image.h's business.
 */
#ifndef STK_IMAGE_H
#define STK_IMAGE_H

#include <stddef.h>
#include <stdint.h>

#include "image/augment.h"
#include "image/augment_policy.h"
#include "base/error.h"
#include "image/resize.h"
#include "stoker.h"

struct stk__image_config {
    enum stk_transform transform;
    int height, width; /* of the output */
    int eval_resize;   /* short side before the eval center crop (0: size / 0.875) */
    enum stk__resize_filter filter; /* stk_options.interpolation */
    enum stk_dtype dtype;
    enum stk_layout layout;
    struct stk__train_params train;
    uint64_t seed;
    uint64_t max_pixels;
    int full_decode;
    double dct_margin; /* stk_options.dct_margin, its default resolved */
    struct stk__augment_params augment; /* train only; policy NONE, erase 0: off */
    uint8_t erase_u8[3]; /* RandomErasing's value 0 in uint8 outputs */
    int erase_random;    /* value="random": a standard normal per element */
    /* 255 * mean and 255 * std: the uint8 level of a normalized value z is
     * erase_level[c][0] + erase_level[c][1] * z */
    double erase_level[3][2];
    /* Output value of each 8-bit level per channel, in the output dtype
     * (float32, or the 16-bit pattern of float16/bfloat16). */
    float lut_f32[3][256];
    uint16_t lut_u16[3][256];
};

/* Fill cfg from options; fails on bad values (unknown dtype, std == 0 ...). */
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
    /* within augment: each operation's time and runs, by enum stk__aug_op */
    uint64_t op_ns[STK__OP_COUNT], op_runs[STK__OP_COUNT];
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

/* Decode data[0..size) and transform it into out (stk__image_bytes()
 * bytes): eval, the center crop; train, the crop, flip and cfg->augment's
 * augmentations drawn from key: its sample's stk__draws_key (of cfg's seed
 * and epoch, its shard, pass and position; never a thread), the key its
 * batch carries. A message says what is wrong with the image; the caller
 * names where it came from. */
int stk__image_transform(struct stk__image_worker *w, const struct stk__image_config *cfg,
                         const uint8_t *data, size_t size, uint64_t key,
                         void *out, struct stk__err *err);

/* Decode data[0..size) whole, as a check that it decodes. */
int stk__image_check(struct stk__image_worker *w, const uint8_t *data, size_t size,
                     struct stk__err *err);

#endif
