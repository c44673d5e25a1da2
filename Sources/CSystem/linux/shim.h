// Linux headers the Glibc module leaves out; libc's own functions, so nothing more is linked.
#include <sys/eventfd.h>
