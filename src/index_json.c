/* SPDX-License-Identifier: MIT */
/*
 * index_json.c - read and write the dataset index file (index_json.h).
 *
 * Why a stream and not a tree: cJSON builds a node of about 64 bytes for
 * every value, so a 100 MB index whose unknown key held 50 million zeros
 * took 4.0 GB and 30 s to load (and the 1 GB file cap allowed 40 GB), on
 * the trainer and on every Dask worker, which load the same file. yajl
 * hands each value to the callbacks below as it is lexed; they keep only
 * what the loader needs and stop the parse at the first value an index
 * cannot hold. The callbacks follow the format's fixed shape with a depth
 * counter: 1 the top object, 2 the shards list, 3 a shard, 4 its offsets.
 */
#include "index_json.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

#include "base/alloc.h"
#include "base/siphash.h"
#include "io/redact.h"
#include "stoker.h"

#define READ_CHUNK ((size_t)64 << 10)
#define MAX_URL_BYTES ((size_t)64 << 10)
#define TAR_BLOCK 512u
#define HEX128_LEN 32

/* The keys an index holds, top level and per shard. */
enum key {
    K_NONE,
    K_FORMAT,
    K_VERSION,
    K_SAMPLES,
    K_URL_KEY,
    K_SHARDS,
    S_URL,
    S_URL_TAG,
    S_SAMPLES,
    S_SIZE,
    S_MTIME,
    S_ETAG,
    S_OFFSETS,
    N_KEYS
};

static const char *const key_names[N_KEYS] = {
    "",        "format",  "version", "samples",  "url_key", "shards", "url",
    "url_tag", "samples", "size",    "mtime_ns", "etag",    "offsets",
};

struct parse {
    const char *path;
    struct stk__err *err;
    yajl_handle yajl;
    struct stk__index_file *out;
    size_t cap;           /* of out->entries */
    int depth;
    enum key key;         /* the key whose value comes next */
    unsigned seen;        /* keys of the current object (top or shard), by bit */
    unsigned top_seen;    /* the top object's, kept while a shard is read */
    size_t n_offsets;     /* of the current shard */
    size_t offsets_cap;
    int failed;           /* err holds why */
};

static size_t at(const struct parse *p)
{
    return p->yajl != NULL ? yajl_get_bytes_consumed(p->yajl) : 0;
}

/* Stop the parse with STK_EINDEX: "PATH: <what> (byte N of the dataset index)". */
static int refuse(struct parse *p, const char *what)
{
    if (!p->failed)
        stk__errf(p->err, STK_EINDEX, "%s: %s (byte %zu of the dataset index)", p->path, what,
                  at(p));
    p->failed = 1;
    return 0;
}

static int out_of_memory(struct parse *p)
{
    stk__errf(p->err, STK_ENOMEM, "%s: out of memory reading the dataset index", p->path);
    p->failed = 1;
    return 0;
}

static struct stk__index_entry *shard(struct parse *p)
{
    return &p->out->entries[p->out->n - 1];
}

/* The current shard as messages name it: its URL redacted (it may hold
 * credentials) once read, else its place in the list. */
static const char *shard_name(const struct parse *p, char *buf, size_t cap)
{
    const struct stk__index_entry *e = &p->out->entries[p->out->n - 1];
    if (e->url != NULL)
        stk__redact_url(e->url, buf, cap);
    else
        snprintf(buf, cap, "entry %zu", p->out->n - 1);
    return buf;
}

/* A value where the format has none of its kind (container: an object or
 * a list, which may begin a deep nesting). */
static int wrong_value(struct parse *p, const char *kind, int container)
{
    char what[STK__ERRMSG_MAX / 2], name[STK__ERRMSG_MAX / 4];
    if (p->depth == 0)
        snprintf(what, sizeof what, "not a stoker dataset index: its top level is %s, not an "
                 "object", kind);
    else if (container && (p->depth == 2 || p->depth == 4))
        snprintf(what, sizeof what, "%s nested too deep (an index nests four levels: "
                 "{\"shards\": [{\"offsets\": [...]}]})", kind);
    else if (p->depth == 2)
        snprintf(what, sizeof what, "%s in the shards list, which holds objects", kind);
    else if (p->depth == 4)
        snprintf(what, sizeof what, "%s among the offsets of shard %s", kind,
                 shard_name(p, name, sizeof name));
    else
        snprintf(what, sizeof what, "%s as the value of \"%s\"", kind, key_names[p->key]);
    return refuse(p, what);
}

