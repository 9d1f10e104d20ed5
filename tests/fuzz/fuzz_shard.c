/* SPDX-License-Identifier: MIT */
/*
 * fuzz_shard.c - libFuzzer target: arbitrary bytes as a tar shard.
 *
 * Input layout: byte 0 picks how the shard is fed, the rest is the shard.
 *   bits 0-1  block size of run A      (1, 7, 512, 65536)
 *   bits 2-3  block size of run B      (same table)
 *   bits 4-5  source chunk of run A    (0 = whole block, 1, 3, 4096 bytes a read)
 *   bits 6-7  source chunk of run B    (same table)
 * Run A reads the shard under the fail policy (skip_bad=0) with plain member
 * buffers, run B under the skip policy (skip_bad=1) with member buffers
 * recycled through a stk__buffer_pool; both drain every sample with
 * stk__shard_next.
 * Run C repeats the read with stoker's allocation failure injection
 * (alloc.h) so the out-of-memory paths are fuzzed too (LeakSanitizer checks
 * that they clean up).
 *
 * Invariants checked (a violation is a __builtin_trap):
 *  - every sample: key non-empty, at most max_key_bytes, no '.' in its
 *    basename, not ending in '/'; the top-level "__*__" files are ignored;
 *    url and shard_index are the ones given; 1..max_members members; every
 *    member: ext lower-case without '/', size <= max_member_bytes,
 *    data[size] == 0; extensions distinct within a sample; bytes == sum;
 *  - keys are distinct within a shard (a reappearing key is an error or a
 *    skipped sample, never a second sample);
 *  - stk__shard_next: 1 with a sample, 0/<0 with *out NULL; an error leaves
 *    err.code == rc and a message; after 0 it keeps returning 0;
 *  - the skip policy never returns an error other than STK_ENOMEM;
 *  - the fail policy never counts skipped samples or failed shards;
 *  - when run A reads the whole shard without error, run B (another block
 *    size and chunking, skip policy) yields exactly the same samples and
 *    skips nothing: feeding granularity and policy do not change a good
 *    shard; when run A fails, run B counts a skipped sample or failed shard;
 *  - counters: one shard opened, bytes_read <= input size;
 *  - run D counts the samples (stk__shard_count, the dataset index and
 *    resume path) under the skip policy: the same count as run B
 *    delivered, and none counted as read;
 *  - no expansion: for an uncompressed shard, the member bytes delivered
 *    are at most the input's size (a sparse member or a header claiming
 *    more than it stores is refused, never filled with zeros).
 *
 * Built for libFuzzer (STK_FUZZ_LIBFUZZER), a custom mutator also repairs
 * the checksums of mutated ustar headers so the fuzzer gets past them.
 */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "base/buffer_pool.h"
#include "tar/shard_reader.h"
#include "io/source.h"
#include "io/source_filter.h"
#include "io/source_gzip.h"
#include "stoker.h"

#define FUZZ_URL "mem://fuzz/shard.tar"
#define FUZZ_SHARD_INDEX 7u
#define FUZZ_MAX_MEMBER_BYTES ((uint64_t)1 << 20)
#define FUZZ_MAX_MEMBERS 16u
#define FUZZ_MAX_KEY_BYTES 256u
#define FUZZ_POOL_BYTES ((size_t)256 << 10) /* idle member buffers kept by run B's pool */

static const size_t block_sizes[4] = {1, 7, 512, 65536};
static const size_t chunks[4] = {0, 1, 3, 4096};

struct run {
    int open_rc;      /* stk__shard_open_source (or the memory source) */
    int last_rc;      /* the last stk__shard_next: 0 drained, <0 error */
    uint64_t samples; /* samples handed out */
    uint64_t member_bytes; /* their data */
    uint64_t digest;  /* FNV-1a over keys, extensions and data, in order */
    uint64_t opened, failed, skipped, ignored, bytes_read;
    size_t log_calls;
    const struct stk__buffer_pool *pool; /* where member buffers must return */
    char **keys;                  /* copies of the keys handed out, to check uniqueness */
    size_t n_keys, cap_keys;
};

static void log_cb(void *data, enum stk_log_level level, const char *message) {
    struct run *run = data;
    FUZZ_CHECK(message != NULL);
    size_t len = strnlen(message, STK__ERRMSG_MAX + 64);
    FUZZ_CHECK(len > 0 && len < STK__ERRMSG_MAX + 64);
    FUZZ_CHECK(level == STK_LOG_WARN);
    run->log_calls++;
}

