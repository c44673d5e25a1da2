// The JPEG encoder hot path: camera YUV deinterleaved a few rows at a time into cache-sized
// stripes and handed to libjpeg's raw-data API (no colour conversion, no full-frame planes).
// libjpeg reports errors by longjmp, which Swift cannot catch, so every libjpeg call lives here.
#include "cv4l2_jpeg.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <jpeglib.h>
#include <jerror.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define CV4L2_ALIGN 64
#define ROUND_UP(x, a) (((x) + ((a) - 1)) / (a) * (a))

// A spilled allocation; the payload follows the header at CV4L2_ALIGN.
typedef struct spill_chunk { struct spill_chunk *next; } spill_chunk;

struct cv4l2_jpeg_encoder {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_destination_mgr dest;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX + 32];
    int created;
    uint64_t allocations;

    // libjpeg's own memory manager, used for the permanent pool.
    void *(*orig_alloc_small)(j_common_ptr, int, size_t);
    void *(*orig_alloc_large)(j_common_ptr, int, size_t);
    JSAMPARRAY (*orig_alloc_sarray)(j_common_ptr, int, JDIMENSION, JDIMENSION);
    JBLOCKARRAY (*orig_alloc_barray)(j_common_ptr, int, JDIMENSION, JDIMENSION);
    void (*orig_free_pool)(j_common_ptr, int);
    void (*orig_self_destruct)(j_common_ptr);

    // The image pool: libjpeg mallocs and frees its per-image state on every frame; this arena
    // keeps that memory. Overflow spills to malloc once, then the arena grows to fit.
    uint8_t *arena;
    size_t arena_cap, arena_used, spill_bytes;
    spill_chunk *spill;

    uint8_t *out;
    size_t out_cap;
    // The caller's buffer for one `cv4l2_jpeg_encode_into` call (NULL: the encoder's own).
    uint8_t *dst;
    size_t dst_cap;

    uint8_t *stripe;
    size_t stripe_cap;
    JSAMPROW rows[3][16];
    JSAMPROW scan_rows[16];
};

// MARK: memory

static void *aligned_malloc(struct cv4l2_jpeg_encoder *e, size_t size) {
    e->allocations++;
    void *p = NULL;
    if (posix_memalign(&p, CV4L2_ALIGN, size ? size : CV4L2_ALIGN) != 0) return NULL;
    return p;
}

static struct cv4l2_jpeg_encoder *encoder_of(j_common_ptr c) {
    return (struct cv4l2_jpeg_encoder *)c->client_data;
}

static void *arena_alloc(j_common_ptr c, size_t size) {
    struct cv4l2_jpeg_encoder *e = encoder_of(c);
    if (size > (size_t)1 << 40) ERREXIT1(c, JERR_OUT_OF_MEMORY, 1);
    size = ROUND_UP(size, CV4L2_ALIGN);
    if (e->arena && e->arena_used + size <= e->arena_cap) {
        void *p = e->arena + e->arena_used;
        e->arena_used += size;
        return p;
    }
    spill_chunk *chunk = aligned_malloc(e, CV4L2_ALIGN + size);
    if (!chunk) ERREXIT1(c, JERR_OUT_OF_MEMORY, 2);
    chunk->next = e->spill;
    e->spill = chunk;
    e->spill_bytes += size;
    return (uint8_t *)chunk + CV4L2_ALIGN;
}

static void arena_reset(struct cv4l2_jpeg_encoder *e) {
    if (e->spill) {
        // This frame needed more than the arena holds: make the arena big enough for next time.
        size_t need = e->arena_used + e->spill_bytes;
        while (e->spill) {
            spill_chunk *next = e->spill->next;
            free(e->spill);
            e->spill = next;
        }
        free(e->arena);
        e->arena_cap = need + need / 4;
        e->arena = aligned_malloc(e, e->arena_cap);
        if (!e->arena) e->arena_cap = 0;
    }
    e->arena_used = 0;
    e->spill_bytes = 0;
}

static void *my_alloc_small(j_common_ptr c, int pool, size_t size) {
    if (pool != JPOOL_IMAGE) return encoder_of(c)->orig_alloc_small(c, pool, size);
    return arena_alloc(c, size);
}

static void *my_alloc_large(j_common_ptr c, int pool, size_t size) {
    if (pool != JPOOL_IMAGE) return encoder_of(c)->orig_alloc_large(c, pool, size);
    return arena_alloc(c, size);
}