static int on_null(void *ctx)
{
    return wrong_value(ctx, "null", 0);
}

static int on_boolean(void *ctx, int value)
{
    (void)value;
    return wrong_value(ctx, "a boolean", 0);
}

/* An exact unsigned integer: digits only, no sign, fraction or exponent. */
static int parse_u64(const char *s, size_t len, uint64_t *v)
{
    if (len == 0 || len > 20 || (len > 1 && s[0] == '0'))
        return -1;
    uint64_t x = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            return -1;
        x = x * 10 + d;
    }
    *v = x;
    return 0;
}

static int add_offset(struct parse *p, uint64_t v)
{
    struct stk__index_entry *e = shard(p);
    char what[STK__ERRMSG_MAX / 2], name[STK__ERRMSG_MAX / 4];
    if (p->n_offsets == e->samples) {
        snprintf(what, sizeof what, "shard %s has more offsets than its %" PRIu64 " samples",
                 shard_name(p, name, sizeof name), e->samples);
        return refuse(p, what);
    }
    if (v % TAR_BLOCK != 0 || (p->n_offsets > 0 && v <= e->offsets[p->n_offsets - 1]) ||
        (e->stamp.has_size && v >= e->stamp.size)) {
        snprintf(what, sizeof what,
                 "shard %s has a bad offset (number %zu, %" PRIu64 "): offsets increase, "
                 "are multiples of 512 and lie within the shard",
                 shard_name(p, name, sizeof name), p->n_offsets, v);
        return refuse(p, what);
    }
    if (p->n_offsets == p->offsets_cap) {
        size_t cap = p->offsets_cap * 2;
        if (cap > e->samples)
            cap = (size_t)e->samples;
        uint64_t *grown = stk__realloc(e->offsets, cap * sizeof *grown);
        if (grown == NULL)
            return out_of_memory(p);
        e->offsets = grown;
        p->offsets_cap = cap;
    }
    e->offsets[p->n_offsets++] = v;
    return 1;
}

static int number_value(struct parse *p, const char *text, size_t len);

static int on_number(void *ctx, const char *text, size_t len)
{
    struct parse *p = ctx;
    int ok = number_value(p, text, len);
    p->key = K_NONE;
    return ok;
}

static int number_value(struct parse *p, const char *text, size_t len)
{
    uint64_t v;
    if (p->depth == 0 || p->depth == 2)
        return wrong_value(p, "a number", 0);
    if (parse_u64(text, len, &v) < 0) {
        char what[128];
        snprintf(what, sizeof what, "%.*s where a count or offset (an unsigned integer) goes",
                 (int)(len < 40 ? len : 40), text);
        return refuse(p, what);
    }
    if (p->depth == 4)
        return add_offset(p, v);
    enum key k = p->key;
    switch (k) {
    case K_VERSION:
        if (v >= STK__INDEX_VERSION_MIN && v <= STK__INDEX_VERSION)
            return 1;
        if (v == 1) {
            stk__errf(p->err, STK_EINDEX,
                      "%s: the dataset index was written by an older stoker (version 1, which "
                      "records no shard sizes to check it against): run `stoker index` again",
                      p->path);
            p->failed = 1;
            return 0;
        }
        stk__errf(p->err, STK_EINDEX, "%s: dataset index version %" PRIu64 " is not supported "
                  "(%d to %d are): run `stoker index` again", p->path, v,
                  STK__INDEX_VERSION_MIN, STK__INDEX_VERSION);
        p->failed = 1;
        return 0;
    case K_SAMPLES: p->out->samples = v; return 1;
    case S_SAMPLES: shard(p)->samples = v; return 1;
    case S_SIZE:
        shard(p)->stamp.size = v;
        shard(p)->stamp.has_size = 1;
        return 1;
    case S_MTIME: shard(p)->stamp.mtime_ns = v; return 1;
    default: return wrong_value(p, "a number", 0);
    }
}

