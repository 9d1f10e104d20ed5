/* SPDX-License-Identifier: MIT */
/*
 * resize.c - Pillow's antialiased bilinear and bicubic resize of RGB8 images.
 *
 * ALGORITHM (Pillow, src/libImaging/Resample.c; the convolution-based
 * resampling of Pillow 4+, unchanged through 9.x): a separable filter,
 * horizontal pass first, then vertical. For each output index i along an
 * axis, the source centre is in0 + (i + 0.5) * scale with scale =
 * (in1 - in0) / out; the filter's support (1 for the bilinear triangle, 2
 * for Keys' cubic with a = -0.5, Pillow's BICUBIC) is scaled by
 * max(scale, 1), which is what makes downscaling antialiased. Weights are
 * computed in double, normalised to sum 1, then rounded to fixed point with
 * 22 fractional bits (32 - 8 - 2: room for 8-bit values and two bits of
 * headroom), accumulated in int32 starting from one half and clipped to
 * uint8. The intermediate image between the passes is uint8 too (clipped:
 * the cubic's negative lobes overshoot). Integer
 * sums do not depend on their order, so as long as every weight and every
 * rounding matches Pillow's, the result is bit-exact whatever the loop
 * structure.
 *
 * To get the same weights we reproduce Pillow's double arithmetic
 * literally: the box arrives as C floats and in1 - in0 is a float
 * subtraction; the window ends are truncated with (int)(x + 0.5); the tap
 * offset is ((x + xmin) - center + 0.5) * (1 / filterscale); weights are
 * divided by their sum before the rounding to fixed point. (gcc compiles
 * ISO C11 with -ffp-contract=off, so no fused multiply-add changes a
 * rounding.)
 *
 * SPEED: Pillow runs the horizontal pass over every source row the vertical
 * pass needs and keeps the whole intermediate image. Here the horizontal
 * rows live in a ring of ksize rows that the vertical pass fills on demand,
 * so the intermediate stays in L1/L2. Each horizontal window is padded to
 * ksize taps, the widest window's (zero weights, slid inside the image at
 * the edges) so that tap loops have a fixed trip count; the portable kernel
 * is specialised for the usual counts (2 to 8: downscaling up to 3.5x), and gcc
 * vectorises the portable vertical pass. That is as far as auto-
 * vectorisation goes: gcc does not vectorise the horizontal gather, and
 * plain x86-64 (SSE2, the default target) has no 32-bit vector multiply.
 * So on x86-64 CPUs with AVX2 (checked at run time) two kernels written
 * with intrinsics do the work: the horizontal one takes four taps of one
 * output per step with vpmaddwd, splitting the 22-bit weights into two
 * 11-bit halves so that 16-bit multiplies stay exact; the vertical one
 * keeps the sums of 32 bytes in registers across all taps. They are 2-3x
 * faster than the portable kernels, which already beat Pillow 9.4.
 * An axis whose box is integer and as long as the output is a copy (Pillow
 * crops too; such an axis also resamples to the identity), and coefficient
 * tables are reused while the geometry repeats.
 */
#include "image/resize.h"

#include <stdbool.h>
#include <string.h>

#include "base/alloc.h"
#include "stoker.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_AVX2_KERNELS 1
#include <immintrin.h>
/* compiled for AVX2 whatever the build's target; called only after the
 * run-time check */
#define TARGET_AVX2 __attribute__((target("avx2")))
#else
#define HAVE_AVX2_KERNELS 0
#endif

#define PRECISION_BITS (32 - 8 - 2)
#define HALF ((int32_t)1 << (PRECISION_BITS - 1))

/* A scratch buffer: contents are discarded whenever it grows. */
struct buf {
    void *p;
    size_t bytes;
};

/* The coefficient table of one axis. */
struct axis {
    struct buf k;      /* int32_t: out_size rows of ksize fixed-point weights */
    struct buf bounds; /* int32_t: per output, first source index and tap count */
    /* int16_t, for the AVX2 horizontal kernel: per output, one group per 4
     * taps, each two 16-lane vectors holding the weights' high and low 11
     * bits (k = hi * 2^11 + lo) as {h0 h1 h0 h1 h0 h1 0 0 | h2 h3 h2 h3 h2
     * h3 0 0}, then the same for lo, matching the pixels of the taps
     * shuffled to {R0 R1 G0 G1 B0 B1 0 0 | R2 R3 G2 G3 B2 B3 0 0}. */
    struct buf kx;
    size_t ksize;
    bool padded;   /* every window is ksize taps inside the image */
    bool negative; /* some weight is below 0 (the cubic's lobes) */
    /* the geometry the table holds, if valid */
    bool valid;
    size_t in_size, out_size;
    float in0, in1;
    bool pad, flip, simd;
    enum stk__resize_filter filter;
};

