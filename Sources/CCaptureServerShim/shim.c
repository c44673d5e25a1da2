#include "CCaptureServerShim.h"

struct MHD_Daemon *capture_server_start_daemon(unsigned int flags, uint16_t port,
                                                MHD_AccessHandlerCallback handler, void *handler_cls,
                                                struct MHD_OptionItem *options) {
    return MHD_start_daemon(flags, port, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_ARRAY, options, MHD_OPTION_END);
}

unsigned int capture_server_connection_count(struct MHD_Daemon *daemon) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return info ? info->num_connections : 0;
}

int capture_server_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? info->connect_fd : -1;
}

struct MHD_OptionItem capture_server_uri_log_option(void *(*callback)(void *cls, const char *uri,
                                                                      struct MHD_Connection *connection),
                                                    void *cls) {
    struct MHD_OptionItem item = {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)callback, cls};
    return item;
}

struct MHD_OptionItem capture_server_notify_connection_option(MHD_NotifyConnectionCallback callback, void *cls) {
    struct MHD_OptionItem item = {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)callback, cls};
    return item;
}

struct MHD_OptionItem capture_server_notify_completed_option(MHD_RequestCompletedCallback callback, void *cls) {
    struct MHD_OptionItem item = {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)callback, cls};
    return item;
}
