/* SPDX-License-Identifier: MIT */
/*
 * test_cloud.c - the pure parts of the object store sources: SigV4 URI
 * encoding and canonical query strings, the s3:// and gs:// URL mapping,
 * credentials from the environment and a profile file, and the
 * ListObjectsV2 page parser (entities, CDATA, every truncation, failing
 * allocations); the RS256 JWT a service account signs (verified with the
 * public key) and the expiry times credential endpoints send.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "base/alloc.h"
#include "io/cloud_creds.h"
#include "list/cloud_list.h"
#include "io/cloud_request.h"
#include "io/cred_http.h"
#include "io/cred_jwt.h"
#include "io/cred_process.h"
#include "list/list_xml.h"
#include "stoker.h"

static const char *const cloud_vars[] = {
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION",
    "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_PROFILE",
    "AWS_SHARED_CREDENTIALS_FILE", "GCS_HMAC_ACCESS_ID", "GCS_HMAC_SECRET",
    "GOOGLE_OAUTH_ACCESS_TOKEN", "CLOUDSDK_AUTH_ACCESS_TOKEN", "STOKER_GCS_ENDPOINT", "HOME",
    "GOOGLE_APPLICATION_CREDENTIALS", "CLOUDSDK_CONFIG", "GCE_METADATA_HOST",
    "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_EC2_METADATA_SERVICE_ENDPOINT", "AWS_CONFIG_FILE"};

static int clean_env(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof cloud_vars / sizeof cloud_vars[0]; i++)
        unsetenv(cloud_vars[i]);
    /* No probe of the metadata addresses (the integration tests serve them). */
    setenv("AWS_EC2_METADATA_DISABLED", "true", 1);
    setenv("NO_GCE_CHECK", "true", 1);
    return 0;
}

static void test_uri_encode(void **state)
{
    (void)state;
    const char *in = "a b/c~d_e-f.g+h=i&j%k\xc3\xa9";
    char *with = stk__uri_encode(in, strlen(in), 1);
    char *without = stk__uri_encode(in, strlen(in), 0);
    assert_string_equal(with, "a%20b/c~d_e-f.g%2Bh%3Di%26j%25k%C3%A9");
    assert_string_equal(without, "a%20b%2Fc~d_e-f.g%2Bh%3Di%26j%25k%C3%A9");
    stk__free(with);
    stk__free(without);
}

static void test_canonical_query(void **state)
{
    (void)state;
    /* Sorted by encoded key, then value; values encoded including '/'. */
    const char *kv[] = {"prefix", "train/a b", "list-type", "2", "continuation-token",
                        "x+/=", "max-keys", "7"};
    char *q = stk__canonical_query(kv, 4);
    assert_string_equal(q, "continuation-token=x%2B%2F%3D&list-type=2&max-keys=7&"
                           "prefix=train%2Fa%20b");
    stk__free(q);
    const char *empty[] = {"prefix", ""};
    q = stk__canonical_query(empty, 1);
    assert_string_equal(q, "prefix=");
    stk__free(q);
}

static void expect_request(const char *cloud_url, const char *query, const char *url,
                           const char *sigv4, size_t n_headers)
{
    struct stk__cloud_request r;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cloud_request_init(&r, cloud_url, query, NULL, &err);
    if (rc != 0)
        print_error("%s: %s\n", cloud_url, err.msg);
    assert_int_equal(rc, 0);
    if (strcmp(r.url, url) != 0)
        print_error("%s: got %s, want %s\n", cloud_url, r.url, url);
    assert_string_equal(r.url, url);
    if (sigv4 == NULL)
        assert_null(r.http.aws_sigv4);
    else
        assert_string_equal(r.http.aws_sigv4, sigv4);
    assert_int_equal(r.http.n_headers, n_headers);
    assert_ptr_equal(r.http.display_url, cloud_url);
    stk__cloud_request_free(&r);
}