struct stk__resize_scratch {
    struct axis h, v;
    struct buf ring;     /* uint8_t: horizontal rows, a ring of `slots` rows */
    struct buf ring_row; /* size_t: the source row each slot holds, or SIZE_MAX */
    struct buf rows;     /* const uint8_t *: the source rows of one vertical window */
    struct buf acc;      /* uint32_t: vertical accumulators, one per byte of a row */
    struct buf line;     /* uint8_t: the output row handed to a sink */
    size_t total;        /* bytes held by all buffers, at most the cap */
    bool simd;           /* use the AVX2 kernels */
    enum stk__resize_filter filter;
};

static bool cpu_has_avx2(void)
{
#if HAVE_AVX2_KERNELS
    return __builtin_cpu_supports("avx2");
#else
    return false;
#endif
}

struct stk__resize_scratch *stk__resize_scratch_new(void)
{
    struct stk__resize_scratch *s = stk__calloc(1, sizeof *s);
    if (s != NULL)
        s->simd = cpu_has_avx2();
    return s;
}

void stk__resize_scratch_free(struct stk__resize_scratch *s)
{
    if (s == NULL)
        return;
    struct buf *bufs[] = {&s->h.k,  &s->h.bounds, &s->h.kx, &s->v.k, &s->v.bounds, &s->v.kx,
                          &s->ring, &s->ring_row, &s->rows, &s->acc, &s->line};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        stk__free(bufs[i]->p);
    stk__free(s);
}

int stk__resize_scratch_set_simd(struct stk__resize_scratch *s, int enable)
{
    s->simd = enable && cpu_has_avx2();
    return s->simd;
}

void stk__resize_scratch_set_filter(struct stk__resize_scratch *s, enum stk__resize_filter filter)
{
    s->filter = filter;
}

double stk__resize_filter_support(enum stk__resize_filter filter)
{
    return filter == STK__RESIZE_BICUBIC ? 2.0 : 1.0;
}

/*
 * Make b at least need bytes, discarding its contents. Grows by half again
 * at least, so that varying geometries settle after a few calls, but never
 * past the scratch cap.
 */
static int grow(struct stk__resize_scratch *s, struct buf *b, size_t need)
{
    if (need <= b->bytes)
        return 0;
    const size_t room = STK__RESIZE_SCRATCH_CAP - (s->total - b->bytes);
    if (need > room)
        return STK_ENOMEM;
    size_t want = b->bytes + b->bytes / 2;
    if (want < need)
        want = need;
    if (want > room)
        want = room;
    void *p = stk__malloc(want);
    if (p == NULL)
        return STK_ENOMEM;
    stk__free(b->p);
    s->total += want - b->bytes;
    b->p = p;
    b->bytes = want;
    return 0;
}