static JSAMPARRAY my_alloc_sarray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows) {
    if (pool != JPOOL_IMAGE) return encoder_of(c)->orig_alloc_sarray(c, pool, per_row, rows);
    // Rows aligned like libjpeg-turbo's own (its SIMD code expects 32-byte aligned rows).
    size_t row_bytes = ROUND_UP((size_t)per_row * sizeof(JSAMPLE), 32);
    JSAMPARRAY array = arena_alloc(c, (size_t)rows * sizeof(JSAMPROW));
    uint8_t *data = arena_alloc(c, row_bytes * rows);
    for (JDIMENSION i = 0; i < rows; i++) array[i] = (JSAMPROW)(data + row_bytes * i);
    return array;
}

static JBLOCKARRAY my_alloc_barray(j_common_ptr c, int pool, JDIMENSION per_row, JDIMENSION rows) {
    if (pool != JPOOL_IMAGE) return encoder_of(c)->orig_alloc_barray(c, pool, per_row, rows);
    size_t row_bytes = (size_t)per_row * sizeof(JBLOCK);
    JBLOCKARRAY array = arena_alloc(c, (size_t)rows * sizeof(JBLOCKROW));
    uint8_t *data = arena_alloc(c, row_bytes * rows);
    for (JDIMENSION i = 0; i < rows; i++) array[i] = (JBLOCKROW)(data + row_bytes * i);
    return array;
}

static void my_free_pool(j_common_ptr c, int pool) {
    struct cv4l2_jpeg_encoder *e = encoder_of(c);
    e->orig_free_pool(c, pool);
    if (pool == JPOOL_IMAGE) arena_reset(e);
}

static void my_self_destruct(j_common_ptr c) {
    struct cv4l2_jpeg_encoder *e = encoder_of(c);
    arena_reset(e);
    free(e->arena);
    e->arena = NULL;
    e->arena_cap = 0;
    e->orig_self_destruct(c);
}

// MARK: errors and destination

static void on_error_exit(j_common_ptr c) {
    struct cv4l2_jpeg_encoder *e = encoder_of(c);
    c->err->format_message(c, e->message);
    longjmp(e->jump, 1);
}

// Warnings and trace messages would go to stderr; a library keeps quiet.
static void on_output_message(j_common_ptr c) { (void)c; }

static void dest_init(j_compress_ptr c) {
    struct cv4l2_jpeg_encoder *e = encoder_of((j_common_ptr)c);
    c->dest->next_output_byte = e->dst ? e->dst : e->out;
    c->dest->free_in_buffer = e->dst ? e->dst_cap : e->out_cap;
}

// Only reached when the worst-case estimate was too small: grow and go on (a caller's buffer
// cannot grow: the encode fails).
static boolean dest_empty(j_compress_ptr c) {
    struct cv4l2_jpeg_encoder *e = encoder_of((j_common_ptr)c);
    if (e->dst) ERREXIT1(c, JERR_OUT_OF_MEMORY, 4);
    size_t old = e->out_cap;
    size_t cap = old < 65536 ? 65536 : old * 2;
    e->allocations++;
    uint8_t *p = realloc(e->out, cap);
    if (!p) ERREXIT1(c, JERR_OUT_OF_MEMORY, 3);
    e->out = p;
    e->out_cap = cap;
    c->dest->next_output_byte = p + old;
    c->dest->free_in_buffer = cap - old;
    return TRUE;
}

static void dest_term(j_compress_ptr c) { (void)c; }

cv4l2_jpeg_encoder *cv4l2_jpeg_encoder_create(void) {
    struct cv4l2_jpeg_encoder *e = calloc(1, sizeof *e);
    if (!e) return NULL;
    e->cinfo.err = jpeg_std_error(&e->jerr);
    e->jerr.error_exit = on_error_exit;
    e->jerr.output_message = on_output_message;
    e->cinfo.client_data = e;
    if (setjmp(e->jump)) {
        free(e);
        return NULL;
    }
    jpeg_create_compress(&e->cinfo);
    e->created = 1;
    struct jpeg_memory_mgr *m = e->cinfo.mem;
    e->orig_alloc_small = m->alloc_small;
    e->orig_alloc_large = m->alloc_large;
    e->orig_alloc_sarray = m->alloc_sarray;
    e->orig_alloc_barray = m->alloc_barray;
    e->orig_free_pool = m->free_pool;
    e->orig_self_destruct = m->self_destruct;
    m->alloc_small = my_alloc_small;
    m->alloc_large = my_alloc_large;
    m->alloc_sarray = my_alloc_sarray;
    m->alloc_barray = my_alloc_barray;
    m->free_pool = my_free_pool;
    m->self_destruct = my_self_destruct;
    e->dest.init_destination = dest_init;
    e->dest.empty_output_buffer = dest_empty;
    e->dest.term_destination = dest_term;
    return e;
}

