/* SPDX-License-Identifier: MIT */
/*
 * _errors.c - the CPython extension's exceptions: the library's error
 * table (src/base/errors_table.h) maps its STK_E* codes to stoker.Error and
 * its subclasses; the message is the loader's detailed one (shard URL, key,
 * offset).
 */
#include "_stoker.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/errors_table.h"

/* Every exception the module raises derives from stoker.Error and carries
 * .code, the STK_E* code (a class attribute for the class's usual code:
 * that of the first row of the library's error table naming the class;
 * instances made from a library error get that error's own), and where a
 * builtin class says the same (FileNotFoundError, ValueError, ...) also
 * from it, so `except stoker.Error` and the builtin both catch it. Which
 * class a code raises is the error table's python_class column. */
PyObject *stk_py_error; /* stoker.Error */
PyObject *stk_py_data_error;
static PyObject *OptionError;
static PyObject *OptionTypeError;

static struct error_class {
    const char *name;     /* stoker.NAME */
    PyObject **type;
    PyObject **builtin;   /* second base, or NULL */
    int code;             /* its .code when no row of the error table names it */
    const char *doc;
} error_classes[] = {
    {"Error", &stk_py_error, NULL, 0,
     "Base class of every stoker error; .code is its STK_E* code.\n"
     "\n"
     "Every error is a stoker.Error with .code (the C library's STK_E* code)\n"
     "and also the builtin it stands for: OptionError (a ValueError;\n"
     "OptionTypeError also a TypeError), NotFound (FileNotFoundError),\n"
     "HTTPError, ReadError and CacheError (OSError), DataError, PlanError,\n"
     "BusyError, ClusterError (ConnectionError), HookError (a user hook\n"
     "failed), so except stoker.Error catches a bad option, a missing shard, a\n"
     "403, corrupt data and a busy loader alike. Each code's class, its text\n"
     "and whether it is bad input (what on_error=\"skip\" skips: never out of\n"
     "memory, a cache that cannot take a shard, a stale index or a bad option)\n"
     "are one row of the C library's error table (src/base/errors_table.h);\n"
     "stoker._ext._stoker.error_codes maps its names to codes."},
    {"DataError", &stk_py_data_error, NULL, 0,
     "A shard, sample, image, label or the dataset index is bad input (the message names "
     "shard and key, or the index and what in it)."},
    {"PlanError", NULL, NULL, 0, "The shards cannot be split as asked."},
    {"BusyError", NULL, NULL, 0, "The caller holds every batch the loader may have."},
    {"OptionError", &OptionError, &PyExc_ValueError, 0,
     "An invalid option or argument; the message names it and what it accepts."},
    {"OptionTypeError", &OptionTypeError, &PyExc_TypeError, STK_EINVAL,
     "An unknown option, or a value of the wrong type."},
    {"NotFound", NULL, &PyExc_FileNotFoundError, 0, "A shard or file does not exist."},
    {"ReadError", NULL, &PyExc_OSError, 0, "An I/O error reading a shard."},
    {"CacheError", NULL, &PyExc_OSError, 0,
     "The node cache cannot hold or store a shard (cache_size, disk full, permissions)."},
    {"HTTPError", NULL, &PyExc_OSError, 0,
     "A server refused a request (HTTP 4xx) or kept failing (5xx)."},
    {"OutOfMemory", NULL, &PyExc_MemoryError, 0, "Out of memory."},
    {"Interrupted", NULL, &PyExc_InterruptedError, 0, "A wait was interrupted."},
    {"OutputExists", NULL, &PyExc_FileExistsError, 0,
     "An output exists and was not to be replaced."},
};
#define N_ERROR_CLASSES (sizeof error_classes / sizeof error_classes[0])
static PyObject *error_objects[N_ERROR_CLASSES];

/* The library's error table: each code, its name and the name of its class. */
static const struct {
    int code;
    const char *name;
    const char *python_class;
} code_classes[] = {
#define ROW(name, kind, python_class, text) {STK_##name, #name, python_class},
    STK__ERRORS(ROW)
#undef ROW
};
#define N_CODES (sizeof code_classes / sizeof code_classes[0])

/* The class called name: its index in error_classes. */
static size_t class_index(const char *name)
{
    size_t i = 0;
    while (i < N_ERROR_CLASSES && strcmp(error_classes[i].name, name) != 0)
        i++;
    return i;
}