/* Pillow's bilinear (triangle) filter, support 1. */
static inline double triangle(double x)
{
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* Pillow's bicubic filter, support 2: Keys' cubic convolution with
 * a = -0.5, the same expressions in the same order so that every double
 * rounds as Pillow's does. */
static inline double cubic(double x)
{
    const double a = -0.5;
    if (x < 0.0)
        x = -x;
    if (x < 1.0)
        return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0)
        return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

static inline double filter_at(enum stk__resize_filter f, double x)
{
    return f == STK__RESIZE_BICUBIC ? cubic(x) : triangle(x);
}

/* The window of the output centred at center: its first source index in
 * *first and its tap count. The ends are truncated toward zero, as Pillow
 * rounds them, and clamped to the image. */
static inline int window(double center, double support, int in_size, int *first)
{
    int xmin = (int)(center - support + 0.5);
    if (xmin < 0)
        xmin = 0;
    int xmax = (int)(center + support + 0.5);
    if (xmax > in_size)
        xmax = in_size;
    *first = xmin;
    return xmax - xmin;
}

/* A normalised weight as fixed point, rounded half away from zero. */
static inline int32_t to_fixed(double w)
{
    double scaled = w * (double)(1 << PRECISION_BITS);
    return (int32_t)(w < 0 ? scaled - 0.5 : scaled + 0.5);
}

/* Bytes of one group of 4 taps in struct axis' kx. */
#define KX_QUAD_BYTES (2 * 16 * sizeof(int16_t))

/* The kx groups of one output from its ksize weights (see struct axis).
 * Weights lie between -2^21 and 2^23 (the cubic's normalised weights
 * between -0.5 and 2), so an arithmetic shift and a mask split them into a
 * signed high half and a low half of 11 bits that fit in int16, with
 * k = hi * 2^11 + lo. */
static void kx_build(uint8_t *kx, const int32_t *k, size_t ksize)
{
    for (size_t q = 0; q < ksize; q += 4, kx += KX_QUAD_BYTES) {
        int16_t lanes[2][16] = {{0}};
        for (size_t j = 0; j < 4 && q + j < ksize; j++) {
            const int16_t hi = (int16_t)(k[q + j] >> 11), lo = (int16_t)(k[q + j] & 2047);
            /* tap j sits in half j / 2, position j % 2 of each channel pair */
            for (size_t c = 0; c < 3; c++) {
                lanes[0][(j / 2) * 8 + 2 * c + j % 2] = hi;
                lanes[1][(j / 2) * 8 + 2 * c + j % 2] = lo;
            }
        }
        memcpy(kx, lanes, sizeof lanes);
    }
}

/*
 * Compute the weights of one axis: out_size outputs from the span in0..in1
 * of in_size source samples (Pillow's precompute_coeffs followed by
 * normalize_coeffs_8bpc). pad: widen each window to ksize taps inside the
 * image where it fits, for the fixed-trip-count kernels, and with simd also
 * build the AVX2 table. flip: store the table mirrored, so output i takes
 * the weights of output out_size-1-i.
 */
static int axis_build(struct stk__resize_scratch *s, struct axis *a, size_t in_size, float in0,
                      float in1, size_t out_size, bool pad, bool flip)
{
    const bool simd = pad && s->simd;
    const enum stk__resize_filter f = s->filter;
    if (a->valid && a->in_size == in_size && a->out_size == out_size && a->in0 == in0 &&
        a->in1 == in1 && a->pad == pad && a->flip == flip && a->simd == simd && a->filter == f)
        return 0;
    a->valid = false;

    /* The span is a float subtraction in Pillow: keep it one. */
    const float span = in1 - in0;
    const double scale = (double)span / (double)out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = stk__resize_filter_support(f) * filterscale;
    const double inv = 1.0 / filterscale;
    const int isize = (int)in_size;
    /* Pillow sizes its table by ceil(support) * 2 + 1 taps, but a window
     * holds at most about 2 * support + 1 of them (4 where that bound is 5,
     * at scales just above 1: the usual train crop). The fixed-trip-count
     * kernels run every window at the table's width, zero weights included,
     * so the table is as wide as the widest window really is: at scale
     * 1.25 one group of four taps per output instead of two for the AVX2
     * kernel, 1.8x faster for the horizontal pass. Zero weights add
     * nothing, so the bytes are the same. */
    size_t ksize = 1;
    for (size_t i = 0; i < out_size; i++) {
        int xmin;
        const int taps = window(in0 + ((double)i + 0.5) * scale, support, isize, &xmin);
        if ((size_t)taps > ksize)
            ksize = (size_t)taps;
    }
    const size_t quads = (ksize + 3) / 4;
    if (ksize > STK__RESIZE_SCRATCH_CAP / sizeof(int32_t) / out_size ||
        (simd && quads > STK__RESIZE_SCRATCH_CAP / KX_QUAD_BYTES / out_size))
        return STK_ENOMEM;
    int rc = grow(s, &a->k, out_size * ksize * sizeof(int32_t));
    if (rc == 0)
        rc = grow(s, &a->bounds, out_size * 2 * sizeof(int32_t));
    if (rc == 0 && simd)
        rc = grow(s, &a->kx, out_size * quads * KX_QUAD_BYTES);
    if (rc < 0)
        return rc;
    int32_t *const kk = a->k.p;
    int32_t *const bounds = a->bounds.p;

    const bool fits = pad && in_size >= ksize;
    bool negative = false;
    for (size_t i = 0; i < out_size; i++) {
        const double center = in0 + ((double)i + 0.5) * scale;
        int xmin;
        const int xmax = window(center, support, isize, &xmin); /* the tap count */

        double ww = 0.0;
        for (int x = 0; x < xmax; x++)
            ww += filter_at(f, ((double)(x + xmin) - center + 0.5) * inv);

        /* In a padded table a window that would run past the end slides
         * left; its real taps move right by `off` and zeros fill in front. */
        int first = xmin, off = 0, taps = xmax;
        if (fits) {
            if ((size_t)xmin + ksize > in_size) {
                first = isize - (int)ksize;
                off = xmin - first;
            }
            taps = (int)ksize;
        }
        const size_t slot = flip ? out_size - 1 - i : i;
        int32_t *k = kk + slot * ksize;
        memset(k, 0, ksize * sizeof *k);
        /* Recomputing each weight gives the same double as the first loop,
         * which saves Pillow's double buffer of ksize entries. */
        for (int x = 0; x < xmax; x++) {
            double w = filter_at(f, ((double)(x + xmin) - center + 0.5) * inv);
            if (ww != 0.0)
                w /= ww;
            k[off + x] = to_fixed(w);
            negative |= k[off + x] < 0;
        }
        bounds[2 * slot + 0] = first;
        bounds[2 * slot + 1] = taps;
        if (simd)
            kx_build((uint8_t *)a->kx.p + slot * quads * KX_QUAD_BYTES, k, ksize);
    }
    a->ksize = ksize;
    a->padded = fits;
    a->negative = negative;
    a->filter = f;
    a->in_size = in_size;
    a->out_size = out_size;
    a->in0 = in0;
    a->in1 = in1;
    a->pad = pad;
    a->flip = flip;
    a->simd = simd;
    a->valid = true;
    return 0;
}

/*
 * Pillow's clip8: the accumulator's integer part, saturated to 0..255.
 * Accumulators are unsigned here so that no geometry can make them
 * overflow as signed integers; they hold the sum modulo 2^32. With
 * bilinear weights (never negative) a sum is below 256 * (2^22 + taps / 2),
 * under 2^31 unless a window has millions of taps (where Pillow's int32
 * overflows too); the cubic's sums lie between -2^31 and 2^31 as well
 * (its weights' absolute values sum to at most 1.5 * 2^22), and a negative
 * sum, 2^31 or more here, clips to 0 as in Pillow.
 */
static inline uint8_t clip8(uint32_t acc)
{
    if (acc >= (uint32_t)1 << 31) /* negative in Pillow's int32 */
        return 0;
    acc >>= PRECISION_BITS;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* One output pixel from taps weights k over the pixels at p, none of them
 * negative. */
static inline void hpixel(const uint8_t *restrict p, const int32_t *restrict k, size_t taps,
                          uint8_t *restrict out)
{
    /* Red and blue share one 64-bit multiply, in 32-bit lanes: weights are
     * never negative and a sum stays below 2^31 (see clip8), so no lane
     * carries into the other. */
    uint64_t rb = (uint64_t)HALF << 32 | (uint64_t)HALF;
    uint32_t g = HALF;
    for (size_t t = 0; t < taps; t++) {
        const uint64_t w = (uint32_t)k[t];
        rb += ((uint64_t)p[3 * t + 2] << 32 | p[3 * t]) * w;
        g += p[3 * t + 1] * (uint32_t)k[t];
    }
    out[0] = clip8((uint32_t)rb);
    out[1] = clip8(g);
    out[2] = clip8((uint32_t)(rb >> 32));
}

/* hpixel for weights of either sign: a negative weight would borrow across
 * hpixel's shared lanes, so each channel has its own sum. */
static inline void hpixel_signed(const uint8_t *restrict p, const int32_t *restrict k, size_t taps,
                                 uint8_t *restrict out)
{
    uint32_t r = HALF, g = HALF, b = HALF;
    for (size_t t = 0; t < taps; t++) {
        const uint32_t w = (uint32_t)k[t];
        r += p[3 * t] * w;
        g += p[3 * t + 1] * w;
        b += p[3 * t + 2] * w;
    }
    out[0] = clip8(r);
    out[1] = clip8(g);
    out[2] = clip8(b);
}

/* One output pixel of axis a, by the sum its weights allow. */
static inline void hpixel_axis(const struct axis *a, const uint8_t *restrict p,
                               const int32_t *restrict k, size_t taps, uint8_t *restrict out)
{
    if (a->negative)
        hpixel_signed(p, k, taps, out);
    else
        hpixel(p, k, taps, out);
}

/* One horizontal row, every window ksize taps; inlined with a constant
 * ksize, the tap loop unrolls completely. */
static inline void hrow_fixed(const uint8_t *restrict src, uint8_t *restrict out,
                              const struct axis *a, size_t n, size_t ksize)
{
    const int32_t *k = a->k.p;
    const int32_t *bounds = a->bounds.p;
    for (size_t i = 0; i < n; i++)
        hpixel(src + (size_t)bounds[2 * i] * 3, k + i * ksize, ksize, out + 3 * i);
}

/* One horizontal row with a tap count per output (images narrower than a
 * window, and the portable kernel for weights of either sign). */
static void hrow_var(const uint8_t *restrict src, uint8_t *restrict out, const struct axis *a,
                     size_t n)
{
    const int32_t *k = a->k.p;
    const int32_t *bounds = a->bounds.p;
    for (size_t i = 0; i < n; i++)
        hpixel_axis(a, src + (size_t)bounds[2 * i] * 3, k + i * a->ksize,
                    (size_t)bounds[2 * i + 1], out + 3 * i);
}

#if HAVE_AVX2_KERNELS
/*
 * The AVX2 horizontal kernel, four taps per step with vpmaddwd, which
 * multiplies 16 pairs of int16 and adds each pair: the pixels of the taps as
 * int16 against each weight's high and low 11 bits (see struct axis, kx).
 * Sums are exact modulo 2^32 and the true sum fits in int32, so
 * recombining hi * 2^11 + lo gives Pillow's accumulator exactly. The
 * 16-byte loads read up to 4 pixels past the window (weight 0) and 4 bytes
 * more, so windows that close to the row's end, where the source may end,
 * take the scalar path.
 */

/* One output's sums, lanes {R G B 0 | R G B 0} to be added half to half. */
static inline TARGET_AVX2 __m256i hsum_avx2(const uint8_t *p, const uint8_t *kx, size_t quads)
{
    /* bytes of pixels 0,1 to the low half and 2,3 to the high, as int16
     * pairs R R G G B B 0 0 (-1: zero) */
    const __m256i spread =
        _mm256_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1, 6, -1, 9, -1, 7,
                         -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
    __m256i hi = _mm256_setzero_si256(), lo = hi;
    for (size_t q = 0; q < quads; q++) {
        const __m256i px = _mm256_shuffle_epi8(
            _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(p + 12 * q))), spread);
        const __m256i *w = (const __m256i *)(kx + q * KX_QUAD_BYTES);
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(px, _mm256_loadu_si256(w)));
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(px, _mm256_loadu_si256(w + 1)));
    }
    return _mm256_add_epi32(_mm256_slli_epi32(hi, 11), lo);
}

