/* SPDX-License-Identifier: MIT */
/*
 * list_xml.c - ListObjectsV2 response pages, parsed with libexpat.
 *
 * Why expat and not a hand-written scanner: the response is real XML, and
 * keys may hold any character, escaped as entities (&amp; &lt; &#x...;) or
 * in CDATA; a scanner that gets one of these wrong silently names the
 * wrong object. Expat is a small, fuzzed, streaming parser already on every
 * Debian system (it does no I/O and loads no external entities; 2.4+
 * refuses entity-expansion bombs). We keep only three fields, by position:
 * /ListBucketResult/Contents/Key, /ListBucketResult/IsTruncated and
 * /ListBucketResult/NextContinuationToken.
 */
#include "list/list_xml.h"

#include <expat.h>
#include <stdio.h>
#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

/* S3 keys are at most 1024 bytes of UTF-8; tokens are opaque but short. */
#define MAX_TEXT 8192
#define MAX_DEPTH 64

enum field { NONE, KEY, TRUNCATED, TOKEN };

struct parse {
    XML_Parser parser;
    struct stk__list_page *page;
    int depth;
    int in_contents; /* depth 2 element is <Contents> */
    enum field field;
    char text[MAX_TEXT];
    size_t text_len;
    int rc;          /* first error */
    char why[128];   /* its reason */
};

static void stop(struct parse *p, int rc, const char *why)
{
    if (p->rc == 0) {
        p->rc = rc;
        snprintf(p->why, sizeof p->why, "%s", why);
    }
    XML_StopParser(p->parser, XML_FALSE);
}

static void on_start(void *userp, const XML_Char *name, const XML_Char **attrs)
{
    struct parse *p = userp;
    (void)attrs;
    p->depth++;
    if (p->depth > MAX_DEPTH) {
        stop(p, STK_EFORMAT, "elements nested too deeply");
        return;
    }
    if (p->depth == 1 && strcmp(name, "ListBucketResult") != 0) {
        stop(p, STK_EFORMAT, "the document is not a ListBucketResult");
        return;
    }
    p->field = NONE;
    p->text_len = 0;
    if (p->depth == 2) {
        p->in_contents = strcmp(name, "Contents") == 0;
        if (strcmp(name, "IsTruncated") == 0)
            p->field = TRUNCATED;
        else if (strcmp(name, "NextContinuationToken") == 0)
            p->field = TOKEN;
    } else if (p->depth == 3 && p->in_contents && strcmp(name, "Key") == 0) {
        p->field = KEY;
    }
}

static void on_text(void *userp, const XML_Char *s, int len)
{
    struct parse *p = userp;
    if (p->field == NONE)
        return;
    if ((size_t)len > MAX_TEXT - 1 - p->text_len) {
        stop(p, STK_EFORMAT, "a key or token is longer than 8 KiB");
        return;
    }
    memcpy(p->text + p->text_len, s, (size_t)len);
    p->text_len += (size_t)len;
}

static void on_end(void *userp, const XML_Char *name)
{
    struct parse *p = userp;
    (void)name;
    if (p->field == KEY) {
        if (p->text_len == 0)
            stop(p, STK_EFORMAT, "an empty <Key>");
        else if (stk__strlist_push(&p->page->keys, p->text, p->text_len) < 0)
            stop(p, STK_ENOMEM, "out of memory");
    } else if (p->field == TRUNCATED) {
        p->page->truncated = p->text_len == 4 && memcmp(p->text, "true", 4) == 0;
    } else if (p->field == TOKEN && p->text_len > 0) {
        stk__free(p->page->next_token);
        p->page->next_token = stk__strndup(p->text, p->text_len);
        if (p->page->next_token == NULL)
            stop(p, STK_ENOMEM, "out of memory");
    }
    p->field = NONE;
    p->text_len = 0;
    if (p->depth == 2)
        p->in_contents = 0;
    p->depth--;
}

int stk__list_parse(const char *xml, size_t n, struct stk__list_page *page,
                    struct stk__err *err)
{
    memset(page, 0, sizeof *page);
    struct parse *p = stk__calloc(1, sizeof *p);
    if (p == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory parsing a listing");
    p->page = page;
    /* expat allocates through ours, so allocation-failure tests reach it. */
    static const XML_Memory_Handling_Suite memory = {stk__malloc, stk__realloc, stk__free};
    p->parser = XML_ParserCreate_MM(NULL, &memory, NULL);
    if (p->parser == NULL) {
        stk__free(p);
        return stk__errf(err, STK_ENOMEM, "out of memory parsing a listing");
    }
    XML_SetUserData(p->parser, p);
    XML_SetElementHandler(p->parser, on_start, on_end);
    XML_SetCharacterDataHandler(p->parser, on_text);
    int rc = 0;
    /* XML_Parse takes an int length; listings are capped far below. */
    if (n > (size_t)1 << 30) {
        rc = stk__errf(err, STK_ELIMIT, "listing response larger than 1 GiB");
    } else if (XML_Parse(p->parser, xml, (int)n, XML_TRUE) != XML_STATUS_OK || p->rc != 0) {
        if (p->rc != 0)
            rc = stk__errf(err, p->rc, "bad listing response: %s", p->why);
        else if (XML_GetErrorCode(p->parser) == XML_ERROR_NO_MEMORY)
            rc = stk__errf(err, STK_ENOMEM, "out of memory parsing a listing");
        else
            rc = stk__errf(err, STK_EFORMAT, "bad listing response: %s at line %lu",
                           XML_ErrorString(XML_GetErrorCode(p->parser)),
                           (unsigned long)XML_GetCurrentLineNumber(p->parser));
    } else if (p->depth != 0) {
        rc = stk__errf(err, STK_EFORMAT, "bad listing response: truncated document");
    }
    XML_ParserFree(p->parser);
    stk__free(p);
    return rc;
}

void stk__list_page_free(struct stk__list_page *page)
{
    stk__strlist_free(&page->keys);
    stk__free(page->next_token);
    page->next_token = NULL;
    page->truncated = 0;
}
