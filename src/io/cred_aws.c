/* SPDX-License-Identifier: MIT */
/*
 * cred_aws.c - temporary AWS credentials from STS (web identity), the
 * container credentials endpoint and EC2 instance metadata (IMDSv2).
 *
 * STS answers XML (read with expat, which the listings already use); the
 * container endpoint and IMDS answer JSON (cJSON). All three hand out
 * AccessKeyId, SecretAccessKey, a session token and an absolute
 * Expiration, which the cache (cred_cache.c) checks against this host's
 * clock. Only error codes and messages of the services go into messages.
 */
#include "io/cred_aws.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "io/cred_http.h"
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

/* Copy the four fields into c; 1, or an error naming who. */
static int take(const char *who, const char *id, const char *secret, const char *token,
                const char *expiration, struct stk__cloud_creds *c, struct stk__err *err)
{
    if (id == NULL || secret == NULL || token == NULL || expiration == NULL)
        return stk__errf(err, STK_EHTTP,
                         "%s: the answer lacks AccessKeyId, SecretAccessKey, "
                         "the session token or Expiration",
                         who);
    int64_t expires = stk__cred_parse_time(expiration);
    if (expires < 0)
        return stk__errf(err, STK_EHTTP, "%s: Expiration '%.40s' is not an RFC 3339 UTC time", who,
                         expiration);
    if (stk__cred_copy(c->key_id, sizeof c->key_id, id) < 0 ||
        stk__cred_copy(c->secret, sizeof c->secret, secret) < 0 ||
        stk__cred_copy(c->token, sizeof c->token, token) < 0)
        return stk__errf(err, STK_EHTTP, "%s: a credential in the answer is too long", who);
    c->expires_ms = expires * 1000;
    return 1;
}

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
        rc = take(who, string(doc, "AccessKeyId"), string(doc, "SecretAccessKey"),
                  string(doc, "Token"), string(doc, "Expiration"), c, err);
    for (cJSON *item = doc != NULL ? doc->child : NULL; item != NULL; item = item->next)
        if (cJSON_IsString(item))
            stk__cred_wipe(item->valuestring, strlen(item->valuestring));
    cJSON_Delete(doc);
    return rc;
}

/* An answer other than 200 as an error: transient, refused or other. */
static int status_error(const char *who, const char *url, long status, struct stk__err *err)
{
    int code = stk__cred_status_transient(status)                ? STK_EIO
               : status == 400 || status == 401 || status == 403 ? STK_EACCESS
                                                                 : STK_EHTTP;
    return stk__errf(err, code, "%s: %s answered HTTP %ld", who, url, status);
}

/* ---------------------------------------------------------- web identity */

struct sts_xml {
    char field[4][4096]; /* AccessKeyId, SecretAccessKey, SessionToken, Expiration */
    char code[128], message[512];
    char *into; /* the field being read, NULL outside one */
    size_t cap, len;
};

static const char *const STS_FIELDS[] = {"AccessKeyId", "SecretAccessKey", "SessionToken",
                                         "Expiration"};

static void XMLCALL sts_start(void *data, const XML_Char *name, const XML_Char **attrs)
{
    struct sts_xml *x = data;
    (void)attrs;
    x->into = NULL;
    for (size_t i = 0; i < 4; i++)
        if (strcmp(name, STS_FIELDS[i]) == 0)
            x->into = x->field[i], x->cap = sizeof x->field[i];
    if (strcmp(name, "Code") == 0)
        x->into = x->code, x->cap = sizeof x->code;
    if (strcmp(name, "Message") == 0)
        x->into = x->message, x->cap = sizeof x->message;
    x->len = 0;
}

static void XMLCALL sts_end(void *data, const XML_Char *name)
{
    (void)name;
    ((struct sts_xml *)data)->into = NULL;
}

static void XMLCALL sts_text(void *data, const XML_Char *s, int n)
{
    struct sts_xml *x = data;
    if (x->into == NULL || x->len + (size_t)n >= x->cap)
        return;
    memcpy(x->into + x->len, s, (size_t)n);
    x->len += (size_t)n;
    x->into[x->len] = '\0';
}