/* Round, shift out the fraction and saturate to bytes (the two packs are
 * clip8): lanes 0..3 of v become bytes 0..3. */
static inline TARGET_AVX2 __m128i clip8_avx2(__m128i v, __m128i half)
{
    v = _mm_srai_epi32(_mm_add_epi32(v, half), PRECISION_BITS);
    return _mm_packus_epi16(_mm_packus_epi32(v, v), v);
}

/* One output pixel: the vector sum where the loads stay inside the row,
 * else the scalar one. */
static inline TARGET_AVX2 void hpixel_avx2(const uint8_t *src, size_t first, const struct axis *a,
                                           size_t i, size_t last_fast, uint8_t *out)
{
    const size_t ksize = a->ksize, quads = (ksize + 3) / 4;
    if (first > last_fast) {
        hpixel_axis(a, src + 3 * first, (const int32_t *)a->k.p + i * ksize, ksize, out);
        return;
    }
    const __m256i sum =
        hsum_avx2(src + 3 * first, (const uint8_t *)a->kx.p + i * quads * KX_QUAD_BYTES, quads);
    const __m128i v =
        clip8_avx2(_mm_add_epi32(_mm256_castsi256_si128(sum), _mm256_extracti128_si256(sum, 1)),
                   _mm_set1_epi32(HALF));
    const uint32_t rgb = (uint32_t)_mm_cvtsi128_si32(v);
    memcpy(out, &rgb, 3);
}

