/* SPDX-License-Identifier: MIT */
/*
 * cred_jwt.c - RS256 JWT assertions: the JSON with cJSON, base64 and the
 * RSASSA-PKCS1-v1_5 SHA-256 signature with OpenSSL's libcrypto (EVP), the
 * library libcurl already links, so no cryptography is written here.
 */
#include "io/cred_jwt.h"

#include <cjson/cJSON.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <string.h>

#include "base/alloc.h"
#include "io/cred_http.h"
#include "stoker.h"

#define LIFETIME_S 3600 /* the longest Google accepts */

/* base64url of n bytes without padding, appended at out (room for
 * 4 * ceil(n / 3) + 1 bytes); returns the characters written. */
static size_t b64url(char *out, const unsigned char *in, size_t n)
{
    int len = EVP_EncodeBlock((unsigned char *)out, in, (int)n);
    while (len > 0 && out[len - 1] == '=')
        len--;
    for (int i = 0; i < len; i++)
        out[i] = out[i] == '+' ? '-' : out[i] == '/' ? '_' : out[i];
    out[len] = '\0';
    return (size_t)len;
}

static char *json_segment(cJSON *obj)
{
    char *text = obj != NULL ? cJSON_PrintUnformatted(obj) : NULL;
    cJSON_Delete(obj);
    if (text == NULL)
        return NULL;
    size_t n = strlen(text);
    char *out = stk__malloc(4 * (n / 3 + 1) + 1);
    if (out != NULL)
        b64url(out, (const unsigned char *)text, n);
    cJSON_free(text);
    return out;
}

char *stk__jwt_rs256(const char *who, const char *pem_key, const char *key_id, const char *iss,
                     const char *scope, const char *aud, int64_t now, struct stk__err *err)
{
    char *out = NULL, *head = NULL, *claims = NULL;
    unsigned char *sig = NULL;
    EVP_PKEY *pkey = NULL;
    EVP_MD_CTX *md = NULL;
    BIO *bio = BIO_new_mem_buf(pem_key, -1);
    if (bio != NULL)
        pkey = PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL);
    BIO_free(bio);
    if (pkey == NULL || EVP_PKEY_get_base_id(pkey) != EVP_PKEY_RSA) {
        stk__errf(err, STK_EINVAL, "%s: private_key is not an RSA private key in PEM", who);
        goto out;
    }
    cJSON *h = cJSON_CreateObject(), *c = cJSON_CreateObject();
    if (h != NULL && c != NULL) {
        cJSON_AddStringToObject(h, "alg", "RS256");
        cJSON_AddStringToObject(h, "typ", "JWT");
        if (key_id != NULL && key_id[0] != '\0')
            cJSON_AddStringToObject(h, "kid", key_id);
        cJSON_AddStringToObject(c, "iss", iss);
        cJSON_AddStringToObject(c, "scope", scope);
        cJSON_AddStringToObject(c, "aud", aud);
        cJSON_AddNumberToObject(c, "iat", (double)now);
        cJSON_AddNumberToObject(c, "exp", (double)(now + LIFETIME_S));
    }
    head = json_segment(h);
    claims = json_segment(c);
    /* The signature is the key's size: room for it and its base64 up front. */
    size_t sig_len = (size_t)EVP_PKEY_get_size(pkey);
    size_t hn = head != NULL ? strlen(head) : 0, cn = claims != NULL ? strlen(claims) : 0;
    md = EVP_MD_CTX_new();
    sig = stk__malloc(sig_len);
    out = stk__malloc(hn + cn + 2 + 4 * (sig_len / 3 + 1) + 1);
    if (head == NULL || claims == NULL || md == NULL || sig == NULL || out == NULL) {
        stk__errf(err, STK_ENOMEM, "out of memory signing for %s", who);
        stk__free(out);
        out = NULL;
        goto out;
    }
    memcpy(out, head, hn);
    out[hn] = '.';
    memcpy(out + hn + 1, claims, cn + 1);
    if (EVP_DigestSignInit(md, NULL, EVP_sha256(), NULL, pkey) != 1 ||
        EVP_DigestSign(md, sig, &sig_len, (const unsigned char *)out, hn + 1 + cn) != 1) {
        stk__errf(err, STK_EINVAL, "%s: cannot sign the JWT assertion with private_key", who);
        stk__cred_wipe_free(out);
        out = NULL;
        goto out;
    }
    out[hn + 1 + cn] = '.';
    b64url(out + hn + 2 + cn, sig, sig_len);
out:
    if (out == NULL)
        ERR_clear_error(); /* leave libcurl's TLS no stale OpenSSL error */
    stk__free(sig);
    stk__free(head);
    stk__free(claims);
    EVP_MD_CTX_free(md);
    EVP_PKEY_free(pkey);
    return out;
}
