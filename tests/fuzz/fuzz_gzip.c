/* SPDX-License-Identifier: MIT */
/*
 * fuzz_gzip.c - libFuzzer target: the gzip source layer (source_gzip.c).
 *
 * Input: byte 0 picks a mode.
 *
 * Mode "raw" (bit 0 = 0): the rest is fed to stk__source_gzip_open over a
 * memory source as compressed bytes.
 *   bits 1-2  source chunk (0 = all, 1, 3, 4096 bytes a read)
 *   bits 3-4  read size asked of the layer (1, 7, 512, 65536)
 *   bits 5-7  bytes passed as the already-read head (0..7)
 * Invariants: an error has err.code == rc, a message naming the URL, rc
 * one of STK_EFORMAT, STK_ETRUNC, STK_ENOMEM; reading stops; and the
 * layer agrees with a reference written the plain way (zlib inflate of
 * each member over the whole input, members back to back, then only zeros):
 * it reads to the end without error exactly when the reference succeeds,
 * and then with the same bytes.
 *
 * Mode "wrap" (bit 0 = 1): the rest (after 5 more bytes) is a tar shard
 * that the harness compresses itself:
 *   byte 0 bits 1-2  source chunk, as above
 *          bits 3-4  tar reader block size (1, 7, 512, 65536)
 *          bit 5     zeros after the last member (padding)
 *          bit 6     flip one byte of the compressed stream
 *          bit 7     two gzip members, split at bytes 1-2 (big endian, mod size)
 *   bytes 3-4  where the flip goes (mod the stream's size), byte 5 its mask
 * The shard is read plain and compressed by the shard reader (fail policy);
 * a shard that is compressed itself is left out (one layer per shard).
 * Invariants: unflipped, both give the same samples and end the same way;
 * flipped, a clean read (no error) gives the plain shard's samples: a
 * changed byte never reaches a sample unnoticed (CRC-32 and ISIZE).
 */
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "fuzz.h"
#include "tar/shard_reader.h"
#include "io/source.h"
#include "io/source_filter.h"
#include "io/source_gzip.h"
#include "stoker.h"

#define FUZZ_URL "mem://fuzz/shard.tar.gz"
#define OUTPUT_CAP ((size_t)16 << 20) /* stop collecting past this (64 KiB inflates to 64 MB) */

static const size_t chunks[4] = {0, 1, 3, 4096};
static const size_t sizes[4] = {1, 7, 512, 65536};

struct bytes {
    uint8_t *data;
    size_t len, cap;
};

static void append(struct bytes *b, const void *p, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n)
            cap *= 2;
        b->data = realloc(b->data, cap);
        FUZZ_CHECK(b->data != NULL);
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

/* The reference: 1 and out when data is gzip members back to back followed
 * by nothing or zeros only; 0 otherwise (or when the output passes the cap). */
static int reference(const uint8_t *in, size_t n, struct bytes *out) {
    size_t pos = 0;
    unsigned members = 0;
    while (pos < n) {
        if (members > 0 && in[pos] != 0x1f) {
            for (size_t i = pos; i < n; i++)
                if (in[i] != 0)
                    return 0;
            return 1;
        }
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        FUZZ_CHECK(inflateInit2(&zs, 16 + MAX_WBITS) == Z_OK);
        zs.next_in = (Bytef *)(uintptr_t)(in + pos);
        zs.avail_in = (uInt)(n - pos);
        int z;
        do {
            uint8_t buf[65536];
            zs.next_out = buf;
            zs.avail_out = sizeof buf;
            z = inflate(&zs, Z_NO_FLUSH);
            append(out, buf, sizeof buf - zs.avail_out);
        } while (z == Z_OK && out->len <= OUTPUT_CAP);
        pos = n - zs.avail_in;
        inflateEnd(&zs);
        if (z != Z_STREAM_END)
            return 0;
        members++;
    }
    return members > 0 && out->len <= OUTPUT_CAP;
}

static void raw_mode(unsigned cfg, const uint8_t *data, size_t size) {
    size_t chunk = chunks[(cfg >> 1) & 3], want = sizes[(cfg >> 3) & 3];
    size_t head = (cfg >> 5) & 7;
    if (head > size)
        head = size;
    struct stk__source *mem = NULL, *gz = NULL;
    struct stk__err err;
    stk__err_clear(&err);
    /* As the tar reader does: the head is read from the source first. */
    FUZZ_CHECK(stk__source_open_memory(FUZZ_URL, data, size, chunk, &mem) == 0);
    uint8_t first[8];
    size_t got_head = 0;
    while (got_head < head) {
        ssize_t n = stk__source_read(mem, first + got_head, head - got_head);
        FUZZ_CHECK(n > 0);
        got_head += (size_t)n;
    }
    int rc = stk__source_gzip_open(mem, first, head, &gz, &err);
    if (rc < 0) { /* only allocation can fail here */
        FUZZ_CHECK(rc == STK_ENOMEM && gz == NULL);
        return;
    }
    struct bytes got = {0}, ref = {0};
    uint8_t *buf = malloc(want);
    FUZZ_CHECK(buf != NULL);
    ssize_t n;
    while ((n = stk__source_read(gz, buf, want)) > 0 && got.len <= OUTPUT_CAP) {
        FUZZ_CHECK((size_t)n <= want);
        append(&got, buf, (size_t)n);
    }
    if (n < 0) {
        FUZZ_CHECK(gz->err.code == n);
        FUZZ_CHECK(n == STK_EFORMAT || n == STK_ETRUNC || n == STK_ENOMEM);
        FUZZ_CHECK(strstr(gz->err.msg, FUZZ_URL) != NULL);
        /* An error is sticky. */
        FUZZ_CHECK(stk__source_read(gz, buf, want) == n);
    }
    int ok = reference(data, size, &ref);
    if (n == 0)
        FUZZ_CHECK(ok && got.len == ref.len &&
                   (got.len == 0 || memcmp(got.data, ref.data, got.len) == 0));
    if (ok && got.len <= OUTPUT_CAP)
        FUZZ_CHECK(n == 0);
    stk__source_close(gz);
    free(buf);
    free(got.data);
    free(ref.data);
}

