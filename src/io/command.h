/* SPDX-License-Identifier: MIT */
/*
 * command.h - a command line run without a shell: its words, as the pipe
 * source and a profile's credential_process run them and as redaction
 * shows them, and the start of its program.
 *
 * One scanner serves both, so that a message shows a command split exactly
 * as it ran: blanks (space, tab, CR, LF) separate words; '...' keeps
 * everything literally; "..." keeps everything but lets \" and \\ stand
 * for " and \; outside quotes a backslash takes the next character
 * literally. No variables, globs, redirections or pipes.
 */
#ifndef STK_COMMAND_H
#define STK_COMMAND_H

#include <stddef.h>
#include <sys/types.h>

#include "base/error.h"

/* Most words a command may have. */
#define STK__COMMAND_MAX_WORDS 256

/* Scan the next word at or after p (leading blanks skipped). Returns 1 for
 * a word: its characters, quotes and escapes removed, in out[0 .. *len)
 * (out has room for strlen(p) bytes; no NUL is written), its raw text at
 * [*start, *end). 0: no word is left (*start = *end = the end of p). -1: a
 * quote (*quote) is not closed: out holds the characters up to the end of
 * p, which *end points to. Does no allocation. */
int stk__command_word(const char *p, const char **start, const char **end, char *out,
                      size_t *len, char *quote);

/* Split a command line into words by the rules above. On success *words
 * is one allocation holding a NULL-terminated argv (stk__free it) and
 * *count the number of words (>= 1). Messages do not quote the command (it
 * may hold secrets): the caller names it. */
int stk__split_command(const char *cmd, char ***words, size_t *count, struct stk__err *err);

/* Start argv[0] (looked up on PATH) with standard input from /dev/null,
 * standard output on out_fd and standard error on err_fd (-1: inherited),
 * in a process group of its own (so that killing -*pid stops what it
 * started too) and with SIGPIPE at its default whatever this process set.
 * Returns 0, or the errno value why it could not start. */
int stk__spawn_command(char *const argv[], int out_fd, int err_fd, pid_t *pid);

#endif
