/* SPDX-License-Identifier: MIT */
/*
 * test_writer.c - stk_writer: patterns, names, rollover, atomic shards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "stoker.h"
#include "tar_builder.h"

static char dir[64];

static int exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct stat st;
    return stat(path, &st) == 0;
}

/* Files in dir whose name starts with prefix (temporary files have names
 * of their own: NAME.tmp.PID.N). */
static int count_prefixed(const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    if (d != NULL)
        closedir(d);
    return n;
}

static stk_writer *create(const char *name, uint64_t max_samples, uint64_t max_bytes)
{
    char pattern[128], msg[256];
    snprintf(pattern, sizeof pattern, "%s/%s", dir, name);
    stk_writer *w = NULL;
    assert_int_equal(stk_writer_create(pattern, max_samples, max_bytes, 0, &w, msg, sizeof msg), 0);
    return w;
}

/* Add n samples k0, k1, ... of one member. */
static void add_samples(stk_writer *w, int n)
{
    const struct stk_member m[] = {{"txt", (const uint8_t *)"x", 1}};
    for (int i = 0; i < n; i++) {
        char key[16];
        snprintf(key, sizeof key, "k%d", i);
        assert_int_equal(stk_writer_add(w, key, m, 1), 0);
    }
}

static void test_patterns(void **state)
{
    (void)state;
    static const char *const bad[] = {"x.tar", "%d-%d.tar", "%s.tar", "%-3d.tar", "%123d.tar",
                                      "%", "%%.tar"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        stk_writer *w = (stk_writer *)1;
        char msg[256] = "";
        assert_int_equal(stk_writer_create(bad[i], 1, 1, 0, &w, msg, sizeof msg), STK_EINVAL);
        assert_null(w);
        assert_non_null(strstr(msg, "exactly one %d"));
    }
    stk_writer *w;
    char msg[256];
    assert_int_equal(stk_writer_create("a%%b-%06d.tar", 0, 1, 0, &w, msg, sizeof msg), STK_EINVAL);
    assert_int_equal(stk_writer_create("a%%b-%06d.tar", 1, 1, 0, &w, msg, sizeof msg), 0);
    stk_writer_destroy(w);
}

