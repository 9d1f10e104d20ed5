/* SPDX-License-Identifier: MIT */
/*
 * _writer.c - stoker._stoker.ShardWriter, over stk_writer: samples as dicts
 * in WebDataset's form written into rolling tar shards.
 *
 * A sample is {"__key__": str or bytes, EXT: value, ...}; other "__" entries
 * (__url__, __local_path__ from a reader) are left out, as WebDataset's
 * TarWriter does. Values are bytes-like (written as they are), str (UTF-8)
 * or int (decimal text, how .cls labels are stored).
 */
#include "_stoker.h"

#include <string.h>

#include "stoker.h"

#define MAX_MEMBERS 64

typedef struct {
    PyObject_HEAD
    stk_writer *writer; /* NULL once closed */
    /* A write() or close() is running: inside the C writer with the GIL
     * released, or converting member values (which may run Python code).
     * The writer serves one call at a time, so every other call is refused
     * until it returns (read and written under the GIL). */
    int busy;
} WriterObject;

static int check_idle(WriterObject *self)
{
    if (!self->busy)
        return 0;
    PyErr_SetString(PyExc_RuntimeError,
                    "ShardWriter is in use by another thread, or by code its running write() "
                    "called; a writer serves one call at a time");
    return -1;
}

/* Raise the writer's failure (stk_py_raise: stoker.OutputExists for an
 * existing output, as for every other code), saying the Python way around
 * an existing output. */
static PyObject *writer_raise(int rc, const char *message)
{
    if (rc != STK_EEXIST)
        return stk_py_raise(rc, message);
    char text[1024];
    snprintf(text, sizeof text, "%s (overwrite=True replaces it)", message);
    return stk_py_raise(rc, text);
}

static int writer_init(WriterObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"pattern", "max_samples", "max_bytes", "overwrite", NULL};
    if (check_idle(self) < 0)
        return -1;
    if (self->writer != NULL) {
        /* A new writer would drop the shard this one has open. */
        PyErr_SetString(PyExc_RuntimeError, "ShardWriter.__init__ called again on a writer "
                                            "already open; close it or create a new one");
        return -1;
    }
    PyObject *pattern, *max_samples_obj = NULL, *max_bytes_obj = NULL;
    unsigned long long max_samples = 10000, max_bytes = 1ull << 30;
    int overwrite = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&|OOp", kwlist, PyUnicode_FSConverter,
                                     &pattern, &max_samples_obj, &max_bytes_obj, &overwrite))
        return -1;
    if ((max_samples_obj != NULL &&
         stk_py_integer(max_samples_obj, "max_samples", 0, UINT64_MAX, &max_samples) < 0) ||
        (max_bytes_obj != NULL &&
         stk_py_integer(max_bytes_obj, "max_bytes", 0, UINT64_MAX, &max_bytes) < 0)) {
        Py_DECREF(pattern);
        return -1;
    }
    char msg[512];
    stk_writer *w = NULL;
    int rc = stk_writer_create(PyBytes_AS_STRING(pattern), max_samples, max_bytes,
                               overwrite ? STK_OUTPUT_OVERWRITE : 0, &w, msg, sizeof msg);
    Py_DECREF(pattern);
    if (rc < 0) {
        writer_raise(rc, msg);
        return -1;
    }
    self->writer = w;
    return 0;
}

/* The bytes of one member value, as a new bytes object. */
static PyObject *member_bytes(PyObject *ext, PyObject *value)
{
    if (PyUnicode_Check(value))
        return PyUnicode_AsUTF8String(value);
    if (PyLong_Check(value)) {
        PyObject *text = PyObject_Str(value);
        PyObject *bytes = text ? PyUnicode_AsUTF8String(text) : NULL;
        Py_XDECREF(text);
        return bytes;
    }
    if (PyObject_CheckBuffer(value))
        return PyBytes_FromObject(value);
    PyErr_Format(PyExc_TypeError, "member %R: bytes, str or int expected, not %.100s", ext,
                 Py_TYPE(value)->tp_name);
    return NULL;
}

/* The key as the bytes of a file name: a str is encoded as os.fsencode()
 * does (surrogate escapes give back the bytes that were not UTF-8, as
 * Samples decodes them), bytes are taken as they are. A new reference, or
 * NULL with an exception. */
static PyObject *key_bytes(PyObject *key)
{
    PyObject *bytes = NULL;
    if (key != NULL && PyUnicode_Check(key))
        bytes = PyUnicode_EncodeFSDefault(key);
    else if (key != NULL && PyBytes_Check(key))
        bytes = Py_NewRef(key);
    else
        PyErr_SetString(PyExc_ValueError, "the sample has no '__key__' (str or bytes)");
    if (bytes != NULL && (size_t)PyBytes_GET_SIZE(bytes) != strlen(PyBytes_AS_STRING(bytes))) {
        PyErr_SetString(PyExc_ValueError, "the sample's '__key__' holds a NUL character");
        Py_CLEAR(bytes);
    }
    return bytes;
}

static int check_open(WriterObject *self)
{
    if (check_idle(self) < 0)
        return -1;
    if (self->writer != NULL)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the writer is closed");
    return -1;
}

