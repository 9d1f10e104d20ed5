/* SPDX-License-Identifier: MIT */
/*
 * augment.h - where to crop and whether to flip, torchvision's way.
 *
 * The crop boxes follow torchvision.transforms: RandomResizedCrop.get_params
 * (10 attempts at a random area and log-uniform aspect ratio, then the
 * central fallback) and Resize(size / 0.875) + CenterCrop(size). Random
 * numbers come from a counter-based generator keyed by the sample's
 * identity, so the same sample gets the same crop in a given epoch whatever
 * thread decodes it.
 */
#ifndef STK_AUGMENT_H
#define STK_AUGMENT_H

#include <stdint.h>

/* A crop box in source pixels, as torchvision's (top, left, height, width),
 * whether to flip it, and the black rows and columns around it in the
 * output (eval only: where the resized image is smaller than the output);
 * the box fills the rest of the output. */
struct stk__crop {
    double top, left, height, width;
    int flip;
    int pad_top, pad_left, pad_bottom, pad_right;
};

struct stk__train_params {
    double scale_min, scale_max;
    double ratio_min, ratio_max;
    double flip_probability;
};

/* A deterministic uniform stream for one sample. */
struct stk__draws {
    uint64_t key;
    uint64_t counter;
};

/* The key of a sample's stream: a hash of its identity (the seed, the
 * epoch, its shard, the pass over the rank's shards and its position among
 * the shard's good samples). Batches carry it (stk_batch.sample_keys) so
 * that user hooks draw from the same identity as stoker's own crops. */
uint64_t stk__draws_key(uint64_t seed, uint64_t epoch, uint64_t shard, uint64_t pass,
                        uint64_t position);
/* d starts the stream of key (a stk__draws_key). */
void stk__draws_from_key(struct stk__draws *d, uint64_t key);
/* The same for the key of these identities. */
void stk__draws_init(struct stk__draws *d, uint64_t seed, uint64_t epoch, uint64_t shard,
                     uint64_t pass, uint64_t position);
/* A second stream of the same sample, independent of d's draws so far:
 * the augmentations draw from one, so a sample's crop is the same with or
 * without them. */
void stk__draws_fork(const struct stk__draws *d, uint64_t tag, struct stk__draws *out);
/* Uniform double in [0, 1). */
double stk__draw_uniform(struct stk__draws *d);
/* Uniform integer in [lo, hi) (Python's random.randint(lo, hi - 1)). */
int64_t stk__draw_int(struct stk__draws *d, int64_t lo, int64_t hi);
/* Two independent standard normal numbers from two uniforms (Box-Muller). */
void stk__draw_normals(struct stk__draws *d, double out[2]);

/* RandomResizedCrop box for a width x height image, then the flip draw. */
void stk__crop_train(const struct stk__train_params *p, int width, int height,
                     struct stk__draws *d, struct stk__crop *out);

/* Resize(short side = int(min(out_height, out_width) / 0.875)) +
 * CenterCrop((out_height, out_width)), expressed as a box in source pixels
 * and the padding CenterCrop adds where the resized image is smaller than
 * the output: resampling that box to the output less the padding gives the
 * same pixels as resizing the whole image then cropping. */
void stk__crop_eval(int width, int height, int out_height, int out_width, struct stk__crop *out);
/* The same with the short side resized to short_side (0: as above), the
 * reference recipe's --val-resize-size. */
void stk__crop_eval_resized(int width, int height, int short_side, int out_height, int out_width,
                            struct stk__crop *out);

#endif
