/* SPDX-License-Identifier: MIT */
/*
 * augment_ops.c - torchvision's uint8 tensor operations, in C.
 *
 * Written by hand because no Debian library reproduces torchvision's own
 * arithmetic (Pillow's ImageEnhance and affine round differently). Every
 * step follows functional_tensor.py as torch evaluates it on CPU: the
 * blends multiply uint8 values by a float32 factor, add in float32, clamp
 * to [0, 255] and truncate (Tensor.to(uint8)); the blur and the grid
 * sampling round half to even (torch.round) before the cast. Where torch's
 * own summation order is not ours (the contrast mean, the 3x3 blur, the
 * affine grid's matrix product) a value that lands on a rounding boundary
 * can differ by one level; tests/integration/test_augment_vs_torchvision.py
 * bounds that.
 */
#include "image/augment_ops.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNELS 1
#include <immintrin.h>
#else
#define HAVE_AVX2_KERNELS 0
#endif

static const double PI = 3.14159265358979323846;

/* Tensor.to(uint8) of a float32 already clamped by the caller: truncation.
 * NaN (a NaN factor) goes to 0, never to undefined behaviour. */
static inline uint8_t clamp_trunc(float v)
{
    return v > 255.0f ? 255 : v >= 0.0f ? (uint8_t)v : 0;
}


/* floor of -2^31 < v < 2^31 by truncation (floorf is a libm call too). */
static inline int floor_int(float v)
{
    int i = (int)v;
    return (float)i > v ? i - 1 : i;
}

static size_t n_bytes(const struct stk__aug_image *img)
{
    return (size_t)img->width * (size_t)img->height * 3;
}

/* _blend(img, other, factor) where other is one value for all pixels:
 * a table of the 256 results. */
static void blend_constant_lut(float factor, float other, uint8_t lut[256])
{
    float rest = (float)(1.0 - (double)factor) * other;
    for (int v = 0; v < 256; v++)
        lut[v] = clamp_trunc(factor * (float)v + rest);
}

static void apply_lut(const struct stk__aug_image *img, const uint8_t lut[256])
{
    uint8_t *p = img->pixels;
    for (size_t i = 0, n = n_bytes(img); i < n; i++)
        p[i] = lut[p[i]];
}

/* rgb_to_grayscale on uint8: float32 sum in torch's order, truncated. */
static inline uint8_t gray_of(const uint8_t *px)
{
    float l = 0.2989f * (float)px[0] + 0.587f * (float)px[1];
    return clamp_trunc(l + 0.114f * (float)px[2]);
}

void stk__aug_brightness(const struct stk__aug_image *img, double factor)
{
    uint8_t lut[256];
    blend_constant_lut((float)factor, 0.0f, lut);
    apply_lut(img, lut);
}

void stk__aug_saturation(const struct stk__aug_image *img, double factor)
{
    float f = (float)factor, rest = (float)(1.0 - factor);
    uint8_t *p = img->pixels;
    for (size_t i = 0, n = n_bytes(img); i < n; i += 3) {
        float g = rest * (float)gray_of(p + i);
        for (int c = 0; c < 3; c++)
            p[i + c] = clamp_trunc(f * (float)p[i + c] + g);
    }
}

void stk__aug_grayscale(const struct stk__aug_image *img)
{
    uint8_t *p = img->pixels;
    for (size_t i = 0, n = n_bytes(img); i < n; i += 3)
        p[i] = p[i + 1] = p[i + 2] = gray_of(p + i);
}

void stk__aug_contrast(const struct stk__aug_image *img, double factor)
{
    /* torch.mean of the float32 gray image; our sum is exact (integers in
     * a double), torch's is float32 pairwise: they agree to about 1e-7. */
    const uint8_t *p = img->pixels;
    double sum = 0;
    size_t n = n_bytes(img);
    for (size_t i = 0; i < n; i += 3)
        sum += gray_of(p + i);
    uint8_t lut[256];
    blend_constant_lut((float)factor, (float)(sum / (double)(n / 3)), lut);
    apply_lut(img, lut);
}

static const float BLUR_EDGE = 1.0f / 13.0f, BLUR_MID = 5.0f / 13.0f;

/* Byte x of a row inside the border, blurred from the original rows above,
 * row and below, then blended: the sum in torch's kernel order. */
