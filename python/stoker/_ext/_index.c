/* SPDX-License-Identifier: MIT */
/*
 * _index.c - stoker._stoker.index_build(path, urls, overwrite=False,
 * **options): stk_index_build from Python, for the index a Loader builds
 * on first use (loader/index.py).
 */
#include "_stoker.h"

#include "stoker.h"

PyObject *stk_py_index_build(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    PyObject *urls_arg;
    const char *path;
    int overwrite = 0;
    if (!PyArg_ParseTuple(args, "sO|p", &path, &urls_arg, &overwrite))
        return NULL;
    struct stk_py_call c;
    PyObject *out = NULL;
    if (stk_py_call_init(&c, urls_arg, kwargs) < 0)
        goto done;
    struct stk_stats s;
    char msg[1024];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_index_build(&c.opts, c.urls, (size_t)c.n, path,
                         overwrite ? STK_OUTPUT_OVERWRITE : 0, &s, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        stk_py_raise(rc, msg);
    else
        out = PyLong_FromUnsignedLongLong(s.samples);
done:
    stk_py_call_free(&c);
    return out;
}