static inline __attribute__((always_inline)) TARGET_AVX2 void
hrow_avx2_quads(const uint8_t *restrict src, uint8_t *restrict out, const struct axis *a, size_t n,
                size_t quads)
{
    const uint8_t *kx = a->kx.p;
    const int32_t *bounds = a->bounds.p;
    const size_t stride = quads * KX_QUAD_BYTES;
    /* the last window start whose loads stay in the row (hpass ensures
     * in_size >= ksize + 6 >= 4 * quads + 2) */
    const size_t last_fast = a->in_size - 2 - 4 * quads;
    const __m256i half = _mm256_set1_epi32(HALF);
    /* after the packs, 32-bit groups hold pixels 0 2 0 2 | 1 3 1 3 */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m128i squeeze = _mm_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
    size_t i = 0;
    /* Four outputs at a time share the folding, packing and one store. */
    for (; i + 4 <= n; i += 4) {
        const size_t f0 = (size_t)bounds[2 * i], f1 = (size_t)bounds[2 * i + 2],
                     f2 = (size_t)bounds[2 * i + 4], f3 = (size_t)bounds[2 * i + 6];
        if (f0 > last_fast || f1 > last_fast || f2 > last_fast || f3 > last_fast) {
            for (size_t j = i; j < i + 4; j++)
                hpixel_avx2(src, (size_t)bounds[2 * j], a, j, last_fast, out + 3 * j);
            continue;
        }
        const uint8_t *kq = kx + i * stride;
        const __m256i s0 = hsum_avx2(src + 3 * f0, kq, quads);
        const __m256i s1 = hsum_avx2(src + 3 * f1, kq + stride, quads);
        const __m256i s2 = hsum_avx2(src + 3 * f2, kq + 2 * stride, quads);
        const __m256i s3 = hsum_avx2(src + 3 * f3, kq + 3 * stride, quads);
        /* {s0 folded | s1 folded} and {s2 folded | s3 folded} */
        __m256i s01 = _mm256_add_epi32(_mm256_permute2x128_si256(s0, s1, 0x20),
                                       _mm256_permute2x128_si256(s0, s1, 0x31));
        __m256i s23 = _mm256_add_epi32(_mm256_permute2x128_si256(s2, s3, 0x20),
                                       _mm256_permute2x128_si256(s2, s3, 0x31));
        s01 = _mm256_srai_epi32(_mm256_add_epi32(s01, half), PRECISION_BITS);
        s23 = _mm256_srai_epi32(_mm256_add_epi32(s23, half), PRECISION_BITS);
        __m256i b = _mm256_packus_epi32(s01, s23);
        b = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(b, b), order);
        const __m128i rgb = _mm_shuffle_epi8(_mm256_castsi256_si128(b), squeeze);
        _mm_storel_epi64((__m128i *)(out + 3 * i), rgb);
        const uint32_t last = (uint32_t)_mm_extract_epi32(rgb, 2);
        memcpy(out + 3 * i + 8, &last, 4);
    }
    for (; i < n; i++)
        hpixel_avx2(src, (size_t)bounds[2 * i], a, i, last_fast, out + 3 * i);
}