void cv4l2_jpeg_encoder_destroy(cv4l2_jpeg_encoder *e) {
    if (!e) return;
    if (e->created) jpeg_destroy_compress(&e->cinfo);
    free(e->out);
    free(e->stripe);
    free(e);
}

const char *cv4l2_jpeg_encoder_message(const cv4l2_jpeg_encoder *e) { return e->message; }
size_t cv4l2_jpeg_encoder_output_capacity(const cv4l2_jpeg_encoder *e) { return e->out_cap; }
uint64_t cv4l2_jpeg_encoder_allocation_count(const cv4l2_jpeg_encoder *e) { return e->allocations; }

// MARK: range expansion (int16 arithmetic so the compiler vectorises it 8 or 16 lanes wide)

static inline uint8_t clamp255(int v) { return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

void cv4l2_expand_luma(uint8_t *p, size_t n) {
    // (y - 16) * 255/219 = d + d * 0.1644; 0.1644 * 256 = 42.09.
    for (size_t i = 0; i < n; i++) {
        int16_t d = (int16_t)(p[i] - 16);
        int16_t v = (int16_t)(d + ((d * 42 + 128) >> 8));
        p[i] = clamp255(v);
    }
}

void cv4l2_expand_chroma(uint8_t *p, size_t n) {
    // (c - 128) * 255/224 + 128 = 128 + d + d * 0.1384; 0.1384 * 512 = 70.9.
    for (size_t i = 0; i < n; i++) {
        int16_t d = (int16_t)(p[i] - 128);
        int16_t v = (int16_t)(128 + d + ((d * 71 + 256) >> 9));
        p[i] = clamp255(v);
    }
}

// MARK: deinterleave

// Packed 4:2:2 rows into Y, Cb, Cr, expanding limited range on the way. `luma_odd`: Y at odd
// bytes (UYVY, VYUY); `v_first`: Cr before Cb (YVYU, VYUY). Inlined with constant flags so each
// format gets its own loop; with SSE2 (every x86-64) 8 pixel pairs go per step.
static inline int expand_y_scalar(int v, int limited) {
    if (!limited) return v;
    int d = v - 16;
    return clamp255(d + ((d * 42 + 128) >> 8));
}

static inline int expand_c_scalar(int v, int limited) {
    if (!limited) return v;
    int d = v - 128;
    return clamp255(128 + d + ((d * 71 + 256) >> 9));
}

#ifdef __SSE2__
static inline __m128i expand_y16(__m128i y, int limited) {
    if (!limited) return y;
    __m128i d = _mm_sub_epi16(y, _mm_set1_epi16(16));
    __m128i t = _mm_srai_epi16(_mm_add_epi16(_mm_mullo_epi16(d, _mm_set1_epi16(42)), _mm_set1_epi16(128)), 8);
    return _mm_add_epi16(d, t);
}

static inline __m128i expand_c16(__m128i c, int limited) {
    if (!limited) return c;
    __m128i d = _mm_sub_epi16(c, _mm_set1_epi16(128));
    __m128i t = _mm_srai_epi16(_mm_add_epi16(_mm_mullo_epi16(d, _mm_set1_epi16(71)), _mm_set1_epi16(256)), 9);
    return _mm_add_epi16(_mm_add_epi16(d, t), _mm_set1_epi16(128));
}

// 16 bytes of alternating 16-bit chroma words (first, second, first...) into 8 + 8 bytes.
static inline void store_chroma(__m128i lo, __m128i hi, uint8_t *first, uint8_t *second) {
    const __m128i ff = _mm_set1_epi16(0xFF);
    __m128i c = _mm_packus_epi16(lo, hi);
    __m128i a = _mm_and_si128(c, ff), b = _mm_srli_epi16(c, 8);
    _mm_storel_epi64((__m128i *)first, _mm_packus_epi16(a, a));
    _mm_storel_epi64((__m128i *)second, _mm_packus_epi16(b, b));
}
#endif

static inline __attribute__((always_inline)) void
packed_rows(const uint8_t *restrict s0, const uint8_t *restrict s1, uint8_t *restrict ya,
            uint8_t *restrict yb, uint8_t *restrict cb, uint8_t *restrict cr, size_t pairs,
            const int luma_odd, const int v_first, const int limited) {
    // s1/yb non-NULL: two rows whose chroma is averaged (4:2:0 output).
    const int yo = luma_odd ? 1 : 0, co = luma_odd ? 0 : 1;
    uint8_t *c_first = v_first ? cr : cb, *c_second = v_first ? cb : cr;
    size_t i = 0;
#ifdef __SSE2__
    const __m128i ff = _mm_set1_epi16(0xFF);
    for (; i + 8 <= pairs; i += 8) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s0 + 4 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s0 + 4 * i + 16));
        __m128i y0 = luma_odd ? _mm_srli_epi16(a, 8) : _mm_and_si128(a, ff);
        __m128i y1 = luma_odd ? _mm_srli_epi16(b, 8) : _mm_and_si128(b, ff);
        _mm_storeu_si128((__m128i *)(ya + 2 * i),
                         _mm_packus_epi16(expand_y16(y0, limited), expand_y16(y1, limited)));
        if (s1) {
            __m128i a2 = _mm_loadu_si128((const __m128i *)(s1 + 4 * i));
            __m128i b2 = _mm_loadu_si128((const __m128i *)(s1 + 4 * i + 16));
            __m128i y2 = luma_odd ? _mm_srli_epi16(a2, 8) : _mm_and_si128(a2, ff);
            __m128i y3 = luma_odd ? _mm_srli_epi16(b2, 8) : _mm_and_si128(b2, ff);
            _mm_storeu_si128((__m128i *)(yb + 2 * i),
                             _mm_packus_epi16(expand_y16(y2, limited), expand_y16(y3, limited)));
            a = _mm_avg_epu8(a, a2); // rounds up, as the scalar tail does
            b = _mm_avg_epu8(b, b2);
        }
        __m128i c0 = luma_odd ? _mm_and_si128(a, ff) : _mm_srli_epi16(a, 8);
        __m128i c1 = luma_odd ? _mm_and_si128(b, ff) : _mm_srli_epi16(b, 8);
        store_chroma(expand_c16(c0, limited), expand_c16(c1, limited), c_first + i, c_second + i);
    }
