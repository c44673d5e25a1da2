// zxing-cpp from Debian's libzxing-dev (pkg-config zxing): a C++ library, reached only from the
// CVisionShim target's C++ code; this header exists for the module map, Swift imports nothing.