static void test_bad_names_write_nothing(void **state)
{
    (void)state;
    stk_writer *w = create("names-%d.tar", 10, 1000);
    const struct stk_member ok = {"jpg", (const uint8_t *)"x", 1};
    static const char *const keys[] = {"", "a.b", "dir/", "a//b", "dir/x.y"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        assert_int_equal(stk_writer_add(w, keys[i], &ok, 1), STK_EINVAL);
    const struct stk_member twice[] = {ok, ok};
    assert_int_equal(stk_writer_add(w, "k", twice, 2), STK_EINVAL);
    assert_non_null(strstr(stk_writer_errmsg(w), "twice"));
    const struct stk_member bad_ext[] = {{"", NULL, 0}, {"a/b", NULL, 0}};
    assert_int_equal(stk_writer_add(w, "k", &bad_ext[0], 1), STK_EINVAL);
    assert_int_equal(stk_writer_add(w, "k", &bad_ext[1], 1), STK_EINVAL);
    assert_int_equal(stk_writer_add(w, "k", NULL, 0), STK_EINVAL);
    /* "__meta.info__" is a top-level __NAME__ file that readers skip
     * (stk_split_name): written, the sample would vanish. */
    const struct stk_member dunder = {"info__", (const uint8_t *)"x", 1};
    assert_int_equal(stk_writer_add(w, "__meta", &dunder, 1), STK_EINVAL);
    assert_non_null(strstr(stk_writer_errmsg(w), "__meta"));
    uint64_t shards = 9, samples = 9;
    assert_int_equal(stk_writer_close(w, &shards, &samples), 0);
    assert_int_equal(shards, 0);
    assert_int_equal(samples, 0);
    stk_writer_destroy(w);
    assert_false(exists("names-0.tar"));
    assert_int_equal(count_prefixed("names-0.tar"), 0);
}

static size_t count_in(const char *buf, size_t len, const char *needle)
{
    size_t n = 0;
    for (const char *p = buf; (p = memmem(p, len - (size_t)(p - buf), needle, strlen(needle)));
         p++)
        n++;
    return n;
}

/* Names are bytes, written as given in this program's C locale (no
 * setlocale): UTF-8 ones as standard pax UTF-8 records, the others as
 * bytes under hdrcharset=BINARY. */
static void test_names_are_bytes(void **state)
{
    (void)state;
    static const char *const keys[] = {"dir-\xc3\xa9/s0000200-\xc3\xbc", "k\xffy",
                                       "\xe4\xb8\xad\xe6\x96\x87"};
    stk_writer *w = create("bytes-%d.tar", 10, 1000);
    const struct stk_member m[] = {{"txt", (const uint8_t *)"x", 1}};
    for (size_t i = 0; i < 3; i++)
        assert_int_equal(stk_writer_add(w, keys[i], m, 1), 0);
    assert_int_equal(stk_writer_close(w, NULL, NULL), 0);
    stk_writer_destroy(w);
    static char buf[1 << 16];
    char path[128];
    snprintf(path, sizeof path, "%s/bytes-0.tar", dir);
    size_t len = tb_read_file(path, buf, sizeof buf);
    for (size_t i = 0; i < 3; i++) {
        char record[64];
        snprintf(record, sizeof record, "path=%s.txt\n", keys[i]);
        assert_int_equal(count_in(buf, len, record), 1);
    }
    assert_int_equal(count_in(buf, len, "hdrcharset=BINARY"), 1); /* k\xffy only */
}

/* 5 samples of 10 bytes: max 2 samples gives 3 shards, max 25 bytes too. */
static void test_rollover(void **state)
{
    (void)state;
    for (int by_size = 0; by_size < 2; by_size++) {
        stk_writer *w = by_size ? create("size-%d.tar", 100, 25) : create("count-%d.tar", 2, 1000);
        const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10}};
        for (int i = 0; i < 5; i++) {
            char key[8];
            snprintf(key, sizeof key, "k%d", i);
            assert_int_equal(stk_writer_add(w, key, m, 1), 0);
            /* the shard being written is not visible under its name */
            assert_false(exists(by_size ? "size-2.tar" : "count-2.tar"));
        }
        uint64_t shards, samples;
        assert_int_equal(stk_writer_close(w, &shards, &samples), 0);
        stk_writer_destroy(w);
        assert_int_equal(shards, 3);
        assert_int_equal(samples, 5);
        assert_true(exists(by_size ? "size-2.tar" : "count-2.tar"));
        assert_false(exists(by_size ? "size-3.tar" : "count-3.tar"));
        assert_int_equal(count_prefixed(by_size ? "size-2.tar." : "count-2.tar."), 0);
    }
    /* a sample larger than max_bytes gets a shard of its own */
    stk_writer *w = create("big-%d.tar", 100, 5);
    const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10}};
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    assert_int_equal(stk_writer_add(w, "b", m, 1), 0);
    uint64_t shards;
    assert_int_equal(stk_writer_close(w, &shards, NULL), 0);
    stk_writer_destroy(w);
    assert_int_equal(shards, 2);
}

/* Nothing of a run is published before stk_writer_close(): a run
 * destroyed unclosed leaves no shard, no temporary file and no directory
 * it made. */
static void test_destroy_without_close(void **state)
{
    (void)state;
    stk_writer *w = create("open-%d.tar", 1, 1000);
    add_samples(w, 3);
    assert_int_equal(count_prefixed("open-"), 3); /* two finished shards and the open one */
    assert_int_equal(count_prefixed("open-0.tar.tmp."), 1);
    assert_false(exists("open-0.tar"));
    stk_writer_destroy(w);
    assert_int_equal(count_prefixed("open-"), 0);
    stk_writer_destroy(NULL);
}