static void test_addressing(void **state)
{
    clean_env(state);
    /* Anonymous AWS: virtual-hosted, region default us-east-1. */
    expect_request("s3://bkt/a b/c.tar", NULL, "https://bkt.s3.us-east-1.amazonaws.com/a%20b/c.tar",
                   NULL, 0);
    expect_request("s3://bkt/train/", "list-type=2&prefix=train%2F",
                   "https://bkt.s3.us-east-1.amazonaws.com/?list-type=2&prefix=train%2F", NULL, 0);
    /* Dots in the bucket: path style, so TLS wildcards still match. */
    setenv("AWS_DEFAULT_REGION", "eu-west-3", 1);
    expect_request("s3://my.bkt/k.tar", NULL, "https://s3.eu-west-3.amazonaws.com/my.bkt/k.tar",
                   NULL, 0);
    setenv("AWS_REGION", "ap-south-1", 1); /* wins over AWS_DEFAULT_REGION */
    setenv("AWS_ACCESS_KEY_ID", "AKID", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET", 1);
    expect_request("s3://bkt/k.tar", NULL, "https://bkt.s3.ap-south-1.amazonaws.com/k.tar",
                   "aws:amz:ap-south-1:s3", 1);
    setenv("AWS_SESSION_TOKEN", "TOKEN", 1);
    setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000//", 1);
    expect_request("s3://bkt/k.tar", NULL, "http://127.0.0.1:9000/bkt/k.tar",
                   "aws:amz:ap-south-1:s3", 2);
    expect_request("s3://bkt/p/", "list-type=2", "http://127.0.0.1:9000/bkt?list-type=2",
                   "aws:amz:ap-south-1:s3", 2);
    /* GCS: path style; HMAC keys sign as SigV4 region "auto"; else bearer. */
    expect_request("gs://g/k.tar", NULL, "https://storage.googleapis.com/g/k.tar", NULL, 0);
    setenv("CLOUDSDK_AUTH_ACCESS_TOKEN", "ya29", 1);
    expect_request("gs://g/k.tar", NULL, "https://storage.googleapis.com/g/k.tar", NULL, 1);
    setenv("GCS_HMAC_ACCESS_ID", "GOOG", 1);
    setenv("GCS_HMAC_SECRET", "S", 1);
    setenv("STOKER_GCS_ENDPOINT", "http://127.0.0.1:1", 1);
    expect_request("gs://g/", "list-type=2", "http://127.0.0.1:1/g?list-type=2",
                   "aws:amz:auto:s3", 1);
    clean_env(state);
}

static void expect_failure(const char *cloud_url, int code, const char *needle,
                           const char *secret)
{
    struct stk__cloud_request r;
    struct stk__err err;
    stk__err_clear(&err);
    int rc = stk__cloud_request_init(&r, cloud_url, NULL, NULL, &err);
    assert_int_equal(rc, code);
    if (strstr(err.msg, needle) == NULL)
        print_error("%s: '%s' lacks '%s'\n", cloud_url, err.msg, needle);
    assert_non_null(strstr(err.msg, needle));
    if (secret != NULL)
        assert_null(strstr(err.msg, secret));
    assert_null(r.url);
}

static void test_bad_settings(void **state)
{
    clean_env(state);
    expect_failure("s3:///k.tar", STK_EINVAL, "not a valid bucket name", NULL);
    expect_failure("s3://b?x/k", STK_EINVAL, "not a valid bucket name", NULL);
    setenv("AWS_SECRET_ACCESS_KEY", "TOPSECRET", 1);
    expect_failure("s3://b/k", STK_EINVAL, "set both AWS_ACCESS_KEY_ID", "TOPSECRET");
    clean_env(state);
    setenv("GCS_HMAC_ACCESS_ID", "ID", 1);
    expect_failure("gs://b/k", STK_EINVAL, "gs://b/k: set both GCS_HMAC_ACCESS_ID", NULL);
    clean_env(state);
    setenv("AWS_PROFILE", "p", 1);
    setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent/credentials", 1);
    expect_failure("s3://b/k", STK_EINVAL, "cannot read AWS credentials file", NULL);
    clean_env(state);
}

static void test_profile_file(void **state)
{
    clean_env(state);
    char path[] = "/tmp/stoker-creds-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("# comment\n[default]\naws_access_key_id=D\naws_secret_access_key=DS\n"
          "[other]\r\n  aws_access_key_id = O  \r\n; c\naws_secret_access_key = O=S\n"
          "aws_session_token=T\n[half]\naws_access_key_id = H\n",
          f);
    fclose(f);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    struct stk__cloud_creds c;
    struct stk__err err;
    assert_int_equal(stk__cloud_creds_load(STK__CLOUD_S3, &c, NULL, &err), 0);
    assert_string_equal(c.key_id, "D");
    assert_string_equal(c.secret, "DS");
    setenv("AWS_PROFILE", "other", 1);
    assert_int_equal(stk__cloud_creds_load(STK__CLOUD_S3, &c, NULL, &err), 0);
    assert_string_equal(c.key_id, "O");
    assert_string_equal(c.secret, "O=S");
    assert_string_equal(c.token, "T");
    stk__cloud_creds_wipe(&c);
    assert_int_equal(c.secret[0], 0);
    setenv("AWS_PROFILE", "half", 1);
    assert_int_equal(stk__cloud_creds_load(STK__CLOUD_S3, &c, NULL, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "set both"));
    setenv("AWS_PROFILE", "missing", 1);
    assert_int_equal(stk__cloud_creds_load(STK__CLOUD_S3, &c, NULL, &err), STK_EINVAL);
    assert_non_null(strstr(err.msg, "no profile [missing]"));
    /* Environment variables win over the file. */
    setenv("AWS_ACCESS_KEY_ID", "E", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "ES", 1);
    assert_int_equal(stk__cloud_creds_load(STK__CLOUD_S3, &c, NULL, &err), 0);
    assert_string_equal(c.key_id, "E");
    assert_string_equal(c.token, "");
    unlink(path);
    clean_env(state);
}