/* 32 hex digits: a 128-bit key or tag, first word first. */
static int parse_hex128(const unsigned char *s, size_t len, uint64_t v[2])
{
    if (len != HEX128_LEN)
        return -1;
    v[0] = v[1] = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned d;
        if (s[i] >= '0' && s[i] <= '9')
            d = (unsigned)(s[i] - '0');
        else if (s[i] >= 'a' && s[i] <= 'f')
            d = (unsigned)(s[i] - 'a' + 10);
        else
            return -1;
        v[i / 16] = v[i / 16] << 4 | d;
    }
    return 0;
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
    struct parse *p = ctx;
    enum key k = p->depth == 1 || p->depth == 3 ? p->key : K_NONE;
    if (k != K_NONE && k != K_FORMAT && k != S_URL && k != S_ETAG && k != K_URL_KEY &&
        k != S_URL_TAG)
        return wrong_value(p, "a string", 0);
    p->key = K_NONE;
    if (k == K_FORMAT) {
        if (len == strlen(STK__INDEX_FORMAT) && memcmp(s, STK__INDEX_FORMAT, len) == 0)
            return 1;
        stk__errf(p->err, STK_EINDEX, "%s: not a stoker dataset index (its format is not \"%s\")",
                  p->path, STK__INDEX_FORMAT);
        p->failed = 1;
        return 0;
    }
    if (k == S_URL) {
        if (len > MAX_URL_BYTES || memchr(s, '\0', len) != NULL)
            return refuse(p, "a shard URL longer than 64 KiB or holding a NUL");
        if ((shard(p)->url = stk__strndup((const char *)s, len)) == NULL)
            return out_of_memory(p);
        return 1;
    }
    if (k == K_URL_KEY || k == S_URL_TAG) {
        uint64_t *v = k == K_URL_KEY ? p->out->url_key : shard(p)->tag;
        if (parse_hex128(s, len, v) < 0) {
            char what[96];
            snprintf(what, sizeof what, "a %s that is not 32 lower-case hex digits",
                     key_names[k]);
            return refuse(p, what);
        }
        if (k == S_URL_TAG)
            shard(p)->has_tag = 1;
        return 1;
    }
    if (k == S_ETAG) {
        if (len >= STK__ETAG_MAX)
            return refuse(p, "an ETag longer than 127 bytes");
        memcpy(shard(p)->stamp.etag, s, len);
        shard(p)->stamp.etag[len] = '\0';
        return 1;
    }
    return wrong_value(p, "a string", 0);
}

static int on_start_map(void *ctx)
{
    struct parse *p = ctx;
    if (p->depth == 0) {
        p->depth = 1;
        return 1;
    }
    if (p->depth != 2)
        return wrong_value(p, "an object", 1);
    struct stk__index_file *f = p->out;
    if (f->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct stk__index_entry *grown = stk__realloc(f->entries, cap * sizeof *grown);
        if (grown == NULL)
            return out_of_memory(p);
        f->entries = grown;
        p->cap = cap;
    }
    memset(&f->entries[f->n++], 0, sizeof *f->entries);
    p->depth = 3;
    p->top_seen = p->seen;
    p->seen = 0;
    p->n_offsets = p->offsets_cap = 0;
    return 1;
}

static int on_map_key(void *ctx, const unsigned char *s, size_t len)
{
    struct parse *p = ctx;
    enum key first = p->depth == 1 ? K_FORMAT : S_URL, last = p->depth == 1 ? K_SHARDS : S_OFFSETS;
    enum key k = K_NONE;
    for (enum key i = first; i <= last && k == K_NONE; i++)
        if (strlen(key_names[i]) == len && memcmp(key_names[i], s, len) == 0)
            k = i;
    char what[192];
    if (k == K_NONE) {
        /* Its value is never read: a key of any size is refused here. */
        snprintf(what, sizeof what, "unknown key \"%.*s\"%s (an index holds %s)",
                 (int)(len < 40 ? len : 40), (const char *)s, len > 40 ? "..." : "",
                 p->depth == 1 ? "format, version, samples, url_key, shards"
                               : "url, url_tag, samples, size, mtime_ns, etag, offsets per "
                                 "shard");
        return refuse(p, what);
    }
    if (p->seen & (1u << k)) {
        snprintf(what, sizeof what, "key \"%s\" twice", key_names[k]);
        return refuse(p, what);
    }
    if (k == S_OFFSETS && !(p->seen & (1u << S_SAMPLES)))
        return refuse(p, "offsets before the shard's sample count");
    p->seen |= 1u << k;
    p->key = k;
    return 1;
}

/* A shard object ended: what it holds must be whole. */
static int end_shard(struct parse *p)
{
    struct stk__index_entry *e = shard(p);
    char what[STK__ERRMSG_MAX / 2], name[STK__ERRMSG_MAX / 4];
    if (e->url == NULL || !(p->seen & (1u << S_SAMPLES))) {
        snprintf(what, sizeof what, "shard %s needs a url and a sample count",
                 shard_name(p, name, sizeof name));
        return refuse(p, what);
    }
    if (e->offsets != NULL && p->n_offsets != e->samples) {
        snprintf(what, sizeof what, "shard %s has offsets that do not match its samples",
                 shard_name(p, name, sizeof name));
        return refuse(p, what);
    }
    p->seen = p->top_seen;
    return 1;
}

