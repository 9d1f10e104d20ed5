/*
 * _stoker.c - the CPython extension: a thin layer over include/stoker.h.
 *
 * _stoker.Loader wraps an stk_loader; next() releases the GIL while it
 * waits and returns a Batch, or None at the end of the epoch. A Batch owns
 * its stk_batch and releases it when the last Python reference goes away;
 * its images and labels are exposed through the buffer protocol by two
 * small view objects that keep the Batch alive, so torch.frombuffer() can
 * share the memory (zero copy) for as long as any tensor uses it.
 *
 * Errors map to exceptions in one table (error_types); the message is the
 * loader's detailed one (shard URL, key, offset).
 */
#include "_stoker.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "stoker.h"

/* Every exception the module raises derives from stoker.Error and carries
 * .code, the STK_E* code (a class attribute for the class's usual code;
 * instances made from a library error get that error's own), and where a
 * builtin class says the same (FileNotFoundError, ValueError, ...) also
 * from it, so `except stoker.Error` and the builtin both catch it. */
static PyObject *StokerError; /* stoker.Error */
static PyObject *DataError;
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
    {"Error", &StokerError, NULL, 0, "Base class of every stoker error; .code is its STK_E* code."},
    {"DataError", &DataError, NULL, STK_EFORMAT,
     "A shard, sample, image or label is bad input (the message names shard and key)."},
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
    case STK_EMEMBER: return DataError;
    default: break;
    }
    for (size_t i = 1; i < N_ERROR_CLASSES; i++)
        if (error_classes[i].code == code)
            return error_objects[i];
    return StokerError;
}

/* Create the classes into module m; -1 on failure. */
static int add_error_classes(PyObject *m)
{
    for (size_t i = 0; i < N_ERROR_CLASSES; i++) {
        const struct error_class *e = &error_classes[i];
        PyObject *base = i == 0 ? Py_NewRef(PyExc_RuntimeError)
                         : e->builtin == NULL ? Py_NewRef(StokerError)
                                              : PyTuple_Pack(2, StokerError, *e->builtin);
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

/* ---- Batch and its buffer views ---- */

typedef struct {
    PyObject_HEAD
    struct stk_batch *batch;
    PyObject *loader; /* keeps the loader alive while batches exist */
    int skips_counted; /* samples() counted the bad samples it left out */
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *owner;
    void *data;
    Py_ssize_t bytes;
} ViewObject;

static PyTypeObject BatchType, ViewType;

static void batch_dealloc(BatchObject *self)
{
    stk_batch_release(self->batch);
    Py_XDECREF(self->loader);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int view_getbuffer(ViewObject *self, Py_buffer *view, int flags)
{
    return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->bytes, 0, flags);
}

static void view_dealloc(ViewObject *self)
{
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyBufferProcs view_as_buffer = {(getbufferproc)view_getbuffer, NULL};

static PyTypeObject ViewType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.BufferView",
    .tp_basicsize = sizeof(ViewObject),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_as_buffer = &view_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable bytes of a batch; keeps the batch alive.",
};

static PyObject *make_view(BatchObject *owner, void *data, size_t bytes)
{
    ViewObject *v = PyObject_New(ViewObject, &ViewType);
    if (v == NULL)
        return NULL;
    Py_INCREF(owner);
    v->owner = owner;
    v->data = data;
    v->bytes = (Py_ssize_t)bytes;
    return (PyObject *)v;
}

static PyObject *batch_images(BatchObject *self, void *closure)
{
    (void)closure;
    if (self->batch->images == NULL)
        Py_RETURN_NONE;
    return make_view(self, self->batch->images, self->batch->n_samples * self->batch->image_bytes);
}

static PyObject *batch_labels(BatchObject *self, void *closure)
{
    (void)closure;
    if (self->batch->labels == NULL)
        Py_RETURN_NONE;
    return make_view(self, (void *)self->batch->labels, self->batch->n_samples * sizeof(int64_t));
}

static PyObject *batch_len(BatchObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromSize_t(self->batch->n_samples);
}

static PyObject *batch_index(BatchObject *self, void *closure)
{
    (void)closure;
    return PyLong_FromUnsignedLongLong(self->batch->index);
}

/* Bad input the batch accounts for: (samples_skipped, images_replaced,
 * shards_failed), see struct stk_batch. */
static PyObject *batch_skips(BatchObject *self, void *closure)
{
    (void)closure;
    return Py_BuildValue("(KKK)", (unsigned long long)self->batch->samples_skipped,
                         (unsigned long long)self->batch->images_replaced,
                         (unsigned long long)self->batch->shards_failed);
}

/* The loader's on_error policy is "skip", and n samples it delivered were
 * left out here (defined with the loader below). */
static int loader_skips_bad(PyObject *loader);
static void loader_count_skipped(PyObject *loader, size_t n);

/* One sample as a dict: __key__, __url__ and one bytes per member. A member
 * whose extension is not UTF-8 cannot be a str key, and one named like the
 * metadata (KEY.__key__, KEY.__url__) would overwrite it (WebDataset
 * refuses both): NULL with a DataError naming the shard and key, and *bad
 * set. Other failures: NULL with an exception, *bad clear. */
static PyObject *sample_dict(const struct stk_sample *s, int *bad)
{
    *bad = 0;
    PyObject *d = PyDict_New();
    PyObject *key = PyUnicode_DecodeFSDefault(s->key);
    PyObject *url = PyUnicode_DecodeFSDefault(s->url);
    int rc = d && key && url ? PyDict_SetItemString(d, "__key__", key) |
                                   PyDict_SetItemString(d, "__url__", url)
                             : -1;
    Py_XDECREF(key);
    Py_XDECREF(url);
    for (size_t m = 0; rc == 0 && m < s->n_members; m++) {
        const char *ext = s->members[m].ext;
        Py_ssize_t len = (Py_ssize_t)strlen(ext);
        PyObject *name = PyUnicode_DecodeUTF8(ext, len, NULL);
        if (name == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError))
                break;
            PyErr_Clear();
            PyObject *shown = PyUnicode_DecodeUTF8(ext, len, "backslashreplace");
            if (shown != NULL)
                PyErr_Format(DataError, "%s: sample '%s': member extension '%U' is not UTF-8",
                             s->url, s->key, shown);
            *bad = shown != NULL;
            Py_XDECREF(shown);
            break;
        }
        int taken = PyDict_Contains(d, name);
        if (taken == 1) {
            PyErr_Format(DataError,
                         "%s: sample '%s': member '%s.%U' would overwrite the sample's %U, a "
                         "name WebDataset reserves",
                         s->url, s->key, s->key, name, name);
            *bad = 1;
        }
        PyObject *b = taken == 0 ? PyBytes_FromStringAndSize((const char *)s->members[m].data,
                                                             (Py_ssize_t)s->members[m].size)
                                 : NULL;
        rc = b ? PyDict_SetItem(d, name, b) : -1;
        Py_DECREF(name);
        Py_XDECREF(b);
    }
    if (rc == 0 && !PyErr_Occurred())
        return d;
    Py_XDECREF(d);
    return NULL;
}

