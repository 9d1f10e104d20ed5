/* SPDX-License-Identifier: MIT */
/*
 * source_cloud.c - open an object store shard through the HTTP source.
 */
#include "io/source_cloud.h"

#include "io/cloud_request.h"
#include "io/source_http.h"

int stk__source_cloud_open(const char *url, const struct stk__source_config *cfg,
                           struct stk__source **out, struct stk__err *err)
{
    struct stk__cloud_request r;
    *out = NULL;
    int rc = stk__cloud_request_init(&r, url, NULL, err);
    if (rc == 0)
        rc = stk__source_http_open(r.url, &r.http, cfg, out, err);
    stk__cloud_request_free(&r);
    return rc;
}
