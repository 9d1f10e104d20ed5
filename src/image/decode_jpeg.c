/* SPDX-License-Identifier: MIT */
/*
 * decode_jpeg.c - libjpeg-turbo: region + DCT-scaled decode.
 *
 * Entropy decoding dominates JPEG cost, and libjpeg-turbo can skip most of
 * it for rows outside the crop (jpeg_skip_scanlines) and the IDCT and
 * colour conversion for columns outside it (jpeg_crop_scanline), and can
 * run the IDCT at 1/8, 2/8, 4/8 or 8/8 scale so a crop that is larger than the
 * output is reduced for free. The decompress object is kept per thread and
 * recreated for every image: libjpeg keeps the Huffman and quantization
 * tables of one image in the object for the next (abbreviated datastreams),
 * so an image lacking a table would be decoded with whatever image the
 * thread decoded before (a fuzzer found it), where Pillow, with a fresh
 * object per image, uses the standard Huffman tables or fails. Creating
 * one costs a few small allocations per image, well under 1% of a decode.
 *
 * Bounds on hostile files, checked before the work they bound:
 *  - pixels: max_pixels, from the header (the decoded region is at most
 *    max_pixels * 3 bytes);
 *  - coefficient memory: a multi-scan file (progressive, or sequential with
 *    a scan per component) is decoded through a whole-image buffer of DCT
 *    coefficients, 128 bytes per 8x8 block: 6 bytes per pixel in 4:4:4, 3
 *    in 4:2:0, 2 in grey. It is computed from the header as libjpeg's
 *    jdcoefct.c sizes it and refused above max_pixels * 3 bytes, the bound
 *    the documentation gives the region (a 659-byte 4:4:4 file of 10000 x
 *    10000 pixels took 600 MB of coefficients and 890 MB in all);
 *    cinfo->mem->max_memory_to_use backs this up inside libjpeg;
 *  - decoding time: each scan walks every block of its components, whatever
 *    its size in the file, and a file may repeat refinement scans (libjpeg
 *    only warns): 5,000 scans of end-of-band runs, 80 KB, took 12.6 s for a
 *    2000 x 2000 grey image, and the same at 100 megapixels would take
 *    hours. A progress monitor stops the decode at the 501st scan (the limit
 *    TurboJPEG uses) or once the scans have visited the image's blocks more
 *    than 64 times over (libjpeg's standard progressive scripts visit them
 *    4 to 6 times), so no image costs more than a few dozen plain decodes.
 *
 * libjpeg reports fatal errors through error_exit, which must not return:
 * it longjmps back to the call that started the work. Warnings are ignored
 * (Pillow decodes "corrupt data: N extraneous bytes" images too) except
 * "premature end of JPEG file": libjpeg would fill the rest with grey, and
 * Pillow refuses a truncated image.
 */
/* jpeglib.h needs size_t and FILE declared first. */
#include <stddef.h>
#include <stdio.h>

#include <jerror.h>
#include <jpeglib.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <string.h>

#include "base/alloc.h"
#include "image/decode_impl.h"
#include "stoker.h"

/* Scans and the blocks they visit; see the top of the file. */
#define MAX_SCANS 500
#define MAX_BLOCK_VISITS 64

struct stk__jpeg {
    struct jpeg_decompress_struct cinfo; /* valid while created */
    int created;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    jmp_buf escape;
    char message[JMSG_LENGTH_MAX + 160];
    int truncated;
    int over_limit; /* the escape came from a limit, message says which */
    /* The scans of the image being decoded. */
    int scans_seen;
    uint64_t blocks;        /* coefficient blocks of the image (padded as libjpeg does) */
    uint64_t blocks_visited; /* by the scans seen so far */
};

static void on_error_exit(j_common_ptr cinfo)
{
    struct stk__jpeg *j = (struct stk__jpeg *)cinfo->client_data;
    (*cinfo->err->format_message)(cinfo, j->message);
    longjmp(j->escape, 1);
}

/* Called by libjpeg at every iMCU row it consumes and at every scan start
 * (jdapistd.c), so a new scan is seen before any of its blocks is decoded. */
