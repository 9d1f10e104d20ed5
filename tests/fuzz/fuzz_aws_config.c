/* SPDX-License-Identifier: MIT */
/*
 * fuzz_aws_config.c - libFuzzer target: arbitrary bytes as an AWS shared
 * config file (first byte even) or credentials file (odd), the rest being
 * the file (what a user, or a tool writing ~/.aws/config, hands stoker).
 *
 * Each input is parsed twice: once freely, once under stoker's allocation
 * failure injection (alloc.h) with a small cap. Checked (a violation traps):
 *  - success: every entry has a profile that stk__aws_ini_has() finds, a
 *    key without capitals, blanks at either end, '=' or ':', and
 *    stk__aws_ini_get() returns that entry's value (keys are unique per
 *    profile); no value starts with a blank;
 *  - failure: err.code == rc, a message naming "line" or the NUL byte,
 *    rc STK_EINVAL, or STK_ENOMEM only when the cap was reached;
 *  - the second parse agrees with the first (same entries);
 *  - stk__aws_ini_free() releases everything (ASan's leak check).
 */
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "io/aws_config.h"
#include "stoker.h"

#define MAX_INPUT (1u << 20)
#define MAX_ALLOCS 4ul

static int blank(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

static void check(const struct stk__aws_ini *ini)
{
    for (size_t i = 0; i < ini->count; i++) {
        const struct stk__aws_entry *e = &ini->entries[i];
        FUZZ_CHECK(e->profile != NULL && stk__aws_ini_has(ini, e->profile));
        if (e->key == NULL)
            continue;
        size_t n = strlen(e->key);
        FUZZ_CHECK(n > 0 && !blank(e->key[0]) && !blank(e->key[n - 1]));
        for (size_t k = 0; k < n; k++)
            FUZZ_CHECK(!(e->key[k] >= 'A' && e->key[k] <= 'Z') && e->key[k] != '=' &&
                       e->key[k] != ':');
        FUZZ_CHECK(e->value != NULL && !blank(e->value[0]));
        FUZZ_CHECK(stk__aws_ini_get(ini, e->profile, e->key) == e->value);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > MAX_INPUT)
        return 0;
    enum stk__aws_file kind = data[0] & 1 ? STK__AWS_CREDENTIALS : STK__AWS_CONFIG;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    struct stk__aws_ini a, b;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__aws_ini_parse(text, len, kind, "fuzz", &a, &err);
    if (rc == 0) {
        check(&a);
    } else {
        FUZZ_CHECK(err.code == rc && rc == STK_EINVAL);
        FUZZ_CHECK(strstr(err.msg, "line ") != NULL || strstr(err.msg, "NUL") != NULL);
        FUZZ_CHECK(a.count == 0 && a.text == NULL);
    }

    stk__err_clear(&err);
    stk__alloc_fail_after(MAX_ALLOCS);
    int rc2 = stk__aws_ini_parse(text, len, kind, "fuzz", &b, &err);
    unsigned long made = stk__alloc_fail_after(0);
    if (rc2 == STK_ENOMEM) {
        FUZZ_CHECK(made >= MAX_ALLOCS && err.code == rc2);
    } else {
        FUZZ_CHECK(rc2 == rc);
        if (rc == 0) {
            FUZZ_CHECK(a.count == b.count);
            for (size_t i = 0; i < a.count; i++) {
                FUZZ_CHECK(strcmp(a.entries[i].profile, b.entries[i].profile) == 0);
                FUZZ_CHECK((a.entries[i].key == NULL) == (b.entries[i].key == NULL));
                if (a.entries[i].key != NULL)
                    FUZZ_CHECK(strcmp(a.entries[i].key, b.entries[i].key) == 0 &&
                               strcmp(a.entries[i].value, b.entries[i].value) == 0);
            }
        }
    }
    stk__aws_ini_free(&a);
    stk__aws_ini_free(&b);
    return 0;
}
