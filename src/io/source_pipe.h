/* SPDX-License-Identifier: MIT */
/*
 * source_pipe.h - pipe:COMMAND shards: the standard output of a program.
 */
#ifndef STK_SOURCE_PIPE_H
#define STK_SOURCE_PIPE_H

#include <stddef.h>

#include "io/source.h"

/* Run the command after "pipe:" (refused unless cfg->allow_pipe) with its
 * standard output as the stream; see stk_options.allow_pipe for the rules. */
int stk__source_pipe_open(const char *url, const struct stk__source_config *cfg,
                          struct stk__source **out, struct stk__err *err);

#endif
