/* SPDX-License-Identifier: MIT */
/*
 * test_images.c - image batches through the whole loader: determinism
 * across thread counts, labels, dtypes, the bad-image policy and
 * caller-supplied batch memory. Also built with ThreadSanitizer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/alloc.h"
#include "image/decode.h"
#include "jpeg_fixture.h"
#include "options_fixture.h"
#include "stoker.h"
#include "tar_builder.h"
#include "base/threads.h"

#define N_SHARDS 4
#define PER_SHARD 9
#define SIZE 24

static char dir[64];
static char good[128];  /* pattern naming the good shards */
static char bad[128];   /* a shard with a corrupt image, a missing label and good samples */

static void add_sample(struct tar_builder *tb, const char *key, int label, const void *jpeg,
                       size_t jpeg_size)
{
    char name[64], text[16];
    snprintf(name, sizeof name, "%s.jpg", key);
    tb_file(tb, name, jpeg, jpeg_size);
    if (label >= 0) {
        snprintf(name, sizeof name, "%s.cls", key);
        int n = snprintf(text, sizeof text, "%d", label);
        tb_file(tb, name, text, (size_t)n);
    }
}

static void write_tar(const char *path, struct tar_builder *tb)
{
    tb_finish(tb);
    FILE *f = fopen(path, "wb");
    if (f == NULL || fwrite(tb->data, 1, tb->size, f) != tb->size || fclose(f) != 0)
        abort();
    tb_free(tb);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/stk-images-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    for (int s = 0; s < N_SHARDS; s++) {
        struct tar_builder tb = {0};
        for (int i = 0; i < PER_SHARD; i++) {
            int n = s * PER_SHARD + i;
            unsigned char *jpeg;
            size_t size;
            jpeg_fixture(40 + 7 * (n % 5), 30 + 11 * (n % 4), (unsigned)n, &jpeg, &size);
            char key[32];
            snprintf(key, sizeof key, "%06d", n);
            add_sample(&tb, key, n, jpeg, size);
            free(jpeg);
        }
        char path[128];
        snprintf(path, sizeof path, "%s/good-%d.tar", dir, s);
        write_tar(path, &tb);
    }
    snprintf(good, sizeof good, "%s/good-{0..%d}.tar", dir, N_SHARDS - 1);

    struct tar_builder tb = {0};
    unsigned char *jpeg;
    size_t size;
    jpeg_fixture(50, 40, 1, &jpeg, &size);
    add_sample(&tb, "a", 1, jpeg, size);
    add_sample(&tb, "b-truncated", 2, jpeg, size / 2);
    add_sample(&tb, "c", 3, jpeg, size);
    add_sample(&tb, "d", 4, "not an image", 12);
    free(jpeg);
    snprintf(bad, sizeof bad, "%s/bad.tar", dir);
    write_tar(bad, &tb);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    char path[128];
    for (int s = 0; s < N_SHARDS; s++) {
        snprintf(path, sizeof path, "%s/good-%d.tar", dir, s);
        unlink(path);
    }
    unlink(bad);
    rmdir(dir);
    return 0;
}

static struct stk_options image_options(enum stk_transform t, unsigned threads)
{
    struct stk_options o;
    stk_options_init(&o);
    o.rank = 0;
    o.world_size = 1;
    o.transform = t;
    o.image_size = SIZE;
    o.batch_size = 5;
    o.threads = threads;
    o.shuffle_buffer = 7;
    o.seed = 9;
    return o;
}

/* All images and labels of one epoch, concatenated. */
struct epoch_images {
    unsigned char *images;
    size_t bytes;
    int64_t labels[64];
    size_t n;
};

