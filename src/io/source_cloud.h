/* SPDX-License-Identifier: MIT */
/*
 * source_cloud.h - s3:// and gs:// shards: the HTTP source with the request
 * cloud_request.h builds (endpoint, signature, headers).
 */
#ifndef STK_SOURCE_CLOUD_H
#define STK_SOURCE_CLOUD_H

#include "io/source.h"

/* Open the object url names ("s3://bucket/key", "gs://bucket/key");
 * messages name url, redacted. Retries and Range resumes as for http. */
int stk__source_cloud_open(const char *url, const struct stk__source_config *cfg,
                           struct stk__source **out, struct stk__err *err);

#endif
