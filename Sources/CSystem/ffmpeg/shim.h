// FFmpeg's muxing, encoding and utility libraries from Debian's libavformat-dev, libavcodec-dev
// and libavutil-dev (found through pkg-config libavformat; CaptureRecording only).
#include <libavformat/avformat.h>
#include <libavcodec/avcodec.h>
#include <libavutil/avutil.h>
#include <libavutil/opt.h>
#include <libavutil/error.h>
#include <libavutil/frame.h>
#include <libavutil/dict.h>
#include <libavutil/log.h>
