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
