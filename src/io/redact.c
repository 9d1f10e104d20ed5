/* SPDX-License-Identifier: MIT */
/*
 * redact.c - hide the secrets a URL can carry before it is printed.
 *
 * "scheme://" URLs: every query value is hidden, not just those of known
 * signature keys, because signing schemes differ (X-Amz-Signature,
 * X-Goog-Signature, Azure's sig, CloudFront's Policy, ...) and a value
 * printed by mistake cannot be taken back; the keys stay, so a message
 * still says which kind of URL failed.
 *
 * pipe: commands are redacted word by word, the words split exactly as the
 * pipe source runs them (command.h): a command is arbitrary text, so the
 * rules look for the shapes credentials take on a command line (see
 * stk_redact_url() in stoker.h), and a word that matches none keeps its
 * exact text. Plain paths print unchanged.
 */
#include "io/redact.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "base/alloc.h"
#include "io/command.h"
#include "stoker.h"

#define HIDDEN "***"

struct out {
    char *buf;
    size_t size;
    size_t len; /* of the full result, also past size */
};

static void put(struct out *o, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++, o->len++)
        if (o->len + 1 < o->size)
            o->buf[o->len] = s[i];
}

static void put_str(struct out *o, const char *s)
{
    put(o, s, strlen(s));
}

/* "k1=v1&k2&k3=v3" -> "k1=***&k2&k3=***". */
static void put_query(struct out *o, const char *q, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t end = i;
        while (end < n && q[end] != '&')
            end++;
        const char *eq = memchr(q + i, '=', end - i);
        if (eq == NULL) {
            put(o, q + i, end - i);
        } else {
            put(o, q + i, (size_t)(eq - (q + i)) + 1);
            put_str(o, HIDDEN);
        }
        if (end < n)
            put(o, "&", 1);
        i = end + 1;
    }
}

/* An authority without '@' that holds ':' followed by more than a port
 * number ("user:pa" of "user:pa/ss@host"). */
static int password_cut_short(const char *auth, size_t len)
{
    size_t i = 0;
    if (len > 0 && auth[0] == '[') /* an IPv6 literal: its colons are no password */
        while (i < len && auth[i] != ']')
            i++;
    const char *colon = memchr(auth + i, ':', len - i);
    if (colon == NULL)
        return 0;
    for (const char *p = colon + 1; p < auth + len; p++)
        if (*p < '0' || *p > '9')
            return 1;
    return 0;
}

static void put_url(struct out *o, const char *url)
{
    const char *sep = strstr(url, "://");
    const char *scheme_end = url;
    while (*scheme_end != '\0' && *scheme_end != ':' && *scheme_end != '/' && *scheme_end != '?')
        scheme_end++;
    if (sep == NULL || sep != scheme_end || sep == url) {
        put_str(o, url);
        return;
    }
    const char *auth = sep + 3;
    size_t auth_len = strcspn(auth, "/?#");
    put(o, url, (size_t)(auth - url));
    /* userinfo ends at the last '@' of the authority: passwords may hold
     * an unescaped '@'. */
    const char *at = NULL;
    for (size_t i = 0; i < auth_len; i++)
        if (auth[i] == '@')
            at = auth + i;
    if (at == NULL && password_cut_short(auth, auth_len)) {
        /* "user:pa/ss@host": the authority seems to end early at a '/', '?'
         * or '#' inside a password. Not a URL libcurl accepts, but one that
         * may be printed: the userinfo runs to the last '@'. */
        at = strrchr(auth, '@');
        if (at != NULL)
            auth_len = (size_t)(at - auth) + 1 + strcspn(at + 1, "/?#");
    }
    if (at != NULL) {
        put_str(o, HIDDEN "@");
        put(o, at + 1, (size_t)(auth + auth_len - (at + 1)));
    } else {
        put(o, auth, auth_len);
    }
    const char *rest = auth + auth_len;
    size_t path_len = strcspn(rest, "?#");
    put(o, rest, path_len);
    rest += path_len;
    if (*rest == '?') {
        size_t q_len = strcspn(rest + 1, "#");
        put(o, "?", 1);
        put_query(o, rest + 1, q_len);
        rest += 1 + q_len;
    }
    if (*rest == '#')
        put_str(o, "#" HIDDEN);
}

/* ---- pipe: commands ---- */

/* Does s[0..n) contain a word that names a credential (any case)? */
static int looks_secret(const char *s, size_t n)
{
    static const char *const words[] = {"pass", "pwd",  "secret", "token", "key",
                                        "auth", "cred", "sig",    "cookie", "session"};
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizeof words / sizeof words[0]; k++) {
            size_t len = strlen(words[k]);
            if (n - i >= len && strncasecmp(s + i, words[k], len) == 0)
                return 1;
        }
    return 0;
}

/* Options whose next word is a credential. Exact names only: "--no-sign-
 * request" must not hide the URL after it. */