static int read_epoch(const struct stk_options *o, const char *pattern, struct epoch_images *e,
                      struct stk_stats *stats)
{
    const char *urls[] = {pattern};
    stk_loader *l;
    int rc = stk_loader_create(o, urls, 1, &l, NULL, 0);
    if (rc < 0)
        return rc;
    memset(e, 0, sizeof *e);
    struct stk_batch *b;
    while ((rc = stk_loader_next(l, &b)) == 0) {
        assert_non_null(b->images);
        assert_non_null(b->labels);
        size_t bytes = b->n_samples * b->image_bytes;
        e->images = realloc(e->images, e->bytes + bytes);
        assert_non_null(e->images);
        memcpy(e->images + e->bytes, b->images, bytes);
        e->bytes += bytes;
        for (size_t i = 0; i < b->n_samples && e->n < 64; i++)
            e->labels[e->n++] = b->labels[i];
        stk_batch_release(b);
    }
    if (stats != NULL)
        stk_loader_stats(l, stats);
    stk_loader_destroy(l);
    return rc == STK_EOF ? 0 : rc;
}

static void test_same_images_for_any_thread_count(void **state)
{
    (void)state;
    static const enum stk_transform transforms[] = {STK_TRANSFORM_TRAIN, STK_TRANSFORM_EVAL};
    for (size_t t = 0; t < 2; t++) {
        struct stk_options o = image_options(transforms[t], 1);
        struct epoch_images one, other;
        assert_int_equal(read_epoch(&o, good, &one, NULL), 0);
        assert_int_equal(one.n, N_SHARDS * PER_SHARD);
        assert_int_equal(one.bytes, one.n * 3 * SIZE * SIZE);
        static const unsigned threads[] = {2, 8};
        for (size_t k = 0; k < 2; k++) {
            o.threads = threads[k];
            assert_int_equal(read_epoch(&o, good, &other, NULL), 0);
            assert_int_equal(other.bytes, one.bytes);
            assert_memory_equal(one.images, other.images, one.bytes);
            assert_memory_equal(one.labels, other.labels, sizeof one.labels);
            free(other.images);
        }
        if (transforms[t] == STK_TRANSFORM_TRAIN) { /* a new epoch draws new crops */
            o.epoch = 1;
            assert_int_equal(read_epoch(&o, good, &other, NULL), 0);
            assert_true(memcmp(one.images, other.images, one.bytes) != 0);
            free(other.images);
        }
        free(one.images);
    }
}

static void test_labels_in_storage_order(void **state)
{
    (void)state;
    struct stk_options o = storage_order(image_options(STK_TRANSFORM_EVAL, 2));
    struct epoch_images e;
    assert_int_equal(read_epoch(&o, good, &e, NULL), 0);
    for (size_t i = 0; i < e.n; i++)
        assert_int_equal(e.labels[i], (int64_t)i);
    free(e.images);
}

static void test_float_outputs_follow_uint8(void **state)
{
    (void)state;
    struct stk_options o = image_options(STK_TRANSFORM_TRAIN, 2);
    struct epoch_images u8, f32, bf16;
    assert_int_equal(read_epoch(&o, good, &u8, NULL), 0);
    o.dtype = STK_DTYPE_FLOAT32;
    assert_int_equal(read_epoch(&o, good, &f32, NULL), 0);
    o.dtype = STK_DTYPE_BFLOAT16;
    assert_int_equal(read_epoch(&o, good, &bf16, NULL), 0);
    assert_int_equal(f32.bytes, 4 * u8.bytes);
    assert_int_equal(bf16.bytes, 2 * u8.bytes);
    const float *f = (const float *)f32.images;
    const uint16_t *h = (const uint16_t *)bf16.images;
    size_t plane = (size_t)SIZE * SIZE;
    for (size_t i = 0; i < u8.bytes; i++) {
        size_t c = (i / plane) % 3; /* NCHW */
        float want = ((float)u8.images[i] / 255.0f - o.mean[c]) / o.std[c];
        assert_true(f[i] > want - 1e-5f && f[i] < want + 1e-5f);
        uint32_t bits = (uint32_t)h[i] << 16;
        float bf;
        memcpy(&bf, &bits, 4);
        assert_true(bf > want - 0.02f && bf < want + 0.02f);
    }
    /* NHWC holds the same values, pixel-major */
    struct epoch_images nhwc;
    o.dtype = STK_DTYPE_FLOAT32;
    o.layout = STK_LAYOUT_NHWC;
    assert_int_equal(read_epoch(&o, good, &nhwc, NULL), 0);
    assert_int_equal(nhwc.bytes, f32.bytes);
    const float *g = (const float *)nhwc.images;
    for (size_t img = 0; img < u8.bytes / (3 * plane); img++)
        for (size_t p = 0; p < plane; p++)
            for (size_t c = 0; c < 3; c++)
                assert_true(g[(img * plane + p) * 3 + c] == f[(img * 3 + c) * plane + p]);
    free(u8.images);
    free(f32.images);
    free(bf16.images);
    free(nhwc.images);
}

