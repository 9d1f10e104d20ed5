/* SPDX-License-Identifier: MIT */
/*
 * test_remote.c - the pure parts of remote sources: URL redaction, pipe:
 * command splitting, the retry policy.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "io/command.h"
#include "io/redact.h"
#include "io/retry.h"
#include "io/source_http.h"
#include "io/source_pipe.h"
#include "stoker.h"

static void expect_redacted(const char *url, const char *want)
{
    char buf[512];
    size_t n = stk__redact_url(url, buf, sizeof buf);
    if (strcmp(buf, want) != 0)
        print_error("url '%s': got '%s', want '%s'\n", url, buf, want);
    assert_string_equal(buf, want);
    assert_int_equal(n, strlen(want));
}

static void test_redact(void **state)
{
    (void)state;
    expect_redacted("/data/train-0001.tar", "/data/train-0001.tar");
    expect_redacted("relative/a:b@c.tar", "relative/a:b@c.tar");
    expect_redacted("pipe:curl -u a:b http://x/y", "pipe:curl -u *** http://x/y");
    expect_redacted("http://host:80/a/b.tar", "http://host:80/a/b.tar");
    expect_redacted("http://user:s3cr3t@host/a.tar", "http://***@host/a.tar");
    expect_redacted("https://tok@host", "https://***@host");
    expect_redacted("http://u:p@ss@host/x", "http://***@host/x");
    expect_redacted("http://host/x@y.tar", "http://host/x@y.tar");
    expect_redacted("https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=AWS4&X-Amz-Signature=dead",
                    "https://b.s3.amazonaws.com/k.tar?X-Amz-Algorithm=***&X-Amz-Signature=***");
    expect_redacted("http://h/x?sig=abc&flag&token=t#frag", "http://h/x?sig=***&flag&token=***#***");
    expect_redacted("http://u:p@h?a=1", "http://***@h?a=***");
    expect_redacted("file:///data/x.tar", "file:///data/x.tar");
    /* A password with an unescaped '/', '?' or '#' is not a valid URL (libcurl
     * refuses it), but its message must not show the password either. */
    expect_redacted("http://user:pa/ss@host/x.tar", "http://***@host/x.tar");
    expect_redacted("http://u:pa?ss@host/x?a=b", "http://***@host/x?a=***");
    expect_redacted("http://u:pa#ss@host/x", "http://***@host/x");
    expect_redacted("http://u:9/x@host/y", "http://u:9/x@host/y"); /* a port, then a path */
    expect_redacted("http://host:8080/@scope/x.tar", "http://host:8080/@scope/x.tar");
    expect_redacted("https://registry/@org/x.tar", "https://registry/@org/x.tar");
    expect_redacted("http://[::1]:80/a@b.tar", "http://[::1]:80/a@b.tar");
    expect_redacted("http://user:pa/ss", "http://user:pa/ss");
    expect_redacted("", "");
}

/* pipe: commands: word by word, as the pipe source splits them; a word
 * without a secret keeps its exact text (quotes included), a changed one
 * is written quoted where it needs to be. */
