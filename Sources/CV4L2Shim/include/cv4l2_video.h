// V4L2: request codes (function-like macros Swift cannot import), a non-variadic ioctl, and the
// packed extended-control struct.
#ifndef CV4L2_VIDEO_H
#define CV4L2_VIDEO_H
#include <stdint.h>
#include <stddef.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <linux/videodev2.h>
#include <libv4l2.h>

extern const unsigned long CV4L2_VIDIOC_QUERYCAP;
extern const unsigned long CV4L2_VIDIOC_ENUM_FMT;
extern const unsigned long CV4L2_VIDIOC_G_FMT;
extern const unsigned long CV4L2_VIDIOC_S_FMT;
extern const unsigned long CV4L2_VIDIOC_TRY_FMT;
extern const unsigned long CV4L2_VIDIOC_ENUM_FRAMESIZES;
extern const unsigned long CV4L2_VIDIOC_ENUM_FRAMEINTERVALS;
extern const unsigned long CV4L2_VIDIOC_G_PARM;
extern const unsigned long CV4L2_VIDIOC_S_PARM;
extern const unsigned long CV4L2_VIDIOC_ENUMINPUT;
extern const unsigned long CV4L2_VIDIOC_G_INPUT;
extern const unsigned long CV4L2_VIDIOC_S_INPUT;
extern const unsigned long CV4L2_VIDIOC_QUERYCTRL;
extern const unsigned long CV4L2_VIDIOC_QUERY_EXT_CTRL;
extern const unsigned long CV4L2_VIDIOC_QUERYMENU;
extern const unsigned long CV4L2_VIDIOC_G_CTRL;
extern const unsigned long CV4L2_VIDIOC_S_CTRL;
extern const unsigned long CV4L2_VIDIOC_REQBUFS;
extern const unsigned long CV4L2_VIDIOC_QUERYBUF;
extern const unsigned long CV4L2_VIDIOC_QBUF;
extern const unsigned long CV4L2_VIDIOC_DQBUF;
extern const unsigned long CV4L2_VIDIOC_STREAMON;
extern const unsigned long CV4L2_VIDIOC_STREAMOFF;

/// ioctl(2) is variadic; a non-variadic door for callers outside the funnel (the driver tests).
/// Returns -1 and sets errno on failure.
int cv4l2_ioctl(int fd, unsigned long request, void *arg);

/// Extended controls: `struct v4l2_ext_control` is packed, which Swift cannot lay out.
/// Both return 0 or -1 with errno set (VIDIOC_G/S_EXT_CTRLS, V4L2_CTRL_WHICH_CUR_VAL).
int cv4l2_get_ext_ctrl(int fd, uint32_t id, int64_t *value);
int cv4l2_set_ext_ctrl(int fd, uint32_t id, int64_t value);
/// A 64-bit control (V4L2_CTRL_TYPE_INTEGER64) goes through value64.
int cv4l2_get_ext_ctrl64(int fd, uint32_t id, int64_t *value);
int cv4l2_set_ext_ctrl64(int fd, uint32_t id, int64_t value);

#endif
