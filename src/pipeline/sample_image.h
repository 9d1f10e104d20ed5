/* SPDX-License-Identifier: MIT */
/*
 * sample_image.h - one sample to one output image and label: which member
 * is the image, which the label, which others it must hold; the pixels are
 * image/'s (image.h), which knows no samples.
 */
#ifndef STK_SAMPLE_IMAGE_H
#define STK_SAMPLE_IMAGE_H

#include <stdint.h>

#include "base/error.h"
#include "image/image.h"
#include "stoker.h"
#include "pipeline/members.h"
#include "tar/sample.h"

#define STK__MAX_LABEL_EXTS 8

/* What a sample must hold: stk_options.label_exts, label_json_field and
 * require_members. */
struct stk__sample_rules {
    char label_exts[STK__MAX_LABEL_EXTS][16];
    int n_label_exts;
    char label_json_field[64]; /* "" when labels come from label_exts */
    struct stk__member_rules members;
};

/* Fill r from options; STK_EINVAL on a label extension list that is too
 * long, a json field name too long or a bad require_members. */
int stk__sample_rules_init(struct stk__sample_rules *r, const struct stk_options *o,
                           struct stk__err *err);

/* 1 when samples carry labels (label_exts or label_json_field set). */
int stk__sample_rules_labelled(const struct stk__sample_rules *r);

/* Transform sample s, whose random stream has key (stk__image_transform),
 * into out (stk__image_bytes(cfg) bytes) and *label, after checking its
 * label and required members. Errors name the shard, key and member. */
int stk__sample_transform(struct stk__image_worker *w, const struct stk__sample_rules *r,
                          const struct stk__image_config *cfg, const struct stk__sample *s,
                          uint64_t key, void *out, int64_t *label, struct stk__err *err);

/* Check sample s as a training run would use it, without transforming it:
 * its label (as r asks; into *label), its required members and its image
 * member, decoded whole. Errors name the shard, key and member. */
int stk__sample_check(struct stk__image_worker *w, const struct stk__sample_rules *r,
                      const struct stk__sample *s, int64_t *label, struct stk__err *err);

#endif