static void test_redact_pipe(void **state)
{
    (void)state;
    const char *same[] = {
        "pipe:cat /data/x.tar",
        "pipe:cat 'dir with space/s.tar'",
        "pipe:curl -s -L http://host/a.tar",
        "pipe:sh -c 'cat \"$0\"; exit 3' a\\ b",
        "pipe:aws s3 cp --no-sign-request s3://b/k.tar -",
        "pipe:curl -H 'Accept: */*' -A 'agent x' http://h/x",
        "pipe:env USER=alice LANG=C cat x.tar",
        "pipe:cat 'x",
        "pipe:",
        "pipe:  a\t b  ",
    };
    for (size_t i = 0; i < sizeof same / sizeof same[0]; i++)
        expect_redacted(same[i], same[i]);
    /* URLs inside words */
    expect_redacted("pipe:curl -s https://u:pw@h/a.tar?X-Amz-Signature=abc",
                    "pipe:curl -s https://***@h/a.tar?X-Amz-Signature=***");
    expect_redacted("pipe:curl '--url=https://h/a.tar?sig=abc'", "pipe:curl --url=https://h/a.tar?sig=***");
    expect_redacted("pipe:curl \"http://u:p@h/a b.tar\"", "pipe:curl \"http://***@h/a b.tar\"");
    /* NAME=value with a secret-looking NAME, options included */
    expect_redacted("pipe:env AWS_SECRET_ACCESS_KEY=abc AWS_SESSION_TOKEN='x y' aws s3 cp s3://b/k -",
                    "pipe:env AWS_SECRET_ACCESS_KEY=*** AWS_SESSION_TOKEN=*** aws s3 cp s3://b/k -");
    expect_redacted("pipe:tool --password=hunter2 --api-key=k1 --count=3",
                    "pipe:tool --password=*** --api-key=*** --count=3");
    expect_redacted("pipe:tool --token=https://h/x", "pipe:tool --token=***");
    /* header arguments */
    expect_redacted("pipe:curl -H 'Authorization: Bearer abc' http://h/x",
                    "pipe:curl -H \"Authorization: ***\" http://h/x");
    expect_redacted("pipe:curl -H \"X-Amz-Security-Token:abc\" -H Cookie:\\ a=b http://h/x",
                    "pipe:curl -H \"X-Amz-Security-Token: ***\" -H \"Cookie: ***\" http://h/x");
    expect_redacted("pipe:curl -H 'Authorization:' http://h/x", "pipe:curl -H 'Authorization:' http://h/x");
    /* the word after a credential option */
    expect_redacted("pipe:curl --user alice:pw http://h/x", "pipe:curl --user *** http://h/x");
    expect_redacted("pipe:tool --password \"two words\" --token t x",
                    "pipe:tool --password *** --token *** x");
    expect_redacted("pipe:tool --password", "pipe:tool --password");
    /* quoting of a changed word that keeps blanks, quotes or backslashes */
    expect_redacted("pipe:tool 'PASSWORD=a b' \"x=https://u:p@h/a\\\"b\"",
                    "pipe:tool PASSWORD=*** \"x=https://***@h/a\\\"b\"");
    /* an unterminated quote: the rest is one word */
    expect_redacted("pipe:curl 'https://u:p@h/x", "pipe:curl https://***@h/x");
}

static void test_redact_truncates(void **state)
{
    (void)state;
    char buf[12];
    const char *url = "http://user:pw@host/long/path.tar";
    size_t n = stk__redact_url(url, buf, sizeof buf);
    assert_int_equal(n, strlen("http://***@host/long/path.tar"));
    assert_string_equal(buf, "http://***@");
    assert_int_equal(stk__redact_url(url, NULL, 0), n);
    char *dup = stk__redact_url_dup(url);
    assert_non_null(dup);
    assert_string_equal(dup, "http://***@host/long/path.tar");
    stk__free(dup);
    char pub[64];
    stk_redact_url("https://a:b@h/?k=v", pub, sizeof pub);
    assert_string_equal(pub, "https://***@h/?k=***");
}

static void expect_words(const char *cmd, const char *const *want, size_t n)
{
    char **words;
    size_t count;
    struct stk__err err;
    int rc = stk__split_command(cmd, &words, &count, &err);
    if (rc != 0)
        print_error("command '%s': %s\n", cmd, err.msg);
    assert_int_equal(rc, 0);
    assert_int_equal(count, n);
    for (size_t i = 0; i < n; i++)
        assert_string_equal(words[i], want[i]);
    assert_null(words[n]);
    stk__free(words);
}

