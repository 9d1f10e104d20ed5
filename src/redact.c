/*
 * redact.c - hide the secrets a URL can carry before it is printed.
 *
 * Only "scheme://" URLs are rewritten: plain paths and pipe: commands are
 * the user's own text and print unchanged. Every query value is hidden, not
 * just those of known signature keys, because signing schemes differ
 * (X-Amz-Signature, X-Goog-Signature, Azure's sig, CloudFront's Policy, ...)
 * and a value printed by mistake cannot be taken back; the keys stay, so a
 * message still says which kind of URL failed.
 */
#include "redact.h"

#include <string.h>

#include "alloc.h"
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

size_t stk__redact_url(const char *url, char *out, size_t out_size)
{
    struct out o = {out, out_size, 0};
    const char *sep = strstr(url, "://");
    const char *scheme_end = url;
    while (*scheme_end != '\0' && *scheme_end != ':' && *scheme_end != '/' && *scheme_end != '?')
        scheme_end++;
    if (sep == NULL || sep != scheme_end || sep == url) {
        put_str(&o, url);
    } else {
        const char *auth = sep + 3;
        size_t auth_len = strcspn(auth, "/?#");
        put(&o, url, (size_t)(auth - url));
        /* userinfo ends at the last '@' of the authority: passwords may
         * hold an unescaped '@'. */
        const char *at = NULL;
        for (size_t i = 0; i < auth_len; i++)
            if (auth[i] == '@')
                at = auth + i;
        if (at != NULL) {
            put_str(&o, HIDDEN "@");
            put(&o, at + 1, (size_t)(auth + auth_len - (at + 1)));
        } else {
            put(&o, auth, auth_len);
        }
        const char *rest = auth + auth_len;
        size_t path_len = strcspn(rest, "?#");
        put(&o, rest, path_len);
        rest += path_len;
        if (*rest == '?') {
            size_t q_len = strcspn(rest + 1, "#");
            put(&o, "?", 1);
            put_query(&o, rest + 1, q_len);
            rest += 1 + q_len;
        }
        if (*rest == '#')
            put_str(&o, "#" HIDDEN);
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
