/*
 * _stoker.h - what the files of the CPython extension share.
 */
#ifndef STK_PY_STOKER_H
#define STK_PY_STOKER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Raise the exception of STK_E* code (one table in _stoker.c) with the
 * detailed message; returns NULL. */
PyObject *stk_py_raise(int code, const char *message);

/* stoker._stoker.ShardWriter (_writer.c). */
extern PyTypeObject stk_py_writer_type;

#endif
