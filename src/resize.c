/*
 * resize.c - Pillow's antialiased bilinear resize of RGB8 images.
 *
 * ALGORITHM (Pillow, src/libImaging/Resample.c; the convolution-based
 * resampling of Pillow 4+, unchanged through 9.x): a separable filter,
 * horizontal pass first, then vertical. For each output index i along an
 * axis, the source centre is in0 + (i + 0.5) * scale with scale =
 * (in1 - in0) / out; the triangle filter's support is scaled by
 * max(scale, 1), which is what makes downscaling antialiased. Weights are
 * computed in double, normalised to sum 1, then rounded to fixed point with
 * 22 fractional bits (32 - 8 - 2: room for 8-bit values and two bits of
 * headroom), accumulated in int32 starting from one half and clipped to
 * uint8. The intermediate image between the passes is uint8 too, so every
 * rounding step below matches Pillow's and the result is bit-exact.
 *
 * To stay exact we reproduce Pillow's arithmetic literally where it matters:
 * the box arrives as C floats and in1 - in0 is a float subtraction; the
 * window ends are truncated with (int)(x + 0.5); the tap offset is
 * ((x + xmin) - center + 0.5) * (1 / filterscale); weights are divided by
 * their sum before the rounding to fixed point. (gcc compiles ISO C11 with
 * -ffp-contract=off, so no fused multiply-add changes a rounding.)
 *
 * SPEED: Pillow runs the horizontal pass over every source row the vertical
 * pass needs and keeps the whole intermediate image. Here the horizontal
 * rows live in a ring of ksize rows that the vertical pass fills on demand,
 * so the intermediate stays in L1/L2. The horizontal kernel is specialised
 * for the usual tap counts (3 when upscaling, 5/7/9 for downscaling by up to
 * 4x): each window is padded to ksize taps (zero weights, moved inside the
 * image at the edges) so the tap loop has a constant trip count. The
 * vertical pass is a multiply-add of whole rows by one weight, which gcc
 * vectorises. An axis whose box is integer and as long as the output is a
 * copy (Pillow does the same: such an axis resamples to the identity), and
 * a coefficient table is reused while the geometry repeats.
 */
#include "resize.h"

#include <stdbool.h>
#include <string.h>

#include "alloc.h"
#include "stoker.h"

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
    size_t ksize;
    bool padded; /* every window is ksize taps inside the image */
    /* the geometry the table holds, if valid */
    bool valid;
    size_t in_size, out_size;
    float in0, in1;
    bool pad, flip;
};

struct stk__resize_scratch {
    struct axis h, v;
    struct buf ring;     /* uint8_t: horizontal rows, a ring of slots rows */
    struct buf ring_row; /* size_t: the source row each slot holds, or SIZE_MAX */
    struct buf rows;     /* const uint8_t *: the source rows of one vertical window */
    struct buf acc;      /* int32_t: vertical accumulators, one per byte of a row */
    size_t total;        /* bytes held by all buffers, at most the cap */
};

struct stk__resize_scratch *stk__resize_scratch_new(void) {
    return stk__calloc(1, sizeof(struct stk__resize_scratch));
}

void stk__resize_scratch_free(struct stk__resize_scratch *s) {
    if (s == NULL)
        return;
    stk__free(s->h.k.p);
    stk__free(s->h.bounds.p);
    stk__free(s->v.k.p);
    stk__free(s->v.bounds.p);
    stk__free(s->ring.p);
    stk__free(s->ring_row.p);
    stk__free(s->rows.p);
    stk__free(s->acc.p);
    stk__free(s);
}

/*
 * Make b at least need bytes, discarding its contents. Grows by half again
 * at least, so that varying geometries settle after a few calls, but never
 * past the scratch cap.
 */
