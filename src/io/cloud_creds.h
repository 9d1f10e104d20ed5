/* SPDX-License-Identifier: MIT */
/*
 * cloud_creds.h - where an object store request gets its credentials,
 * region and endpoint: the environment variables and files the providers'
 * own tools read (AWS CLI, gcloud), so existing setups work unchanged.
 */
#ifndef STK_CLOUD_CREDS_H
#define STK_CLOUD_CREDS_H

#include <stdint.h>

#include "base/error.h"

struct stk__counters;

enum stk__cloud_provider {
    STK__CLOUD_S3 = 1, /* s3:// */
    STK__CLOUD_GCS = 2 /* gs://, Cloud Storage's XML API */
};

/* Empty strings mean "not set". Holds secrets: wipe with
 * stk__cloud_creds_wipe() and never print a field but region/endpoint. */
struct stk__cloud_creds {
    char key_id[256];    /* AWS access key id, or GCS HMAC access id */
    char secret[256];    /* its secret */
    char token[4096];    /* AWS session token */
    char bearer[4096];   /* GCS OAuth 2 access token */
    char region[64];     /* signing region: AWS_REGION..., "auto" for GCS */
    char endpoint[1024]; /* base URL without trailing '/', "" for the default */
    /* Where the secrets came from, for messages and `stoker ls -v`: a
     * variable, a file or an endpoint named, never a value. */
    char source[512];
    /* Temporary credentials: when they expire (ms since 1970, 0: never),
     * and the generation of the process-wide cache they came from
     * (cred_cache.h; 0: not from the cache), for stk__cred_cache_reject(). */
    int64_t expires_ms;
    unsigned long generation;
};

/* Fill *c for provider from the environment:
 *
 * S3: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY [+ AWS_SESSION_TOKEN]; else
 *     web identity ($AWS_WEB_IDENTITY_TOKEN_FILE); else profile $AWS_PROFILE
 *     (default "default") of the shared credentials and config files
 *     (cred_profile.h: role_arn, static keys, credential_process); else
 *     container credentials, else EC2 metadata (cred_aws.h), the AWS SDKs'
 *     order; else none (anonymous requests). Region: AWS_REGION, AWS_DEFAULT_REGION, the
 *     profile's region, else us-east-1. Endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL.
 * GCS: GCS_HMAC_ACCESS_ID + GCS_HMAC_SECRET (HMAC keys, signed as AWS SigV4
 *     with region "auto"); else a bearer token from
 *     GOOGLE_OAUTH_ACCESS_TOKEN or CLOUDSDK_AUTH_ACCESS_TOKEN; else Application
 *     Default Credentials (cred_gcs.h); else none.
 * Temporary credentials come from the process-wide cache (cred_cache.h),
 * which counts its fetches in counters->cred_refreshes (counters may be
 * NULL). c->source names where the credentials came from.
 *     Endpoint: STOKER_GCS_ENDPOINT.
 *
 * 0, or STK_EINVAL with a message naming the variable or file (never a
 * value) when a setting is incomplete, too long or unreadable, or the
 * error of the temporary credentials' source (cred_cache.h). Reads the
 * environment: call it while no thread changes it. */
int stk__cloud_creds_load(enum stk__cloud_provider provider, struct stk__cloud_creds *c,
                          struct stk__counters *counters, struct stk__err *err);

/* Overwrite every secret (also safe on a zeroed struct). */
void stk__cloud_creds_wipe(struct stk__cloud_creds *c);

#endif