/* The stage times add up: every stage of an image epoch took some time,
 * the image stages fit in decode_ns, and the caller waited. The conversion
 * to float32 runs inside the resampler's last pass (no op between them)
 * and counts there. */
static void test_stage_times(void **state)
{
    (void)state;
    struct stk_options o = image_options(STK_TRANSFORM_TRAIN, 2);
    o.dtype = STK_DTYPE_FLOAT32;
    struct epoch_images e;
    struct stk_stats st;
    uint64_t start = stk__now_ns();
    assert_int_equal(read_epoch(&o, good, &e, &st), 0);
    uint64_t wall = stk__now_ns() - start;
    assert_int_equal(st.images_decoded, N_SHARDS * PER_SHARD);
    assert_true(st.read_ns > 0);
    assert_true(st.image_decode_ns > 0 && st.image_resample_ns > 0);
    assert_int_equal(st.image_convert_ns, 0);
    assert_true(st.image_decode_ns + st.image_resample_ns <= st.decode_ns);
    assert_true(st.wait_ns > 0 && st.wait_ns <= wall);
    free(e.images);

    /* uint8 NHWC is written by the resampler itself: no conversion */
    o.dtype = STK_DTYPE_UINT8;
    o.layout = STK_LAYOUT_NHWC;
    assert_int_equal(read_epoch(&o, good, &e, &st), 0);
    assert_int_equal(st.image_convert_ns, 0);
    assert_true(st.image_resample_ns > 0);
    free(e.images);
}

static void test_bad_images(void **state)
{
    (void)state;
    struct stk_options o = storage_order(image_options(STK_TRANSFORM_EVAL, 2));
    o.batch_size = 4;
    struct epoch_images e;
    const char *urls[] = {bad};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct stk_batch *b;
    int rc = stk_loader_next(l, &b);
    assert_int_equal(rc, STK_EDECODE);
    assert_non_null(strstr(stk_loader_errmsg(l), "bad.tar"));
    assert_non_null(strstr(stk_loader_errmsg(l), "b-truncated"));
    stk_loader_destroy(l);

    o.on_error = STK_ON_ERROR_SKIP;
    struct stk_stats st;
    assert_int_equal(read_epoch(&o, bad, &e, &st), 0);
    /* Both bad images are replaced by the batch's first good one. */
    assert_int_equal(e.n, 4);
    assert_int_equal(st.images_replaced, 2);
    assert_int_equal(st.samples_skipped, 2);
    assert_int_equal(e.labels[0], 1);
    assert_int_equal(e.labels[1], 1);
    assert_int_equal(e.labels[2], 3);
    assert_int_equal(e.labels[3], 1);
    size_t img = 3 * SIZE * SIZE;
    assert_memory_equal(e.images + img, e.images, img);
    free(e.images);
}

/* A shard of one 30 x 30 sample: KEY.jpg, KEY.cls when label >= 0, and
 * KEY.EXT holding text when ext is not NULL. */
static void write_one_sample(const char *path, const char *key, int label, const char *ext,
                             const char *text)
{
    struct tar_builder tb = {0};
    unsigned char *jpeg;
    size_t size;
    jpeg_fixture(30, 30, 2, &jpeg, &size);
    add_sample(&tb, key, label, jpeg, size);
    free(jpeg);
    if (ext != NULL) {
        char name[64];
        snprintf(name, sizeof name, "%s.%s", key, ext);
        tb_file(&tb, name, text, strlen(text));
    }
    write_tar(path, &tb);
}

