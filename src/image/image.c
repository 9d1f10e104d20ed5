/* SPDX-License-Identifier: MIT */
/*
 * image.c - decode, crop, resample and convert one image.
 *
 * Geometry. torchvision's train transform is crop(box) then resize, so the
 * crop's own edges bound the resampling filter: we resample the crop as an
 * image of its own. The eval transform is resize(whole image) then center
 * crop; that equals resampling the corresponding box of the whole image
 * with the image's edges as bounds, so we decode the box plus a margin of
 * one filter support. With DCT scaling the decoded image is smaller than
 * the original by scale_x/scale_y and every coordinate is scaled alike.
 */
#include "image/image.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "image/decode.h"
#include "image/resize.h"
#include "base/threads.h"

/* DCT scaling reduces by a box-like filter, not Pillow's antialiased
 * bilinear; the closer the scaled crop is to the output size, the more the
 * result drifts from torchvision's. Keeping it at least 1.5x the output
 * brought the worst image's MAE against Pillow + torchvision from 2.81 to
 * 1.43 (eval 224) and the worst train box from 3.09 to 1.67, for 2% of
 * train and 6% of eval throughput (entropy decoding dominates either way).
 * Eval decides reported accuracy and keeps 1.5; train augments anyway and
 * takes a smaller margin for speed (stk_options.dct_margin; figures in
 * docs/images.md). */
#define DCT_MARGIN_EVAL 1.5
#define DCT_MARGIN_TRAIN 1.25

/* Tag of the augmentations' stream, forked from the crop's. */
#define AUGMENT_STREAM 0x6175676d656e74ull

struct stk__image_worker {
    struct stk__decoder *decoder;
    struct stk__resize_scratch *scratch;
    uint8_t *rgb; /* height x width x 3 staging for layouts other than uint8 NHWC */
    int simd;     /* AVX2 kernels (the CPU has them, unless a test said no) */
    int fuse;     /* resample straight into the output form (see stk__image_render) */
    uint8_t *aug_scratch; /* height x width x 3 for the geometric augmentations */
    struct stk__stage_ns times;
};

static int cpu_has_avx2(void)
{
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return __builtin_cpu_supports("avx2");
#else
    return 0;
#endif
}

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

uint16_t stk__float_to_bfloat16(float f)
{
    uint32_t x;
    memcpy(&x, &f, 4);
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even */
    return (uint16_t)(x >> 16);
}

