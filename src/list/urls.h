/* SPDX-License-Identifier: MIT */
/*
 * urls.h - turn user URL patterns into the list of shard URLs.
 *
 * Patterns use the brace syntax WebDataset users already write:
 * "train-{000000..001023}.tar" (numeric ranges keep zero padding, an
 * optional step "{0..10..2}"), "{a,b,c}" alternatives, nested braces, and
 * "@FILE" for a file holding one pattern per line.
 */
#ifndef STK_URLS_H
#define STK_URLS_H

#include <stddef.h>

#include "base/error.h"
#include "base/strlist.h"

/* Hard caps on what one loader may name: 1M shards (a petabyte of 1 GB
 * shards) and 64 MiB of URL text, so a hostile pattern cannot make stoker
 * spend seconds or gigabytes expanding it. */
#define STK__MAX_SHARDS (1024u * 1024u)
#define STK__MAX_URL_BYTES (64u * 1024u * 1024u)

/* Expand one brace pattern, appending the results to out. */
int stk__brace_expand(const char *pattern, struct stk__strlist *out, struct stk__err *err);

/* Expand every pattern (reading @FILE lists) into out. */
int stk__expand_urls(const char *const *patterns, size_t n, struct stk__strlist *out,
                     struct stk__err *err);

#endif
