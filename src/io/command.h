/* SPDX-License-Identifier: MIT */
/*
 * command.h - the words of a pipe: command, as the pipe source runs them
 * and as redaction shows them.
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

/* Scan the next word at or after p (leading blanks skipped). Returns 1 for
 * a word: its characters, quotes and escapes removed, in out[0 .. *len)
 * (out has room for strlen(p) bytes; no NUL is written), its raw text at
 * [*start, *end). 0: no word is left (*start = *end = the end of p). -1: a
 * quote (*quote) is not closed: out holds the characters up to the end of
 * p, which *end points to. Does no allocation. */
int stk__command_word(const char *p, const char **start, const char **end, char *out,
                      size_t *len, char *quote);

#endif