/* hrow_avx2_quads with the usual group counts constant, so that the tap
 * loops unroll: one group (up to 4 taps, crops up to 1.5x the output) is
 * most train crops; the loop kept around it cost 1.4x. */
static TARGET_AVX2 void hrow_avx2(const uint8_t *restrict src, uint8_t *restrict out,
                                  const struct axis *a, size_t n)
{
    switch ((a->ksize + 3) / 4) {
    case 1: hrow_avx2_quads(src, out, a, n, 1); break;
    case 2: hrow_avx2_quads(src, out, a, n, 2); break;
    default: hrow_avx2_quads(src, out, a, n, (a->ksize + 3) / 4); break;
    }
}
#endif

enum hmode { H_COPY, H_MIRROR, H_RESAMPLE };

/* The horizontal pass of one source row into n output pixels. */
static void hpass(enum hmode mode, const struct axis *a, const uint8_t *restrict src, size_t x0,
                  uint8_t *restrict out, size_t n)
{
    switch (mode) {
    case H_COPY:
        memcpy(out, src + x0 * 3, n * 3);
        return;
    case H_MIRROR:
        src += x0 * 3;
        for (size_t i = 0; i < n; i++)
            memcpy(out + 3 * i, src + 3 * (n - 1 - i), 3);
        return;
    case H_RESAMPLE:
        break;
    }
#if HAVE_AVX2_KERNELS
    if (a->padded && a->simd && a->in_size >= a->ksize + 6) {
        hrow_avx2(src, out, a, n);
        return;
    }
#endif
    if (!a->padded || a->negative) {
        hrow_var(src, out, a, n);
        return;
    }
    switch (a->ksize) {
    case 2:
        hrow_fixed(src, out, a, n, 2);
        break;
    case 3:
        hrow_fixed(src, out, a, n, 3);
        break;
    case 4:
        hrow_fixed(src, out, a, n, 4);
        break;
    case 5:
        hrow_fixed(src, out, a, n, 5);
        break;
    case 6:
        hrow_fixed(src, out, a, n, 6);
        break;
    case 7:
        hrow_fixed(src, out, a, n, 7);
        break;
    case 8:
        hrow_fixed(src, out, a, n, 8);
        break;
    default:
        hrow_fixed(src, out, a, n, a->ksize);
        break;
    }
}

/* One vertical output row: a weighted sum of count rows of len bytes. Each
 * loop runs along the row, so gcc vectorises it. */
