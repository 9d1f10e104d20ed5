/* SPDX-License-Identifier: MIT */
/*
 * jpeg_floor.c - what libjpeg-turbo alone costs on a set of JPEGs, one core.
 *
 * stoker's train path cannot be faster than the entropy decoding its crops
 * need: Huffman data has no random access (without restart markers), so
 * every MCU row above a crop's last row must be entropy-decoded even when
 * nothing of it is kept. This program measures, on the files given, with the
 * JPEGs held in memory and one decompress object reused:
 *   entropy_crop  entropy decoding of the whole MCU rows above the bottom of a
 *                 RandomResizedCrop box, via jpeg_skip_scanlines, which runs
 *                 no IDCT for whole iMCU rows; the partial last row is left
 *                 out, so this is an upper bound on images/s for any decoder
 *                 built on libjpeg-turbo
 *   entropy_full  entropy decoding of the whole image (jpeg_read_coefficients)
 *   full_rgb      a full decode to RGB at scale 8/8
 *   half_rgb      a decode to RGB at scale 4/8
 *   crop_scaled_rgb  the region of a RandomResizedCrop box only
 *                 (jpeg_skip_scanlines + jpeg_crop_scanline) at the smallest
 *                 DCT scale n/8 that leaves the box at least 224 pixels on both
 *                 axes: libjpeg-turbo's own region + DCT-scaled decode, the
 *                 floor a train transform is measured against
 *   crop_pow2_rgb  the same at the scale stoker's train transform picks: the
 *                 smallest of 1/8, 2/8, 4/8, 8/8 that leaves the box at least
 *                 1.25 x 224 pixels (src/image/decode_jpeg.c, src/image/image.c), so
 *                 stoker's own cost beyond the decoder shows apart
 * The boxes are the ones stoker's train transform draws (src/image/augment.c,
 * default options, seed 0): pass k over the files uses epoch k, and a file
 * is sample POSITION of shard SHARD as --list names it (default: shard 0,
 * position = its place on the command line). Every mode starts again at
 * epoch 0, so all see the same boxes. Each mode loops over the files for at
 * least --seconds and prints one JSON line of images/s. Progressive files
 * are entropy-decoded whole in every mode (libjpeg buffers all their
 * scans), as they are in stoker.
 *
 * usage: jpeg_floor [--seconds S] FILE.jpg...
 *        jpeg_floor [--seconds S] --list FILE  (lines "SHARD POSITION PATH")
 */
#include <stddef.h>
#include <stdio.h>

#include <jpeglib.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "image/augment.h"
#include "stoker.h"

struct image {
    char *path;
    unsigned char *data;
    unsigned long size;
    uint64_t shard, position; /* the sample's identity for the crop draws */
};

struct decoder {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    jmp_buf escape;
    const char *path; /* the file being decoded, for messages */
    int warned;       /* libjpeg reported corrupt data since the last reset */
    unsigned char *rows; /* one output row */
    size_t rows_bytes;
    struct stk__train_params train; /* stoker's defaults */
    uint64_t epoch;                 /* of the current pass over the files */
};

enum mode { ENTROPY_CROP, ENTROPY_FULL, FULL_RGB, HALF_RGB, CROP_SCALED_RGB, CROP_POW2_RGB };
static const char *const mode_names[] = {"entropy_crop", "entropy_full", "full_rgb", "half_rgb",
                                         "crop_scaled_rgb", "crop_pow2_rgb"};

#define SIZE 224 /* the train crop's output size */
#define TRAIN_MARGIN 1.25 /* stoker's default dct_margin for train */