static const char PAGE[] =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
    "<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
    "<Name>b</Name><Prefix>p/</Prefix><IsTruncated>true</IsTruncated>"
    "<Contents><Key>p/a&amp;b &lt;1&gt;.tar</Key><Size>3</Size></Contents>"
    "<CommonPrefixes><Prefix><Key>not/this</Key></Prefix></CommonPrefixes>"
    "<Contents><Key><![CDATA[p/c]]>&#x2F;d.tar</Key></Contents>"
    "<Contents><Owner><Key>nested-not-a-key</Key></Owner><Key>p/e.tar</Key></Contents>"
    "<NextContinuationToken>tok+/=</NextContinuationToken>"
    "</ListBucketResult>";

static void test_list_parse(void **state)
{
    (void)state;
    struct stk__list_page page;
    struct stk__err err;
    assert_int_equal(stk__list_parse(PAGE, strlen(PAGE), &page, &err), 0);
    assert_int_equal(page.keys.count, 3);
    assert_string_equal(page.keys.items[0], "p/a&b <1>.tar");
    assert_string_equal(page.keys.items[1], "p/c/d.tar");
    assert_string_equal(page.keys.items[2], "p/e.tar");
    assert_true(page.truncated);
    assert_string_equal(page.next_token, "tok+/=");
    stk__list_page_free(&page);

    static const char last[] = "<ListBucketResult><IsTruncated>false</IsTruncated>"
                               "</ListBucketResult>";
    assert_int_equal(stk__list_parse(last, strlen(last), &page, &err), 0);
    assert_int_equal(page.keys.count, 0);
    assert_false(page.truncated);
    assert_null(page.next_token);
    stk__list_page_free(&page);

    static const char error[] = "<Error><Code>AccessDenied</Code></Error>";
    assert_int_equal(stk__list_parse(error, strlen(error), &page, &err), STK_EFORMAT);
    assert_non_null(strstr(err.msg, "not a ListBucketResult"));
    stk__list_page_free(&page);
}

/* Every proper prefix of a page is malformed: a clean error, no crash. */
static void test_list_parse_truncated(void **state)
{
    (void)state;
    size_t n = strlen(PAGE);
    for (size_t k = 0; k < n; k++) {
        char *copy = stk__malloc(k + 1);
        memcpy(copy, PAGE, k);
        struct stk__list_page page;
        struct stk__err err;
        int rc = stk__list_parse(copy, k, &page, &err);
        if (rc != STK_EFORMAT)
            print_error("prefix of %zu bytes: rc %d\n", k, rc);
        assert_int_equal(rc, STK_EFORMAT);
        stk__list_page_free(&page);
        stk__free(copy);
    }
}

