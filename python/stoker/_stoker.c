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
#include <string.h>

#include "stoker.h"

static PyObject *StokerError;   /* base class: stoker.Error */
static PyObject *DataError;     /* bad shard or image */
static PyObject *PlanError;     /* cannot split as asked */
static PyObject *BusyError;     /* caller holds every batch */

static PyObject *error_type(int code)
{
    switch (code) {
    case STK_ENOMEM: return PyExc_MemoryError;
    case STK_EINVAL: return PyExc_ValueError;
    case STK_ENOENT: return PyExc_FileNotFoundError;
    case STK_EIO:
    case STK_ECACHE: return PyExc_OSError;
    case STK_EHTTP: return PyExc_OSError;
    case STK_EFORMAT:
    case STK_ETRUNC:
    case STK_ELIMIT:
    case STK_EDUPKEY:
    case STK_EDECODE:
    case STK_ELABEL:
    case STK_EMEMBER: return DataError;
    case STK_EPLAN: return PlanError;
    case STK_EBUSY: return BusyError;
    case STK_EINTR: return PyExc_InterruptedError;
    case STK_EEXIST: return PyExc_FileExistsError;
    default: return StokerError;
    }
}

PyObject *stk_py_raise(int code, const char *message)
{
    PyErr_Format(error_type(code), "%s (%s)", message && *message ? message : stk_strerror(code),
                 stk_strerror(code));
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
        if (cause != NULL) {
            PyObject *et, *ev, *etb;
            PyErr_Fetch(&et, &ev, &etb);
            PyErr_NormalizeException(&et, &ev, &etb);
            PyException_SetCause(ev, cause); /* steals cause */
            PyErr_Restore(et, ev, etb);
        }
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
    if (cause != Py_None) {
        PyObject *t, *v, *tb;
        PyErr_Fetch(&t, &v, &tb);
        PyErr_NormalizeException(&t, &v, &tb);
        PyException_SetCause(v, Py_NewRef(cause));
        PyErr_Restore(t, v, tb);
    }
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

static int parse_choice(PyObject *value, const char *name, const char *const *choices, int *out)
{
    const char *text = PyUnicode_AsUTF8(value);
    if (text == NULL)
        return -1;
    for (int i = 0; choices[i] != NULL; i++) {
        if (strcmp(text, choices[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "%s: unknown value '%s'", name, text);
    return -1;
}

static int parse_triple(PyObject *value, const char *name, float out[3])
{
    PyObject *seq = PySequence_Fast(value, name);
    if (seq == NULL)
        return -1;
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != 3) {
        PyErr_Format(PyExc_ValueError, "%s needs 3 values", name);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < 3; i++) {
        double v = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(seq, i));
        if (v == -1.0 && PyErr_Occurred())
            rc = -1;
        out[i] = (float)v;
    }
    Py_DECREF(seq);
    return rc;
}

/* The float option called name, or NULL. */
static float *float_option(struct stk_options *o, const char *name)
{
    const struct {
        const char *name;
        float *field;
    } floats[] = {
        {"flip_probability", &o->flip_probability}, {"scale_min", &o->scale_min},
        {"scale_max", &o->scale_max}, {"ratio_min", &o->ratio_min},
        {"ratio_max", &o->ratio_max},
    };
    for (size_t i = 0; i < sizeof floats / sizeof floats[0]; i++)
        if (strcmp(name, floats[i].name) == 0)
            return floats[i].field;
    return NULL;
}

int stk_py_integer(PyObject *value, const char *name, long long min, unsigned long long max,
                   unsigned long long *out)
{
    if (!PyIndex_Check(value)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int, not %.100s", name,
                     Py_TYPE(value)->tp_name);
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
        PyErr_Format(PyExc_ValueError, "%s=%R is out of range: it must be between %lld and %llu",
                     name, value, min, max);
    return ok ? 0 : -1;
}

/* Each integer field of struct stk_options with its size, signedness and
 * smallest value: a Python int is stored only if it fits the field, never
 * cut to its low bits (2**32 + 1 threads would be 1). */
struct int_option {
    const char *name;
    size_t offset;
    size_t size;
    int is_signed;
    long long min;
};
/* The field types in use; any other fails to compile here. */
#define FIELD_SIGNED(f) _Generic((f), int: 1, unsigned: 0, unsigned long: 0)
#define FIELD_SIZE(f) _Generic((f), int: sizeof(int), unsigned: sizeof(unsigned), \
                               unsigned long: sizeof(unsigned long))
#define INT_OPTION(f, min)                                                                        \
    {#f, offsetof(struct stk_options, f), FIELD_SIZE(((struct stk_options *)0)->f),               \
     FIELD_SIGNED(((struct stk_options *)0)->f), min}
static const struct int_option int_options[] = {
    INT_OPTION(batch_size, 0), INT_OPTION(drop_last, 0), INT_OPTION(threads, 0),
    INT_OPTION(shards_in_flight, 0), INT_OPTION(shuffle_buffer, 0), INT_OPTION(shuffle, 0),
    INT_OPTION(seed, 0), INT_OPTION(epoch, 0), INT_OPTION(rank, -1),
    INT_OPTION(world_size, -1), INT_OPTION(samples_per_rank, 0), INT_OPTION(max_batches, 0),
    INT_OPTION(image_size, 0), INT_OPTION(image_height, 0), INT_OPTION(image_width, 0),
    INT_OPTION(full_decode, 0), INT_OPTION(max_image_pixels, 0),
    INT_OPTION(prefetch_bytes_per_shard, 0), INT_OPTION(read_buffer_bytes, 0),
    INT_OPTION(max_member_bytes, 0), INT_OPTION(max_members_per_sample, 0),
    INT_OPTION(max_key_bytes, 0), INT_OPTION(cache_size, 0), INT_OPTION(io_timeout_ms, 0),
    INT_OPTION(io_retries, 0), INT_OPTION(io_backoff_ms, 0), INT_OPTION(io_min_rate, 0),
    INT_OPTION(allow_pipe, 0), INT_OPTION(max_samples_per_shard, 0),
    INT_OPTION(shuffle_buffer_bytes, 0),
};
#undef INT_OPTION
#undef FIELD_SIZE
#undef FIELD_SIGNED

static int set_int_option(struct stk_options *o, const char *name, PyObject *value)
{
    for (size_t i = 0; i < sizeof int_options / sizeof int_options[0]; i++) {
        const struct int_option *opt = &int_options[i];
        if (strcmp(name, opt->name) != 0)
            continue;
        unsigned bits = 8 * (unsigned)opt->size - (opt->is_signed ? 1 : 0);
        unsigned long long max = bits == 64 ? ULLONG_MAX : (1ull << bits) - 1, v;
        if (stk_py_integer(value, name, opt->min, max, &v) < 0)
            return -1;
        char *field = (char *)o + opt->offset;
        if (opt->size == 8) {
            uint64_t u64 = v;
            memcpy(field, &u64, 8);
        } else if (opt->is_signed) {
            int32_t s32 = (int32_t)(long long)v;
            memcpy(field, &s32, 4);
        } else {
            uint32_t u32 = (uint32_t)v;
            memcpy(field, &u32, 4);
        }
        return 0;
    }
    PyErr_Format(PyExc_TypeError, "unknown option '%s'", name);
    return -1;
}

/* image_size=(height, width): image_height and image_width. */
static int set_image_hw(struct stk_options *o, PyObject *value)
{
    if (!PySequence_Check(value) || PyUnicode_Check(value) || PyBytes_Check(value)) {
        PyErr_Format(PyExc_TypeError, "image_size must be an int or a (height, width) pair, "
                                      "not %.100s", Py_TYPE(value)->tp_name);
        return -1;
    }
    PyObject *seq = PySequence_Fast(value, "image_size");
    if (seq == NULL)
        return -1;
    unsigned long long hw[2];
    int rc = 0;
    if (PySequence_Fast_GET_SIZE(seq) != 2) {
        PyErr_Format(PyExc_ValueError, "image_size=%R: give an int or a (height, width) pair",
                     value);
        rc = -1;
    }
    for (Py_ssize_t i = 0; rc == 0 && i < 2; i++)
        rc = stk_py_integer(PySequence_Fast_GET_ITEM(seq, i), "image_size", 1, 8192, &hw[i]);
    Py_DECREF(seq);
    if (rc == 0) {
        o->image_height = (unsigned)hw[0];
        o->image_width = (unsigned)hw[1];
    }
    return rc;
}

/* Set one option from a keyword; -1 with an exception on bad values. */
int stk_py_set_option(struct stk_options *o, PyObject *keep, const char *name, PyObject *value)
{
    static const char *const transforms[] = {"none", "train", "eval", NULL};
    static const char *const dtypes[] = {"uint8", "float32", "float16", "bfloat16", NULL};
    static const char *const layouts[] = {"nchw", "nhwc", NULL};
    static const char *const policies[] = {"fail", "skip", NULL};
    int choice;
    if (strcmp(name, "transform") == 0) {
        if (parse_choice(value, name, transforms, &choice) < 0)
            return -1;
        o->transform = (enum stk_transform)choice;
    } else if (strcmp(name, "dtype") == 0) {
        if (parse_choice(value, name, dtypes, &choice) < 0)
            return -1;
        o->dtype = (enum stk_dtype)choice;
    } else if (strcmp(name, "layout") == 0) {
        if (parse_choice(value, name, layouts, &choice) < 0)
            return -1;
        o->layout = (enum stk_layout)choice;
    } else if (strcmp(name, "on_error") == 0) {
        if (parse_choice(value, name, policies, &choice) < 0)
            return -1;
        o->on_error = (enum stk_on_error)choice;
    } else if (float_option(o, name) != NULL) {
        double v = PyFloat_AsDouble(value);
        if (v == -1.0 && PyErr_Occurred())
            return -1;
        *float_option(o, name) = (float)v;
    } else if (strcmp(name, "mean") == 0) {
        return parse_triple(value, name, o->mean);
    } else if (strcmp(name, "std") == 0) {
        return parse_triple(value, name, o->std);
    } else if (strcmp(name, "image_size") == 0 && !PyIndex_Check(value)) {
        return set_image_hw(o, value);
    } else if (strcmp(name, "label_exts") == 0 || strcmp(name, "label_json_field") == 0 ||
               strcmp(name, "index_path") == 0 || strcmp(name, "ca_bundle") == 0 ||
               strcmp(name, "require_members") == 0) {
        if (value == Py_None)
            return 0;
        const char *text = PyUnicode_AsUTF8(value);
        if (text == NULL || PyList_Append(keep, value) < 0)
            return -1;
        if (strcmp(name, "label_exts") == 0)
            o->label_exts = text;
        else if (strcmp(name, "ca_bundle") == 0)
            o->ca_bundle = text;
        else if (strcmp(name, "label_json_field") == 0)
            o->label_json_field = text;
        else if (strcmp(name, "require_members") == 0)
            o->require_members = text;
        else
            o->index_path = text;
    } else if (strcmp(name, "cache_dir") == 0) {
        if (value == Py_None)
            return 0;
        PyObject *path = PyOS_FSPath(value); /* str or os.PathLike */
        if (path == NULL)
            return -1;
        const char *text = PyUnicode_Check(path) ? PyUnicode_AsUTF8(path) : NULL;
        if (text == NULL && !PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "cache_dir must be a str path");
        if (text == NULL || PyList_Append(keep, path) < 0) {
            Py_DECREF(path);
            return -1;
        }
        Py_DECREF(path);
        o->cache_dir = text;
    } else {
        return set_int_option(o, name, value);
    }
    return 0;
}

/* The loader's options: the shared ones, and batch_allocator. */
static int set_option(LoaderObject *self, const char *name, PyObject *value)
{
    if (strcmp(name, "batch_allocator") != 0)
        return stk_py_set_option(&self->opts, self->keep, name, value);
    if (value == Py_None)
        return 0;
    if (!PyCallable_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "batch_allocator must be callable");
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


/* Every field of struct stk_stats (all uint64_t) by name: stats() builds
 * its dict from this table and report() reads such a dict back, so the two
 * cannot disagree. */
#define STATS_FIELD(f) {#f, offsetof(struct stk_stats, f)}
static const struct {
    const char *name;
    size_t offset;
} stats_fields[] = {
    STATS_FIELD(shards_opened), STATS_FIELD(shards_failed), STATS_FIELD(samples),
    STATS_FIELD(samples_skipped), STATS_FIELD(members_ignored), STATS_FIELD(batches),
    STATS_FIELD(bytes_read), STATS_FIELD(member_bytes), STATS_FIELD(images_decoded),
    STATS_FIELD(images_replaced), STATS_FIELD(decode_ns), STATS_FIELD(samples_read),
    STATS_FIELD(samples_passed_over), STATS_FIELD(cache_hits), STATS_FIELD(cache_misses),
    STATS_FIELD(cache_evictions), STATS_FIELD(cache_bytes_written), STATS_FIELD(retries),
    STATS_FIELD(resumes), STATS_FIELD(read_ns), STATS_FIELD(image_decode_ns),
    STATS_FIELD(image_resample_ns), STATS_FIELD(image_convert_ns), STATS_FIELD(wait_ns),
    STATS_FIELD(sequence_ns), STATS_FIELD(wall_ns), STATS_FIELD(read_threads),
    STATS_FIELD(decode_threads), STATS_FIELD(shuffle_pairs), STATS_FIELD(shuffle_shard_pairs),
    STATS_FIELD(shuffle_shards_sized), STATS_FIELD(shuffle_sized_samples),
    STATS_FIELD(shuffle_sized_pairs), STATS_FIELD(shuffle_epoch_shards),
};
#undef STATS_FIELD
#define N_STATS_FIELDS (sizeof stats_fields / sizeof stats_fields[0])

static uint64_t *stats_field(struct stk_stats *s, size_t i)
{
    return (uint64_t *)((char *)s + stats_fields[i].offset);
}

static PyObject *stats_dict(struct stk_stats *s)
{
    PyObject *d = PyDict_New();
    for (size_t i = 0; d != NULL && i < N_STATS_FIELDS; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(*stats_field(s, i));
        if (v == NULL || PyDict_SetItemString(d, stats_fields[i].name, v) < 0)
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
    for (size_t i = 0; i < N_STATS_FIELDS; i++) {
        PyObject *v = PyDict_GetItemString(stats, stats_fields[i].name);
        if (v == NULL)
            continue;
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred())
            return -1;
        *stats_field(s, i) = u;
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
    return Py_BuildValue("{sdsdsdsdsdsdsdsdsdsd}", "seconds", r.seconds, "samples_per_s",
                         r.samples_per_s, "images_per_s", r.images_per_s, "read_bytes_per_s",
                         r.read_bytes_per_s, "wait_share", r.wait_share, "read_busy",
                         r.read_busy, "decode_busy", r.decode_busy, "batching_busy",
                         r.batching_busy, "shuffle_k_eff", r.shuffle_k_eff,
                         "shuffle_k_perfect", r.shuffle_k_perfect);
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

static PyMethodDef module_methods[] = {
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
    StokerError = PyErr_NewException("stoker.Error", PyExc_RuntimeError, NULL);
    DataError = PyErr_NewException("stoker.DataError", StokerError, NULL);
    PlanError = PyErr_NewException("stoker.PlanError", StokerError, NULL);
    BusyError = PyErr_NewException("stoker.BusyError", StokerError, NULL);
    if (PyModule_AddObjectRef(m, "Error", StokerError) < 0 ||
        PyModule_AddObjectRef(m, "DataError", DataError) < 0 ||
        PyModule_AddObjectRef(m, "PlanError", PlanError) < 0 ||
        PyModule_AddObjectRef(m, "BusyError", BusyError) < 0 ||
        PyModule_AddObjectRef(m, "Loader", (PyObject *)&LoaderType) < 0 ||
        PyModule_AddObjectRef(m, "ShardWriter", (PyObject *)&stk_py_writer_type) < 0 ||
        PyModule_AddStringConstant(m, "version", stk_version()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
