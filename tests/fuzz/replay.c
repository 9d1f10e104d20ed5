/* SPDX-License-Identifier: MIT */
/*
 * replay.c - run a fuzz target over saved inputs without libFuzzer.
 *
 * Usage: fuzz_<target>_replay [-q] PATH...   (-q: do not name each input)
 * Each PATH is a file or a directory (searched recursively; names starting
 * with '.' are skipped, so a .gitkeep can hold an empty directory). Every
 * input is passed to LLVMFuzzerTestOneInput once, in sorted order; a
 * violated invariant or a sanitizer report aborts with the file named on
 * stderr just before. Prints "replayed N inputs" and exits 0 when all pass.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static unsigned long replayed;
static int quiet;

static int replay_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: cannot open %s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 4096, size = 0;
    uint8_t *buf = malloc(cap);
    if (buf == NULL) {
        fclose(f);
        fprintf(stderr, "replay: out of memory\n");
        return -1;
    }
    for (;;) {
        if (size == cap) {
            uint8_t *bigger = realloc(buf, cap * 2);
            if (bigger == NULL) {
                free(buf);
                fclose(f);
                fprintf(stderr, "replay: out of memory reading %s\n", path);
                return -1;
            }
            buf = bigger;
            cap *= 2;
        }
        size_t n = fread(buf + size, 1, cap - size, f);
        size += n;
        if (n == 0)
            break;
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        free(buf);
        fprintf(stderr, "replay: cannot read %s\n", path);
        return -1;
    }
    /* Exactly `size` bytes, like libFuzzer: ASan sees any over-read. */
    uint8_t *input = malloc(size ? size : 1);
    if (input == NULL) {
        free(buf);
        return -1;
    }
    memcpy(input, buf, size);
    free(buf);
    /* Named before the run, so a crash report follows its input's name. */
    if (!quiet)
        fprintf(stderr, "replay: %s (%zu bytes)\n", path, size);
    LLVMFuzzerTestOneInput(input, size);
    free(input);
    replayed++;
    return 0;
}

static int cmp_names(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int replay_path(const char *path);

static int replay_dir(const char *path) {
    DIR *d = opendir(path);
    if (d == NULL) {
        fprintf(stderr, "replay: cannot open directory %s: %s\n", path, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    int rc = 0;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 64;
            char **bigger = realloc(names, cap * sizeof *names);
            if (bigger == NULL) {
                fprintf(stderr, "replay: out of memory listing %s\n", path);
                rc = -1;
                break;
            }
            names = bigger;
        }
        size_t len = strlen(path) + strlen(de->d_name) + 2;
        names[n] = malloc(len);
        if (names[n] == NULL) {
            fprintf(stderr, "replay: out of memory listing %s\n", path);
            rc = -1;
            break;
        }
        snprintf(names[n], len, "%s/%s", path, de->d_name);
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_names);
    for (size_t i = 0; i < n; i++) {
        if (rc == 0 && replay_path(names[i]) < 0)
            rc = -1;
        free(names[i]);
    }
    free(names);
    return rc;
}

static int replay_path(const char *path) {
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (S_ISDIR(st.st_mode))
        return replay_dir(path);
    if (S_ISREG(st.st_mode))
        return replay_file(path);
    return 0;
}

int main(int argc, char **argv) {
    int rc = 0;
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "-q") == 0) {
        quiet = 1;
        first = 2;
    }
    if (first >= argc) {
        fprintf(stderr, "usage: %s [-q] FILE_OR_DIR...\n", argv[0]);
        return 2;
    }
    for (int i = first; i < argc; i++)
        if (replay_path(argv[i]) < 0)
            rc = 1;
    printf("replayed %lu inputs\n", replayed);
    return rc;
}