static inline uint8_t sharpen_at(const uint8_t *above, const uint8_t *row, const uint8_t *below,
                                 size_t x, float f, float rest)
{
    const float e = BLUR_EDGE;
    float s = e * (float)above[x - 3] + e * (float)above[x] + e * (float)above[x + 3] +
              e * (float)row[x - 3] + BLUR_MID * (float)row[x] + e * (float)row[x + 3] +
              e * (float)below[x - 3] + e * (float)below[x] + e * (float)below[x + 3];
    return clamp_trunc(f * (float)row[x] + rest * (float)stk__clamp_round_u8(s));
}

#if HAVE_AVX2_KERNELS
static __attribute__((target("avx2"))) __m256 load8(const uint8_t *p)
{
    return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)));
}

/* sharpen_at for bytes x to x + 7, the same operations eight at a time
 * (max/min clamp NaN to 0 as clamp_trunc does: maxps returns its second
 * operand when either is NaN). */
static __attribute__((target("avx2"))) void sharpen8_avx2(const uint8_t *above,
                                                         const uint8_t *row,
                                                         const uint8_t *below, size_t x,
                                                         float f, float rest, uint8_t *out)
{
    const __m256 e = _mm256_set1_ps(BLUR_EDGE), zero = _mm256_setzero_ps();
    const __m256 top = _mm256_set1_ps(255.0f);
    __m256 center = load8(row + x);
    __m256 s = _mm256_mul_ps(e, load8(above + x - 3));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(above + x)));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(above + x + 3)));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(row + x - 3)));
    s = _mm256_add_ps(s, _mm256_mul_ps(_mm256_set1_ps(BLUR_MID), center));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(row + x + 3)));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(below + x - 3)));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(below + x)));
    s = _mm256_add_ps(s, _mm256_mul_ps(e, load8(below + x + 3)));
    s = _mm256_min_ps(_mm256_max_ps(s, zero), top);
    s = _mm256_round_ps(s, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 v = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(f), center),
                             _mm256_mul_ps(_mm256_set1_ps(rest), s));
    v = _mm256_min_ps(_mm256_max_ps(v, zero), top);
    __m256i i = _mm256_cvttps_epi32(v);
    __m128i w16 = _mm_packus_epi32(_mm256_castsi256_si128(i), _mm256_extracti128_si256(i, 1));
    _mm_storel_epi64((__m128i *)(void *)(out + x), _mm_packus_epi16(w16, w16));
}
#endif

/* One row of the sharpness blend inside the border: bytes 3 to n - 3. */
static void sharpen_row(const uint8_t *above, const uint8_t *row, const uint8_t *below,
                        uint8_t *out, size_t n, float f, float rest)
{
    size_t x = 3;
#if HAVE_AVX2_KERNELS
    if (__builtin_cpu_supports("avx2"))
        for (; x + 8 <= n - 3; x += 8) /* the loads reach x + 3 + 7 < n */
            sharpen8_avx2(above, row, below, x, f, rest, out);
#endif
    for (; x < n - 3; x++)
        out[x] = sharpen_at(above, row, below, x, f, rest);
}

void stk__aug_sharpness(const struct stk__aug_image *img, double factor)
{
    int w = img->width, h = img->height;
    if (w <= 2 || h <= 2)
        return;
    /* The blurred image (3x3 kernel of ones with 5 in the middle, over 13,
     * rounded) inside the border, the image itself on it; then the blend.
     * The blur reads the original, kept in scratch. */
    size_t stride = (size_t)w * 3;
    memcpy(img->scratch, img->pixels, n_bytes(img));
    float f = (float)factor, rest = (float)(1.0 - factor);
    for (int y = 1; y < h - 1; y++) {
        const uint8_t *above = img->scratch + (size_t)(y - 1) * stride;
        const uint8_t *row = above + stride, *below = row + stride;
        sharpen_row(above, row, below, img->pixels + (size_t)y * stride, stride, f, rest);
    }
    /* On the border the blurred image is the image: the blend of a value
     * with itself, which truncation can still lower by one. */
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = clamp_trunc(f * (float)v + rest * (float)v);
    for (int y = 0; y < h; y++) {
        uint8_t *row = img->pixels + (size_t)y * stride;
        if (y == 0 || y == h - 1) {
            for (size_t x = 0; x < stride; x++)
                row[x] = lut[row[x]];
        } else {
            for (int c = 0; c < 3; c++) {
                row[c] = lut[row[c]];
                row[stride - 3 + (size_t)c] = lut[row[stride - 3 + (size_t)c]];
            }
        }
    }
}

