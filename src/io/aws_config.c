/* SPDX-License-Identifier: MIT */
/*
 * aws_config.c - read the AWS shared config and credentials files.
 *
 * The rules are Python configparser's as botocore configures it (the
 * format has no other specification; aws_config.h lists them), so that a
 * file the AWS CLI reads means the same here and a file it refuses is
 * refused here too. Names, keys and values are copied into one buffer of
 * the parsed file, which is wiped when freed: values are secrets.
 */
#include "io/aws_config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/alloc.h"
#include "io/command.h"
#include "io/cred_http.h"
#include "stoker.h"

/* Python's str.strip() blanks that can occur in these files. */
static int is_space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f'; }

struct parser {
    struct stk__aws_ini *ini;
    enum stk__aws_file kind;
    const char *path;
    size_t line;
    size_t cap; /* of ini->text */
    struct stk__err *err;
};

static int fail(struct parser *p, const char *what)
{
    return stk__errf(p->err, STK_EINVAL, "AWS %s file %s, line %zu: %s",
                     p->kind == STK__AWS_CONFIG ? "config" : "credentials", p->path, p->line, what);
}

/* Append s[0..n) and a NUL to the text; where it starts. The text has room
 * for every line of the input plus one NUL per line (checked anyway). */
static char *put(struct parser *p, const char *s, size_t n)
{
    struct stk__aws_ini *ini = p->ini;
    if (ini->text_len + n + 1 > p->cap)
        return NULL;
    char *at = ini->text + ini->text_len;
    memcpy(at, s, n);
    at[n] = '\0';
    ini->text_len += n + 1;
    return at;
}

static int push(struct parser *p, const char *profile, const char *key, const char *value)
{
    struct stk__aws_ini *ini = p->ini;
    if (ini->count == ini->cap) {
        size_t cap = ini->cap ? 2 * ini->cap : 16;
        struct stk__aws_entry *e = stk__realloc(ini->entries, cap * sizeof *e);
        if (e == NULL)
            return stk__errf(p->err, STK_ENOMEM, "out of memory reading %s", p->path);
        ini->entries = e;
        ini->cap = cap;
    }
    ini->entries[ini->count++] = (struct stk__aws_entry){profile, key, value};
    return 0;
}

/* The profile a section name stands for in this kind of file, copied into
 * the text; NULL (and no error) for a section that is not a profile. */
static const char *profile_of(struct parser *p, const char *name, size_t n, int *rc)
{
    *rc = 0;
    if (p->kind == STK__AWS_CREDENTIALS)
        return put(p, name, n);
    if (n == 7 && memcmp(name, "default", 7) == 0)
        return put(p, name, n);
    if (n < 7 || memcmp(name, "profile", 7) != 0)
        return NULL;
    /* botocore: shlex.split(name), a profile when it gives two words. */
    char *copy = stk__strndup(name, n);
    char *word = copy != NULL ? stk__malloc(n + 1) : NULL;
    if (word == NULL) {
        stk__free(copy);
        *rc = stk__errf(p->err, STK_ENOMEM, "out of memory reading %s", p->path);
        return NULL;
    }
    const char *at = copy, *start, *end, *profile = NULL;
    size_t len = 0, words = 0;
    char quote;
    int got;
    while ((got = stk__command_word(at, &start, &end, word, &len, &quote)) > 0) {
        if (++words == 2)
            profile = put(p, word, len);
        at = end;
    }
    if (got < 0 || words != 2)
        profile = NULL; /* an open quote (shlex refuses it) or not two words */
    stk__free(word);
    stk__free(copy);
    return profile;
}

/* A second section for profile: the same header twice is an error (as
 * configparser's DuplicateSectionError); another header naming the same
 * profile ("[default]" and "[profile default]") replaces the first
 * section, as botocore's profile map does. */
static int redefine(struct parser *p, const char *profile, const char *raw, size_t raw_len)
{
    struct stk__aws_ini *ini = p->ini;
    size_t kept = 0;
    for (size_t i = 0; i < ini->count; i++) {
        const struct stk__aws_entry *e = &ini->entries[i];
        if (strcmp(e->profile, profile) != 0) {
            ini->entries[kept++] = *e;
            continue;
        }
        if (e->key == NULL && strlen(e->value) == raw_len && memcmp(e->value, raw, raw_len) == 0)
            return fail(p, "a section is defined twice");
    }
    ini->count = kept;
    return 0;
}