static void keep_key(struct run *run, const char *key) {
    if (run->n_keys == run->cap_keys) {
        size_t cap = run->cap_keys ? run->cap_keys * 2 : 64;
        char **keys = realloc(run->keys, cap * sizeof *keys);
        FUZZ_CHECK(keys != NULL);
        run->keys = keys;
        run->cap_keys = cap;
    }
    char *copy = strdup(key);
    FUZZ_CHECK(copy != NULL);
    run->keys[run->n_keys++] = copy;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void check_keys_unique(struct run *run) {
    if (run->n_keys > 1) {
        qsort(run->keys, run->n_keys, sizeof *run->keys, cmp_str);
        for (size_t i = 1; i < run->n_keys; i++)
            FUZZ_CHECK(strcmp(run->keys[i - 1], run->keys[i]) != 0);
    }
    for (size_t i = 0; i < run->n_keys; i++)
        free(run->keys[i]);
    free(run->keys);
    run->keys = NULL;
    run->n_keys = run->cap_keys = 0;
}

static void check_sample(struct run *run, const struct stk__sample *s) {
    const struct stk_sample *pub = &s->pub;
    FUZZ_CHECK(pub->key != NULL && pub->key == s->key);
    size_t key_len = strlen(pub->key);
    FUZZ_CHECK(key_len >= 1 && key_len <= FUZZ_MAX_KEY_BYTES);
    FUZZ_CHECK(pub->key[key_len - 1] != '/');
    const char *slash = strrchr(pub->key, '/');
    const char *base = slash ? slash + 1 : pub->key;
    FUZZ_CHECK(*base != '\0' && strchr(base, '.') == NULL);
    FUZZ_CHECK(pub->url != NULL && strcmp(pub->url, FUZZ_URL) == 0);
    FUZZ_CHECK(pub->shard_index == FUZZ_SHARD_INDEX);
    FUZZ_CHECK(pub->n_members >= 1 && pub->n_members <= FUZZ_MAX_MEMBERS);
    FUZZ_CHECK(pub->members != NULL && pub->members == s->members);
    FUZZ_CHECK(s->capacity >= pub->n_members);
    FUZZ_CHECK(s->pool == run->pool);

    uint64_t h = fuzz_fnv(run->digest, pub->key, key_len + 1);
    uint64_t bytes = 0;
    for (size_t i = 0; i < pub->n_members; i++) {
        const struct stk_member *m = &pub->members[i];
        FUZZ_CHECK(m->ext != NULL && m->data != NULL);
        size_t ext_len = strlen(m->ext);
        for (const char *p = m->ext; *p; p++)
            FUZZ_CHECK(!(*p >= 'A' && *p <= 'Z') && *p != '/');
        /* The member name key.ext passed the name limit. */
        FUZZ_CHECK(key_len + 1 + ext_len <= FUZZ_MAX_KEY_BYTES);
        /* Top-level "__...__" files (e.g. __meta__) never form samples. */
        if (slash == NULL)
            FUZZ_CHECK(!(strncmp(pub->key, "__", 2) == 0 && ext_len >= 2 &&
                         strcmp(m->ext + ext_len - 2, "__") == 0));
        FUZZ_CHECK(m->size <= FUZZ_MAX_MEMBER_BYTES);
        FUZZ_CHECK(m->data[m->size] == 0);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(pub->members[j].ext, m->ext) != 0);
        bytes += m->size;
        uint64_t size = m->size;
        h = fuzz_fnv(h, m->ext, ext_len + 1);
        h = fuzz_fnv(h, &size, sizeof size);
        h = fuzz_fnv(h, m->data, m->size);
    }
    FUZZ_CHECK(bytes == s->bytes);
    run->member_bytes += bytes;
    run->digest = h;
    run->samples++;
    keep_key(run, pub->key);
}

static void check_error(const struct stk__err *err, int rc) {
    FUZZ_CHECK(rc < 0);
    FUZZ_CHECK(err->code == rc);
    size_t len = strnlen(err->msg, sizeof err->msg);
    FUZZ_CHECK(len > 0 && len < sizeof err->msg);
}

