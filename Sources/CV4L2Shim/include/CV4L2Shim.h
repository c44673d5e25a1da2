// Umbrella header of the V4L2 shim: only what Swift cannot import by itself.
#ifndef CV4L2SHIM_H
#define CV4L2SHIM_H
#include "cv4l2_video.h"
#endif