/* gzip members of data[0..split) and data[split..size). */
static void compress_members(const uint8_t *data, size_t size, size_t split, struct bytes *out) {
    const uint8_t *part[2] = {data, data + split};
    size_t len[2] = {split, size - split};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && split == size)
            break;
        z_stream zs;
        memset(&zs, 0, sizeof zs);
        FUZZ_CHECK(deflateInit2(&zs, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) ==
                   Z_OK);
        uLong bound = deflateBound(&zs, (uLong)len[i]) + 32;
        uint8_t *buf = malloc(bound);
        FUZZ_CHECK(buf != NULL);
        zs.next_in = (Bytef *)(uintptr_t)part[i];
        zs.avail_in = (uInt)len[i];
        zs.next_out = buf;
        zs.avail_out = (uInt)bound;
        FUZZ_CHECK(deflate(&zs, Z_FINISH) == Z_STREAM_END);
        append(out, buf, bound - zs.avail_out);
        deflateEnd(&zs);
        free(buf);
    }
}

struct read_result {
    int rc; /* 0: read to the end; <0 the error that stopped it */
    uint64_t samples, digest;
};

static struct read_result read_shard(const uint8_t *data, size_t size, size_t chunk, size_t block) {
    struct read_result res = {0, 0, 0xcbf29ce484222325ull};
    struct stk__run ctx;
    stk__run_init(&ctx, NULL);
    struct stk__shard_config cfg = {
        .block_size = block,
        .max_member_bytes = (uint64_t)1 << 20,
        .max_members = 16,
        .max_key_bytes = 256,
        .run = &ctx,
    };
    struct stk__err err;
    struct stk__source *src = NULL;
    struct stk__shard_reader *r = NULL;
    FUZZ_CHECK(stk__source_open_memory(FUZZ_URL, data, size, chunk, &src) == 0);
    res.rc = stk__shard_open_source(src, FUZZ_URL, 0, &cfg, &r, &err);
    while (res.rc == 0) {
        struct stk__sample *s;
        int rc = stk__shard_next(r, &s, &err);
        if (rc <= 0) {
            res.rc = rc;
            break;
        }
        res.samples++;
        res.digest = fuzz_fnv(res.digest, s->pub.key, strlen(s->pub.key) + 1);
        for (size_t i = 0; i < s->pub.n_members; i++) {
            const struct stk_member *m = &s->pub.members[i];
            res.digest = fuzz_fnv(res.digest, m->ext, strlen(m->ext) + 1);
            res.digest = fuzz_fnv(res.digest, m->data, m->size);
        }
        stk__sample_free(s);
    }
    stk__shard_close(r);
    return res;
}

static void wrap_mode(const uint8_t *data, size_t size) {
    if (size < 6)
        return;
    unsigned cfg = data[0];
    size_t chunk = chunks[(cfg >> 1) & 3], block = sizes[(cfg >> 3) & 3];
    size_t split_at = ((size_t)data[1] << 8) | data[2], flip_at = ((size_t)data[3] << 8) | data[4];
    uint8_t mask = data[5] | 1;
    const uint8_t *tar = data + 6;
    size_t tar_len = size - 6;
    /* A "tar" that is compressed itself would be decompressed once read
     * plain and not at all inside the gzip (one layer per shard). */
    if (stk__is_gzip(tar, tar_len) || stk__filter_sniff(tar, tar_len) != NULL)
        return;
    struct bytes gz = {0};
    compress_members(tar, tar_len, (cfg >> 7) & 1 ? split_at % (tar_len + 1) : tar_len, &gz);
    if ((cfg >> 5) & 1) {
        static const uint8_t zeros[100];
        append(&gz, zeros, sizeof zeros);
    }
    int flipped = (cfg >> 6) & 1;
    if (flipped)
        gz.data[flip_at % gz.len] ^= mask;
    struct read_result plain = read_shard(tar, tar_len, chunk, block);
    struct read_result packed = read_shard(gz.data, gz.len, chunk, block);
    if (!flipped) {
        FUZZ_CHECK(packed.rc == plain.rc);
        FUZZ_CHECK(packed.samples == plain.samples && packed.digest == plain.digest);
    } else if (packed.rc == 0) {
        FUZZ_CHECK(plain.rc == 0);
        FUZZ_CHECK(packed.samples == plain.samples && packed.digest == plain.digest);
    }
    free(gz.data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    if (data[0] & 1)
        wrap_mode(data, size);
    else
        raw_mode(data[0], data + 1, size - 1);
    return 0;
}
