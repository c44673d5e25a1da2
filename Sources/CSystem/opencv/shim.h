// OpenCV 4 from Debian's libopencv-objdetect-dev (pkg-config opencv4): C++, reached only from the
// CVisionShim target's C++ code; this header exists for the module map, Swift imports nothing.
