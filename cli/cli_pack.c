/* SPDX-License-Identifier: MIT */
/*
 * cli_pack.c - `stoker pack`: turn a directory of files into WebDataset
 * shards, from an ImageFolder tree (DIR/CLASS/.../IMAGE, what torchvision
 * reads) or from files grouped by name (DIR/.../KEY.EXT).
 *
 * The library's allocator is internal (the CLI keeps to the public API), so
 * this file allocates with plain malloc/free, each call marked for checksrc.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli_common.h"
#include "cli_progress.h"

static const char *const CMD = "pack";

static void help(void)
{
    printf("usage: stoker pack [OPTIONS] -o PATTERN DIR\n\n"
           "Write the files under DIR into WebDataset tar shards named by PATTERN, a\n"
           "printf pattern with one %%d (e.g. out/train-%%06d.tar, numbered from 0).\n\n"
           "By default DIR is an ImageFolder tree, as torchvision reads it: each\n"
           "subdirectory is a class (label = its index in sorted order), each\n"
           ".jpg/.jpeg/.png file under it (at any depth) one sample, keyed by its\n"
           "index in the written order (%%08d), with the image and a .cls label.\n"
           "With --flat, the files of DIR (at any depth) are grouped into samples by\n"
           "key: the path up to the first dot of the file name (a/b/x.jpg and\n"
           "a/b/x.json are sample a/b/x), each file a member named by the rest.\n"
           "Samples are written in a seeded random order (--sorted: in sorted file\n"
           "order, each shard then holding a few classes: a streaming loader mixes\n"
           "those poorly). Other files (and FIFOs, sockets, devices) are counted and\n"
           "listed on standard error, never dropped silently. File names are bytes\n"
           "and are kept as they are in the keys, whatever the locale.\n\n"
           "options:\n"
           "  --flat                 group files by key instead of by class directory\n"
           "  --classes FILE         write the class names, one per line in label order;\n"
           "                         as classes.txt beside the shards, stoker.Loader and\n"
           "                         stoker.Samples read it (their .classes)\n"
           CLI_PROGRESS_HELP
           "  -h, --help             this help\n\n");
    cli_output_help("write the samples in a seeded random order",
                    "write them in sorted file order (classes one after another)");
}

/* Paths relative to DIR, collected by a walk. */
struct paths {
    char **items;
    size_t count, cap;
};

static int push(struct paths *p, const char *path)
{
    if (p->count == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 1024;
        char **items = realloc(p->items, cap * sizeof *items); /* checksrc: allow (see top) */
        if (items == NULL)
            return -1;
        p->items = items;
        p->cap = cap;
    }
    if ((p->items[p->count] = strdup(path)) == NULL) /* checksrc: allow (see top) */
        return -1;
    p->count++;
    return 0;
}

static void paths_free(struct paths *p)
{
    for (size_t i = 0; i < p->count; i++)
        free(p->items[i]); /* checksrc: allow (see top) */
    free(p->items);        /* checksrc: allow (see top) */
    memset(p, 0, sizeof *p);
}

