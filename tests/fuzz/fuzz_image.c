/* SPDX-License-Identifier: MIT */
/*
 * fuzz_image.c - libFuzzer target: arbitrary bytes as an image member.
 *
 * Input layout: FUZZ_IMAGE_CONFIG bytes of configuration, then the image.
 *   byte 0  bits 0-1  output size (32, 8, 1, 17)
 *           bit  2    full_decode
 *           bit  3    float32 NCHW output instead of uint8 NHWC
 *           bit  4    flip the explicit train crop
 *           bits 5-7  allocation failure injection: 0 off, else the
 *                     (1 << (bits - 1))-th stoker allocation fails in a
 *                     last pass (1, 2, 4 .. 64)
 *   byte 1-4  explicit train crop: height, width, top, left as fractions
 *             (0..255 / 255) of the image and of the room left
 *   byte 5    seed of a stk__crop_train crop; bits 6-7 the output width
 *             (0: square, else 8, 1, 45: non-square, eval padding)
 * The image goes through what stk__image_transform does: stk__decode_size,
 * then stk__image_render of the eval box, of the explicit train box, of a
 * drawn train box, and of the eval box again with the same worker. The
 * pixel limit is 4 megapixels so every input decodes quickly.
 *
 * Invariants checked (a violation is a __builtin_trap):
 *  - decode_size: 0 with 1 <= width, height, or an error with
 *    err.code == rc, a message, rc one of STK_EDECODE, STK_ELIMIT,
 *    STK_ENOMEM; a JPEG above the pixel limit fails there, a PNG above it
 *    fails every render with STK_ELIMIT;
 *  - render: the same; never STK_EINVAL (a box the resampler refuses),
 *    STK_EINTERNAL or another code;
 *  - when the header decodes, every crop stoker can draw renders or fails
 *    with one of those codes; a render that fails for the eval box also
 *    fails when repeated, and one that succeeds gives the same bytes when
 *    repeated after other renders through the same worker (no state leaks
 *    from one image geometry into the next);
 *  - float32 output is finite;
 *  - a JPEG that renders keeps the bounds on hostile files, recomputed here
 *    from its markers: a multi-scan file (progressive, or a first scan
 *    without every component) needs at most max_pixels * 3 bytes of DCT
 *    coefficients, and a progressive one has at most 500 scans;
 *  - under allocation failure injection: 0 or STK_ENOMEM or the codes
 *    above, and no leak (LeakSanitizer).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "image/augment.h"
#include "image/decode.h"
#include "fuzz.h"
#include "image/image.h"
#include "stoker.h"

#define FUZZ_IMAGE_CONFIG 6
#define FUZZ_IMAGE_MAX_PIXELS 4000000u

static const unsigned out_sizes[4] = {32, 8, 1, 17};
static const unsigned out_widths[4] = {0, 8, 1, 45};

static void check_error(int rc, const struct stk__err *err) {
    if (rc == 0)
        return;
    FUZZ_CHECK(rc < 0 && err->code == rc);
    size_t len = strnlen(err->msg, sizeof err->msg);
    FUZZ_CHECK(len > 0 && len < sizeof err->msg);
    FUZZ_CHECK(rc == STK_EDECODE || rc == STK_ELIMIT || rc == STK_ENOMEM);
}

static void check_output(const struct stk__image_config *cfg, const void *out) {
    if (cfg->dtype != STK_DTYPE_FLOAT32)
        return;
    const float *f = out;
    size_t n = stk__image_bytes(cfg) / sizeof *f;
    for (size_t i = 0; i < n; i++)
        FUZZ_CHECK(isfinite(f[i]));
}

/* What the markers of a JPEG say: its first frame header and the scans
 * before the end-of-image marker. 0 if it has no frame. */
struct jpeg_facts {
    int progressive, multi_scan;
    unsigned scans;
    uint64_t coefficient_bytes; /* of a whole-image buffer, as jdcoefct.c sizes it */
};

