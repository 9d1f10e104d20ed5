/* SPDX-License-Identifier: MIT */
/*
 * cred_gcs.c - Google Application Default Credentials: key files, the
 * gcloud ADC file and the metadata server, each ending in an access token.
 *
 * The key files are JSON (cJSON); their private key or refresh token is
 * wiped as soon as the exchange is done. Token endpoints answer
 * {"access_token", "expires_in"} or {"error", "error_description"}: the
 * error fields are Google's codes and sentences, never a secret, so they
 * go into the message, which otherwise names only files, variables and
 * endpoint URLs.
 */
#include "io/cred_gcs.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/alloc.h"
#include "io/cred_http.h"
#include "io/cred_jwt.h"
#include "stoker.h"

#define SCOPE "https://www.googleapis.com/auth/devstorage.read_only"
#define DEFAULT_TOKEN_URI "https://oauth2.googleapis.com/token"
#define METADATA_PATH "/computeMetadata/v1/instance/service-accounts/default/token"
#define TIMEOUT_MS 10000u
/* How long the default metadata host gets to answer before stoker decides
 * it is not on Google Cloud (google-auth's probe waits about as long). */
#define PROBE_MS 1000u

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *string(const cJSON *obj, const char *name)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return cJSON_IsString(v) && v->valuestring[0] != '\0' ? v->valuestring : NULL;
}

/* Read {"access_token", "expires_in"} of a 200 answer, or turn another
 * answer into an error naming who and url. */
static int take_token(const char *who, const char *url, const struct stk__cred_answer *a,
                      struct stk__cloud_creds *c, struct stk__err *err)
{
    cJSON *doc = cJSON_Parse(a->body);
    int rc;
    if (a->status != 200) {
        const char *code = string(doc, "error"), *why = string(doc, "error_description");
        int refused = a->status == 400 || a->status == 401 || a->status == 403;
        rc = stk__errf(err,
                       stk__cred_status_transient(a->status) ? STK_EIO
                       : refused                             ? STK_EACCESS
                                                             : STK_EHTTP,
                       "%s: %s answered HTTP %ld%s%.80s%s%.300s%s", who, url, a->status,
                       code ? ": " : "", code ? code : "", why ? " (" : "", why ? why : "",
                       why ? ")" : "");
        goto out;
    }
    const char *token = string(doc, "access_token");
    const cJSON *expires = cJSON_GetObjectItemCaseSensitive(doc, "expires_in");
    if (token == NULL || !cJSON_IsNumber(expires) || expires->valuedouble <= 0) {
        rc = stk__errf(err, STK_EHTTP, "%s: %s answered without access_token and expires_in", who,
                       url);
        goto out;
    }
    if (stk__cred_copy(c->bearer, sizeof c->bearer, token) < 0) {
        rc = stk__errf(err, STK_EHTTP, "%s: the access token from %s is longer than %zu bytes", who,
                       url, sizeof c->bearer - 1);
        goto out;
    }
    c->expires_ms = now_ms() + (int64_t)(expires->valuedouble * 1000);
    rc = 1;
out:
    cJSON_Delete(doc);
    return rc;
}

/* POST form (a secret) to url as application/x-www-form-urlencoded. */
static int exchange(const char *who, const char *url, const char *form, struct stk__cloud_creds *c,
                    struct stk__err *err)
{
    static const char *const headers[] = {"Content-Type: application/x-www-form-urlencoded"};
    struct stk__cred_answer a;
    int rc = stk__cred_http(who, "POST", url, headers, 1, form, TIMEOUT_MS, &a, err);
    if (rc == 0)
        rc = take_token(who, url, &a, c, err);
    stk__cred_answer_free(&a);
    return rc;
}

/* "name=escaped(value)&..." for the n pairs; a secret; NULL: no memory. */
static char *form(const char *const *kv, size_t n)
{
    char *esc[8] = {0};
    size_t len = 1;
    char *out = NULL;
    for (size_t i = 0; i < n; i++) {
        esc[i] = curl_easy_escape(NULL, kv[2 * i + 1], 0);
        if (esc[i] == NULL)
            goto out;
        len += strlen(kv[2 * i]) + strlen(esc[i]) + 2;
    }
    out = stk__malloc(len);
    if (out == NULL)
        goto out;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%s=%s", i ? "&" : "", kv[2 * i], esc[i]);
out:
    for (size_t i = 0; i < n; i++) {
        if (esc[i] != NULL)
            stk__cred_wipe(esc[i], strlen(esc[i]));
        curl_free(esc[i]);
    }
    return out;
}

static int service_account(const char *who, const cJSON *doc, struct stk__cloud_creds *c,
                           struct stk__err *err)
{
    const char *email = string(doc, "client_email"), *key = string(doc, "private_key");
    const char *uri = string(doc, "token_uri");
    if (email == NULL || key == NULL)
        return stk__errf(err, STK_EINVAL,
                         "%s: a service_account key needs client_email and "
                         "private_key",
                         who);
    if (uri == NULL)
        uri = DEFAULT_TOKEN_URI;
    snprintf(c->source, sizeof c->source, "%.300s, service account %.150s", who, email);
    char *jwt = stk__jwt_rs256(who, key, string(doc, "private_key_id"), email, SCOPE, uri,
                               now_ms() / 1000, err);
    if (jwt == NULL)
        return err->code;
    const char *kv[] = {"grant_type", "urn:ietf:params:oauth:grant-type:jwt-bearer", "assertion",
                        jwt};
    char *body = form(kv, 2);
    stk__cred_wipe_free(jwt);
    int rc = body != NULL ? exchange(c->source, uri, body, c, err)
                          : stk__errf(err, STK_ENOMEM, "out of memory");
    stk__cred_wipe_free(body);
    return rc;
}