static int compare_strings(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every regular file under root/rel (symbolic links followed, names
 * starting with '.' left out, as torchvision does) into files; when dirs is
 * not NULL, only this directory's own files, and its subdirectories into
 * dirs. Anything else (a FIFO, a socket, a device) is listed as left out
 * and counted in *ignored: nothing is dropped silently. */
static int walk(const char *root, const char *rel, struct paths *files, struct paths *dirs,
                size_t *ignored)
{
    char path[4096];
    snprintf(path, sizeof path, "%s%s%s", root, rel[0] ? "/" : "", rel);
    DIR *d = opendir(path);
    if (d == NULL)
        return cli_fail(CMD, "%s: %s", path, strerror(errno));
    int rc = EXIT_OK;
    struct dirent *e;
    while (rc == EXIT_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char child[4096], full[4096];
        int n = snprintf(child, sizeof child, "%s%s%s", rel, rel[0] ? "/" : "", e->d_name);
        int too_long = n >= (int)sizeof child;
        too_long |= snprintf(full, sizeof full, "%s/%s", root, child) >= (int)sizeof full;
        struct stat st;
        if (too_long || stat(full, &st) != 0) {
            rc = cli_fail(CMD, "%s/%s: %s", path, e->d_name,
                          too_long ? "path too long" : strerror(errno));
        } else if (S_ISDIR(st.st_mode)) {
            if (dirs != NULL && push(dirs, child) < 0)
                rc = cli_fail(CMD, "out of memory");
            else if (dirs == NULL)
                rc = walk(root, child, files, NULL, ignored);
        } else if (!S_ISREG(st.st_mode)) {
            if ((*ignored)++ < 10)
                cli_fail(CMD, "not a regular file (%s), left out: %s",
                         S_ISFIFO(st.st_mode) ? "a FIFO" : S_ISSOCK(st.st_mode) ? "a socket"
                                                                                 : "a device",
                         child);
        } else if (push(files, child) < 0) {
            rc = cli_fail(CMD, "out of memory");
        }
    }
    closedir(d);
    return rc;
}

/* The file's bytes, NUL-terminated; NULL with a message on failure. */
static uint8_t *read_whole(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    struct stat st;
    if (f != NULL && fstat(fileno(f), &st) == 0 &&
        (data = malloc((size_t)st.st_size + 1)) != NULL) { /* checksrc: allow (see top) */
        *size = fread(data, 1, (size_t)st.st_size, f);
        if (*size != (size_t)st.st_size) {
            free(data); /* checksrc: allow (see top) */
            data = NULL;
        } else {
            data[*size] = '\0';
        }
    }
    if (data == NULL)
        cli_fail(CMD, "%s: cannot read: %s", path, errno ? strerror(errno) : "short read");
    if (f != NULL)
        fclose(f);
    return data;
}

/* One sample to write: its key and the files (relative to DIR) of its
 * members; label >= 0 adds a .cls member. */
struct item {
    size_t key_len;      /* the key is this prefix of the first file; 0: %08d index */
    size_t first, count; /* range of the sorted file list */
    long label;
};

/* The extension of a file name as a reader splits it (after the first dot
 * of its last part), "" for a name without a key. */
static const char *extension(const char *path)
{
    size_t key_len;
    const char *ext;
    return stk_split_name(path, &key_len, &ext) ? ext : "";
}

/* A jpg, jpeg or png in any case (ImageFolder trees hold .JPEG), and no
 * more ("x.seg.png" is a segmentation mask, not the image the loader
 * decodes). */
static int is_image(const char *ext)
{
    char lower[16];
    size_t n = 0;
    for (; ext[n] != '\0' && n + 1 < sizeof lower; n++)
        lower[n] = (char)tolower((unsigned char)ext[n]);
    lower[n] = '\0';
    return ext[n] == '\0' && strchr(lower, '.') == NULL &&
           stk_member_kind(lower) == STK_MEMBER_IMAGE;
}

/* splitmix64 (a reference generator): a seeded Fisher-Yates shuffle of the
 * written order; the CLI keeps to the public API, so no library RNG. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    return z ^ (z >> 31);
}

static void shuffle(struct item *items, size_t n, uint64_t seed)
{
    uint64_t state = seed;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(next_random(&state) % i);
        struct item t = items[i - 1];
        items[i - 1] = items[j];
        items[j] = t;
    }
}

struct pack_args {
    struct cli_output out;
    const char *dir, *classes;
    int flat;
    int quiet;
};

static int write_items(const struct pack_args *a, stk_writer *w, const struct paths *files,
                       const struct item *items, size_t n)
{
    int rc = EXIT_OK;
    struct cli_progress progress;
    cli_progress_start(&progress, "samples", n, a->quiet);
    for (size_t i = 0; rc == EXIT_OK && i < n; i++) {
        struct stk_member members[16];
        uint8_t *data[16] = {NULL};
        char key[4096], label[32], ext[8];
        size_t m = 0;
        for (; rc == EXIT_OK && m < items[i].count && m < 15; m++) {
            const char *rel = files->items[items[i].first + m];
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", a->dir, rel);
            members[m].ext = extension(rel);
            if (items[i].label >= 0) { /* ImageFolder: .JPEG is written .jpeg */
                snprintf(ext, sizeof ext, "%s", members[m].ext);
                for (char *p = ext; *p; p++)
                    *p = (char)tolower((unsigned char)*p);
                members[m].ext = ext;
            }
            if ((data[m] = read_whole(full, &members[m].size)) == NULL)
                rc = EXIT_ERROR;
            members[m].data = data[m];
        }
        if (rc == EXIT_OK && items[i].label >= 0) {
            snprintf(label, sizeof label, "%ld", items[i].label);
            members[m++] = (struct stk_member){"cls", (const uint8_t *)label, strlen(label)};
        }
        if (items[i].key_len > 0)
            snprintf(key, sizeof key, "%.*s", (int)items[i].key_len,
                     files->items[items[i].first]);
        else
            snprintf(key, sizeof key, "%08zu", i);
        if (rc == EXIT_OK && stk_writer_add(w, key, members, m) < 0)
            rc = cli_fail(CMD, "%s", stk_writer_errmsg(w));
        for (size_t j = 0; j < 16; j++)
            free(data[j]); /* checksrc: allow (see top) */
        cli_progress_update(&progress, i + 1, NULL);
    }
    cli_progress_end(&progress);
    uint64_t shards = 0, samples = 0;
    if (rc == EXIT_OK)
        rc = cli_close_writer(CMD, w, &shards, &samples);
    if (rc == EXIT_OK) {
        /* The names written, not the pattern (which the writer checked: one
         * %d); the first and last when there are several. */
        char first[4096], last[4096];
        snprintf(first, sizeof first, a->out.pattern, 0);
        snprintf(last, sizeof last, a->out.pattern, (int)(shards - 1));
        printf("%llu samples in %llu shards: %s%s%s\n", (unsigned long long)samples,
               (unsigned long long)shards, first, shards > 1 ? " .. " : "",
               shards > 1 ? last : "");
    }
    return rc;
}

