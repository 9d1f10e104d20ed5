/* SPDX-License-Identifier: MIT */
/*
 * _stoker.h - what the files of the CPython extension share.
 */
#ifndef STK_PY_STOKER_H
#define STK_PY_STOKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "stoker.h"

/* ---- exceptions (_errors.c) ---- */

/* stoker.Error and stoker.DataError, made by stk_py_add_error_classes. */
extern PyObject *stk_py_error, *stk_py_data_error;

/* Create every exception class into module m; -1 on failure. */
int stk_py_add_error_classes(PyObject *m);

/* Raise the exception of STK_E* code (one table in _errors.c) with the
 * detailed message; returns NULL. */
PyObject *stk_py_raise(int code, const char *message);

/* Raise stoker.OptionError (a ValueError), or with type_error
 * stoker.OptionTypeError (a TypeError), with a PyUnicode_FromFormat
 * message; returns NULL. */
PyObject *stk_py_option_error(int type_error, const char *fmt, ...);

/* Make cause (a reference this steals; NULL: none) the __cause__ of the
 * exception being raised. */
void stk_py_chain_cause(PyObject *cause);

/* ---- options (_options.c) ---- */

struct stk_options;

/* value (any object with __index__) as an integer in [min, max], stored in
 * *out as its two's complement; 0, or -1 with ValueError naming `name` and
 * the range (TypeError for a non-integer; both stoker.OptionError). Never
 * cut to fewer bits. */
int stk_py_integer(PyObject *value, const char *name, long long min, unsigned long long max,
                   unsigned long long *out);

/* Apply keyword option name=value (a field of struct stk_options; strings
 * are kept alive by appending them to the list keep). 0, or -1 with an
 * exception set. */
int stk_py_set_option(struct stk_options *o, PyObject *keep, const char *name, PyObject *value);

/* What a call such as verify(urls, **options) hands the C library: the
 * options of the keywords and the URLs (a str or a sequence), their
 * strings kept alive until stk_py_call_free(). */
struct stk_py_call {
    struct stk_options opts;
    const char **urls;
    Py_ssize_t n;
    PyObject *keep, *seq;
};

/* The str items of sequence urls as a PyMem array of n (+ NULL) pointers
 * into *seq, which the caller releases with the array; NULL with an
 * exception set. */
const char **stk_py_urls(PyObject *urls, Py_ssize_t *n, PyObject **seq);

/* 0, or -1 with an exception set; stk_py_call_free() it either way. */
int stk_py_call_init(struct stk_py_call *c, PyObject *urls, PyObject *kwargs);
void stk_py_call_free(struct stk_py_call *c);

/* stoker._stoker.options(): the option table as a list of dicts. */
PyObject *stk_py_options(PyObject *module, PyObject *unused);

/* ---- batches (_batch.c) ---- */

/* stoker._stoker.Batch and the views of its buffers. */
extern PyTypeObject stk_py_batch_type, stk_py_view_type;

/* A Batch owning batch (released here on failure), keeping loader alive.
 * skip_bad: the loader's on_error is "skip", so samples() leaves bad
 * samples out and adds how many to *skipped_in_python (a counter of the
 * loader's) once per batch. NULL with an exception set. */
PyObject *stk_py_batch_new(struct stk_batch *batch, PyObject *loader, int skip_bad,
                           unsigned long long *skipped_in_python);

/* ---- the loader (_loader.c) ---- */

/* stoker._stoker.Loader. */
extern PyTypeObject stk_py_loader_type;

/* ---- counters (_stats.c) ---- */

/* struct stk_stats as a dict, and as the input-bound report's text. */
PyObject *stk_py_stats_dict(struct stk_stats *s);
PyObject *stk_py_report_text(const struct stk_stats *s);

/* stoker._stoker.report(stats), rates(now, before=None), stats_fields()
 * and stats_kinds(). */
PyObject *stk_py_report(PyObject *module, PyObject *stats);
PyObject *stk_py_rates(PyObject *module, PyObject *args);
PyObject *stk_py_stats_fields(PyObject *module, PyObject *unused);
PyObject *stk_py_stats_kinds(PyObject *module, PyObject *unused);

/* stoker._stoker.verify(urls, **options) (_verify.c). */
PyObject *stk_py_verify(PyObject *module, PyObject *args, PyObject *kwargs);

/* stoker._stoker.index_build(path, urls, overwrite=False, **options) (_index.c). */
PyObject *stk_py_index_build(PyObject *module, PyObject *args, PyObject *kwargs);

/* The loader's log messages, queued from its threads (_log.c):
 * stk_py_log_push is a stk_options.log callback (any thread, no GIL);
 * stk_py_log_take returns and clears them as a list of (level, message)
 * with the GIL held. */
struct stk_py_log;
struct stk_py_log *stk_py_log_new(void);
void stk_py_log_free(struct stk_py_log *log);
void stk_py_log_push(void *log, enum stk_log_level level, const char *message);
PyObject *stk_py_log_take(struct stk_py_log *log);

/* stoker._stoker.ShardWriter (_writer.c). */
extern PyTypeObject stk_py_writer_type;

/* ---- the library's rules (_rules.c) ---- */

/* member_kind(ext), parse_size(text) and resolve_rank(rank, world_size)
 * of stoker._stoker. */
PyObject *stk_py_member_kind(PyObject *module, PyObject *ext);
PyObject *stk_py_parse_size(PyObject *module, PyObject *text);
PyObject *stk_py_resolve_rank(PyObject *module, PyObject *args);
PyObject *stk_py_node_split(PyObject *module, PyObject *args);

#endif
