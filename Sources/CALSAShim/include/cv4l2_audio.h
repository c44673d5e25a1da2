// ALSA capture. Most of alsa-lib imports into Swift as is; this holds only what does not.
#ifndef CV4L2_AUDIO_H
#define CV4L2_AUDIO_H
#include <alsa/asoundlib.h>

/// alsa-lib prints its errors to stderr through a variadic handler, which Swift cannot define.
/// This installs a handler that drops them (the library reports every failure as a typed
/// error instead). Process-wide; safe to call more than once.
void cv4l2_alsa_silence_errors(void);

#endif
