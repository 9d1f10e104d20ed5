/* SPDX-License-Identifier: MIT */
/*
 * errors_table.h - the one schema of stoker's error codes.
 *
 * Every code of enum stk_error (stoker.h) is one row here: what kind of
 * failure it is, the stoker.* exception class the Python module raises for
 * it and its static text. stk_strerror(), stk__error_is_bad_input() (what
 * on_error=skip may skip) and the Python exception classes are made from
 * it, so adding an error code is the enum value in stoker.h plus one row.
 * error.c refuses to compile when the enum has a code without a row (a
 * switch over the enum with no default) or a row names no code.
 *
 * X(name, kind, python_class, text)
 *   name: the code without STK_ (STK_ENOMEM: ENOMEM)
 *   kind: NONE (not a failure), INPUT (bad input: a shard, sample, image or
 *         label, or a shard that cannot be reached; on_error=skip skips
 *         it), CONFIG (options, the split, the cache, the dataset index, an
 *         existing output, the caller's use of the API: never skipped),
 *         SYSTEM (out of memory, a bug in stoker: never skipped)
 *   python_class: the stoker.NAME exception class; several codes share one
 *         (its .code is that of its first row), "Error" is the base class
 *   text: stk_strerror()'s text
 */
#ifndef STK_ERRORS_TABLE_H
#define STK_ERRORS_TABLE_H

/* clang-format off */
#define STK__ERRORS(X) \
    X(OK, NONE, "Error", "success") \
    X(ENOMEM, SYSTEM, "OutOfMemory", "out of memory") \
    X(EINVAL, CONFIG, "OptionError", "invalid argument") \
    X(ENOENT, INPUT, "NotFound", "no such shard or member") \
    X(EIO, INPUT, "ReadError", "I/O error") \
    X(EINTR, NONE, "Interrupted", "interrupted") \
    X(EEXIST, CONFIG, "OutputExists", "output exists") \
    X(EOF, NONE, "Error", "end of epoch") \
    X(EFORMAT, INPUT, "DataError", "not a readable tar shard") \
    X(ETRUNC, INPUT, "DataError", "shard is truncated") \
    X(ELIMIT, INPUT, "DataError", "size or count above the configured limit") \
    X(EDUPKEY, INPUT, "DataError", "sample key reappears later in the shard") \
    X(EPLAN, CONFIG, "PlanError", "cannot split the shards as asked") \
    X(EBUSY, CONFIG, "BusyError", "caller holds every batch the loader may have") \
    X(EINTERNAL, SYSTEM, "Error", "internal error in stoker") \
    X(EDECODE, INPUT, "DataError", "image cannot be decoded") \
    X(ELABEL, INPUT, "DataError", "sample has no usable label") \
    X(ECACHE, CONFIG, "CacheError", "node cache cannot hold or store the shard") \
    X(EHTTP, INPUT, "HTTPError", "HTTP request failed") \
    X(EMEMBER, INPUT, "DataError", "sample lacks a required member, or it does not parse") \
    X(EINDEX, CONFIG, "DataError", \
      "the dataset index is malformed or stale: run `stoker index` again") \
    X(EACCESS, CONFIG, "HTTPError", \
      "a server refused the credentials (HTTP 401 or 403)")
/* clang-format on */

#endif