static int takes_secret(const char *w, size_t n)
{
    static const char *const options[] = {
        "-u",            "--user",          "--proxy-user", "--password",   "--passwd",
        "--pass",        "--token",         "--secret",     "--auth",       "--api-key",
        "--apikey",      "--access-key",    "--secret-key", "--secret-access-key",
        "--session-token", "--oauth2-bearer", "--cookie"};
    for (size_t k = 0; k < sizeof options / sizeof options[0]; k++)
        if (strlen(options[k]) == n && memcmp(w, options[k], n) == 0)
            return 1;
    return 0;
}

/* The redacted form of one word's characters w[0..n) (w[n] is a NUL). */
static void put_word(struct out *o, const char *w, size_t n, int after_secret_option)
{
    if (after_secret_option) {
        put_str(o, HIDDEN);
        return;
    }
    size_t name = 0; /* "Name: value" header arguments */
    while (name < n && (isalnum((unsigned char)w[name]) || w[name] == '-' || w[name] == '_'))
        name++;
    if (name > 0 && name < n && w[name] == ':') {
        size_t v = name + 1;
        while (v < n && (w[v] == ' ' || w[v] == '\t'))
            v++;
        if (v < n && looks_secret(w, name)) {
            put(o, w, name);
            put_str(o, ": " HIDDEN);
            return;
        }
    }
    const char *eq = memchr(w, '=', n);
    const char *url = strstr(w, "://");
    if (eq != NULL && eq > w && (size_t)(eq - w) + 1 < n && (url == NULL || eq < url) &&
        looks_secret(w, (size_t)(eq - w))) { /* NAME=value, --password=value */
        put(o, w, (size_t)(eq - w) + 1);
        put_str(o, HIDDEN);
        return;
    }
    if (url != NULL) { /* a URL, maybe after a prefix such as --url= */
        const char *scheme = url;
        while (scheme > w && (isalnum((unsigned char)scheme[-1]) || scheme[-1] == '+' ||
                              scheme[-1] == '-' || scheme[-1] == '.'))
            scheme--;
        if (scheme < url) {
            put(o, w, (size_t)(scheme - w));
            put_url(o, scheme);
            return;
        }
    }
    put(o, w, n);
}

/* w[0..n) as the command splitter reads it back: bare when it holds no
 * blank, quote or backslash, else in double quotes. */
static void put_quoted(struct out *o, const char *w, size_t n)
{
    int bare = n > 0;
    for (size_t i = 0; i < n; i++)
        if (strchr(" \t\r\n'\"\\", w[i]) != NULL)
            bare = 0;
    if (bare) {
        put(o, w, n);
        return;
    }
    put(o, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        if (w[i] == '"' || w[i] == '\\')
            put(o, "\\", 1);
        put(o, w + i, 1);
    }
    put(o, "\"", 1);
}

static void put_command(struct out *o, const char *cmd)
{
    size_t len = strlen(cmd), cap = 4 * len + 16;
    /* The words' characters, and a word's redacted form: a hidden value
     * ("***") is at most 4 bytes longer than what it hides, so 4n + 16
     * holds every word of an n-byte command. */
    char *scratch = stk__malloc(len + 1 + cap);
    if (scratch == NULL) {
        put_str(o, HIDDEN); /* when in doubt, show nothing */
        return;
    }
    char *chars = scratch, *red = scratch + len + 1;
    const char *p = cmd, *start, *end;
    size_t n;
    char quote;
    int after_secret_option = 0;
    while (stk__command_word(p, &start, &end, chars, &n, &quote) != 0) {
        chars[n] = '\0';
        put(o, p, (size_t)(start - p)); /* blanks as they were */
        struct out r = {red, cap, 0};
        put_word(&r, chars, n, after_secret_option);
        if (r.len == n && memcmp(red, chars, n) == 0)
            put(o, start, (size_t)(end - start)); /* unchanged: the exact text */
        else
            put_quoted(o, red, r.len < cap ? r.len : cap - 1);
        after_secret_option = takes_secret(chars, n);
        p = end;
    }
    put_str(o, p);
    stk__free(scratch);
}

size_t stk__redact_url(const char *url, char *out, size_t out_size)
{
    struct out o = {out, out_size, 0};
    if (strncmp(url, "pipe:", 5) == 0) {
        put_str(&o, "pipe:");
        put_command(&o, url + 5);
    } else {
        put_url(&o, url);
    }
    if (out_size > 0)
        out[o.len < out_size ? o.len : out_size - 1] = '\0';
    return o.len;
}

char *stk__redact_url_dup(const char *url)
{
    size_t n = stk__redact_url(url, NULL, 0);
    char *s = stk__malloc(n + 1);
    if (s != NULL)
        stk__redact_url(url, s, n + 1);
    return s;
}

void stk_redact_url(const char *url, char *buf, size_t size)
{
    stk__redact_url(url, buf, size);
}
