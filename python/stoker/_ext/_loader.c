/* SPDX-License-Identifier: MIT */
/*
 * _loader.c - _stoker.Loader, stk_loader for Python: next() releases
 * the GIL while it waits and returns a Batch, or None at the end of the
 * epoch; batch_allocator= supplies the batch memory from Python.
 */
#include "_stoker.h"

#include <string.h>
#include <unistd.h>

/* next() waits in slices this long and checks for signals between them, so
 * that Ctrl-C raises KeyboardInterrupt within a slice (the C loader's
 * threads keep running: the epoch goes on). */
#define SIGNAL_SLICE_MS 100

typedef struct {
    PyObject_HEAD
    stk_loader *loader;
    /* The C loader serves one thread at a time, and next() waits in it with
     * the GIL released: every call into it (but stk_loader_stats and
     * stk_loader_interrupt, which may come from any thread) holds `lock`,
     * taken without the GIL when another thread has it (enter()). */
    PyThread_type_lock lock;
    int closed; /* close() began: set before it interrupts a waiting next() */
    /* The process that made the loader: only its threads exist there. After
     * fork() the child has the memory but none of the threads, and mutexes
     * they held stay locked, so every method refuses there and dealloc
     * frees nothing (foreign()). */
    pid_t pid;
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
        stk_py_chain_cause(Py_NewRef(cause));
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
        keep_alloc_failure(self, stk_py_error,
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
    self->pid = getpid();
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

/* Whether the loader was made in another process (this is a child that
 * fork() made since): its threads do not exist here. */
static int foreign(const LoaderObject *self)
{
    return self->loader != NULL && self->pid != getpid();
}

static int check_process(const LoaderObject *self)
{
    if (!foreign(self))
        return 0;
    PyErr_Format(PyExc_RuntimeError,
                 "this stoker Loader was created in process %ld: make a new Loader after fork "
                 "(its threads do not exist in process %ld)",
                 (long)self->pid, (long)getpid());
    return -1;
}

static PyObject *loader_take_log(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_process(self) < 0)
        return NULL;
    if (self->log == NULL)
        return PyList_New(0);
    return stk_py_log_take(self->log);
}

static int check_open(LoaderObject *self)
{
    if (check_process(self) < 0)
        return -1;
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
    struct stk_batch *b;
    int rc;
    char msg[1024];
    for (;;) {
        if (enter(self) < 0)
            return NULL;
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_next_timed(self->loader, &b, SIGNAL_SLICE_MS);
        if (rc < 0) /* valid until the next call, maybe another thread's */
            snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
        /* Only close() interrupts the loader; any other STK_EINTR is the
         * end of a slice. A signal handler that raises (Ctrl-C) ends the
         * wait; the batch waited for is the next call's. */
        if (rc != STK_EINTR || self->closed)
            break;
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
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
    return stk_py_batch_new(b, (PyObject *)self, self->opts.on_error == STK_ON_ERROR_SKIP,
                            &self->skipped_in_python);
}

/* What seek and start ask of the C loader. */
struct position {
    unsigned long long epoch, batch, count;
    int range; /* seek_range: count given (0: to the epoch's end) */
};

static int do_seek(stk_loader *l, const struct position *at)
{
    return at->range ? stk_loader_seek_range(l, at->epoch, at->batch, at->count)
                     : stk_loader_seek(l, at->epoch, at->batch);
}

static int do_start(stk_loader *l, const struct position *at)
{
    (void)at;
    return stk_loader_start(l);
}

/* fn(loader, at) with the loader's lock held (enter() took it) and the GIL
 * released; its error raised with the loader's message. */
static PyObject *locked_call(LoaderObject *self,
                             int (*fn)(stk_loader *, const struct position *),
                             const struct position *at)
{
    int rc;
    char msg[1024];
    Py_BEGIN_ALLOW_THREADS
    rc = fn(self->loader, at);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    if (rc < 0)
        return stk_py_raise(rc, msg);
    Py_RETURN_NONE;
}

/* seek(epoch, batch), or with count (seek_range) only that many batches,
 * continuing the epoch's threads when they are at batch. */
static PyObject *loader_seek(LoaderObject *self, PyObject *args)
{
    PyObject *epoch_obj, *batch_obj, *count_obj = NULL;
    struct position at = {0};
    if (!PyArg_ParseTuple(args, "OO|O", &epoch_obj, &batch_obj, &count_obj) ||
        stk_py_integer(epoch_obj, "epoch", 0, ULLONG_MAX, &at.epoch) < 0 ||
        stk_py_integer(batch_obj, "batch", 0, ULLONG_MAX, &at.batch) < 0 ||
        (count_obj != NULL && stk_py_integer(count_obj, "count", 0, ULLONG_MAX, &at.count) < 0) ||
        enter(self) < 0)
        return NULL;
    at.range = count_obj != NULL;
    Py_CLEAR(self->alloc_failure); /* the next epoch tries the allocator again */
    return locked_call(self, do_seek, &at);
}

/* start(): the epoch's threads begin without a batch asked for. */
static PyObject *loader_start(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (enter(self) < 0)
        return NULL;
    return locked_call(self, do_start, NULL);
}

/* A sequence of n_per_item-tuples (or of ints, n_per_item 1) of
 * non-negative integers as one array (PyMem_Free it); None: NULL. */
static int uint64_items(PyObject *obj, const char *what, size_t n_per_item, uint64_t **out,
                        size_t *n_out)
{
    *out = NULL;
    *n_out = 0;
    if (obj == Py_None)
        return 0;
    PyObject *seq = PySequence_Fast(obj, what);
    if (seq == NULL)
        return -1;
    const size_t n = (size_t)PySequence_Fast_GET_SIZE(seq);
    uint64_t *a = PyMem_Calloc(n * n_per_item + 1, sizeof *a);
    int rc = a == NULL ? (PyErr_NoMemory(), -1) : 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, (Py_ssize_t)i);
        PyObject *parts = n_per_item == 1 ? NULL : PySequence_Fast(item, what);
        if (n_per_item > 1 &&
            (parts == NULL || (size_t)PySequence_Fast_GET_SIZE(parts) != n_per_item)) {
            if (parts != NULL)
                PyErr_Format(PyExc_ValueError, "%s: each item has %zu numbers", what, n_per_item);
            rc = -1;
        }
        for (size_t k = 0; rc == 0 && k < n_per_item; k++) {
            unsigned long long v;
            PyObject *x = parts != NULL ? PySequence_Fast_GET_ITEM(parts, (Py_ssize_t)k) : item;
            rc = stk_py_integer(x, what, 0, ULLONG_MAX, &v);
            a[i * n_per_item + k] = v;
        }
        Py_XDECREF(parts);
    }
    Py_DECREF(seq);
    if (rc < 0) {
        PyMem_Free(a);
        return -1;
    }
    *out = a;
    *n_out = n;
    return 0;
}