static void on_progress(j_common_ptr common)
{
    struct stk__jpeg *j = (struct stk__jpeg *)common->client_data;
    struct jpeg_decompress_struct *ci = &j->cinfo;
    if (ci->input_scan_number == j->scans_seen)
        return;
    j->scans_seen = ci->input_scan_number;
    /* MCUs times blocks per MCU: the blocks this scan walks, padding
     * included (per_scan_setup in jdinput.c). */
    j->blocks_visited += (uint64_t)ci->MCUs_per_row * ci->MCU_rows_in_scan * ci->blocks_in_MCU;
    if (j->scans_seen > MAX_SCANS)
        snprintf(j->message, sizeof j->message, "JPEG has more than %d scans", MAX_SCANS);
    else if (j->blocks_visited > MAX_BLOCK_VISITS * j->blocks)
        snprintf(j->message, sizeof j->message,
                 "JPEG has scans that visit its %llu DCT blocks more than %d times (scan %d)",
                 (unsigned long long)j->blocks, MAX_BLOCK_VISITS, j->scans_seen);
    else
        return;
    j->over_limit = 1;
    longjmp(j->escape, 1);
}

static void on_message(j_common_ptr cinfo, int level)
{
    struct stk__jpeg *j = (struct stk__jpeg *)cinfo->client_data;
    if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF)
        j->truncated = 1;
}

void stk__jpeg_free(struct stk__jpeg *j)
{
    if (j == NULL)
        return;
    if (j->created)
        jpeg_destroy_decompress(&j->cinfo);
    stk__free(j);
}

/* A decompress object with no tables from an earlier image. Must run
 * inside setjmp (creation fails through error_exit). */
static void fresh_decompress(struct stk__jpeg *j)
{
    if (j->created)
        jpeg_destroy_decompress(&j->cinfo);
    j->cinfo.err = jpeg_std_error(&j->jerr);
    j->jerr.error_exit = on_error_exit;
    j->jerr.emit_message = on_message;
    j->progress.progress_monitor = on_progress;
    j->cinfo.client_data = j;
    /* set first: a creation cut short leaves cinfo.mem NULL or valid, and
     * jpeg_destroy_decompress handles both */
    j->created = 1;
    jpeg_create_decompress(&j->cinfo);
    j->cinfo.progress = &j->progress;
}

static struct stk__jpeg *jpeg_state(struct stk__jpeg **state, struct stk__err *err)
{
    if (*state != NULL)
        return *state;
    struct stk__jpeg *j = stk__calloc(1, sizeof *j);
    if (j == NULL) {
        stk__errf(err, STK_ENOMEM, "out of memory for a JPEG decoder");
        return NULL;
    }
    if (setjmp(j->escape)) { /* also keeps this function out of its callers */
        stk__jpeg_free(j);
        stk__errf(err, STK_ENOMEM, "cannot create a JPEG decoder");
        return NULL;
    }
    fresh_decompress(j);
    *state = j;
    return j;
}

/* Bytes of the whole-image coefficient buffer libjpeg allocates for a
 * multi-scan file (jdcoefct.c: per component, its blocks padded to a
 * multiple of its sampling factors, 64 coefficients of 2 bytes each);
 * 0 for a single-scan file, decoded a row of blocks at a time. Also counts
 * the image's blocks for the progress monitor. */
static uint64_t coefficient_bytes(struct stk__jpeg *j)
{
    struct jpeg_decompress_struct *ci = &j->cinfo;
    uint64_t blocks = 0;
    for (int c = 0; c < ci->num_components; c++) {
        const jpeg_component_info *comp = &ci->comp_info[c];
        uint64_t h = (uint64_t)comp->h_samp_factor, v = (uint64_t)comp->v_samp_factor;
        uint64_t wide = (comp->width_in_blocks + h - 1) / h * h;
        uint64_t tall = (comp->height_in_blocks + v - 1) / v * v;
        blocks += wide * tall;
    }
    j->blocks = blocks;
    return jpeg_has_multiple_scans(ci) ? blocks * sizeof(JBLOCK) : 0;
}

/* Read the header into a fresh object; checks the pixel and coefficient
 * limits. Must run inside setjmp. */