/* Make cause (a reference this steals; NULL: none) the __cause__ of the
 * exception being raised. */
static void chain_cause(PyObject *cause)
{
    if (cause == NULL)
        return;
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    PyException_SetCause(v, cause);
    PyErr_Restore(t, v, tb);
}

/* One member of sample s as kind says (see batch_columns); NULL with a
 * DataError naming the sample when it does not parse. */
static PyObject *member_value(const struct stk_sample *s, const struct stk_member *m, char kind,
                              PyObject *loads)
{
    const char *data = (const char *)m->data;
    Py_ssize_t size = (Py_ssize_t)m->size;
    PyObject *v = NULL;
    const char *what = NULL;
    if (kind == 'i') {
        char *end = NULL;
        v = PyLong_FromString(data, &end, 10); /* data is NUL-terminated */
        if (v != NULL && end != data + size)
            Py_CLEAR(v);
        what = "is not an integer";
    } else if (kind == 's') {
        v = PyUnicode_DecodeUTF8(data, size, "strict");
        what = "is not UTF-8";
    } else if (kind == 'j') {
        PyObject *b = PyBytes_FromStringAndSize(data, size);
        v = b != NULL ? PyObject_CallOneArg(loads, b) : NULL;
        Py_XDECREF(b);
        what = "is not valid JSON";
    } else {
        return PyBytes_FromStringAndSize(data, size);
    }
    if (v == NULL && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        PyObject *t, *cause, *tb;
        PyErr_Fetch(&t, &cause, &tb);
        PyErr_NormalizeException(&t, &cause, &tb);
        PyErr_Format(DataError, "%s: sample '%s': %s member %s (%S)", s->url, s->key, m->ext, what,
                     cause ? cause : Py_None);
        chain_cause(cause);
        Py_XDECREF(t);
        Py_XDECREF(tb);
    }
    return v;
}

/* columns(spec, loads) -> one list per (ext, kind) of spec, one value per
 * sample: kind 'k' the key and 'u' the URL (str); else the sample's member
 * of that extension, None where it has none: 'b' bytes, 'i' int, 's' str
 * (UTF-8), 'j' loads(bytes). Only the members asked for are copied. A
 * member that does not parse raises DataError naming the sample. */
static PyObject *batch_columns(BatchObject *self, PyObject *args)
{
    PyObject *spec, *loads;
    if (!PyArg_ParseTuple(args, "O!O:columns", &PyTuple_Type, &spec, &loads))
        return NULL;
    Py_ssize_t n_cols = PyTuple_GET_SIZE(spec);
    size_t n = self->batch->n_samples;
    PyObject *out = PyTuple_New(n_cols);
    for (Py_ssize_t c = 0; out != NULL && c < n_cols; c++) {
        const char *ext, *kind_text;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(spec, c), "ss:columns spec", &ext, &kind_text)) {
            Py_CLEAR(out);
            break;
        }
        char kind = kind_text[0];
        PyObject *col = PyList_New((Py_ssize_t)n);
        for (size_t i = 0; col != NULL && i < n; i++) {
            const struct stk_sample *s = &self->batch->samples[i];
            PyObject *v = NULL;
            if (kind == 'k' || kind == 'u') {
                v = PyUnicode_DecodeFSDefault(kind == 'k' ? s->key : s->url);
            } else {
                const struct stk_member *m = NULL;
                for (size_t k = 0; m == NULL && k < s->n_members; k++)
                    if (strcmp(s->members[k].ext, ext) == 0)
                        m = &s->members[k];
                v = m != NULL ? member_value(s, m, kind, loads) : Py_NewRef(Py_None);
            }
            if (v == NULL)
                Py_CLEAR(col);
            else
                PyList_SET_ITEM(col, (Py_ssize_t)i, v);
        }
        if (col == NULL)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, c, col);
    }
    return out;
}

