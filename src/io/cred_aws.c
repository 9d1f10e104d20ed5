/* SPDX-License-Identifier: MIT */
/*
 * cred_aws.c - the AWS SDKs' chain of temporary credentials: STS web
 * identity (cred_sts.c), the profile's role or credential_process
 * (cred_profile.c), the container credentials endpoint and EC2 instance
 * metadata (IMDSv2).
 *
 * The container endpoint and IMDS answer JSON (cJSON). All of them hand out
 * AccessKeyId, SecretAccessKey, a session token and an absolute
 * Expiration, which the cache (cred_cache.c) checks against this host's
 * clock. Only error codes and messages of the services go into messages.
 */
#include "io/cred_aws.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "io/cred_http.h"
#include "io/cred_profile.h"
#include "io/cred_sts.h"
#include "stoker.h"

#define TIMEOUT_MS 10000u
#define PROBE_MS 1000u /* the default IMDS address, as the AWS SDKs wait */
#define IMDS_TTL_S "21600"

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int is_true(const char *v) { return v != NULL && strcasecmp(v, "true") == 0; }

static const char *string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) && v->valuestring[0] != '\0' ? v->valuestring : NULL;
}

/* The JSON of the container endpoint and of IMDS. */
static int take_json(const char *who, const struct stk__cred_answer *a, struct stk__cloud_creds *c,
                     struct stk__err *err)
{
    cJSON *doc = cJSON_Parse(a->body);
    const char *code = string(doc, "Code");
    int rc;
    if (doc == NULL)
        rc = stk__errf(err, STK_EHTTP, "%s: the answer is not JSON", who);
    else if (code != NULL && strcmp(code, "Success") != 0)
        rc = stk__errf(err, STK_EACCESS, "%s: Code %.60s: %.300s", who, code,
                       string(doc, "Message") ? string(doc, "Message") : "");
    else
        rc = stk__cred_aws_take(who, string(doc, "AccessKeyId"), string(doc, "SecretAccessKey"),
                  string(doc, "Token"), string(doc, "Expiration"), c, err);
    for (cJSON *item = doc != NULL ? doc->child : NULL; item != NULL; item = item->next)
        if (cJSON_IsString(item))
            stk__cred_wipe(item->valuestring, strlen(item->valuestring));
    cJSON_Delete(doc);
    return rc;
}

/* ---------------------------------------------------------- containers */

/* The SDKs send the authorization token only to these: a FULL_URI over
 * plain http must be the loopback or the ECS/EKS agent addresses. */
static int container_host_ok(const char *url)
{
    static const char *const ok[] = {
        "http://127.",           "http://localhost:",     "http://localhost/",
        "http://[::1]",          "http://169.254.170.2:", "http://169.254.170.2/",
        "http://169.254.170.23", "http://[fd00:ec2::23]"};
    if (strncmp(url, "https://", 8) == 0)
        return 1;
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++)
        if (strncmp(url, ok[i], strlen(ok[i])) == 0)
            return 1;
    return 0;
}

