/*
 * options.h - options by name, inside the library (options_table.h is the
 * schema; the public side is stk_options_set() and stk_option_at()).
 */
#ifndef STK_OPTIONS_H
#define STK_OPTIONS_H

#include "error.h"
#include "stoker.h"

/* stk_options_set() with the message in err. */
int stk__options_set(struct stk_options *o, const char *name, const char *value,
                     struct stk__err *err);

/* Every option with a range (integers, choices) within it, or at its
 * default: 0, or STK_EINVAL naming the option, its value and what it
 * accepts. */
int stk__options_check(const struct stk_options *o, struct stk__err *err);

#endif