int stk__aws_ini_parse(const char *data, size_t len, enum stk__aws_file kind, const char *path,
                       struct stk__aws_ini *ini, struct stk__err *err)
{
    memset(ini, 0, sizeof *ini);
    struct parser p = {.ini = ini, .kind = kind, .path = path, .cap = 2 * len + 16, .err = err};
    if (memchr(data, '\0', len) != NULL)
        return stk__errf(err, STK_EINVAL, "AWS %s file %s holds a NUL byte: not a text file",
                         kind == STK__AWS_CONFIG ? "config" : "credentials", path);
    ini->text = stk__malloc(p.cap);
    if (ini->text == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory reading %s", path);
    const char *profile = NULL; /* of the open section; NULL: none, or not a profile */
    int in_section = 0;
    size_t section_first = 0; /* its first entry */
    char *value = NULL;       /* the open key's value (NULL: none open) */
    size_t value_indent = 0, blanks = 0;
    int open_key = 0; /* a key is open, stored or not */
    int rc = 0;
    const char *s = data, *end = data + len;
    while (rc == 0 && s < end) {
        p.line++;
        const char *eol = s;
        while (eol < end && *eol != '\n' && *eol != '\r')
            eol++;
        const char *next = eol < end && *eol == '\r' && eol + 1 < end && eol[1] == '\n' ? eol + 2
                           : eol < end                                                  ? eol + 1
                                                                                        : eol;
        size_t n = (size_t)(eol - s), indent = 0;
        while (n > 0 && is_space(s[n - 1]))
            n--;
        while (indent < n && is_space(s[indent]))
            indent++;
        const char *t = s + indent;
        size_t m = n - indent;
        s = next;
        if (m == 0) {
            blanks++; /* part of an open value if a continuation follows */
            continue;
        }
        if (t[0] == '#' || t[0] == ';')
            continue;
        if (open_key && indent > value_indent) {
            if (value != NULL) { /* a continuation: the value is the text's last string */
                size_t have = strlen(value);
                if (ini->text_len + blanks + m + 1 > p.cap) {
                    rc = fail(&p, "too long");
                    break;
                }
                memset(value + have, '\n', blanks + 1);
                memcpy(value + have + blanks + 1, t, m);
                value[have + blanks + 1 + m] = '\0';
                ini->text_len += blanks + 1 + m;
            }
            blanks = 0;
            continue;
        }
        blanks = 0;
        const char *close = NULL; /* the last ']', with a name before it */
        for (size_t i = 2; t[0] == '[' && i < m; i++)
            if (t[i] == ']')
                close = t + i;
        if (close != NULL) {
            size_t raw_len = (size_t)(close - t - 1);
            profile = profile_of(&p, t + 1, raw_len, &rc);
            if (rc < 0)
                break;
            if (profile != NULL && (rc = redefine(&p, profile, t + 1, raw_len)) < 0)
                break;
            in_section = 1;
            open_key = 0;
            value = NULL;
            section_first = ini->count;
            const char *raw = profile != NULL ? put(&p, t + 1, raw_len) : NULL;
            if (raw != NULL)
                rc = push(&p, profile, NULL, raw);
            continue;
        }
        size_t k = 0; /* the first '=' or ':' */
        while (k < m && t[k] != '=' && t[k] != ':')
            k++;
        if (k >= m) {
            rc = fail(&p, "neither a [section], a key = value nor a comment");
            break;
        }
        size_t klen = k;
        while (klen > 0 && is_space(t[klen - 1]))
            klen--;
        if (klen == 0) {
            rc = fail(&p, "a value without a key");
            break;
        }
        if (!in_section) {
            rc = fail(&p, "a key before the first [section]");
            break;
        }
        const char *v = t + k + 1;
        size_t vlen = m - k - 1;
        while (vlen > 0 && is_space(*v))
            v++, vlen--;
        open_key = 1;
        value_indent = indent;
        value = NULL;
        if (profile == NULL)
            continue; /* a section that is no profile: read, not kept */
        char *key = put(&p, t, klen);
        for (char *c = key; c != NULL && *c != '\0'; c++)
            if (*c >= 'A' && *c <= 'Z')
                *c = (char)(*c - 'A' + 'a');
        for (size_t i = section_first; key != NULL && i < ini->count; i++)
            if (ini->entries[i].key != NULL && strcmp(ini->entries[i].key, key) == 0) {
                rc = fail(&p, "a key is set twice in one profile");
                break;
            }
        if (rc < 0)
            break;
        value = key != NULL ? put(&p, v, vlen) : NULL;
        if (value == NULL) {
            rc = fail(&p, "too long");
            break;
        }
        rc = push(&p, profile, key, value);
    }
    if (rc < 0)
        stk__aws_ini_free(ini);
    return rc;
}

const char *stk__aws_ini_get(const struct stk__aws_ini *ini, const char *profile, const char *key)
{
    for (size_t i = 0; i < ini->count; i++) {
        const struct stk__aws_entry *e = &ini->entries[i];
        if (e->key != NULL && strcmp(e->profile, profile) == 0 && strcmp(e->key, key) == 0)
            return e->value;
    }
    return NULL;
}

int stk__aws_ini_has(const struct stk__aws_ini *ini, const char *profile)
{
    for (size_t i = 0; i < ini->count; i++)
        if (ini->entries[i].key == NULL && strcmp(ini->entries[i].profile, profile) == 0)
            return 1;
    return 0;
}

void stk__aws_ini_free(struct stk__aws_ini *ini)
{
    if (ini->text != NULL)
        stk__cred_wipe(ini->text, ini->text_len);
    stk__free(ini->text);
    stk__free(ini->entries);
    memset(ini, 0, sizeof *ini);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

static int load_one(struct stk__aws_config *cfg, enum stk__aws_file kind, const char *var,
                    const char *home_path, struct stk__err *err)
{
    const char *named = env(var), *home = env("HOME");
    char *path = cfg->path[kind];
    if (named != NULL)
        snprintf(path, sizeof cfg->path[kind], "%s", named);
    else if (home == NULL || (size_t)snprintf(path, sizeof cfg->path[kind], "%s/%s", home,
                                              home_path) >= sizeof cfg->path[kind])
        return 0;
    if (named == NULL && access(path, F_OK) != 0 && errno == ENOENT)
        return 0;
    const char *what = kind == STK__AWS_CONFIG ? "AWS config file" : "AWS credentials file";
    char *text = stk__cred_read_file(what, path, err);
    if (text == NULL)
        return err->code;
    int rc = stk__aws_ini_parse(text, strlen(text), kind, path, &cfg->file[kind], err);
    stk__cred_wipe_free(text);
    return rc;
}

int stk__aws_config_load(struct stk__aws_config *cfg, struct stk__err *err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->profile = env("AWS_PROFILE");
    cfg->profile_named = cfg->profile != NULL;
    if (cfg->profile == NULL)
        cfg->profile = "default";
    int rc =
        load_one(cfg, STK__AWS_CREDENTIALS, "AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials", err);
    if (rc == 0)
        rc = load_one(cfg, STK__AWS_CONFIG, "AWS_CONFIG_FILE", ".aws/config", err);
    return rc;
}

const char *stk__aws_config_get(const struct stk__aws_config *cfg, const char *profile,
                                const char *key, const char **from)
{
    for (int kind = STK__AWS_CREDENTIALS; kind >= STK__AWS_CONFIG; kind--) {
        const char *v = stk__aws_ini_get(&cfg->file[kind], profile, key);
        if (v != NULL) {
            if (from != NULL)
                *from = cfg->path[kind];
            return v;
        }
    }
    return NULL;
}

int stk__aws_config_has(const struct stk__aws_config *cfg, const char *profile)
{
    return stk__aws_ini_has(&cfg->file[0], profile) || stk__aws_ini_has(&cfg->file[1], profile);
}

void stk__aws_config_free(struct stk__aws_config *cfg)
{
    stk__aws_ini_free(&cfg->file[0]);
    stk__aws_ini_free(&cfg->file[1]);
}
