/* SPDX-License-Identifier: MIT */
/*
 * _verify.c - stoker._stoker.verify(urls, **options): stk_verify from
 * Python, its problems collected into a list.
 *
 * stk_verify reports problems from its worker threads without the GIL, so
 * they are gathered under a mutex in raw memory and turned into Python
 * strings once it returns.
 */
#include "_stoker.h"

#include <pthread.h>
#include <string.h>

#include "stoker.h"

struct problems {
    pthread_mutex_t mutex;
    char **items;
    size_t count, cap;
    int out_of_memory; /* a message was lost: reported as an error */
};

static void collect(void *data, enum stk_log_level level, const char *msg)
{
    struct problems *p = data;
    if (level != STK_LOG_WARN)
        return;
    size_t len = strlen(msg);
    char *copy = PyMem_RawMalloc(len + 1);
    pthread_mutex_lock(&p->mutex);
    if (copy != NULL && p->count == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        char **items = PyMem_RawRealloc(p->items, cap * sizeof *items);
        if (items != NULL) {
            p->items = items;
            p->cap = cap;
        }
    }
    if (copy != NULL && p->count < p->cap) {
        memcpy(copy, msg, len + 1);
        p->items[p->count++] = copy;
        copy = NULL;
    } else {
        p->out_of_memory = 1;
    }
    pthread_mutex_unlock(&p->mutex);
    PyMem_RawFree(copy);
}

static PyObject *result(const struct stk_stats *s, const struct problems *p)
{
    PyObject *list = PyList_New((Py_ssize_t)p->count);
    for (size_t i = 0; list != NULL && i < p->count; i++) {
        PyObject *text = PyUnicode_DecodeUTF8(p->items[i], (Py_ssize_t)strlen(p->items[i]),
                                              "replace");
        if (text == NULL)
            Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, text);
    }
    if (list == NULL)
        return NULL;
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:N}", "samples", s->samples, "bad_samples",
                         s->samples_skipped, "shards", s->shards_opened, "shards_failed",
                         s->shards_failed, "shards_empty", s->shards_empty, "images_decoded",
                         s->images_decoded, "problems", list);
}

PyObject *stk_py_verify(PyObject *module, PyObject *args, PyObject *kwargs)
{
    (void)module;
    PyObject *urls_arg;
    if (!PyArg_ParseTuple(args, "O", &urls_arg))
        return NULL;
    struct stk_py_call c;
    PyObject *out = NULL;
    if (stk_py_call_init(&c, urls_arg, kwargs) < 0)
        goto done;
    struct problems p = {.mutex = PTHREAD_MUTEX_INITIALIZER};
    c.opts.log = collect;
    c.opts.log_data = &p;
    struct stk_stats s;
    char msg[1024];
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_verify(&c.opts, c.urls, (size_t)c.n, &s, msg, sizeof msg);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        stk_py_raise(rc, msg);
    else if (p.out_of_memory)
        PyErr_NoMemory();
    else
        out = result(&s, &p);
    for (size_t i = 0; i < p.count; i++)
        PyMem_RawFree(p.items[i]);
    PyMem_RawFree(p.items);
done:
    stk_py_call_free(&c);
    return out;
}
