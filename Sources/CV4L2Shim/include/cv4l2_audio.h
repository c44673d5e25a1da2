// ALSA capture.
#ifndef CV4L2_AUDIO_H
#define CV4L2_AUDIO_H
#include <alsa/asoundlib.h>
#endif
