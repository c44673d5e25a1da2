// The ceiling: the fastest direct use of libjpeg-turbo on packed YUYV frames, with no library
// around it. Same work as swift-capture's encoder (limited-range expansion, 4:2:2 or 4:2:0,
// ISLOW DCT, no optimised Huffman tables), so output bytes are comparable.
//
//   ceiling FILE WIDTH HEIGHT QUALITY SUBSAMP(422|420) ROUTE(raw|yuvplanes) [SECONDS]
//
// raw:       8 (4:2:2) or 16 (4:2:0) rows at a time deinterleaved into stripes that stay in cache,
//            handed to jpeg_write_raw_data (libjpeg API).
// yuvplanes: the whole frame deinterleaved into planes, then tjCompressFromYUVPlanes (TurboJPEG).
// Prints one line: route fps ms_per_frame bytes_per_frame wall_fps best_fps, where fps and ms are
// per core (thread CPU time, median of repeated passes), wall_fps is the median wall-clock rate and
// best_fps the fastest pass (on a busy machine other load only ever adds time).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>
#include <jpeglib.h>
#include <turbojpeg.h>
#include <emmintrin.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

// CPU time of this thread: the per-core cost, unaffected by other processes on the machine.
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static inline uint8_t clamp255(int v) { return (uint8_t)(v < 0 ? 0 : (v > 255 ? 255 : v)); }
static inline uint8_t ey(int v) { int d = v - 16; return clamp255(d + ((d * 42 + 128) >> 8)); }
static inline uint8_t ec(int v) { int d = v - 128; return clamp255(128 + d + ((d * 71 + 256) >> 9)); }


// Range expansion of 8 16-bit lanes: luma (v-16)*255/219, chroma (v-128)*255/224+128, as above.
static inline __m128i ey8(__m128i v) {
    __m128i d = _mm_sub_epi16(v, _mm_set1_epi16(16));
    return _mm_add_epi16(d, _mm_srai_epi16(_mm_add_epi16(_mm_mullo_epi16(d, _mm_set1_epi16(42)), _mm_set1_epi16(128)), 8));
}
static inline __m128i ec8(__m128i v) {
    __m128i d = _mm_sub_epi16(v, _mm_set1_epi16(128));
    __m128i t = _mm_srai_epi16(_mm_add_epi16(_mm_mullo_epi16(d, _mm_set1_epi16(71)), _mm_set1_epi16(256)), 9);
    return _mm_add_epi16(_mm_add_epi16(d, t), _mm_set1_epi16(128));
}

static void deinterleave_scalar(const uint8_t *restrict s0, const uint8_t *restrict s1, uint8_t *restrict ya,
                                uint8_t *restrict yb, uint8_t *restrict cb, uint8_t *restrict cr, int from, int pairs);

// One YUYV row (or two, chroma averaged) into Y, Cb, Cr with range expansion: SSE2, 16 pixels a
// step (mask/shift the 16-bit lanes apart, expand in 16 bits, pack with saturation).
static void deinterleave(const uint8_t *restrict s0, const uint8_t *restrict s1, uint8_t *restrict ya,
                         uint8_t *restrict yb, uint8_t *restrict cb, uint8_t *restrict cr, int pairs) {
    const __m128i lo = _mm_set1_epi16(0xFF);
    int i = 0;
    for (; i + 8 <= pairs; i += 8) {
        __m128i a = _mm_loadu_si128((const __m128i *)(s0 + 4 * i));
        __m128i b = _mm_loadu_si128((const __m128i *)(s0 + 4 * i + 16));
        _mm_storeu_si128((__m128i *)(ya + 2 * i),
                         _mm_packus_epi16(ey8(_mm_and_si128(a, lo)), ey8(_mm_and_si128(b, lo))));
        if (s1) {
            __m128i c = _mm_loadu_si128((const __m128i *)(s1 + 4 * i));
            __m128i d = _mm_loadu_si128((const __m128i *)(s1 + 4 * i + 16));
            _mm_storeu_si128((__m128i *)(yb + 2 * i),
                             _mm_packus_epi16(ey8(_mm_and_si128(c, lo)), ey8(_mm_and_si128(d, lo))));
            a = _mm_avg_epu8(a, c);
            b = _mm_avg_epu8(b, d);
        }
        // Chroma words U V U V ... expanded, then split into U and V bytes.
        __m128i uv = _mm_packus_epi16(ec8(_mm_srli_epi16(a, 8)), ec8(_mm_srli_epi16(b, 8)));
        __m128i u = _mm_and_si128(uv, lo), v = _mm_srli_epi16(uv, 8);
        _mm_storel_epi64((__m128i *)(cb + i), _mm_packus_epi16(u, u));
        _mm_storel_epi64((__m128i *)(cr + i), _mm_packus_epi16(v, v));
    }
    deinterleave_scalar(s0, s1, ya, yb, cb, cr, i, pairs);
}

