// A C interface to the two C++ detectors CaptureVision uses: zxing-cpp's barcode reader and
// OpenCV's cascade face detector. Only what Swift cannot call (C++) is here; the Swift side owns
// the handles, checks every size, and makes the objects.
#ifndef CVISION_H
#define CVISION_H
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/// A found code: its zxing format bit (ZXing::BarcodeFormat), its corners in the luma's pixels
/// (top-left, top-right, bottom-right, bottom-left as zxing orders them), and its text as UTF-8
/// at [text_offset, text_offset + text_length) of the caller's text buffer.
typedef struct {
    uint32_t format;
    float corners[8];
    int32_t text_offset;
    int32_t text_length;
} cvision_code;

typedef struct cvision_barcode_reader cvision_barcode_reader;

/// A reader for the formats in `formats` (a mask of ZXing::BarcodeFormat bits), or NULL if out of memory.
cvision_barcode_reader *cvision_barcode_reader_create(uint32_t formats);
void cvision_barcode_reader_destroy(cvision_barcode_reader *reader);

/// Reads the codes in an 8-bit luma picture (`stride` bytes a row). Writes at most `max_codes`
/// into `codes` and their texts into `text` (`text_capacity` bytes; a text that does not fit is
/// left out). Returns how many codes it wrote, or -1 if the library failed (nothing written).
int32_t cvision_barcode_read(
    cvision_barcode_reader *reader, const uint8_t *luma, int32_t width, int32_t height, int32_t stride,
    cvision_code *codes, int32_t max_codes, char *text, int32_t text_capacity);

/// The zxing format bits this library build can read.
uint32_t cvision_barcode_formats_available(void);

typedef struct {
    int32_t x, y, width, height;
} cvision_rect;

typedef struct cvision_face_detector cvision_face_detector;

/// A detector with the cascade at `cascade_path` (an OpenCV XML file), or NULL if it cannot be
/// loaded (missing, unreadable, not a cascade).
cvision_face_detector *cvision_face_detector_create(const char *cascade_path);
void cvision_face_detector_destroy(cvision_face_detector *detector);

/// Finds faces in an 8-bit luma picture, shrunk first (area averaging) so that its longer side is
/// at most `max_side` pixels; faces smaller than `min_size` pixels of the shrunk picture are not
/// looked for. Writes at most `max_faces` rectangles in the picture's own pixels. Returns how
/// many, or -1 if the library failed.
int32_t cvision_face_detect(
    cvision_face_detector *detector, const uint8_t *luma, int32_t width, int32_t height, int32_t stride,
    int32_t max_side, int32_t min_size, cvision_rect *faces, int32_t max_faces);

#ifdef __cplusplus
}
#endif
#endif
