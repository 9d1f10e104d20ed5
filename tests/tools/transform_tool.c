/* SPDX-License-Identifier: MIT */
/*
 * transform_tool.c - drive the image stage (decode, crop geometry, render)
 * from the command line, for tests/integration/test_image_vs_torchvision.py.
 *
 *   transform_tool [--full] [--bicubic] [--max-pixels N] [--dct-margin X] render IMAGE eval SIZE
 *                  OUT.ppm
 *   transform_tool [--full] [--bicubic] [--max-pixels N] [--dct-margin X] render IMAGE train SIZE
 *                  TOP LEFT HEIGHT WIDTH FLIP OUT.ppm [TOP LEFT HEIGHT WIDTH FLIP OUT.ppm]...
 *   transform_tool crops WIDTH HEIGHT N SEED
 *   transform_tool [--max-pixels N] decode IMAGE OUT.ppm
 *
 * SIZE is the output's side, or HEIGHT,WIDTH for a non-square output
 * (image_height, image_width; torchvision's size=(h, w)).
 * render: the eval box comes from stk__crop_eval on the header's size; a
 * train render takes explicit boxes (torchvision's top, left, height,
 * width) and renders each through the same worker, so one process checks
 * many boxes and the worker's buffers are reused between geometries.
 * --full sets full_decode (whole image at full scale) instead of the
 * region/DCT-scaled fast path; --bicubic sets interpolation to bicubic;
 * --dct-margin sets dct_margin (default 0: the transform's own). Output is
 * uint8 NHWC, written as binary PPM.
 * crops: N lines "top left height width flip" from stk__crop_train with the
 * default train parameters and the draws of (SEED, epoch 0, shard 0, pass
 * 0, position i). decode: the whole image at full scale as RGB8.
 *
 * Exits 0; 1 when the library reports an error (its message and code on
 * stderr); 2 on bad usage or I/O.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "image/augment.h"
#include "image/decode.h"
#include "base/error.h"
#include "image/image.h"
#include "stoker.h"

/* Largest input file read (the tests' inputs are far smaller). */
#define MAX_INPUT ((size_t)256 << 20)

static uint8_t *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    uint8_t *buf = malloc(cap);
    while (buf != NULL) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        if (cap >= MAX_INPUT) {
            free(buf);
            buf = NULL;
            break;
        }
        uint8_t *grown = realloc(buf, cap * 2);
        if (grown == NULL) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = grown;
        cap *= 2;
    }
    if (buf != NULL && ferror(f)) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    *size = n;
    return buf;
}

static int write_ppm(const char *path, const uint8_t *pix, size_t w, size_t h, size_t stride) {
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    int ok = fprintf(f, "P6\n%zu %zu\n255\n", w, h) > 0;
    for (size_t y = 0; ok && y < h; y++)
        ok = fwrite(pix + y * stride, 1, w * 3, f) == w * 3;
    return fclose(f) == 0 && ok ? 0 : -1;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    *out = strtod(s, &end);
    return errno == 0 && end != s && *end == '\0' ? 0 : -1;
}

static int parse_u64(const char *s, uint64_t max, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v > max)
        return -1;
    *out = v;
    return 0;
}

static void usage(const char *argv0) {
    fprintf(stderr,
            "usage: %s [--full] [--bicubic] [--max-pixels N] [--dct-margin X] render IMAGE eval "
            "SIZE OUT.ppm\n"
            "       %s [--full] [--bicubic] [--max-pixels N] [--dct-margin X] render IMAGE train SIZE "
            "TOP LEFT HEIGHT WIDTH FLIP OUT.ppm [...]\n"
            "       %s crops WIDTH HEIGHT N SEED\n"
            "       %s [--max-pixels N] decode IMAGE OUT.ppm\n",
            argv0, argv0, argv0, argv0);
}

static int fail(const struct stk__err *err, int rc) {
    fprintf(stderr, "transform_tool: %s (%s, %d)\n", err->msg, stk_strerror(rc), rc);
    return 1;
}