static void on_error_exit(j_common_ptr cinfo)
{
    struct decoder *d = (struct decoder *)cinfo->client_data;
    char msg[JMSG_LENGTH_MAX];
    (*cinfo->err->format_message)(cinfo, msg);
    fprintf(stderr, "jpeg_floor: %s: %s\n", d->path, msg);
    longjmp(d->escape, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
    struct decoder *d = (struct decoder *)cinfo->client_data;
    if (level < 0 && !d->warned) {
        char msg[JMSG_LENGTH_MAX];
        (*cinfo->err->format_message)(cinfo, msg);
        fprintf(stderr, "jpeg_floor: %s: %s\n", d->path, msg);
        d->warned = 1;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct box {
    unsigned left, top, width, height;
};

/* The box stoker's train transform draws for this image in this pass. */
static struct box crop_box(struct decoder *d, const struct image *im, unsigned w, unsigned h)
{
    struct stk__draws draws;
    struct stk__crop c;
    stk__draws_init(&draws, 0, d->epoch, im->shard, 0, im->position);
    stk__crop_train(&d->train, (int)w, (int)h, &draws, &c);
    return (struct box){(unsigned)c.left, (unsigned)c.top, (unsigned)c.width, (unsigned)c.height};
}

/* Smallest n in 1..8 (every = 1) or in 1, 2, 4, 8 with the box at least
 * need pixels on both axes at scale n/8. */
static unsigned box_scale(const struct box *b, double need, int every)
{
    unsigned n = 1;
    while (n < 8 && (b->width * n < need * 8 || b->height * n < need * 8))
        n = every ? n + 1 : 2 * n;
    return n;
}

static int grow_row(struct decoder *d, size_t need)
{
    if (need <= d->rows_bytes)
        return 0;
    free(d->rows);
    d->rows = malloc(need);
    d->rows_bytes = d->rows ? need : 0;
    return d->rows ? 0 : -1;
}

/* Decode rows [y0, y1) and columns [x0, x1) of the image at scale n/8. */
static int decode_rgb(struct decoder *d, unsigned scale_num, const struct box *b)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    ci->out_color_space = JCS_RGB;
    ci->scale_num = scale_num;
    ci->scale_denom = 8;
    jpeg_start_decompress(ci);
    JDIMENSION x0 = 0, width = ci->output_width, y0 = 0, y1 = ci->output_height;
    if (b != NULL) {
        x0 = b->left * scale_num / 8;
        width = (b->left + b->width) * scale_num / 8 - x0;
        y0 = b->top * scale_num / 8;
        y1 = (b->top + b->height) * scale_num / 8;
        if (width < 1 || y1 <= y0)
            return 0;
        jpeg_crop_scanline(ci, &x0, &width);
        if (y0 > 0)
            jpeg_skip_scanlines(ci, y0);
    }
    if (grow_row(d, (size_t)width * (size_t)ci->output_components) < 0)
        return -1;
    while (ci->output_scanline < y1) {
        JSAMPROW row = d->rows;
        jpeg_read_scanlines(ci, &row, 1);
    }
    return 0;
}

static int decode_one(struct decoder *d, const struct image *im, enum mode mode)
{
    struct jpeg_decompress_struct *ci = &d->cinfo;
    d->path = im->path;
    if (setjmp(d->escape)) {
        jpeg_abort_decompress(ci);
        return -1;
    }
    jpeg_mem_src(ci, im->data, im->size);
    jpeg_read_header(ci, TRUE);
    int rc = 0;
    switch (mode) {
    case ENTROPY_CROP: {
        struct box b = crop_box(d, im, ci->image_width, ci->image_height);
        jpeg_start_decompress(ci);
        unsigned imcu = (unsigned)ci->max_v_samp_factor * DCTSIZE;
        unsigned rows = (b.top + b.height) / imcu * imcu;
        if (rows > 0)
            jpeg_skip_scanlines(ci, rows);
        break;
    }
    case ENTROPY_FULL: jpeg_read_coefficients(ci); break;
    case FULL_RGB: rc = decode_rgb(d, 8, NULL); break;
    case HALF_RGB: rc = decode_rgb(d, 4, NULL); break;
    case CROP_SCALED_RGB:
    case CROP_POW2_RGB: {
        struct box b = crop_box(d, im, ci->image_width, ci->image_height);
        unsigned n = mode == CROP_SCALED_RGB ? box_scale(&b, SIZE, 1)
                                             : box_scale(&b, SIZE * TRAIN_MARGIN, 0);
        rc = decode_rgb(d, n, &b);
        break;
    }
    }
    jpeg_abort_decompress(ci);
    return rc;
}

static int load(const char *path, struct image *im)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return -1;
    int rc = -1;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n > 0 && fseek(f, 0, SEEK_SET) == 0 && (im->data = malloc((size_t)n)) != NULL) {
            im->size = (unsigned long)n;
            rc = fread(im->data, 1, (size_t)n, f) == (size_t)n ? 0 : -1;
        }
    }
    fclose(f);
    return rc;
}