static void posterize(const struct stk__aug_image *img, double bits)
{
    int b = bits >= 8 ? 8 : bits >= 0 ? (int)bits : 0;
    uint8_t mask = (uint8_t)(0xff00u >> b), lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (uint8_t)(v & mask);
    apply_lut(img, lut);
}

static void solarize(const struct stk__aug_image *img, double threshold)
{
    float t = (float)threshold; /* torch compares the uint8 image with a float */
    uint8_t lut[256];
    for (int v = 0; v < 256; v++)
        lut[v] = (float)v >= t ? (uint8_t)(255 - v) : (uint8_t)v;
    apply_lut(img, lut);
}

static void invert(const struct stk__aug_image *img)
{
    uint8_t *p = img->pixels;
    for (size_t i = 0, n = n_bytes(img); i < n; i++)
        p[i] = (uint8_t)(255 - p[i]);
}

static void autocontrast(const struct stk__aug_image *img)
{
    uint8_t lo[3] = {255, 255, 255}, hi[3] = {0, 0, 0};
    uint8_t *p = img->pixels;
    size_t n = n_bytes(img);
    for (size_t i = 0; i < n; i += 3)
        for (int c = 0; c < 3; c++) {
            lo[c] = p[i + c] < lo[c] ? p[i + c] : lo[c];
            hi[c] = p[i + c] > hi[c] ? p[i + c] : hi[c];
        }
    uint8_t lut[3][256];
    for (int c = 0; c < 3; c++) {
        /* A flat channel has an infinite scale, which torch replaces by a
         * minimum of 0 and a scale of 1: the channel stays as it is. */
        float min = hi[c] == lo[c] ? 0.0f : (float)lo[c];
        float scale = hi[c] == lo[c] ? 1.0f : 255.0f / (float)(hi[c] - lo[c]);
        for (int v = 0; v < 256; v++)
            lut[c][v] = clamp_trunc(((float)v - min) * scale);
    }
    for (size_t i = 0; i < n; i += 3)
        for (int c = 0; c < 3; c++)
            p[i + c] = lut[c][p[i + c]];
}

/* _scale_channel: the cumulative histogram in steps of the pixels outside
 * the brightest level, over 255; integer arithmetic throughout, as torch's
 * int64 bincount and floor divisions. */
static void equalize(const struct stk__aug_image *img)
{
    uint64_t hist[3][256];
    memset(hist, 0, sizeof hist);
    uint8_t *p = img->pixels;
    size_t n = n_bytes(img);
    for (size_t i = 0; i < n; i += 3)
        for (int c = 0; c < 3; c++)
            hist[c][p[i + c]]++;
    uint8_t lut[3][256];
    int identity[3];
    for (int c = 0; c < 3; c++) {
        uint64_t total = 0, last = 0;
        for (int v = 0; v < 256; v++)
            if (hist[c][v] != 0) {
                total += hist[c][v];
                last = hist[c][v];
            }
        uint64_t step = (total - last) / 255;
        identity[c] = step == 0;
        uint64_t cum = 0;
        for (int v = 0; v < 256; v++) {
            uint64_t level = step == 0 ? 0 : (cum + step / 2) / step; /* lut shifted by one */
            lut[c][v] = (uint8_t)(level > 255 ? 255 : level);
            cum += hist[c][v];
        }
        if (identity[c])
            for (int v = 0; v < 256; v++)
                lut[c][v] = (uint8_t)v;
    }
    for (size_t i = 0; i < n; i += 3)
        for (int c = 0; c < 3; c++)
            p[i + c] = lut[c][p[i + c]];
}

void stk__aug_inverse_matrix(double center_x, double center_y, double angle, double translate_x,
                             double translate_y, double scale, double shear_x, double shear_y,
                             double out[6])
{
    double rot = angle * PI / 180, sx = shear_x * PI / 180, sy = shear_y * PI / 180;
    double a = cos(rot - sy) / cos(sy);
    double b = -cos(rot - sy) * tan(sx) / cos(sy) - sin(rot);
    double c = sin(rot - sy) / cos(sy);
    double d = -sin(rot - sy) * tan(sx) / cos(sy) + cos(rot);
    double m[6] = {d / scale, -b / scale, 0, -c / scale, a / scale, 0};
    m[2] += m[0] * (-center_x - translate_x) + m[1] * (-center_y - translate_y);
    m[5] += m[3] * (-center_x - translate_x) + m[4] * (-center_y - translate_y);
    m[2] += center_x;
    m[5] += center_y;
    memcpy(out, m, sizeof m);
}