static int cmd_crops(char **argv) {
    uint64_t width, height, n, seed;
    if (parse_u64(argv[0], 1 << 24, &width) < 0 || parse_u64(argv[1], 1 << 24, &height) < 0 ||
        parse_u64(argv[2], 100000000, &n) < 0 || parse_u64(argv[3], UINT64_MAX, &seed) < 0 ||
        width == 0 || height == 0) {
        fprintf(stderr, "crops: bad WIDTH, HEIGHT, N or SEED\n");
        return 2;
    }
    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_TRAIN;
    struct stk__image_config *cfg = malloc(sizeof *cfg);
    struct stk__err err = {0};
    int rc = cfg == NULL ? STK_ENOMEM : stk__image_config_init(cfg, &o, &err);
    if (rc < 0) {
        free(cfg);
        return fail(&err, rc);
    }
    for (uint64_t i = 0; i < n; i++) {
        struct stk__draws d;
        struct stk__crop c;
        stk__draws_init(&d, seed, 0, 0, 0, i);
        stk__crop_train(&cfg->train, (int)width, (int)height, &d, &c);
        printf("%.17g %.17g %.17g %.17g %d\n", c.top, c.left, c.height, c.width, c.flip);
    }
    free(cfg);
    return fflush(stdout) == 0 ? 0 : 2;
}

static int cmd_decode(char **argv, uint64_t max_pixels) {
    size_t size;
    uint8_t *data = read_file(argv[0], &size);
    if (data == NULL) {
        fprintf(stderr, "%s: cannot read\n", argv[0]);
        return 2;
    }
    struct stk__decoder *d = stk__decoder_new(max_pixels);
    struct stk__err err = {0};
    struct stk__decoded img;
    struct stk__decode_request req = {.full = 1};
    int status = 0;
    int rc = d == NULL ? stk__errf(&err, STK_ENOMEM, "no decoder")
                       : stk__decode_region(d, data, size, &req, &img, &err);
    if (rc < 0) {
        status = fail(&err, rc);
    } else if (img.origin_x != 0 || img.origin_y != 0 || img.width != img.scaled_width ||
               img.height != img.scaled_height || img.scale_x != 1.0 || img.scale_y != 1.0) {
        fprintf(stderr,
                "decode: a full decode returned a region (%d,%d %dx%d of %dx%d, "
                "scale %g x %g)\n",
                img.origin_x, img.origin_y, img.width, img.height, img.scaled_width,
                img.scaled_height, img.scale_x, img.scale_y);
        status = 1;
    } else if (write_ppm(argv[1], img.pixels, (size_t)img.width, (size_t)img.height, img.stride) <
               0) {
        fprintf(stderr, "%s: cannot write\n", argv[1]);
        status = 2;
    }
    stk__decoder_free(d);
    free(data);
    return status;
}

