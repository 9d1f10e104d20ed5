/* SPDX-License-Identifier: MIT */
/*
 * test_urls.c - brace expansion and URL list files.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "stoker.h"
#include "list/urls.h"

static void expect_expansion(const char *pattern, const char *const *want, size_t n)
{
    struct stk__strlist out = {0};
    struct stk__err err;
    int rc = stk__brace_expand(pattern, &out, &err);
    if (rc != 0)
        print_error("pattern '%s': %s\n", pattern, err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(out.count, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(out.items[i], want[i]);
    stk__strlist_free(&out);
}

static void expect_error(const char *pattern, int code)
{
    struct stk__strlist out = {0};
    struct stk__err err;
    assert_int_equal(stk__brace_expand(pattern, &out, &err), code);
    assert_non_null(strstr(err.msg, "pattern"));
    stk__strlist_free(&out);
}

static void test_plain(void **state)
{
    (void)state;
    const char *want[] = {"/data/shard.tar"};
    expect_expansion("/data/shard.tar", want, 1);
}

static void test_padded_range(void **state)
{
    (void)state;
    const char *want[] = {"train-000008.tar", "train-000009.tar", "train-000010.tar"};
    expect_expansion("train-{000008..000010}.tar", want, 3);
}

static void test_unpadded_and_descending(void **state)
{
    (void)state;
    const char *up[] = {"s9", "s10", "s11"};
    expect_expansion("s{9..11}", up, 3);
    const char *down[] = {"s3", "s2", "s1"};
    expect_expansion("s{3..1}", down, 3);
    const char *step[] = {"s0", "s5", "s10"};
    expect_expansion("s{0..10..5}", step, 3);
}

static void test_list_and_nesting(void **state)
{
    (void)state;
    const char *want[] = {"a/x0", "a/x1", "b", "c-d"};
    expect_expansion("{a/x{0..1},b,c-d}", want, 4);
    const char *product[] = {"a1", "a2", "b1", "b2"};
    expect_expansion("{a,b}{1,2}", product, 4);
    const char *empty_alt[] = {"x.tar", "x.tar.gz"};
    expect_expansion("x.tar{,.gz}", empty_alt, 2);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error("train-{000..", STK_EINVAL);
    expect_error("train}", STK_EINVAL);
    expect_error("train-{abc}", STK_EINVAL);
    expect_error("x{0..99999999999}", STK_ELIMIT);
    expect_error("{,a}", STK_EINVAL); /* an empty URL */
}

/* A pattern's credentials never reach a message. */
static void test_errors_redacted(void **state)
{
    (void)state;
    const char *bad[] = {"https://u:s3cr3t@h/train-{000..", "https://h/x.tar?sig=s3cr3t}",
                         "pipe:curl --password=s3cr3t http://h/{a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct stk__strlist out = {0};
        struct stk__err err;
        assert_int_equal(stk__brace_expand(bad[i], &out, &err), STK_EINVAL);
        if (strstr(err.msg, "s3cr3t") != NULL || strstr(err.msg, "***") == NULL)
            fail_msg("pattern '%s': message '%s'", bad[i], err.msg);
        stk__strlist_free(&out);
    }
}

static void test_list_file(void **state)
{
    (void)state;
    char path[] = "/tmp/stk-urls-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *text = "# shards\n  a-{0..1}.tar  \n\nb.tar\r\n";
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char arg[64];
    snprintf(arg, sizeof arg, "@%s", path);
    const char *patterns[] = {arg, "c.tar"};
    struct stk__strlist out = {0};
    struct stk__err err;
    assert_int_equal(stk__expand_urls(patterns, 2, &out, &err), 0);
    assert_int_equal(out.count, 4);
    assert_string_equal(out.items[0], "a-0.tar");
    assert_string_equal(out.items[1], "a-1.tar");
    assert_string_equal(out.items[2], "b.tar");
    assert_string_equal(out.items[3], "c.tar");
    stk__strlist_free(&out);
    unlink(path);

    const char *missing[] = {"@/nonexistent/list.txt"};
    assert_true(stk__expand_urls(missing, 1, &out, &err) < 0);
    assert_non_null(strstr(err.msg, "/nonexistent/list.txt"));
    stk__strlist_free(&out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),
        cmocka_unit_test(test_padded_range),
        cmocka_unit_test(test_unpadded_and_descending),
        cmocka_unit_test(test_list_and_nesting),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_errors_redacted),
        cmocka_unit_test(test_list_file),
    };
    return cmocka_run_group_tests_name("urls", tests, NULL, NULL);
}