/* A missing label is bad input; label_exts "" is unlabelled data (-1). */
static void test_missing_label(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof path, "%s/nolabel.tar", dir);
    write_one_sample(path, "x", -1, NULL, NULL);
    struct stk_options o = image_options(STK_TRANSFORM_TRAIN, 1);
    struct epoch_images e;
    assert_int_equal(read_epoch(&o, path, &e, NULL), STK_ELABEL);
    free(e.images);
    /* unlabelled data: no label needed, every label -1 */
    o.label_exts = "";
    assert_int_equal(read_epoch(&o, path, &e, NULL), 0);
    assert_int_equal(e.n, 1);
    assert_int_equal(e.labels[0], -1);
    free(e.images);

    /* .txt is a caption, not a label, unless label_exts names it. */
    write_one_sample(path, "x", -1, "txt", "7");
    o.label_exts = NULL;
    assert_int_equal(read_epoch(&o, path, &e, NULL), STK_ELABEL);
    free(e.images);
    o.label_exts = "cls,txt";
    assert_int_equal(read_epoch(&o, path, &e, NULL), 0);
    assert_int_equal(e.labels[0], 7);
    free(e.images);

    /* Blanks alone are no label (they used to read as 0). */
    write_one_sample(path, "y", -1, "cls", " \n");
    o.label_exts = NULL;
    assert_int_equal(read_epoch(&o, path, &e, NULL), STK_ELABEL);
    free(e.images);
    unlink(path);
}

/* dct_margin: out-of-range values are refused; 8 decodes every crop at
 * full scale, which gives the pixels of full_decode (the region path
 * equals a whole decode); 1 lets some crops of these 40-68 px images
 * decode at 4/8, which changes them. */
static void test_dct_margin(void **state)
{
    (void)state;
    struct stk_options o = image_options(STK_TRANSFORM_TRAIN, 2);
    const char *urls[] = {good};
    stk_loader *l;
    static const float bad_margins[] = {0.5f, -1.0f, 8.5f, 1e30f};
    for (size_t i = 0; i < sizeof bad_margins / sizeof bad_margins[0]; i++) {
        o.dct_margin = bad_margins[i];
        assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), STK_EINVAL);
    }
    struct epoch_images full, eight, one;
    o.dct_margin = 0;
    o.full_decode = 1;
    assert_int_equal(read_epoch(&o, good, &full, NULL), 0);
    o.full_decode = 0;
    o.dct_margin = 8;
    assert_int_equal(read_epoch(&o, good, &eight, NULL), 0);
    assert_int_equal(eight.bytes, full.bytes);
    assert_memory_equal(eight.images, full.images, full.bytes);
    o.dct_margin = 1;
    assert_int_equal(read_epoch(&o, good, &one, NULL), 0);
    assert_int_equal(one.bytes, full.bytes);
    assert_true(memcmp(one.images, full.images, full.bytes) != 0);
    free(full.images);
    free(eight.images);
    free(one.images);
}

/* Decode the box [x0, x1) x [y0, y1) of the image scaled by n/8 (n = 1, 2,
 * 4, 8), in scaled pixels; the request forces scale n. */
static int decode_scaled(struct stk__decoder *d, const unsigned char *jpeg, size_t size, int n,
                         int x0, int y0, int x1, int y1, struct stk__decoded *out)
{
    const double up = 8.0 / n;
    struct stk__decode_request req = {
        .x0 = x0 * up, .y0 = y0 * up, .x1 = x1 * up, .y1 = y1 * up,
        .min_width = x1 - x0, .min_height = y1 - y0,
    };
    struct stk__err err = {0};
    int rc = stk__decode_region(d, jpeg, size, &req, out, &err);
    if (rc < 0)
        fail_msg("region %d,%d-%d,%d at %d/8: %s", x0, y0, x1, y1, n, err.msg);
    return rc;
}

/* The region decode of a box against the whole image decoded at the same
 * scale: it must cover the box and equal it pixel for pixel. */
