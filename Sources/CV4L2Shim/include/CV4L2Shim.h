// Umbrella header of the C shim. Each part holds only what Swift cannot import by itself.
#ifndef CV4L2SHIM_H
#define CV4L2SHIM_H
#include "cv4l2_video.h"
#include "cv4l2_jpeg.h"
#include "cv4l2_audio.h"
#endif