/* A missing output directory is made (as mkdir -p does) and removed again
 * by a run that publishes nothing; one that cannot be made is named. */
static void test_missing_directory(void **state)
{
    (void)state;
    const struct stk_member m[] = {{"txt", (const uint8_t *)"x", 1}};
    stk_writer *w = create("missing/deeper/%d.tar", 10, 1000);
    assert_true(exists("missing/deeper"));
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    stk_writer_destroy(w);
    assert_false(exists("missing"));

    w = create("made/deeper/%d.tar", 10, 1000);
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    assert_int_equal(stk_writer_close(w, NULL, NULL), 0);
    stk_writer_destroy(w);
    assert_true(exists("made/deeper/0.tar"));

    char pattern[128], msg[256] = "";
    snprintf(pattern, sizeof pattern, "%s/made/deeper/0.tar/x/%%d.tar", dir);
    w = (stk_writer *)1;
    assert_int_equal(stk_writer_create(pattern, 1, 1, 0, &w, msg, sizeof msg), STK_EIO);
    assert_null(w);
    assert_non_null(strstr(msg, "made/deeper/0.tar/x: cannot create the output directory"));
    snprintf(pattern, sizeof pattern, "%s/made/%%d/x.tar", dir);
    assert_int_equal(stk_writer_create(pattern, 1, 1, 0, &w, msg, sizeof msg), STK_EINVAL);
    assert_non_null(strstr(msg, "in the file name"));
}

static void path_in_dir(char *path, size_t size, const char *name)
{
    snprintf(path, size, "%s/%s", dir, name);
}