static int authorized_user(const char *who, const cJSON *doc, struct stk__cloud_creds *c,
                           struct stk__err *err)
{
    const char *id = string(doc, "client_id"), *secret = string(doc, "client_secret");
    const char *refresh = string(doc, "refresh_token"), *uri = string(doc, "token_uri");
    if (id == NULL || secret == NULL || refresh == NULL)
        return stk__errf(err, STK_EINVAL,
                         "%s: an authorized_user file needs client_id, "
                         "client_secret and refresh_token",
                         who);
    if (uri == NULL)
        uri = DEFAULT_TOKEN_URI;
    snprintf(c->source, sizeof c->source, "%.400s, authorized_user", who);
    const char *kv[] = {"grant_type",    "refresh_token", "client_id",     id,
                        "client_secret", secret,          "refresh_token", refresh};
    char *body = form(kv, 4);
    int rc = body != NULL ? exchange(c->source, uri, body, c, err)
                          : stk__errf(err, STK_ENOMEM, "out of memory");
    stk__cred_wipe_free(body);
    if (rc == STK_EACCESS) {
        char why[STK__ERRMSG_MAX];
        snprintf(why, sizeof why, "%s", err->msg);
        stk__errf(err, rc,
                  "%.900s; the refresh token expired or was revoked: run `gcloud auth "
                  "application-default login` again",
                  why);
    }
    return rc;
}

/* Wipe every string of a parsed key file before cJSON frees it. */
static void wipe_json(cJSON *item)
{
    for (; item != NULL; item = item->next) {
        if (cJSON_IsString(item))
            stk__cred_wipe(item->valuestring, strlen(item->valuestring));
        wipe_json(item->child);
    }
}

static int from_key_file(const char *path, const char *how, struct stk__cloud_creds *c,
                         struct stk__err *err)
{
    char who[400];
    snprintf(who, sizeof who, "credentials file %.300s (%s)", path, how);
    char what[96];
    snprintf(what, sizeof what, "credentials file (%s)", how);
    char *text = stk__cred_read_file(what, path, err);
    if (text == NULL)
        return err->code;
    cJSON *doc = cJSON_Parse(text);
    stk__cred_wipe_free(text);
    const char *type = string(doc, "type");
    int rc;
    if (type == NULL)
        rc = stk__errf(err, STK_EINVAL, "%s: not a JSON object with a \"type\"", who);
    else if (strcmp(type, "service_account") == 0)
        rc = service_account(who, doc, c, err);
    else if (strcmp(type, "authorized_user") == 0)
        rc = authorized_user(who, doc, c, err);
    else
        rc = stk__errf(err, STK_EINVAL,
                       "%s: credentials of type \"%.60s\"%s are not supported; use a "
                       "service_account key, `gcloud auth application-default login`, or the "
                       "metadata server of the platform",
                       who, type,
                       strcmp(type, "external_account") == 0 ? " (workload identity federation)"
                                                             : "");
    wipe_json(doc);
    cJSON_Delete(doc);
    return rc;
}

static int metadata(const char *host, int probing, struct stk__cloud_creds *c, struct stk__err *err)
{
    static const char *const headers[] = {"Metadata-Flavor: Google"};
    char url[512];
    snprintf(url, sizeof url, "%s%.200s" METADATA_PATH,
             strncmp(host, "http://", 7) == 0 ? "" : "http://", host);
    snprintf(c->source, sizeof c->source, "metadata server %.400s", url);
    struct stk__cred_answer a;
    int rc = stk__cred_http(c->source, "GET", url, headers, 1, NULL,
                            probing ? PROBE_MS : TIMEOUT_MS, &a, err);
    if (probing && (rc == STK_EIO || (rc == 0 && !a.google_flavor))) {
        /* Nobody there, or not Google's metadata server (as google-auth
         * tells them apart): not on Google Cloud. */
        rc = 0;
        stk__err_clear(err);
    } else if (rc == 0) {
        rc = take_token(c->source, url, &a, c, err);
    }
    stk__cred_answer_free(&a);
    return rc;
}

int stk__cred_gcs_fetch(struct stk__cloud_creds *c, struct stk__err *err)
{
    const char *path = env("GOOGLE_APPLICATION_CREDENTIALS");
    if (path != NULL)
        return from_key_file(path, "$GOOGLE_APPLICATION_CREDENTIALS", c, err);
    char adc[1024] = "";
    const char *dir = env("CLOUDSDK_CONFIG"), *home = env("HOME");
    if (dir != NULL)
        snprintf(adc, sizeof adc, "%s/application_default_credentials.json", dir);
    else if (home != NULL)
        snprintf(adc, sizeof adc, "%s/.config/gcloud/application_default_credentials.json", home);
    FILE *f = adc[0] != '\0' ? fopen(adc, "rb") : NULL;
    if (f != NULL) {
        fclose(f);
        return from_key_file(adc, "gcloud application default credentials", c, err);
    }
    const char *host = env("GCE_METADATA_HOST");
    const char *no_check = env("NO_GCE_CHECK");
    int probing = host == NULL;
    if (probing && no_check != NULL && strcasecmp(no_check, "true") == 0) {
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried $GOOGLE_APPLICATION_CREDENTIALS, %.300s, and not the "
                 "metadata server: $NO_GCE_CHECK)",
                 adc[0] ? adc : "the gcloud ADC file");
        return 0;
    }
    int rc = metadata(probing ? "169.254.169.254" : host, probing, c, err);
    if (rc == 0)
        snprintf(c->source, sizeof c->source,
                 "no credentials (tried $GOOGLE_APPLICATION_CREDENTIALS, %.300s, the metadata "
                 "server 169.254.169.254)",
                 adc[0] ? adc : "the gcloud ADC file");
    return rc;
}
