/* SPDX-License-Identifier: MIT */
/*
 * cloud_creds.c - read object store credentials from the environment, and
 * pick the source of the rest in the order of the providers' SDKs: the AWS
 * shared files (cred_profile.c), temporary credentials (cred_cache.c).
 *
 * Secrets are copied into fixed buffers (no allocation to forget to wipe)
 * and overwritten by stk__cloud_creds_wipe().
 */
#include "io/cloud_creds.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/cred_cache.h"
#include "io/cred_http.h"
#include "io/cred_profile.h"
#include "stoker.h"

/* Copy src into dst[cap]; 0, or -1 when it does not fit. */
static int copy(char *dst, size_t cap, const char *src, size_t n)
{
    if (n >= cap)
        return -1;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Copy the first set variable of names[] into dst; 0 when none is set. */
static int from_env(char *dst, size_t cap, const char *const *names, size_t n,
                    struct stk__err *err)
{
    for (size_t i = 0; i < n; i++) {
        const char *v = env(names[i]);
        if (v == NULL)
            continue;
        if (copy(dst, cap, v, strlen(v)) < 0)
            return stk__errf(err, STK_EINVAL, "$%s is longer than %zu bytes", names[i], cap - 1);
        return 1;
    }
    return 0;
}

/* The key id and secret from the variables id_var and secret_var: 1 both
 * set, 0 neither, <0 one without the other or an error. */
static int key_pair(struct stk__cloud_creds *c, const char *const *id_var,
                    const char *const *secret_var, struct stk__err *err)
{
    int have_id = from_env(c->key_id, sizeof c->key_id, id_var, 1, err);
    int have_secret = have_id >= 0 ? from_env(c->secret, sizeof c->secret, secret_var, 1, err) : -1;
    if (have_id < 0 || have_secret < 0)
        return err->code;
    if (have_id != have_secret)
        return stk__errf(err, STK_EINVAL, "set both %s and %s, or neither", id_var[0],
                         secret_var[0]);
    return have_id;
}

static int load_s3(struct stk__cloud_creds *c, struct stk__counters *counters,
                   struct stk__err *err)
{
    static const char *const region[] = {"AWS_REGION", "AWS_DEFAULT_REGION"};
    static const char *const endpoint[] = {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"};
    static const char *const key_id[] = {"AWS_ACCESS_KEY_ID"};
    static const char *const secret[] = {"AWS_SECRET_ACCESS_KEY"};
    static const char *const token[] = {"AWS_SESSION_TOKEN"};
    int rc = from_env(c->region, sizeof c->region, region, 2, err);
    if (rc == 0)
        copy(c->region, sizeof c->region, "us-east-1", 9);
    if (rc >= 0)
        rc = from_env(c->endpoint, sizeof c->endpoint, endpoint, 2, err);
    int have_keys = rc >= 0 ? key_pair(c, key_id, secret, err) : rc;
    if (have_keys < 0)
        return have_keys;
    if (have_keys) {
        snprintf(c->source, sizeof c->source, "$AWS_ACCESS_KEY_ID");
        rc = from_env(c->token, sizeof c->token, token, 1, err);
        return rc < 0 ? rc : 0;
    }
    /* Web identity comes before the shared files in the AWS SDKs' chain;
     * a profile's static keys are used as they are, its role or
     * credential_process through the cache (cred_aws.c asks cred_profile.c). */
    if (env("AWS_WEB_IDENTITY_TOKEN_FILE") == NULL && env("AWS_ROLE_ARN") == NULL) {
        rc = stk__cred_profile_kind(c, err);
        if (rc < 0 || rc == STK__PROFILE_STATIC)
            return rc < 0 ? rc : 0;
    }
    rc = stk__cred_cache_get(STK__CLOUD_S3, c, counters, err);
    return rc < 0 ? rc : 0;
}

static int load_gcs(struct stk__cloud_creds *c, struct stk__counters *counters,
                    struct stk__err *err)
{
    static const char *const endpoint[] = {"STOKER_GCS_ENDPOINT"};
    static const char *const key_id[] = {"GCS_HMAC_ACCESS_ID"};
    static const char *const secret[] = {"GCS_HMAC_SECRET"};
    static const char *const bearer[] = {"GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN"};
    copy(c->region, sizeof c->region, "auto", 4);
    int rc = from_env(c->endpoint, sizeof c->endpoint, endpoint, 1, err);
    int have_keys = rc >= 0 ? key_pair(c, key_id, secret, err) : rc;
    if (have_keys < 0)
        return have_keys;
    if (have_keys) {
        snprintf(c->source, sizeof c->source, "$GCS_HMAC_ACCESS_ID");
        return 0;
    }
    rc = from_env(c->bearer, sizeof c->bearer, bearer, 2, err);
    if (rc < 0)
        return rc;
    if (rc > 0) {
        snprintf(c->source, sizeof c->source, "$%s",
                 env(bearer[0]) != NULL ? bearer[0] : bearer[1]);
        return 0;
    }
    rc = stk__cred_cache_get(STK__CLOUD_GCS, c, counters, err);
    return rc < 0 ? rc : 0;
}

int stk__cloud_creds_load(enum stk__cloud_provider provider, struct stk__cloud_creds *c,
                          struct stk__counters *counters, struct stk__err *err)
{
    memset(c, 0, sizeof *c);
    int rc = provider == STK__CLOUD_S3 ? load_s3(c, counters, err) : load_gcs(c, counters, err);
    if (rc == 0) {
        /* "http://127.0.0.1:9000/" and "...:9000" name the same endpoint. */
        size_t n = strlen(c->endpoint);
        while (n > 0 && c->endpoint[n - 1] == '/')
            c->endpoint[--n] = '\0';
    }
    if (rc < 0)
        stk__cloud_creds_wipe(c);
    return rc;
}

void stk__cloud_creds_wipe(struct stk__cloud_creds *c)
{
    stk__cred_wipe(c, sizeof *c);
}

int stk_cloud_credentials_source(const char *url, char *buf, size_t cap)
{
    struct stk__err err = {0};
    struct stk__cloud_creds *c = stk__calloc(1, sizeof *c);
    int rc = c == NULL                      ? stk__errf(&err, STK_ENOMEM, "out of memory")
             : strncmp(url, "s3://", 5) == 0 ? stk__cloud_creds_load(STK__CLOUD_S3, c, NULL, &err)
             : strncmp(url, "gs://", 5) == 0 ? stk__cloud_creds_load(STK__CLOUD_GCS, c, NULL, &err)
                                             : stk__errf(&err, STK_EINVAL, "not an s3:// or gs:// URL");
    if (cap > 0)
        snprintf(buf, cap, "%s", rc < 0 ? err.msg : c->source);
    if (c != NULL)
        stk__cloud_creds_wipe(c);
    stk__free(c);
    return rc;
}