static int jpeg_facts(const uint8_t *d, size_t n, struct jpeg_facts *f) {
    memset(f, 0, sizeof *f);
    int have_frame = 0, ncomp = 0, h[4] = {0}, v[4] = {0};
    unsigned width = 0, height = 0;
    size_t i = 2;
    while (i + 4 <= n) {
        if (d[i] != 0xFF) { /* entropy-coded data: skip to the next marker */
            i++;
            continue;
        }
        uint8_t m = d[i + 1];
        if (m == 0xFF || m == 0x00 || (m >= 0xD0 && m <= 0xD7)) {
            i += m == 0xFF ? 1 : 2;
            continue;
        }
        if (m == 0xD9)
            break;
        size_t len = ((size_t)d[i + 2] << 8) | d[i + 3];
        const uint8_t *p = d + i + 4;
        if (i + 2 + len > n || len < 2)
            break;
        int sof = m == 0xC0 || m == 0xC1 || m == 0xC2 || m == 0xC9 || m == 0xCA;
        if (sof && !have_frame && len >= 8) {
            height = (unsigned)p[1] << 8 | p[2];
            width = (unsigned)p[3] << 8 | p[4];
            ncomp = p[5];
            if (ncomp < 1 || ncomp > 4 || len < 8 + 3 * (size_t)ncomp)
                return 0;
            for (int c = 0; c < ncomp; c++) {
                h[c] = p[7 + 3 * c] >> 4;
                v[c] = p[7 + 3 * c] & 15;
            }
            have_frame = 1;
            f->progressive = m == 0xC2 || m == 0xCA;
        }
        if (m == 0xDA && have_frame) {
            if (f->scans++ == 0 && len >= 3 && p[0] < ncomp)
                f->multi_scan = 1;
        }
        i += 2 + len;
    }
    if (!have_frame)
        return 0;
    f->multi_scan |= f->progressive;
    int hmax = 1, vmax = 1;
    for (int c = 0; c < ncomp; c++) {
        hmax = h[c] > hmax ? h[c] : hmax;
        vmax = v[c] > vmax ? v[c] : vmax;
    }
    for (int c = 0; c < ncomp; c++) {
        if (h[c] < 1 || v[c] < 1)
            return 0;
        uint64_t wib = ((uint64_t)width * h[c] + hmax * 8 - 1) / (hmax * 8);
        uint64_t hib = ((uint64_t)height * v[c] + vmax * 8 - 1) / (vmax * 8);
        wib = (wib + h[c] - 1) / h[c] * h[c];
        hib = (hib + v[c] - 1) / v[c] * v[c];
        f->coefficient_bytes += wib * hib * 128;
    }
    return 1;
}

/* A JPEG that rendered stayed within the documented bounds. */
static void check_jpeg_bounds(const uint8_t *data, size_t size) {
    struct jpeg_facts f;
    if (stk__image_format(data, size) != STK__IMAGE_JPEG || !jpeg_facts(data, size, &f))
        return;
    if (f.multi_scan)
        FUZZ_CHECK(f.coefficient_bytes <= (uint64_t)FUZZ_IMAGE_MAX_PIXELS * 3);
    if (f.progressive)
        FUZZ_CHECK(f.scans <= 500);
}

/* The explicit train box from the config bytes: integer, inside the image,
 * at least one pixel, as stk__crop_train's boxes are. */
