/* SPDX-License-Identifier: MIT */
/*
 * sample.c - samples: key, url and members with their data.
 */
#include "tar/sample.h"

#include <string.h>

#include "base/alloc.h"

struct stk__sample *stk__sample_new(const char *key, size_t key_len, const char *url,
                                    uint64_t shard_index, struct stk__buffer_pool *pool)
{
    struct stk__sample *s = stk__calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->key = stk__strndup(key, key_len);
    if (s->key == NULL) {
        stk__free(s);
        return NULL;
    }
    s->pub.key = s->key;
    s->pub.url = url;
    s->pub.shard_index = shard_index;
    s->pool = pool;
    return s;
}

static char ascii_lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

int stk__sample_has_ext(const struct stk__sample *s, const char *ext, size_t ext_len)
{
    for (size_t i = 0; i < s->pub.n_members; i++) {
        const char *have = s->members[i].ext;
        size_t j = 0;
        while (j < ext_len && have[j] != '\0' && have[j] == ascii_lower(ext[j]))
            j++;
        if (j == ext_len && have[j] == '\0')
            return 1;
    }
    return 0;
}

int stk__sample_add(struct stk__sample *s, const char *ext, size_t ext_len, uint8_t *data,
                    size_t size)
{
    if (s->pub.n_members == s->capacity) {
        size_t cap = s->capacity ? s->capacity * 2 : 4;
        struct stk_member *m = stk__realloc(s->members, cap * sizeof *m);
        if (m == NULL) {
            stk__buffer_pool_put(s->pool, data, size + 1);
            return STK_ENOMEM;
        }
        s->members = m;
        s->capacity = cap;
        s->pub.members = m;
    }
    char *e = stk__strndup(ext, ext_len);
    if (e == NULL) {
        stk__buffer_pool_put(s->pool, data, size + 1);
        return STK_ENOMEM;
    }
    for (char *p = e; *p; p++)
        *p = ascii_lower(*p);
    struct stk_member *m = &s->members[s->pub.n_members++];
    m->ext = e;
    m->data = data;
    m->size = size;
    s->bytes += size;
    return 0;
}

void stk__sample_free(struct stk__sample *s)
{
    if (s == NULL)
        return;
    for (size_t i = 0; i < s->pub.n_members; i++) {
        stk__free((void *)s->members[i].ext);
        stk__buffer_pool_put(s->pool, (void *)s->members[i].data, s->members[i].size + 1);
    }
    stk__free(s->members);
    stk__free(s->key);
    stk__free(s);
}
