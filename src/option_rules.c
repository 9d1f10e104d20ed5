/* SPDX-License-Identifier: MIT */
/*
 * option_rules.c - which options act only beside another (option_rules.h).
 *
 * One row per option that has a condition: its field (named at compile
 * time, so a renamed field breaks the build, not the rule), the predicate
 * over the other options, and the condition in words for the message.
 * "Given" is "differs from stk_options_init()": a default passed
 * explicitly (Python's Loader passes image_size=224 to every loader) is no
 * request. Conditions read the caller's values, so recipe=torchvision-v2
 * counts as asking for its augmentations and Mixup/CutMix.
 */
#include "option_rules.h"

#include <stddef.h>
#include <string.h>

static int decodes(const struct stk_options *o)
{
    return o->transform != STK_TRANSFORM_NONE;
}

static int trains(const struct stk_options *o)
{
    return o->transform == STK_TRANSFORM_TRAIN;
}

static int evaluates(const struct stk_options *o)
{
    return o->transform == STK_TRANSFORM_EVAL;
}

static int recipe(const struct stk_options *o)
{
    return o->recipe == STK_RECIPE_TORCHVISION_V2;
}

static int augments(const struct stk_options *o)
{
    return trains(o) && (o->auto_augment != STK_AUTO_AUGMENT_NONE || recipe(o));
}

/* TrivialAugmentWide and RandAugment draw from augment_magnitude_bins;
 * AutoAugment's ImageNet policy has its own 10 (augment_policy.c). The
 * recipe's policy is TrivialAugmentWide when auto_augment is none. */
static int bins_augments(const struct stk_options *o)
{
    enum stk_auto_augment a = o->auto_augment;
    return trains(o) && (a == STK_AUTO_AUGMENT_TA_WIDE || a == STK_AUTO_AUGMENT_RA ||
                         (a == STK_AUTO_AUGMENT_NONE && recipe(o)));
}

static int rand_augments(const struct stk_options *o)
{
    return trains(o) && o->auto_augment == STK_AUTO_AUGMENT_RA;
}

static int blurs(const struct stk_options *o)
{
    return trains(o) && o->blur_kernel > 0;
}

static int mixes(const struct stk_options *o)
{
    return trains(o) && (o->mixup_alpha > 0 || o->cutmix_alpha > 0 || recipe(o));
}

static int mixes_both(const struct stk_options *o)
{
    return trains(o) && ((o->mixup_alpha > 0 && o->cutmix_alpha > 0) || recipe(o));
}

/* uint8 batches are not normalized (that is left to the GPU). */
static int normalizes(const struct stk_options *o)
{
    return decodes(o) && o->dtype != STK_DTYPE_UINT8;
}

static int erases(const struct stk_options *o)
{
    return trains(o) && (o->random_erase > 0 || recipe(o));
}

/* RandomErasing's value 0 is the mean in uint8 batches (image.c). */
static int normalizes_or_erases(const struct stk_options *o)
{
    return normalizes(o) || erases(o);
}

/* Without shuffling the sequencer's window is one sample
 * (stk__pipeline_shuffle_window); shards_in_flight still acts: the shards
 * read at once are interleaved in turn. */
static int shuffles(const struct stk_options *o)
{
    return o->shuffle != 0;
}

/* The split by sample and the global order need a dataset index's counts
 * and offsets (plan.h, loader.c). */
static int indexed(const struct stk_options *o)
{
    return o->index_path != NULL && o->index_path[0] != '\0';
}

static int indexed_and_shuffles(const struct stk_options *o)
{
    return indexed(o) && shuffles(o);
}

static int scales_dct(const struct stk_options *o)
{
    return decodes(o) && !o->full_decode;
}

static int has_affinity(const struct stk_options *o)
{
    return o->node_affinity != 0;
}

static int caches(const struct stk_options *o)
{
    return o->cache_dir != NULL && o->cache_dir[0] != '\0';
}

struct rule {
    const char *name;
    size_t offset, size;
    int (*acts)(const struct stk_options *o);
    const char *needs;
};

#define TRAIN "transform=train"
#define DECODE "transform=train or eval"
#define RULE(field, pred, needs)                                                                  \
    {#field, offsetof(struct stk_options, field), sizeof(((struct stk_options *)0)->field), pred, \
     needs}
