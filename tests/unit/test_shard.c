/* SPDX-License-Identifier: MIT */
/*
 * test_shard.c - tar members to samples: grouping, feeding granularity,
 * truncation, corruption and the skip policy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/keyset.h"
#include "tar/shard_reader.h"
#include "base/siphash.h"
#include "stoker.h"
#include "tar_builder.h"

struct result {
    int rc;               /* last return of stk__shard_next */
    int opened;           /* the tar stream was recognised */
    int n;                /* samples read */
    char listing[4096];   /* "key:ext,ext;key:ext;" */
    struct stk__run run;
    char err[STK__ERRMSG_MAX];
};

/* max_samples of the readers of read_all (0: no limit). */
static uint64_t max_samples;
/* headers_only of the readers of read_all: samples come without data. */
static int headers_only;

/* The gate of the readers of read_all when gating is set: "not now" at
 * the first call for each member, go at the second; it records the sample
 * bytes each member was asked for, and read_all counts the returns of 2. */
static int gating;
static char gate_log[256];
static int gate_log_used, deferrals;

static int test_gate(void *data, uint64_t sample_bytes)
{
    int *asked_before = data;
    if (!*asked_before) {
        *asked_before = 1;
        return 1;
    }
    *asked_before = 0;
    gate_log_used += snprintf(gate_log + gate_log_used, sizeof gate_log - (size_t)gate_log_used,
                              "%llu ", (unsigned long long)sample_bytes);
    return 0;
}

/* Read a shard from memory, `chunk` bytes per source read, into r. */
static void read_all(const void *data, size_t size, size_t chunk, size_t block, int skip,
                     struct result *r)
{
    memset(r, 0, sizeof *r);
    struct stk__shard_config cfg = {
        .block_size = block,
        .max_member_bytes = 1 << 20,
        .max_members = 8,
        .max_key_bytes = 256,
        .max_samples = max_samples,
        .headers_only = headers_only,
        .run = &r->run,
    };
    int asked_before = 0;
    if (gating) {
        cfg.gate = test_gate;
        cfg.gate_data = &asked_before;
        gate_log_used = deferrals = 0;
        gate_log[0] = '\0';
    }
    stk__run_init(&r->run, NULL);
    r->run.skip_bad = skip;
    struct stk__source *src;
    struct stk__shard_reader *reader;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__source_open_memory("mem://shard.tar", data, size, chunk, &src), 0);
    r->rc = stk__shard_open_source(src, src->url, 0, &cfg, &reader, &err);
    if (r->rc < 0) {
        snprintf(r->err, sizeof r->err, "%s", err.msg);
        return;
    }
    r->opened = 1;
    struct stk__sample *s;
    size_t used = 0;
    while ((r->rc = stk__shard_next(reader, &s, &err)) >= 1) {
        if (r->rc == 2) { /* the gate put a member off: ask again */
            assert_null(s);
            deferrals++;
            continue;
        }
        r->n++;
        used += (size_t)snprintf(r->listing + used, sizeof r->listing - used, "%s:", s->pub.key);
        for (size_t i = 0; i < s->pub.n_members; i++) {
            if (headers_only)
                assert_null(s->pub.members[i].data);
            else
                assert_int_equal(s->pub.members[i].data[s->pub.members[i].size], 0);
            used += (size_t)snprintf(r->listing + used, sizeof r->listing - used, "%s%s",
                                     i ? "," : "", s->pub.members[i].ext);
        }
        used += (size_t)snprintf(r->listing + used, sizeof r->listing - used, ";");
        stk__sample_free(s);
    }
    if (r->rc < 0)
        snprintf(r->err, sizeof r->err, "%s", err.msg);
    stk__shard_close(reader);
}

/* The shard in tb fails under the fail policy with rc and a message
 * containing msg, after delivering the samples in listing. */
