#include "cv4l2_audio.h"

static void cv4l2_alsa_drop_error(const char *file, int line, const char *function, int err, const char *fmt, ...) {
    (void)file; (void)line; (void)function; (void)err; (void)fmt;
}

void cv4l2_alsa_silence_errors(void) { snd_lib_error_set_handler(cv4l2_alsa_drop_error); }