/* The files of a --list: lines "SHARD POSITION PATH"; NULL with a message
 * on a line that is not one. */
static struct image *read_list(const char *list, int *count)
{
    FILE *f = fopen(list, "r");
    if (f == NULL) {
        fprintf(stderr, "jpeg_floor: cannot read %s\n", list);
        return NULL;
    }
    struct image *images = NULL;
    int n = 0, cap = 0;
    char line[4096];
    while (fgets(line, sizeof line, f) != NULL) {
        unsigned long long shard, position;
        int at = 0;
        size_t len = strcspn(line, "\n");
        line[len] = '\0';
        if (sscanf(line, "%llu %llu %n", &shard, &position, &at) != 2 || line[at] == '\0') {
            fprintf(stderr, "jpeg_floor: %s line %d is not \"SHARD POSITION PATH\"\n", list,
                    n + 1);
            goto fail;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 1024;
            struct image *grown = realloc(images, (size_t)cap * sizeof *images);
            if (grown == NULL)
                goto fail;
            images = grown;
        }
        images[n] = (struct image){.path = strdup(line + at), .shard = shard,
                                   .position = position};
        if (images[n++].path == NULL)
            goto fail;
    }
    fclose(f);
    *count = n;
    return images;
fail:
    for (int i = 0; i < n; i++)
        free(images[i].path);
    free(images);
    fclose(f);
    return NULL;
}

int main(int argc, char **argv)
{
    double seconds = 3.0;
    const char *list = NULL;
    int first = 1;
    if (argc > first + 1 && strcmp(argv[first], "--seconds") == 0) {
        seconds = strtod(argv[first + 1], NULL);
        first += 2;
    }
    if (argc == first + 2 && strcmp(argv[first], "--list") == 0)
        list = argv[first + 1];
    int count = list ? 0 : argc - first;
    if ((!list && count < 1) || !(seconds > 0)) {
        fprintf(stderr, "usage: jpeg_floor [--seconds S] FILE.jpg...\n"
                        "       jpeg_floor [--seconds S] --list FILE\n");
        return 2;
    }
    struct image *images = list ? read_list(list, &count) : calloc((size_t)count, sizeof *images);
    if (images == NULL)
        return 1;
    for (int i = 0; !list && i < count; i++) {
        images[i].path = strdup(argv[first + i]);
        images[i].position = (uint64_t)i;
        if (images[i].path == NULL)
            return 1;
    }
    struct decoder d = {0};
    struct stk_options defaults;
    stk_options_init(&defaults);
    d.train = (struct stk__train_params){defaults.scale_min, defaults.scale_max,
                                         defaults.ratio_min, defaults.ratio_max,
                                         defaults.flip_probability};
    d.cinfo.err = jpeg_std_error(&d.jerr);
    d.jerr.error_exit = on_error_exit;
    d.jerr.emit_message = on_message;
    d.cinfo.client_data = &d;
    jpeg_create_decompress(&d.cinfo);
    int rc = 1;
    for (int i = 0; i < count; i++)
        if (load(images[i].path, &images[i]) < 0) {
            fprintf(stderr, "jpeg_floor: cannot read %s\n", images[i].path);
            goto out;
        }
    /* Timing a corrupt file would time error paths or libjpeg's grey fill:
     * check every file first. */
    for (int i = 0; i < count; i++)
        if (decode_one(&d, &images[i], FULL_RGB) < 0 || d.warned)
            goto out;
    rc = 0;
    for (enum mode m = ENTROPY_CROP; m <= CROP_POW2_RGB; m++) {
        long done = 0;
        double t0 = now(), t;
        d.epoch = 0; /* the same boxes in every mode */
        do {
            for (int i = 0; i < count; i++, done++)
                if (decode_one(&d, &images[i], m) < 0)
                    rc = 1;
            d.epoch++;
            t = now() - t0;
        } while (t < seconds);
        printf("{\"mode\": \"%s\", \"images\": %ld, \"seconds\": %.3f, \"images_per_s\": %.1f}\n",
               mode_names[m], done, t, (double)done / t);
        fflush(stdout);
    }
out:
    jpeg_destroy_decompress(&d.cinfo);
    free(d.rows);
    for (int i = 0; i < count; i++) {
        free(images[i].data);
        free(images[i].path);
    }
    free(images);
    return rc;
}