static void expect_failure(const struct tar_builder *tb, int rc, const char *msg,
                           const char *listing)
{
    struct result r;
    read_all(tb->data, tb->size, 0, 1 << 20, 0, &r);
    assert_int_equal(r.rc, rc);
    if (strstr(r.err, msg) == NULL)
        fail_msg("'%s' not in '%s'", msg, r.err);
    assert_string_equal(r.listing, listing);
}

static void build_basic(struct tar_builder *tb)
{
    tb_entry(tb, "dir/", '5', NULL, 0);
    tb_file(tb, "dir/a.JPG", "AAAA", 4);
    tb_file(tb, "dir/a.cls", "1", 1);
    tb_file(tb, "dir/b.seg.png", "BB", 2);
    tb_file(tb, "dir/b.cls", "2", 1);
    tb_entry(tb, "dir/link.txt", '2', "dir/a.cls", 9);
    tb_file(tb, "README", "no dot", 6);
    tb_file(tb, "__meta__", "meta", 4);
    tb_file(tb, "c.x.y.z", "C", 1);
    tb_finish(tb);
}

static const char basic_listing[] = "dir/a:jpg,cls;dir/b:seg.png,cls;c:x.y.z;";

static void test_grouping(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    struct result r;
    read_all(tb.data, tb.size, 0, 1 << 20, 0, &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.listing, basic_listing);
    /* dir, symlink, README (no dot), __meta__ */
    assert_int_equal(r.run.counters.members_ignored, 4);
    tb_free(&tb);
}

/* A gate that puts each member off once (the pipeline's backpressure when
 * its budget is full) changes nothing in what is read: the member stays
 * pending and the next call takes it into the same sample. The gate is
 * asked for what the sample holds with the member. */
static void test_gate_puts_members_off(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    struct result r;
    gating = 1;
    read_all(tb.data, tb.size, 0, 1 << 20, 0, &r);
    gating = 0;
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.listing, basic_listing);
    assert_int_equal(deferrals, 5);
    assert_string_equal(gate_log, "4 5 2 3 1 ");
    assert_int_equal(r.run.counters.samples_skipped, 0);
    tb_free(&tb);
}

static void test_byte_at_a_time(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    static const size_t chunks[] = {1, 3, 511, 513};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        struct result r;
        read_all(tb.data, tb.size, chunks[i], 1 << 20, 0, &r);
        assert_int_equal(r.rc, 0);
        assert_string_equal(r.listing, basic_listing);
        read_all(tb.data, tb.size, 0, 1, 0, &r); /* one-byte reader block */
        assert_string_equal(r.listing, basic_listing);
    }
    tb_free(&tb);
}

static void test_guard_page(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    long page = sysconf(_SC_PAGESIZE);
    size_t span = (tb.size + (size_t)page - 1) / (size_t)page * (size_t)page;
    unsigned char *map = mmap(NULL, span + (size_t)page, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + span, (size_t)page, PROT_NONE), 0);
    /* The archive ends exactly at the guard page: any over-read faults. */
    unsigned char *at = map + span - tb.size;
    memcpy(at, tb.data, tb.size);
    struct result r;
    read_all(at, tb.size, 7, 1 << 20, 0, &r);
    assert_string_equal(r.listing, basic_listing);
    /* Truncated copies against the guard page too. */
    for (size_t cut = 0; cut < tb.size; cut += 97) {
        unsigned char *p = map + span - cut;
        memcpy(p, tb.data, cut);
        read_all(p, cut, 0, 1 << 20, 1, &r);
        assert_true(r.rc == 0 || r.rc < 0);
    }
    munmap(map, span + (size_t)page);
    tb_free(&tb);
}

