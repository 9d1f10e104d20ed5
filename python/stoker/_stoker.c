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
    case STK_ELABEL: return DataError;
    case STK_EPLAN: return PlanError;
    case STK_EBUSY: return BusyError;
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

/* The raw samples as dicts: __key__, __url__ and one bytes per member. */
static PyObject *batch_samples(BatchObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *list = PyList_New((Py_ssize_t)self->batch->n_samples);
    if (list == NULL)
        return NULL;
    for (size_t i = 0; i < self->batch->n_samples; i++) {
        const struct stk_sample *s = &self->batch->samples[i];
        PyObject *d = PyDict_New();
        if (d == NULL)
            goto fail;
        PyList_SET_ITEM(list, (Py_ssize_t)i, d);
        PyObject *key = PyUnicode_DecodeFSDefault(s->key);
        PyObject *url = PyUnicode_DecodeFSDefault(s->url);
        int rc = key && url ? PyDict_SetItemString(d, "__key__", key) |
                                  PyDict_SetItemString(d, "__url__", url)
                            : -1;
        Py_XDECREF(key);
        Py_XDECREF(url);
        if (rc < 0)
            goto fail;
        for (size_t m = 0; m < s->n_members; m++) {
            PyObject *b = PyBytes_FromStringAndSize((const char *)s->members[m].data,
                                                    (Py_ssize_t)s->members[m].size);
            rc = b ? PyDict_SetItemString(d, s->members[m].ext, b) : -1;
            Py_XDECREF(b);
            if (rc < 0)
                goto fail;
        }
    }
    return list;
fail:
    Py_DECREF(list);
    return NULL;
}

static PyGetSetDef batch_getset[] = {
    {"images", (getter)batch_images, NULL, "buffer of the images (None for raw batches)", NULL},
    {"labels", (getter)batch_labels, NULL, "buffer of the int64 labels (None for raw batches)", NULL},
    {"size", (getter)batch_len, NULL, "number of samples", NULL},
    {"index", (getter)batch_index, NULL, "batch number in the epoch", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef batch_methods[] = {
    {"samples", (PyCFunction)batch_samples, METH_NOARGS, "the raw samples as a list of dicts"},
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
    int closed; /* close() stopped the threads; the loader is freed with the object */
    struct stk_options opts;
    PyObject *keep; /* strings the options point to (label_exts, label_json_field, index_path,
                       ca_bundle, cache_dir) */
    /* batch_allocator(nbytes) -> object with the buffer protocol, e.g. a
     * pinned torch tensor; held in `buffers` (address -> object) until the
     * loader frees the memory. */
    PyObject *allocator;
    PyObject *buffers;
} LoaderObject;

/* Batch memory from the Python allocator. Called on a loader thread without
 * the GIL (every call into the loader releases it), so it takes the GIL. */
static void *alloc_batch_memory(void *data, size_t bytes)
{
    LoaderObject *self = data;
    void *memory = NULL;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *obj = PyObject_CallFunction(self->allocator, "n", (Py_ssize_t)bytes);
    Py_buffer view;
    if (obj != NULL && PyObject_GetBuffer(obj, &view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) == 0) {
        if ((size_t)view.len >= bytes) {
            PyObject *key = PyLong_FromVoidPtr(view.buf);
            if (key != NULL && PyDict_SetItem(self->buffers, key, obj) == 0)
                memory = view.buf;
            Py_XDECREF(key);
        }
        PyBuffer_Release(&view);
    }
    if (memory == NULL) /* the loader reports it as out of memory */
        PyErr_WriteUnraisable(self->allocator);
    Py_XDECREF(obj);
    PyGILState_Release(gil);
    return memory;
}

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
    } else if (strcmp(name, "label_exts") == 0 || strcmp(name, "label_json_field") == 0 ||
               strcmp(name, "index_path") == 0 || strcmp(name, "ca_bundle") == 0) {
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
        static const struct {
            const char *name;
            size_t offset;
            size_t size;
        } ints[] = {
#define INT_OPTION(f) {#f, offsetof(struct stk_options, f), sizeof(((struct stk_options *)0)->f)}
            INT_OPTION(batch_size), INT_OPTION(drop_last), INT_OPTION(threads),
            INT_OPTION(shards_in_flight), INT_OPTION(shuffle_buffer), INT_OPTION(shuffle),
            INT_OPTION(seed), INT_OPTION(epoch), INT_OPTION(rank), INT_OPTION(world_size),
            INT_OPTION(samples_per_rank), INT_OPTION(max_batches), INT_OPTION(image_size),
            INT_OPTION(full_decode), INT_OPTION(max_image_pixels),
            INT_OPTION(prefetch_bytes_per_shard), INT_OPTION(read_buffer_bytes),
            INT_OPTION(max_member_bytes), INT_OPTION(max_members_per_sample),
            INT_OPTION(max_key_bytes), INT_OPTION(cache_size), INT_OPTION(io_timeout_ms),
            INT_OPTION(io_retries), INT_OPTION(io_backoff_ms), INT_OPTION(allow_pipe),
            INT_OPTION(max_samples_per_shard), INT_OPTION(shuffle_buffer_bytes),
#undef INT_OPTION
        };
        for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
            if (strcmp(name, ints[i].name) != 0)
                continue;
            long long v = PyLong_AsLongLong(value);
            if (v == -1 && PyErr_Occurred())
                return -1;
            int is_signed = strcmp(name, "rank") == 0 || strcmp(name, "world_size") == 0;
            if (v < (is_signed ? -1 : 0)) {
                PyErr_Format(PyExc_ValueError, "%s must not be negative", name);
                return -1;
            }
            char *field = (char *)o + ints[i].offset;
            if (ints[i].size == 8) {
                uint64_t u = (uint64_t)v;
                memcpy(field, &u, 8);
            } else {
                int32_t s32 = (int32_t)v;
                memcpy(field, &s32, 4);
            }
            return 0;
        }
        PyErr_Format(PyExc_TypeError, "unknown option '%s'", name);
        return -1;
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
    if (!PyArg_ParseTuple(args, "O", &urls_arg))
        return -1;
    stk_options_init(&self->opts);
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
        stk_loader_destroy(self->loader);
        self->loader = l;
    }
    PyMem_Free(urls);
    Py_DECREF(seq);
    return rc;
}

