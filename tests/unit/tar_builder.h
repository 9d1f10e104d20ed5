/* SPDX-License-Identifier: MIT */
/*
 * tar_builder.h - build small ustar archives in memory for unit tests.
 *
 * Fixtures are made by the tests themselves (no opaque blobs); the
 * integration tests cover archives written by GNU tar and Python.
 */
#ifndef STK_TEST_TAR_BUILDER_H
#define STK_TEST_TAR_BUILDER_H

#include <stddef.h>
#include <stdint.h>

struct tar_builder {
    unsigned char *data;
    size_t size;
    size_t capacity;
};

/* Append a regular file member (name < 100 bytes). */
void tb_file(struct tar_builder *tb, const char *name, const void *data, size_t size);
/* Append a member of the given ustar type flag ('5' directory, '2' symlink). */
void tb_entry(struct tar_builder *tb, const char *name, char type, const void *data, size_t size);
/* Append the two zero blocks that end an archive. */
void tb_finish(struct tar_builder *tb);
void tb_free(struct tar_builder *tb);

/* Write a shard of n samples "PREFIX%06d" with members .txt (the key text)
 * and .cls (the sample number), to path. */
void tb_write_shard(const char *path, const char *prefix, int first, int n);

/* Read the file at path (at most cap - 1 bytes) into buf, NUL-terminated;
 * returns its length. Aborts when it cannot be opened. */
size_t tb_read_file(const char *path, char *buf, size_t cap);

#endif