static void check_region(struct stk__decoder *d, const unsigned char *jpeg, size_t size, int n,
                         const uint8_t *whole, size_t whole_stride, const char *what, int x0,
                         int y0, int x1, int y1)
{
    struct stk__decoded r;
    assert_int_equal(decode_scaled(d, jpeg, size, n, x0, y0, x1, y1, &r), 0);
    if (r.origin_x > x0 || r.origin_y > y0 || r.origin_x + r.width < x1 ||
        r.origin_y + r.height < y1)
        fail_msg("%s at %d/8: region %d,%d-%d,%d decoded as %d,%d + %dx%d", what, n, x0, y0, x1,
                 y1, r.origin_x, r.origin_y, r.width, r.height);
    for (int y = 0; y < r.height; y++) {
        const uint8_t *got = r.pixels + (size_t)y * r.stride;
        const uint8_t *want = whole + (size_t)(r.origin_y + y) * whole_stride +
                              (size_t)r.origin_x * 3;
        for (int x = 0; x < r.width * 3; x++)
            if (got[x] != want[x])
                fail_msg("%s at %d/8: region %d,%d-%d,%d (decoded %d,%d + %dx%d) differs from "
                         "the whole image at pixel %d,%d channel %d: %d, not %d",
                         what, n, x0, y0, x1, y1, r.origin_x, r.origin_y, r.width, r.height,
                         r.origin_x + x / 3, r.origin_y + y, x % 3, got[x], want[x]);
    }
}

/* The region path (jpeg_skip_scanlines + jpeg_crop_scanline) gives the
 * pixels of a whole decode at the same DCT scale, in 4:4:4, 4:2:2 and
 * 4:2:0, with the box's edges at every alignment to the iMCU and to the
 * chroma samples: libjpeg-turbo's fancy upsampling takes the last column of
 * a cropped scanline for the image's edge, so a right edge that cuts a
 * chroma sample's pair gets another last column unless the decoder widens
 * the crop. */
static void test_region_matches_whole_decode(void **state)
{
    (void)state;
    static const struct {
        int h, v;
        const char *name;
    } samplings[] = {{1, 1, "4:4:4"}, {2, 1, "4:2:2"}, {2, 2, "4:2:0"}};
    struct stk__decoder *d = stk__decoder_new(1u << 20);
    assert_non_null(d);
    for (size_t s = 0; s < sizeof samplings / sizeof samplings[0]; s++) {
        for (int n = 8; n >= 1; n /= 2) {
            /* 61 x 45 scaled pixels: neither is a multiple of an iMCU */
            const int w = 61, h = 45;
            unsigned char *jpeg;
            size_t size;
            jpeg_fixture_sampled(w * 8 / n, h * 8 / n, 7, samplings[s].h, samplings[s].v, &jpeg,
                                 &size);
            struct stk__decoded all;
            assert_int_equal(decode_scaled(d, jpeg, size, n, 0, 0, w, h, &all), 0);
            assert_true(all.width == w && all.height == h && all.origin_x == 0);
            uint8_t *whole = stk__malloc(all.stride * (size_t)h);
            assert_non_null(whole);
            memcpy(whole, all.pixels, all.stride * (size_t)h);
            /* every left and top edge up to an iMCU (16) past the first,
             * with every right and bottom edge after it */
            for (int a = 0; a <= 17; a++) {
                for (int b = a + 1; b <= w; b++)
                    check_region(d, jpeg, size, n, whole, all.stride, samplings[s].name, a, 0, b,
                                 h);
                for (int b = a + 1; b <= h; b++)
                    check_region(d, jpeg, size, n, whole, all.stride, samplings[s].name, 0, a, w,
                                 b);
                check_region(d, jpeg, size, n, whole, all.stride, samplings[s].name, a, a,
                             w - a / 2, h - a / 3);
            }
            stk__free(whole);
            free(jpeg);
        }
    }
    stk__decoder_free(d);
}

/* image_height x image_width output: the square case is image_size, shapes
 * and determinism hold for any aspect, and eval pads where torchvision's
 * CenterCrop pads (a short side resized to int(min(h, w) / 0.875) leaves
 * the resized image narrower than a wide output: black columns). */
