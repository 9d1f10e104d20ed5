/*
 * image.c - decode, crop, resample and convert one sample.
 *
 * Geometry. torchvision's train transform is crop(box) then resize, so the
 * crop's own edges bound the resampling filter: we resample the crop as an
 * image of its own. The eval transform is resize(whole image) then center
 * crop; that equals resampling the corresponding box of the whole image
 * with the image's edges as bounds, so we decode the box plus a margin of
 * one filter support. With DCT scaling the decoded image is smaller than
 * the original by scale_x/scale_y and every coordinate is scaled alike.
 */
#include "image.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"
#include "decode.h"
#include "members.h"
#include "resize.h"
#include "threads.h"

/* DCT scaling reduces by a box-like filter, not Pillow's antialiased
 * bilinear; the closer the scaled crop is to the output size, the more the
 * result drifts from torchvision's. Keeping it at least 1.5x the output
 * brought the worst image's MAE against Pillow + torchvision from 2.81 to
 * 1.43 (eval 224) and the worst train box from 3.09 to 1.67, for 2% of
 * train and 6% of eval throughput (entropy decoding dominates either way).
 * Eval decides reported accuracy and keeps 1.5; train augments anyway and
 * takes a smaller margin for speed (stk_options.dct_margin; figures in the
 * README). */
#define DCT_MARGIN_EVAL 1.5
#define DCT_MARGIN_TRAIN 1.25

struct stk__image_worker {
    struct stk__decoder *decoder;
    struct stk__resize_scratch *scratch;
    uint8_t *rgb; /* height x width x 3 staging for layouts other than uint8 NHWC */
    struct stk__stage_ns times;
};

static uint16_t float_to_half(float f)
{
    /* Round to nearest even; values here are small normals (|x| < 10). */
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = x & 0x7fffffu;
    if (exp <= 0) {
        if (exp < -10)
            return (uint16_t)sign;
        mant |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - exp);
        uint32_t half = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1)))
            half++;
        return (uint16_t)(sign | half);
    }
    if (exp >= 31)
        return (uint16_t)(sign | 0x7c00u);
    uint32_t half = sign | ((uint32_t)exp << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1)))
        half++;
    return (uint16_t)half;
}

static uint16_t float_to_bfloat16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(x >> 16);
}

int stk__image_config_init(struct stk__image_config *cfg, const struct stk_options *o,
                           struct stk__err *err)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->transform = o->transform;
    if (o->image_size < 1 || o->image_size > 8192)
        return stk__errf(err, STK_EINVAL, "image_size must be between 1 and 8192");
    if (o->image_height > 8192 || o->image_width > 8192)
        return stk__errf(err, STK_EINVAL, "image_height and image_width must be at most 8192 "
                                          "(0: image_size)");
    cfg->height = (int)(o->image_height ? o->image_height : o->image_size);
    cfg->width = (int)(o->image_width ? o->image_width : o->image_size);
    if (o->dtype > STK_DTYPE_BFLOAT16 || o->layout > STK_LAYOUT_NHWC)
        return stk__errf(err, STK_EINVAL, "unknown dtype or layout");
    cfg->dtype = o->dtype;
    cfg->layout = o->layout;
    if (!(o->scale_min > 0 && o->scale_min <= o->scale_max && o->scale_max <= 1) ||
        !(o->ratio_min > 0 && o->ratio_min <= o->ratio_max) ||
        !(o->flip_probability >= 0 && o->flip_probability <= 1))
        return stk__errf(err, STK_EINVAL,
                         "need 0 < scale_min <= scale_max <= 1, 0 < ratio_min <= ratio_max and "
                         "0 <= flip_probability <= 1");
    cfg->train = (struct stk__train_params){o->scale_min, o->scale_max, o->ratio_min,
                                            o->ratio_max, o->flip_probability};
    cfg->seed = o->seed;
    cfg->epoch = o->epoch;
    cfg->max_pixels = o->max_image_pixels;
    cfg->full_decode = o->full_decode != 0;
    if (o->dct_margin != 0 && !(o->dct_margin >= 1 && o->dct_margin <= 8))
        return stk__errf(err, STK_EINVAL, "dct_margin must be 0 (default) or between 1 and 8");
    cfg->dct_margin = o->dct_margin != 0                       ? o->dct_margin
                      : o->transform == STK_TRANSFORM_EVAL ? DCT_MARGIN_EVAL
                                                           : DCT_MARGIN_TRAIN;
    for (int c = 0; c < 3; c++) {
        if (!(o->std[c] != 0) || !isfinite(o->mean[c]) || !isfinite(o->std[c]))
            return stk__errf(err, STK_EINVAL, "std must be nonzero and mean/std finite");
        for (int v = 0; v < 256; v++) {
            float f = ((float)v / 255.0f - o->mean[c]) / o->std[c];
            cfg->lut_f32[c][v] = f;
            cfg->lut_u16[c][v] = o->dtype == STK_DTYPE_FLOAT16 ? float_to_half(f)
                                                               : float_to_bfloat16(f);
        }
    }
    /* Not txt: a caption that happens to be a number is no label. */
    const char *exts = o->label_exts ? o->label_exts : "cls";
    while (*exts) {
        size_t n = strcspn(exts, ",");
        if (n == 0 || n >= sizeof cfg->label_exts[0] || cfg->n_label_exts == STK__MAX_LABEL_EXTS)
            return stk__errf(err, STK_EINVAL, "label_exts must be up to %d comma-separated "
                                              "extensions of up to 15 characters",
                             STK__MAX_LABEL_EXTS);
        memcpy(cfg->label_exts[cfg->n_label_exts++], exts, n);
        exts += n + (exts[n] == ',');
    }
    if (o->label_json_field != NULL) {
        if (strlen(o->label_json_field) >= sizeof cfg->label_json_field)
            return stk__errf(err, STK_EINVAL, "label_json_field is too long");
        snprintf(cfg->label_json_field, sizeof cfg->label_json_field, "%s", o->label_json_field);
    }
    return stk__member_rules_init(&cfg->members, o->require_members, err);
}