/* remainder(epoch, delivered, ranges, ranks_per_node=0): the [begin, end)
 * ranges of the epoch's sequence no old rank delivered
 * (stk_loader_remainder). */
static PyObject *loader_remainder(LoaderObject *self, PyObject *args)
{
    PyObject *epoch_obj, *delivered_obj, *ranges_obj, *result = NULL;
    unsigned long long epoch;
    uint64_t *delivered = NULL, *ranges = NULL, *out = NULL;
    size_t n_old, n_ranges, n = 0;
    int ranks_per_node = 0;
    if (!PyArg_ParseTuple(args, "OOO|i", &epoch_obj, &delivered_obj, &ranges_obj,
                          &ranks_per_node) ||
        stk_py_integer(epoch_obj, "epoch", 0, ULLONG_MAX, &epoch) < 0 ||
        uint64_items(delivered_obj, "delivered", 1, &delivered, &n_old) < 0 ||
        uint64_items(ranges_obj, "ranges", 2, &ranges, &n_ranges) < 0)
        goto out;
    if (n_old == 0 || n_old > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "remainder: give every old rank's delivered count");
        goto out;
    }
    const uint64_t *given = ranges_obj == Py_None ? NULL : ranges;
    char msg[1024];
    int rc = 0;
    /* Room for a rest read front to back; under a window it says how much
     * more it needs (STK_ELIMIT), once. */
    size_t capacity = n_ranges + 2 * n_old + 1;
    for (int attempt = 0; attempt < 2; attempt++) {
        PyMem_Free(out);
        if ((out = PyMem_Calloc(2 * capacity, sizeof *out)) == NULL) {
            PyErr_NoMemory();
            goto out;
        }
        if (enter(self) < 0)
            goto out;
        /* Under a window it replays every old rank's epoch: about a second
         * for an ImageNet-sized one at 8 ranks (docs/ddp.md). */
        Py_BEGIN_ALLOW_THREADS
        rc = stk_loader_remainder(self->loader, epoch, (int)n_old, ranks_per_node, delivered,
                                  given, n_ranges, out, capacity, &n);
        if (rc < 0)
            snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
        PyThread_release_lock(self->lock);
        Py_END_ALLOW_THREADS
        if (rc != STK_ELIMIT)
            break;
        capacity = n;
    }
    if (rc < 0) {
        stk_py_raise(rc, msg);
        goto out;
    }
    if ((result = PyList_New((Py_ssize_t)n)) == NULL)
        goto out;
    for (size_t i = 0; i < n; i++) {
        PyObject *pair = Py_BuildValue("(KK)", (unsigned long long)out[2 * i],
                                       (unsigned long long)out[2 * i + 1]);
        if (pair == NULL) {
            Py_CLEAR(result);
            goto out;
        }
        PyList_SET_ITEM(result, (Py_ssize_t)i, pair);
    }
out:
    PyMem_Free(delivered);
    PyMem_Free(ranges);
    PyMem_Free(out);
    return result;
}

/* set_remainder(epoch, ranges, nodes=1): epoch delivers only those ranges
 * of its sequence (None: all of it; nodes: of that many old nodes'
 * sequences), stk_loader_set_remainder. */
