// What Swift cannot call in libmicrohttpd: MHD_start_daemon, MHD_get_daemon_info and MHD_get_connection_info are
// variadic, and callback options pass a function as an integer. Symbols carry the capture_server_ prefix.
#ifndef CCAPTURE_SERVER_SHIM_H
#define CCAPTURE_SERVER_SHIM_H
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>
#include <sys/socket.h>
#include <microhttpd.h>

/// Starts a daemon with `flags` on `port` (ignored when the options bind an address), calling
/// `handler(handler_cls, ...)` for each request, with the options in `options` (an array ended by
/// an item whose option is MHD_OPTION_END). NULL when the daemon could not start (errno says why).
struct MHD_Daemon *capture_server_start_daemon(unsigned int flags, uint16_t port,
                                                MHD_AccessHandlerCallback handler, void *handler_cls,
                                                struct MHD_OptionItem *options);
/// The connections `daemon` holds open now (any state: reading, answering, streaming, idle).
unsigned int capture_server_connection_count(struct MHD_Daemon *daemon);
/// The socket of `connection` (-1 when libmicrohttpd does not say).
int capture_server_connection_fd(struct MHD_Connection *connection);
/// The option item for MHD_OPTION_URI_LOG_CALLBACK: `callback(cls, uri, connection)` sees the
/// whole request target before libmicrohttpd parses its arguments; what it returns is the
/// request's context (the access handler's `*req_cls`).
struct MHD_OptionItem capture_server_uri_log_option(void *(*callback)(void *cls, const char *uri,
                                                                      struct MHD_Connection *connection),
                                                    void *cls);
/// The option item for MHD_OPTION_NOTIFY_CONNECTION (a connection accepted, a connection closed:
/// called before its socket is closed).
struct MHD_OptionItem capture_server_notify_connection_option(MHD_NotifyConnectionCallback callback, void *cls);
/// The option item for MHD_OPTION_NOTIFY_COMPLETED (a request answered or given up).
struct MHD_OptionItem capture_server_notify_completed_option(MHD_RequestCompletedCallback callback, void *cls);
#endif
