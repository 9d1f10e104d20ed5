/* SPDX-License-Identifier: MIT */
/*
 * abi.h - structs the caller allocates, across library versions.
 *
 * A program built against an older stoker.h passes a smaller stk_options or
 * stk_stats than this library's, one built against a newer header a larger
 * one (stoker.h, "Binary compatibility"). The library works on its own full
 * structs and copies to and from the caller's through these, so it never
 * reads or writes past the caller's size.
 */
#ifndef STK_ABI_H
#define STK_ABI_H

#include <stddef.h>

#include "base/error.h"
#include "stoker.h"

/* Copy the caller's src_size bytes into the library's struct dst (dst_size
 * bytes), zeroing the fields src lacks (their default, by the rule that
 * fields added after 0.1 default to zero). Returns 0, or -1 when src holds
 * non-zero bytes past dst_size: settings this library does not know. */
int stk__struct_import(void *dst, size_t dst_size, const void *src, size_t src_size);

/* Copy between a caller's struct and the library's, of sizes that may
 * differ: the fields both know, and zeros in the fields only dst has (for
 * a caller's stk_stats in either direction, where fields the library does
 * not know are neither written nor read). */
void stk__struct_copy(void *dst, size_t dst_size, const void *src, size_t src_size);

/* The caller's options (of opts->struct_size bytes) as this library's
 * struct; STK_EINVAL when they were not made by stk_options_init() or set
 * options this library does not know. */
int stk__options_import(struct stk_options *dst, const struct stk_options *opts,
                        struct stk__err *err);

#endif
