/* SPDX-License-Identifier: MIT */
/*
 * _options.c - keyword options to struct stk_options, through the
 * library's option table (one table for C, CLI and Python), a call's URLs
 * as C strings (both what any entry point takes: the Loader, verify,
 * index), and options(): that table as Python values.
 */
#include "_stoker.h"

#include <limits.h>
#include <string.h>

int stk_py_integer(PyObject *value, const char *name, long long min, unsigned long long max,
                   unsigned long long *out)
{
    if (!PyIndex_Check(value) || PyBool_Check(value)) { /* True is no count */
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
        /* True is an int to Python, but batch_size=True is a mistake, not 1. */
        if (PyIndex_Check(value) && !(info->type == STK_OPTION_INTEGER && PyBool_Check(value))) {
            PyObject *n = PyNumber_Index(value);
            text = n != NULL ? PyObject_Str(n) : NULL;
            Py_XDECREF(n);
            return text;
        }
        /* "4G" as the CLI takes it: stk_options_set() parses the units, so
         * the rule has one home. */
        if ((info->flags & STK_OPTION_BYTES) && PyUnicode_Check(value))
            return Py_NewRef(value);
        wanted = (info->flags & STK_OPTION_BYTES) ? "an int or a str such as \"4G\"" : "an int";
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

int stk_py_call_init(struct stk_py_call *c, PyObject *urls, PyObject *kwargs)
{
    *c = (struct stk_py_call){0};
    stk_options_init(&c->opts);
    if ((c->keep = PyList_New(0)) == NULL)
        return -1;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (kwargs != NULL && PyDict_Next(kwargs, &pos, &key, &value)) {
        const char *name = PyUnicode_AsUTF8(key);
        if (name == NULL || stk_py_set_option(&c->opts, c->keep, name, value) < 0)
            return -1;
    }
    c->urls = stk_py_urls(urls, &c->n, &c->seq);
    return c->urls == NULL ? -1 : 0;
}

void stk_py_call_free(struct stk_py_call *c)
{
    PyMem_Free(c->urls);
    Py_XDECREF(c->seq);
    Py_XDECREF(c->keep);
}

/* The commands of the stoker program that take option o, by its bits, as
 * a tuple of names ("bench", "ls", ...; empty without a flag). */
static PyObject *cli_commands(const struct stk_option_info *o)
{
    static const struct {
        unsigned bit;
        const char *name;
    } commands[] = {
        {STK_OPTION_CLI_BENCH, "bench"},   {STK_OPTION_CLI_LS, "ls"},
        {STK_OPTION_CLI_CAT, "cat"},       {STK_OPTION_CLI_INDEX, "index"},
        {STK_OPTION_CLI_VERIFY, "verify"}, {STK_OPTION_CLI_RESHARD, "reshard"},
    };
    PyObject *names = PyList_New(0);
    for (size_t i = 0; names != NULL && i < sizeof commands / sizeof commands[0]; i++) {
        if (o->cli_name == NULL || !(o->flags & commands[i].bit))
            continue;
        PyObject *name = PyUnicode_FromString(commands[i].name);
        if (name == NULL || PyList_Append(names, name) < 0)
            Py_CLEAR(names);
        Py_XDECREF(name);
    }
    PyObject *tuple = names != NULL ? PyList_AsTuple(names) : NULL;
    Py_XDECREF(names);
    return tuple;
}

/* options() -> the option table as a list of dicts (name, type, default,
 * min, max, bytes, choices, cli, cli_commands, speed_only, accepts, doc,
 * needs): what stoker.Loader's help is made of. */
PyObject *stk_py_options(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    static const char *const types[] = {"bool", "int", "float", "float3", "choice", "str"};
    PyObject *list = PyList_New(0);
    const struct stk_option_info *o;
    for (size_t i = 0; list != NULL && (o = stk_option_at(i)) != NULL; i++) {
        char accepted[256];
        stk_option_describe(o, accepted, sizeof accepted);
        PyObject *commands = cli_commands(o);
        PyObject *d = commands == NULL ? NULL : Py_BuildValue(
            "{s:s,s:s,s:z,s:L,s:K,s:O,s:z,s:z,s:N,s:O,s:s,s:s,s:z}", "name", o->name, "type",
            types[o->type], "default", o->default_value, "min", (long long)o->min, "max",
            (unsigned long long)o->max, "bytes", (o->flags & STK_OPTION_BYTES) ? Py_True : Py_False,
            "choices", o->type == STK_OPTION_CHOICE ? o->metavar : NULL, "cli", o->cli_name,
            "cli_commands", commands, "speed_only",
            (o->flags & STK_OPTION_SPEED_ONLY) ? Py_True : Py_False, "accepts", accepted, "doc",
            o->doc, "needs", stk_option_needs(o));
        if (d == NULL || PyList_Append(list, d) < 0)
            Py_CLEAR(list);
        Py_XDECREF(d);
    }
    return list;
}
