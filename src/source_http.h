/*
 * source_http.h - http:// and https:// shards streamed with libcurl.
 */
#ifndef STK_SOURCE_HTTP_H
#define STK_SOURCE_HTTP_H

#include "source.h"

/* Start streaming url (with any credentials it carries; messages name it
 * redacted). The request is sent at once; the first read waits for the
 * response. url must outlive the source. */
int stk__source_http_open(const char *url, const struct stk__source_config *cfg,
                          struct stk__source **out, struct stk__err *err);

#endif