static const struct rule rules[] = {
    RULE(image_size, decodes, DECODE),
    RULE(ranks_per_node, has_affinity, "node_affinity other than 0"),
    RULE(image_height, decodes, DECODE),
    RULE(image_width, decodes, DECODE),
    RULE(dtype, decodes, DECODE),
    RULE(layout, decodes, DECODE),
    RULE(full_decode, decodes, DECODE),
    RULE(recipe, decodes, DECODE),
    /* checked with the labels, where samples are decoded (sample_rules) */
    RULE(require_members, decodes, DECODE),
    RULE(mean, normalizes_or_erases, "a float dtype (uint8 batches are not normalized), or "
                                     "random_erase under " TRAIN),
    RULE(std, normalizes, "a float dtype (uint8 batches are not normalized)"),
    RULE(dct_margin, scales_dct, DECODE " without full_decode"),
    RULE(scale_min, trains, TRAIN),
    RULE(scale_max, trains, TRAIN),
    RULE(ratio_min, trains, TRAIN),
    RULE(ratio_max, trains, TRAIN),
    RULE(flip_probability, trains, TRAIN),
    RULE(auto_augment, trains, TRAIN),
    RULE(color_jitter, trains, TRAIN),
    RULE(hue_jitter, trains, TRAIN),
    RULE(grayscale_probability, trains, TRAIN),
    RULE(blur_kernel, trains, TRAIN),
    RULE(random_erase, trains, TRAIN),
    RULE(mixup_alpha, trains, TRAIN),
    RULE(cutmix_alpha, trains, TRAIN),
    RULE(augment_interpolation, augments, "auto_augment (or recipe) under " TRAIN),
    RULE(augment_magnitude_bins, bins_augments,
         "auto_augment=ta_wide or ra (or recipe) under " TRAIN
         " (AutoAugment's imagenet policy has its own 10 bins)"),
    RULE(ra_num_ops, rand_augments, "auto_augment=ra under " TRAIN),
    RULE(ra_magnitude, rand_augments, "auto_augment=ra under " TRAIN),
    RULE(blur_sigma_min, blurs, "blur_kernel under " TRAIN),
    RULE(blur_sigma_max, blurs, "blur_kernel under " TRAIN),
    RULE(num_classes, mixes, "mixup_alpha or cutmix_alpha (or recipe) under " TRAIN),
    RULE(mix_switch_probability, mixes_both,
         "both mixup_alpha and cutmix_alpha (or recipe) under " TRAIN),
    RULE(random_erase_value, erases, "random_erase (or recipe) under " TRAIN),
    RULE(interpolation, decodes, DECODE),
    RULE(eval_resize, evaluates, "transform=eval"),
    RULE(shuffle_buffer, shuffles, "shuffle"),
    RULE(cache_size, caches, "cache_dir"),
    RULE(whole_shards, indexed, "index_path (a dataset index)"),
    RULE(window_shuffle, indexed_and_shuffles, "index_path (a dataset index) and shuffle"),
};
#undef RULE
#define N_RULES (sizeof rules / sizeof rules[0])

static int given(const struct rule *r, const struct stk_options *o, const struct stk_options *d)
{
    const char *a = (const char *)o + r->offset, *b = (const char *)d + r->offset;
    return memcmp(a, b, r->size) != 0;
}

int stk__option_rules_check(const struct stk_options *o, struct stk__err *err)
{
    struct stk_options defaults;
    stk_options_init(&defaults);
    for (size_t i = 0; i < N_RULES; i++)
        if (given(&rules[i], o, &defaults) && !rules[i].acts(o))
            return stk__errf(err, STK_EINVAL,
                             "%s is set but acts only with %s: leave it out here (a loader "
                             "refuses an option it would ignore)",
                             rules[i].name, rules[i].needs);
    return 0;
}

const char *stk_option_needs(const struct stk_option_info *o)
{
    for (size_t i = 0; o != NULL && i < N_RULES; i++)
        if (strcmp(rules[i].name, o->name) == 0)
            return rules[i].needs;
    return NULL;
}