static int read_header(const struct stk__pixel_buffer *buf, struct stk__jpeg *j,
                       const uint8_t *data, size_t size, struct stk__err *err)
{
    fresh_decompress(j);
    j->truncated = 0;
    j->over_limit = 0;
    j->scans_seen = 0;
    j->blocks_visited = 0;
    jpeg_mem_src(&j->cinfo, data, (unsigned long)size);
    jpeg_read_header(&j->cinfo, TRUE);
    uint64_t pixels = (uint64_t)j->cinfo.image_width * j->cinfo.image_height;
    if (pixels > buf->max_pixels)
        return stk__errf(err, STK_ELIMIT, "JPEG of %ux%u pixels is above the limit of %llu pixels",
                         j->cinfo.image_width, j->cinfo.image_height,
                         (unsigned long long)buf->max_pixels);
    if (j->cinfo.image_width == 0 || j->cinfo.image_height == 0)
        return stk__errf(err, STK_EDECODE, "JPEG has no pixels");
    uint64_t limit = buf->max_pixels * 3, coefficients = coefficient_bytes(j);
    if (coefficients > limit)
        return stk__errf(err, STK_ELIMIT,
                         "%s JPEG of %ux%u pixels needs %llu bytes of DCT coefficients to decode, "
                         "above the limit of %llu (max_image_pixels * 3)",
                         j->cinfo.progressive_mode ? "progressive" : "multi-scan",
                         j->cinfo.image_width, j->cinfo.image_height,
                         (unsigned long long)coefficients, (unsigned long long)limit);
    /* Inside libjpeg, whole-image buffers beyond the limit (and what it
     * allocated before them, a few MB at most) fail as "backing store not
     * supported" instead of being allocated. */
    j->cinfo.mem->max_memory_to_use = (long)(limit + ((uint64_t)64 << 20) < LONG_MAX
                                                 ? limit + ((uint64_t)64 << 20)
                                                 : LONG_MAX);
    return 0;
}

/* The error of a decode that escaped through longjmp. */
static int escaped(struct stk__jpeg *j, const char *what, struct stk__err *err)
{
    if (j->over_limit)
        return stk__errf(err, STK_ELIMIT, "%s", j->message);
    if (j->cinfo.err->msg_code == JERR_NO_BACKING_STORE)
        return stk__errf(err, STK_ELIMIT, "%s needs more memory than the decoder may use",
                         what);
    return stk__errf(err, STK_EDECODE, "%s: %s", what, j->message);
}

int stk__jpeg_size(struct stk__jpeg **state, const struct stk__pixel_buffer *buf,
                   const uint8_t *data, size_t size, int *width, int *height,
                   struct stk__err *err)
{
    struct stk__jpeg *j = jpeg_state(state, err);
    if (j == NULL)
        return STK_ENOMEM;
    if (setjmp(j->escape)) {
        jpeg_abort_decompress(&j->cinfo);
        return escaped(j, "JPEG header", err);
    }
    int rc = read_header(buf, j, data, size, err);
    if (rc == 0) {
        *width = (int)j->cinfo.image_width;
        *height = (int)j->cinfo.image_height;
    }
    jpeg_abort_decompress(&j->cinfo);
    return rc;
}

/* Smallest n in 1, 2, 4, 8 with len * n / 8 >= need on both axes. These
 * are the scales with SIMD inverse DCTs in libjpeg-turbo; at the others
 * the luma IDCT and, in 4:2:0 and 4:2:2, a chroma IDCT of twice the size
 * (7/8: 7x7 and 14x14) run in plain C. On the sample set (300-500 px
 * photos, train transform, one core, uint8) decoding at 8/8 where 5/8 to
 * 7/8 would do took 0.91 against 0.98-1.05 ms per image and made the
 * whole transform 6-9% faster; since the chosen scale is never smaller
 * than before, the output only gets closer to Pillow's. */
static int choose_scale(const struct stk__decode_request *req)
{
    double crop_w = req->x1 - req->x0, crop_h = req->y1 - req->y0;
    for (int n = 1; n < 8; n *= 2)
        if (crop_w * n / 8 >= req->min_width && crop_h * n / 8 >= req->min_height)
            return n;
    return 8;
}

/* Pillow's CMYK to RGB (Convert.c cmyk2rgb), after undoing the inversion
 * Adobe applications write. Pillow assumes Adobe's convention for every
 * 4-channel JPEG (JpegImagePlugin: raw mode "CMYK;I"), marker or not. */
static void cmyk_to_rgb(uint8_t *row, size_t width)
{
    for (size_t x = 0; x < width; x++) {
        int c = 255 - row[4 * x], m = 255 - row[4 * x + 1], y = 255 - row[4 * x + 2],
            k = 255 - row[4 * x + 3];
        int nk = 255 - k, t;
        int in[3] = {c, m, y};
        for (int i = 0; i < 3; i++) {
            t = in[i] * nk + 128;
            int v = nk - (((t >> 8) + t) >> 8);
            row[3 * x + i] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        }
    }
}

/* A decode that stops at the crop's last row never reaches a cut-off end,
 * so truncation is checked up front: the end-of-image marker must be in the
 * file's last 4 KiB (after it, trailing bytes are tolerated as Pillow does).
 * FF D9 cannot occur inside entropy-coded data, where every FF byte is
 * followed by 00 or a restart marker. */