static void vpass(const uint8_t *const *rows, const int32_t *restrict k, size_t count,
                  uint8_t *restrict out, size_t len, uint32_t *restrict acc)
{
    for (size_t i = 0; i < len; i++)
        acc[i] = HALF;
    for (size_t t = 0; t < count; t++) {
        const uint8_t *restrict row = rows[t];
        const uint32_t w = (uint32_t)k[t];
        for (size_t i = 0; i < len; i++)
            acc[i] += row[i] * w;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = clip8(acc[i]);
}

#if HAVE_AVX2_KERNELS
/* vpass for AVX2: 32 bytes at a time, the four sums of 8 in registers
 * across all taps; the tail of the row goes through the scalar sum. */
static TARGET_AVX2 void vpass_avx2(const uint8_t *const *rows, const int32_t *restrict k,
                                   size_t count, uint8_t *restrict out, size_t len)
{
    /* packus works within 128-bit halves; this puts the bytes in order. */
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    size_t i = 0;
    for (; i + 32 <= len; i += 32) {
        __m256i a0 = _mm256_set1_epi32(HALF), a1 = a0, a2 = a0, a3 = a0;
        for (size_t t = 0; t < count; t++) {
            const uint8_t *r = rows[t] + i;
            const __m256i w = _mm256_set1_epi32(k[t]);
#define TAP(acc, off)                                                                              \
    acc = _mm256_add_epi32(                                                                        \
        acc,                                                                                       \
        _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(r + off))), w))
            TAP(a0, 0);
            TAP(a1, 8);
            TAP(a2, 16);
            TAP(a3, 24);
#undef TAP
        }
        a0 = _mm256_srai_epi32(a0, PRECISION_BITS);
        a1 = _mm256_srai_epi32(a1, PRECISION_BITS);
        a2 = _mm256_srai_epi32(a2, PRECISION_BITS);
        a3 = _mm256_srai_epi32(a3, PRECISION_BITS);
        const __m256i bytes =
            _mm256_packus_epi16(_mm256_packus_epi32(a0, a1), _mm256_packus_epi32(a2, a3));
        _mm256_storeu_si256((__m256i *)(out + i), _mm256_permutevar8x32_epi32(bytes, order));
    }
    for (; i < len; i++) {
        uint32_t acc = HALF;
        for (size_t t = 0; t < count; t++)
            acc += rows[t][i] * (uint32_t)k[t];
        out[i] = clip8(acc);
    }
}
#endif

/* Pillow's test for a crop: an integer start and exactly out_size long. */
static bool axis_is_copy(float in0, float in1, size_t out_size)
{
    return in0 == (float)(int)in0 && in1 - in0 == (float)out_size;
}

/* Box coordinates as Pillow takes them: 0 <= lo < hi <= size, as floats. */
static bool box_ok(double lo, double hi, size_t size, float *flo, float *fhi)
{
    /* Checked in double first: out-of-range float conversions are undefined. */
    if (!(lo >= 0.0 && hi <= (double)size && lo < hi))
        return false;
    *flo = (float)lo;
    *fhi = (float)hi;
    return *flo < *fhi;
}

/* Hand output row y, just written at out, to the sink if there is one. */
static inline void emit(const struct stk__resize_sink *sink, size_t y, const uint8_t *out)
{
    if (sink != NULL)
        sink->row(sink->ctx, y, out);
}

/* stk__resize_rgb8 and stk__resize_rgb8_rows, arguments checked: rows go
 * to dst (dst_stride apart), and each is then handed to sink if not NULL;
 * the rows version passes a one-row dst with dst_stride 0. */
static int resample(const struct stk__rgb8_view *from, const float box[4],
                    const struct stk__rgb8_image *to, int flip, const struct stk__resize_sink *sink,
                    struct stk__resize_scratch *s)
{
    const uint8_t *src = from->pixels;
    const size_t src_w = from->width, src_h = from->height, src_stride = from->stride;
    const float fx0 = box[0], fy0 = box[1], fx1 = box[2], fy1 = box[3];
    uint8_t *dst = to->pixels;
    const size_t dst_w = to->width, dst_h = to->height, dst_stride = to->stride;
    const size_t row_bytes = dst_w * 3;
    enum hmode hm = H_RESAMPLE;
    size_t hx = 0;
    if (axis_is_copy(fx0, fx1, dst_w)) {
        hm = flip ? H_MIRROR : H_COPY;
        hx = (size_t)fx0;
    }
    int rc = 0;
    if (hm == H_RESAMPLE) {
        rc = axis_build(s, &s->h, src_w, fx0, fx1, dst_w, true, flip != 0);
        if (rc < 0)
            return rc;
    }

    if (axis_is_copy(fy0, fy1, dst_h)) {
        /* Rows map one to one: the horizontal pass writes dst directly. */
        const uint8_t *row = src + (size_t)fy0 * src_stride;
        for (size_t y = 0; y < dst_h; y++, row += src_stride) {
            hpass(hm, &s->h, row, hx, dst + y * dst_stride, dst_w);
            emit(sink, y, dst + y * dst_stride);
        }
        return 0;
    }

