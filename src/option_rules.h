/* SPDX-License-Identifier: MIT */
/*
 * option_rules.h - options that act only beside another.
 *
 * A scale_min under transform "eval", or a cache_size without a cache_dir,
 * was taken and did nothing: the caller believed it in force. Each such
 * option has one rule here (what it needs, in words), and a loader refuses
 * a value given where it would not act, naming both.
 */
#ifndef STK_OPTION_RULES_H
#define STK_OPTION_RULES_H

#include "base/error.h"
#include "stoker.h"

/* 0, or STK_EINVAL naming the first option of o that differs from its
 * default (stk_options_init) where what it needs does not hold. o is what
 * the caller gave: check before stk__options_apply_recipe() fills in the
 * recipe's own values. */
int stk__option_rules_check(const struct stk_options *o, struct stk__err *err);

#endif