static int on_end_map(void *ctx)
{
    struct parse *p = ctx;
    if (p->depth == 3) {
        p->depth = 2;
        return end_shard(p);
    }
    p->depth = 0; /* the top object: checked once the parse completes */
    return 1;
}

static int on_start_array(void *ctx)
{
    struct parse *p = ctx;
    if (p->depth == 1 && p->key == K_SHARDS) {
        p->depth = 2;
        p->key = K_NONE;
        return 1;
    }
    if (p->depth == 3 && p->key == S_OFFSETS) {
        p->depth = 4;
        p->key = K_NONE;
        /* Room for the first offsets (at least one, so that even an empty
         * list is there); more as they come, never past the count. */
        struct stk__index_entry *e = shard(p);
        p->offsets_cap = e->samples < 1024 ? (e->samples > 0 ? (size_t)e->samples : 1) : 1024;
        if ((e->offsets = stk__malloc(p->offsets_cap * sizeof *e->offsets)) == NULL)
            return out_of_memory(p);
        return 1;
    }
    return wrong_value(p, "a list", 1);
}

static int on_end_array(void *ctx)
{
    struct parse *p = ctx;
    p->depth = p->depth == 4 ? 3 : 1;
    return 1;
}

static const yajl_callbacks callbacks = {
    on_null, on_boolean, NULL, NULL, on_number, on_string, on_start_map, on_map_key,
    on_end_map, on_start_array, on_end_array,
};

/* yajl allocates on its own (NULL alloc funcs), as libarchive, libcurl
 * and cJSON do here: it does not check what an allocator returns, so
 * failing its allocations (stk__alloc_fail_after) would crash it, not
 * test stoker. What it holds is one token and its depth stack. */

/* yajl's own complaint (a syntax error), as one line. */
static int syntax_error(struct parse *p, const unsigned char *chunk, size_t len)
{
    unsigned char *msg = yajl_get_error(p->yajl, 0, chunk, len);
    char text[160];
    snprintf(text, sizeof text, "%s", msg != NULL ? (const char *)msg : "parse error");
    if (msg != NULL)
        yajl_free_error(p->yajl, msg);
    for (char *c = text; *c; c++)
        if (*c == '\n')
            *c = ' ';
    return stk__errf(p->err, STK_EINDEX, "%s: the dataset index is not valid JSON (%s)",
                     p->path, text);
}

void stk__index_entry_for(const uint64_t key[2], const char *url, const char *name,
                          struct stk__index_entry *e)
{
    e->url = (char *)name;
    e->has_tag = strcmp(url, name) != 0;
    if (e->has_tag)
        stk__siphash128(key, url, strlen(url), e->tag);
    else
        e->tag[0] = e->tag[1] = 0;
}

/* Every entry in the form a loader matches (index_json.h): a tag needs the
 * file's key; a URL as given (version 2, or written by hand) is redacted
 * and tagged here, under a key of this reading when the file has none. */
static int redact_entries(struct parse *p)
{
    struct stk__index_file *f = p->out;
    int has_key = (p->seen & (1u << K_URL_KEY)) != 0;
    for (size_t i = 0; i < f->n; i++) {
        struct stk__index_entry *e = &f->entries[i];
        if (e->has_tag && !has_key)
            return stk__errf(p->err, STK_EINDEX,
                             "%s: shard %zu of the dataset index has a url_tag, but the index "
                             "has no url_key: run `stoker index` again", p->path, i);
        char *name = stk__redact_url_dup(e->url);
        if (name == NULL)
            return stk__errf(p->err, STK_ENOMEM, "%s: out of memory reading the dataset index",
                             p->path);
        if (strcmp(name, e->url) == 0) {
            stk__free(name);
            continue;
        }
        if (!has_key) {
            stk__siphash_random_key(f->url_key);
            has_key = 1;
        }
        char *given = e->url;
        stk__index_entry_for(f->url_key, given, name, e); /* e->url = name from here */
        stk__free(given);
    }
    return 0;
}

