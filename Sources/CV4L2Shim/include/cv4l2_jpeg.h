// JPEG: TurboJPEG and libjpeg. libjpeg reports errors by longjmp, which Swift cannot catch,
// so its encoder calls are wrapped here.
#ifndef CV4L2_JPEG_H
#define CV4L2_JPEG_H
#include <stdint.h>
#include <stddef.h>
#include <turbojpeg.h>
#endif
