/*
 * _index.c - stoker._stoker.index_build(path, urls, overwrite=False,
 * **options): stk_index_build from Python, for the index a Loader builds
 * on first use (_index.py).
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
    struct stk_options o;
    stk_options_init(&o);
    PyObject *keep = PyList_New(0);
    if (keep == NULL)
        return NULL;
    PyObject *out = NULL, *seq = NULL;
    Py_ssize_t n = 0;
    if (stk_py_set_options(&o, keep, kwargs) < 0)
        goto done;
    const char **urls = stk_py_urls(urls_arg, &n, &seq);
    if (urls == NULL)
        goto done;
    struct stk_stats s;
    char msg[1024];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_index_build(&o, urls, (size_t)n, path, overwrite ? STK_OUTPUT_OVERWRITE : 0, &s, msg,
                         sizeof msg);
    Py_END_ALLOW_THREADS
    PyMem_Free(urls);
    if (rc < 0)
        stk_py_raise(rc, msg);
    else
        out = PyLong_FromUnsignedLongLong(s.samples);
done:
    Py_XDECREF(seq);
    Py_DECREF(keep);
    return out;
}