static PyObject *loader_set_remainder(LoaderObject *self, PyObject *args)
{
    PyObject *epoch_obj, *ranges_obj;
    unsigned long long epoch;
    uint64_t *ranges = NULL;
    size_t n = 0;
    int nodes = 1;
    if (!PyArg_ParseTuple(args, "OO|i", &epoch_obj, &ranges_obj, &nodes) ||
        stk_py_integer(epoch_obj, "epoch", 0, ULLONG_MAX, &epoch) < 0 ||
        uint64_items(ranges_obj, "ranges", 2, &ranges, &n) < 0)
        return NULL;
    if (enter(self) < 0) {
        PyMem_Free(ranges);
        return NULL;
    }
    char msg[1024];
    const uint64_t *given = ranges_obj == Py_None ? NULL : ranges;
    int rc;
    Py_BEGIN_ALLOW_THREADS /* it stops the epoch in flight: joins its threads */
    rc = stk_loader_set_remainder(self->loader, epoch, nodes, given, n);
    if (rc < 0)
        snprintf(msg, sizeof msg, "%s", stk_loader_errmsg(self->loader));
    PyThread_release_lock(self->lock);
    Py_END_ALLOW_THREADS
    PyMem_Free(ranges);
    if (rc < 0)
        return stk_py_raise(rc, msg);
    Py_RETURN_NONE;
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
    return stk_py_stats_dict(&s);
}

static PyObject *loader_report(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_open(self) < 0)
        return NULL;
    struct stk_stats s;
    loader_counts(self, &s);
    return stk_py_report_text(&s);
}

static PyObject *loader_close(LoaderObject *self, PyObject *unused)
{
    (void)unused;
    if (check_process(self) < 0)
        return NULL;
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
    PyObject *info = Py_BuildValue("{s:n,s:i,s:i,s:K,s:K,s:n,s:I,s:I,s:I,s:n,s:i,s:O}", "num_shards",
                         (Py_ssize_t)stk_loader_num_shards(self->loader), "rank",
                         stk_loader_rank(self->loader), "world_size",
                         stk_loader_world_size(self->loader), "samples_per_rank",
                         (unsigned long long)self->opts.samples_per_rank, "epoch_samples",
                         (unsigned long long)stk_loader_epoch_samples(self->loader), "batch_size",
                         (Py_ssize_t)self->opts.batch_size, "image_size", self->opts.image_size,
                         "image_height", o->image_height ? o->image_height : o->image_size,
                         "image_width", o->image_width ? o->image_width : o->image_size,
                         "drop_last", (Py_ssize_t)self->opts.drop_last, "ranks_per_node",
                         stk_loader_ranks_per_node(self->loader), "global_order",
                         stk_loader_global_order(self->loader) ? Py_True : Py_False);
    PyThread_release_lock(self->lock);
    return info;
}

static void loader_dealloc(LoaderObject *self)
{
    if (foreign(self)) {
        /* A child of fork(): the loader's threads, and whatever mutex they
         * held at the fork, are the parent's. Destroying it here would join
         * threads that do not exist and may wait on a mutex no one will
         * unlock, so the loader, its lock and its log are left as they are:
         * the memory is a copy the child never uses again, and the kernel
         * takes it back when the child exits. The Python objects are the
         * child's own and go as usual. */
        self->loader = NULL;
        self->lock = NULL;
        self->log = NULL;
    }
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
     "seek_range(epoch, first, count): deliver batches [first, first + count) of epoch "
     "(count 0: to its end), continuing the epoch's threads without re-reading when they "
     "are at first"},
    {"start", (PyCFunction)loader_start, METH_NOARGS,
     "start(): start reading the batches the next next() delivers, without waiting"},
    {"remainder", (PyCFunction)loader_remainder, METH_VARARGS,
     "remainder(epoch, delivered, ranges, ranks_per_node=0): the [begin, end) ranges of an "
     "epoch's sample sequence that no old rank delivered, delivered[r] samples by old rank r "
     "(ranges: what they split, None: all; ranks_per_node: the old run's node affinity, its "
     "nodes' sequences one after the other)"},
    {"set_remainder", (PyCFunction)loader_set_remainder, METH_VARARGS,
     "set_remainder(epoch, ranges, nodes=1): epoch delivers only those ranges of its sequence "
     "(of that many old nodes' sequences), split over the ranks (None: the whole epoch)"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "counters as a dict"},
    {"take_log", (PyCFunction)loader_take_log, METH_NOARGS,
     "take_log() -> [(level, message)]: what the loader's threads logged since the last call"},
    {"report", (PyCFunction)loader_report, METH_NOARGS, "where the time went, in words"},
    {"info", (PyCFunction)loader_info, METH_NOARGS, "shards, rank, world size and sizes"},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop threads and free the loader"},
    {NULL, NULL, 0, NULL},
};

PyTypeObject stk_py_loader_type = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "stoker._ext._stoker.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_methods = loader_methods,
    .tp_init = (initproc)loader_init,
    .tp_new = PyType_GenericNew,
    .tp_doc = "Loader(urls, **options): the C loader; see stoker.h for the options.",
};
