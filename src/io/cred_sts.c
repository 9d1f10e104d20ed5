/* SPDX-License-Identifier: MIT */
/*
 * cred_sts.c - temporary AWS credentials from STS: AssumeRoleWithWebIdentity
 * (a JWT in a file, unsigned request) and AssumeRole (SigV4-signed by
 * libcurl with the source profile's keys). Both answer the same XML
 * Credentials element, read with expat as the listings are; only the
 * service's error code and message go into messages, never a form field.
 */
#include "io/cred_sts.h"

#include <curl/curl.h>
#include <expat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "io/cred_http.h"
#include "stoker.h"

#define TIMEOUT_MS 10000u

/* Copy the four fields into c; 1, or an error naming who. */
int stk__cred_aws_take(const char *who, const char *id, const char *secret, const char *token,
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

/* An answer other than 200 as an error: transient, refused or other. */
int stk__cred_aws_status_error(const char *who, const char *url, long status, struct stk__err *err)
{
    int code = stk__cred_status_transient(status)                ? STK_EIO
               : status == 400 || status == 401 || status == 403 ? STK_EACCESS
                                                                 : STK_EHTTP;
    return stk__errf(err, code, "%s: %s answered HTTP %ld", who, url, status);
}

/* ------------------------------------------------------------ answers */

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

void stk__cred_sts_url(const char *region, char *url, size_t cap)
{
    const char *sts = getenv("AWS_ENDPOINT_URL_STS");
    if (sts != NULL && sts[0] != '\0')
        snprintf(url, cap, "%s", sts);
    else
        snprintf(url, cap, "https://sts.%s.amazonaws.com/", region);
}

/* POST the form body to url (signed when sign is not NULL) and read the
 * Credentials of the answer into c. */
static int sts_call(const char *who, const char *url, const char *body,
                    const struct stk__cred_sigv4 *sign, const char *token_header,
                    struct stk__cloud_creds *c, struct stk__err *err)
{
    struct sts_xml *x = stk__calloc(1, sizeof *x);
    struct stk__cred_answer a = {0};
    XML_Parser p = NULL;
    int rc;
    if (x == NULL) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
        goto out;
    }
    const char *headers[] = {"Content-Type: application/x-www-form-urlencoded",
                             "Accept: application/xml", token_header};
    size_t n = token_header != NULL ? 3 : 2;
    rc = sign != NULL ? stk__cred_http_signed(who, url, headers, n, body, TIMEOUT_MS, sign, &a, err)
                      : stk__cred_http(who, "POST", url, headers, n, body, TIMEOUT_MS, &a, err);
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
        rc = stk__cred_aws_status_error(who, url, a.status, err);
        if (x->code[0] != '\0') {
            char why[STK__ERRMSG_MAX];
            snprintf(why, sizeof why, "%s", err->msg);
            stk__errf(err, rc, "%.600s: %.100s: %.300s", why, x->code, x->message);
        }
    } else if (!parsed) {
        rc = stk__errf(err, STK_EHTTP, "%s: the answer is not XML", who);
    } else {
        rc = stk__cred_aws_take(
            who, x->field[0][0] ? x->field[0] : NULL, x->field[1][0] ? x->field[1] : NULL,
            x->field[2][0] ? x->field[2] : NULL, x->field[3][0] ? x->field[3] : NULL, c, err);
    }
out:
    if (p != NULL)
        XML_ParserFree(p);
    if (x != NULL)
        stk__cred_wipe(x, sizeof *x);
    stk__free(x);
    stk__cred_answer_free(&a);
    return rc;
}

/* "Action=ACTION&Version=2011-06-15" and each of the n (name, value) pairs
 * whose value is not NULL, URL-encoded: a new string wiped when freed. */
static char *form(const char *action, const char *const *pairs, size_t n)
{
    size_t len = strlen(action) + 64;
    char *enc[8] = {0};
    int bad = n > 4;
    for (size_t i = 0; !bad && i < n; i++) {
        if (pairs[2 * i + 1] == NULL)
            continue;
        enc[i] = curl_easy_escape(NULL, pairs[2 * i + 1], 0);
        bad |= enc[i] == NULL;
        len += enc[i] != NULL ? strlen(pairs[2 * i]) + strlen(enc[i]) + 2 : 0;
    }
    char *body = bad ? NULL : stk__malloc(len);
    if (body != NULL) {
        size_t k = (size_t)snprintf(body, len, "Action=%s&Version=2011-06-15", action);
        for (size_t i = 0; i < n; i++)
            if (enc[i] != NULL)
                k += (size_t)snprintf(body + k, len - k, "&%s=%s", pairs[2 * i], enc[i]);
    }
    for (size_t i = 0; i < n; i++)
        if (enc[i] != NULL) {
            stk__cred_wipe(enc[i], strlen(enc[i]));
            curl_free(enc[i]);
        }
    return body;
}

int stk__cred_sts_web_identity(const char *token_file, const char *role, const char *region,
                               struct stk__cloud_creds *c, struct stk__err *err)
{
    char url[1024];
    stk__cred_sts_url(region, url, sizeof url);
    snprintf(c->source, sizeof c->source,
             "web identity ($AWS_WEB_IDENTITY_TOKEN_FILE %.140s, role %.140s) at %.140s",
             token_file, role, url);
    char *jwt = stk__cred_read_file("web identity token file", token_file, err);
    if (jwt == NULL)
        return err->code;
    jwt[strcspn(jwt, "\r\n")] = '\0';
    const char *session = getenv("AWS_ROLE_SESSION_NAME");
    const char *pairs[] = {
        "RoleArn",          role,
        "RoleSessionName",  session != NULL && session[0] != '\0' ? session : "stoker",
        "WebIdentityToken", jwt};
    char *body = form("AssumeRoleWithWebIdentity", pairs, 3);
    stk__cred_wipe_free(jwt);
    int rc = body != NULL ? sts_call(c->source, url, body, NULL, NULL, c, err)
                          : stk__errf(err, STK_ENOMEM, "out of memory");
    stk__cred_wipe_free(body);
    return rc;
}

int stk__cred_sts_assume_role(const char *who, const char *role, const char *session,
                              const char *external_id, const char *region,
                              const struct stk__cloud_creds *from, struct stk__cloud_creds *c,
                              struct stk__err *err)
{
    char url[1024], provider[96];
    stk__cred_sts_url(region, url, sizeof url);
    snprintf(c->source, sizeof c->source, "%.400s at %.100s", who, url);
    snprintf(provider, sizeof provider, "aws:amz:%.60s:sts", region);
    const char *pairs[] = {"RoleArn", role, "RoleSessionName", session, "ExternalId", external_id};
    char *body = form("AssumeRole", pairs, 3);
    size_t up_len = strlen(from->key_id) + strlen(from->secret) + 2;
    size_t tok_len = strlen(from->token) + 32;
    char *userpwd = stk__malloc(up_len), *token = NULL;
    if (userpwd != NULL)
        snprintf(userpwd, up_len, "%s:%s", from->key_id, from->secret);
    if (from->token[0] != '\0' && (token = stk__malloc(tok_len)) != NULL)
        snprintf(token, tok_len, "X-Amz-Security-Token: %s", from->token);
    int rc;
    if (body == NULL || userpwd == NULL || (from->token[0] != '\0' && token == NULL)) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory");
    } else {
        const struct stk__cred_sigv4 sign = {provider, userpwd};
        rc = sts_call(c->source, url, body, &sign, token, c, err);
    }
    stk__cred_wipe_free(body);
    stk__cred_wipe_free(userpwd);
    stk__cred_wipe_free(token);
    return rc;
}