/* The raw samples as dicts. Bad ones (see sample_dict) end the call with a
 * DataError, or under on_error="skip" are left out and counted in the
 * loader's stats, once per batch however often this is called. */
static PyObject *batch_samples(BatchObject *self, PyObject *unused)
{
    (void)unused;
    int skip = loader_skips_bad(self->loader);
    size_t skipped = 0;
    PyObject *list = PyList_New(0);
    for (size_t i = 0; list != NULL && i < self->batch->n_samples; i++) {
        int bad;
        PyObject *d = sample_dict(&self->batch->samples[i], &bad);
        if (d == NULL && bad && skip) {
            PyErr_Clear();
            skipped++;
            continue;
        }
        if (d == NULL || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    if (list != NULL && !self->skips_counted) {
        self->skips_counted = 1;
        loader_count_skipped(self->loader, skipped);
    }
    return list;
}

static PyGetSetDef batch_getset[] = {
    {"images", (getter)batch_images, NULL, "buffer of the images (None for raw batches)", NULL},
    {"labels", (getter)batch_labels, NULL, "buffer of the int64 labels (None for raw batches)", NULL},
    {"size", (getter)batch_len, NULL, "number of samples", NULL},
    {"index", (getter)batch_index, NULL, "batch number in the epoch", NULL},
    {"skips", (getter)batch_skips, NULL,
     "(samples_skipped, images_replaced, shards_failed) this batch accounts for", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef batch_methods[] = {
    {"samples", (PyCFunction)batch_samples, METH_NOARGS, "the raw samples as a list of dicts"},
    {"columns", (PyCFunction)batch_columns, METH_VARARGS,
     "columns(((ext, kind), ...), loads) -> tuple of lists: chosen members of every sample"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject BatchType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = batch_getset,
    .tp_methods = batch_methods,
    .tp_doc = "One batch; its memory returns to the loader when no reference is left.",
};

/* ---- Loader ---- */

typedef struct {
    PyObject_HEAD
    stk_loader *loader;
    /* The C loader serves one thread at a time, and next() waits in it with
     * the GIL released: every call into it (but stk_loader_stats and
     * stk_loader_interrupt, which may come from any thread) holds `lock`,
     * taken without the GIL when another thread has it (enter()). */
    PyThread_type_lock lock;
    int closed; /* close() began: set before it interrupts a waiting next() */
    struct stk_options opts;
    PyObject *keep; /* strings the options point to (label_exts, label_json_field, index_path,
                       ca_bundle, cache_dir, require_members) */
    /* batch_allocator(nbytes) -> object with the buffer protocol, e.g. a
     * pinned torch tensor; its buffer export (a Py_buffer in a capsule,
     * which holds the object) stays in `buffers` (address -> capsule) until
     * the loader frees the memory. */
    PyObject *allocator;
    PyObject *buffers;
    PyObject *alloc_failure; /* (type, message, cause) of the allocator's last failure, or NULL */
    /* Samples Batch.samples() left out as bad (under the GIL): part of
     * stats()["samples_skipped"], not of "samples". */
    unsigned long long skipped_in_python;
    struct stk_py_log *log; /* messages of the loader's threads, for take_log() */
} LoaderObject;

static int loader_skips_bad(PyObject *loader)
{
    return ((LoaderObject *)loader)->opts.on_error == STK_ON_ERROR_SKIP;
}

static void loader_count_skipped(PyObject *loader, size_t n)
{
    ((LoaderObject *)loader)->skipped_in_python += n;
}

/* Why the batch allocator failed, kept for next() to raise (the loader
 * itself only sees NULL and reports "out of memory"): an exception type,
 * its message (a reference this steals; NULL keeps nothing) and the
 * allocator's own exception as the cause, or NULL. */
static void keep_alloc_failure(LoaderObject *self, PyObject *type, PyObject *message,
                               PyObject *cause)
{
    Py_XSETREF(self->alloc_failure, message == NULL ? NULL : Py_BuildValue("(OOO)", type, message,
                                                                          cause ? cause : Py_None));
    Py_XDECREF(message);
    PyErr_Clear(); /* a failure to build the record leaves the plain "out of memory" */
}

/* Raise the allocator's failure kept by keep_alloc_failure(); 0 if none. */
static int raise_alloc_failure(LoaderObject *self)
{
    if (self->alloc_failure == NULL)
        return 0;
    PyObject *type = PyTuple_GET_ITEM(self->alloc_failure, 0);
    PyObject *cause = PyTuple_GET_ITEM(self->alloc_failure, 2);
    PyErr_SetObject(type, PyTuple_GET_ITEM(self->alloc_failure, 1));
    if (cause != Py_None)
        chain_cause(Py_NewRef(cause));
    return 1;
}

static void release_view(PyObject *capsule)
{
    Py_buffer *view = PyCapsule_GetPointer(capsule, NULL);
    PyBuffer_Release(view);
    PyMem_Free(view);
}

/* The writable memory of obj, the allocator's result, exported until the
 * loader frees it: the export (held in self->buffers) keeps a bytearray from
 * being resized and any object from moving or freeing the memory the
 * loader's threads write into. NULL with the reason kept for next(). */
static void *export_buffer(LoaderObject *self, PyObject *obj, size_t bytes)
{
    Py_buffer *view = PyMem_Calloc(1, sizeof *view);
    if (view == NULL) {
        keep_alloc_failure(self, NULL, NULL, NULL);
        return NULL;
    }
    PyObject *capsule = NULL, *key = NULL;
    void *memory = NULL;
    if (!PyObject_CheckBuffer(obj)) {
        keep_alloc_failure(self, PyExc_TypeError,
                           PyUnicode_FromFormat("batch_allocator(%zu) returned a '%.100s' object, "
                                                "which is not a buffer: it must return a writable, "
                                                "C-contiguous buffer of at least %zu bytes",
                                                bytes, Py_TYPE(obj)->tp_name, bytes),
                           NULL);
    } else if (PyObject_GetBuffer(obj, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        keep_alloc_failure(self, PyExc_TypeError,
                           PyUnicode_FromFormat("batch_allocator(%zu) returned a '%.100s' object, "
                                                "which is not a writable, C-contiguous buffer (%S)",
                                                bytes, Py_TYPE(obj)->tp_name, v),
                           v);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    } else if ((size_t)view->len < bytes) {
        keep_alloc_failure(self, PyExc_ValueError,
                           PyUnicode_FromFormat("batch_allocator(%zu) returned a buffer of %zd "
                                                "bytes; the loader needs %zu",
                                                bytes, view->len, bytes),
                           NULL);
        PyBuffer_Release(view);
    } else if ((capsule = PyCapsule_New(view, NULL, release_view)) == NULL) {
        PyBuffer_Release(view);
    } else {
        Py_buffer *held = view;
        view = NULL; /* the capsule owns it now */
        key = PyLong_FromVoidPtr(held->buf);
        int in_use = key != NULL ? PyDict_Contains(self->buffers, key) : -1;
        if (in_use == 1) /* two batches in one buffer would overwrite each other */
            keep_alloc_failure(self, PyExc_ValueError,
                               PyUnicode_FromFormat("batch_allocator(%zu) returned memory that "
                                                    "already holds another batch buffer; each "
                                                    "call must return new memory",
                                                    bytes),
                               NULL);
        else if (in_use == 0 && PyDict_SetItem(self->buffers, key, capsule) == 0)
            memory = held->buf;
    }
    if (memory == NULL && PyErr_Occurred()) /* no memory for the bookkeeping */
        keep_alloc_failure(self, NULL, NULL, NULL);
    PyMem_Free(view);
    Py_XDECREF(capsule);
    Py_XDECREF(key);
    return memory;
}

/* Batch memory from the Python allocator. Called on a loader thread without
 * the GIL (every call into the loader releases it), so it takes the GIL. */
static void *alloc_batch_memory(void *data, size_t bytes)
{
    LoaderObject *self = data;
    void *memory = NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *obj = PyObject_CallFunction(self->allocator, "n", (Py_ssize_t)bytes);
    if (obj != NULL) {
        memory = export_buffer(self, obj, bytes);
        Py_DECREF(obj);
    } else {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        if (tb != NULL)
            PyException_SetTraceback(v, tb);
        keep_alloc_failure(self, StokerError,
                           PyUnicode_FromFormat("batch_allocator(%zu) raised %.100s: %S", bytes,
                                                Py_TYPE(v)->tp_name, v),
                           v);
        Py_XDECREF(t);
        Py_XDECREF(v);
        Py_XDECREF(tb);
    }
    PyGILState_Release(gil);
    return memory;
}

/* Called by stk_loader_destroy() for each buffer: drop the export and the
 * object (through the capsule's destructor). */
static void free_batch_memory(void *data, void *memory, size_t bytes)
{
    LoaderObject *self = data;
    (void)bytes;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *key = PyLong_FromVoidPtr(memory);
    if (key == NULL || PyDict_DelItem(self->buffers, key) < 0)
        PyErr_WriteUnraisable(self->allocator);
    Py_XDECREF(key);
    PyGILState_Release(gil);
}

int stk_py_integer(PyObject *value, const char *name, long long min, unsigned long long max,
                   unsigned long long *out)
{
    if (!PyIndex_Check(value)) {
        stk_py_option_error(1, "%s must be an int, not %.100s", name, Py_TYPE(value)->tp_name);
        return -1;
    }
    PyObject *n = PyNumber_Index(value);
    if (n == NULL)
        return -1;
    int overflow, ok;
    long long v = PyLong_AsLongLongAndOverflow(n, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        Py_DECREF(n);
        return -1;
    }
    if (overflow == 0) { /* fits a long long */
        ok = v >= min && (v < 0 || (unsigned long long)v <= max);
        *out = (unsigned long long)v;
    } else if (overflow > 0) { /* above LLONG_MAX: maybe still an unsigned long long */
        *out = PyLong_AsUnsignedLongLong(n);
        ok = !(*out == (unsigned long long)-1 && PyErr_Occurred()) && *out <= max;
        PyErr_Clear();
    } else {
        ok = 0;
    }
    Py_DECREF(n);
    if (!ok)
        stk_py_option_error(0, "%s=%R is out of range: it must be between %lld and %llu", name,
                            value, min, max);
    return ok ? 0 : -1;
}

/* image_size=(height, width): image_height and image_width. */
static int set_image_hw(struct stk_options *o, PyObject *value)
{
    if (!PySequence_Check(value) || PyUnicode_Check(value) || PyBytes_Check(value)) {
        stk_py_option_error(1, "image_size must be an int or a (height, width) pair, not %.100s",
                            Py_TYPE(value)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(value, "image_size");
    if (seq == NULL)
        return -1;
    const struct stk_option_info *range = stk_option_find("image_height");
    unsigned long long hw[2];
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != 2) {
        stk_py_option_error(0, "image_size=%R: give an int or a (height, width) pair", value);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < 2; i++)
        rc = stk_py_integer(PySequence_Fast_GET_ITEM(seq, i), "image_size", range->min,
                            range->max, &hw[i]);
    Py_DECREF(seq);
    if (rc == 0) {
        o->image_height = (unsigned)hw[0];
        o->image_width = (unsigned)hw[1];
    }
    return rc;
}

/* A number as text for stk_options_set(), or NULL (no exception) when
 * value is none. */
static PyObject *number_text(PyObject *value)
{
    if (PyLong_Check(value) || PyFloat_Check(value)) {
        double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred())
            return NULL;
        char text[64];
        snprintf(text, sizeof text, "%.17g", v);
        return PyUnicode_FromString(text);
    }
    return NULL;
}

/* value as the text stk_options_set() takes for option info; NULL with
 * OptionTypeError when its Python type does not fit, saying what does. */
static PyObject *option_text(const struct stk_option_info *info, PyObject *value)
{
    PyObject *text = NULL;
    const char *wanted = "";
    switch (info->type) {
    case STK_OPTION_BOOL:
    case STK_OPTION_INTEGER:
        if (PyIndex_Check(value)) {
            PyObject *n = PyNumber_Index(value);
            text = n != NULL ? PyObject_Str(n) : NULL;
            Py_XDECREF(n);
            return text;
        }
        wanted = "an int";
        break;
    case STK_OPTION_FLOAT:
        if ((text = number_text(value)) != NULL || PyErr_Occurred())
            return text;
        wanted = "a float";
        break;
    case STK_OPTION_FLOAT3:
        if (PySequence_Check(value) && !PyUnicode_Check(value) && !PyBytes_Check(value)) {
            PyObject *seq = PySequence_Fast(value, info->name), *parts = PyList_New(0);
            for (Py_ssize_t i = 0; seq != NULL && parts != NULL &&
                                   i < PySequence_Fast_GET_SIZE(seq); i++) {
                PyObject *t = number_text(PySequence_Fast_GET_ITEM(seq, i));
                if (t == NULL || PyList_Append(parts, t) < 0)
                    Py_CLEAR(parts);
                Py_XDECREF(t);
            }
            PyObject *comma = parts != NULL ? PyUnicode_FromString(",") : NULL;
            text = comma != NULL ? PyUnicode_Join(comma, parts) : NULL;
            Py_XDECREF(comma);
            Py_XDECREF(parts);
            Py_XDECREF(seq);
            if (text != NULL || PyErr_Occurred())
                return text;
        }
        wanted = "3 floats";
        break;
    case STK_OPTION_CHOICE:
        if (PyUnicode_Check(value))
            return Py_NewRef(value);
        wanted = "a str";
        break;
    case STK_OPTION_STRING: {
        PyObject *path = PyOS_FSPath(value); /* str or os.PathLike */
        if (path != NULL && PyUnicode_Check(path))
            return path;
        Py_XDECREF(path);
        PyErr_Clear();
        wanted = "a str (or path)";
        break;
    }
    }
    char accepted[256];
    stk_option_describe(info, accepted, sizeof accepted);
    return stk_py_option_error(1, "%s must be %s, %s; not %.100s %R", info->name, wanted, accepted,
                               Py_TYPE(value)->tp_name, value);
}

int stk_py_set_option(struct stk_options *o, PyObject *keep, const char *name, PyObject *value)
{
    const struct stk_option_info *info = stk_option_find(name);
    if (info == NULL) {
        stk_py_option_error(1, "unknown option '%s' (stoker.Loader's help lists every option)",
                            name);
        return -1;
    }
    if (strcmp(name, "image_size") == 0 && !PyIndex_Check(value))
        return set_image_hw(o, value);
    if (info->type == STK_OPTION_STRING && value == Py_None)
        return 0; /* the default */
    PyObject *text = option_text(info, value);
    const char *utf8 = text != NULL ? PyUnicode_AsUTF8(text) : NULL;
    /* A string option points into the text: keep it alive with the options. */
    if (utf8 == NULL || (info->type == STK_OPTION_STRING && PyList_Append(keep, text) < 0)) {
        Py_XDECREF(text);
        return -1;
    }
    char msg[512];
    int rc = stk_options_set(o, name, utf8, msg, sizeof msg);
    Py_DECREF(text);
    if (rc < 0)
        stk_py_option_error(0, "%s", msg);
    return rc < 0 ? -1 : 0;
}

/* options() -> the option table as a list of dicts (name, type, default,
 * min, max, bytes, choices, cli, cli_scope, speed_only, accepts, doc): what
 * stoker.Loader's help is made of. */
static PyObject *module_options(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    static const char *const types[] = {"bool", "int", "float", "float3", "choice", "str"};
    PyObject *list = PyList_New(0);
    const struct stk_option_info *o;
    for (size_t i = 0; list != NULL && (o = stk_option_at(i)) != NULL; i++) {
        char accepted[256];
        stk_option_describe(o, accepted, sizeof accepted);
        /* where the stoker command takes it: bench, or every command that reads */
        const char *scope = (o->flags & STK_OPTION_CLI_SOURCE) ? "source"
                            : (o->flags & STK_OPTION_CLI_BENCH) ? "bench"
                                                                : NULL;
        PyObject *d = Py_BuildValue(
            "{s:s,s:s,s:z,s:L,s:K,s:O,s:z,s:z,s:z,s:O,s:s,s:s}", "name", o->name, "type",
            types[o->type], "default", o->default_value, "min", (long long)o->min, "max",
            (unsigned long long)o->max, "bytes", (o->flags & STK_OPTION_BYTES) ? Py_True : Py_False,
            "choices", o->type == STK_OPTION_CHOICE ? o->metavar : NULL, "cli", o->cli_name,
            "cli_scope", o->cli_name != NULL ? scope : NULL, "speed_only",
            (o->flags & STK_OPTION_SPEED_ONLY) ? Py_True : Py_False, "accepts", accepted, "doc",
            o->doc);
        if (d == NULL || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    return list;
}

/* The loader's options: the shared ones, and batch_allocator. */
static int set_option(LoaderObject *self, const char *name, PyObject *value)
{
    if (strcmp(name, "batch_allocator") != 0)
        return stk_py_set_option(&self->opts, self->keep, name, value);
    if (value == Py_None)
        return 0;
    if (!PyCallable_Check(value)) {
        stk_py_option_error(1, "batch_allocator must be callable");
        return -1;
    }
    Py_INCREF(value);
    Py_XSETREF(self->allocator, value);
    self->opts.alloc_batch_memory = alloc_batch_memory;
    self->opts.free_batch_memory = free_batch_memory;
    self->opts.batch_memory_data = self;
    return 0;
}

const char **stk_py_urls(PyObject *urls, Py_ssize_t *n, PyObject **seq)
{
    *seq = PySequence_Fast(urls, "urls must be a sequence of str");
    if (*seq == NULL)
        return NULL;
    *n = PySequence_Fast_GET_SIZE(*seq);
    const char **out = PyMem_Calloc((size_t)*n + 1, sizeof *out);
    if (out == NULL)
        PyErr_NoMemory();
    for (Py_ssize_t i = 0; out != NULL && i < *n; i++) {
        out[i] = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(*seq, i));
        if (out[i] == NULL) {
            PyMem_Free(out);
            out = NULL;
        }
    }
    if (out == NULL)
        Py_CLEAR(*seq);
    return out;
}

static int loader_init(LoaderObject *self, PyObject *args, PyObject *kwargs)
{
    PyObject *urls_arg;
    if (self->loader != NULL) {
        /* A new stk_loader would free the old one under the batches and
         * iterators that use it. */
        PyErr_SetString(PyExc_RuntimeError, "Loader.__init__ called again on a loader in use; "
                                            "create a new Loader instead");
        return -1;
    }
    if (!PyArg_ParseTuple(args, "O", &urls_arg))
        return -1;
    if ((self->lock == NULL && (self->lock = PyThread_allocate_lock()) == NULL) ||
        (self->log == NULL && (self->log = stk_py_log_new()) == NULL)) {
        PyErr_NoMemory();
        return -1;
    }
    stk_options_init(&self->opts);
    self->opts.log = stk_py_log_push;
    self->opts.log_data = self->log;
    Py_CLEAR(self->keep);
    self->keep = PyList_New(0);
    if (self->buffers == NULL)
        self->buffers = PyDict_New();
    if (self->keep == NULL || self->buffers == NULL)
        return -1;
    if (kwargs != NULL) {
        PyObject *key, *value;
        Py_ssize_t pos = 0;
        while (PyDict_Next(kwargs, &pos, &key, &value)) {
            const char *name = PyUnicode_AsUTF8(key);
            if (name == NULL || set_option(self, name, value) < 0)
                return -1;
        }
    }
    PyObject *seq;
    Py_ssize_t n;
    const char **urls = stk_py_urls(urls_arg, &n, &seq);
    if (urls == NULL)
        return -1;
    int rc = 0;
    char msg[1024];
    stk_loader *l = NULL;
    int code = stk_loader_create(&self->opts, urls, (size_t)n, &l, msg, sizeof msg);
    if (code < 0) {
        stk_py_raise(code, msg);
        rc = -1;
    } else {
        self->loader = l;
    }
    PyMem_Free(urls);
    Py_DECREF(seq);
    return rc;
}

static PyObject *loader_take_log(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (self->log == NULL)
        return PyList_New(0);
    return stk_py_log_take(self->log);
}

static int check_open(LoaderObject *self)
{
    if (self->loader != NULL && !self->closed)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return -1;
}

/* Take self->lock for a call into the C loader (waiting without the GIL
 * while another thread is inside one) and check that the loader is open;
 * 0, or -1 with ValueError and the lock not held. */
static int enter(LoaderObject *self)
{
    if (check_open(self) < 0)
        return -1;
    if (!PyThread_acquire_lock(self->lock, NOWAIT_LOCK)) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        Py_END_ALLOW_THREADS
    }
    if (check_open(self) == 0) /* close() may have run meanwhile */
        return 0;
    PyThread_release_lock(self->lock);
    return -1;
}

static PyObject *loader_next(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (enter(self) < 0)
        return NULL;
    struct stk_batch *b;
    int rc;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_next(self->loader, &b);
    if (rc < 0) /* valid until the next call, maybe another thread's */
        snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc == STK_EOF)
        Py_RETURN_NONE;
    if (rc == STK_EINTR && self->closed) {
        PyErr_SetString(PyExc_ValueError, "the loader was closed (by another thread) while "
                                          "next() waited for a batch");
        return NULL;
    }
    if (rc == STK_ENOMEM && raise_alloc_failure(self))
        return NULL;
    if (rc < 0)
        return stk_py_raise(rc, msg);
    BatchObject *batch = PyObject_New(BatchObject, &BatchType);
    if (batch == NULL) {
        stk_batch_release(b);
        return NULL;
    }
    batch->batch = b;
    batch->skips_counted = 0;
    Py_INCREF(self);
    batch->loader = (PyObject *)self;
    return (PyObject *)batch;
}

/* seek(epoch, batch), or with count (seek_range) only that many batches,
 * continuing the previous range when it ended at batch. */
static PyObject *loader_seek(LoaderObject *self, PyObject *args)
{
    PyObject *epoch_obj, *batch_obj, *count_obj = NULL;
    unsigned long long epoch, batch, count = 0;
    if (!PyArg_ParseTuple(args, "OO|O", &epoch_obj, &batch_obj, &count_obj) ||
        stk_py_integer(epoch_obj, "epoch", 0, ULLONG_MAX, &epoch) < 0 ||
        stk_py_integer(batch_obj, "batch", 0, ULLONG_MAX, &batch) < 0 ||
        (count_obj != NULL && stk_py_integer(count_obj, "count", 1, ULLONG_MAX, &count) < 0) ||
        enter(self) < 0)
        return NULL;
    Py_CLEAR(self->alloc_failure); /* the next epoch tries the allocator again */
    int rc;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS
    rc = count_obj != NULL ? stk_loader_seek_range(self->loader, epoch, batch, count)
                           : stk_loader_seek(self->loader, epoch, batch);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise(rc, msg);
    Py_RETURN_NONE;
}


/* Every field of struct stk_stats by name, from the library's table:
 * stats() builds its dict from it and report() reads such a dict back, so
 * the two cannot disagree. */
static uint64_t *stats_field(struct stk_stats *s, const struct stk_stats_field *f)
{
    return (uint64_t *)((char *)s + f->offset);
}

static PyObject *stats_dict(struct stk_stats *s)
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

static PyObject *report_text(const struct stk_stats *s)
{
    char text[2048];
    size_t n = stk_stats_report(s, text, sizeof text);
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)(n < sizeof text ? n : sizeof text - 1));
}

/* The loader's counters, with the samples left out in Python (Samples'
 * bad metadata) moved from delivered to skipped. */
static void loader_counts(LoaderObject *self, struct stk_stats *s)
{
    stk_loader_stats(self->loader, s);
    s->samples_skipped += self->skipped_in_python;
    s->samples -= self->skipped_in_python < s->samples ? self->skipped_in_python : s->samples;
}

static PyObject *loader_stats(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_stats s;
    loader_counts(self, &s);
    return stats_dict(&s);
}

static PyObject *loader_report(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_stats s;
    loader_counts(self, &s);
    return report_text(&s);
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
static PyObject *module_report(PyObject *module, PyObject *stats)
{
    (void)module;
    struct stk_stats s;
    if (stats_from_dict("report", stats, &s) < 0)
        return NULL;
    return report_text(&s);
}

/* rates(now, before=None): stk_stats_rates of two such dicts, as a dict. */
static PyObject *module_rates(PyObject *module, PyObject *args)
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

static PyObject *loader_close(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    /* Batches still alive hold a reference to this object and release into
     * the loader, so close() only stops the threads; the loader itself is
     * freed with the object, after the last batch. A next() waiting in
     * another thread is woken (it raises, seeing closed) and left before
     * the epoch is stopped; calls that come later see closed. */
    if (self->loader != NULL) {
        stk_loader *l = self->loader;
        self->closed = 1;
        Py_BEGIN_ALLOW_THREADS
        stk_loader_interrupt(l);
        PyThread_acquire_lock(self->lock, WAIT_LOCK);
        stk_loader_set_epoch(l, 0);
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *loader_info(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (enter(self) < 0) /* the epoch's sample count reads the epoch a seek sets */
        return NULL;
    const struct stk_options *o = &self->opts;
    PyObject *info = Py_BuildValue("{s:n,s:i,s:i,s:K,s:K,s:n,s:I,s:I,s:I,s:n}", "num_shards",
                         (Py_ssize_t)stk_loader_num_shards(self->loader), "rank",
                         stk_loader_rank(self->loader), "world_size",
                         stk_loader_world_size(self->loader), "samples_per_rank",
                         (unsigned long long)self->opts.samples_per_rank, "epoch_samples",
                         (unsigned long long)stk_loader_epoch_samples(self->loader), "batch_size",
                         (Py_ssize_t)self->opts.batch_size, "image_size", self->opts.image_size,
                         "image_height", o->image_height ? o->image_height : o->image_size,
                         "image_width", o->image_width ? o->image_width : o->image_size,
                         "drop_last", (Py_ssize_t)self->opts.drop_last);
    PyThread_release_lock(self->lock);
    return info;
}

static void loader_dealloc(LoaderObject *self)
{
    if (self->loader != NULL) {
        Py_BEGIN_ALLOW_THREADS
        stk_loader_destroy(self->loader);
        Py_END_ALLOW_THREADS
    }
    Py_XDECREF(self->keep);
    Py_XDECREF(self->allocator);
    Py_XDECREF(self->buffers);
    Py_XDECREF(self->alloc_failure);
    if (self->lock != NULL)
        PyThread_free_lock(self->lock);
    stk_py_log_free(self->log); /* after the loader: its threads are gone */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef loader_methods[] = {
    {"next", (PyCFunction)loader_next, METH_NOARGS,
     "next() -> Batch or None at the end of the epoch (releases the GIL while waiting)"},
    {"seek", (PyCFunction)loader_seek, METH_VARARGS,
     "seek(epoch, batch): the next next() delivers that batch of that epoch"},
    {"seek_range", (PyCFunction)loader_seek, METH_VARARGS,
     "seek_range(epoch, first, count): deliver batches [first, first + count) of epoch, "
     "continuing the previous range without re-reading when it ended at first"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "counters as a dict"},
    {"take_log", (PyCFunction)loader_take_log, METH_NOARGS,
     "take_log() -> [(level, message)]: what the loader's threads logged since the last call"},
    {"report", (PyCFunction)loader_report, METH_NOARGS, "where the time went, in words"},
    {"info", (PyCFunction)loader_info, METH_NOARGS, "shards, rank, world size and sizes"},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop threads and free the loader"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._stoker.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = loader_methods,
    .tp_init = (initproc)loader_init,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Loader(urls, **options): the C loader; see stoker.h for the options.",
};

/* stats_fields() -> [(name, doc)]: the keys of Loader.stats(). */
static PyObject *module_stats_fields(PyObject *module, PyObject *unused)
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

static PyMethodDef module_methods[] = {
    {"options", (PyCFunction)module_options, METH_NOARGS,
     "options() -> [dict]: every loader option with its type, default, range and meaning"},
    {"stats_fields", (PyCFunction)module_stats_fields, METH_NOARGS,
     "stats_fields() -> [(name, doc)]: the counters of Loader.stats()"},
    {"report", (PyCFunction)module_report, METH_O,
     "report(stats) -> str: the input-bound report of a dict of counters"},
    {"rates", module_rates, METH_VARARGS,
     "rates(now, before=None) -> dict: rates, busy shares and shuffle quality between two "
     "stats() dicts"},
    {"verify", (PyCFunction)(void (*)(void))stk_py_verify, METH_VARARGS | METH_KEYWORDS,
     "verify(urls, **options) -> dict: read every sample once, collect every problem"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "stoker._stoker", .m_methods = module_methods,
    .m_doc = "C core of stoker: WebDataset tar shards to batches.", .m_size = -1,
};

PyMODINIT_FUNC PyInit__stoker(void); /* the only exported symbol */
PyMODINIT_FUNC PyInit__stoker(void)
{
    if (PyType_Ready(&LoaderType) < 0 || PyType_Ready(&BatchType) < 0 ||
        PyType_Ready(&ViewType) < 0 || PyType_Ready(&stk_py_writer_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (add_error_classes(m) < 0 ||
        PyModule_AddObjectRef(m, "Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObjectRef(m, "ShardWriter", (PyObject *)&stk_py_writer_type) < 0 ||
        PyModule_AddStringConstant(m, "version", stk_version()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