/* A class's .code: the first row of the error table naming it (None for
 * stoker.Error, whose row is STK_OK), else its own. */
static int class_code(size_t i)
{
    for (size_t r = 0; r < N_CODES; r++)
        if (strcmp(code_classes[r].python_class, error_classes[i].name) == 0)
            return code_classes[r].code;
    return error_classes[i].code;
}

static PyObject *error_type(int code)
{
    for (size_t r = 0; r < N_CODES; r++)
        if (code_classes[r].code == code)
            return error_objects[class_index(code_classes[r].python_class)];
    return stk_py_error;
}

/* Create the classes into module m; -1 on failure. */
int stk_py_add_error_classes(PyObject *m)
{
    /* stoker._stoker.error_codes: {"EINDEX": -1013, ...}, for Python code that
     * tells one code from another without a copy of stoker.h. */
    PyObject *codes = PyDict_New();
    if (codes == NULL || PyModule_AddObjectRef(m, "error_codes", codes) < 0) {
        Py_XDECREF(codes);
        return -1;
    }
    for (size_t r = 0; r < N_CODES; r++) {
        PyObject *value = PyLong_FromLong(code_classes[r].code);
        int failed = value == NULL || PyDict_SetItemString(codes, code_classes[r].name, value) < 0;
        Py_XDECREF(value);
        if (!failed && class_index(code_classes[r].python_class) == N_ERROR_CLASSES)
            failed = PyErr_Format(PyExc_SystemError, "the error table names an unknown class "
                                  "stoker.%s", code_classes[r].python_class) == NULL;
        if (failed) {
            Py_DECREF(codes);
            return -1;
        }
    }
    Py_DECREF(codes);
    for (size_t i = 0; i < N_ERROR_CLASSES; i++) {
        const struct error_class *e = &error_classes[i];
        PyObject *base = i == 0 ? Py_NewRef(PyExc_RuntimeError)
                         : e->builtin == NULL ? Py_NewRef(stk_py_error)
                                              : PyTuple_Pack(2, stk_py_error, *e->builtin);
        PyObject *dict = base != NULL ? PyDict_New() : NULL;
        int value = class_code(i);
        PyObject *code = value != 0 ? PyLong_FromLong(value) : Py_NewRef(Py_None);
        char qualified[64];
        snprintf(qualified, sizeof qualified, "stoker.%s", e->name);
        PyObject *type = dict != NULL && code != NULL &&
                                 PyDict_SetItemString(dict, "code", code) == 0
                             ? PyErr_NewExceptionWithDoc(qualified, e->doc, base, dict)
                             : NULL;
        Py_XDECREF(base);
        Py_XDECREF(dict);
        Py_XDECREF(code);
        if (type == NULL || PyModule_AddObjectRef(m, e->name, type) < 0) {
            Py_XDECREF(type);
            return -1;
        }
        error_objects[i] = type; /* the module keeps a reference too */
        if (e->type != NULL)
            *e->type = type;
    }
    return 0;
}

/* Raise type with message and .code = code; returns NULL. */
static PyObject *raise_with_code(PyObject *type, int code, const char *message)
{
    PyObject *exc = PyObject_CallFunction(type, "s", message);
    PyObject *value = exc != NULL ? PyLong_FromLong(code) : NULL;
    if (value != NULL && PyObject_SetAttrString(exc, "code", value) == 0)
        PyErr_SetObject(type, exc);
    Py_XDECREF(value);
    Py_XDECREF(exc);
    return NULL;
}

PyObject *stk_py_raise(int code, const char *message)
{
    /* The library leaves a message with every failure. */
    char text[1200];
    snprintf(text, sizeof text, "%s (%s)", message, stk_strerror(code));
    return raise_with_code(error_type(code), code, text);
}

PyObject *stk_py_option_error(int type_error, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    PyObject *text = PyUnicode_FromFormatV(fmt, ap);
    va_end(ap);
    if (text == NULL)
        return NULL;
    const char *utf8 = PyUnicode_AsUTF8(text);
    if (utf8 != NULL)
        raise_with_code(type_error ? OptionTypeError : OptionError, STK_EINVAL, utf8);
    Py_DECREF(text);
    return NULL;
}

/* Make cause (a reference this steals; NULL: none) the __cause__ of the
 * exception being raised. */
void stk_py_chain_cause(PyObject *cause)
{
    if (cause == NULL)
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyException_SetCause(v, cause);
    PyErr_Restore(t, v, tb);
}
