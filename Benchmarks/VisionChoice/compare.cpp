// Detector comparison on the set make-set.py writes: zbar vs zxing-cpp (barcodes), OpenCV's cascades
// vs dlib's HOG (faces): found / labelled, false boxes, CPU a frame. DIR/list.txt has one line a
// picture: NAME KIND TEXT (kind qr, ean13, code128) or NAME KIND X Y W H ... (kind face, noface).
// Usage: compare DIR zbar|zxing|zxingH|haar|haar2|haar2f|lbp|hog (haar2f reads SF NB MS SIDE).
#include <zbar.h>
#define ZX_USE_UTF8 1
#include <ZXing/ReadBarcode.h>
#include <opencv2/objdetect.hpp>
#include <opencv2/imgproc.hpp>
#include <dlib/image_processing/frontal_face_detector.h>
#include <dlib/image_processing.h>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
struct Img { int w, h; std::vector<uint8_t> p; };
static Img readPGM(const std::string& f) {
  std::ifstream in(f, std::ios::binary); std::string m; int w, h, mx; in >> m >> w >> h >> mx; in.get();
  Img i{w, h, std::vector<uint8_t>(w * h)}; in.read((char*)i.p.data(), w * h); return i;
}
static double cpu() { timespec t; clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
struct Box { int x, y, w, h; };
static double iou(Box a, Box b) {
  int x0 = std::max(a.x, b.x), y0 = std::max(a.y, b.y), x1 = std::min(a.x + a.w, b.x + b.w), y1 = std::min(a.y + a.h, b.y + b.h);
  double in = std::max(0, x1 - x0) * (double)std::max(0, y1 - y0); return in / (a.w * a.h + b.w * b.h - in);
}
int main(int argc, char** argv) {
  cv::setNumThreads(1); std::string dir = argv[1]; std::string mode = argv[2];
  // lines: name kind text|faces...
  std::ifstream list(dir + "/list.txt"); std::string line;
  int found = 0, total = 0, falses = 0, frames = 0; double t = 0;
  zbar::ImageScanner zs; zs.set_config(zbar::ZBAR_NONE, zbar::ZBAR_CFG_ENABLE, 1);
  cv::CascadeClassifier cc;
  if (mode == "haar") cc.load("/usr/share/opencv4/haarcascades/haarcascade_frontalface_default.xml");
  if (mode == "haar2" || mode == "haar2f") cc.load("/usr/share/opencv4/haarcascades/haarcascade_frontalface_alt2.xml");
  if (mode == "lbp") cc.load("/usr/share/opencv4/lbpcascades/lbpcascade_frontalface_improved.xml");
  dlib::frontal_face_detector hog = dlib::get_frontal_face_detector();
  bool faceMode = mode == "haar2f" || mode == "haar" || mode == "haar2" || mode == "lbp" || mode == "hog";
  while (std::getline(list, line)) {
    std::istringstream ss(line); std::string name, kind; ss >> name >> kind;
    bool isCode = kind == "qr" || kind == "ean13" || kind == "code128";
    if (faceMode == isCode) continue;
    std::string rest; std::getline(ss, rest); if (!rest.empty() && rest[0] == ' ') rest = rest.substr(1);
    Img im = readPGM(dir + "/" + name + ".pgm"); frames++;
    if (!faceMode) {
      total++; bool ok = false; double t0 = cpu();
      if (mode == "zbar") {
        zbar::Image zi(im.w, im.h, "Y800", im.p.data(), im.w * im.h); zs.scan(zi);
        for (auto s = zi.symbol_begin(); s != zi.symbol_end(); ++s) if (s->get_data() == rest) ok = true;
        zi.set_data(nullptr, 0);
      } else {
        ZXing::DecodeHints h; h.setTryHarder(mode == "zxingH"); h.setTryRotate(true); h.setTryDownscale(true);
        auto rs = ZXing::ReadBarcodes(ZXing::ImageView(im.p.data(), im.w, im.h, ZXing::ImageFormat::Lum), h);
        for (auto& r : rs) if (r.text() == rest) ok = true;
      }
      t += cpu() - t0; if (ok) found++; else fprintf(stderr, "miss %s %s\n", name.c_str(), kind.c_str());
      continue;
    }
    std::vector<Box> truth; { std::istringstream fs(rest); Box b; while (fs >> b.x >> b.y >> b.w >> b.h) truth.push_back(b); }
    std::vector<Box> got; double t0 = cpu();
    if (mode == "hog") {
      dlib::array2d<unsigned char> a(im.h, im.w); memcpy(&a[0][0], im.p.data(), im.w * im.h);
      for (auto& r : hog(a)) got.push_back({(int)r.left(), (int)r.top(), (int)r.width(), (int)r.height()});
    } else {
      cv::Mat m(im.h, im.w, CV_8UC1, im.p.data()); std::vector<cv::Rect> rs;
      if (mode == "haar2f") {
        double f = std::min(1.0, atof(getenv("SIDE")) / std::max(im.w, im.h)); cv::Mat s; cv::resize(m, s, cv::Size(), f, f, cv::INTER_AREA);
        cc.detectMultiScale(s, rs, atof(getenv("SF")), atoi(getenv("NB")), 0, cv::Size(atoi(getenv("MS")), atoi(getenv("MS"))));
        for (auto& r : rs) r = cv::Rect(r.x / f, r.y / f, r.width / f, r.height / f);
      } else
      cc.detectMultiScale(m, rs, 1.1, 4, 0, cv::Size(40, 40));
      for (auto& r : rs) got.push_back({r.x, r.y, r.width, r.height});
    }
    t += cpu() - t0;
    std::vector<bool> used(got.size());
    for (auto& b : truth) { total++; for (size_t i = 0; i < got.size(); i++) if (!used[i] && iou(b, got[i]) > 0.25) { used[i] = true; found++; break; } }
    for (size_t i = 0; i < got.size(); i++) if (!used[i]) { falses++; fprintf(stderr, "false %s\n", name.c_str()); }
  }
  printf("%-7s found %d/%d (%.0f%%)  false boxes %d  frames %d  cpu %.1f ms/frame\n", mode.c_str(), found, total, 100.0 * found / std::max(1, total), falses, frames, 1000 * t / frames);
}
