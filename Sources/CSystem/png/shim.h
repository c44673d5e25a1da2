// libpng 1.6 from Debian's libpng-dev (pkg-config libpng), for PNG layer contents in CapturePreview.
#include <png.h>

// The simplified API's constants are macros built from other macros: as values Swift can use.
static inline unsigned int cpng_image_version(void) { return PNG_IMAGE_VERSION; }
static inline unsigned int cpng_format_rgba(void) { return PNG_FORMAT_RGBA; }
