/* SPDX-License-Identifier: MIT */
/*
 * _log.c - the loader's log messages, from its threads to Python's logging.
 *
 * stk_options.log is called on loader threads that do not hold the GIL.
 * Taking the GIL there could deadlock against a Python thread that waits
 * for those threads, so messages are only queued here (a bounded ring under
 * a plain lock, oldest kept, the rest counted) and the Python side takes
 * them, with the GIL, after each batch: `stoker` logger records in order.
 */
#include "_stoker.h"

#include <string.h>

#include "stoker.h"

#define LOG_SLOTS 64
#define LOG_MESSAGE_MAX 1024

struct stk_py_log {
    PyThread_type_lock lock;
    size_t count;
    unsigned long long dropped;
    struct {
        enum stk_log_level level;
        char text[LOG_MESSAGE_MAX];
    } slots[LOG_SLOTS];
};

struct stk_py_log *stk_py_log_new(void)
{
    struct stk_py_log *log = PyMem_RawCalloc(1, sizeof *log);
    if (log == NULL)
        return NULL;
    log->lock = PyThread_allocate_lock();
    if (log->lock == NULL) {
        PyMem_RawFree(log);
        return NULL;
    }
    return log;
}

void stk_py_log_free(struct stk_py_log *log)
{
    if (log == NULL)
        return;
    PyThread_free_lock(log->lock);
    PyMem_RawFree(log);
}

void stk_py_log_push(void *data, enum stk_log_level level, const char *message)
{
    struct stk_py_log *log = data;
    PyThread_acquire_lock(log->lock, WAIT_LOCK);
    if (log->count < LOG_SLOTS) {
        log->slots[log->count].level = level;
        snprintf(log->slots[log->count].text, LOG_MESSAGE_MAX, "%s", message);
        log->count++;
    } else {
        log->dropped++;
    }
    PyThread_release_lock(log->lock);
}

PyObject *stk_py_log_take(struct stk_py_log *log)
{
    static const char *const names[] = {"error", "warning", "info"};
    PyObject *list = PyList_New(0);
    if (list == NULL)
        return NULL;
    Py_BEGIN_ALLOW_THREADS /* loader threads may hold the lock for a copy */
    PyThread_acquire_lock(log->lock, WAIT_LOCK);
    Py_END_ALLOW_THREADS
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < log->count; i++) {
        unsigned level = (unsigned)log->slots[i].level;
        const char *text = log->slots[i].text;
        /* Keys need not be UTF-8: never fail on one. */
        PyObject *str = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "backslashreplace");
        PyObject *item = str != NULL ? Py_BuildValue("(sN)", names[level < 3 ? level : 2], str)
                                     : NULL;
        rc = item != NULL ? PyList_Append(list, item) : -1;
        Py_XDECREF(item);
    }
    if (rc == 0 && log->dropped > 0) {
        PyObject *item = PyUnicode_FromFormat("%llu more messages were dropped (the queue holds "
                                              "%d between batches)", log->dropped, LOG_SLOTS);
        PyObject *pair = item != NULL ? Py_BuildValue("(sN)", "warning", item) : NULL;
        rc = pair != NULL ? PyList_Append(list, pair) : -1;
        Py_XDECREF(pair);
    }
    log->count = 0;
    log->dropped = 0;
    PyThread_release_lock(log->lock);
    if (rc < 0)
        Py_CLEAR(list);
    return list;
}
