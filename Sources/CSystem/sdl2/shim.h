// SDL2 from Debian's libsdl2-dev, included by path: pkg-config's -D_REENTRANT is a flag SwiftPM refuses (and warns about).
// The library keeps the process's own main(): no SDL_main replacement.
#define SDL_MAIN_HANDLED 1
#include <SDL2/SDL.h>