// The tail (and the reference the SIMD loop must match).
static void deinterleave_scalar(const uint8_t *restrict s0, const uint8_t *restrict s1, uint8_t *restrict ya,
                                uint8_t *restrict yb, uint8_t *restrict cb, uint8_t *restrict cr, int from, int pairs) {
    for (int i = from; i < pairs; i++) {
        ya[2 * i] = ey(s0[4 * i]);
        ya[2 * i + 1] = ey(s0[4 * i + 2]);
        if (s1) {
            yb[2 * i] = ey(s1[4 * i]);
            yb[2 * i + 1] = ey(s1[4 * i + 2]);
            cb[i] = ec((s0[4 * i + 1] + s1[4 * i + 1] + 1) >> 1);
            cr[i] = ec((s0[4 * i + 3] + s1[4 * i + 3] + 1) >> 1);
        } else {
            cb[i] = ec(s0[4 * i + 1]);
            cr[i] = ec(s0[4 * i + 3]);
        }
    }
}

typedef struct {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    unsigned char *out;
    unsigned long out_cap, out_len;
    uint8_t *stripe;
    JSAMPROW rows[3][16];
} raw_encoder;

static void raw_init(raw_encoder *e, int w, int h, int samp) {
    e->c.err = jpeg_std_error(&e->err);
    jpeg_create_compress(&e->c);
    e->out_cap = tjBufSize(w, h, samp == 420 ? TJSAMP_420 : TJSAMP_422);
    e->out = malloc(e->out_cap);
    int lines = samp == 420 ? 16 : 8;
    size_t ys = (w + 63) / 64 * 64, cs = ys;
    e->stripe = aligned_alloc(64, ys * lines + 2 * cs * 8);
    uint8_t *p = e->stripe;
    for (int r = 0; r < lines; r++, p += ys) e->rows[0][r] = p;
    for (int k = 0; k < 8; k++, p += cs) e->rows[1][k] = p;
    for (int k = 0; k < 8; k++, p += cs) e->rows[2][k] = p;
}

static unsigned long raw_encode(raw_encoder *e, const uint8_t *frame, int w, int h, int q, int samp) {
    j_compress_ptr c = &e->c;
    unsigned char *out = e->out;
    unsigned long len = e->out_cap;
    jpeg_mem_dest(c, &out, &len); // a preallocated buffer: libjpeg-turbo writes into it
    c->image_width = w;
    c->image_height = h;
    c->input_components = 3;
    c->in_color_space = JCS_YCbCr;
    jpeg_set_defaults(c);
    jpeg_set_quality(c, q, TRUE);
    c->dct_method = JDCT_ISLOW;
    c->comp_info[0].h_samp_factor = 2;
    c->comp_info[0].v_samp_factor = samp == 420 ? 2 : 1;
    for (int i = 1; i < 3; i++) c->comp_info[i].h_samp_factor = c->comp_info[i].v_samp_factor = 1;
    c->raw_data_in = TRUE;
    jpeg_start_compress(c, TRUE);
    int lines = samp == 420 ? 16 : 8, pairs = (w + 1) / 2;
    size_t stride = (size_t)pairs * 4;
    JSAMPARRAY planes[3] = {e->rows[0], e->rows[1], e->rows[2]};
    for (int row0 = 0; row0 < h; row0 += lines) {
        for (int k = 0; k < 8; k++) {
            if (samp == 420) {
                int r0 = row0 + 2 * k, r1 = r0 + 1;
                if (r0 >= h) r0 = h - 1;
                if (r1 >= h) r1 = h - 1;
                deinterleave(frame + stride * r0, frame + stride * r1, e->rows[0][2 * k], e->rows[0][2 * k + 1],
                             e->rows[1][k], e->rows[2][k], pairs);
            } else {
                int r = row0 + k < h ? row0 + k : h - 1;
                deinterleave(frame + stride * r, NULL, e->rows[0][k], NULL, e->rows[1][k], e->rows[2][k], pairs);
            }
        }
        jpeg_write_raw_data(c, planes, lines);
    }
    jpeg_finish_compress(c);
    if (out != e->out) { // grew past the worst case (never expected): keep the new buffer
        e->out = out;
        e->out_cap = len;
    }
    return len;
}

typedef struct {
    tjhandle tj;
    unsigned char *out;
    unsigned long out_cap;
    uint8_t *planes[3];
} tj_encoder;