/* After the whole text: the top object had everything. */
static int check_whole(struct parse *p)
{
    const unsigned need = (1u << K_FORMAT) | (1u << K_VERSION) | (1u << K_SHARDS);
    if ((p->seen & need) != need)
        return stk__errf(p->err, STK_EINDEX,
                         "%s: not a stoker dataset index (it needs format, version and shards)",
                         p->path);
    uint64_t sum = 0;
    for (size_t i = 0; i < p->out->n; i++) {
        if (sum + p->out->entries[i].samples < sum)
            return stk__errf(p->err, STK_EINDEX,
                             "%s: the dataset index counts more than 2^64 samples in all: run "
                             "`stoker index` again", p->path);
        sum += p->out->entries[i].samples;
    }
    if ((p->seen & (1u << K_SAMPLES)) && sum != p->out->samples)
        return stk__errf(p->err, STK_EINDEX,
                         "%s: the dataset index counts %" PRIu64 " samples in all, but its "
                         "shards add up to %" PRIu64 ": run `stoker index` again",
                         p->path, p->out->samples, sum);
    p->out->samples = sum;
    return redact_entries(p);
}

static int too_large(const char *path, struct stk__err *err)
{
    return stk__errf(err, STK_EINDEX, "%s: the dataset index is larger than %" PRIu64 " bytes",
                     path, STK__INDEX_MAX_BYTES);
}

int stk__index_json_read(const char *path, struct stk__index_file *out, struct stk__err *err)
{
    memset(out, 0, sizeof *out);
    struct parse p = {.path = path, .err = err, .out = out};
    /* O_NONBLOCK: a FIFO at the name would block the open until some
     * writer came; it changes nothing for the regular file read below. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return stk__errf(err, errno == ENOENT ? STK_ENOENT : STK_EIO,
                         "%s: cannot open the dataset index: %s", path, strerror(errno));
    struct stat sb;
    int rc = 0;
    if (fstat(fd, &sb) != 0)
        rc = stk__errf(err, STK_EIO, "%s: cannot read the dataset index: %s", path,
                       strerror(errno));
    else if (!S_ISREG(sb.st_mode))
        rc = stk__errf(err, STK_EINDEX, "%s: the dataset index is not a regular file (%s)", path,
                       S_ISDIR(sb.st_mode) ? "a directory" : S_ISFIFO(sb.st_mode) ? "a FIFO"
                       : "a device or socket");
    else if ((uint64_t)sb.st_size > STK__INDEX_MAX_BYTES)
        rc = too_large(path, err);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    unsigned char *chunk = stk__malloc(READ_CHUNK);
    p.yajl = chunk != NULL ? yajl_alloc(&callbacks, NULL, &p) : NULL;
    if (p.yajl == NULL)
        rc = stk__errf(err, STK_ENOMEM, "%s: out of memory reading the dataset index", path);
    else
        yajl_config(p.yajl, yajl_dont_validate_strings, 1); /* URLs are bytes, as written */
    uint64_t total = 0;
    while (rc == 0) {
        ssize_t n = read(fd, chunk, READ_CHUNK);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            rc = stk__errf(err, STK_EIO, "%s: cannot read the dataset index: %s", path,
                           strerror(errno));
            break;
        }
        total += (uint64_t)n;
        if (total > STK__INDEX_MAX_BYTES) { /* it grew while read */
            rc = too_large(path, err);
            break;
        }
        yajl_status st = n > 0 ? yajl_parse(p.yajl, chunk, (size_t)n) : yajl_complete_parse(p.yajl);
        if (st == yajl_status_client_canceled)
            rc = err->code;
        else if (st == yajl_status_error)
            rc = syntax_error(&p, chunk, n > 0 ? (size_t)n : 0);
        else if (n == 0)
            break;
    }
    if (rc == 0)
        rc = check_whole(&p);
    if (p.yajl != NULL)
        yajl_free(p.yajl);
    stk__free(chunk);
    close(fd);
    if (rc < 0)
        stk__index_file_free(out);
    return rc;
}

void stk__index_file_free(struct stk__index_file *f)
{
    for (size_t i = 0; f->entries != NULL && i < f->n; i++) {
        stk__free(f->entries[i].url);
        stk__free(f->entries[i].offsets);
    }
    stk__free(f->entries);
    memset(f, 0, sizeof *f);
}

/* ---- writing ---- */

static int put_key(yajl_gen g, const char *key)
{
    return yajl_gen_string(g, (const unsigned char *)key, strlen(key)) == yajl_gen_status_ok;
}

static int put_u64(yajl_gen g, const char *key, uint64_t v)
{
    /* Exact integers: a double (cJSON) would round a time in ns. */
    return put_key(g, key) && yajl_gen_integer(g, (long long)v) == yajl_gen_status_ok;
}