static void test_truncation_everywhere(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    size_t end_of_data = tb.size - 1024; /* before the end-of-archive blocks */
    for (size_t cut = 0; cut < end_of_data; cut++) {
        struct result r;
        read_all(tb.data, cut, 0, 1 << 20, 0, &r);
        if (cut == 0) {
            assert_true(r.rc < 0);
            continue;
        }
        /* libarchive accepts an archive cut exactly at a member boundary
         * without the end blocks; anywhere else is an error. */
        if (r.rc == 0)
            continue;
        assert_true(r.rc == STK_ETRUNC || r.rc == STK_EFORMAT);
        assert_non_null(strstr(r.err, "mem://shard.tar"));
        assert_non_null(strstr(r.err, "offset"));
        /* Under the skip policy a shard that opened never fails (one that
         * cannot even be opened is skipped by the pipeline). */
        read_all(tb.data, cut, 0, 1 << 20, 1, &r);
        if (r.opened) {
            assert_int_equal(r.rc, 0);
            assert_int_equal(r.run.counters.shards_failed, 1);
        }
    }
    tb_free(&tb);
}

static void test_corrupt_checksum(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    build_basic(&tb);
    tb.data[512 + 10] ^= 0x55; /* a name byte in the header of dir/a.JPG */
    struct result r;
    read_all(tb.data, tb.size, 0, 1 << 20, 0, &r);
    assert_true(r.rc == STK_EFORMAT);
    assert_non_null(strstr(r.err, "offset"));
    read_all(tb.data, tb.size, 0, 1 << 20, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.run.counters.shards_failed, 1);
    tb_free(&tb);
}

static void test_not_a_tar(void **state)
{
    (void)state;
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(i * 7 + 3);
    struct result r;
    read_all(junk, sizeof junk, 0, 1 << 20, 0, &r);
    assert_int_equal(r.rc, STK_EFORMAT);
    assert_non_null(strstr(r.err, "mem://shard.tar"));
    read_all("", 0, 0, 1 << 20, 0, &r);
    assert_true(r.rc < 0);
}

static void test_reappearing_key(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    tb_file(&tb, "k1.jpg", "1", 1);
    tb_file(&tb, "k2.jpg", "2", 1);
    tb_file(&tb, "k1.cls", "1", 1);
    tb_file(&tb, "k3.jpg", "3", 1);
    tb_finish(&tb);
    expect_failure(&tb, STK_EDUPKEY, "key 'k1' reappears at offset 2048", "k1:jpg;k2:jpg;");
    struct result r;
    read_all(tb.data, tb.size, 0, 1 << 20, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.listing, "k1:jpg;k2:jpg;k3:jpg;");
    assert_int_equal(r.run.counters.samples_skipped, 1);
    tb_free(&tb);
}