/* Read the shard once. Returns with run filled in. */
static void read_shard(const uint8_t *data, size_t size, size_t block, size_t chunk, int skip_bad,
                       struct stk__buffer_pool *pool, struct run *run) {
    struct stk__run ctx;
    stk__run_init(&ctx, NULL);
    ctx.skip_bad = skip_bad;
    ctx.log = log_cb;
    ctx.log_data = run;
    memset(run, 0, sizeof *run);
    run->digest = 0xcbf29ce484222325ull;
    run->pool = pool;
    struct stk__shard_config cfg = {
        .block_size = block,
        .max_member_bytes = FUZZ_MAX_MEMBER_BYTES,
        .max_members = FUZZ_MAX_MEMBERS,
        .max_key_bytes = FUZZ_MAX_KEY_BYTES,
        .run = &ctx,
        .pool = pool,
    };
    struct stk__err err;
    stk__err_clear(&err);

    struct stk__source *src = NULL;
    int rc = stk__source_open_memory(FUZZ_URL, data, size, chunk, &src);
    if (rc < 0) {
        FUZZ_CHECK(rc == STK_ENOMEM && src == NULL);
        run->open_rc = rc;
        return;
    }
    FUZZ_CHECK(rc == 0 && src != NULL);

    struct stk__shard_reader *r = NULL;
    rc = stk__shard_open_source(src, FUZZ_URL, FUZZ_SHARD_INDEX, &cfg, &r, &err);
    run->open_rc = rc;
    if (rc < 0) {
        FUZZ_CHECK(r == NULL);
        check_error(&err, rc);
    } else {
        FUZZ_CHECK(rc == 0 && r != NULL);
        for (;;) {
            struct stk__sample *s = (struct stk__sample *)&err; /* must be overwritten */
            rc = stk__shard_next(r, &s, &err);
            if (rc == 1) {
                FUZZ_CHECK(s != NULL);
                check_sample(run, s);
                stk__sample_free(s);
                continue;
            }
            FUZZ_CHECK(s == NULL);
            if (rc < 0)
                check_error(&err, rc);
            else
                FUZZ_CHECK(rc == 0);
            break;
        }
        run->last_rc = rc;
        if (rc == 0) {
            /* The end is sticky. */
            struct stk__sample *s = (struct stk__sample *)&err;
            FUZZ_CHECK(stk__shard_next(r, &s, &err) == 0 && s == NULL);
        }
        stk__shard_close(r);
    }

    run->opened = atomic_load(&ctx.counters.shards_opened);
    run->failed = atomic_load(&ctx.counters.shards_failed);
    run->skipped = atomic_load(&ctx.counters.samples_skipped);
    run->ignored = atomic_load(&ctx.counters.members_ignored);
    run->bytes_read = atomic_load(&ctx.counters.bytes_read);
    /* shards_opened counts the attempt, before the tar stream is opened
     * (an out-of-memory reader allocation fails before that). */
    FUZZ_CHECK(run->opened <= 1);
    FUZZ_CHECK(run->opened == 1 || run->open_rc == STK_ENOMEM);
    FUZZ_CHECK(run->failed <= 1);
    FUZZ_CHECK(run->bytes_read <= size);
    if (!skip_bad) {
        FUZZ_CHECK(run->failed == 0 && run->skipped == 0 && run->log_calls == 0);
    } else {
        FUZZ_CHECK(run->last_rc >= 0 || run->last_rc == STK_ENOMEM);
        FUZZ_CHECK(run->log_calls >= run->failed);
        /* Whatever is dropped is reported through the log callback. */
        FUZZ_CHECK(run->skipped + run->failed == 0 || run->log_calls > 0);
    }
    check_keys_unique(run);
}

/* Count the samples as `stoker index` does; -1 if it cannot. */
static int64_t count_by_headers(const uint8_t *data, size_t size, size_t block, size_t chunk) {
    struct stk__run ctx;
    stk__run_init(&ctx, NULL);
    ctx.skip_bad = 1;
    struct stk__shard_config cfg = {
        .block_size = block,
        .max_member_bytes = FUZZ_MAX_MEMBER_BYTES,
        .max_members = FUZZ_MAX_MEMBERS,
        .max_key_bytes = FUZZ_MAX_KEY_BYTES,
        .run = &ctx,
    };
    struct stk__err err;
    struct stk__source *src = NULL;
    struct stk__shard_reader *r = NULL;
    if (stk__source_open_memory(FUZZ_URL, data, size, chunk, &src) < 0 ||
        stk__shard_open_source(src, FUZZ_URL, FUZZ_SHARD_INDEX, &cfg, &r, &err) < 0)
        return -1;
    uint64_t n = 0;
    struct stk__offsets offsets = {0};
    int rc = stk__shard_count(r, &n, &offsets, &err);
    /* Offsets of samples increase: each starts after the previous one. */
    for (size_t k = 1; rc == 0 && k < offsets.count; k++)
        FUZZ_CHECK(offsets.items[k] > offsets.items[k - 1]);
    FUZZ_CHECK(rc != 0 || offsets.count == n);
    stk__offsets_free(&offsets);
    stk__shard_close(r);
    FUZZ_CHECK(rc == 0 || rc == STK_ENOMEM);
    FUZZ_CHECK(atomic_load(&ctx.counters.samples_read) == 0);
    return rc == 0 ? (int64_t)n : -1;
}

