// libmicrohttpd from Debian's libmicrohttpd-dev; its header wants the socket types first.
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>