/* One output pixel of grid_sample(align_corners=False, padding zeros) at
 * source position (ix, iy), with the mask channel torchvision appends
 * when a fill is given. Reads only pixels inside the image. */
static void sample_bilinear(const uint8_t *src, int w, int h, float ix, float iy,
                            const uint8_t *fill, uint8_t *out)
{
    float acc[3] = {0, 0, 0}, mask = 0;
    if (ix > -1.0f && ix < (float)w && iy > -1.0f && iy < (float)h) {
        int x0 = floor_int(ix), y0 = floor_int(iy);
        float fx0 = (float)x0, fy0 = (float)y0;
        float wx1 = ix - fx0, wx0 = fx0 + 1.0f - ix;
        float wy1 = iy - fy0, wy0 = fy0 + 1.0f - iy;
        const float wt[4] = {wx0 * wy0, wx1 * wy0, wx0 * wy1, wx1 * wy1};
        if (x0 >= 0 && x0 + 1 < w && y0 >= 0 && y0 + 1 < h && fill == NULL) {
            /* inside: the four neighbours without bounds checks */
            const uint8_t *a = src + ((size_t)y0 * (size_t)w + (size_t)x0) * 3;
            const uint8_t *b = a + (size_t)w * 3;
            for (int c = 0; c < 3; c++)
                out[c] = stk__clamp_round_u8((float)a[c] * wt[0] + (float)a[c + 3] * wt[1] +
                                     (float)b[c] * wt[2] + (float)b[c + 3] * wt[3]);
            return;
        }
        for (int k = 0; k < 4; k++) {
            int x = x0 + (k & 1), y = y0 + (k >> 1);
            if (x < 0 || x >= w || y < 0 || y >= h)
                continue;
            const uint8_t *px = src + ((size_t)y * (size_t)w + (size_t)x) * 3;
            for (int c = 0; c < 3; c++)
                acc[c] += (float)px[c] * wt[k];
            mask += wt[k];
        }
    }
    for (int c = 0; c < 3; c++) {
        float v = fill != NULL ? acc[c] * mask + (1.0f - mask) * (float)fill[c] : acc[c];
        out[c] = stk__clamp_round_u8(v);
    }
}

static void sample_nearest(const uint8_t *src, int w, int h, float ix, float iy,
                           const uint8_t *fill, uint8_t *out)
{
    static const uint8_t zero[3] = {0, 0, 0};
    const uint8_t *px = fill != NULL ? fill : zero;
    if (ix >= -0.5f && ix <= (float)w && iy >= -0.5f && iy <= (float)h) {
        int x = ix >= 0 ? (int)stk__round_even_nonneg(ix) : -(int)stk__round_even_nonneg(-ix);
        int y = iy >= 0 ? (int)stk__round_even_nonneg(iy) : -(int)stk__round_even_nonneg(-iy);
        if (x >= 0 && x < w && y >= 0 && y < h)
            px = src + ((size_t)y * (size_t)w + (size_t)x) * 3;
    }
    memcpy(out, px, 3);
}

#if HAVE_AVX2_KERNELS
/* Eight bilinear samples of row y from x on, when all eight lie inside
 * the image (else 0 and nothing written): the same float32 operations in
 * the same order as sample_bilinear, eight lanes at a time, the four
 * neighbours fetched as 32-bit gathers. A gather of the image's last
 * pixel reads one byte past it: the scratch has STK__AUG_SCRATCH_SLACK
 * bytes of slack for that. */