static void test_list_parse_alloc_failures(void **state)
{
    (void)state;
    int failures = 0;
    for (unsigned long n = 1; n < 10000; n++) {
        struct stk__list_page page;
        struct stk__err err;
        stk__alloc_fail_after(n);
        int rc = stk__list_parse(PAGE, strlen(PAGE), &page, &err);
        stk__alloc_fail_after(0);
        stk__list_page_free(&page);
        if (rc == 0)
            break;
        assert_int_equal(rc, STK_ENOMEM);
        failures++;
    }
    assert_true(failures > 3);
}

static void test_is_prefix(void **state)
{
    (void)state;
    assert_true(stk__cloud_is_prefix("s3://b/train/"));
    assert_true(stk__cloud_is_prefix("gs://b/"));
    assert_false(stk__cloud_is_prefix("s3://b/train/x.tar"));
    assert_false(stk__cloud_is_prefix("http://h/dir/"));
    assert_false(stk__cloud_is_prefix("/data/dir/"));
}

static void test_cred_parse_time(void **state)
{
    (void)state;
    assert_int_equal(stk__cred_parse_time("1970-01-02T00:00:01Z"), 86401);
    assert_int_equal(stk__cred_parse_time("2026-11-28T04:00:00Z"), 1795838400);
    assert_int_equal(stk__cred_parse_time("2026-11-28T04:00:00.123Z"), 1795838400);
    assert_int_equal(stk__cred_parse_time("2026-11-28T04:00:00+00:00"), 1795838400);
    assert_int_equal(stk__cred_parse_time("2026-11-28T04:00:00+02:00"), -1); /* not UTC */
    assert_int_equal(stk__cred_parse_time("2026-11-28 04:00:00Z"), -1);
    assert_int_equal(stk__cred_parse_time(""), -1);
}

/* Base64url (no padding) segment i of a JWT, decoded into a new string. */
static char *jwt_segment(const char *jwt, int i, size_t *len)
{
    const char *p = jwt;
    for (int k = 0; k < i; k++)
        p = strchr(p, '.') + 1;
    size_t n = strcspn(p, ".");
    char *b64 = calloc(1, n + 4);
    for (size_t k = 0; k < n; k++)
        b64[k] = p[k] == '-' ? '+' : p[k] == '_' ? '/' : p[k];
    size_t m = n;
    while (m % 4)
        b64[m++] = '=';
    unsigned char *out = calloc(1, n + 4);
    int got = EVP_DecodeBlock(out, (unsigned char *)b64, (int)m);
    assert_true(got >= 0);
    *len = (size_t)got - (n % 4 == 2 ? 2 : n % 4 == 3 ? 1 : 0);
    free(b64);
    return (char *)out;
}

static char *new_rsa_pem(EVP_PKEY **key)
{
    *key = EVP_RSA_gen(2048);
    assert_non_null(*key);
    BIO *bio = BIO_new(BIO_s_mem());
    assert_int_equal(PEM_write_bio_PrivateKey(bio, *key, NULL, NULL, 0, NULL, NULL), 1);
    char *data;
    long n = BIO_get_mem_data(bio, &data);
    char *pem = calloc(1, (size_t)n + 1);
    memcpy(pem, data, (size_t)n);
    BIO_free(bio);
    return pem;
}