static PyObject *writer_write(WriterObject *self, PyObject *sample)
{
    if (check_open(self) < 0)
        return NULL;
    if (!PyDict_Check(sample))
        return PyErr_Format(PyExc_TypeError, "a sample is a dict, not %.100s",
                            Py_TYPE(sample)->tp_name);
    /* The key's bytes and a snapshot of the items, held: converting a value
     * may run Python code (__str__, a buffer export) that changes the dict. */
    PyObject *key_obj = key_bytes(PyDict_GetItemString(sample, "__key__"));
    const char *key = key_obj != NULL ? PyBytes_AS_STRING(key_obj) : NULL;
    PyObject *items = key != NULL ? PyDict_Items(sample) : NULL;
    if (items == NULL) {
        Py_XDECREF(key_obj);
        return NULL;
    }
    self->busy = 1;
    struct stk_member members[MAX_MEMBERS];
    PyObject *held[MAX_MEMBERS]; /* the bytes objects the members point into */
    size_t n = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *ext = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 0);
        PyObject *value = PyTuple_GET_ITEM(PyList_GET_ITEM(items, i), 1);
        const char *name = PyUnicode_Check(ext) ? PyUnicode_AsUTF8(ext) : NULL;
        if (name == NULL) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "member names are str, not %R", ext);
            goto out;
        }
        if (strncmp(name, "__", 2) == 0)
            continue;
        if (n == MAX_MEMBERS) {
            PyErr_Format(PyExc_ValueError, "sample '%s': more than %d members", key, MAX_MEMBERS);
            goto out;
        }
        if ((held[n] = member_bytes(ext, value)) == NULL)
            goto out;
        members[n] = (struct stk_member){name, (const uint8_t *)PyBytes_AS_STRING(held[n]),
                                         (size_t)PyBytes_GET_SIZE(held[n])};
        n++;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_add(self->writer, key, members, n);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        writer_raise(rc, stk_writer_errmsg(self->writer));
    else
        result = Py_NewRef(Py_None);
out:
    self->busy = 0;
    for (size_t i = 0; i < n; i++)
        Py_DECREF(held[i]);
    Py_DECREF(items);
    Py_DECREF(key_obj);
    return result;
}

static PyObject *writer_close(WriterObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    uint64_t shards = 0, samples = 0;
    int rc;
    self->busy = 1;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_writer_close(self->writer, &shards, &samples);
    Py_END_ALLOW_THREADS
    self->busy = 0;
    PyObject *result = rc < 0 ? writer_raise(rc, stk_writer_errmsg(self->writer))
                              : Py_BuildValue("(KK)", (unsigned long long)shards,
                                              (unsigned long long)samples);
    stk_writer_destroy(self->writer);
    self->writer = NULL;
    return result;
}

static PyObject *writer_enter(WriterObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    return Py_NewRef((PyObject *)self);
}

/* Leaving the block publishes the run, unless an exception is on its way
 * out: then nothing of it is published. */
static PyObject *writer_exit(WriterObject *self, PyObject *args)
{
    PyObject *type = PyTuple_Size(args) > 0 ? PyTuple_GetItem(args, 0) : Py_None;
    if (self->writer == NULL)
        Py_RETURN_FALSE;
    if (check_idle(self) < 0)
        return NULL;
    if (type != Py_None) {
        stk_writer_destroy(self->writer);
        self->writer = NULL;
        Py_RETURN_FALSE;
    }
    PyObject *r = writer_close(self, NULL);
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static void writer_dealloc(WriterObject *self)
{
    stk_writer_destroy(self->writer); /* not closed: nothing is published */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef writer_methods[] = {
    {"write", (PyCFunction)writer_write, METH_O, "write(sample dict): add one sample"},
    {"close", (PyCFunction)writer_close, METH_NOARGS,
     "finish the last shard and publish them all; returns (shards, samples) written"},
    {"__enter__", (PyCFunction)writer_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)writer_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

PyTypeObject stk_py_writer_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker.ShardWriter",
    .tp_basicsize = sizeof(WriterObject),
    .tp_dealloc = (destructor)writer_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = writer_methods,
    .tp_init = (initproc)writer_init,
    .tp_new = PyType_GenericNew,
    .tp_doc = "ShardWriter(pattern, max_samples=10000, max_bytes=1 << 30, overwrite=False): "
              "write samples (dicts with '__key__' and EXT: bytes/str/int) into WebDataset tar "
              "shards. A str key is written as os.fsencode() gives it (so keys from Samples, "
              "not UTF-8 included, are written back as they were read), a bytes key as it is; "
              "in any locale. Shards are named pattern % n, e.g. 'out/train-%06d.tar' (the "
              "directory is created if missing). They are published together when the writer "
              "is closed (a with-block closes it); if the block raises, or the writer is "
              "dropped unclosed, nothing is published. Files named like the shards (the same "
              "prefix and suffix, any number) are an earlier run's: a FileExistsError; "
              "overwrite=True replaces them all (the others are removed once this run's "
              "shards are in place). One thread uses a writer at a time (a second one's call is a "
              "RuntimeError).",
};