static int has_end_marker(const uint8_t *data, size_t size)
{
    size_t stop = size > 4096 ? size - 4096 : 0;
    for (size_t i = size; i >= stop + 2; i--)
        if (data[i - 2] == 0xff && data[i - 1] == 0xd9)
            return 1;
    return 0;
}

int stk__jpeg_decode(struct stk__jpeg **state, struct stk__pixel_buffer *buf, const uint8_t *data,
                     size_t size, const struct stk__decode_request *req, struct stk__decoded *out,
                     struct stk__err *err)
{
    struct stk__jpeg *j = jpeg_state(state, err);
    if (j == NULL)
        return STK_ENOMEM;
    struct jpeg_decompress_struct *ci = &j->cinfo;
    if (setjmp(j->escape)) {
        jpeg_abort_decompress(ci);
        return escaped(j, "JPEG", err);
    }
    int rc = read_header(buf, j, data, size, err);
    if (rc < 0)
        goto out;
    if (!has_end_marker(data, size)) {
        rc = stk__errf(err, STK_EDECODE, "JPEG is truncated (no end-of-image marker)");
        goto out;
    }
    int cmyk = ci->jpeg_color_space == JCS_CMYK || ci->jpeg_color_space == JCS_YCCK;
    ci->out_color_space = cmyk ? JCS_CMYK : JCS_EXT_RGB;
    ci->scale_num = req->full ? 8u : (unsigned)choose_scale(req);
    ci->scale_denom = 8;
    jpeg_start_decompress(ci);

    /* libjpeg scales by exactly scale_num/8 and rounds the output size up;
     * output_width / image_width would misplace pixels by up to half a
     * scaled pixel. */
    double sx = ci->scale_num / 8.0, sy = sx;
    /* Rows and columns of the scaled image the request covers. */
    JDIMENSION x0 = 0, x1 = ci->output_width, y0 = 0, y1 = ci->output_height;
    if (!req->full) {
        x0 = (JDIMENSION)fmax(0, floor(req->x0 * sx));
        x1 = (JDIMENSION)fmin(ci->output_width, ceil(req->x1 * sx));
        y0 = (JDIMENSION)fmax(0, floor(req->y0 * sy));
        y1 = (JDIMENSION)fmin(ci->output_height, ceil(req->y1 * sy));
    }
    if (x1 <= x0 || y1 <= y0) {
        rc = stk__errf(err, STK_EINTERNAL, "empty JPEG region requested");
        goto out;
    }
    /* Fancy upsampling takes a cropped scanline's first and last columns
     * for the image's edges, so where a pair of pixels that share a chroma
     * sample (4:2:2, 4:2:0) is cut there, they would come out unlike a
     * whole decode's; and a scanline under 3 chroma samples wide is
     * upsampled without interpolation at all (jdsample.c). So one more
     * column on each side where the image has one, at least 5 in all, is
     * decoded and then left out. */
    JDIMENSION xoff = x0 > 0 ? x0 - 1 : 0;
    JDIMENSION end = x1 < ci->output_width ? x1 + 1 : x1;
    if (end - xoff < 5)
        end = xoff + 5 < ci->output_width ? xoff + 5 : ci->output_width;
    JDIMENSION width = end - xoff;
    if (xoff > 0 || end < ci->output_width)
        jpeg_crop_scanline(ci, &xoff, &width); /* widens to iMCU boundaries */
    size_t channels = cmyk ? 4 : 3;
    size_t stride = (size_t)width * channels;
    rc = stk__pixel_buffer_reserve(buf, stride * (y1 - y0), err);
    if (rc < 0)
        goto out;
    if (y0 > 0)
        jpeg_skip_scanlines(ci, y0);
    while (ci->output_scanline < y1) {
        JSAMPROW row = buf->pixels + (size_t)(ci->output_scanline - y0) * stride;
        jpeg_read_scanlines(ci, &row, 1);
        if (j->truncated) {
            rc = stk__errf(err, STK_EDECODE, "JPEG is truncated (premature end of data)");
            goto out;
        }
        if (cmyk)
            cmyk_to_rgb(row, width);
    }
    out->pixels = buf->pixels + (x0 - xoff) * 3; /* RGB: CMYK rows are converted in place */
    out->width = (int)(x1 - x0);
    out->height = (int)(y1 - y0);
    out->stride = stride;
    out->origin_x = (int)x0;
    out->origin_y = (int)y0;
    out->scaled_width = (int)ci->output_width;
    out->scaled_height = (int)ci->output_height;
    out->scale_x = sx;
    out->scale_y = sy;
out:
    jpeg_abort_decompress(ci);
    return rc;
}
