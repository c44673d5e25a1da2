// OpenCV 4 from Debian's libopencv-core-dev, libopencv-imgproc-dev and libopencv-objdetect-dev: C++, reached only
// from the CVisionShim target's C++ code, which finds the headers through include/opencv2 (a link to
// /usr/include/opencv4/opencv2) and links the three modules below; this header exists for the module
// map, Swift imports nothing.
