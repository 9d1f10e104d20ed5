/* SPDX-License-Identifier: MIT */
/*
 * resize_tool.c - run stk__resize_rgb8 on a PPM file, for the comparison
 * with Pillow in tests/integration/test_resize_vs_pil.py.
 *
 *   resize_tool IN.ppm X0 Y0 X1 Y1 OUT_W OUT_H FLIP OUT.ppm [X0 Y0 ... OUT.ppm]...
 *
 * Reads a binary PPM (P6, maxval 255) once and writes one resized PPM per
 * group of eight arguments, through one scratch, so that a test can check
 * many boxes per process (and the scratch's reuse between geometries).
 * With STOKER_RESIZE_PORTABLE set in the environment it uses the portable
 * kernels even where the CPU has AVX2; with STOKER_RESIZE_FILTER=bicubic,
 * Pillow's BICUBIC filter instead of BILINEAR.
 * Exits 0, 1 on a resize error (the code is printed), 2 on bad usage or I/O.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/resize.h"
#include "stoker.h"

/* The next unsigned decimal in a PPM header, skipping blanks and comments. */
static int ppm_number(FILE *f, size_t *out)
{
    int c = fgetc(f);
    for (;;) {
        while (c == ' ' || c == '\t' || c == '\n' || c == '\r')
            c = fgetc(f);
        if (c != '#')
            break;
        while (c != '\n' && c != EOF)
            c = fgetc(f);
    }
    if (c < '0' || c > '9')
        return -1;
    size_t v = 0;
    while (c >= '0' && c <= '9') {
        if (v > 100000000)
            return -1;
        v = v * 10 + (size_t)(c - '0');
        c = fgetc(f);
    }
    /* c is the single whitespace byte that ends the header field */
    *out = v;
    return 0;
}

static uint8_t *read_ppm(const char *path, size_t *w, size_t *h)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    uint8_t *pix = NULL;
    size_t maxval;
    if (fgetc(f) != 'P' || fgetc(f) != '6' || ppm_number(f, w) < 0 || ppm_number(f, h) < 0 ||
        ppm_number(f, &maxval) < 0 || maxval != 255 || *w == 0 || *h == 0)
        goto out;
    pix = malloc(*w * *h * 3);
    if (pix != NULL && fread(pix, 1, *w * *h * 3, f) != *w * *h * 3) {
        free(pix);
        pix = NULL;
    }
out:
    fclose(f);
    return pix;
}

static int write_ppm(const char *path, const uint8_t *pix, size_t w, size_t h)
{
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int ok =
        fprintf(f, "P6\n%zu %zu\n255\n", w, h) > 0 && fwrite(pix, 1, w * h * 3, f) == w * h * 3;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int parse_double(const char *s, double *out)
{
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == '\0' ? 0 : -1;
}

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > ((size_t)1 << 24))
        return -1;
    *out = (size_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 10 || (argc - 2) % 8 != 0) {
        fprintf(stderr, "usage: %s IN.ppm X0 Y0 X1 Y1 OUT_W OUT_H FLIP OUT.ppm [...]\n", argv[0]);
        return 2;
    }
    size_t w, h;
    uint8_t *src = read_ppm(argv[1], &w, &h);
    if (src == NULL) {
        fprintf(stderr, "%s: cannot read a P6 PPM with maxval 255\n", argv[1]);
        return 2;
    }
    struct stk__resize_scratch *scratch = stk__resize_scratch_new();
    int status = scratch == NULL ? 2 : 0;
    if (scratch != NULL && getenv("STOKER_RESIZE_PORTABLE") != NULL)
        stk__resize_scratch_set_simd(scratch, 0);
    const char *filter = getenv("STOKER_RESIZE_FILTER");
    if (scratch != NULL && filter != NULL && strcmp(filter, "bicubic") == 0)
        stk__resize_scratch_set_filter(scratch, STK__RESIZE_BICUBIC);
    for (int i = 2; status == 0 && i < argc; i += 8) {
        double box[4];
        size_t ow, oh, flip;
        if (parse_double(argv[i], &box[0]) < 0 || parse_double(argv[i + 1], &box[1]) < 0 ||
            parse_double(argv[i + 2], &box[2]) < 0 || parse_double(argv[i + 3], &box[3]) < 0 ||
            parse_size(argv[i + 4], &ow) < 0 || parse_size(argv[i + 5], &oh) < 0 ||
            parse_size(argv[i + 6], &flip) < 0) {
            fprintf(stderr, "bad arguments at group %d\n", (i - 2) / 8);
            status = 2;
            break;
        }
        uint8_t *dst = malloc(ow * oh * 3 + 1);
        if (dst == NULL) {
            status = 2;
            break;
        }
        const struct stk__rgb8_view in = {src, w, h, w * 3};
        const struct stk__box b = {box[0], box[1], box[2], box[3]};
        const struct stk__rgb8_image out = {dst, ow, oh, ow * 3};
        int rc = stk__resize_rgb8(&in, &b, &out, (int)flip, scratch);
        if (rc != 0) {
            fprintf(stderr, "resize error %d (%s) at group %d\n", rc, stk_strerror(rc),
                    (i - 2) / 8);
            status = 1;
        } else if (write_ppm(argv[i + 7], dst, ow, oh) < 0) {
            fprintf(stderr, "%s: cannot write\n", argv[i + 7]);
            status = 2;
        }
        free(dst);
    }
    stk__resize_scratch_free(scratch);
    free(src);
    return status;
}