#endif
    for (; i < pairs; i++) {
        const uint8_t *p = s0 + 4 * i;
        ya[2 * i] = (uint8_t)expand_y_scalar(p[yo], limited);
        ya[2 * i + 1] = (uint8_t)expand_y_scalar(p[yo + 2], limited);
        int f = p[co], g = p[co + 2];
        if (s1) {
            const uint8_t *q = s1 + 4 * i;
            yb[2 * i] = (uint8_t)expand_y_scalar(q[yo], limited);
            yb[2 * i + 1] = (uint8_t)expand_y_scalar(q[yo + 2], limited);
            f = (f + q[co] + 1) >> 1;
            g = (g + q[co + 2] + 1) >> 1;
        }
        c_first[i] = (uint8_t)expand_c_scalar(f, limited);
        c_second[i] = (uint8_t)expand_c_scalar(g, limited);
    }
}

typedef void (*packed_fn)(const uint8_t *, const uint8_t *, uint8_t *, uint8_t *, uint8_t *,
                          uint8_t *, size_t);

#define DEFINE_PACKED(NAME, ODD, VFIRST)                                                           \
    static void NAME##_full(const uint8_t *s0, const uint8_t *s1, uint8_t *ya, uint8_t *yb,        \
                            uint8_t *cb, uint8_t *cr, size_t n) {                                  \
        packed_rows(s0, s1, ya, yb, cb, cr, n, ODD, VFIRST, 0);                                    \
    }                                                                                              \
    static void NAME##_limited(const uint8_t *s0, const uint8_t *s1, uint8_t *ya, uint8_t *yb,     \
                               uint8_t *cb, uint8_t *cr, size_t n) {                               \
        packed_rows(s0, s1, ya, yb, cb, cr, n, ODD, VFIRST, 1);                                    \
    }

DEFINE_PACKED(packed_yuyv, 0, 0)
DEFINE_PACKED(packed_uyvy, 1, 0)
DEFINE_PACKED(packed_yvyu, 0, 1)
DEFINE_PACKED(packed_vyuy, 1, 1)

static packed_fn packed_kernel(const cv4l2_jpeg_image *im) {
    int odd = im->y0_offset == 1;
    int vfirst = im->cr_offset < im->cb_offset;
    int lim = im->limited_range != 0;
    if (!odd && !vfirst) return lim ? packed_yuyv_limited : packed_yuyv_full;
    if (odd && !vfirst) return lim ? packed_uyvy_limited : packed_uyvy_full;
    if (!odd && vfirst) return lim ? packed_yvyu_limited : packed_yvyu_full;
    return lim ? packed_vyuy_limited : packed_vyuy_full;
}