static int check_open(LoaderObject *self)
{
    if (self->loader != NULL && !self->closed)
        return 0;
    PyErr_SetString(PyExc_ValueError, "the loader is closed");
    return -1;
}

static PyObject *loader_next(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_batch *b;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_next(self->loader, &b);
    Py_END_ALLOW_THREADS
    if (rc == STK_EOF)
        Py_RETURN_NONE;
    if (rc < 0)
        return stk_py_raise(rc, stk_loader_errmsg(self->loader));
    BatchObject *batch = PyObject_New(BatchObject, &BatchType);
    if (batch == NULL) {
        stk_batch_release(b);
        return NULL;
    }
    batch->batch = b;
    Py_INCREF(self);
    batch->loader = (PyObject *)self;
    return (PyObject *)batch;
}

static PyObject *loader_seek(LoaderObject *self, PyObject *args)
{
    unsigned long long epoch, batch;
    if (check_open(self) < 0 || !PyArg_ParseTuple(args, "KK", &epoch, &batch))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = stk_loader_seek(self->loader, epoch, batch);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise(rc, stk_loader_errmsg(self->loader));
    Py_RETURN_NONE;
}

static PyObject *loader_stats(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_stats s;
    stk_loader_stats(self->loader, &s);
    return Py_BuildValue(
        "{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,"
        "s:K,s:K,s:K,s:K,s:K,s:K,s:K}",
        "shards_opened", s.shards_opened, "shards_failed", s.shards_failed, "samples",
        s.samples, "samples_skipped", s.samples_skipped, "members_ignored", s.members_ignored,
        "batches", s.batches, "bytes_read", s.bytes_read, "member_bytes", s.member_bytes,
        "images_decoded", s.images_decoded, "images_replaced", s.images_replaced, "decode_ns",
        s.decode_ns, "samples_read", s.samples_read, "samples_passed_over",
        s.samples_passed_over, "cache_hits", s.cache_hits,
        "cache_misses", s.cache_misses, "cache_evictions", s.cache_evictions,
        "cache_bytes_written", s.cache_bytes_written, "retries", s.retries, "resumes",
        s.resumes, "read_ns", s.read_ns, "image_decode_ns", s.image_decode_ns,
        "image_resample_ns", s.image_resample_ns, "image_convert_ns", s.image_convert_ns,
        "wait_ns", s.wait_ns, "sequence_ns", s.sequence_ns, "wall_ns", s.wall_ns,
        "read_threads", s.read_threads, "decode_threads", s.decode_threads);
}

static PyObject *loader_report(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_stats s;
    stk_loader_stats(self->loader, &s);
    char text[2048];
    size_t n = stk_stats_report(&s, text, sizeof text);
    return PyUnicode_FromStringAndSize(text, (Py_ssize_t)(n < sizeof text ? n : sizeof text - 1));
}

static PyObject *loader_close(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    /* Batches still alive hold a reference to this object and release into
     * the loader, so close() only stops the threads; the loader itself is
     * freed with the object, after the last batch. */
    if (self->loader != NULL && !self->closed) {
        stk_loader *l = self->loader;
        self->closed = 1;
        Py_BEGIN_ALLOW_THREADS
        stk_loader_set_epoch(l, 0);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *loader_info(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    return Py_BuildValue("{s:n,s:i,s:i,s:K,s:K,s:n,s:I,s:n}", "num_shards",
                         (Py_ssize_t)stk_loader_num_shards(self->loader), "rank",
                         stk_loader_rank(self->loader), "world_size",
                         stk_loader_world_size(self->loader), "samples_per_rank",
                         (unsigned long long)self->opts.samples_per_rank, "epoch_samples",
                         (unsigned long long)stk_loader_epoch_samples(self->loader), "batch_size",
                         (Py_ssize_t)self->opts.batch_size, "image_size", self->opts.image_size,
                         "drop_last", (Py_ssize_t)self->opts.drop_last);
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
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef loader_methods[] = {
    {"next", (PyCFunction)loader_next, METH_NOARGS,
     "next() -> Batch or None at the end of the epoch (releases the GIL while waiting)"},
    {"seek", (PyCFunction)loader_seek, METH_VARARGS,
     "seek(epoch, batch): the next next() delivers that batch of that epoch"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "counters as a dict"},
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