static int grow(struct stk__resize_scratch *s, struct buf *b, size_t need) {
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
static inline double triangle(double x) {
    if (x < 0.0)
        x = -x;
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* A normalised weight as fixed point, rounded half away from zero. */
static inline int32_t to_fixed(double w) {
    double scaled = w * (double)(1 << PRECISION_BITS);
    return (int32_t)(w < 0 ? scaled - 0.5 : scaled + 0.5);
}

/*
 * Compute the weights of one axis: out_size outputs from the span in0..in1
 * of in_size source samples (Pillow's precompute_coeffs followed by
 * normalize_coeffs_8bpc). pad: widen each window to ksize taps inside the
 * image where it fits, for the fixed-trip-count kernels. flip: store the
 * table mirrored, so output i takes the weights of output out_size-1-i.
 */
static int axis_build(struct stk__resize_scratch *s, struct axis *a, size_t in_size, float in0,
                      float in1, size_t out_size, bool pad, bool flip) {
    if (a->valid && a->in_size == in_size && a->out_size == out_size && a->in0 == in0 &&
        a->in1 == in1 && a->pad == pad && a->flip == flip)
        return 0;
    a->valid = false;

    /* The span is a float subtraction in Pillow: keep it one. */
    const float span = in1 - in0;
    const double scale = (double)span / (double)out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 1.0 * filterscale;
    const double inv = 1.0 / filterscale;
    /* ceil(support) without libm; 1 <= support <= 2^24, so ksize fits
     * easily (the table may not). */
    size_t ceil_support = (size_t)support;
    if ((double)ceil_support < support)
        ceil_support++;
    const size_t ksize = ceil_support * 2 + 1;
    if (ksize > STK__RESIZE_SCRATCH_CAP / sizeof(int32_t) / out_size)
        return STK_ENOMEM;
    int rc = grow(s, &a->k, out_size * ksize * sizeof(int32_t));
    if (rc == 0)
        rc = grow(s, &a->bounds, out_size * 2 * sizeof(int32_t));
    if (rc < 0)
        return rc;
    int32_t *const kk = a->k.p;
    int32_t *const bounds = a->bounds.p;

    const int isize = (int)in_size;
    const bool fits = pad && in_size >= ksize;
    for (size_t i = 0; i < out_size; i++) {
        const double center = in0 + ((double)i + 0.5) * scale;
        /* Window ends truncated toward zero, as Pillow rounds them. */
        int xmin = (int)(center - support + 0.5);
        if (xmin < 0)
            xmin = 0;
        int xmax = (int)(center + support + 0.5);
        if (xmax > isize)
            xmax = isize;
        xmax -= xmin; /* now the tap count */

        double ww = 0.0;
        for (int x = 0; x < xmax; x++)
            ww += triangle(((double)(x + xmin) - center + 0.5) * inv);

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
            double w = triangle(((double)(x + xmin) - center + 0.5) * inv);
            if (ww != 0.0)
                w /= ww;
            k[off + x] = to_fixed(w);
        }
        bounds[2 * slot + 0] = first;
        bounds[2 * slot + 1] = taps;
    }
    a->ksize = ksize;
    a->padded = fits;
    a->in_size = in_size;
    a->out_size = out_size;
    a->in0 = in0;
    a->in1 = in1;
    a->pad = pad;
    a->flip = flip;
    a->valid = true;
    return 0;
}

/* Pillow's clip8: the accumulator's integer part, saturated to 0..255. */
static inline uint8_t clip8(int32_t acc) {
    if (acc < 0)
        return 0;
    acc >>= PRECISION_BITS;
    return acc > 255 ? 255 : (uint8_t)acc;
}

/* One horizontal row with ksize taps per output; inlined with a constant
 * ksize, the tap loop unrolls completely. */
typedef int32_t v4i32 __attribute__((vector_size(16)));
typedef uint8_t v4u8 __attribute__((vector_size(4)));

static inline void hrow_fixed(const uint8_t *restrict src, uint8_t *restrict out,
                              const struct axis *a, size_t n, size_t ksize, size_t safe_end)
{
    const int32_t *k = a->k.p;
    const int32_t *bounds = a->bounds.p;
    for (size_t i = 0; i < n; i++, k += ksize) {
        const size_t first = (size_t)bounds[2 * i];
        const uint8_t *p = src + first * 3;
        if (first + ksize <= safe_end) {
            v4i32 acc = {HALF, HALF, HALF, HALF};
            for (size_t t = 0; t < ksize; t++) {
                v4u8 px;
                memcpy(&px, p + 3 * t, 4);
                acc += __builtin_convertvector(px, v4i32) * k[t];
            }
            out[3 * i + 0] = clip8(acc[0]);
            out[3 * i + 1] = clip8(acc[1]);
            out[3 * i + 2] = clip8(acc[2]);
            continue;
        }
        int32_t r = HALF, g = HALF, b = HALF;
        for (size_t t = 0; t < ksize; t++) {
            r += p[3 * t + 0] * k[t];
            g += p[3 * t + 1] * k[t];
            b += p[3 * t + 2] * k[t];
        }
        out[3 * i + 0] = clip8(r);
        out[3 * i + 1] = clip8(g);
        out[3 * i + 2] = clip8(b);
    }
}

/* One horizontal row with a tap count per output (images narrower than a
 * window). */
static void hrow_var(const uint8_t *restrict src, uint8_t *restrict out, const struct axis *a,
                     size_t n) {
    const int32_t *k = a->k.p;
    const int32_t *bounds = a->bounds.p;
    for (size_t i = 0; i < n; i++, k += a->ksize) {
        const uint8_t *p = src + (size_t)bounds[2 * i] * 3;
        const int32_t taps = bounds[2 * i + 1];
        int32_t r = HALF, g = HALF, b = HALF;
        for (int32_t t = 0; t < taps; t++) {
            r += p[3 * t + 0] * k[t];
            g += p[3 * t + 1] * k[t];
            b += p[3 * t + 2] * k[t];
        }
        out[3 * i + 0] = clip8(r);
        out[3 * i + 1] = clip8(g);
        out[3 * i + 2] = clip8(b);
    }
}

enum hmode { H_COPY, H_MIRROR, H_RESAMPLE };

/* The horizontal pass of one source row into n output pixels. */
static void hpass(enum hmode mode, const struct axis *a, const uint8_t *restrict src, size_t x0,
                  uint8_t *restrict out, size_t n) {
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
    if (!a->padded) {
        hrow_var(src, out, a, n);
        return;
    }
    switch (a->ksize) {
    case 3:
        hrow_fixed(src, out, a, n, 3, a->in_size - 1);
        break;
    case 5:
        hrow_fixed(src, out, a, n, 5, a->in_size - 1);
        break;
    case 7:
        hrow_fixed(src, out, a, n, 7, a->in_size - 1);
        break;
    case 9:
        hrow_fixed(src, out, a, n, 9, a->in_size - 1);
        break;
    default:
        hrow_fixed(src, out, a, n, a->ksize, a->in_size - 1);
        break;
    }
}

/* One vertical output row: a weighted sum of count rows of len bytes. Each
 * loop runs along the row, so gcc vectorises it. */
static void vpass(const uint8_t *const *rows, const int32_t *restrict k, size_t count,
                  uint8_t *restrict out, size_t len, int32_t *restrict acc) {
    for (size_t i = 0; i < len; i++)
        acc[i] = HALF;
    for (size_t t = 0; t < count; t++) {
        const uint8_t *restrict row = rows[t];
        const int32_t w = k[t];
        for (size_t i = 0; i < len; i++)
            acc[i] += row[i] * w;
    }
    for (size_t i = 0; i < len; i++)
        out[i] = clip8(acc[i]);
}

/* Pillow's test for a crop: an integer start and exactly out_size long. */
static bool axis_is_copy(float in0, float in1, size_t out_size) {
    return in0 == (float)(int)in0 && in1 - in0 == (float)out_size;
}

/* Box coordinates as Pillow takes them: 0 <= lo < hi <= size, as floats. */
static bool box_ok(double lo, double hi, size_t size, float *flo, float *fhi) {
    /* Checked in double first: out-of-range float conversions are undefined. */
    if (!(lo >= 0.0 && hi <= (double)size && lo < hi))
        return false;
    *flo = (float)lo;
    *fhi = (float)hi;
    return *flo < *fhi;
}

int stk__resize_rgb8(const uint8_t *src, size_t src_w, size_t src_h, size_t src_stride, double x0,
                     double y0, double x1, double y1, uint8_t *dst, size_t dst_w, size_t dst_h,
                     size_t dst_stride, int flip, struct stk__resize_scratch *scratch) {
    struct stk__resize_scratch *s = scratch;
    if (src == NULL || dst == NULL || s == NULL)
        return STK_EINVAL;
    if (src_w == 0 || src_h == 0 || dst_w == 0 || dst_h == 0 || src_w > STK__RESIZE_MAX_DIM ||
        src_h > STK__RESIZE_MAX_DIM || dst_w > STK__RESIZE_MAX_DIM || dst_h > STK__RESIZE_MAX_DIM)
        return STK_EINVAL;
    if (src_stride < src_w * 3 || dst_stride < dst_w * 3)
        return STK_EINVAL;
    float fx0, fx1, fy0, fy1;
    if (!box_ok(x0, x1, src_w, &fx0, &fx1) || !box_ok(y0, y1, src_h, &fy0, &fy1))
        return STK_EINVAL;

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
        for (size_t y = 0; y < dst_h; y++, row += src_stride)
            hpass(hm, &s->h, row, hx, dst + y * dst_stride, dst_w);
        return 0;
    }

    rc = axis_build(s, &s->v, src_h, fy0, fy1, dst_h, false, false);
    if (rc < 0)
        return rc;
    const struct axis *v = &s->v;
    /* A window spans at most ksize rows, and never more than the image. */
    const size_t slots = v->ksize < src_h ? v->ksize : src_h;
    rc = grow(s, &s->rows, slots * sizeof(const uint8_t *));
    if (rc == 0)
        rc = grow(s, &s->acc, row_bytes * sizeof(int32_t));
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
        vpass(rows, vk + y * v->ksize, count, dst + y * dst_stride, row_bytes, s->acc.p);
    }
    return 0;
}