/* ImageFolder: one item per image under each class directory. */
static int imagefolder_items(const struct pack_args *a, struct paths *classes,
                             struct paths *files, struct item **out, size_t *n,
                             size_t *ignored)
{
    struct paths loose = {0}; /* files beside the class directories */
    int rc = walk(a->dir, "", &loose, classes, ignored);
    for (size_t i = 0; i < loose.count; i++)
        if ((*ignored)++ < 10)
            cli_fail(CMD, "not in a class directory, left out: %s", loose.items[i]);
    paths_free(&loose);
    if (rc != EXIT_OK)
        return rc;
    if (classes->count == 0)
        return cli_fail(CMD, "%s: no class directories (use --flat for files grouped by key)",
                        a->dir);
    qsort(classes->items, classes->count, sizeof *classes->items, compare_strings);
    size_t *first = calloc(classes->count + 1, sizeof *first); /* checksrc: allow (see top) */
    if (first == NULL)
        return cli_fail(CMD, "out of memory");
    for (size_t c = 0; rc == EXIT_OK && c < classes->count; c++) {
        first[c] = files->count;
        rc = walk(a->dir, classes->items[c], files, NULL, ignored);
        if (files->count > first[c]) /* items is NULL while nothing was found */
            qsort(files->items + first[c], files->count - first[c], sizeof *files->items,
                  compare_strings);
    }
    first[classes->count] = files->count;
    struct item *items = NULL;
    if (rc == EXIT_OK &&
        (items = calloc(files->count + 1, sizeof *items)) == NULL) /* checksrc: allow (see top) */
        rc = cli_fail(CMD, "out of memory");
    *n = 0;
    for (size_t c = 0; rc == EXIT_OK && c < classes->count; c++)
        for (size_t f = first[c]; f < first[c + 1]; f++) {
            if (!is_image(extension(files->items[f]))) {
                if ((*ignored)++ < 10)
                    cli_fail(CMD, "not an image (jpg, jpeg, png), left out: %s", files->items[f]);
                continue;
            }
            items[(*n)++] = (struct item){0, f, 1, (long)c};
        }
    free(first); /* checksrc: allow (see top) */
    *out = items;
    return rc;
}

/* --flat: one item per key, its files the members. */
static int flat_items(const struct pack_args *a, struct paths *files, struct item **out,
                      size_t *n, size_t *ignored)
{
    int rc = walk(a->dir, "", files, NULL, ignored);
    if (rc != EXIT_OK)
        return rc;
    qsort(files->items, files->count, sizeof *files->items, compare_strings);
    /* The files of a key share the prefix "KEY.", and sorting keeps the
     * strings with a common prefix together. */
    struct item *items = calloc(files->count + 1, sizeof *items); /* checksrc: allow (see top) */
    if (items == NULL)
        return cli_fail(CMD, "out of memory");
    *n = 0;
    for (size_t f = 0; f < files->count; f++) {
        const char *path = files->items[f];
        const char *ext = extension(path);
        if (ext[0] == '\0') {
            rc = cli_fail(CMD, "%s/%s: no extension: cannot name it as a member", a->dir, path);
            break;
        }
        size_t key_len = (size_t)(ext - path) - 1; /* up to the dot */
        struct item *last = *n ? &items[*n - 1] : NULL;
        if (last != NULL && last->key_len == key_len &&
            strncmp(files->items[last->first], path, key_len) == 0) {
            if (++last->count > 15) {
                rc = cli_fail(CMD, "%s/%s: more than 15 members for one key", a->dir, path);
                break;
            }
            continue;
        }
        items[(*n)++] = (struct item){key_len, f, 1, -1};
    }
    *out = items;
    return rc;
}

