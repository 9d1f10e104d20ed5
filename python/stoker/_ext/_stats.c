/* SPDX-License-Identifier: MIT */
/*
 * _stats.c - counters as Python dicts: stats() and report() of a loader,
 * and the module's report(), rates() and stats_fields(), all from the
 * library's one table of struct stk_stats fields.
 */
#include "_stoker.h"

/* Every field of struct stk_stats by name, from the library's table:
 * stats() builds its dict from it and report() reads such a dict back, so
 * the two cannot disagree. */
static uint64_t *stats_field(struct stk_stats *s, const struct stk_stats_field *f)
{
    return (uint64_t *)((char *)s + f->offset);
}

PyObject *stk_py_stats_dict(struct stk_stats *s)
{
    PyObject *d = PyDict_New();
    const struct stk_stats_field *f;
    for (size_t i = 0; d != NULL && (f = stk_stats_field_at(i)) != NULL; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(*stats_field(s, f));
        if (v == NULL || PyDict_SetItemString(d, f->name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

PyObject *stk_py_report_text(const struct stk_stats *s)
{
    char text[8192]; /* a few lines, one per augmentation op that ran: under 4 KiB */
    size_t n = stk_stats_report(s, text, sizeof text);
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)(n < sizeof text ? n : sizeof text - 1));
}

/* The counters of a dict shaped like Loader.stats(); missing keys count 0
 * (other keys are ignored). 0, or -1 with an exception set. */
static int stats_from_dict(const char *fn, PyObject *stats, struct stk_stats *s)
{
    if (!PyDict_Check(stats)) {
        PyErr_Format(PyExc_TypeError, "%s() takes a dict of counters", fn);
        return -1;
    }
    memset(s, 0, sizeof *s);
    const struct stk_stats_field *f;
    for (size_t i = 0; (f = stk_stats_field_at(i)) != NULL; i++) {
        PyObject *v = PyDict_GetItemString(stats, f->name);
        if (v == NULL)
            continue;
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *stats_field(s, f) = u;
    }
    return 0;
}

/* report(stats): stk_stats_report of a dict shaped like Loader.stats(), for
 * counters put together in Python (a Loader with cluster=). */
PyObject *stk_py_report(PyObject *module, PyObject *stats)
{
    (void)module;
    struct stk_stats s;
    if (stats_from_dict("report", stats, &s) < 0)
        return NULL;
    return stk_py_report_text(&s);
}

/* rates(now, before=None): stk_stats_rates of two such dicts, as a dict. */
PyObject *stk_py_rates(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *now_d, *before_d = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:rates", &now_d, &before_d))
        return NULL;
    struct stk_stats now, before;
    if (stats_from_dict("rates", now_d, &now) < 0 ||
        (before_d != Py_None && stats_from_dict("rates", before_d, &before) < 0))
        return NULL;
    struct stk_rates r;
    stk_stats_rates(&now, before_d != Py_None ? &before : NULL, &r);
    return Py_BuildValue("{sdsdsdsdsdsdsdsdsdsdsdsdsd}", "seconds", r.seconds, "samples_per_s",
                         r.samples_per_s, "images_per_s", r.images_per_s, "read_bytes_per_s",
                         r.read_bytes_per_s, "wait_share", r.wait_share, "read_busy",
                         r.read_busy, "decode_busy", r.decode_busy, "batching_busy",
                         r.batching_busy, "shuffle_k_eff", r.shuffle_k_eff,
                         "shuffle_k_perfect", r.shuffle_k_perfect, "label_mix_eff",
                         r.label_mix_eff, "label_mix_perfect", r.label_mix_perfect,
                         "labels_per_batch", r.labels_per_batch);
}

/* stats_kinds() -> {name: "count" | "ns" | "gauge"}: what each key of
 * Loader.stats() is (the kind column of the library's table), so the
 * Prometheus exposition (loader/metrics.py) keeps no list of its own. */
PyObject *stk_py_stats_kinds(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    static const char *const names[] = {[STK_STAT_COUNT] = "count", [STK_STAT_NS] = "ns",
                                        [STK_STAT_GAUGE] = "gauge"};
    PyObject *d = PyDict_New();
    const struct stk_stats_field *f;
    for (size_t i = 0; d != NULL && (f = stk_stats_field_at(i)) != NULL; i++) {
        PyObject *v = PyUnicode_FromString(names[f->kind]);
        if (v == NULL || PyDict_SetItemString(d, f->name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* stats_fields() -> [(name, doc)]: the keys of Loader.stats(). */
PyObject *stk_py_stats_fields(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *list = PyList_New(0);
    const struct stk_stats_field *f;
    for (size_t i = 0; list != NULL && (f = stk_stats_field_at(i)) != NULL; i++) {
        PyObject *t = Py_BuildValue("(ss)", f->name, f->doc);
        if (t == NULL || PyList_Append(list, t) < 0)
            Py_CLEAR(list);
        Py_XDECREF(t);
    }
    return list;
}