static void test_split(void **state)
{
    (void)state;
    const char *a[] = {"cat", "/x/y.tar"};
    expect_words("cat /x/y.tar", a, 2);
    expect_words("  cat\t /x/y.tar  \n", a, 2);
    const char *b[] = {"cat", "dir with space/s.tar"};
    expect_words("cat 'dir with space/s.tar'", b, 2);
    expect_words("cat \"dir with space/s.tar\"", b, 2);
    expect_words("cat dir\\ with\\ space/s.tar", b, 2);
    const char *c[] = {"sh", "-c", "cat \"$0\"; exit 3", "a b"};
    expect_words("sh -c 'cat \"$0\"; exit 3' a\\ b", c, 4);
    const char *d[] = {"echo", "a\"b\\c", "x'y", ""};
    expect_words("echo \"a\\\"b\\\\c\" \"x'y\" ''", d, 4);
    const char *e[] = {"a;", "b|c", "$(d)", "`e`", "*"};
    expect_words("a; b|c $(d) `e` *", e, 5);
    const char *f[] = {"ab"};
    expect_words("a''b", f, 1);
}

static void expect_split_error(const char *cmd, const char *needle)
{
    char **words = NULL;
    size_t count;
    struct stk__err err;
    assert_int_equal(stk__split_command(cmd, &words, &count, &err), STK_EINVAL);
    assert_null(words);
    if (strstr(err.msg, needle) == NULL)
        print_error("command '%s': message '%s' lacks '%s'\n", cmd, err.msg, needle);
    assert_non_null(strstr(err.msg, needle));
}

static void test_split_errors(void **state)
{
    (void)state;
    expect_split_error("", "is empty");
    expect_split_error("   \t", "is empty");
    expect_split_error("cat 'x", "unterminated ' quote");
    expect_split_error("cat \"x\\\"", "unterminated \" quote");
    char many[2 * (STK__COMMAND_MAX_WORDS + 1) + 1];
    for (size_t i = 0; i < STK__COMMAND_MAX_WORDS + 1; i++) {
        many[2 * i] = 'a';
        many[2 * i + 1] = ' ';
    }
    many[sizeof many - 1] = '\0';
    expect_split_error(many, "more than");
}

static void expect_origin(const char *url, const char *want, int want_user)
{
    char buf[STK__URL_ORIGIN_MAX];
    int user = -1;
    int rc = stk__url_origin(url, buf, sizeof buf, &user);
    if (rc != 0 || strcmp(buf, want) != 0 || user != want_user)
        print_error("url '%s': rc %d, origin '%s', user %d; want '%s', user %d\n", url, rc,
                    rc == 0 ? buf : "", user, want, want_user);
    assert_int_equal(rc, 0);
    assert_string_equal(buf, want);
    assert_int_equal(user, want_user);
}

/* The origins a request with credentials may be redirected within. */
static void test_origin(void **state)
{
    (void)state;
    expect_origin("http://127.0.0.1:8080/a/b.tar?x=1", "http://127.0.0.1:8080", 0);
    expect_origin("http://HOST.Example/a", "http://host.example:80", 0);
    expect_origin("https://host/a", "https://host:443", 0);
    expect_origin("HTTPS://host:443/b", "https://host:443", 0);
    expect_origin("http://u:p@host:81/", "http://host:81", 1);
    expect_origin("http://[::1]:9000/x", "http://[::1]:9000", 0);
    /* what differs: scheme (https -> http), port, host name for one address */
    const char *a = "https://h:443", *others[] = {"http://h/x", "https://h:8443/x",
                                                  "https://h.:443/x", "https://g/x"};
    char buf[STK__URL_ORIGIN_MAX];
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        assert_int_equal(stk__url_origin(others[i], buf, sizeof buf, NULL), 0);
        if (strcmp(buf, a) == 0)
            print_error("'%s' has origin '%s'\n", others[i], buf);
        assert_string_not_equal(buf, a);
    }
    assert_int_equal(stk__url_origin("not a url", buf, sizeof buf, NULL), -1);
    assert_int_equal(stk__url_origin("http://h/x", buf, 8, NULL), -1);
}

static void test_retry_status(void **state)
{
    (void)state;
    const long transient[] = {408, 429, 500, 502, 503, 504, 599};
    const long final[] = {200, 206, 301, 400, 401, 403, 404, 410, 416, 600};
    for (size_t i = 0; i < sizeof transient / sizeof transient[0]; i++)
        assert_true(stk__retry_http_status(transient[i]));
    for (size_t i = 0; i < sizeof final / sizeof final[0]; i++)
        assert_false(stk__retry_http_status(final[i]));
}

