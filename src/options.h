/* SPDX-License-Identifier: MIT */
/*
 * options.h - options by name, inside the library (options_table.h is the
 * schema; the public side is stk_options_set() and stk_option_at()).
 */
#ifndef STK_OPTIONS_H
#define STK_OPTIONS_H

#include "base/error.h"
#include "options_table.h"
#include "stoker.h"

/* stk_options_set() with the message in err. */
int stk__options_set(struct stk_options *o, const char *name, const char *value,
                     struct stk__err *err);

/* The string fields of struct stk_options (the table's STRING rows), for
 * the loader to copy: STK__N_OPTION_STRINGS of them, the i-th of o by
 * stk__option_string(). */
#define STK__IS_STRING_BOOL 0
#define STK__IS_STRING_INT 0
#define STK__IS_STRING_UINT 0
#define STK__IS_STRING_SIZE 0
#define STK__IS_STRING_U64 0
#define STK__IS_STRING_FLOAT 0
#define STK__IS_STRING_FLOAT3 0
#define STK__IS_STRING_CHOICE 0
#define STK__IS_STRING_STRING 1
#define STK__COUNT_STRING(name, type, ...) +STK__IS_STRING_##type
enum { STK__N_OPTION_STRINGS = 0 STK__OPTIONS(STK__COUNT_STRING) };
const char **stk__option_string(struct stk_options *o, size_t i);

/* Every option with a range (integers, choices) within it, or at its
 * default: 0, or STK_EINVAL naming the option, its value and what it
 * accepts. */
int stk__options_check(const struct stk_options *o, struct stk__err *err);

/* Fill the options o->recipe names that are still at their defaults
 * (stk_options.recipe). */
void stk__options_apply_recipe(struct stk_options *o);

#endif