static int container(const char *full, const char *relative, struct stk__cloud_creds *c,
                     struct stk__err *err)
{
    char url[1024];
    if (full != NULL)
        snprintf(url, sizeof url, "%s", full);
    else
        snprintf(url, sizeof url, "http://169.254.170.2%s", relative);
    snprintf(c->source, sizeof c->source, "container credentials %.300s (%s)", url,
             full != NULL ? "$AWS_CONTAINER_CREDENTIALS_FULL_URI"
                          : "$AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    if (!container_host_ok(url))
        return stk__errf(err, STK_EINVAL,
                         "%s: over http only a loopback address or the ECS/EKS "
                         "agent's (169.254.170.2, 169.254.170.23) gets the authorization token",
                         c->source);
    const char *token_file = env("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE");
    const char *token = env("AWS_CONTAINER_AUTHORIZATION_TOKEN");
    char *file_token = NULL, *header = NULL;
    if (token_file != NULL) {
        file_token =
            stk__cred_read_file("$AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", token_file, err);
        if (file_token == NULL)
            return err->code;
        file_token[strcspn(file_token, "\r\n")] = '\0';
        token = file_token;
    }
    size_t n = 0;
    if (token != NULL) {
        size_t len = strlen(token) + 32;
        header = stk__malloc(len);
        if (header == NULL) {
            stk__cred_wipe_free(file_token);
            return stk__errf(err, STK_ENOMEM, "out of memory");
        }
        snprintf(header, len, "Authorization: %s", token);
        n = 1;
    }
    stk__cred_wipe_free(file_token);
    const char *headers[] = {header};
    struct stk__cred_answer a;
    int rc = stk__cred_http(c->source, "GET", url, headers, n, NULL, TIMEOUT_MS, &a, err);
    stk__cred_wipe_free(header);
    if (rc == 0)
        rc = a.status == 200 ? take_json(c->source, &a, c, err)
                             : stk__cred_aws_status_error(c->source, url, a.status, err);
    stk__cred_answer_free(&a);
    return rc;
}

/* ---------------------------------------------------------------- IMDS */

static int imds(const char *base, int probing, struct stk__cloud_creds *c, struct stk__err *err)
{
    char url[1024], header[1024];
    snprintf(c->source, sizeof c->source, "EC2 instance metadata (IMDSv2) %.300s", base);
    snprintf(url, sizeof url, "%s/latest/api/token", base);
    static const char *const ttl[] = {"X-aws-ec2-metadata-token-ttl-seconds: " IMDS_TTL_S};
    struct stk__cred_answer a;
    int rc = stk__cred_http(c->source, "PUT", url, ttl, 1, NULL, probing ? PROBE_MS : TIMEOUT_MS,
                            &a, err);
    if (probing && (rc == STK_EIO || (rc == 0 && a.status != 200))) {
        /* Nobody there, or no IMDSv2 session: not on EC2 (the AWS SDKs
         * treat an instance metadata failure as "no credentials" too). */
        stk__cred_answer_free(&a);
        stk__err_clear(err);
        return 0;
    }
    if (rc == 0 && a.status != 200)
        rc = stk__cred_aws_status_error(c->source, url, a.status, err);
    if (rc == 0 && (size_t)snprintf(header, sizeof header, "X-aws-ec2-metadata-token: %s",
                                    a.body) >= sizeof header)
        rc = stk__errf(err, STK_EHTTP, "%s: the session token is too long", c->source);
    stk__cred_answer_free(&a);
    const char *headers[] = {header};
    char role[256] = "";
    if (rc == 0) {
        snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/", base);
        rc = stk__cred_http(c->source, "GET", url, headers, 1, NULL, TIMEOUT_MS, &a, err);
        if (rc == 0 && a.status == 404)
            rc = stk__errf(err, STK_EACCESS,
                           "%s: the instance has no IAM role (instance "
                           "profile)",
                           c->source);
        else if (rc == 0 && a.status != 200)
            rc = stk__cred_aws_status_error(c->source, url, a.status, err);
        else if (rc == 0)
            snprintf(role, sizeof role, "%.*s", (int)strcspn(a.body, "\r\n"), a.body);
        stk__cred_answer_free(&a);
    }
    if (rc == 0 && (role[0] == '\0' || strchr(role, '/') != NULL))
        rc = stk__errf(err, STK_EHTTP, "%s: no usable role name", c->source);
    if (rc == 0) {
        snprintf(c->source, sizeof c->source, "EC2 instance metadata (IMDSv2) %.300s, role %.150s",
                 base, role);
        snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/%s", base, role);
        rc = stk__cred_http(c->source, "GET", url, headers, 1, NULL, TIMEOUT_MS, &a, err);
        if (rc == 0)
            rc = a.status == 200 ? take_json(c->source, &a, c, err)
                                 : stk__cred_aws_status_error(c->source, url, a.status, err);
        stk__cred_answer_free(&a);
    }
    stk__cred_wipe(header, sizeof header);
    return rc;
}

int stk__cred_aws_fetch(struct stk__cloud_creds *c, struct stk__err *err)
{
    const char *token_file = env("AWS_WEB_IDENTITY_TOKEN_FILE"), *role = env("AWS_ROLE_ARN");
    if ((token_file == NULL) != (role == NULL))
        return stk__errf(err, STK_EINVAL,
                         "set both AWS_WEB_IDENTITY_TOKEN_FILE and "
                         "AWS_ROLE_ARN, or neither");
    if (token_file != NULL)
        return stk__cred_sts_web_identity(token_file, role, c->region, c, err);
    int rc = stk__cred_profile_fetch(c, err);
    if (rc != 0)
        return rc;
    const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    const char *relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    if (full != NULL || relative != NULL)
        return container(full, relative, c, err);
    if (is_true(env("AWS_EC2_METADATA_DISABLED"))) {
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried the environment, web identity, the shared credentials "
                 "and config files, container credentials; not EC2 metadata: $AWS_EC2_METADATA_DISABLED)");
        return 0;
    }
    const char *base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    char trimmed[512];
    snprintf(trimmed, sizeof trimmed, "%s", base != NULL ? base : "http://169.254.169.254");
    size_t n = strlen(trimmed);
    while (n > 0 && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    rc = imds(trimmed, base == NULL, c, err);
    if (rc == 0)
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried the environment, web identity, the shared credentials "
                 "and config files, container credentials, EC2 metadata at %.300s)",
                 trimmed);
    return rc;
}