static void write_text(const char *name, const char *text)
{
    char path[128];
    path_in_dir(path, sizeof path, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static int text_is(const char *name, const char *text)
{
    char path[128], buf[64] = "";
    path_in_dir(path, sizeof path, name);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strcmp(buf, text) == 0;
}

static void plant_link(const char *name, const char *target)
{
    char path[128], to[128];
    path_in_dir(path, sizeof path, name);
    path_in_dir(to, sizeof to, target);
    assert_int_equal(symlink(to, path), 0);
}

static int is_link(const char *name)
{
    char path[128];
    path_in_dir(path, sizeof path, name);
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

/* add_samples(), then close; returns what close returned. */
static int write_samples(stk_writer *w, int n, uint64_t *shards)
{
    add_samples(w, n);
    return stk_writer_close(w, shards, NULL);
}

static stk_writer *create_flags(const char *name, uint64_t max_samples, unsigned flags, int *rc)
{
    char pattern[128], msg[256];
    path_in_dir(pattern, sizeof pattern, name);
    stk_writer *w = NULL;
    *rc = stk_writer_create(pattern, max_samples, 1000, flags, &w, msg, sizeof msg);
    if (*rc == STK_EEXIST)
        assert_non_null(strstr(msg, "already exists"));
    return w;
}

/* Links planted where the writer used to write (NAME.tmp) are never
 * followed; a link at a shard's own name is an existing output: refused,
 * or with STK_OUTPUT_OVERWRITE replaced (the link, not its target). */
static void test_planted_links(void **state)
{
    (void)state;
    write_text("victim", "precious");
    plant_link("link-0.tar.tmp", "victim");
    plant_link("link-1.tar.tmp", "victim");
    stk_writer *w = create("link-%d.tar", 1, 1000);
    uint64_t shards;
    assert_int_equal(write_samples(w, 2, &shards), 0);
    stk_writer_destroy(w);
    assert_int_equal(shards, 2);
    assert_true(text_is("victim", "precious"));
    assert_true(is_link("link-0.tar.tmp") && is_link("link-1.tar.tmp"));

    plant_link("at-0.tar", "victim");
    int rc;
    assert_null(create_flags("at-%d.tar", 1, 0, &rc));
    assert_int_equal(rc, STK_EEXIST);
    w = create_flags("at-%d.tar", 1, STK_OUTPUT_OVERWRITE, &rc);
    assert_int_equal(rc, 0);
    assert_int_equal(write_samples(w, 1, &shards), 0);
    stk_writer_destroy(w);
    assert_true(text_is("victim", "precious"));
    assert_false(is_link("at-0.tar"));
    assert_true(exists("at-0.tar"));
    /* A dangling link is an existing name too. */
    plant_link("dangling-0.tar", "nothing-there");
    assert_null(create_flags("dangling-%d.tar", 1, 0, &rc));
    assert_int_equal(rc, STK_EEXIST);
}

/* A second run into the same names: refused at create; a name taken after
 * create fails the run at close; overwriting replaces the shards and
 * removes the earlier run's shards after the last one written. */
static void test_existing_shards(void **state)
{
    (void)state;
    int rc;
    uint64_t shards;
    stk_writer *w = create("run-%d.tar", 1, 1000);
    assert_int_equal(write_samples(w, 5, &shards), 0);
    stk_writer_destroy(w);
    assert_int_equal(shards, 5);
    assert_null(create_flags("run-%d.tar", 2, 0, &rc));
    assert_int_equal(rc, STK_EEXIST);

    w = create_flags("run-%d.tar", 2, STK_OUTPUT_OVERWRITE, &rc);
    assert_int_equal(write_samples(w, 3, &shards), 0);
    assert_int_equal(shards, 2);
    assert_int_equal(stk_writer_removed(w), 3); /* run-2..4 */
    stk_writer_destroy(w);
    assert_true(exists("run-1.tar"));
    assert_int_equal(count_prefixed("run-"), 2);

    /* Taken after create: the run fails whole at close, nothing of it
     * published, the other file untouched. */
    w = create("late-%d.tar", 1, 1000);
    write_text("late-1.tar", "someone else's");
    const struct stk_member m[] = {{"txt", (const uint8_t *)"x", 1}};
    assert_int_equal(stk_writer_add(w, "a", m, 1), 0);
    assert_int_equal(stk_writer_add(w, "b", m, 1), 0);
    assert_int_equal(stk_writer_add(w, "c", m, 1), 0);
    assert_int_equal(stk_writer_close(w, &shards, NULL), STK_EEXIST);
    assert_int_equal(shards, 3);
    assert_non_null(strstr(stk_writer_errmsg(w), "late-1.tar"));
    assert_int_equal(stk_writer_add(w, "d", m, 1), STK_EINVAL); /* the run is over */
    stk_writer_destroy(w);
    assert_true(text_is("late-1.tar", "someone else's"));
    assert_int_equal(count_prefixed("late-"), 1);
}

/* Files named PREFIX NUMBER SUFFIX are one family, whatever the width or
 * the number (shards of an earlier run beyond a gap, or written with
 * another width): refused, or removed after the new shards are in place
 * when overwriting. Other names, another prefix, directories: left alone. */
static void test_shards_of_another_run(void **state)
{
    (void)state;
    write_text("fam-7.tar", "old");
    write_text("fam-000012.tar", "old");
    write_text("fam-x.tar", "not a shard");
    write_text("fam-3.tar.tmp.1.2", "a killed run's temporary file");
    write_text("famous-0.tar", "another dataset");
    char sub[128];
    path_in_dir(sub, sizeof sub, "fam-5.tar");
    assert_int_equal(mkdir(sub, 0700), 0);
    int rc;
    assert_null(create_flags("fam-%06d.tar", 1, 0, &rc));
    assert_int_equal(rc, STK_EEXIST);
    char pattern[128], msg[512];
    path_in_dir(pattern, sizeof pattern, "fam-%06d.tar");
    stk_writer *w;
    assert_int_equal(stk_writer_create(pattern, 1, 1000, 0, &w, msg, sizeof msg), STK_EEXIST);
    assert_non_null(strstr(msg, "fam-000012.tar already exists (2 file(s) named"));

    w = create_flags("fam-%06d.tar", 1, STK_OUTPUT_OVERWRITE, &rc);
    uint64_t shards;
    assert_int_equal(write_samples(w, 2, &shards), 0);
    assert_int_equal(shards, 2);
    assert_int_equal(stk_writer_removed(w), 2);
    stk_writer_destroy(w);
    assert_true(exists("fam-000000.tar") && exists("fam-000001.tar"));
    assert_false(exists("fam-7.tar") || exists("fam-000012.tar"));
    assert_true(exists("fam-x.tar") && exists("famous-0.tar") && exists("fam-5.tar"));
    assert_true(exists("fam-3.tar.tmp.1.2"));
}

/* Two writers with the same pattern at once: each shard is one writer's
 * whole shard, never a mix, and the second to finish a name fails. */
static void test_two_writers_one_pattern(void **state)
{
    (void)state;
    stk_writer *a = create("both-%d.tar", 10, 1000), *b = create("both-%d.tar", 10, 1000);
    const struct stk_member ma[] = {{"txt", (const uint8_t *)"from a", 6}};
    const struct stk_member mb[] = {{"txt", (const uint8_t *)"from b", 6}};
    assert_int_equal(stk_writer_add(a, "k", ma, 1), 0);
    assert_int_equal(stk_writer_add(b, "k", mb, 1), 0);
    assert_int_equal(count_prefixed("both-0.tar.tmp."), 2); /* a temporary file each */
    assert_int_equal(stk_writer_close(a, NULL, NULL), 0);
    assert_int_equal(stk_writer_close(b, NULL, NULL), STK_EEXIST);
    stk_writer_destroy(a);
    stk_writer_destroy(b);
    assert_int_equal(count_prefixed("both-"), 1);
}

/* Failing the Nth allocation for every N: a clean STK_ENOMEM, no leak (ASan),
 * and never a shard with half a sample under its final name. */
static void test_allocation_failures(void **state)
{
    (void)state;
    const struct stk_member m[] = {{"txt", (const uint8_t *)"0123456789", 10},
                                   {"cls", (const uint8_t *)"3", 1}};
    int failures = 0;
    for (unsigned long n = 1; n < 1000; n++) {
        char pattern[128], msg[256];
        snprintf(pattern, sizeof pattern, "%s/alloc-%lu-%%d.tar", dir, n);
        stk__alloc_fail_after(n);
        stk_writer *w = NULL;
        int rc = stk_writer_create(pattern, 2, 1000, 0, &w, msg, sizeof msg);
        for (int i = 0; rc == 0 && i < 5; i++) {
            char key[8];
            snprintf(key, sizeof key, "k%d", i);
            rc = stk_writer_add(w, key, m, 2);
        }
        uint64_t shards = 0;
        if (rc == 0)
            rc = stk_writer_close(w, &shards, NULL);
        stk__alloc_fail_after(0);
        stk_writer_destroy(w);
        if (rc == 0) {
            assert_int_equal(shards, 3);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        failures++;
    }
    assert_true(failures >= 3);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-writer-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_patterns),
        cmocka_unit_test(test_bad_names_write_nothing),
        cmocka_unit_test(test_names_are_bytes),
        cmocka_unit_test(test_rollover),
        cmocka_unit_test(test_destroy_without_close),
        cmocka_unit_test(test_missing_directory),
        cmocka_unit_test(test_allocation_failures),
        cmocka_unit_test(test_planted_links),
        cmocka_unit_test(test_existing_shards),
        cmocka_unit_test(test_shards_of_another_run),
        cmocka_unit_test(test_two_writers_one_pattern),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
