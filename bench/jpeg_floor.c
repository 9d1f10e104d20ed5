/*
 * jpeg_floor.c - what libjpeg-turbo alone costs on a set of JPEGs, one core.
 *
 * stoker's train path cannot be faster than the entropy decoding its crops
 * need: Huffman data has no random access (without restart markers), so
 * every MCU row above a crop's last row must be entropy-decoded even when
 * nothing of it is kept. This program measures, on the files given, with the
 * JPEGs held in memory and one decompress object reused:
 *   entropy_crop  entropy decoding of the whole MCU rows above the bottom of a
 *                 RandomResizedCrop box (torchvision's sampling: scale 0.08..1,
 *                 ratio 3/4..4/3, 10 tries, central fallback; the same random
 *                 boxes in every run), via
 *                 jpeg_skip_scanlines, which runs no IDCT for whole iMCU rows;
 *                 the partial last row is left out, so this is an upper bound
 *                 on images/s for any decoder built on libjpeg-turbo
 *   entropy_full  entropy decoding of the whole image (jpeg_read_coefficients)
 *   full_rgb      a full decode to RGB at scale 8/8
 *   half_rgb      a decode to RGB at scale 4/8
 *   crop_scaled_rgb  the region of a RandomResizedCrop box only
 *                 (jpeg_skip_scanlines + jpeg_crop_scanline) at the smallest
 *                 DCT scale that leaves the box at least 224 pixels on both
 *                 axes: libjpeg-turbo's share of a region + scaled train decode
 * Each mode loops over the files for at least --seconds and prints one JSON
 * line of images/s. Progressive files are entropy-decoded whole in every mode
 * (libjpeg buffers all their scans), as they are in stoker.
 *
 * usage: jpeg_floor [--seconds S] FILE.jpg...
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

struct image {
    const char *path;
    unsigned char *data;
    unsigned long size;
};

struct decoder {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    jmp_buf escape;
    const char *path; /* the file being decoded, for messages */
    int warned;       /* libjpeg reported corrupt data since the last reset */
    unsigned char *rows; /* one output row */
    size_t rows_bytes;
    uint64_t rng;
};

enum mode { ENTROPY_CROP, ENTROPY_FULL, FULL_RGB, HALF_RGB, CROP_SCALED_RGB };
static const char *const mode_names[] = {"entropy_crop", "entropy_full", "full_rgb", "half_rgb",
                                         "crop_scaled_rgb"};

#define SIZE 224 /* the train crop's output size */

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

/* splitmix64: any decent generator will do, the crops only need
 * torchvision's distribution, not its exact draws. */
static double uniform(struct decoder *d)
{
    uint64_t z = (d->rng += 0x9e3779b97f4a7c15u);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

struct box {
    unsigned left, top, width, height;
};

/* torchvision's RandomResizedCrop box in a w x h image. */
static struct box crop_box(struct decoder *d, unsigned w, unsigned h)
{
    double area = (double)w * h;
    for (int attempt = 0; attempt < 10; attempt++) {
        double target = area * (0.08 + uniform(d) * 0.92);
        double ratio = exp(log(3.0 / 4) + uniform(d) * (log(4.0 / 3) - log(3.0 / 4)));
        long cw = lround(sqrt(target * ratio)), ch = lround(sqrt(target / ratio));
        if (cw > 0 && cw <= (long)w && ch > 0 && ch <= (long)h) {
            struct box b = {0, 0, (unsigned)cw, (unsigned)ch};
            b.top = (unsigned)(uniform(d) * (double)(h - b.height + 1));
            b.left = (unsigned)(uniform(d) * (double)(w - b.width + 1));
            return b;
        }
    }
    struct box b = {0, 0, w, h}; /* central fallback */
    double in_ratio = (double)w / h;
    if (in_ratio < 3.0 / 4)
        b.height = (unsigned)lround(w / (3.0 / 4));
    else if (in_ratio > 4.0 / 3)
        b.width = (unsigned)lround(h * (4.0 / 3));
    b.top = (h - b.height) / 2;
    b.left = (w - b.width) / 2;
    return b;
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
        struct box b = crop_box(d, ci->image_width, ci->image_height);
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
    case CROP_SCALED_RGB: {
        /* the smallest scale that leaves the box at least SIZE on both axes */
        struct box b = crop_box(d, ci->image_width, ci->image_height);
        unsigned n = 1;
        while (n < 8 && (b.width * n < SIZE * 8 || b.height * n < SIZE * 8))
            n++;
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

int main(int argc, char **argv)
{
    double seconds = 3.0;
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--seconds") == 0) {
        seconds = strtod(argv[2], NULL);
        first = 3;
    }
    int count = argc - first;
    if (count < 1 || !(seconds > 0)) {
        fprintf(stderr, "usage: jpeg_floor [--seconds S] FILE.jpg...\n");
        return 2;
    }
    struct image *images = calloc((size_t)count, sizeof *images);
    if (images == NULL)
        return 1;
    struct decoder d = {0};
    d.cinfo.err = jpeg_std_error(&d.jerr);
    d.jerr.error_exit = on_error_exit;
    d.jerr.emit_message = on_message;
    d.cinfo.client_data = &d;
    jpeg_create_decompress(&d.cinfo);
    int rc = 1;
    for (int i = 0; i < count; i++)
        if (load(images[i].path = argv[first + i], &images[i]) < 0) {
            fprintf(stderr, "jpeg_floor: cannot read %s\n", argv[first + i]);
            goto out;
        }
    /* Timing a corrupt file would time error paths or libjpeg's grey fill:
     * check every file first. */
    for (int i = 0; i < count; i++)
        if (decode_one(&d, &images[i], FULL_RGB) < 0 || d.warned)
            goto out;
    rc = 0;
    for (enum mode m = ENTROPY_CROP; m <= CROP_SCALED_RGB; m++) {
        long done = 0;
        double t0 = now(), t;
        d.rng = 1; /* the same boxes in every mode */
        do {
            for (int i = 0; i < count; i++, done++)
                if (decode_one(&d, &images[i], m) < 0)
                    rc = 1;
            t = now() - t0;
        } while (t < seconds);
        printf("{\"mode\": \"%s\", \"images\": %ld, \"seconds\": %.3f, \"images_per_s\": %.1f}\n",
               mode_names[m], done, t, (double)done / t);
        fflush(stdout);
    }
out:
    jpeg_destroy_decompress(&d.cinfo);
    free(d.rows);
    for (int i = 0; i < count; i++)
        free(images[i].data);
    free(images);
    return rc;
}