static __attribute__((target("avx2"))) int bilinear8_avx2(const uint8_t *src, int w, int h,
                                                         const float t[6], float hw, float yc,
                                                         int x, uint8_t *out)
{
    const __m256 lanes = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    __m256 xc = _mm256_add_ps(
        _mm256_sub_ps(_mm256_add_ps(_mm256_set1_ps((float)x), lanes), _mm256_set1_ps(hw)),
        _mm256_set1_ps(0.5f));
    __m256 gx = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(t[0])),
                                            _mm256_set1_ps(yc * t[1])),
                              _mm256_set1_ps(t[2]));
    __m256 gy = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(xc, _mm256_set1_ps(t[3])),
                                            _mm256_set1_ps(yc * t[4])),
                              _mm256_set1_ps(t[5]));
    const __m256 one = _mm256_set1_ps(1.0f), half = _mm256_set1_ps(0.5f);
    __m256 ix = _mm256_mul_ps(
        _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gx, one), _mm256_set1_ps((float)w)), one), half);
    __m256 iy = _mm256_mul_ps(
        _mm256_sub_ps(_mm256_mul_ps(_mm256_add_ps(gy, one), _mm256_set1_ps((float)h)), one), half);
    __m256 fx0 = _mm256_floor_ps(ix), fy0 = _mm256_floor_ps(iy);
    /* inside: 0 <= x0 <= w - 2 and 0 <= y0 <= h - 2 (NaN fails) */
    __m256 in = _mm256_and_ps(
        _mm256_and_ps(_mm256_cmp_ps(fx0, _mm256_setzero_ps(), _CMP_GE_OQ),
                      _mm256_cmp_ps(fx0, _mm256_set1_ps((float)(w - 2)), _CMP_LE_OQ)),
        _mm256_and_ps(_mm256_cmp_ps(fy0, _mm256_setzero_ps(), _CMP_GE_OQ),
                      _mm256_cmp_ps(fy0, _mm256_set1_ps((float)(h - 2)), _CMP_LE_OQ)));
    if (_mm256_movemask_ps(in) != 0xff)
        return 0;
    __m256 wx1 = _mm256_sub_ps(ix, fx0), wx0 = _mm256_sub_ps(_mm256_add_ps(fx0, one), ix);
    __m256 wy1 = _mm256_sub_ps(iy, fy0), wy0 = _mm256_sub_ps(_mm256_add_ps(fy0, one), iy);
    const __m256 wt[4] = {_mm256_mul_ps(wx0, wy0), _mm256_mul_ps(wx1, wy0),
                          _mm256_mul_ps(wx0, wy1), _mm256_mul_ps(wx1, wy1)};
    __m256i at = _mm256_mullo_epi32(
        _mm256_add_epi32(_mm256_mullo_epi32(_mm256_cvttps_epi32(fy0), _mm256_set1_epi32(w)),
                         _mm256_cvttps_epi32(fx0)),
        _mm256_set1_epi32(3));
    const int row = 3 * w;
    const __m256i offs[4] = {at, _mm256_add_epi32(at, _mm256_set1_epi32(3)),
                             _mm256_add_epi32(at, _mm256_set1_epi32(row)),
                             _mm256_add_epi32(at, _mm256_set1_epi32(row + 3))};
    __m256i px[4];
    for (int k = 0; k < 4; k++)
        px[k] = _mm256_i32gather_epi32((const int *)(const void *)src, offs[k], 1);
    const __m256i byte = _mm256_set1_epi32(0xff);
    __m256i packed = _mm256_setzero_si256();
    for (int c = 0; c < 3; c++) {
        __m256 acc = _mm256_mul_ps(
            _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(px[0], 8 * c), byte)), wt[0]);
        for (int k = 1; k < 4; k++)
            acc = _mm256_add_ps(
                acc, _mm256_mul_ps(_mm256_cvtepi32_ps(
                                       _mm256_and_si256(_mm256_srli_epi32(px[k], 8 * c), byte)),
                                   wt[k]));
        acc = _mm256_min_ps(_mm256_max_ps(acc, _mm256_setzero_ps()), _mm256_set1_ps(255.0f));
        acc = _mm256_round_ps(acc, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
        packed = _mm256_or_si256(packed, _mm256_slli_epi32(_mm256_cvttps_epi32(acc), 8 * c));
    }
    uint32_t v[8];
    _mm256_storeu_si256((__m256i *)(void *)v, packed);
    for (int k = 0; k < 8; k++)
        memcpy(out + 3 * k, &v[k], 3);
    return 1;
}
#endif

