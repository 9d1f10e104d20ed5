/* SPDX-License-Identifier: MIT */
/*
 * test_aws_config.c - the AWS shared config and credentials file reader:
 * sections of each kind of file, comments, delimiters, continued values,
 * line ends, the errors the AWS CLI also refuses (with their line), every
 * truncation of a file against the end of its buffer, and failing
 * allocations. The expected values are what botocore's configloader
 * (raw_config_parse, build_profile_map) gives for the same text.
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

#include "base/alloc.h"
#include "io/aws_config.h"
#include "stoker.h"

static const char CONFIG[] = "# shared config\n"
                             "[default]\n"
                             "region = eu-west-3\n"
                             "\n"
                             "[profile train]\n"
                             "Role_ARN = arn:aws:iam::123456789012:role/train\n"
                             "  ; an indented comment\n"
                             "source_profile:base\n"
                             "s3 =\n"
                             "    max_concurrent_requests = 20\n"
                             "\n"
                             "    addressing_style = path\n"
                             "note = first\n"
                             "  second # kept: no comments after a value\n"
                             "empty =\n"
                             "[profile \"two words\"]\n"
                             "credential_process = /bin/helper 'a b'\n"
                             "[sso-session corp]\n"
                             "sso_region = us-east-1\n"
                             "[dev]\n"
                             "region = nowhere\n"
                             "[profile a b]\n"
                             "x = 1\n";

static void check_value(const struct stk__aws_ini *ini, const char *profile, const char *key,
                        const char *want)
{
    const char *got = stk__aws_ini_get(ini, profile, key);
    if (want == NULL ? got != NULL : got == NULL || strcmp(got, want) != 0)
        print_error("[%s] %s: got '%s', want '%s'\n", profile, key, got ? got : "(none)",
                    want ? want : "(none)");
    if (want == NULL)
        assert_null(got);
    else
        assert_string_equal(got, want);
}

static void test_config_file(void **state)
{
    (void)state;
    struct stk__aws_ini ini;
    struct stk__err err;
    stk__err_clear(&err);
    assert_int_equal(stk__aws_ini_parse(CONFIG, strlen(CONFIG), STK__AWS_CONFIG, "cfg", &ini, &err),
                     0);
    check_value(&ini, "default", "region", "eu-west-3");
    check_value(&ini, "train", "role_arn", "arn:aws:iam::123456789012:role/train");
    check_value(&ini, "train", "source_profile", "base");
    check_value(&ini, "train", "s3", "\nmax_concurrent_requests = 20\n\naddressing_style = path");
    check_value(&ini, "train", "note", "first\nsecond # kept: no comments after a value");
    check_value(&ini, "train", "empty", "");
    check_value(&ini, "two words", "credential_process", "/bin/helper 'a b'");
    /* Not profiles in a config file: [sso-session x], [dev] without
     * "profile", and "profile a b" (three words). */
    assert_false(stk__aws_ini_has(&ini, "corp"));
    assert_false(stk__aws_ini_has(&ini, "sso-session corp"));
    assert_false(stk__aws_ini_has(&ini, "dev"));
    assert_false(stk__aws_ini_has(&ini, "a b"));
    assert_true(stk__aws_ini_has(&ini, "train"));
    check_value(&ini, "train", "region", NULL);
    stk__aws_ini_free(&ini);
    stk__aws_ini_free(&ini); /* freed twice: a no-op */
}

static void test_credentials_file(void **state)
{
    (void)state;
    /* CRLF, a lone CR, '=' and ':' in values, a section name kept as
     * written ("[ spaced ]" is " spaced ", as the CLI reads it). */
    static const char text[] = "[default]\r\naws_access_key_id = AKID\r\n"
                               "aws_secret_access_key = S=1:2\r[ spaced ]\nk=v\n"
                               "[profile x]\nk = p";
    struct stk__aws_ini ini;
    struct stk__err err;
    assert_int_equal(
        stk__aws_ini_parse(text, strlen(text), STK__AWS_CREDENTIALS, "creds", &ini, &err), 0);
    check_value(&ini, "default", "aws_access_key_id", "AKID");
    check_value(&ini, "default", "aws_secret_access_key", "S=1:2");
    check_value(&ini, " spaced ", "k", "v");
    assert_false(stk__aws_ini_has(&ini, "spaced"));
    check_value(&ini, "profile x", "k", "p"); /* no "profile" prefix in this file */
    check_value(&ini, "x", "k", NULL);
    stk__aws_ini_free(&ini);
}

/* Two headers naming one profile: the later section replaces the earlier
 * (botocore's profile map); the same header twice is refused below. */
