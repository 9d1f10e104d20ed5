/* SPDX-License-Identifier: MIT */
/*
 * _batch.c - _stoker.Batch and its buffer views. A Batch owns its stk_batch
 * and releases it when the last Python reference goes away; its images and
 * labels are exposed through the buffer protocol by two small view objects
 * that keep the Batch alive, so torch.frombuffer() can share the memory
 * (zero copy) for as long as any tensor uses it. samples() and columns()
 * copy members out as Python values.
 */
#include "_stoker.h"

#include <string.h>
#include <unistd.h>

#include "base/error.h" /* stk__shown: keys in messages as the library quotes them */

typedef struct {
    PyObject_HEAD
    struct stk_batch *batch;
    PyObject *loader; /* keeps the loader alive while batches exist */
    pid_t pid;        /* the process that took it from the loader */
    int skip_bad;      /* the loader's on_error is "skip" */
    /* The loader's count of samples left out here as bad (alive with it),
     * and whether samples() added this batch's already. */
    unsigned long long *skipped_in_python;
    int skips_counted;
} BatchObject;

typedef struct {
    PyObject_HEAD
    BatchObject *owner;
    void *data;
    Py_ssize_t bytes;
} ViewObject;

static void batch_dealloc(BatchObject *self)
{
    /* In a child of fork() the batch belongs to the parent's loader, whose
     * threads (and the locks they held) are not here: it is left unreleased,
     * as its loader is (_loader.c, loader_dealloc). */
    if (self->pid == getpid())
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

PyTypeObject stk_py_view_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._ext._stoker.BufferView",
    .tp_basicsize = sizeof(ViewObject),
    .tp_dealloc = (destructor)view_dealloc,
    .tp_as_buffer = &view_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Writable bytes of a batch; keeps the batch alive.",
};

static PyObject *make_view(BatchObject *owner, void *data, size_t bytes)
{
    ViewObject *v = PyObject_New(ViewObject, &stk_py_view_type);
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

static PyObject *batch_mix_labels(BatchObject *self, void *closure)
{
    (void)closure;
    if (self->batch->mix_labels == NULL)
        Py_RETURN_NONE;
    return make_view(self, (void *)self->batch->mix_labels,
                     self->batch->n_samples * sizeof(int64_t));
}

/* The samples' keys (stk_batch.sample_keys) as a buffer of uint64. */
static PyObject *batch_sample_keys(BatchObject *self, void *closure)
{
    (void)closure;
    return make_view(self, (void *)self->batch->sample_keys,
                     self->batch->n_samples * sizeof(uint64_t));
}

static PyObject *batch_mix_weight(BatchObject *self, void *closure)
{
    (void)closure;
    return PyFloat_FromDouble(self->batch->mix_weight);
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
            char k[STK__SHOWN_MAX];
            if (shown != NULL)
                PyErr_Format(stk_py_data_error, "%s: sample '%s': member extension '%U' is not UTF-8",
                             s->url, stk__shown(k, sizeof k, s->key), shown);
            *bad = shown != NULL;
            Py_XDECREF(shown);
            break;
        }
        int taken = PyDict_Contains(d, name);
        if (taken == 1) {
            char k[STK__SHOWN_MAX];
            stk__shown(k, sizeof k, s->key);
            PyErr_Format(stk_py_data_error,
                         "%s: sample '%s': member '%s.%U' would overwrite the sample's %U, a "
                         "name WebDataset reserves",
                         s->url, k, k, name, name);
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
        char k[STK__SHOWN_MAX], e[STK__SHOWN_MAX];
        PyErr_Format(stk_py_data_error, "%s: sample '%s': %s member %s (%S)", s->url,
                     stk__shown(k, sizeof k, s->key), stk__shown(e, sizeof e, m->ext), what,
                     cause ? cause : Py_None);
        stk_py_chain_cause(cause);
        Py_XDECREF(t);
        Py_XDECREF(tb);
    }
    return v;
}

/* The sample's member of the first of the ';'-separated extensions of
 * exts that it has ("jpg;png", as WebDataset writes alternatives), and
 * *alt its position; NULL when it has none. */
static const struct stk_member *first_member(const struct stk_sample *s, const char *exts,
                                             size_t *alt)
{
    for (*alt = 0; *exts != '\0'; (*alt)++) {
        size_t len = strcspn(exts, ";");
        for (size_t k = 0; k < s->n_members; k++)
            if (strncmp(s->members[k].ext, exts, len) == 0 && s->members[k].ext[len] == '\0')
                return &s->members[k];
        exts += len + (exts[len] == ';');
    }
    return NULL;
}

/* columns(spec, loads) -> one list per (ext, kind) of spec, one value per
 * sample: kind 'k' the key and 'u' the URL (str); else the sample's member
 * of that extension, None where it has none: 'b' bytes, 'i' int, 's' str
 * (UTF-8), 'j' loads(bytes). An ext "a;b" takes the first of those members
 * the sample has, parsed by the kind at its position in kind ("sj": a as
 * str, b as JSON). Only the members asked for are copied. A
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
                size_t alt = 0;
                const struct stk_member *m = first_member(s, ext, &alt);
                char alt_kind = alt < strlen(kind_text) ? kind_text[alt] : kind;
                v = m != NULL ? member_value(s, m, alt_kind, loads) : Py_NewRef(Py_None);
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
    int skip = self->skip_bad;
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
        *self->skipped_in_python += skipped;
    }
    return list;
}

static PyGetSetDef batch_getset[] = {
    {"images", (getter)batch_images, NULL, "buffer of the images (None for raw batches)", NULL},
    {"labels", (getter)batch_labels, NULL, "buffer of the int64 labels (None for raw batches)", NULL},
    {"mix_labels", (getter)batch_mix_labels, NULL,
     "buffer of the int64 Mixup/CutMix partner labels (None without mixing)", NULL},
    {"mix_weight", (getter)batch_mix_weight, NULL,
     "weight of each image's own label under Mixup/CutMix (1.0 without)", NULL},
    {"sample_keys", (getter)batch_sample_keys, NULL,
     "buffer of the uint64 keys of the samples' random streams (stoker's own draws)", NULL},
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

PyTypeObject stk_py_batch_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._ext._stoker.Batch",
    .tp_basicsize = sizeof(BatchObject),
    .tp_dealloc = (destructor)batch_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_getset = batch_getset,
    .tp_methods = batch_methods,
    .tp_doc = "One batch; its memory returns to the loader when no reference is left.",
};

PyObject *stk_py_batch_new(struct stk_batch *batch, PyObject *loader, int skip_bad,
                           unsigned long long *skipped_in_python)
{
    BatchObject *self = PyObject_New(BatchObject, &stk_py_batch_type);
    if (self == NULL) {
        stk_batch_release(batch);
        return NULL;
    }
    self->batch = batch;
    self->skip_bad = skip_bad;
    self->skipped_in_python = skipped_in_python;
    self->skips_counted = 0;
    self->loader = Py_NewRef(loader);
    self->pid = getpid();
    return (PyObject *)self;
}