static void test_duplicate_member_and_limits(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    tb_file(&tb, "a.jpg", "1", 1);
    tb_file(&tb, "a.JPG", "2", 1);
    tb_file(&tb, "b.jpg", "3", 1);
    char name[32];
    for (int i = 0; i < 9; i++) { /* max_members is 8 */
        snprintf(name, sizeof name, "c.m%d", i);
        tb_file(&tb, name, "x", 1);
    }
    tb_file(&tb, "d.jpg", "4", 1);
    tb_finish(&tb);
    struct result r;
    read_all(tb.data, tb.size, 0, 1 << 20, 0, &r);
    assert_int_equal(r.rc, STK_EDUPKEY);
    assert_non_null(strstr(r.err, "'a.JPG'"));
    read_all(tb.data, tb.size, 0, 1 << 20, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_string_equal(r.listing, "b:jpg;d:jpg;");
    assert_int_equal(r.run.counters.samples_skipped, 2);
    tb_free(&tb);
}

/* Counting by headers (the dataset index's scan) finds the samples, bad
 * samples and failures that reading every byte finds: at every cut of a
 * shard with members of several blocks, fed in several granularities. */
static void test_headers_only_finds_what_reading_finds(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    static char big[3000];
    memset(big, 'b', sizeof big);
    tb_file(&tb, "a.jpg", big, sizeof big);
    tb_file(&tb, "a.cls", "1", 1);
    tb_file(&tb, "b.jpg", big, 1025);
    tb_file(&tb, "b.jpg", "dup", 3); /* a bad sample */
    tb_file(&tb, "c.jpg", big, 600);
    tb_finish(&tb);
    static const size_t chunks[] = {0, 1, 700};
    static const size_t blocks[] = {1 << 20, 512, 1};
    /* Every 13th cut (13 is prime to the 512-byte block, so cuts fall at
     * every place in a block), and the whole shard; fed in pieces, every
     * 37th of those (their time is in bytes). */
    for (size_t cut = 1; cut <= tb.size; cut = cut + 13 < tb.size || cut == tb.size ? cut + 13
                                                                                  : tb.size) {
        for (size_t k = 0; k < (cut % 37 == 0 || cut == tb.size ? 3u : 1u); k++) {
            for (int skip = 0; skip <= 1; skip++) {
                struct result whole, scan;
                headers_only = 0;
                read_all(tb.data, cut, chunks[k], blocks[k], skip, &whole);
                headers_only = 1;
                read_all(tb.data, cut, chunks[k], blocks[k], skip, &scan);
                headers_only = 0;
                if (whole.rc != scan.rc || strcmp(whole.listing, scan.listing) != 0 ||
                    whole.run.counters.samples_skipped != scan.run.counters.samples_skipped ||
                    whole.run.counters.shards_failed != scan.run.counters.shards_failed)
                    fail_msg("cut %zu, chunk %zu, skip %d: read %d '%s' (%s), scanned %d '%s' "
                             "(%s)",
                             cut, chunks[k], skip, whole.rc, whole.listing, whole.err, scan.rc,
                             scan.listing, scan.err);
            }
        }
    }
    tb_free(&tb);
}

/* The reference implementation's vectors (key 00..0f, message 00..len-1). */
static void test_siphash_vectors(void **state)
{
    (void)state;
    static const struct {
        size_t len;
        const char *tag; /* hex */
    } vectors[] = {
        {0, "a3817f04ba25a8e66df67214c7550293"},  {1, "da87c1d86b99af44347659119b22fc45"},
        {7, "a1f1ebbed8dbc153c0b84aa61ff08239"},  {8, "3b62a9ba6258f5610f83e264f31497b4"},
        {15, "5493e99933b0a8117e08ec0f97cfc3d9"}, {16, "6ee2a4ca67b054bbfd3315bf85230577"},
        {63, "5150d1772f50834a503e069a973fbd7c"},
    };
    const uint64_t key[2] = {0x0706050403020100ull, 0x0f0e0d0c0b0a0908ull};
    uint8_t msg[64];
    for (size_t i = 0; i < sizeof msg; i++)
        msg[i] = (uint8_t)i;
    for (size_t v = 0; v < sizeof vectors / sizeof vectors[0]; v++) {
        uint64_t out[2];
        stk__siphash128(key, msg, vectors[v].len, out);
        char hex[33];
        for (int b = 0; b < 16; b++)
            snprintf(hex + 2 * b, 3, "%02x", (unsigned)((out[b / 8] >> (8 * (b % 8))) & 0xff));
        assert_string_equal(hex, vectors[v].tag);
    }
}

static void test_keyset(void **state)
{
    (void)state;
    struct stk__keyset set = {0};
    char key[32];
    for (int i = 0; i < 10000; i++) {
        int n = snprintf(key, sizeof key, "dir/%d", i);
        assert_int_equal(stk__keyset_add(&set, key, (size_t)n), 0);
    }
    assert_int_equal(set.count, 10000);
    assert_true(set.capacity * 3 >= set.count * 4);
    for (int i = 0; i < 10000; i += 7) {
        int n = snprintf(key, sizeof key, "dir/%d", i);
        assert_int_equal(stk__keyset_add(&set, key, (size_t)n), 1);
    }
    /* Only the given bytes count: "dir/1" is not "dir/10". */
    assert_int_equal(stk__keyset_add(&set, "dir/10000", 9), 0);
    assert_int_equal(stk__keyset_add(&set, "dir/10000", 8), 1);
    assert_int_equal(stk__keyset_add(&set, "", 0), 0);
    assert_int_equal(stk__keyset_add(&set, "", 0), 1);
    stk__keyset_clear(&set);
    assert_int_equal(set.count, 0);
    assert_int_equal(stk__keyset_add(&set, "dir/1", 5), 0);
    stk__keyset_clear(&set);
}

/* A shard with more samples than max_samples ends at the first one past
 * it: an error, or under the skip policy a failed shard. */
static void test_max_samples(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    char name[32];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "k%d.txt", i);
        tb_file(&tb, name, "x", 1);
        snprintf(name, sizeof name, "k%d.cls", i);
        tb_file(&tb, name, "1", 1);
    }
    tb_finish(&tb);
    max_samples = 3;
    expect_failure(&tb, STK_ELIMIT, "more than 3 samples (the next starts at offset 6144)",
                   "k0:txt,cls;k1:txt,cls;k2:txt,cls;");
    struct result r;
    read_all(tb.data, tb.size, 0, 1 << 20, 1, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.n, 3);
    assert_int_equal(r.run.counters.shards_failed, 1);
    max_samples = 5;
    read_all(tb.data, tb.size, 0, 1 << 20, 0, &r);
    assert_int_equal(r.rc, 0);
    assert_int_equal(r.n, 5);
    max_samples = 0;
    tb_free(&tb);
}