static void split_uv(const uint8_t *restrict s, uint8_t *restrict u, uint8_t *restrict v, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    const __m128i ff = _mm_set1_epi16(0xFF);
    for (; i + 16 <= n; i += 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s + 2 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s + 2 * i + 16));
        _mm_storeu_si128((__m128i *)(u + i), _mm_packus_epi16(_mm_and_si128(a, ff), _mm_and_si128(b, ff)));
        _mm_storeu_si128((__m128i *)(v + i), _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8)));
    }
#endif
    for (; i < n; i++) {
        u[i] = s[2 * i];
        v[i] = s[2 * i + 1];
    }
}

static void split_uv_2(const uint8_t *restrict s0, const uint8_t *restrict s1, uint8_t *restrict u,
                       uint8_t *restrict v, size_t n) {
    for (size_t i = 0; i < n; i++) {
        u[i] = (uint8_t)((s0[2 * i] + s1[2 * i] + 1) >> 1);
        v[i] = (uint8_t)((s0[2 * i + 1] + s1[2 * i + 1] + 1) >> 1);
    }
}

static void average_rows(const uint8_t *restrict a, const uint8_t *restrict b, uint8_t *restrict d,
                         size_t n) {
    for (size_t i = 0; i < n; i++) d[i] = (uint8_t)((a[i] + b[i] + 1) >> 1);
}

// Doubles a half-width chroma row in place (4:4:4 output from 4:2:x input).
static void widen_row(uint8_t *row, size_t out_width) {
    for (size_t x = out_width; x-- > 0;) row[x] = row[x / 2];
}

static void pad_row(uint8_t *row, size_t width, size_t padded) {
    if (width == 0 || padded <= width) return;
    memset(row + width, row[width - 1], padded - width);
}

struct geometry {
    int subsampling;
    int lines;           // rows of Y per iMCU row
    int chroma_lines;    // rows of chroma per iMCU row (8)
    size_t width, height;
    size_t y_stride, c_stride;
    size_t c_width_src;  // chroma samples per row in the source: ceil(width / 2)
    size_t c_width_out;  // chroma samples per row written to libjpeg
    size_t c_height_src; // chroma rows in the source
};

static inline size_t clamp_row(size_t r, size_t count) { return r < count ? r : count - 1; }

// Chroma rows (planar or semi-planar) for output chroma row `k`.
static void chroma_rows(const cv4l2_jpeg_image *im, const struct geometry *g, size_t k,
                        size_t *first, size_t *second) {
    int out_vshift = g->subsampling == CV4L2_JPEG_S420;
    if (im->chroma_vshift == out_vshift) {
        *first = *second = clamp_row(k, g->c_height_src);
    } else if (out_vshift) { // 4:2:2 source, 4:2:0 output: average two rows
        *first = clamp_row(2 * k, g->c_height_src);
        *second = clamp_row(2 * k + 1, g->c_height_src);
    } else { // 4:2:0 source, 4:2:2 or 4:4:4 output: repeat rows
        *first = *second = clamp_row(k / 2, g->c_height_src);
    }
}

