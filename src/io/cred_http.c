/* SPDX-License-Identifier: MIT */
/*
 * cred_http.c - blocking requests for credential endpoints, and the file
 * and time helpers the credential sources share.
 */
#include "io/cred_http.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "base/alloc.h"
#include "io/curl_shared.h"
#include "io/redact.h"
#include "stoker.h"

#define MAX_ANSWER 65536
#define MAX_FILE (1u << 20)

static size_t on_body(char *data, size_t size, size_t nmemb, void *user)
{
    struct stk__cred_answer *a = user;
    size_t n = size * nmemb;
    if (a->len + n > MAX_ANSWER)
        return 0; /* not a credential answer: fail the transfer */
    memcpy(a->body + a->len, data, n);
    a->len += n;
    a->body[a->len] = '\0';
    return n;
}

static size_t on_header(char *data, size_t size, size_t nmemb, void *user)
{
    static const char want[] = "metadata-flavor: google";
    struct stk__cred_answer *a = user;
    size_t n = size * nmemb;
    if (n >= sizeof want - 1 && strncasecmp(data, want, sizeof want - 1) == 0)
        a->google_flavor = 1;
    return n;
}

static int request(const char *who, const char *method, const char *url,
                   const char *const *headers, size_t n, const char *body, unsigned timeout_ms,
                   const struct stk__cred_sigv4 *sign, struct stk__cred_answer *a,
                   struct stk__err *err)
{
    memset(a, 0, sizeof *a);
    char shown[512];
    stk__redact_url(url, shown, sizeof shown);
    CURLSH *share = stk__curl_share(err);
    if (share == NULL)
        return err->code;
    a->body = stk__calloc(1, MAX_ANSWER + 1);
    CURL *easy = a->body != NULL ? curl_easy_init() : NULL;
    struct curl_slist *list = NULL;
    int rc = 0;
    for (size_t i = 0; easy != NULL && i < n && rc == 0; i++) {
        struct curl_slist *l = curl_slist_append(list, headers[i]);
        if (l == NULL)
            rc = -1;
        else
            list = l;
    }
    if (easy == NULL || rc < 0) {
        rc = stk__errf(err, STK_ENOMEM, "out of memory asking %s", who);
        goto out;
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    curl_easy_setopt(easy, CURLOPT_URL, url);
    curl_easy_setopt(easy, CURLOPT_SHARE, share);
    curl_easy_setopt(easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(easy, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(easy, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(easy, CURLOPT_PROTOCOLS_STR, "http,https");
    const char *ca = stk__curl_ca_bundle(NULL); /* as the shards' own requests */
    if (ca != NULL)
        curl_easy_setopt(easy, CURLOPT_CAINFO, ca);
    curl_easy_setopt(easy, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(easy, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(easy, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(easy, CURLOPT_WRITEDATA, a);
    curl_easy_setopt(easy, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(easy, CURLOPT_HEADERDATA, a);
    /* No proxy: metadata servers are link-local, and a token must not pass
     * through a proxy the user set up for bulk data. */
    curl_easy_setopt(easy, CURLOPT_NOPROXY, "*");
    if (body != NULL)
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(easy, CURLOPT_CUSTOMREQUEST, method);
    if (sign != NULL) {
        curl_easy_setopt(easy, CURLOPT_AWS_SIGV4, sign->provider);
        curl_easy_setopt(easy, CURLOPT_USERPWD, sign->userpwd);
    }
    if (strcmp(method, "PUT") == 0 && body == NULL)
        curl_easy_setopt(easy, CURLOPT_POSTFIELDS, "");
    CURLcode res = curl_easy_perform(easy);
    if (res != CURLE_OK) {
        rc = stk__errf(err, STK_EIO, "%s: no answer from %s: %s", who, shown,
                       errbuf[0] ? errbuf : curl_easy_strerror(res));
        goto out;
    }
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &a->status);
out:
    curl_slist_free_all(list); /* header values may be secrets; libcurl copied them */
    if (easy != NULL)
        curl_easy_cleanup(easy);
    if (rc < 0)
        stk__cred_answer_free(a);
    return rc;
}

void stk__cred_wipe(void *p, size_t n)
{
    /* volatile: the compiler may not drop stores to memory about to die. */
    volatile unsigned char *v = p;
    for (size_t i = 0; i < n; i++)
        v[i] = 0;
}

void stk__cred_answer_free(struct stk__cred_answer *a)
{
    if (a->body != NULL) {
        stk__cred_wipe(a->body, a->len);
        stk__free(a->body);
    }
    memset(a, 0, sizeof *a);
}

int stk__cred_http(const char *who, const char *method, const char *url, const char *const *headers,
                   size_t n, const char *body, unsigned timeout_ms, struct stk__cred_answer *a,
                   struct stk__err *err)
{
    return request(who, method, url, headers, n, body, timeout_ms, NULL, a, err);
}

int stk__cred_http_signed(const char *who, const char *url, const char *const *headers, size_t n,
                          const char *body, unsigned timeout_ms, const struct stk__cred_sigv4 *sign,
                          struct stk__cred_answer *a, struct stk__err *err)
{
    return request(who, "POST", url, headers, n, body, timeout_ms, sign, a, err);
}

int stk__cred_status_transient(long status) { return status == 429 || status >= 500; }

char *stk__cred_read_file(const char *what, const char *path, struct stk__err *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        stk__errf(err, STK_EINVAL, "cannot read %s %s: %s", what, path, strerror(errno));
        return NULL;
    }
    char *buf = stk__malloc(MAX_FILE + 1);
    size_t n = buf != NULL ? fread(buf, 1, MAX_FILE + 1, f) : 0;
    int bad = buf == NULL ? STK_ENOMEM : ferror(f) ? STK_EIO : n > MAX_FILE ? STK_ELIMIT : 0;
    fclose(f);
    if (bad) {
        if (buf != NULL)
            buf[n > MAX_FILE ? MAX_FILE : n] = '\0';
        stk__cred_wipe_free(buf);
        stk__errf(err, bad == STK_ENOMEM ? STK_ENOMEM : STK_EINVAL, "cannot read %s %s: %s", what,
                  path, bad == STK_ELIMIT ? "larger than 1 MiB" : "read error");
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

void stk__cred_wipe_free(char *s)
{
    if (s == NULL)
        return;
    stk__cred_wipe(s, strlen(s));
    stk__free(s);
}

int64_t stk__cred_parse_time(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    int used = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &used) != 6)
        return -1;
    const char *rest = s + used;
    if (*rest == '.')
        rest += 1 + strspn(rest + 1, "0123456789");
    if (strcmp(rest, "Z") != 0 && strcmp(rest, "+00:00") != 0)
        return -1;
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    return (int64_t)timegm(&tm);
}

int stk__cred_copy(char *dst, size_t cap, const char *src)
{
    size_t n = strlen(src);
    if (n >= cap) {
        dst[0] = '\0';
        return -1;
    }
    memcpy(dst, src, n + 1);
    return 0;
}