static void test_non_square(void **state)
{
    (void)state;
    static const enum stk_transform transforms[] = {STK_TRANSFORM_TRAIN, STK_TRANSFORM_EVAL};
    for (size_t t = 0; t < 2; t++) {
        struct stk_options o = image_options(transforms[t], 2);
        struct epoch_images square, same, one, other;
        assert_int_equal(read_epoch(&o, good, &square, NULL), 0);
        o.image_height = SIZE;
        o.image_width = SIZE;
        o.image_size = 7; /* ignored when both are set */
        assert_int_equal(read_epoch(&o, good, &same, NULL), 0);
        assert_int_equal(same.bytes, square.bytes);
        assert_memory_equal(same.images, square.images, square.bytes);
        o.image_height = 16;
        o.image_width = 40;
        assert_int_equal(read_epoch(&o, good, &one, NULL), 0);
        assert_int_equal(one.bytes, one.n * 3 * 16 * 40);
        o.threads = 5;
        assert_int_equal(read_epoch(&o, good, &other, NULL), 0);
        assert_int_equal(other.bytes, one.bytes);
        assert_memory_equal(one.images, other.images, one.bytes);
        free(square.images);
        free(same.images);
        free(one.images);
        free(other.images);
    }
    /* Only one of the two set: the other is image_size. */
    struct stk_options o = image_options(STK_TRANSFORM_EVAL, 1);
    o.image_width = 30;
    struct epoch_images e;
    assert_int_equal(read_epoch(&o, good, &e, NULL), 0);
    assert_int_equal(e.bytes, e.n * 3 * SIZE * 30);
    free(e.images);
    o.image_height = 8193;
    assert_int_equal(read_epoch(&o, good, &e, NULL), STK_EINVAL);

    /* 8 x 64 eval: every fixture image (at most 68 x 30, aspect <= 2.3)
     * resizes to 9 rows and at most 20 columns, centered, the rest 0. */
    o = image_options(STK_TRANSFORM_EVAL, 2);
    o.layout = STK_LAYOUT_NHWC;
    o.image_height = 8;
    o.image_width = 64;
    assert_int_equal(read_epoch(&o, good, &e, NULL), 0);
    unsigned long middle = 0;
    for (size_t img = 0; img < e.n; img++) {
        const unsigned char *p = e.images + img * 8 * 64 * 3;
        for (int y = 0; y < 8; y++) {
            for (int c = 0; c < 3; c++) {
                assert_int_equal(p[(y * 64 + 0) * 3 + c], 0);
                assert_int_equal(p[(y * 64 + 21) * 3 + c], 0);
                assert_int_equal(p[(y * 64 + 63 - 21) * 3 + c], 0);
                assert_int_equal(p[(y * 64 + 63) * 3 + c], 0);
                middle += p[(y * 64 + 32) * 3 + c];
            }
        }
    }
    assert_true(middle > 0);
    free(e.images);
    /* Padding is black before normalization, as torchvision pads the PIL image. */
    o.dtype = STK_DTYPE_FLOAT32;
    assert_int_equal(read_epoch(&o, good, &e, NULL), 0);
    const float *f = (const float *)e.images;
    for (int c = 0; c < 3; c++)
        assert_true(f[c] == (0.0f - o.mean[c]) / o.std[c]);
    free(e.images);
}

/* A shard of 6 samples with jpg and cls; extra members per sample. */
static void write_member_shard(const char *path, const char *const extra[][2], size_t n_extra)
{
    struct tar_builder tb = {0};
    unsigned char *jpeg;
    size_t size;
    jpeg_fixture(40, 30, 3, &jpeg, &size);
    for (int i = 0; i < 6; i++) {
        char key[16], name[64];
        snprintf(key, sizeof key, "s%d", i);
        add_sample(&tb, key, i, jpeg, size);
        for (size_t k = 0; k < n_extra; k++) {
            if (extra[k][0][0] - '0' != i)
                continue;
            snprintf(name, sizeof name, "%s.%s", key, extra[k][0] + 2);
            tb_file(&tb, name, extra[k][1], strlen(extra[k][1]));
        }
    }
    free(jpeg);
    write_tar(path, &tb);
}