static void fill_stripe(struct cv4l2_jpeg_encoder *e, const cv4l2_jpeg_image *im,
                        const struct geometry *g, size_t row0) {
    const size_t w = g->width, h = g->height;
    const int grey_out = g->subsampling == CV4L2_JPEG_SGREY;
    const int out420 = g->subsampling == CV4L2_JPEG_S420;
    const size_t cw = g->c_width_src;
    JSAMPROW *Y = e->rows[0], *CB = e->rows[1], *CR = e->rows[2];

    if (im->layout == CV4L2_JPEG_PACKED422) {
        // The Swift side only describes the four YUYV-family orders (Y0/Y1 two bytes apart).
        packed_fn kernel = packed_kernel(im);
        if (out420) {
            for (int k = 0; k < g->chroma_lines; k++) {
                const uint8_t *s0 = im->plane0 + im->stride0 * clamp_row(row0 + 2 * k, h);
                const uint8_t *s1 = im->plane0 + im->stride0 * clamp_row(row0 + 2 * k + 1, h);
                kernel(s0, s1, Y[2 * k], Y[2 * k + 1], CB[k], CR[k], cw);
            }
        } else {
            // Grey output still deinterleaves chroma, into the spare row after the stripes.
            for (int r = 0; r < g->lines; r++) {
                const uint8_t *s = im->plane0 + im->stride0 * clamp_row(row0 + r, h);
                uint8_t *cb = grey_out ? e->rows[1][8] : CB[r], *cr = grey_out ? e->rows[2][8] : CR[r];
                kernel(s, NULL, Y[r], NULL, cb, cr, cw);
            }
        }
    } else {
        // Luma rows straight from plane 0.
        for (int r = 0; r < g->lines; r++)
            memcpy(Y[r], im->plane0 + im->stride0 * clamp_row(row0 + r, h), w);
        if (!grey_out && im->layout != CV4L2_JPEG_GREY) {
            size_t c_row0 = row0 / (size_t)(out420 ? 2 : 1);
            for (int k = 0; k < g->chroma_lines; k++) {
                size_t a, b;
                chroma_rows(im, g, c_row0 + (size_t)k, &a, &b);
                if (im->layout == CV4L2_JPEG_SEMIPLANAR) {
                    const uint8_t *sa = im->plane1 + im->stride1 * a;
                    const uint8_t *sb = im->plane1 + im->stride1 * b;
                    uint8_t *u = im->cb_offset == 0 ? CB[k] : CR[k];
                    uint8_t *v = im->cb_offset == 0 ? CR[k] : CB[k];
                    if (a == b) split_uv(sa, u, v, cw);
                    else split_uv_2(sa, sb, u, v, cw);
                } else {
                    const uint8_t *ua = im->plane1 + im->stride1 * a, *ub = im->plane1 + im->stride1 * b;
                    const uint8_t *va = im->plane2 + im->stride2 * a, *vb = im->plane2 + im->stride2 * b;
                    if (a == b) {
                        memcpy(CB[k], ua, cw);
                        memcpy(CR[k], va, cw);
                    } else {
                        average_rows(ua, ub, CB[k], cw);
                        average_rows(va, vb, CR[k], cw);
                    }
                }
            }
        }
    }

    // GREY sources are treated as full range unless the caller says otherwise, like YUV.
    // Packed kernels expanded the range already.
    const int expand = im->limited_range && im->layout != CV4L2_JPEG_PACKED422;
    for (int r = 0; r < g->lines; r++) {
        if (expand) cv4l2_expand_luma(Y[r], w);
        pad_row(Y[r], w, g->y_stride);
    }
    if (grey_out) return;
    for (int k = 0; k < g->chroma_lines; k++) {
        if (im->layout == CV4L2_JPEG_GREY) {
            // Grey input with colour output: neutral chroma.
            memset(CB[k], 128, g->c_stride);
            memset(CR[k], 128, g->c_stride);
            continue;
        }
        if (expand) {
            cv4l2_expand_chroma(CB[k], cw);
            cv4l2_expand_chroma(CR[k], cw);
        }
        if (g->c_width_out > cw) {
            widen_row(CB[k], g->c_width_out);
            widen_row(CR[k], g->c_width_out);
        }
        pad_row(CB[k], g->c_width_out, g->c_stride);
        pad_row(CR[k], g->c_width_out, g->c_stride);
    }
}

// Lays out Y rows, then Cb and Cr rows (plus one scratch row each) in one aligned block.
static int prepare_stripes(struct cv4l2_jpeg_encoder *e, struct geometry *g) {
    int chroma_rows_alloc = g->chroma_lines + 1;
    size_t need = g->y_stride * (size_t)g->lines + 2 * g->c_stride * (size_t)chroma_rows_alloc;
    if (need > e->stripe_cap) {
        free(e->stripe);
        e->stripe = aligned_malloc(e, need);
        e->stripe_cap = e->stripe ? need : 0;
        if (!e->stripe) return -1;
    }
    uint8_t *p = e->stripe;
    for (int r = 0; r < g->lines; r++, p += g->y_stride) e->rows[0][r] = p;
    for (int k = 0; k < chroma_rows_alloc; k++, p += g->c_stride) e->rows[1][k] = p;
    for (int k = 0; k < chroma_rows_alloc; k++, p += g->c_stride) e->rows[2][k] = p;
    return 0;
}

static int fail(struct cv4l2_jpeg_encoder *e, const char *message) {
    snprintf(e->message, sizeof e->message, "%s", message);
    return -1;
}

size_t cv4l2_jpeg_bound(int width, int height, int subsampling, size_t app1_len) {
    if (width <= 0 || height <= 0 || width > JPEG_MAX_DIMENSION || height > JPEG_MAX_DIMENSION) return 0;
    if (subsampling < CV4L2_JPEG_S444 || subsampling > CV4L2_JPEG_SGREY) return 0;
    unsigned long worst = tjBufSize(width, height, subsampling);
    if (worst == (unsigned long)-1) return 0;
    return (size_t)worst + app1_len + 4096;
}

static int encode(cv4l2_jpeg_encoder *e, const cv4l2_jpeg_image *im, int quality, int subsampling,
                  const void *app1, size_t app1_len, int write_jfif, const uint8_t **out, size_t *out_len);

