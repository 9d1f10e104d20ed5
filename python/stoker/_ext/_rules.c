/* SPDX-License-Identifier: MIT */
/*
 * _rules.c - the rules stoker reads shards by (stoker.h "The rules stoker
 * reads shards by"), for the Python package to use instead of copies: how
 * a member parses by its extension, sizes such as "4G", and the rank the
 * launcher's environment gives.
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
