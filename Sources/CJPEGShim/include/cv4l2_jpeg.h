// JPEG: TurboJPEG and libjpeg. libjpeg reports errors by longjmp, which Swift cannot catch,
// so its encoder calls are wrapped here.
#ifndef CV4L2_JPEG_H
#define CV4L2_JPEG_H
#include <stdint.h>
#include <stddef.h>
#include <turbojpeg.h>

/// How the source pixels are laid out. The Swift side derives planes and strides from the
/// V4L2 format and validates every size before calling; the C side trusts this description.
enum cv4l2_jpeg_layout {
    /// 4:2:2 packed (YUYV family) in plane 0; byte offsets of Y0/Y1/Cb/Cr in each 4-byte group.
    CV4L2_JPEG_PACKED422 = 0,
    /// Y in plane 0, interleaved chroma in plane 1 (NV12 family); cb_offset/cr_offset are 0 or 1.
    CV4L2_JPEG_SEMIPLANAR = 1,
    /// Y, Cb, Cr in planes 0, 1, 2 (YU12 family).
    CV4L2_JPEG_PLANAR = 2,
    /// 8-bit luma only in plane 0.
    CV4L2_JPEG_GREY = 3,
    /// R G B bytes in plane 0.
    CV4L2_JPEG_RGB24 = 4,
    /// B G R bytes in plane 0.
    CV4L2_JPEG_BGR24 = 5,
    /// B G R X bytes in plane 0.
    CV4L2_JPEG_BGRX32 = 6,
};

/// Output chroma subsampling; the values equal TurboJPEG's TJSAMP_444/422/420/GRAY.
enum cv4l2_jpeg_subsampling {
    CV4L2_JPEG_S444 = 0,
    CV4L2_JPEG_S422 = 1,
    CV4L2_JPEG_S420 = 2,
    CV4L2_JPEG_SGREY = 3,
};

typedef struct cv4l2_jpeg_image {
    int32_t layout;
    int32_t width;
    int32_t height;
    /// Chroma rows per source row pair: 1 when chroma has half the rows (4:2:0), 0 when it has
    /// every row (4:2:2). Planar and semi-planar layouts only.
    int32_t chroma_vshift;
    int32_t y0_offset, y1_offset, cb_offset, cr_offset;
    /// Non-zero: Y 16-235 / C 16-240, expanded to full range (JFIF) while deinterleaving.
    int32_t limited_range;
    const uint8_t *plane0;
    const uint8_t *plane1;
    const uint8_t *plane2;
    size_t stride0;
    size_t stride1;
    size_t stride2;
} cv4l2_jpeg_image;

/// A reusable libjpeg compressor with its own output buffer, stripe buffers and an image-pool
/// arena, so that encoding frames of one size allocates nothing after the first frame.
/// One per thread.
typedef struct cv4l2_jpeg_encoder cv4l2_jpeg_encoder;

/// Returns NULL when memory is short.
cv4l2_jpeg_encoder *cv4l2_jpeg_encoder_create(void);
void cv4l2_jpeg_encoder_destroy(cv4l2_jpeg_encoder *encoder);

/// Encodes one image. `app1`/`app1_len` (optional, at most 65533 bytes) is written as an APP1
/// segment payload right after SOI, or after the JFIF APP0 when `write_jfif` is non-zero.
/// On success returns 0 and sets `*out`/`*out_len` to bytes owned by the encoder, valid until
/// the next call. On failure returns -1; `cv4l2_jpeg_encoder_message` says why.
int cv4l2_jpeg_encode(cv4l2_jpeg_encoder *encoder, const cv4l2_jpeg_image *image, int quality,
                      int subsampling, const void *app1, size_t app1_len, int write_jfif,
                      const uint8_t **out, size_t *out_len);

/// The bytes `cv4l2_jpeg_encode_into` needs for an image of this size (the worst case, with an
/// APP1 payload of `app1_len`); 0 for sizes JPEG cannot hold or an unknown subsampling.
size_t cv4l2_jpeg_bound(int width, int height, int subsampling, size_t app1_len);

/// `cv4l2_jpeg_encode`, writing into the caller's `dst` (at least `cv4l2_jpeg_bound` bytes) instead
/// of the encoder's buffer; `*out_len` is the JPEG's length.
int cv4l2_jpeg_encode_into(cv4l2_jpeg_encoder *encoder, const cv4l2_jpeg_image *image, int quality,
                           int subsampling, const void *app1, size_t app1_len, int write_jfif,
                           uint8_t *dst, size_t dst_cap, size_t *out_len);

/// The last failure's message (libjpeg's text), empty if none.
const char *cv4l2_jpeg_encoder_message(const cv4l2_jpeg_encoder *encoder);

/// Bytes held by the output buffer (for tests and benchmarks that check it stops growing).
size_t cv4l2_jpeg_encoder_output_capacity(const cv4l2_jpeg_encoder *encoder);

/// Number of times the encoder asked the system for memory (malloc/realloc) since creation.
/// Stays constant in steady state.
uint64_t cv4l2_jpeg_encoder_allocation_count(const cv4l2_jpeg_encoder *encoder);

/// Range compression/expansion helpers used by colour conversion: full = (limited-16)*255/219
/// for luma and (limited-128)*255/224+128 for chroma, rounded, clamped; in place.
void cv4l2_expand_luma(uint8_t *samples, size_t count);
void cv4l2_expand_chroma(uint8_t *samples, size_t count);

/// One row of YUV (BT.601; limited range when `limited`, else full) to B, G, R, A bytes. Luma
/// sample x is `y[x * y_step]`, chroma for pixels 2i and 2i+1 is `u[i * c_step]`, `v[i * c_step]`.
void cv4l2_yuv_to_bgra_row(const uint8_t *y, size_t y_step, const uint8_t *u, const uint8_t *v,
                           size_t c_step, size_t width, int limited, uint8_t *out);

#endif