/* Write what g holds to fd and empty it. */
static int flush(yajl_gen g, int fd, const char *path, struct stk__err *err)
{
    const unsigned char *buf;
    size_t len;
    yajl_gen_get_buf(g, &buf, &len);
    for (size_t done = 0; done < len;) {
        ssize_t n = write(fd, buf + done, len - done);
        if (n > 0)
            done += (size_t)n;
        else if (n == 0 || errno != EINTR)
            return stk__errf(err, STK_EIO, "%s: cannot write the index: %s", path,
                             n == 0 ? "no progress" : strerror(errno));
    }
    yajl_gen_clear(g);
    return 0;
}

static int put_hex128(yajl_gen g, const char *key, const uint64_t v[2])
{
    char hex[HEX128_LEN + 1];
    snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, v[0], v[1]);
    return put_key(g, key) &&
           yajl_gen_string(g, (const unsigned char *)hex, HEX128_LEN) == yajl_gen_status_ok;
}

static int put_shard(yajl_gen g, const struct stk__index_entry *e)
{
    int ok = yajl_gen_map_open(g) == yajl_gen_status_ok && put_key(g, "url") &&
             yajl_gen_string(g, (const unsigned char *)e->url, strlen(e->url)) ==
                 yajl_gen_status_ok;
    if (ok && e->has_tag)
        ok = put_hex128(g, "url_tag", e->tag);
    ok = ok && put_u64(g, "samples", e->samples);
    if (ok && e->stamp.has_size)
        ok = put_u64(g, "size", e->stamp.size);
    if (ok && e->stamp.mtime_ns != 0)
        ok = put_u64(g, "mtime_ns", e->stamp.mtime_ns);
    if (ok && e->stamp.etag[0] != '\0')
        ok = put_key(g, "etag") &&
             yajl_gen_string(g, (const unsigned char *)e->stamp.etag, strlen(e->stamp.etag)) ==
                 yajl_gen_status_ok;
    if (ok && e->offsets != NULL) {
        ok = put_key(g, "offsets") && yajl_gen_array_open(g) == yajl_gen_status_ok;
        for (uint64_t k = 0; ok && k < e->samples; k++)
            ok = yajl_gen_integer(g, (long long)e->offsets[k]) == yajl_gen_status_ok;
        ok = ok && yajl_gen_array_close(g) == yajl_gen_status_ok;
    }
    return ok && yajl_gen_map_close(g) == yajl_gen_status_ok;
}

int stk__index_json_write(int fd, const char *path, const struct stk__index_file *f,
                          struct stk__err *err)
{
    yajl_gen g = yajl_gen_alloc(NULL);
    if (g == NULL)
        return stk__errf(err, STK_ENOMEM, "out of memory writing the index");
    yajl_gen_config(g, yajl_gen_validate_utf8, 0); /* URLs are bytes */
    int ok = yajl_gen_map_open(g) == yajl_gen_status_ok && put_key(g, "format") &&
             yajl_gen_string(g, (const unsigned char *)STK__INDEX_FORMAT,
                             strlen(STK__INDEX_FORMAT)) == yajl_gen_status_ok &&
             put_u64(g, "version", STK__INDEX_VERSION) && put_u64(g, "samples", f->samples);
    int tagged = 0;
    for (size_t i = 0; i < f->n && !tagged; i++)
        tagged = f->entries[i].has_tag;
    if (ok && tagged)
        ok = put_hex128(g, "url_key", f->url_key);
    ok = ok && put_key(g, "shards") && yajl_gen_array_open(g) == yajl_gen_status_ok;
    int rc = 0;
    for (size_t i = 0; ok && rc == 0 && i < f->n; i++) {
        ok = put_shard(g, &f->entries[i]);
        if (ok)
            rc = flush(g, fd, path, err); /* at most one shard's text is held */
    }
    ok = ok && yajl_gen_array_close(g) == yajl_gen_status_ok &&
         yajl_gen_map_close(g) == yajl_gen_status_ok;
    if (rc == 0 && !ok)
        rc = stk__errf(err, STK_ENOMEM, "out of memory writing the index");
    if (rc == 0)
        rc = flush(g, fd, path, err);
    if (rc == 0 && write(fd, "\n", 1) != 1)
        rc = stk__errf(err, STK_EIO, "%s: cannot write the index: %s", path, strerror(errno));
    yajl_gen_free(g);
    return rc;
}
