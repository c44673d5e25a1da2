#include "cv4l2_video.h"
#include <string.h>

const unsigned long CV4L2_VIDIOC_QUERYCAP = VIDIOC_QUERYCAP;
const unsigned long CV4L2_VIDIOC_ENUM_FMT = VIDIOC_ENUM_FMT;
const unsigned long CV4L2_VIDIOC_G_FMT = VIDIOC_G_FMT;
const unsigned long CV4L2_VIDIOC_S_FMT = VIDIOC_S_FMT;
const unsigned long CV4L2_VIDIOC_TRY_FMT = VIDIOC_TRY_FMT;
const unsigned long CV4L2_VIDIOC_ENUM_FRAMESIZES = VIDIOC_ENUM_FRAMESIZES;
const unsigned long CV4L2_VIDIOC_ENUM_FRAMEINTERVALS = VIDIOC_ENUM_FRAMEINTERVALS;
const unsigned long CV4L2_VIDIOC_G_PARM = VIDIOC_G_PARM;
const unsigned long CV4L2_VIDIOC_S_PARM = VIDIOC_S_PARM;
const unsigned long CV4L2_VIDIOC_ENUMINPUT = VIDIOC_ENUMINPUT;
const unsigned long CV4L2_VIDIOC_G_INPUT = VIDIOC_G_INPUT;
const unsigned long CV4L2_VIDIOC_S_INPUT = VIDIOC_S_INPUT;
const unsigned long CV4L2_VIDIOC_QUERYCTRL = VIDIOC_QUERYCTRL;
const unsigned long CV4L2_VIDIOC_QUERY_EXT_CTRL = VIDIOC_QUERY_EXT_CTRL;
const unsigned long CV4L2_VIDIOC_QUERYMENU = VIDIOC_QUERYMENU;
const unsigned long CV4L2_VIDIOC_G_CTRL = VIDIOC_G_CTRL;
const unsigned long CV4L2_VIDIOC_S_CTRL = VIDIOC_S_CTRL;
const unsigned long CV4L2_VIDIOC_REQBUFS = VIDIOC_REQBUFS;
const unsigned long CV4L2_VIDIOC_QUERYBUF = VIDIOC_QUERYBUF;
const unsigned long CV4L2_VIDIOC_QBUF = VIDIOC_QBUF;
const unsigned long CV4L2_VIDIOC_DQBUF = VIDIOC_DQBUF;
const unsigned long CV4L2_VIDIOC_STREAMON = VIDIOC_STREAMON;
const unsigned long CV4L2_VIDIOC_STREAMOFF = VIDIOC_STREAMOFF;

int cv4l2_ioctl(int fd, unsigned long request, void *arg) { return ioctl(fd, request, arg); }

static int ext_ctrl(int fd, unsigned long req, uint32_t id, int64_t *value, int wide) {
    struct v4l2_ext_control c;
    struct v4l2_ext_controls cs;
    memset(&c, 0, sizeof c);
    memset(&cs, 0, sizeof cs);
    c.id = id;
    if (wide) c.value64 = *value; else c.value = (int32_t)*value;
    cs.which = V4L2_CTRL_WHICH_CUR_VAL;
    cs.count = 1;
    cs.controls = &c;
    int r = ioctl(fd, req, &cs);
    if (r == 0) *value = wide ? c.value64 : (int64_t)c.value;
    return r;
}
int cv4l2_get_ext_ctrl(int fd, uint32_t id, int64_t *value) { return ext_ctrl(fd, VIDIOC_G_EXT_CTRLS, id, value, 0); }
int cv4l2_set_ext_ctrl(int fd, uint32_t id, int64_t value) { return ext_ctrl(fd, VIDIOC_S_EXT_CTRLS, id, &value, 0); }
int cv4l2_get_ext_ctrl64(int fd, uint32_t id, int64_t *value) { return ext_ctrl(fd, VIDIOC_G_EXT_CTRLS, id, value, 1); }
int cv4l2_set_ext_ctrl64(int fd, uint32_t id, int64_t value) { return ext_ctrl(fd, VIDIOC_S_EXT_CTRLS, id, &value, 1); }
