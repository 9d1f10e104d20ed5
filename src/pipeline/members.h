/* SPDX-License-Identifier: MIT */
/*
 * members.h - the members a sample must hold besides its image, and how
 * each one parses.
 *
 * A caller that uses a sample's caption or metadata along with its image
 * (stk_options.require_members) wants a sample without them, or with one
 * that does not parse, to be bad input like a corrupt image: found by the
 * decode threads, skipped or reported by the same policy, never a surprise
 * in the caller's loop. How a member parses follows WebDataset's default
 * decoders, keyed by the last '.'-separated part of the extension.
 */
#ifndef STK_MEMBERS_H
#define STK_MEMBERS_H

#include <stdint.h>

#include "base/error.h"
#include "tar/sample.h"
#include "stoker.h"

#define STK__MAX_REQUIRED_MEMBERS 16
#define STK__MEMBER_EXT_MAX 32 /* bytes, with the NUL */

/* The extensions of images (STK_MEMBER_IMAGE), in the order a sample's
 * image is looked for when it has several. */
#define STK__N_IMAGE_EXTS 3
extern const char *const stk__image_exts[STK__N_IMAGE_EXTS];

struct stk__member_rules {
    struct {
        char ext[STK__MEMBER_EXT_MAX]; /* "txt", or alternatives "jpg;png": the first found */
        int optional; /* may be missing ("ext?") */
    } items[STK__MAX_REQUIRED_MEMBERS];
    int n;
};

/* Parse stk_options.require_members (NULL or "" : no rule). STK_EINVAL
 * with a message naming the option on a bad list. */
int stk__member_rules_init(struct stk__member_rules *r, const char *spec, struct stk__err *err);

/* The sample's member with this extension, or NULL. */
const struct stk_member *stk__sample_member(const struct stk__sample *s, const char *ext);

/* The decimal integer a member holds (blanks around it allowed, int64
 * range, nothing else); 0, or -1 when it holds something else. */
int stk__member_int(const struct stk_member *m, int64_t *value);

/* 1 when data[0..size) is well-formed UTF-8 (what Python's strict decoder
 * accepts), else 0. */
int stk__utf8_valid(const uint8_t *data, size_t size);

/* Check sample s against the rules: 0, or STK_EMEMBER with a message
 * naming the shard, the key and the member. */
int stk__members_check(const struct stk__member_rules *r, const struct stk__sample *s,
                       struct stk__err *err);

#endif
