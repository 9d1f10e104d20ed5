/* SPDX-License-Identifier: MIT */
/*
 * source_pipe.h - pipe:COMMAND shards: the standard output of a program.
 */
#ifndef STK_SOURCE_PIPE_H
#define STK_SOURCE_PIPE_H

#include <stddef.h>

#include "io/source.h"

/* Most arguments a pipe: command may have. */
#define STK__PIPE_MAX_ARGS 256

/* Run the command after "pipe:" (refused unless cfg->allow_pipe) with its
 * standard output as the stream; see stk_options.allow_pipe for the rules. */
int stk__source_pipe_open(const char *url, const struct stk__source_config *cfg,
                          struct stk__source **out, struct stk__err *err);

/* Split a command line into words without a shell, by the rules of
 * command.h. On success *words is one allocation holding a NULL-terminated
 * argv (stk__free it) and *count the number of words (>= 1). Messages do
 * not quote the command (it may hold secrets): the caller names it. */
int stk__split_command(const char *cmd, char ***words, size_t *count, struct stk__err *err);

#endif
