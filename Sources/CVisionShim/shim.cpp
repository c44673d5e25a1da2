// The C++ side of cvision.h: zxing-cpp and OpenCV called with the caller's buffers; no exception
// crosses into C (each is caught and reported as -1).
#include "cvision.h"
#define ZX_USE_UTF8 1
#include <ZXing/ReadBarcode.h>
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#include <opencv2/objdetect.hpp>
#include <cstring>
#include <new>

struct cvision_barcode_reader {
    ZXing::DecodeHints hints;
};

extern "C" cvision_barcode_reader *cvision_barcode_reader_create(uint32_t formats) {
    auto *r = new (std::nothrow) cvision_barcode_reader();
    if (!r) return nullptr;
    r->hints.setFormats(ZXing::BarcodeFormats(static_cast<ZXing::BarcodeFormat>(formats)));
    r->hints.setTryRotate(true);
    r->hints.setTryHarder(true);
    r->hints.setTryDownscale(true);
    return r;
}

extern "C" void cvision_barcode_reader_destroy(cvision_barcode_reader *reader) { delete reader; }

extern "C" uint32_t cvision_barcode_formats_available(void) {
    return static_cast<uint32_t>(ZXing::BarcodeFormat::Any);
}

extern "C" int32_t cvision_barcode_read(
    cvision_barcode_reader *reader, const uint8_t *luma, int32_t width, int32_t height, int32_t stride,
    cvision_code *codes, int32_t max_codes, char *text, int32_t text_capacity) {
    try {
        ZXing::ImageView view(luma, width, height, ZXing::ImageFormat::Lum, stride);
        auto results = ZXing::ReadBarcodes(view, reader->hints);
        int32_t n = 0, used = 0;
        for (const auto &r : results) {
            if (n >= max_codes) break;
            if (!r.isValid()) continue;
            std::string s = r.text();
            if (used + static_cast<int32_t>(s.size()) > text_capacity) continue;
            cvision_code &c = codes[n++];
            c.format = static_cast<uint32_t>(r.format());
            const auto &p = r.position();
            for (int i = 0; i < 4; i++) {
                c.corners[2 * i] = static_cast<float>(p[i].x);
                c.corners[2 * i + 1] = static_cast<float>(p[i].y);
            }
            std::memcpy(text + used, s.data(), s.size());
            c.text_offset = used;
            c.text_length = static_cast<int32_t>(s.size());
            used += c.text_length;
        }
        return n;
    } catch (...) {
        return -1;
    }
}

struct cvision_face_detector {
    cv::CascadeClassifier cascade;
    cv::Mat small;
    std::vector<cv::Rect> found;
};

extern "C" cvision_face_detector *cvision_face_detector_create(const char *cascade_path) {
    try {
        // Detection runs on the output's own thread: OpenCV's worker pool would take the other
        // cores from capture and the app.
        cv::setNumThreads(1);
        auto *d = new cvision_face_detector();
        if (!d->cascade.load(cascade_path)) {
            delete d;
            return nullptr;
        }
        return d;
    } catch (...) {
        return nullptr;
    }
}

extern "C" void cvision_face_detector_destroy(cvision_face_detector *detector) { delete detector; }

extern "C" int32_t cvision_face_detect(
    cvision_face_detector *d, const uint8_t *luma, int32_t width, int32_t height, int32_t stride,
    int32_t max_side, int32_t min_size, cvision_rect *faces, int32_t max_faces) {
    try {
        cv::Mat full(height, width, CV_8UC1, const_cast<uint8_t *>(luma), static_cast<size_t>(stride));
        double f = std::min(1.0, static_cast<double>(max_side) / std::max(width, height));
        const cv::Mat *input = &full;
        if (f < 1.0) {
            cv::resize(full, d->small, cv::Size(), f, f, cv::INTER_AREA);
            input = &d->small;
        }
        d->cascade.detectMultiScale(*input, d->found, 1.1, 4, 0, cv::Size(min_size, min_size));
        int32_t n = 0;
        for (const auto &r : d->found) {
            if (n >= max_faces) break;
            faces[n++] = cvision_rect{static_cast<int32_t>(r.x / f), static_cast<int32_t>(r.y / f),
                                      static_cast<int32_t>(r.width / f), static_cast<int32_t>(r.height / f)};
        }
        return n;
    } catch (...) {
        return -1;
    }
}