/* The first error of an epoch read with require_members = `required`. */
static int first_error(const char *path, const char *required, char *msg, size_t size)
{
    struct stk_options o = storage_order(image_options(STK_TRANSFORM_EVAL, 2));
    o.batch_size = 6;
    o.require_members = required;
    const char *urls[] = {path};
    stk_loader *l;
    int rc = stk_loader_create(&o, urls, 1, &l, msg, size);
    if (rc < 0)
        return rc;
    struct stk_batch *b;
    while ((rc = stk_loader_next(l, &b)) == 0)
        stk_batch_release(b);
    snprintf(msg, size, "%s", stk_loader_errmsg(l));
    stk_loader_destroy(l);
    return rc == STK_EOF ? 0 : rc;
}

static void test_required_members(void **state)
{
    (void)state;
    char path[128], msg[512];
    snprintf(path, sizeof path, "%s/members.tar", dir);
    /* "N:ext" -> member s<N>.ext */
    static const char *const extra[][2] = {
        {"0:txt", "a caption"}, {"1:txt", "caf\xc3\xa9"}, {"3:txt", ""}, {"4:txt", "x"},
        {"5:txt", "y"},        {"0:json", "{\"a\": [1, 2]}"}, {"1:json", "{}"},
        {"2:json", "[]"},      {"3:json", "3"},         {"4:json", "{\"a\": }"},
        {"5:json", "{} trailing"}, {"2:en.txt", "ok"},  {"0:id", " 12\n"},
        {"1:id", "-3"},        {"2:id", "99999999999999999999"}, {"3:bin", "\xff\xfe"},
    };
    write_member_shard(path, extra, sizeof extra / sizeof extra[0]);
    assert_int_equal(first_error(path, "", msg, sizeof msg), 0);
    assert_int_equal(first_error(path, "cls", msg, sizeof msg), 0);
    assert_int_equal(first_error(path, "txt", msg, sizeof msg), STK_EMEMBER);
    assert_non_null(strstr(msg, "members.tar: sample 's2' has no txt member"));
    assert_int_equal(first_error(path, "txt?", msg, sizeof msg), 0); /* "" and UTF-8 are text */
    assert_int_equal(first_error(path, "json?", msg, sizeof msg), STK_EMEMBER);
    assert_non_null(strstr(msg, "sample 's4': json member is not valid JSON"));
    assert_int_equal(first_error(path, "en.txt?,id?", msg, sizeof msg), STK_EMEMBER);
    assert_non_null(strstr(msg, "sample 's2': id member is not an integer"));
    assert_int_equal(first_error(path, "bin?", msg, sizeof msg), 0); /* any bytes */
    assert_int_equal(first_error(path, "bin", msg, sizeof msg), STK_EMEMBER);
    assert_int_equal(stk_strerror(STK_EMEMBER)[0] != 'u', 1); /* not "unknown error" */

    static const char *const bad_text[][2] = {
        {"0:txt", "\xe9t\xe9"},          /* Latin-1 */
        {"1:txt", "\xed\xa0\x80"},       /* a UTF-16 surrogate */
        {"2:txt", "\xc0\xaf"},           /* overlong '/' */
        {"3:txt", "\xf4\x90\x80\x80"},   /* above U+10FFFF */
        {"4:txt", "\xe2\x82"},           /* truncated */
        {"5:txt", "ok \xf0\x9f\x98\x80"} /* an emoji: fine */
    };
    write_member_shard(path, bad_text, 6);
    struct stk_options o = storage_order(image_options(STK_TRANSFORM_EVAL, 1));
    o.batch_size = 6;
    o.require_members = "txt";
    o.on_error = STK_ON_ERROR_SKIP;
    const char *urls[] = {path};
    stk_loader *l;
    assert_int_equal(stk_loader_create(&o, urls, 1, &l, NULL, 0), 0);
    struct stk_batch *b;
    assert_int_equal(stk_loader_next(l, &b), 0);
    /* Five bad texts: their slots are copies of the one good sample, the
     * sample (key, members) included, not only the image and label. */
    assert_int_equal(b->images_replaced, 5);
    for (size_t i = 0; i < 6; i++) {
        assert_string_equal(b->samples[i].key, "s5");
        assert_int_equal(b->labels[i], 5);
        assert_memory_equal((char *)b->images + i * b->image_bytes, b->images, b->image_bytes);
    }
    stk_batch_release(b);
    stk_loader_destroy(l);

    static const char *const bad_options[] = {"txt,", ",txt", "a,,b", "?", "txt??",
        "0123456789012345678901234567890123456789", "a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q"};
    for (size_t i = 0; i < sizeof bad_options / sizeof bad_options[0]; i++) {
        msg[0] = '\0';
        assert_int_equal(first_error(path, bad_options[i], msg, sizeof msg), STK_EINVAL);
        assert_non_null(strstr(msg, "require_members"));
    }
    unlink(path);
}