/* The class names, one per line. Like the shards, an existing file is
 * replaced only with --force, and never through a symbolic link; *created
 * says whether the file is new (to be removed if the run fails). */
static int write_classes(const char *path, int force, const struct paths *classes, int *created)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    *created = fd >= 0;
    if (fd < 0 && errno == EEXIST && force)
        fd = open(path, O_WRONLY | O_TRUNC | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 && errno == EEXIST)
        return cli_fail(CMD, "%s already exists (--force replaces it)", path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL && fd >= 0)
        close(fd);
    int ok = f != NULL;
    for (size_t c = 0; ok && c < classes->count; c++)
        ok = fprintf(f, "%s\n", classes->items[c]) >= 0;
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    return ok ? EXIT_OK : cli_fail(CMD, "%s: cannot write the class names: %s", path,
                                   strerror(errno));
}

int cmd_pack(int argc, char **argv)
{
    enum { O_FLAT = 256, O_CLASSES };
    static const struct option longopts[] = {
        {"flat", no_argument, NULL, O_FLAT},
        {"classes", required_argument, NULL, O_CLASSES},
        {"help", no_argument, NULL, 'h'},
        CLI_PROGRESS_LONGOPT,
        CLI_OUTPUT_LONGOPTS,
        {NULL, 0, NULL, 0},
    };
    struct pack_args a = {.out = cli_output_defaults()};
    int c;
    while ((c = getopt_long(argc, argv, "hqo:", longopts, NULL)) != -1) {
        int r = cli_parse_output_option(CMD, c, optarg, &a.out);
        if (r < 0)
            return EXIT_USAGE;
        if (r > 0)
            continue;
        switch (c) {
        case O_FLAT: a.flat = 1; break;
        case O_CLASSES: a.classes = optarg; break;
        case 'q': a.quiet = 1; break;
        case 'h': help(); return EXIT_OK;
        default: return cli_usage_error(CMD, "unknown option");
        }
    }
    if (a.out.pattern == NULL)
        return cli_usage_error(CMD, "-o PATTERN is required");
    if (argc - optind != 1)
        return cli_usage_error(CMD, "give one directory");
    if (a.flat && a.classes != NULL)
        return cli_usage_error(CMD, "--classes names ImageFolder classes: not with --flat");
    a.dir = argv[optind];

    struct paths classes = {0}, files = {0};
    struct item *items = NULL;
    size_t n = 0, ignored = 0;
    int rc = a.flat ? flat_items(&a, &files, &items, &n, &ignored)
                    : imagefolder_items(&a, &classes, &files, &items, &n, &ignored);
    if (rc == EXIT_OK && n == 0)
        rc = cli_fail(CMD, "%s: no %s to pack", a.dir, a.flat ? "files" : "images");
    if (rc == EXIT_OK && a.out.shuffle)
        shuffle(items, n, a.out.seed);
    stk_writer *w = rc == EXIT_OK ? cli_create_writer(CMD, &a.out, &rc) : NULL;
    int classes_created = 0;
    if (rc == EXIT_OK && a.classes != NULL)
        rc = write_classes(a.classes, a.out.force, &classes, &classes_created);
    if (rc == EXIT_OK)
        rc = write_items(&a, w, &files, items, n);
    stk_writer_destroy(w); /* after a failure: removes this run's shards */
    if (rc != EXIT_OK && classes_created)
        unlink(a.classes); /* a failed run leaves nothing */
    if (rc == EXIT_OK && ignored > 0)
        fprintf(stderr, "stoker %s: %zu files left out (listed above%s)\n", CMD, ignored,
                ignored > 10 ? ": the first 10" : "");
    free(items); /* checksrc: allow (see top) */
    paths_free(&classes);
    paths_free(&files);
    return rc;
}