static struct stk__crop explicit_crop(const uint8_t *cfg, int width, int height) {
    struct stk__crop c = {0};
    c.height = 1 + floor((double)(height - 1) * cfg[1] / 255.0);
    c.width = 1 + floor((double)(width - 1) * cfg[2] / 255.0);
    c.top = floor((height - c.height) * cfg[3] / 255.0);
    c.left = floor((width - c.width) * cfg[4] / 255.0);
    c.flip = (cfg[0] >> 4) & 1;
    return c;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < FUZZ_IMAGE_CONFIG)
        return 0;
    const uint8_t *cfg_bytes = data;
    data += FUZZ_IMAGE_CONFIG;
    size -= FUZZ_IMAGE_CONFIG;

    struct stk_options o;
    stk_options_init(&o);
    o.transform = STK_TRANSFORM_EVAL;
    o.image_size = out_sizes[cfg_bytes[0] & 3];
    o.image_width = out_widths[cfg_bytes[5] >> 6];
    o.full_decode = (cfg_bytes[0] >> 2) & 1;
    o.dtype = (cfg_bytes[0] >> 3) & 1 ? STK_DTYPE_FLOAT32 : STK_DTYPE_UINT8;
    o.layout = o.dtype == STK_DTYPE_FLOAT32 ? STK_LAYOUT_NCHW : STK_LAYOUT_NHWC;
    o.max_image_pixels = FUZZ_IMAGE_MAX_PIXELS;
    unsigned inject = cfg_bytes[0] >> 5;

    struct stk__image_config *cfg = malloc(sizeof *cfg);
    FUZZ_CHECK(cfg != NULL);
    struct stk__err err;
    stk__err_clear(&err);
    FUZZ_CHECK(stk__image_config_init(cfg, &o, &err) == 0);
    size_t bytes = stk__image_bytes(cfg);
    uint8_t *out = malloc(bytes), *again = malloc(bytes);
    FUZZ_CHECK(out != NULL && again != NULL);
    struct stk__image_worker *w = stk__image_worker_new(cfg);
    struct stk__decoder *hdr = stk__decoder_new(cfg->max_pixels);
    FUZZ_CHECK(w != NULL && hdr != NULL);

    int width = 0, height = 0;
    int rc = stk__decode_size(hdr, data, size, &width, &height, &err);
    check_error(rc, &err);
    if (rc == 0) {
        FUZZ_CHECK(width >= 1 && height >= 1);
        /* The JPEG header check applies the pixel limit already; PNG's
         * applies it when decoding, so every render must then fail so. */
        int above = (uint64_t)width * (uint64_t)height > FUZZ_IMAGE_MAX_PIXELS;
        FUZZ_CHECK(!above || stk__image_format(data, size) == STK__IMAGE_PNG);

        struct stk__crop eval_crop;
        stk__crop_eval(width, height, cfg->height, cfg->width, &eval_crop);
        stk__err_clear(&err);
        int rc_eval = stk__image_render(w, cfg, data, size, &eval_crop, 1, out, &err);
        check_error(rc_eval, &err);
        FUZZ_CHECK(!above || rc_eval == STK_ELIMIT);
        if (rc_eval == 0) {
            check_output(cfg, out);
            check_jpeg_bounds(data, size);
        }

        struct stk__crop crops[2];
        crops[0] = explicit_crop(cfg_bytes, width, height);
        struct stk__draws d;
        stk__draws_init(&d, cfg_bytes[5], 0, 0, 0, 0);
        stk__crop_train(&cfg->train, width, height, &d, &crops[1]);
        for (int i = 0; i < 2; i++) {
            const struct stk__crop *c = &crops[i];
            FUZZ_CHECK(c->width >= 1 && c->height >= 1 && c->top >= 0 && c->left >= 0);
            FUZZ_CHECK(c->top + c->height <= height && c->left + c->width <= width);
            stk__err_clear(&err);
            rc = stk__image_render(w, cfg, data, size, c, 0, again, &err);
            check_error(rc, &err);
            FUZZ_CHECK(!above || rc == STK_ELIMIT);
            if (rc == 0)
                check_output(cfg, again);
        }

        /* The eval render again, through the worker the train renders used. */
        stk__err_clear(&err);
        rc = stk__image_render(w, cfg, data, size, &eval_crop, 1, again, &err);
        check_error(rc, &err);
        FUZZ_CHECK((rc == 0) == (rc_eval == 0));
        if (rc == 0)
            FUZZ_CHECK(memcmp(out, again, bytes) == 0);
    }

    if (inject != 0) {
        /* A fresh worker and decoder under allocation failure. */
        stk__alloc_fail_after(1ul << (inject - 1));
        struct stk__image_worker *w2 = stk__image_worker_new(cfg);
        struct stk__decoder *hdr2 = stk__decoder_new(cfg->max_pixels);
        if (w2 != NULL && hdr2 != NULL) {
            stk__err_clear(&err);
            rc = stk__decode_size(hdr2, data, size, &width, &height, &err);
            check_error(rc, &err);
            if (rc == 0) {
                struct stk__crop c;
                stk__crop_eval(width, height, cfg->height, cfg->width, &c);
                stk__err_clear(&err);
                rc = stk__image_render(w2, cfg, data, size, &c, 1, out, &err);
                check_error(rc, &err);
            }
        }
        stk__decoder_free(hdr2);
        stk__image_worker_free(w2);
        stk__alloc_fail_after(0);
    }

    stk__decoder_free(hdr);
    stk__image_worker_free(w);
    free(again);
    free(out);
    free(cfg);
    return 0;
}