static void test_profile_redefined(void **state)
{
    (void)state;
    static const char text[] = "[profile a]\nk = 1\n[profile  a ]\nj = 2\n"
                               "[default]\nx = 1\n[profile default]\ny = 2\n";
    struct stk__aws_ini ini;
    struct stk__err err;
    assert_int_equal(stk__aws_ini_parse(text, strlen(text), STK__AWS_CONFIG, "cfg", &ini, &err), 0);
    check_value(&ini, "a", "k", NULL);
    check_value(&ini, "a", "j", "2");
    check_value(&ini, "default", "x", NULL);
    check_value(&ini, "default", "y", "2");
    stk__aws_ini_free(&ini);
}

static void expect_error(enum stk__aws_file kind, const char *text, const char *needle)
{
    struct stk__aws_ini ini;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__aws_ini_parse(text, strlen(text), kind, "/home/u/.aws/config", &ini, &err);
    if (rc != STK_EINVAL || strstr(err.msg, needle) == NULL)
        print_error("'%s': rc %d, '%s' lacks '%s'\n", text, rc, err.msg, needle);
    assert_int_equal(rc, STK_EINVAL);
    assert_non_null(strstr(err.msg, needle));
    assert_non_null(strstr(err.msg, "/home/u/.aws/config"));
    assert_null(strstr(err.msg, "SECRET"));
    assert_null(ini.text);
    assert_int_equal(ini.count, 0);
}

static void test_errors(void **state)
{
    (void)state;
    expect_error(STK__AWS_CREDENTIALS, "aws_secret_access_key = SECRET\n",
                 "line 1: a key before the first [section]");
    expect_error(STK__AWS_CONFIG, "[default]\nregion = x\nSECRET\n",
                 "line 3: neither a [section], a key = value nor a comment");
    expect_error(STK__AWS_CREDENTIALS, "[a]\nk = 1\n[b]\n[a]\n",
                 "line 4: a section is defined twice");
    expect_error(STK__AWS_CREDENTIALS, "[a]\nk = SECRET\n\nK = SECRET\n",
                 "line 4: a key is set twice in one profile");
    expect_error(STK__AWS_CONFIG, "[default]\n = SECRET\n", "line 2: a value without a key");
    static const char nul[] = "[default]\nk = v\0w\n";
    struct stk__aws_ini ini;
    struct stk__err err;
    assert_int_equal(stk__aws_ini_parse(nul, sizeof nul - 1, STK__AWS_CONFIG, "f", &ini, &err),
                     STK_EINVAL);
    assert_non_null(strstr(err.msg, "NUL byte"));
}

/* Every prefix of the file, placed against an unreadable page: an
 * over-read crashes even without a sanitizer. */
static void test_every_truncation_at_a_guard_page(void **state)
{
    (void)state;
    long page = sysconf(_SC_PAGESIZE);
    size_t n = strlen(CONFIG);
    assert_true((long)n < page);
    char *map =
        mmap(NULL, 2 * (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(map != MAP_FAILED);
    assert_int_equal(mprotect(map + page, (size_t)page, PROT_NONE), 0);
    for (size_t len = 0; len <= n; len++) {
        char *at = map + page - len;
        memcpy(at, CONFIG, len);
        struct stk__aws_ini ini;
        struct stk__err err;
        stk__err_clear(&err);
        int rc = stk__aws_ini_parse(at, len, STK__AWS_CONFIG, "cut", &ini, &err);
        /* A cut inside "[section]" makes a line that is neither. */
        if (rc != 0 && (rc != STK_EINVAL || strstr(err.msg, "neither") == NULL))
            print_error("cut at %zu: %d %s\n", len, rc, err.msg);
        assert_true(rc == 0 || (rc == STK_EINVAL && strstr(err.msg, "neither") != NULL));
        stk__aws_ini_free(&ini);
    }
    munmap(map, 2 * (size_t)page);
}

static void test_allocation_failures(void **state)
{
    (void)state;
    unsigned failures = 0;
    for (unsigned long n = 1;; n++) {
        struct stk__aws_ini ini;
        struct stk__err err;
        stk__err_clear(&err);
        stk__alloc_fail_after(n);
        int rc = stk__aws_ini_parse(CONFIG, strlen(CONFIG), STK__AWS_CONFIG, "cfg", &ini, &err);
        stk__alloc_fail_after(0);
        if (rc == 0) {
            check_value(&ini, "train", "source_profile", "base");
            stk__aws_ini_free(&ini);
            break;
        }
        assert_int_equal(rc, STK_ENOMEM);
        assert_int_equal(err.code, STK_ENOMEM);
        assert_null(ini.text);
        failures++;
    }
    assert_true(failures >= 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_credentials_file),
        cmocka_unit_test(test_profile_redefined),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_every_truncation_at_a_guard_page),
        cmocka_unit_test(test_allocation_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