/* STK_FUZZ_VERBOSE=1 in the environment prints what each run saw. */
static void trace(const char *name, const struct run *run, size_t block, size_t chunk) {
    static int verbose = -1;
    if (verbose < 0)
        verbose = getenv("STK_FUZZ_VERBOSE") != NULL;
    if (!verbose)
        return;
    fprintf(stderr,
            "  run %s block %zu chunk %zu: open %d, last %d, samples %llu, skipped %llu, "
            "failed %llu, ignored %llu, bytes %llu\n",
            name, block, chunk, run->open_rc, run->last_rc, (unsigned long long)run->samples,
            (unsigned long long)run->skipped, (unsigned long long)run->failed,
            (unsigned long long)run->ignored, (unsigned long long)run->bytes_read);
}

static uint64_t input_hash(const uint8_t *data, size_t size) {
    return fuzz_fnv(0xcbf29ce484222325ull, data, size);
}

#ifdef STK_FUZZ_LIBFUZZER
/* libFuzzer's mutations almost always break a tar header's checksum, and
 * libarchive then rejects the header before any interesting field is read.
 * After mutating, recompute the checksum of every 512-byte block of the
 * (uncompressed) shard that carries the "ustar" magic; one time in eight
 * leave them broken so checksum errors stay fuzzed. */
size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t max_size);
size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed);

size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t max_size, unsigned int seed) {
    size = LLVMFuzzerMutate(data, size, max_size);
    if (size < 1 + 512 || seed % 8 == 0)
        return size;
    for (size_t off = 1; off + 512 <= size; off += 512) {
        uint8_t *h = data + off;
        if (memcmp(h + 257, "ustar", 5) != 0)
            continue;
        unsigned sum = 0;
        for (size_t i = 0; i < 512; i++)
            sum += (i >= 148 && i < 156) ? ' ' : h[i];
        char field[8];
        snprintf(field, sizeof field, "%06o", sum & 0777777);
        memcpy(h + 148, field, 6);
        h[154] = 0;
        h[155] = ' ';
    }
    return size;
}
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    unsigned cfg = data[0];
    const uint8_t *shard = data + 1;
    size_t shard_size = size - 1;

    struct run a, b, c;
    size_t block_a = block_sizes[cfg & 3], chunk_a = chunks[(cfg >> 4) & 3];
    size_t block_b = block_sizes[(cfg >> 2) & 3], chunk_b = chunks[(cfg >> 6) & 3];
    read_shard(shard, shard_size, block_a, chunk_a, 0, NULL, &a);
    trace("A (fail)", &a, block_a, chunk_a);
    struct stk__buffer_pool *pool = stk__buffer_pool_new(FUZZ_POOL_BYTES);
    FUZZ_CHECK(pool != NULL);
    read_shard(shard, shard_size, block_b, chunk_b, 1, pool, &b);
    trace("B (skip)", &b, block_b, chunk_b);

    /* Opening does not depend on the policy (nor, for a sane parser, on how
     * the bytes are fed). */
    FUZZ_CHECK((a.open_rc < 0) == (b.open_rc < 0));
    if (a.open_rc == 0 && a.last_rc == 0) {
        /* A good shard reads the same under both policies and any feeding. */
        FUZZ_CHECK(b.last_rc == 0);
        FUZZ_CHECK(b.samples == a.samples && b.digest == a.digest);
        FUZZ_CHECK(b.skipped == 0 && b.failed == 0);
        FUZZ_CHECK(b.ignored == a.ignored);
    } else if (a.open_rc == 0) {
        /* The fail policy stopped on a problem: the skip policy must have
         * dropped something for it. */
        FUZZ_CHECK(b.skipped + b.failed >= 1);
    }
    if (!stk__is_gzip(shard, shard_size) && stk__filter_sniff(shard, shard_size) == NULL)
        FUZZ_CHECK(a.member_bytes <= shard_size && b.member_bytes <= shard_size);
    if (b.open_rc == 0 && b.last_rc == 0) {
        int64_t counted = count_by_headers(shard, shard_size, block_b, chunk_b);
        FUZZ_CHECK(counted == (int64_t)b.samples);
    }

    /* Run C: make the Nth stoker allocation (and every later one) fail. */
    uint64_t h = input_hash(data, size);
    unsigned long fail_at = 1 + (unsigned long)(h % 96);
    stk__alloc_fail_after(fail_at);
    read_shard(shard, shard_size, 512, 0, (int)((h >> 8) & 1), (h >> 9) & 1 ? pool : NULL, &c);
    stk__alloc_fail_after(0);
    stk__buffer_pool_free(pool);
    trace("C (oom)", &c, 512, 0);
    if (c.open_rc == 0 && c.last_rc == 0 && a.open_rc == 0 && a.last_rc == 0) {
        /* No allocation failed where it mattered: same result as run A. */
        FUZZ_CHECK(c.samples == a.samples && c.digest == a.digest);
    }
    return 0;
}
