/* SPDX-License-Identifier: MIT */
/*
 * test_error.c - the error table (src/base/errors_table.h): every code of
 * stoker.h has its own text, and what on_error=skip may skip is bad input
 * only, never a lack of memory, a configuration problem or a bug.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "stoker.h"

/* Every code, listed apart from the table so that a row lost from it shows. */
static const int codes[] = {
    STK_OK,        STK_ENOMEM,  STK_EINVAL, STK_ENOENT, STK_EIO,     STK_EINTR,   STK_EEXIST,
    STK_EOF,       STK_EFORMAT, STK_ETRUNC, STK_ELIMIT, STK_EDUPKEY, STK_EPLAN,   STK_EBUSY,
    STK_EINTERNAL, STK_EDECODE, STK_ELABEL, STK_ECACHE, STK_EHTTP,   STK_EMEMBER, STK_EINDEX,
    STK_EACCESS,
};
#define N_CODES (sizeof codes / sizeof codes[0])

static void test_every_code_has_its_own_text(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_CODES; i++) {
        const char *text = stk_strerror(codes[i]);
        assert_string_not_equal(text, "unknown error");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(text, stk_strerror(codes[j]));
    }
    assert_string_equal(stk_strerror(-999), "unknown error");
    assert_string_equal(stk_strerror(1), "unknown error");
    assert_string_equal(stk_strerror(STK_ETRUNC), "shard is truncated");
}

static void test_bad_input_is_what_skip_skips(void **state)
{
    (void)state;
    const int bad[] = {STK_EFORMAT, STK_ETRUNC,  STK_ELIMIT, STK_EDUPKEY, STK_EDECODE,
                       STK_ELABEL,  STK_EMEMBER, STK_ENOENT, STK_EIO,     STK_EHTTP};
    const int not_bad[] = {STK_OK,    STK_EOF,    STK_EINTR,     STK_ENOMEM, STK_EINVAL, STK_EPLAN,
                           STK_EBUSY, STK_EEXIST, STK_EINTERNAL, STK_ECACHE, STK_EINDEX,
                           STK_EACCESS, -999};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_true(stk__error_is_bad_input(bad[i]));
    for (size_t i = 0; i < sizeof not_bad / sizeof not_bad[0]; i++)
        assert_false(stk__error_is_bad_input(not_bad[i]));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_code_has_its_own_text),
        cmocka_unit_test(test_bad_input_is_what_skip_skips),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