    rc = axis_build(s, &s->v, src_h, fy0, fy1, dst_h, false, false);
    if (rc < 0)
        return rc;
    const struct axis *v = &s->v;
    /* A window spans at most ksize rows, and never more than the image. */
    const size_t slots = v->ksize < src_h ? v->ksize : src_h;
    rc = grow(s, &s->rows, slots * sizeof(const uint8_t *));
    if (rc == 0 && !s->simd)
        rc = grow(s, &s->acc, row_bytes * sizeof(uint32_t));
    if (rc == 0 && hm != H_COPY) {
        if (row_bytes > STK__RESIZE_SCRATCH_CAP / slots)
            rc = STK_ENOMEM;
        if (rc == 0)
            rc = grow(s, &s->ring, slots * row_bytes);
        if (rc == 0)
            rc = grow(s, &s->ring_row, slots * sizeof(size_t));
    }
    if (rc < 0)
        return rc;
    const uint8_t **rows = s->rows.p;
    uint8_t *ring = s->ring.p;
    size_t *ring_row = s->ring_row.p;
    if (hm != H_COPY) {
        for (size_t i = 0; i < slots; i++)
            ring_row[i] = SIZE_MAX;
    }

    const int32_t *vk = v->k.p;
    const int32_t *vbounds = v->bounds.p;
    for (size_t y = 0; y < dst_h; y++) {
        const size_t first = (size_t)vbounds[2 * y];
        const size_t count = (size_t)vbounds[2 * y + 1];
        for (size_t t = 0; t < count; t++) {
            const size_t sy = first + t;
            const uint8_t *row = src + sy * src_stride;
            if (hm == H_COPY) {
                rows[t] = row + hx * 3;
                continue;
            }
            /* The window is count <= slots consecutive rows, so they occupy
             * distinct slots; each row is computed once while the windows
             * advance down the image. */
            const size_t slot = sy % slots;
            uint8_t *hrow = ring + slot * row_bytes;
            if (ring_row[slot] != sy) {
                hpass(hm, &s->h, row, hx, hrow, dst_w);
                ring_row[slot] = sy;
            }
            rows[t] = hrow;
        }
        uint8_t *out = dst + y * dst_stride;
#if HAVE_AVX2_KERNELS
        if (s->simd)
            vpass_avx2(rows, vk + y * v->ksize, count, out, row_bytes);
        else
#endif
            vpass(rows, vk + y * v->ksize, count, out, row_bytes, s->acc.p);
        emit(sink, y, out);
    }
    return 0;
}

/* Checks shared by both entry points; the box as Pillow's floats. */
static int check_args(const struct stk__rgb8_view *from, const struct stk__box *b, size_t dst_w,
                      size_t dst_h, const struct stk__resize_scratch *s, float box[4])
{
    if (from == NULL || from->pixels == NULL || b == NULL || s == NULL)
        return STK_EINVAL;
    const size_t src_w = from->width, src_h = from->height, src_stride = from->stride;
    const double x0 = b->x0, y0 = b->y0, x1 = b->x1, y1 = b->y1;
    if (src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0 || src_w > STK__RESIZE_MAX_DIM ||
        src_h > STK__RESIZE_MAX_DIM || dst_w > STK__RESIZE_MAX_DIM || dst_h > STK__RESIZE_MAX_DIM)
        return STK_EINVAL;
    if (src_stride < src_w * 3)
        return STK_EINVAL;
    if (!box_ok(x0, x1, src_w, &box[0], &box[2]) || !box_ok(y0, y1, src_h, &box[1], &box[3]))
        return STK_EINVAL;
    return 0;
}

int stk__resize_rgb8(const struct stk__rgb8_view *src, const struct stk__box *box,
                     const struct stk__rgb8_image *dst, int flip,
                     struct stk__resize_scratch *scratch)
{
    if (dst == NULL)
        return STK_EINVAL;
    float b[4];
    int rc = check_args(src, box, dst->width, dst->height, scratch, b);
    if (rc < 0)
        return rc;
    if (dst->pixels == NULL || dst->stride < dst->width * 3)
        return STK_EINVAL;
    return resample(src, b, dst, flip, NULL, scratch);
}

int stk__resize_rgb8_rows(const struct stk__rgb8_view *src, const struct stk__box *box,
                          size_t dst_w, size_t dst_h, int flip, const struct stk__resize_sink *sink,
                          struct stk__resize_scratch *scratch)
{
    float b[4];
    int rc = check_args(src, box, dst_w, dst_h, scratch, b);
    if (rc < 0)
        return rc;
    if (sink == NULL || sink->row == NULL)
        return STK_EINVAL;
    struct stk__resize_scratch *s = scratch;
    rc = grow(s, &s->line, dst_w * 3);
    if (rc < 0)
        return rc;
    /* One row of output in the scratch, written over for each row. */
    const struct stk__rgb8_image line = {s->line.p, dst_w, dst_h, 0};
    return resample(src, b, &line, flip, sink, s);
}