/* Feeding granularities of the end-of-archive checks: chunk (bytes per
 * source read) x block (libarchive's read size). */
static const size_t chunks[] = {0, 1, 3, 700};
static const size_t blocks[] = {1, 7, 512, 1000, 1 << 20};

/* What follows the end-of-archive marker: zeros are padding, anything else
 * (a second archive: cat a.tar b.tar) is an error naming its offset, found
 * wherever it lies relative to the blocks libarchive was given. */
static void test_data_after_end_of_archive(void **state)
{
    (void)state;
    struct tar_builder tb = {0};
    tb_file(&tb, "a.txt", "1", 1);
    tb_file(&tb, "b.txt", "2", 1);
    tb_finish(&tb);
    size_t archive = tb.size; /* 3072: two members, two zero blocks */
    static const size_t pads[] = {0, 1, 511, 512, 5000};
    for (size_t p = 0; p < sizeof pads / sizeof pads[0]; p++) {
        for (int junk = 0; junk < 2; junk++) {
            size_t size = archive + pads[p] + (size_t)junk;
            unsigned char *data = calloc(1, size);
            assert_non_null(data);
            memcpy(data, tb.data, archive);
            if (junk)
                data[size - 1] = 'x';
            for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
                for (size_t b = 0; b < sizeof blocks / sizeof blocks[0]; b++) {
                    struct result r;
                    read_all(data, size, chunks[c], blocks[b], 0, &r);
                    assert_string_equal(r.listing, "a:txt;b:txt;");
                    if (!junk) {
                        assert_int_equal(r.rc, 0);
                        continue;
                    }
                    assert_int_equal(r.rc, STK_EFORMAT);
                    char want[128];
                    snprintf(want, sizeof want, "data after the end-of-archive marker at offset %zu",
                             size - 1);
                    if (strstr(r.err, want) == NULL)
                        fail_msg("pad %zu chunk %zu block %zu: %s", pads[p], chunks[c], blocks[b],
                                 r.err);
                    read_all(data, size, chunks[c], blocks[b], 1, &r);
                    assert_int_equal(r.rc, 0);
                    assert_int_equal(r.n, 2);
                    assert_int_equal(r.run.counters.shards_failed, 1);
                }
            }
            free(data);
        }
    }
    /* Two archives back to back: the second one's first header. */
    struct tar_builder two = {0};
    tb_file(&two, "a.txt", "1", 1);
    tb_finish(&two);
    tb_file(&two, "c.txt", "3", 1);
    tb_finish(&two);
    expect_failure(&two, STK_EFORMAT, "data after the end-of-archive marker at offset 2048",
                   "a:txt;");
    tb_free(&two);
    tb_free(&tb);
}