/* Collects what stk_verify reports. */
struct problems {
    int count;
    char last[512];
};

static void collect(void *data, enum stk_log_level level, const char *msg)
{
    struct problems *p = data;
    if (level == STK_LOG_WARN) {
        p->count++;
        snprintf(p->last, sizeof p->last, "%s", msg);
    }
}

static void test_verify(void **state)
{
    (void)state;
    struct stk_options o = image_options(STK_TRANSFORM_EVAL, 2);
    struct problems seen = {0};
    o.log = collect;
    o.log_data = &seen;
    struct stk_stats st;
    char msg[256];
    const char *patterns[] = {good, bad};
    assert_int_equal(stk_verify(&o, patterns, 2, &st, msg, sizeof msg), 0);
    assert_int_equal(st.samples, N_SHARDS * PER_SHARD + 4);
    assert_int_equal(st.images_decoded, N_SHARDS * PER_SHARD + 2);
    assert_int_equal(st.samples_skipped, 2); /* b-truncated and d */
    assert_int_equal(st.shards_failed, 0);
    assert_int_equal(seen.count, 2);
    assert_non_null(strstr(seen.last, "bad.tar"));

    /* Allocation failures: STK_ENOMEM or the same result, never a crash or
     * a leak. */
    o.log = NULL;
    int failures = 0;
    for (unsigned long n = 1; n < 5000; n++) {
        stk__alloc_fail_after(n);
        int rc = stk_verify(&o, patterns, 2, &st, msg, sizeof msg);
        stk__alloc_fail_after(0);
        if (rc == 0 && st.samples_skipped == 2 && st.images_decoded == N_SHARDS * PER_SHARD + 2)
            break;
        /* a sample the reader could not allocate is not data to report */
        assert_int_equal(rc, STK_ENOMEM);
        failures++;
    }
    assert_true(failures >= 3);
}

static int allocations, releases;

static void *alloc_memory(void *data, size_t bytes)
{
    (void)data;
    allocations++;
    return malloc(bytes);
}

static void free_memory(void *data, void *memory, size_t bytes)
{
    (void)data;
    (void)bytes;
    releases++;
    free(memory);
}

static void test_caller_batch_memory(void **state)
{
    (void)state;
    struct stk_options o = image_options(STK_TRANSFORM_TRAIN, 2);
    o.alloc_batch_memory = alloc_memory;
    o.free_batch_memory = free_memory;
    o.max_batches = 3;
    struct epoch_images e;
    assert_int_equal(read_epoch(&o, good, &e, NULL), 0);
    assert_int_equal(e.n, N_SHARDS * PER_SHARD);
    assert_true(allocations >= 1 && allocations <= 3);
    assert_int_equal(releases, allocations);
    free(e.images);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_images_for_any_thread_count),
        cmocka_unit_test(test_labels_in_storage_order),
        cmocka_unit_test(test_float_outputs_follow_uint8),
        cmocka_unit_test(test_stage_times),
        cmocka_unit_test(test_bad_images),
        cmocka_unit_test(test_missing_label),
        cmocka_unit_test(test_non_square),
        cmocka_unit_test(test_region_matches_whole_decode),
        cmocka_unit_test(test_dct_margin),
        cmocka_unit_test(test_required_members),
        cmocka_unit_test(test_verify),
        cmocka_unit_test(test_caller_batch_memory),
    };
    return cmocka_run_group_tests_name("images", tests, setup, teardown);
}