static void tj_init(tj_encoder *e, int w, int h, int samp) {
    e->tj = tjInitCompress();
    int ts = samp == 420 ? TJSAMP_420 : TJSAMP_422;
    e->out_cap = tjBufSize(w, h, ts);
    e->out = tjAlloc(e->out_cap);
    int cw = (w + 1) / 2, ch = samp == 420 ? (h + 1) / 2 : h;
    e->planes[0] = aligned_alloc(64, (size_t)w * h + 64);
    e->planes[1] = aligned_alloc(64, (size_t)cw * ch + 64);
    e->planes[2] = aligned_alloc(64, (size_t)cw * ch + 64);
}

static unsigned long tj_encode(tj_encoder *e, const uint8_t *frame, int w, int h, int q, int samp) {
    int pairs = (w + 1) / 2;
    size_t stride = (size_t)pairs * 4;
    if (samp == 420) {
        for (int r = 0; r < h; r += 2) {
            int r1 = r + 1 < h ? r + 1 : r;
            deinterleave(frame + stride * r, frame + stride * r1, e->planes[0] + (size_t)w * r,
                         e->planes[0] + (size_t)w * r1, e->planes[1] + (size_t)pairs * (r / 2),
                         e->planes[2] + (size_t)pairs * (r / 2), pairs);
        }
    } else {
        for (int r = 0; r < h; r++)
            deinterleave(frame + stride * r, NULL, e->planes[0] + (size_t)w * r, NULL,
                         e->planes[1] + (size_t)pairs * r, e->planes[2] + (size_t)pairs * r, pairs);
    }
    const unsigned char *p[3] = {e->planes[0], e->planes[1], e->planes[2]};
    int strides[3] = {w, pairs, pairs};
    unsigned long len = e->out_cap;
    if (tjCompressFromYUVPlanes(e->tj, p, w, strides, h, samp == 420 ? TJSAMP_420 : TJSAMP_422, &e->out, &len, q,
                                TJFLAG_NOREALLOC) != 0) {
        fprintf(stderr, "ceiling: %s\n", tjGetErrorStr2(e->tj));
        exit(1);
    }
    return len;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: ceiling FILE WIDTH HEIGHT QUALITY 422|420 raw|yuvplanes [SECONDS]\n");
        return 2;
    }
    const char *path = argv[1];
    int w = atoi(argv[2]), h = atoi(argv[3]), q = atoi(argv[4]), samp = atoi(argv[5]);
    int tj = strcmp(argv[6], "yuvplanes") == 0;
    double seconds = argc > 7 ? atof(argv[7]) : 3.0;
    size_t frame_bytes = (size_t)((w + 1) / 2) * 4 * h;
    FILE *f = fopen(path, "rb");
    if (!f) { perror(path); return 1; }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    int n = (int)(size / (long)frame_bytes);
    if (n < 1) { fprintf(stderr, "ceiling: %s holds no whole frame\n", path); return 1; }
    uint8_t **frames = malloc(sizeof *frames * n);
    for (int i = 0; i < n; i++) {
        // Page-aligned, one frame per buffer, like driver mmap buffers.
        frames[i] = aligned_alloc(4096, (frame_bytes + 4095) / 4096 * 4096);
        if (fread(frames[i], 1, frame_bytes, f) != frame_bytes) { fprintf(stderr, "short read\n"); return 1; }
    }
    fclose(f);

    raw_encoder re;
    tj_encoder te;
    if (tj) tj_init(&te, w, h, samp); else raw_init(&re, w, h, samp);
    unsigned long bytes = 0;
    // Warm-up: one pass.
    for (int i = 0; i < n; i++) bytes = tj ? tj_encode(&te, frames[i], w, h, q, samp) : raw_encode(&re, frames[i], w, h, q, samp);
    enum { MAXPASS = 4096 };
    static double per_frame[MAXPASS], wall[MAXPASS];
    int passes = 0;
    double start = now();
    unsigned long long total_bytes = 0, total_frames = 0;
    while (passes < MAXPASS && (now() - start < seconds || passes < 5)) {
        double t0 = cpu_now(), w0 = now();
        for (int i = 0; i < n; i++) {
            bytes = tj ? tj_encode(&te, frames[i], w, h, q, samp) : raw_encode(&re, frames[i], w, h, q, samp);
            total_bytes += bytes;
            total_frames++;
        }
        wall[passes] = (now() - w0) / n;
        per_frame[passes++] = (cpu_now() - t0) / n;
    }
    qsort(per_frame, passes, sizeof per_frame[0], cmp);
    qsort(wall, passes, sizeof wall[0], cmp);
    double med = per_frame[passes / 2];
    printf("%s %.2f %.4f %.0f %.2f %.2f\n", tj ? "yuvplanes" : "raw", 1.0 / med, med * 1000,
           (double)total_bytes / total_frames, 1.0 / wall[passes / 2], 1.0 / per_frame[0]);
    return 0;
}