static int augment_config_init(struct stk__image_config *cfg, const struct stk_options *o,
                               struct stk__err *err)
{
    if ((unsigned)o->auto_augment > STK_AUTO_AUGMENT_IMAGENET ||
        (unsigned)o->augment_interpolation > STK_INTERPOLATION_BILINEAR ||
        (unsigned)o->interpolation > STK_RESIZE_BICUBIC ||
        (unsigned)o->random_erase_value > STK_ERASE_RANDOM)
        return stk__errf(err, STK_EINVAL, "unknown auto_augment, augment_interpolation, "
                                          "interpolation or random_erase_value");
    /* 0: torchvision's defaults (see stoker.h) */
    unsigned bins = o->augment_magnitude_bins ? o->augment_magnitude_bins : 31;
    unsigned magnitude = o->ra_magnitude ? o->ra_magnitude : 9;
    /* only RandAugment has a fixed magnitude; TrivialAugmentWide draws
     * its bin, the ImageNet policy has its own */
    if (o->auto_augment == STK_AUTO_AUGMENT_RA && magnitude >= bins)
        return stk__errf(err, STK_EINVAL, "RandAugment's ra_magnitude (%u%s) must be below "
                                          "augment_magnitude_bins (%u%s)",
                         magnitude, o->ra_magnitude ? "" : ", the default",
                         bins, o->augment_magnitude_bins ? "" : ", the default");
    if (!(o->random_erase >= 0 && o->random_erase <= 1) ||
        !(o->grayscale_probability >= 0 && o->grayscale_probability <= 1))
        return stk__errf(err, STK_EINVAL,
                         "random_erase and grayscale_probability must be between 0 and 1");
    if (!(o->color_jitter >= 0 && o->color_jitter < 1e6) ||
        !(o->hue_jitter >= 0 && o->hue_jitter <= 0.5))
        return stk__errf(err, STK_EINVAL, "need color_jitter >= 0 and 0 <= hue_jitter <= 0.5");
    if (o->blur_kernel % 2 == 0 && o->blur_kernel != 0)
        return stk__errf(err, STK_EINVAL, "blur_kernel must be odd (or 0: no blur)");
    /* 0: GaussianBlur's default sigma range (0.1, 2.0) */
    double sigma_min = o->blur_sigma_min ? o->blur_sigma_min : 0.1;
    double sigma_max = o->blur_sigma_max ? o->blur_sigma_max : 2.0;
    if (!(sigma_min > 0 && sigma_min <= sigma_max && sigma_max < 1e6))
        return stk__errf(err, STK_EINVAL, "need 0 < blur_sigma_min <= blur_sigma_max");
    if (!(o->mixup_alpha >= 0 && o->cutmix_alpha >= 0 && o->mix_switch_probability >= 0 &&
          o->mix_switch_probability <= 1))
        return stk__errf(err, STK_EINVAL, "mixup_alpha and cutmix_alpha must be >= 0 and "
                                          "mix_switch_probability between 0 and 1");
    if ((o->mixup_alpha > 0 || o->cutmix_alpha > 0) && o->dtype == STK_DTYPE_FLOAT16)
        return stk__errf(err, STK_EINVAL, "Mixup and CutMix need dtype uint8, float32 or "
                                          "bfloat16, not float16");
    int train = o->transform == STK_TRANSFORM_TRAIN;
    cfg->augment = (struct stk__augment_params){
        .policy = train ? o->auto_augment : STK_AUTO_AUGMENT_NONE,
        .bins = (int)bins,
        .num_ops = o->ra_num_ops ? (int)o->ra_num_ops : 2,
        .magnitude = (int)magnitude,
        .bilinear = o->augment_interpolation == STK_INTERPOLATION_BILINEAR,
        .color_jitter = train ? o->color_jitter : 0,
        .hue_jitter = train ? o->hue_jitter : 0,
        .grayscale_probability = train ? o->grayscale_probability : 0,
        .blur_kernel = train ? (int)o->blur_kernel : 0,
        .blur_sigma_min = sigma_min,
        .blur_sigma_max = sigma_max,
        .erase_probability = train ? o->random_erase : 0,
    };
    /* RandomErasing's value 0 comes after normalization: 0 in the float
     * outputs, the channel's mean in unnormalized uint8. */
    for (int c = 0; c < 3; c++) {
        double m = nearbyint(255.0 * o->mean[c]);
        cfg->erase_u8[c] = (uint8_t)(m < 0 ? 0 : m > 255 ? 255 : m);
        cfg->erase_level[c][0] = 255.0 * o->mean[c];
        cfg->erase_level[c][1] = 255.0 * o->std[c];
    }
    cfg->erase_random = o->random_erase_value == STK_ERASE_RANDOM;
    return 0;
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
    if (augment_config_init(cfg, o, err) < 0)
        return err->code;
    cfg->eval_resize = (int)o->eval_resize;
    cfg->filter =
        o->interpolation == STK_RESIZE_BICUBIC ? STK__RESIZE_BICUBIC : STK__RESIZE_BILINEAR;
    cfg->seed = o->seed;
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
                                                               : stk__float_to_bfloat16(f);
        }
    }
    return 0;
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
    if (stk__augment_any(&cfg->augment))
        w->aug_scratch = stk__malloc((size_t)cfg->height * (size_t)cfg->width * 3 +
                                     STK__AUG_SCRATCH_SLACK);
    if (w->decoder == NULL || w->scratch == NULL || w->rgb == NULL ||
        (stk__augment_any(&cfg->augment) && w->aug_scratch == NULL)) {
        stk__image_worker_free(w);
        return NULL;
    }
    w->simd = cpu_has_avx2();
    w->fuse = 1;
    stk__resize_scratch_set_filter(w->scratch, cfg->filter);
    return w;
}

