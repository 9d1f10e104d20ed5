/*
 * _errors.c - the CPython extension's exceptions: one table maps the
 * library's STK_E* codes to stoker.Error and its subclasses; the message is
 * the loader's detailed one (shard URL, key, offset).
 */
#include "_stoker.h"

#include <stdarg.h>
#include <stdio.h>

/* Every exception the module raises derives from stoker.Error and carries
 * .code, the STK_E* code (a class attribute for the class's usual code;
 * instances made from a library error get that error's own), and where a
 * builtin class says the same (FileNotFoundError, ValueError, ...) also
 * from it, so `except stoker.Error` and the builtin both catch it. */
PyObject *stk_py_error; /* stoker.Error */
PyObject *stk_py_data_error;
static PyObject *PlanError;
static PyObject *BusyError;
static PyObject *OptionError;
static PyObject *OptionTypeError;

static struct error_class {
    const char *name;     /* stoker.NAME */
    PyObject **type;
    PyObject **builtin;   /* second base, or NULL */
    int code;             /* its .code; 0: none (stoker.Error itself) */
    const char *doc;
} error_classes[] = {
    {"Error", &stk_py_error, NULL, 0, "Base class of every stoker error; .code is its STK_E* code."},
    {"DataError", &stk_py_data_error, NULL, STK_EFORMAT,
     "A shard, sample, image, label or the dataset index is bad input (the message names "
     "shard and key, or the index and what in it)."},
    {"PlanError", &PlanError, NULL, STK_EPLAN, "The shards cannot be split as asked."},
    {"BusyError", &BusyError, NULL, STK_EBUSY, "The caller holds every batch the loader may have."},
    {"OptionError", &OptionError, &PyExc_ValueError, STK_EINVAL,
     "An invalid option or argument; the message names it and what it accepts."},
    {"OptionTypeError", &OptionTypeError, &PyExc_TypeError, STK_EINVAL,
     "An unknown option, or a value of the wrong type."},
    {"NotFound", NULL, &PyExc_FileNotFoundError, STK_ENOENT, "A shard or file does not exist."},
    {"ReadError", NULL, &PyExc_OSError, STK_EIO, "An I/O error reading a shard."},
    {"CacheError", NULL, &PyExc_OSError, STK_ECACHE,
     "The node cache cannot hold or store a shard (cache_size, disk full, permissions)."},
    {"HTTPError", NULL, &PyExc_OSError, STK_EHTTP,
     "A server refused a request (HTTP 4xx) or kept failing (5xx)."},
    {"OutOfMemory", NULL, &PyExc_MemoryError, STK_ENOMEM, "Out of memory."},
    {"Interrupted", NULL, &PyExc_InterruptedError, STK_EINTR, "A wait was interrupted."},
    {"OutputExists", NULL, &PyExc_FileExistsError, STK_EEXIST,
     "An output exists and was not to be replaced."},
};
#define N_ERROR_CLASSES (sizeof error_classes / sizeof error_classes[0])
static PyObject *error_objects[N_ERROR_CLASSES];

static PyObject *error_type(int code)
{
    switch (code) {
    case STK_EFORMAT:
    case STK_ETRUNC:
    case STK_ELIMIT:
    case STK_EDUPKEY:
    case STK_EDECODE:
    case STK_ELABEL:
    case STK_EMEMBER:
    case STK_EINDEX: return stk_py_data_error;
    default: break;
    }
    for (size_t i = 1; i < N_ERROR_CLASSES; i++)
        if (error_classes[i].code == code)
            return error_objects[i];
    return stk_py_error;
}

/* Create the classes into module m; -1 on failure. */
int stk_py_add_error_classes(PyObject *m)
{
    for (size_t i = 0; i < N_ERROR_CLASSES; i++) {
        const struct error_class *e = &error_classes[i];
        PyObject *base = i == 0 ? Py_NewRef(PyExc_RuntimeError)
                         : e->builtin == NULL ? Py_NewRef(stk_py_error)
                                              : PyTuple_Pack(2, stk_py_error, *e->builtin);
        PyObject *dict = base != NULL ? PyDict_New() : NULL;
        PyObject *code = e->code != 0 ? PyLong_FromLong(e->code) : Py_NewRef(Py_None);
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