void stk__aug_affine(const struct stk__aug_image *img, const double inverse[6], int bilinear,
                     const uint8_t *fill)
{
    int w = img->width, h = img->height;
    memcpy(img->scratch, img->pixels, n_bytes(img));
    /* _gen_affine_grid in float32: the output pixel's center relative to
     * the image center, through theta / (w/2, h/2), then grid_sample's
     * unnormalisation ((g + 1) * size - 1) / 2. */
    float hw = 0.5f * (float)w, hh = 0.5f * (float)h;
    float t[6] = {(float)inverse[0] / hw, (float)inverse[1] / hw, (float)inverse[2] / hw,
                  (float)inverse[3] / hh, (float)inverse[4] / hh, (float)inverse[5] / hh};
#if HAVE_AVX2_KERNELS
    int vector = bilinear && fill == NULL && __builtin_cpu_supports("avx2");
#endif
    uint8_t *out = img->pixels;
    for (int y = 0; y < h; y++) {
        float yc = (float)y - hh + 0.5f;
        for (int x = 0; x < w; x++, out += 3) {
#if HAVE_AVX2_KERNELS
            if (vector && x + 8 <= w && bilinear8_avx2(img->scratch, w, h, t, hw, yc, x, out)) {
                x += 7;
                out += 21;
                continue;
            }
#endif
            float xc = (float)x - hw + 0.5f;
            float gx = xc * t[0] + yc * t[1] + t[2];
            float gy = xc * t[3] + yc * t[4] + t[5];
            float ix = ((gx + 1.0f) * (float)w - 1.0f) / 2.0f;
            float iy = ((gy + 1.0f) * (float)h - 1.0f) / 2.0f;
            if (bilinear)
                sample_bilinear(img->scratch, w, h, ix, iy, fill, out);
            else
                sample_nearest(img->scratch, w, h, ix, iy, fill, out);
        }
    }
}

/* Degrees of atan(shear), as _apply_op passes shear to F.affine. */
static double shear_degrees(double magnitude)
{
    return atan(magnitude) * 180 / PI;
}

void stk__aug_apply(const struct stk__aug_image *img, enum stk__aug_op op, double magnitude,
                    int bilinear, const uint8_t *fill)
{
    double m[6];
    /* F.affine's center=[0, 0] for the shears is the top-left corner:
     * (0 - w/2, 0 - h/2) from the image center. */
    double cx = -0.5 * img->width, cy = -0.5 * img->height;
    /* int() of the translation; bounded first so the cast is defined (a
     * shift of 1e9 pixels moves everything out as surely as 1e300 does) */
    double shift = trunc(fmax(-1e9, fmin(1e9, magnitude)));
    if (isnan(magnitude))
        shift = 0;
    switch (op) {
    case STK__OP_SHEAR_X:
        stk__aug_inverse_matrix(cx, cy, 0, 0, 0, 1, shear_degrees(magnitude), 0, m);
        stk__aug_affine(img, m, bilinear, fill);
        break;
    case STK__OP_SHEAR_Y:
        stk__aug_inverse_matrix(cx, cy, 0, 0, 0, 1, 0, shear_degrees(magnitude), m);
        stk__aug_affine(img, m, bilinear, fill);
        break;
    case STK__OP_TRANSLATE_X:
        stk__aug_inverse_matrix(0, 0, 0, shift, 0, 1, 0, 0, m);
        stk__aug_affine(img, m, bilinear, fill);
        break;
    case STK__OP_TRANSLATE_Y:
        stk__aug_inverse_matrix(0, 0, 0, 0, shift, 1, 0, 0, m);
        stk__aug_affine(img, m, bilinear, fill);
        break;
    case STK__OP_ROTATE: /* F.rotate passes -angle to the matrix */
        stk__aug_inverse_matrix(0, 0, -magnitude, 0, 0, 1, 0, 0, m);
        stk__aug_affine(img, m, bilinear, fill);
        break;
    case STK__OP_BRIGHTNESS: stk__aug_brightness(img, 1.0 + magnitude); break;
    case STK__OP_COLOR: stk__aug_saturation(img, 1.0 + magnitude); break;
    case STK__OP_CONTRAST: stk__aug_contrast(img, 1.0 + magnitude); break;
    case STK__OP_SHARPNESS: stk__aug_sharpness(img, 1.0 + magnitude); break;
    case STK__OP_POSTERIZE: posterize(img, magnitude); break;
    case STK__OP_SOLARIZE: solarize(img, magnitude); break;
    case STK__OP_AUTOCONTRAST: autocontrast(img); break;
    case STK__OP_EQUALIZE: equalize(img); break;
    case STK__OP_INVERT: invert(img); break;
    case STK__OP_HUE: stk__aug_hue(img, magnitude); break;
    case STK__OP_GRAYSCALE: stk__aug_grayscale(img); break;
    case STK__OP_BLUR:
    case STK__OP_IDENTITY:
    case STK__OP_COUNT: break;
    }
}