static int web_identity(const char *token_file, const char *role, const char *region,
                        struct stk__cloud_creds *c, struct stk__err *err)
{
    char url[1024];
    const char *sts = env("AWS_ENDPOINT_URL_STS");
    if (sts != NULL)
        snprintf(url, sizeof url, "%s", sts);
    else
        snprintf(url, sizeof url, "https://sts.%s.amazonaws.com/", region);
    snprintf(c->source, sizeof c->source,
             "web identity ($AWS_WEB_IDENTITY_TOKEN_FILE %.140s, role %.140s) at %.140s",
             token_file, role, url);
    char *jwt = stk__cred_read_file("web identity token file", token_file, err);
    if (jwt == NULL)
        return err->code;
    jwt[strcspn(jwt, "\r\n")] = '\0';
    const char *session = env("AWS_ROLE_SESSION_NAME");
    char *e_role = curl_easy_escape(NULL, role, 0);
    char *e_session = curl_easy_escape(NULL, session ? session : "stoker", 0);
    char *e_jwt = curl_easy_escape(NULL, jwt, 0);
    stk__cred_wipe_free(jwt);
    char *body = NULL;
    struct sts_xml *x = stk__calloc(1, sizeof *x);
    struct stk__cred_answer a = {0};
    XML_Parser p = NULL;
    int rc;
    if (e_role != NULL && e_session != NULL && e_jwt != NULL && x != NULL) {
        size_t len = strlen(e_role) + strlen(e_session) + strlen(e_jwt) + 128;
        body = stk__malloc(len);
        if (body != NULL)
            snprintf(body, len,
                     "Action=AssumeRoleWithWebIdentity&Version=2011-06-15&RoleArn=%s&"
                     "RoleSessionName=%s&WebIdentityToken=%s",
                     e_role, e_session, e_jwt);
    }
    if (e_jwt != NULL)
        stk__cred_wipe(e_jwt, strlen(e_jwt));
    curl_free(e_role);
    curl_free(e_session);
    curl_free(e_jwt);
    if (body == NULL || x == NULL) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        goto out;
    }
    static const char *const headers[] = {"Content-Type: application/x-www-form-urlencoded",
                                          "Accept: application/xml"};
    rc = stk__cred_http(c->source, "POST", url, headers, 2, body, TIMEOUT_MS, &a, err);
    if (rc < 0)
        goto out;
    p = XML_ParserCreate(NULL);
    if (p == NULL) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        goto out;
    }
    XML_SetUserData(p, x);
    XML_SetElementHandler(p, sts_start, sts_end);
    XML_SetCharacterDataHandler(p, sts_text);
    int parsed = XML_Parse(p, a.body, (int)a.len, 1) == XML_STATUS_OK;
    if (a.status != 200) {
        rc = status_error(c->source, url, a.status, err);
        if (x->code[0] != '\0') {
            char why[STK__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            stk__errf(err, rc, "%.600s: %.100s: %.300s", why, x->code, x->message);
        }
    } else if (!parsed) {
        rc = stk__errf(err, STK_EHTTP, "%s: the answer is not XML", c->source);
    } else {
        rc = take(c->source, x->field[0][0] ? x->field[0] : NULL,
                  x->field[1][0] ? x->field[1] : NULL, x->field[2][0] ? x->field[2] : NULL,
                  x->field[3][0] ? x->field[3] : NULL, c, err);
    }
out:
    if (p != NULL)
        XML_ParserFree(p);
    if (x != NULL)
        stk__cred_wipe(x, sizeof *x);
    stk__free(x);
    stk__cred_wipe_free(body);
    stk__cred_answer_free(&a);
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
                             : status_error(c->source, url, a.status, err);
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
        rc = status_error(c->source, url, a.status, err);
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
            rc = status_error(c->source, url, a.status, err);
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
                                 : status_error(c->source, url, a.status, err);
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
        return web_identity(token_file, role, c->region, c, err);
    const char *full = env("AWS_CONTAINER_CREDENTIALS_FULL_URI");
    const char *relative = env("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI");
    if (full != NULL || relative != NULL)
        return container(full, relative, c, err);
    if (is_true(env("AWS_EC2_METADATA_DISABLED"))) {
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried the environment, web identity, the shared credentials "
                 "file, container credentials; not EC2 metadata: $AWS_EC2_METADATA_DISABLED)");
        return 0;
    }
    const char *base = env("AWS_EC2_METADATA_SERVICE_ENDPOINT");
    char trimmed[512];
    snprintf(trimmed, sizeof trimmed, "%s", base != NULL ? base : "http://169.254.169.254");
    size_t n = strlen(trimmed);
    while (n > 0 && trimmed[n - 1] == '/')
        trimmed[--n] = '\0';
    int rc = imds(trimmed, base == NULL, c, err);
    if (rc == 0)
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried the environment, web identity, the shared credentials "
                 "file, container credentials, EC2 metadata at %.300s)",
                 trimmed);
    return rc;
}