static void test_jwt_rs256(void **state)
{
    (void)state;
    EVP_PKEY *key;
    char *pem = new_rsa_pem(&key);
    struct stk__err err = {0};
    char *jwt = stk__jwt_rs256("key file k.json", pem, "kid-9", "sa@p.iam.gserviceaccount.com",
                               "scope-x", "https://oauth2.example/token", 1700000000, &err);
    assert_non_null(jwt);
    /* The signature verifies with the public key over "header.claims". */
    const char *dot2 = strrchr(jwt, '.');
    size_t sig_len;
    char *sig = jwt_segment(jwt, 2, &sig_len);
    assert_int_equal(sig_len, 256);
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    assert_int_equal(EVP_DigestVerifyInit(md, NULL, EVP_sha256(), NULL, key), 1);
    assert_int_equal(EVP_DigestVerify(md, (unsigned char *)sig, sig_len, (unsigned char *)jwt,
                                      (size_t)(dot2 - jwt)),
                     1);
    EVP_MD_CTX_free(md);
    size_t n;
    char *head = jwt_segment(jwt, 0, &n), *claims = jwt_segment(jwt, 1, &n);
    cJSON *h = cJSON_Parse(head), *c = cJSON_Parse(claims);
    assert_string_equal(cJSON_GetObjectItem(h, "alg")->valuestring, "RS256");
    assert_string_equal(cJSON_GetObjectItem(h, "kid")->valuestring, "kid-9");
    assert_string_equal(cJSON_GetObjectItem(c, "iss")->valuestring,
                        "sa@p.iam.gserviceaccount.com");
    assert_string_equal(cJSON_GetObjectItem(c, "scope")->valuestring, "scope-x");
    assert_string_equal(cJSON_GetObjectItem(c, "aud")->valuestring, "https://oauth2.example/token");
    assert_int_equal((long)cJSON_GetObjectItem(c, "iat")->valuedouble, 1700000000);
    assert_int_equal((long)cJSON_GetObjectItem(c, "exp")->valuedouble, 1700003600);
    cJSON_Delete(h);
    cJSON_Delete(c);
    free(head);
    free(claims);
    free(sig);
    stk__cred_wipe_free(jwt);
    /* Not a key: an error naming the file, never the text. */
    jwt = stk__jwt_rs256("key file k.json", "-----BEGIN PRIVATE KEY-----\nnot-a-key\n", "", "i",
                         "s", "a", 1, &err);
    assert_null(jwt);
    assert_int_equal(err.code, STK_EINVAL);
    assert_string_equal(err.msg, "key file k.json: private_key is not an RSA private key in PEM");
    /* Every allocation of ours that can fail fails cleanly. */
    int failures = 0;
    for (unsigned long k = 1; k < 100; k++) {
        stk__alloc_fail_after(k);
        jwt = stk__jwt_rs256("f", pem, "", "i", "s", "a", 1, &err);
        stk__alloc_fail_after(0);
        if (jwt != NULL)
            break;
        assert_int_equal(err.code, STK_ENOMEM);
        failures++;
    }
    assert_non_null(jwt);
    assert_true(failures >= 3);
    stk__cred_wipe_free(jwt);
    free(pem);
    EVP_PKEY_free(key);
}

/* A credential_process that hangs is killed at its bound, with its process
 * group (the shell's sleeping child too: the run returns though the child
 * held the pipes open). The bound is a minute; test builds
 * (-Dtest_hooks=true, as the ASan build of the unit tests) shorten it. */
#ifdef STK_TEST_HOOKS
static void test_credential_process_bound(void **state)
{
    (void)state;
    setenv("STOKER_CRED_PROCESS_TEST_TIMEOUT_MS", "300", 1);
    struct stk__cloud_creds c;
    memset(&c, 0, sizeof c);
    struct stk__err err;
    stk__err_clear(&err);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = stk__cred_process_run("credential_process of profile [p] (f)",
                                   "/bin/sh -c 'sleep 30 & sleep 30'", &c, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    unsetenv("STOKER_CRED_PROCESS_TEST_TIMEOUT_MS");
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    if (rc != STK_EACCESS || strstr(err.msg, "/bin/sh did not finish within 0.3 s") == NULL)
        print_error("rc %d after %.1f s: %s\n", rc, took, err.msg);
    assert_int_equal(rc, STK_EACCESS);
    assert_non_null(strstr(err.msg, "credential_process of profile [p] (f): /bin/sh did not "
                                    "finish within 0.3 s; it was killed"));
    assert_true(took < 20.0); /* not the children's 30 s: a generous bound for a loaded host */
    assert_string_equal(c.key_id, "");
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uri_encode),
        cmocka_unit_test(test_canonical_query),
        cmocka_unit_test(test_addressing),
        cmocka_unit_test(test_bad_settings),
        cmocka_unit_test(test_profile_file),
        cmocka_unit_test(test_list_parse),
        cmocka_unit_test(test_list_parse_truncated),
        cmocka_unit_test(test_list_parse_alloc_failures),
        cmocka_unit_test(test_is_prefix),
        cmocka_unit_test(test_cred_parse_time),
        cmocka_unit_test(test_jwt_rs256),
#ifdef STK_TEST_HOOKS
        cmocka_unit_test(test_credential_process_bound),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