#define MS 1000000ull

/* Add ns of waiting and bytes to w; want_rate 0: not judged too slow, else
 * too slow at that many bytes per second. */
static void expect_rate(struct stk__rate_window *w, uint64_t ns, uint64_t bytes,
                        uint64_t want_rate)
{
    uint64_t rate = 0;
    int slow = stk__rate_add(w, ns, bytes, &rate);
    if (slow != (want_rate != 0) || (slow && rate != want_rate))
        fail_msg("+%llu ns, +%llu bytes: slow %d at %llu bytes/s, want %s %llu",
                 (unsigned long long)ns, (unsigned long long)bytes, slow,
                 (unsigned long long)rate, want_rate ? "slow at" : "not slow",
                 (unsigned long long)want_rate);
}

/* Only waiting counts: a slow reader of a fast stream (long gaps between
 * reads, bytes there at once) is never too slow; a drip is, once a whole
 * window of waiting brought less than the minimum. */
static void test_rate_window(void **state)
{
    (void)state;
    struct stk__rate_window w;
    stk__rate_init(&w, 1000 * MS, 4096);
    for (int i = 0; i < 10000; i++) /* 100 KiB there at once, then 1 ms waits */
        expect_rate(&w, i % 2 ? MS : 0, i % 2 ? 0 : 102400, 0);
    stk__rate_init(&w, 1000 * MS, 4096); /* a byte per 500 ms of waiting */
    expect_rate(&w, 499 * MS, 1, 0);
    expect_rate(&w, 499 * MS, 1, 0);
    expect_rate(&w, 500 * MS, 1, 2);
    /* exactly the minimum passes, and the next window starts afresh */
    stk__rate_init(&w, 1000 * MS, 4096);
    expect_rate(&w, 1000 * MS, 4096, 0);
    expect_rate(&w, 999 * MS, 4000, 0);
    expect_rate(&w, 1 * MS, 0, 4000);
    /* min_rate 0: never too slow */
    stk__rate_init(&w, 1000 * MS, 0);
    expect_rate(&w, 5000 * MS, 0, 0);
}

static void test_backoff(void **state)
{
    (void)state;
    /* Equal jitter: between half and all of base * 2^(attempt-1). */
    for (unsigned attempt = 1; attempt <= 6; attempt++) {
        uint64_t full = 100u << (attempt - 1);
        assert_int_equal(stk__backoff_ms(attempt, 100, 0, 0), full / 2);
        assert_int_equal(stk__backoff_ms(attempt, 100, 0, full / 2), full);
        for (uint64_t r = 0; r < 1000; r += 37) {
            uint64_t d = stk__backoff_ms(attempt, 100, 0, r * 7919);
            assert_true(d >= full / 2 && d <= full);
        }
    }
    /* Capped, also for huge attempt numbers (no overflow). */
    assert_true(stk__backoff_ms(64, 1000, 0, UINT64_MAX) <= STK__BACKOFF_CAP_MS);
    assert_true(stk__backoff_ms(1000000, 60000, 0, 12345) <= STK__BACKOFF_CAP_MS);
    assert_true(stk__backoff_ms(1000000, 60000, 0, 0) >= STK__BACKOFF_CAP_MS / 2);
    /* Retry-After raises the delay, within the cap. */
    assert_int_equal(stk__backoff_ms(1, 10, 3000, 0), 3000);
    assert_int_equal(stk__backoff_ms(1, 10, 3600000, 0), STK__BACKOFF_CAP_MS);
    assert_int_equal(stk__backoff_ms(1, 0, 0, 99), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_redact),
        cmocka_unit_test(test_redact_pipe),
        cmocka_unit_test(test_redact_truncates),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_split_errors),
        cmocka_unit_test(test_origin),
        cmocka_unit_test(test_retry_status),
        cmocka_unit_test(test_backoff),
        cmocka_unit_test(test_rate_window),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
