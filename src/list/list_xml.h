/* SPDX-License-Identifier: MIT */
/*
 * list_xml.h - parse one page of an S3 ListObjectsV2 (or GCS XML list)
 * response: the object keys, and where the next page starts.
 */
#ifndef STK_LIST_XML_H
#define STK_LIST_XML_H

#include <stddef.h>

#include "base/error.h"
#include "list/urls.h"

struct stk__list_page {
    struct stk__strlist keys; /* <Contents><Key>, in document order */
    int truncated;            /* <IsTruncated>true</IsTruncated> */
    char *next_token;         /* <NextContinuationToken>, or NULL */
};

/* Parse the n bytes of xml into *page (zeroed first; free it with
 * stk__list_page_free even on failure). Pure: no I/O. 0, or STK_EFORMAT
 * (not XML, not a ListBucketResult, an over-long field) or STK_ENOMEM with
 * a message that quotes no document text beyond element names. */
int stk__list_parse(const char *xml, size_t n, struct stk__list_page *page,
                    struct stk__err *err);

void stk__list_page_free(struct stk__list_page *page);

#endif