void stk__image_worker_free(struct stk__image_worker *w)
{
    if (w == NULL)
        return;
    stk__decoder_free(w->decoder);
    stk__resize_scratch_free(w->scratch);
    stk__free(w->rgb);
    stk__free(w->aug_scratch);
    stk__free(w);
}

/* The n RGB pixels of rgb as three planes `plane` elements apart (uint8
 * NCHW). One loop over the three channels, which gcc vectorises as one
 * group of stride-3 loads (the loop per channel it did not): 6 us against
 * 75 us per 224x224 image compiled for AVX2, 45 us without. */
static inline __attribute__((always_inline)) void
planes_u8_loop(const uint8_t *restrict rgb, size_t n, size_t plane, uint8_t *restrict out)
{
    uint8_t *restrict r = out, *restrict g = out + plane, *restrict b = out + 2 * plane;
    for (size_t i = 0; i < n; i++) {
        r[i] = rgb[3 * i];
        g[i] = rgb[3 * i + 1];
        b[i] = rgb[3 * i + 2];
    }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_PLANES 1
/* Compiled for AVX2 whatever the build's target, called only where the CPU
 * has it (as resize.c's kernels). Not target_clones: its load-time
 * resolver runs before ThreadSanitizer's runtime is up and crashes the
 * TSan build. */
static __attribute__((target("avx2"))) void planes_u8_avx2(const uint8_t *restrict rgb, size_t n,
                                                            size_t plane, uint8_t *restrict out)
{
    planes_u8_loop(rgb, n, plane, out);
}
#else
#define HAVE_AVX2_PLANES 0
#endif

/* The n pixels of rgb into out as element type T through the per-channel
 * table LUT (planar, planes `plane` elements apart, or interleaved), the
 * three channels in one loop, as planes_u8. Written once per type with the
 * layout decided outside the loop, so each loop is a plain load-and-store:
 * the former per-element layout test made the float32 conversion 1.2x
 * slower. */
#define CONVERT_LUT(T, LUT)                                                                        \
    do {                                                                                           \
        T *restrict o_ = out;                                                                      \
        if (planar)                                                                                \
            for (size_t i = 0; i < n; i++) {                                                       \
                o_[i] = LUT[0][rgb[3 * i]];                                                        \
                o_[plane + i] = LUT[1][rgb[3 * i + 1]];                                            \
                o_[2 * plane + i] = LUT[2][rgb[3 * i + 2]];                                        \
            }                                                                                      \
        else                                                                                       \
            for (size_t i = 0; i < 3 * n; i += 3) {                                                \
                o_[i] = LUT[0][rgb[i]];                                                            \
                o_[i + 1] = LUT[1][rgb[i + 1]];                                                    \
                o_[i + 2] = LUT[2][rgb[i + 2]];                                                    \
            }                                                                                      \
    } while (0)

/* Write rows y .. y+rows-1 of the output, the RGB8 pixels rgb (rows packed,
 * cfg->width pixels each), into the image out in the configured form (any
 * but uint8 NHWC, which the resampler writes directly). Per pixel, so
 * converting the image at once or row by row gives the same bytes. */
static void convert_rows(const struct stk__image_config *cfg, int simd, const uint8_t *restrict rgb,
                         size_t y, size_t rows, void *image)
{
    const size_t plane = (size_t)cfg->height * (size_t)cfg->width;
    const size_t first = y * (size_t)cfg->width, n = rows * (size_t)cfg->width;
    const int planar = cfg->layout == STK_LAYOUT_NCHW;
    const size_t at = planar ? first : 3 * first; /* the rows' first element */
    switch (cfg->dtype) {
    case STK_DTYPE_UINT8: {
        uint8_t *out = (uint8_t *)image + at;
#if HAVE_AVX2_PLANES
        if (simd) {
            planes_u8_avx2(rgb, n, plane, out);
            break;
        }
#endif
        planes_u8_loop(rgb, n, plane, out);
        break;
    }
    case STK_DTYPE_FLOAT32: {
        float *out = (float *)image + at;
        CONVERT_LUT(float, cfg->lut_f32);
        break;
    }
    default: {
        uint16_t *out = (uint16_t *)image + at;
        CONVERT_LUT(uint16_t, cfg->lut_u16);
        break;
    }
    }
    (void)simd;
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

/* The fused path's sink: one resampled row straight into the batch slot. */
struct row_target {
    const struct stk__image_config *cfg;
    int simd;
    void *out;
};

static void convert_row(void *ctx, size_t y, const uint8_t *rgb)
{
    const struct row_target *t = ctx;
    convert_rows(t->cfg, t->simd, rgb, y, 1, t->out);
}

static int has_padding(const struct stk__crop *crop)
{
    return (crop->pad_left | crop->pad_right | crop->pad_top | crop->pad_bottom) != 0;
}

/* The auto_augment operations drawn for this sample, on the RGB8 crop at
 * output size, each timed on its own as the stages are (a clock read costs
 * about 20 ns, against microseconds for the cheapest op on a crop). */
static int augment_crop(struct stk__image_worker *w, const struct stk__image_config *cfg,
                        uint8_t *rgb, struct stk__draws *aug)
{
    uint64_t t0 = stk__now_ns();
    struct stk__aug_step steps[STK__AUG_MAX_STEPS];
    int n = stk__augment_draw(&cfg->augment, cfg->width, cfg->height, aug, steps);
    const struct stk__aug_image img = {rgb, cfg->width, cfg->height, w->aug_scratch};
    int rc = 0;
    uint64_t t = stk__now_ns();
    for (int i = 0; i < n; i++) {
        rc |= stk__augment_apply(&cfg->augment, &img, &steps[i], 1);
        const uint64_t end = stk__now_ns();
        w->times.op_ns[steps[i].op] += end - t;
        w->times.op_runs[steps[i].op]++;
        t = end;
    }
    w->times.augment += t - t0;
    return rc < 0 ? STK_ENOMEM : 0;
}

/* Element at of the output, channel c, set to the normalized value z
 * (value="random"): the number in the float types, the level it stands for
 * in uint8. */
static void put_normal(const struct stk__image_config *cfg, int c, double z, void *out, size_t at)
{
    switch (cfg->dtype) {
    case STK_DTYPE_UINT8: {
        double v = nearbyint(cfg->erase_level[c][0] + cfg->erase_level[c][1] * z);
        ((uint8_t *)out)[at] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
        break;
    }
    case STK_DTYPE_FLOAT32: ((float *)out)[at] = (float)z; break;
    case STK_DTYPE_FLOAT16: ((uint16_t *)out)[at] = float_to_half((float)z); break;
    default: ((uint16_t *)out)[at] = stk__float_to_bfloat16((float)z); break;
    }
}

/* RandomErasing on the output in its dtype and layout: the box takes the
 * value 0 after normalization (all bits zero in every float type, the
 * channel's mean in uint8) or, with value="random", a standard normal
 * number per element drawn after the box, channel by channel, row by
 * row. */
static void erase(struct stk__image_worker *w, const struct stk__image_config *cfg, void *out,
                  struct stk__draws *aug)
{
    uint64_t t0 = stk__now_ns();
    int top, left, bh, bw;
    if (!stk__augment_erase_box(cfg->augment.erase_probability, cfg->width, cfg->height, aug,
                                &top, &left, &bh, &bw))
        goto out;
    size_t es = dtype_size(cfg->dtype), W = (size_t)cfg->width, H = (size_t)cfg->height;
    double z[2];
    size_t drawn = 0;
    for (int c = 0; c < 3; c++)
        for (int y = top; y < top + bh; y++) {
            for (int x = left; x < left + bw; x++) {
                size_t at = cfg->layout == STK_LAYOUT_NCHW
                                ? ((size_t)c * H + (size_t)y) * W + (size_t)x
                                : ((size_t)y * W + (size_t)x) * 3 + (size_t)c;
                if (cfg->erase_random) {
                    if (drawn % 2 == 0)
                        stk__draw_normals(aug, z);
                    put_normal(cfg, c, z[drawn++ % 2], out, at);
                } else if (es == 1) {
                    ((uint8_t *)out)[at] = cfg->erase_u8[c];
                } else {
                    memset((char *)out + at * es, 0, es);
                }
            }
        }
out:
    w->times.erase += stk__now_ns() - t0;
}

/* Decode the image bytes and resample the crop to height x width, flipped
 * where the draw says: into rgb (uint8 HWC, cfg->width x cfg->height, the
 * crop's padding black) or, when sink is not NULL (a crop without
 * padding), row by row into sink. */
static int render_rgb(struct stk__image_worker *w, const struct stk__image_config *cfg,
                      const uint8_t *data, size_t size, const struct stk__crop *crop, int eval,
                      uint8_t *rgb, const struct stk__resize_sink *sink, struct stk__err *err)
{
    /* The box fills the output but for the padding (eval only), which a
     * flip mirrors. */
    int pad_left = crop->flip ? crop->pad_right : crop->pad_left;
    int pad_right = crop->flip ? crop->pad_left : crop->pad_right;
    int inner_w = cfg->width - pad_left - pad_right;
    int inner_h = cfg->height - crop->pad_top - crop->pad_bottom;
    /* Eval reads a filter support beyond the box (the image's edges bound
     * the filter, not the box's); the support is the filter's at scale 1
     * times the box-to-output ratio (at least the filter's: the 2 added). */
    const double support = stk__resize_filter_support(cfg->filter);
    double margin_x = eval ? support * crop->width / inner_w + 2 : 0;
    double margin_y = eval ? support * crop->height / inner_h + 2 : 0;
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
    const struct stk__rgb8_view src = {
        img.pixels + (size_t)(lo_y - img.origin_y) * img.stride + (size_t)(lo_x - img.origin_x) * 3,
        (size_t)(hi_x - lo_x), (size_t)(hi_y - lo_y), img.stride};
    const struct stk__box box = {fmax(0, bx0 - lo_x), fmax(0, by0 - lo_y),
                                 fmin(hi_x - lo_x, bx1 - lo_x), fmin(hi_y - lo_y, by1 - lo_y)};
    if (sink != NULL) {
        rc = stk__resize_rgb8_rows(&src, &box, (size_t)inner_w, (size_t)inner_h, crop->flip, sink,
                                   w->scratch);
    } else {
        size_t stride = (size_t)cfg->width * 3;
        if (inner_w != cfg->width || inner_h != cfg->height)
            fill_padding(rgb, cfg->width, cfg->height, pad_left, crop->pad_top, pad_left + inner_w,
                         crop->pad_top + inner_h);
        const struct stk__rgb8_image dst = {
            rgb + (size_t)crop->pad_top * stride + (size_t)pad_left * 3, (size_t)inner_w,
            (size_t)inner_h, stride};
        rc = stk__resize_rgb8(&src, &box, &dst, crop->flip, w->scratch);
    }
    w->times.resample += stk__now_ns() - t1;
    if (rc < 0)
        return stk__errf(err, rc, "resampling %dx%d pixels failed", hi_x - lo_x, hi_y - lo_y);
    return 0;
}

/* The seam where per-image ops on the uint8 HWC crop at output size go:
 * render_rgb (decode + resample into w->rgb, or into out itself for uint8
 * NHWC), the auto_augment ops drawn from the stream aug (NULL: none), then
 * convert_rows to the batch's dtype and layout, and RandomErasing on the
 * output. With no op between them the resample and the conversion are
 * fused (w->fuse): the resampler hands each output row to convert_row
 * while it is in L1, so the crop is touched once after decoding; the
 * conversion then counts as resampling in the stage times. */
static int render(struct stk__image_worker *w, const struct stk__image_config *cfg,
                  const uint8_t *data, size_t size, const struct stk__crop *crop, int eval,
                  struct stk__draws *aug, void *out, struct stk__err *err)
{
    const int direct = cfg->dtype == STK_DTYPE_UINT8 && cfg->layout == STK_LAYOUT_NHWC;
    const int ops = aug != NULL && stk__augment_any(&cfg->augment);
    int rc;
    if (!direct && !ops && w->fuse && !has_padding(crop)) {
        struct row_target target = {cfg, w->simd, out};
        const struct stk__resize_sink sink = {convert_row, &target};
        rc = render_rgb(w, cfg, data, size, crop, eval, NULL, &sink, err);
    } else {
        uint8_t *rgb = direct ? out : w->rgb;
        rc = render_rgb(w, cfg, data, size, crop, eval, rgb, NULL, err);
        if (rc == 0 && ops && augment_crop(w, cfg, rgb, aug) < 0)
            rc = stk__errf(err, STK_ENOMEM, "no memory for the Gaussian blur");
        if (rc == 0 && !direct) {
            uint64_t t0 = stk__now_ns();
            convert_rows(cfg, w->simd, w->rgb, 0, (size_t)cfg->height, out);
            w->times.convert += stk__now_ns() - t0;
        }
    }
    if (rc == 0 && aug != NULL && cfg->augment.erase_probability > 0)
        erase(w, cfg, out, aug);
    return rc;
}

int stk__image_render(struct stk__image_worker *w, const struct stk__image_config *cfg,
                      const uint8_t *data, size_t size, const struct stk__crop *crop, int eval,
                      void *out, struct stk__err *err)
{
    return render(w, cfg, data, size, crop, eval, NULL, out, err);
}

void stk__image_worker_force_paths(struct stk__image_worker *w, int simd, int fuse)
{
    w->simd = simd && cpu_has_avx2();
    w->fuse = fuse != 0;
    stk__resize_scratch_set_simd(w->scratch, w->simd);
}

void stk__image_worker_take_times(struct stk__image_worker *w, struct stk__stage_ns *out)
{
    *out = w->times;
    memset(&w->times, 0, sizeof w->times);
}

int stk__image_transform(struct stk__image_worker *w, const struct stk__image_config *cfg,
                         const uint8_t *data, size_t size, uint64_t key,
                         void *out, struct stk__err *err)
{
    int width, height;
    int rc = stk__decode_size(w->decoder, data, size, &width, &height, err);
    if (rc < 0)
        return rc;
    struct stk__crop crop;
    struct stk__draws d, aug;
    int eval = cfg->transform == STK_TRANSFORM_EVAL;
    if (eval) {
        stk__crop_eval_resized(width, height, cfg->eval_resize, cfg->height, cfg->width, &crop);
    } else {
        stk__draws_from_key(&d, key);
        stk__crop_train(&cfg->train, width, height, &d, &crop);
        stk__draws_fork(&d, AUGMENT_STREAM, &aug);
    }
    return render(w, cfg, data, size, &crop, eval, eval ? NULL : &aug, out, err);
}

int stk__image_check(struct stk__image_worker *w, const uint8_t *data, size_t size,
                     struct stk__err *err)
{
    const struct stk__decode_request whole = {.full = 1};
    struct stk__decoded img;
    return stk__decode_region(w->decoder, data, size, &whole, &img, err);
}