static size_t dtype_size(enum stk_dtype t)
{
    return t == STK_DTYPE_UINT8 ? 1 : t == STK_DTYPE_FLOAT32 ? 4 : 2;
}

size_t stk__image_bytes(const struct stk__image_config *cfg)
{
    return (size_t)cfg->height * (size_t)cfg->width * 3 * dtype_size(cfg->dtype);
}

struct stk__image_worker *stk__image_worker_new(const struct stk__image_config *cfg)
{
    struct stk__image_worker *w = stk__calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->decoder = stk__decoder_new(cfg->max_pixels);
    w->scratch = stk__resize_scratch_new();
    w->rgb = stk__malloc((size_t)cfg->height * (size_t)cfg->width * 3);
    if (w->decoder == NULL || w->scratch == NULL || w->rgb == NULL) {
        stk__image_worker_free(w);
        return NULL;
    }
    return w;
}

void stk__image_worker_free(struct stk__image_worker *w)
{
    if (w == NULL)
        return;
    stk__decoder_free(w->decoder);
    stk__resize_scratch_free(w->scratch);
    stk__free(w->rgb);
    stk__free(w);
}

static int find_label(const struct stk__image_config *cfg, const struct stk__sample *s,
                      int64_t *label, struct stk__err *err)
{
    char shown[STK__SHOWN_MAX]; /* the key, for messages */
    if (cfg->label_json_field[0] != '\0') {
        const struct stk_member *m = stk__sample_member(s, "json");
        if (m == NULL)
            return stk__errf(err, STK_ELABEL, "%s: sample '%s' has no json member for its label",
                             s->pub.url, stk__shown(shown, sizeof shown, s->pub.key));
        cJSON *root = cJSON_ParseWithLength((const char *)m->data, m->size);
        const cJSON *field = cJSON_GetObjectItemCaseSensitive(root, cfg->label_json_field);
        int ok = cJSON_IsNumber(field) && field->valuedouble == floor(field->valuedouble) &&
                 fabs(field->valuedouble) < 9e15;
        if (ok)
            *label = (int64_t)field->valuedouble;
        cJSON_Delete(root);
        if (!ok)
            return stk__errf(err, STK_ELABEL,
                             "%s: sample '%s': json has no integer field '%s'", s->pub.url,
                             stk__shown(shown, sizeof shown, s->pub.key), cfg->label_json_field);
        return 0;
    }
    for (int i = 0; i < cfg->n_label_exts; i++) {
        const struct stk_member *m = stk__sample_member(s, cfg->label_exts[i]);
        if (m == NULL)
            continue;
        if (stk__member_int(m, label) < 0)
            return stk__errf(err, STK_ELABEL, "%s: sample '%s': %s member is not an integer",
                             s->pub.url, stk__shown(shown, sizeof shown, s->pub.key),
                             cfg->label_exts[i]);
        return 0;
    }
    if (cfg->n_label_exts == 0) { /* unlabelled data */
        *label = -1;
        return 0;
    }
    return stk__errf(err, STK_ELABEL,
                     "%s: sample '%s' has no label member (%s%s%s); for unlabelled data set "
                     "label_exts=\"\"",
                     s->pub.url, stk__shown(shown, sizeof shown, s->pub.key), cfg->label_exts[0],
                     cfg->n_label_exts > 1 ? ", " : "", cfg->n_label_exts > 1 ? cfg->label_exts[1] : "");
}

