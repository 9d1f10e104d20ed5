/* SPDX-License-Identifier: MIT */
/*
 * _stoker.c - the CPython extension's module stoker._stoker: include/stoker.h
 * for Python (its errors as exception classes, its options as keywords, its
 * batches as zero-copy buffers, the GIL released wherever it waits). Its
 * parts, one file each: _errors.c (exceptions),
 * _options.c (keyword options), _loader.c (Loader), _batch.c (Batch and its
 * zero-copy buffer views), _stats.c (counters), _log.c (the loader threads'
 * log), _verify.c (verify), _index.c (index_build), _writer.c (ShardWriter) and
 * _rules.c (member kinds, ranks); _stoker.h declares
 * what they share.
 */
#include "_stoker.h"

static PyMethodDef module_methods[] = {
    {"options", (PyCFunction)stk_py_options, METH_NOARGS,
     "options() -> [dict]: every loader option with its type, default, range and meaning"},
    {"stats_fields", (PyCFunction)stk_py_stats_fields, METH_NOARGS,
     "stats_fields() -> [(name, doc)]: the counters of Loader.stats()"},
    {"stats_kinds", (PyCFunction)stk_py_stats_kinds, METH_NOARGS,
     "stats_kinds() -> {name: 'count' | 'ns' | 'gauge'}: what each counter of Loader.stats() is"},
    {"report", (PyCFunction)stk_py_report, METH_O,
     "report(stats) -> str: the input-bound report of a dict of counters"},
    {"rates", stk_py_rates, METH_VARARGS,
     "rates(now, before=None) -> dict: rates, busy shares and shuffle quality between two "
     "stats() dicts.\n\nsamples/s, the wait share, each stage's busy share and k_eff between two "
     "snapshots\n(stk_stats_rates in C), so a stall shows as a dip rather than a lower average."},
    {"verify", (PyCFunction)(void (*)(void))stk_py_verify, METH_VARARGS | METH_KEYWORDS,
     "verify(urls, **options) -> dict: read every sample once, collect every problem"},
    {"index_build", (PyCFunction)(void (*)(void))stk_py_index_build, METH_VARARGS | METH_KEYWORDS,
     "index_build(path, urls, overwrite=False, **options) -> int: write the dataset index of "
     "the shards to path; the samples counted"},
    {"member_kind", (PyCFunction)stk_py_member_kind, METH_O,
     "member_kind(ext) -> str: how a member parses by its extension: bytes, int, text, json "
     "or image"},
    {"parse_size", (PyCFunction)stk_py_parse_size, METH_O,
     "parse_size(text) -> int: bytes of a size such as \"4G\", read as the options read it"},
    {"resolve_rank", stk_py_resolve_rank, METH_VARARGS,
     "resolve_rank(rank, world_size) -> (rank, world_size): each -1 from the launcher's "
     "environment (RANK/WORLD_SIZE, SLURM_*, OMPI_*), as the C loader reads it"},
    {"node_split", stk_py_node_split, METH_VARARGS,
     "node_split(counts, seed, nodes, shuffle=True) -> [node]: the node of each shard under "
     "node_affinity with that many nodes (counts: samples per shard, or the number of shards "
     "to deal by number without a dataset index), as a loader deals them"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "stoker._ext._stoker", .m_methods = module_methods,
    .m_doc = "C core of stoker: WebDataset tar shards to batches.", .m_size = -1,
};

PyMODINIT_FUNC PyInit__stoker(void); /* the only exported symbol */
PyMODINIT_FUNC PyInit__stoker(void)
{
    if (PyType_Ready(&stk_py_loader_type) < 0 || PyType_Ready(&stk_py_batch_type) < 0 ||
        PyType_Ready(&stk_py_view_type) < 0 || PyType_Ready(&stk_py_writer_type) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (stk_py_add_error_classes(m) < 0 ||
        PyModule_AddObjectRef(m, "Loader", (PyObject *)&stk_py_loader_type) < 0 ||
        PyModule_AddObjectRef(m, "ShardWriter", (PyObject *)&stk_py_writer_type) < 0 ||
        PyModule_AddStringConstant(m, "version", stk_version()) < 0 ||
        PyModule_AddStringConstant(m, "build_id", stk_build_id()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
