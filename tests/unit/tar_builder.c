/* SPDX-License-Identifier: MIT */
/*
 * tar_builder.c - minimal ustar writer for unit-test fixtures.
 */
#include "tar_builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void reserve(struct tar_builder *tb, size_t more)
{
    if (tb->size + more <= tb->capacity)
        return;
    size_t cap = tb->capacity ? tb->capacity : 4096;
    while (cap < tb->size + more)
        cap *= 2;
    tb->data = realloc(tb->data, cap);
    if (tb->data == NULL)
        abort();
    tb->capacity = cap;
}

void tb_entry(struct tar_builder *tb, const char *name, char type, const void *data, size_t size)
{
    unsigned char h[512];
    memset(h, 0, sizeof h);
    snprintf((char *)h, 100, "%s", name);
    snprintf((char *)h + 100, 8, "%07o", 0644);
    snprintf((char *)h + 108, 8, "%07o", 0);
    snprintf((char *)h + 116, 8, "%07o", 0);
    snprintf((char *)h + 124, 12, "%011zo", type == '0' ? size : (size_t)0);
    snprintf((char *)h + 136, 12, "%011o", 0);
    h[156] = (unsigned char)type;
    if (type == '2')
        snprintf((char *)h + 157, 100, "%.*s", (int)size, (const char *)data);
    memcpy(h + 257, "ustar", 6);
    memcpy(h + 263, "00", 2);
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (size_t i = 0; i < 512; i++)
        sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    reserve(tb, 512);
    memcpy(tb->data + tb->size, h, 512);
    tb->size += 512;
    if (type != '0')
        return;
    size_t padded = (size + 511) / 512 * 512;
    reserve(tb, padded);
    memset(tb->data + tb->size, 0, padded);
    if (size)
        memcpy(tb->data + tb->size, data, size);
    tb->size += padded;
}

void tb_file(struct tar_builder *tb, const char *name, const void *data, size_t size)
{
    tb_entry(tb, name, '0', data, size);
}

void tb_finish(struct tar_builder *tb)
{
    reserve(tb, 1024);
    memset(tb->data + tb->size, 0, 1024);
    tb->size += 1024;
}

void tb_free(struct tar_builder *tb)
{
    free(tb->data);
    tb->data = NULL;
    tb->size = tb->capacity = 0;
}

void tb_write_shard(const char *path, const char *prefix, int first, int n)
{
    struct tar_builder tb = {0};
    char name[128], text[64];
    for (int i = first; i < first + n; i++) {
        snprintf(name, sizeof name, "%s%06d.txt", prefix, i);
        int len = snprintf(text, sizeof text, "%s%06d", prefix, i);
        tb_file(&tb, name, text, (size_t)len);
        snprintf(name, sizeof name, "%s%06d.cls", prefix, i);
        len = snprintf(text, sizeof text, "%d", i);
        tb_file(&tb, name, text, (size_t)len);
    }
    tb_finish(&tb);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(tb.data, 1, tb.size, f) != tb.size || fclose(f) != 0)
        abort();
    tb_free(&tb);
}

size_t tb_read_file(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        abort();
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    return n;
}