static const struct stk_member *find_image(const struct stk__sample *s)
{
    static const char *const exts[] = {"jpg", "jpeg", "png"};
    for (size_t i = 0; i < sizeof exts / sizeof exts[0]; i++) {
        const struct stk_member *m = stk__sample_member(s, exts[i]);
        if (m != NULL)
            return m;
    }
    return NULL;
}

/* The n RGB pixels of rgb as three planes (uint8 NCHW). One loop over the
 * three channels, which gcc vectorises as one group of stride-3 loads
 * (the loop per channel it did not): 6 us against 75 us per 224x224
 * image compiled for AVX2, 45 us without. */
static inline __attribute__((always_inline)) void
planes_u8_loop(const uint8_t *restrict rgb, size_t n, uint8_t *restrict out)
{
    uint8_t *restrict r = out, *restrict g = out + n, *restrict b = out + 2 * n;
    for (size_t i = 0; i < n; i++) {
        r[i] = rgb[3 * i];
        g[i] = rgb[3 * i + 1];
        b[i] = rgb[3 * i + 2];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* Compiled for AVX2 whatever the build's target, called only where the CPU
 * has it (as resize.c's kernels). Not target_clones: its load-time
 * resolver runs before ThreadSanitizer's runtime is up and crashes the
 * TSan build. */
static __attribute__((target("avx2"))) void planes_u8_avx2(const uint8_t *restrict rgb, size_t n,
                                                            uint8_t *restrict out)
{
    planes_u8_loop(rgb, n, out);
}
#endif

static void planes_u8(const uint8_t *restrict rgb, size_t n, uint8_t *restrict out)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (__builtin_cpu_supports("avx2")) {
        planes_u8_avx2(rgb, n, out);
        return;
    }
#endif
    planes_u8_loop(rgb, n, out);
}

/* The n pixels of rgb into out as element type T through the per-channel
 * table LUT (planar or interleaved), the three channels in one loop, as
 * planes_u8. Written once per type with the layout decided outside the
 * loop, so each loop is a plain load-and-store: the former per-element
 * layout test made the float32 conversion 1.2x slower. */
#define CONVERT_LUT(T, LUT)                                                                        \
    do {                                                                                           \
        T *restrict o_ = out;                                                                      \
        if (planar)                                                                                \
            for (size_t i = 0; i < n; i++) {                                                       \
                o_[i] = LUT[0][rgb[3 * i]];                                                        \
                o_[n + i] = LUT[1][rgb[3 * i + 1]];                                                \
                o_[2 * n + i] = LUT[2][rgb[3 * i + 2]];                                            \
            }                                                                                      \
        else                                                                                       \
            for (size_t i = 0; i < 3 * n; i += 3) {                                                \
                o_[i] = LUT[0][rgb[i]];                                                            \
                o_[i + 1] = LUT[1][rgb[i + 1]];                                                    \
                o_[i + 2] = LUT[2][rgb[i + 2]];                                                    \
            }                                                                                      \
    } while (0)

/* Write the height x width RGB8 image rgb into out in the configured form
 * (any but uint8 NHWC, which the resampler writes directly). */
static void convert(const struct stk__image_config *cfg, const uint8_t *restrict rgb, void *out)
{
    const size_t n = (size_t)cfg->height * (size_t)cfg->width;
    const int planar = cfg->layout == STK_LAYOUT_NCHW;
    switch (cfg->dtype) {
    case STK_DTYPE_UINT8: planes_u8(rgb, n, out); break;
    case STK_DTYPE_FLOAT32: CONVERT_LUT(float, cfg->lut_f32); break;
    default: CONVERT_LUT(uint16_t, cfg->lut_u16); break;
    }
}

/* Black (0) pad rows and columns around the inner x0..x1, y0..y1 of a
 * width x height RGB8 image: what torchvision's CenterCrop adds where the
 * resized image is smaller than the output. */
static void fill_padding(uint8_t *rgb, int width, int height, int x0, int y0, int x1, int y1)
{
    size_t stride = (size_t)width * 3;
    memset(rgb, 0, (size_t)y0 * stride);
    memset(rgb + (size_t)y1 * stride, 0, (size_t)(height - y1) * stride);
    for (int y = y0; y < y1; y++) {
        memset(rgb + (size_t)y * stride, 0, (size_t)x0 * 3);
        memset(rgb + (size_t)y * stride + (size_t)x1 * 3, 0, (size_t)(width - x1) * 3);
    }
}

/* Decode the image bytes, resample the crop to height x width (less the
 * crop's padding) and write it in the configured dtype and layout into
 * out. */
int stk__image_render(struct stk__image_worker *w, const struct stk__image_config *cfg,
                      const uint8_t *data, size_t size, const struct stk__crop *crop, int eval,
                      void *out, struct stk__err *err)
{
    /* The box fills the output but for the padding (eval only), which a
     * flip mirrors. */
    int pad_left = crop->flip ? crop->pad_right : crop->pad_left;
    int pad_right = crop->flip ? crop->pad_left : crop->pad_right;
    int inner_w = cfg->width - pad_left - pad_right;
    int inner_h = cfg->height - crop->pad_top - crop->pad_bottom;
    /* Eval reads a filter support beyond the box (the image's edges bound
     * the filter, not the box's); the support is the box-to-output ratio. */
    double margin_x = eval ? crop->width / inner_w + 2 : 0;
    double margin_y = eval ? crop->height / inner_h + 2 : 0;
    struct stk__decode_request req = {
        .x0 = crop->left - margin_x,
        .y0 = crop->top - margin_y,
        .x1 = crop->left + crop->width + margin_x,
        .y1 = crop->top + crop->height + margin_y,
        .min_width = inner_w * cfg->dct_margin,
        .min_height = inner_h * cfg->dct_margin,
    };
    req.full = cfg->full_decode;
    struct stk__decoded img;
    uint64_t t0 = stk__now_ns();
    int rc = stk__decode_region(w->decoder, data, size, &req, &img, err);
    uint64_t t1 = stk__now_ns();
    w->times.decode += t1 - t0;
    if (rc < 0)
        return rc;

    /* The box in scaled coordinates, relative to the resampling bounds. */
    double bx0 = crop->left * img.scale_x, by0 = crop->top * img.scale_y;
    double bx1 = (crop->left + crop->width) * img.scale_x;
    double by1 = (crop->top + crop->height) * img.scale_y;
    int lo_x = img.origin_x, lo_y = img.origin_y;
    int hi_x = img.origin_x + img.width, hi_y = img.origin_y + img.height;
    if (!eval) { /* the crop bounds the filter */
        lo_x = (int)fmax(lo_x, floor(bx0 + 1e-9));
        lo_y = (int)fmax(lo_y, floor(by0 + 1e-9));
        hi_x = (int)fmin(hi_x, ceil(bx1 - 1e-9));
        hi_y = (int)fmin(hi_y, ceil(by1 - 1e-9));
    }
    const uint8_t *src = img.pixels + (size_t)(lo_y - img.origin_y) * img.stride +
                         (size_t)(lo_x - img.origin_x) * 3;
    int direct = cfg->dtype == STK_DTYPE_UINT8 && cfg->layout == STK_LAYOUT_NHWC;
    uint8_t *dst = direct ? out : w->rgb;
    size_t stride = (size_t)cfg->width * 3;
    if (inner_w != cfg->width || inner_h != cfg->height)
        fill_padding(dst, cfg->width, cfg->height, pad_left, crop->pad_top, pad_left + inner_w,
                     crop->pad_top + inner_h);
    rc = stk__resize_rgb8(src, (size_t)(hi_x - lo_x), (size_t)(hi_y - lo_y), img.stride,
                          fmax(0, bx0 - lo_x), fmax(0, by0 - lo_y),
                          fmin(hi_x - lo_x, bx1 - lo_x), fmin(hi_y - lo_y, by1 - lo_y),
                          dst + (size_t)crop->pad_top * stride + (size_t)pad_left * 3,
                          (size_t)inner_w, (size_t)inner_h, stride, crop->flip, w->scratch);
    uint64_t t2 = stk__now_ns();
    w->times.resample += t2 - t1;
    if (rc < 0)
        return stk__errf(err, rc, "resampling %dx%d pixels failed", hi_x - lo_x, hi_y - lo_y);
    if (!direct) {
        convert(cfg, w->rgb, out);
        w->times.convert += stk__now_ns() - t2;
    }
    return 0;
}

void stk__image_worker_take_times(struct stk__image_worker *w, struct stk__stage_ns *out)
{
    *out = w->times;
    memset(&w->times, 0, sizeof w->times);
}

/* The sample's image member, or NULL with an error naming the sample. */
static const struct stk_member *image_member(const struct stk__sample *s, struct stk__err *err)
{
    const struct stk_member *m = find_image(s);
    char shown[STK__SHOWN_MAX];
    if (m == NULL)
        stk__errf(err, STK_EDECODE, "%s: sample '%s' has no jpg, jpeg or png member",
                  s->pub.url, stk__shown(shown, sizeof shown, s->pub.key));
    return m;
}

/* Put the sample's URL, key and member in front of err's message. */
static int name_member(int rc, const struct stk__sample *s, const struct stk_member *m,
                       struct stk__err *err)
{
    char why[STK__ERRMSG_MAX], key[STK__SHOWN_MAX], ext[STK__SHOWN_MAX];
    snprintf(why, sizeof why, "%s", err->msg);
    return stk__errf(err, rc, "%s: sample '%s' member %s: %s", s->pub.url,
                     stk__shown(key, sizeof key, s->pub.key), stk__shown(ext, sizeof ext, m->ext),
                     why);
}

/* The sample's label, its required members, then its image member: NULL
 * with err set when any of them is missing or bad. */
static const struct stk_member *checked_image(const struct stk__image_config *cfg,
                                              const struct stk__sample *s, int64_t *label,
                                              struct stk__err *err)
{
    int rc = find_label(cfg, s, label, err);
    if (rc == 0)
        rc = stk__members_check(&cfg->members, s, err);
    return rc < 0 ? NULL : image_member(s, err);
}

int stk__image_transform(struct stk__image_worker *w, const struct stk__image_config *cfg,
                         const struct stk__sample *s, void *out, int64_t *label,
                         struct stk__err *err)
{
    const struct stk_member *m = checked_image(cfg, s, label, err);
    if (m == NULL)
        return err->code;
    int width, height;
    int rc = stk__decode_size(w->decoder, m->data, m->size, &width, &height, err);
    if (rc == 0) {
        struct stk__crop crop;
        int eval = cfg->transform == STK_TRANSFORM_EVAL;
        if (eval) {
            stk__crop_eval(width, height, cfg->height, cfg->width, &crop);
        } else {
            struct stk__draws d;
            stk__draws_init(&d, cfg->seed, cfg->epoch, s->pub.shard_index, s->pass, s->position);
            stk__crop_train(&cfg->train, width, height, &d, &crop);
        }
        rc = stk__image_render(w, cfg, m->data, m->size, &crop, eval, out, err);
    }
    return rc < 0 ? name_member(rc, s, m, err) : 0;
}

int stk__image_check(struct stk__image_worker *w, const struct stk__image_config *cfg,
                     const struct stk__sample *s, int64_t *label, struct stk__err *err)
{
    const struct stk_member *m = checked_image(cfg, s, label, err);
    if (m == NULL)
        return err->code;
    const struct stk__decode_request whole = {.full = 1};
    struct stk__decoded img;
    int rc = stk__decode_region(w->decoder, m->data, m->size, &whole, &img, err);
    return rc < 0 ? name_member(rc, s, m, err) : 0;
}