int cv4l2_jpeg_encode(cv4l2_jpeg_encoder *e, const cv4l2_jpeg_image *im, int quality,
                      int subsampling, const void *app1, size_t app1_len, int write_jfif,
                      const uint8_t **out, size_t *out_len) {
    e->dst = NULL;
    e->dst_cap = 0;
    return encode(e, im, quality, subsampling, app1, app1_len, write_jfif, out, out_len);
}

int cv4l2_jpeg_encode_into(cv4l2_jpeg_encoder *e, const cv4l2_jpeg_image *im, int quality,
                           int subsampling, const void *app1, size_t app1_len, int write_jfif,
                           uint8_t *dst, size_t dst_cap, size_t *out_len) {
    e->message[0] = 0;
    if (!dst || dst_cap < cv4l2_jpeg_bound(im->width, im->height, subsampling, app1_len))
        return fail(e, "output buffer smaller than cv4l2_jpeg_bound");
    e->dst = dst;
    e->dst_cap = dst_cap;
    const uint8_t *out = NULL;
    int status = encode(e, im, quality, subsampling, app1, app1_len, write_jfif, &out, out_len);
    e->dst = NULL;
    e->dst_cap = 0;
    return status;
}

static int encode(cv4l2_jpeg_encoder *e, const cv4l2_jpeg_image *im, int quality, int subsampling,
                  const void *app1, size_t app1_len, int write_jfif, const uint8_t **out, size_t *out_len) {
    e->message[0] = 0;
    if (im->width <= 0 || im->height <= 0 || im->width > JPEG_MAX_DIMENSION ||
        im->height > JPEG_MAX_DIMENSION)
        return fail(e, "image size out of JPEG range");
    if (subsampling < CV4L2_JPEG_S444 || subsampling > CV4L2_JPEG_SGREY)
        return fail(e, "unknown subsampling");
    if (app1_len > 65533) return fail(e, "APP1 segment too long");
    const int raw = im->layout <= CV4L2_JPEG_GREY;

    // The output buffer is sized for the worst case once, so that encoding never reallocates.
    unsigned long worst = tjBufSize(im->width, im->height, subsampling);
    if (worst == (unsigned long)-1) return fail(e, "image size out of JPEG range");
    size_t need = (size_t)worst + app1_len + 4096;
    if (!e->dst && need > e->out_cap) {
        e->allocations++;
        uint8_t *p = realloc(e->out, need);
        if (!p) return fail(e, "out of memory for the JPEG output buffer");
        e->out = p;
        e->out_cap = need;
    }

    struct geometry g = {0};
    g.subsampling = subsampling;
    g.width = (size_t)im->width;
    g.height = (size_t)im->height;
    g.lines = subsampling == CV4L2_JPEG_S420 ? 16 : 8;
    g.chroma_lines = 8;
    g.c_width_src = (g.width + 1) / 2;
    g.c_width_out = subsampling == CV4L2_JPEG_S444 ? g.width : g.c_width_src;
    g.c_height_src = im->chroma_vshift ? (g.height + 1) / 2 : g.height;
    g.y_stride = ROUND_UP(g.width, CV4L2_ALIGN);
    // 4:4:4 widening writes up to `width` samples into the chroma rows.
    g.c_stride = ROUND_UP(g.width, CV4L2_ALIGN);
    if (raw && prepare_stripes(e, &g) != 0) return fail(e, "out of memory for stripe buffers");

    j_compress_ptr c = &e->cinfo;
    if (setjmp(e->jump)) {
        jpeg_abort_compress(c);
        return -1;
    }
    c->image_width = (JDIMENSION)im->width;
    c->image_height = (JDIMENSION)im->height;
    switch (im->layout) {
    case CV4L2_JPEG_GREY:
        c->input_components = 1;
        c->in_color_space = JCS_GRAYSCALE;
        break;
    case CV4L2_JPEG_RGB24:
        c->input_components = 3;
        c->in_color_space = JCS_EXT_RGB;
        break;
    case CV4L2_JPEG_BGR24:
        c->input_components = 3;
        c->in_color_space = JCS_EXT_BGR;
        break;
    case CV4L2_JPEG_BGRX32:
        c->input_components = 4;
        c->in_color_space = JCS_EXT_BGRX;
        break;
    default:
        c->input_components = 3;
        c->in_color_space = JCS_YCbCr;
    }
    jpeg_set_defaults(c);
    if (subsampling == CV4L2_JPEG_SGREY) jpeg_set_colorspace(c, JCS_GRAYSCALE);
    else if (im->layout == CV4L2_JPEG_GREY) {
        // Grey source written as colour: raw data supplies all three components.
        c->input_components = 3;
        c->in_color_space = JCS_YCbCr;
        jpeg_set_colorspace(c, JCS_YCbCr);
    }
    jpeg_set_quality(c, quality, TRUE);
    c->dct_method = JDCT_ISLOW;
    if (subsampling != CV4L2_JPEG_SGREY) {
        c->comp_info[0].h_samp_factor = subsampling == CV4L2_JPEG_S444 ? 1 : 2;
        c->comp_info[0].v_samp_factor = subsampling == CV4L2_JPEG_S420 ? 2 : 1;
        for (int i = 1; i < 3; i++) c->comp_info[i].h_samp_factor = c->comp_info[i].v_samp_factor = 1;
    }
    c->raw_data_in = raw ? TRUE : FALSE;
    c->write_JFIF_header = write_jfif ? TRUE : FALSE;
    c->dest = &e->dest;
    jpeg_start_compress(c, TRUE);
    if (app1 && app1_len) jpeg_write_marker(c, JPEG_APP0 + 1, app1, (unsigned int)app1_len);

    if (raw) {
        // Grey sources with colour output re-use the Y layout; fill_stripe writes neutral chroma.
        JSAMPARRAY planes[3] = {e->rows[0], e->rows[1], e->rows[2]};
        for (size_t row0 = 0; row0 < g.height; row0 += (size_t)g.lines) {
            fill_stripe(e, im, &g, row0);
            jpeg_write_raw_data(c, planes, (JDIMENSION)g.lines);
        }
    } else {
        while (c->next_scanline < c->image_height) {
            JDIMENSION n = c->image_height - c->next_scanline;
            if (n > 16) n = 16;
            for (JDIMENSION i = 0; i < n; i++)
                e->scan_rows[i] = (JSAMPROW)(im->plane0 + im->stride0 * (c->next_scanline + i));
            jpeg_write_scanlines(c, e->scan_rows, n);
        }
    }
    jpeg_finish_compress(c);
    *out = e->dst ? e->dst : e->out;
    *out_len = (e->dst ? e->dst_cap : e->out_cap) - e->dest.free_in_buffer;
    return 0;
}