/* Names in messages: escaped, cut with "..." to fit. */
static void test_shown(void **state)
{
    (void)state;
    char buf[16];
    assert_string_equal(stk__shown(buf, sizeof buf, "plain"), "plain");
    assert_string_equal(stk__shown(buf, sizeof buf, "a\nb\\"), "a\\nb\\\\");
    assert_string_equal(stk__shown(buf, sizeof buf, "\x1b[1m\x7f"), "\\x1b[1m\\x7f");
    assert_string_equal(stk__shown(buf, sizeof buf, "\xc2\x9b!\xc3\xa9"), "\\xc2\\x9b!\xc3\xa9");
    assert_string_equal(stk__shown(buf, sizeof buf, "0123456789abcde"), "0123456789abcde");
    assert_string_equal(stk__shown(buf, sizeof buf, "0123456789abcdef"), "0123456789ab...");
    assert_string_equal(stk__shown(buf, sizeof buf, "0123456789\n\n\n"), "0123456789\\n...");
    assert_string_equal(stk__shown(buf, 4, "abcd"), "...");
    assert_string_equal(stk__shown(buf, 4, "abc"), "abc");
}

/* The one escaping rule, character by character (the CLI's lines too). */
static void test_escape_char(void **state)
{
    (void)state;
    char esc[STK_ESCAPED_MAX];
    size_t used;
    assert_int_equal(stk_escape_char("\\x", 1, esc, &used), 2);
    assert_memory_equal(esc, "\\\\", 2);
    assert_int_equal(stk_escape_char("\\x", 0, esc, &used), 1); /* escaped once already */
    assert_int_equal(esc[0], '\\');
    assert_int_equal(stk_escape_char("\xc2\x85", 1, esc, &used), 8);
    assert_int_equal(used, 2);
    assert_memory_equal(esc, "\\xc2\\x85", 8);
    assert_int_equal(stk_escape_char("\xc3\xa9", 1, esc, &used), 1); /* U+00E9 stays */
    assert_int_equal(used, 1);
}

/* WebDataset's key rule, as readers and stoker pack use it. */
static void test_split_name(void **state)
{
    (void)state;
    size_t key_len;
    const char *ext;
    assert_int_equal(stk_split_name("a/b.c/x.seg.png", &key_len, &ext), 1);
    assert_int_equal(key_len, strlen("a/b.c/x"));
    assert_string_equal(ext, "seg.png");
    assert_int_equal(stk_split_name("a/noext", &key_len, &ext), 0);
    assert_int_equal(stk_split_name("a/.hidden.jpg", &key_len, &ext), 0);
    assert_int_equal(stk_split_name("__meta__", &key_len, &ext), 0);
    assert_int_equal(stk_split_name("d/__meta__.json", &key_len, &ext), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grouping),
        cmocka_unit_test(test_gate_puts_members_off),
        cmocka_unit_test(test_byte_at_a_time),
        cmocka_unit_test(test_guard_page),
        cmocka_unit_test(test_truncation_everywhere),
        cmocka_unit_test(test_corrupt_checksum),
        cmocka_unit_test(test_not_a_tar),
        cmocka_unit_test(test_reappearing_key),
        cmocka_unit_test(test_duplicate_member_and_limits),
        cmocka_unit_test(test_headers_only_finds_what_reading_finds),
        cmocka_unit_test(test_siphash_vectors),
        cmocka_unit_test(test_keyset),
        cmocka_unit_test(test_max_samples),
        cmocka_unit_test(test_data_after_end_of_archive),
        cmocka_unit_test(test_shown),
        cmocka_unit_test(test_escape_char),
        cmocka_unit_test(test_split_name),
    };
    return cmocka_run_group_tests_name("shard", tests, NULL, NULL);
}