static int cmd_render(int argc, char **argv, int full, int bicubic, uint64_t max_pixels,
                      double margin) {
    int eval = strcmp(argv[1], "eval") == 0;
    if (!eval && strcmp(argv[1], "train") != 0) {
        fprintf(stderr, "render: mode must be eval or train\n");
        return 2;
    }
    if ((eval && argc != 4) || (!eval && (argc < 9 || (argc - 3) % 6 != 0))) {
        fprintf(stderr, "render: wrong number of arguments\n");
        return 2;
    }
    uint64_t out_h, out_w;
    char side[32];
    const char *comma = strchr(argv[2], ',');
    snprintf(side, sizeof side, "%.*s", comma ? (int)(comma - argv[2]) : 31, argv[2]);
    if (parse_u64(side, 8192, &out_h) < 0 || out_h == 0 ||
        parse_u64(comma ? comma + 1 : side, 8192, &out_w) < 0 || out_w == 0) {
        fprintf(stderr, "render: bad SIZE (N or HEIGHT,WIDTH)\n");
        return 2;
    }
    struct stk_options o;
    stk_options_init(&o);
    o.transform = eval ? STK_TRANSFORM_EVAL : STK_TRANSFORM_TRAIN;
    o.image_height = (unsigned)out_h;
    o.image_width = (unsigned)out_w;
    o.dtype = STK_DTYPE_UINT8;
    o.layout = STK_LAYOUT_NHWC;
    o.full_decode = full;
    o.interpolation = bicubic ? STK_RESIZE_BICUBIC : STK_RESIZE_BILINEAR;
    o.dct_margin = (float)margin;
    o.max_image_pixels = max_pixels;

    int status = 0;
    struct stk__err err = {0};
    size_t size = 0;
    uint8_t *data = read_file(argv[0], &size);
    struct stk__image_config *cfg = malloc(sizeof *cfg);
    struct stk__image_worker *w = NULL;
    struct stk__decoder *hdr = NULL;
    uint8_t *out = NULL;
    if (data == NULL || cfg == NULL) {
        fprintf(stderr, "%s: cannot read\n", argv[0]);
        status = 2;
        goto out;
    }
    int rc = stk__image_config_init(cfg, &o, &err);
    if (rc < 0) {
        status = fail(&err, rc);
        goto out;
    }
    w = stk__image_worker_new(cfg);
    out = malloc(stk__image_bytes(cfg));
    if (w == NULL || out == NULL) {
        fprintf(stderr, "out of memory\n");
        status = 2;
        goto out;
    }
    struct stk__crop crop;
    if (eval) {
        /* The header's size gives the eval box, as stk__image_transform does. */
        int width, height;
        hdr = stk__decoder_new(max_pixels);
        rc = hdr == NULL ? stk__errf(&err, STK_ENOMEM, "no decoder")
                         : stk__decode_size(hdr, data, size, &width, &height, &err);
        if (rc < 0) {
            status = fail(&err, rc);
            goto out;
        }
        stk__crop_eval(width, height, cfg->height, cfg->width, &crop);
        rc = stk__image_render(w, cfg, data, size, &crop, 1, out, &err);
        if (rc < 0) {
            status = fail(&err, rc);
            goto out;
        }
        if (write_ppm(argv[3], out, out_w, out_h, out_w * 3) < 0) {
            fprintf(stderr, "%s: cannot write\n", argv[3]);
            status = 2;
        }
        goto out;
    }
    for (int k = 3; k < argc; k += 6) {
        double box[4];
        uint64_t flip;
        if (parse_double(argv[k], &box[0]) < 0 || parse_double(argv[k + 1], &box[1]) < 0 ||
            parse_double(argv[k + 2], &box[2]) < 0 || parse_double(argv[k + 3], &box[3]) < 0 ||
            parse_u64(argv[k + 4], 1, &flip) < 0) {
            fprintf(stderr, "render: bad box at group %d\n", (k - 3) / 6);
            status = 2;
            goto out;
        }
        crop = (struct stk__crop){.top = box[0], .left = box[1], .height = box[2],
                                  .width = box[3], .flip = (int)flip};
        rc = stk__image_render(w, cfg, data, size, &crop, 0, out, &err);
        if (rc < 0) {
            status = fail(&err, rc);
            goto out;
        }
        if (write_ppm(argv[k + 5], out, out_w, out_h, out_w * 3) < 0) {
            fprintf(stderr, "%s: cannot write\n", argv[k + 5]);
            status = 2;
            goto out;
        }
    }
out:
    free(out);
    stk__decoder_free(hdr);
    stk__image_worker_free(w);
    free(cfg);
    free(data);
    return status;
}

int main(int argc, char **argv) {
    int full = 0, bicubic = 0;
    uint64_t max_pixels = 100000000;
    double margin = 0;
    int i = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0; i++) {
        if (strcmp(argv[i], "--full") == 0) {
            full = 1;
        } else if (strcmp(argv[i], "--bicubic") == 0) {
            bicubic = 1;
        } else if (strcmp(argv[i], "--max-pixels") == 0 && i + 1 < argc &&
                   parse_u64(argv[i + 1], UINT64_MAX, &max_pixels) == 0) {
            i++;
        } else if (strcmp(argv[i], "--dct-margin") == 0 && i + 1 < argc &&
                   parse_double(argv[i + 1], &margin) == 0) {
            i++;
        } else {
            usage(argv[0]);
            return 2;
        }
    }
    if (i < argc && strcmp(argv[i], "crops") == 0 && argc - i == 5)
        return cmd_crops(argv + i + 1);
    if (i < argc && strcmp(argv[i], "decode") == 0 && argc - i == 3)
        return cmd_decode(argv + i + 1, max_pixels);
    if (i < argc && strcmp(argv[i], "render") == 0 && argc - i >= 5)
        return cmd_render(argc - i - 1, argv + i + 1, full, bicubic, max_pixels, margin);
    usage(argv[0]);
    return 2;
}
