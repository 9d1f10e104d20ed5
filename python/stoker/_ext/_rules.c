/* SPDX-License-Identifier: MIT */
/*
 * _rules.c - the rules stoker reads shards by (stoker.h "The rules stoker
 * reads shards by"), for the Python package to use instead of copies: how
 * a member parses by its extension, sizes such as "4G", the rank the
 * launcher's environment gives, and the node of each shard under node
 * affinity.
 */
#include "_stoker.h"

PyObject *stk_py_member_kind(PyObject *module, PyObject *ext)
{
    (void)module;
    static const char *const names[] = {"bytes", "int", "text", "json", "image"};
    const char *text = PyUnicode_AsUTF8(ext);
    if (text == NULL)
        return NULL;
    return PyUnicode_FromString(names[stk_member_kind(text)]);
}

PyObject *stk_py_parse_size(PyObject *module, PyObject *text)
{
    (void)module;
    const char *utf8 = PyUnicode_AsUTF8(text);
    uint64_t value;
    if (utf8 == NULL)
        return NULL;
    if (stk_parse_count(utf8, 1, &value) < 0)
        return stk_py_option_error(0, "%R is not a size (a number of bytes, optionally with K, "
                                   "M, G or T)", text);
    return PyLong_FromUnsignedLongLong(value);
}

PyObject *stk_py_node_split(PyObject *module, PyObject *args)
{
    (void)module;
    PyObject *counts_obj, *seq = NULL, *result = NULL;
    unsigned long long seed;
    int nodes, shuffle = 1;
    if (!PyArg_ParseTuple(args, "OKi|p", &counts_obj, &seed, &nodes, &shuffle))
        return NULL;
    if (nodes < 1)
        return stk_py_option_error(0, "node_split: nodes=%d, at least 1", nodes);
    /* An int: that many shards dealt by number (no dataset index). */
    Py_ssize_t n = PyLong_Check(counts_obj) ? PyLong_AsSsize_t(counts_obj) : -1;
    if (n < 0 && !PyErr_Occurred() &&
        (seq = PySequence_Fast(counts_obj, "node_split: counts is an int or ints")) != NULL)
        n = PySequence_Fast_GET_SIZE(seq);
    if (n < 0)
        return NULL;
    uint64_t *counts = PyMem_Calloc((size_t)n + 1, sizeof *counts);
    uint32_t *node_of = PyMem_Calloc((size_t)n + 1, sizeof *node_of);
    if (counts == NULL || node_of == NULL) {
        PyErr_NoMemory();
        goto out;
    }
    for (Py_ssize_t i = 0; seq != NULL && i < n; i++) {
        counts[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (PyErr_Occurred())
            goto out;
    }
    int rc = stk_node_split((size_t)n, seq != NULL ? counts : NULL, seed, shuffle, nodes, node_of);
    if (rc < 0) {
        stk_py_raise(rc, "node_split: out of memory");
        goto out;
    }
    if ((result = PyList_New(n)) == NULL)
        goto out;
    for (Py_ssize_t i = 0; i < n; i++)
        PyList_SET_ITEM(result, i, PyLong_FromUnsignedLong(node_of[i]));
out:
    Py_XDECREF(seq);
    PyMem_Free(counts);
    PyMem_Free(node_of);
    return result;
}

PyObject *stk_py_resolve_rank(PyObject *module, PyObject *args)
{
    (void)module;
    int rank, world_size, rank_out, world_out;
    if (!PyArg_ParseTuple(args, "ii", &rank, &world_size))
        return NULL;
    char msg[512];
    int rc = stk_resolve_rank(rank, world_size, &rank_out, &world_out, msg, sizeof msg);
    if (rc < 0)
        return stk_py_raise(rc, msg);
    return Py_BuildValue("ii", rank_out, world_out);
}
