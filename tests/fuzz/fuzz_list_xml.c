/* SPDX-License-Identifier: MIT */
/*
 * fuzz_list_xml.c - libFuzzer target: arbitrary bytes as a ListObjectsV2
 * response page (what an S3 or GCS server, or anything pretending to be
 * one, sends back to a prefix listing).
 *
 * Each input is parsed twice: once freely, once under stoker's allocation
 * failure injection (alloc.h) with a cap of allocations that expat, which
 * allocates through stk__malloc, shares. Checked (a violation traps):
 *  - success: every key is non-empty and shorter than 8 KiB, the token (if
 *    any) too, and a second parse gives the same keys, flag and token;
 *  - failure: err.code == rc, a message, rc one of STK_EFORMAT, STK_ELIMIT,
 *    or STK_ENOMEM only when the cap was reached;
 *  - stk__list_page_free() releases everything (ASan's leak check).
 */
#include <string.h>

#include "base/alloc.h"
#include "fuzz.h"
#include "list/list_xml.h"
#include "stoker.h"

#define MAX_INPUT (1u << 20)
#define MAX_ALLOCS 2048ul

static void check_page(const struct stk__list_page *p)
{
    for (size_t i = 0; i < p->keys.count; i++) {
        size_t n = strlen(p->keys.items[i]);
        FUZZ_CHECK(n > 0 && n < 8192);
    }
    if (p->next_token != NULL)
        FUZZ_CHECK(strlen(p->next_token) > 0 && strlen(p->next_token) < 8192);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_INPUT)
        return 0;
    const char *xml = (const char *)data;
    struct stk__list_page a, b;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__list_parse(xml, size, &a, &err);
    if (rc == 0) {
        check_page(&a);
    } else {
        FUZZ_CHECK(err.code == rc && err.msg[0] != '\0');
        FUZZ_CHECK(rc == STK_EFORMAT || rc == STK_ELIMIT);
    }

    stk__err_clear(&err);
    stk__alloc_fail_after(MAX_ALLOCS);
    int rc2 = stk__list_parse(xml, size, &b, &err);
    unsigned long made = stk__alloc_fail_after(0);
    if (rc2 == STK_ENOMEM) {
        FUZZ_CHECK(made >= MAX_ALLOCS && err.code == rc2);
    } else {
        FUZZ_CHECK(rc2 == rc);
        if (rc == 0) {
            FUZZ_CHECK(a.keys.count == b.keys.count && a.truncated == b.truncated);
            for (size_t i = 0; i < a.keys.count; i++)
                FUZZ_CHECK(strcmp(a.keys.items[i], b.keys.items[i]) == 0);
            FUZZ_CHECK((a.next_token == NULL) == (b.next_token == NULL));
            if (a.next_token != NULL)
                FUZZ_CHECK(strcmp(a.next_token, b.next_token) == 0);
        }
    }
    stk__list_page_free(&a);
    stk__list_page_free(&b);
    return 0;
}