// MARK: YUV to BGRA (colour conversion for callers who ask for BGRA), BT.601 in 8.8 fixed point.

static inline __attribute__((always_inline)) void
yuv_to_bgra(const uint8_t *restrict y, const size_t ys, const uint8_t *restrict u,
            const uint8_t *restrict v, const size_t cs, size_t width, int limited,
            uint8_t *restrict o) {
    const int cy = limited ? 298 : 256, yoff = limited ? 16 : 0;
    const int crv = limited ? 409 : 359, cgu = limited ? 100 : 88, cgv = limited ? 208 : 183;
    const int cbu = limited ? 516 : 454;
    for (size_t x = 0; x < width; x += 2) {
        int du = u[(x >> 1) * cs] - 128, dv = v[(x >> 1) * cs] - 128;
        int r = crv * dv + 128, g = -cgu * du - cgv * dv + 128, b = cbu * du + 128;
        int c0 = (y[x * ys] - yoff) * cy;
        o[4 * x] = clamp255((c0 + b) >> 8);
        o[4 * x + 1] = clamp255((c0 + g) >> 8);
        o[4 * x + 2] = clamp255((c0 + r) >> 8);
        o[4 * x + 3] = 255;
        if (x + 1 < width) {
            int c1 = (y[(x + 1) * ys] - yoff) * cy;
            o[4 * x + 4] = clamp255((c1 + b) >> 8);
            o[4 * x + 5] = clamp255((c1 + g) >> 8);
            o[4 * x + 6] = clamp255((c1 + r) >> 8);
            o[4 * x + 7] = 255;
        }
    }
}

void cv4l2_yuv_to_bgra_row(const uint8_t *y, size_t y_step, const uint8_t *u, const uint8_t *v,
                           size_t c_step, size_t width, int limited, uint8_t *out) {
    // Constant steps let the compiler specialise the common layouts.
    if (y_step == 2 && c_step == 4) yuv_to_bgra(y, 2, u, v, 4, width, limited, out);
    else if (y_step == 1 && c_step == 2) yuv_to_bgra(y, 1, u, v, 2, width, limited, out);
    else if (y_step == 1 && c_step == 1) yuv_to_bgra(y, 1, u, v, 1, width, limited, out);
    else yuv_to_bgra(y, y_step, u, v, c_step, width, limited, out);
}
