// Loads libdbus-1.so.3 once and resolves the functions of capture_dbus_api (see the header).
#include "CDBusShim.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#if __SIZEOF_POINTER__ == 8
// The sizes libdbus 1.x's headers give these structs on 64-bit Linux.
_Static_assert(sizeof(capture_dbus_error) == 32, "DBusError layout");
_Static_assert(sizeof(capture_dbus_iter) == 72, "DBusMessageIter layout");
#endif

static capture_dbus_api api;
static const capture_dbus_api *loaded;
static char load_error[256];
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
    void *lib = dlopen("libdbus-1.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(load_error, sizeof load_error, "%s", dlerror());
        return;
    }
    // libdbus is thread-safe only once this ran; it must run before any other libdbus call.
    capture_dbus_bool (*threads_init)(void) = (capture_dbus_bool (*)(void))dlsym(lib, "dbus_threads_init_default");
    if (threads_init) threads_init();
#define RESOLVE(field, symbol)                                                                   \
    if (!(*(void **)&api.field = dlsym(lib, symbol))) {                                          \
        snprintf(load_error, sizeof load_error, "libdbus-1.so.3 has no %s", symbol);             \
        return;                                                                                  \
    }
    RESOLVE(error_init, "dbus_error_init")
    RESOLVE(error_free, "dbus_error_free")
    RESOLVE(connection_open_private, "dbus_connection_open_private")
    RESOLVE(connection_set_exit_on_disconnect, "dbus_connection_set_exit_on_disconnect")
    RESOLVE(connection_close, "dbus_connection_close")
    RESOLVE(connection_unref, "dbus_connection_unref")
    RESOLVE(connection_can_send_type, "dbus_connection_can_send_type")
    RESOLVE(connection_send_with_reply_and_block, "dbus_connection_send_with_reply_and_block")
    RESOLVE(connection_read_write, "dbus_connection_read_write")
    RESOLVE(connection_pop_message, "dbus_connection_pop_message")
    RESOLVE(message_new_method_call, "dbus_message_new_method_call")
    RESOLVE(message_unref, "dbus_message_unref")
    RESOLVE(message_get_type, "dbus_message_get_type")
    RESOLVE(message_get_path, "dbus_message_get_path")
    RESOLVE(message_get_interface, "dbus_message_get_interface")
    RESOLVE(message_get_member, "dbus_message_get_member")
    RESOLVE(message_iter_init_append, "dbus_message_iter_init_append")
    RESOLVE(message_iter_append_basic, "dbus_message_iter_append_basic")
    RESOLVE(message_iter_open_container, "dbus_message_iter_open_container")
    RESOLVE(message_iter_close_container, "dbus_message_iter_close_container")
    RESOLVE(message_iter_init, "dbus_message_iter_init")
    RESOLVE(message_iter_get_arg_type, "dbus_message_iter_get_arg_type")
    RESOLVE(message_iter_get_basic, "dbus_message_iter_get_basic")
    RESOLVE(message_iter_next, "dbus_message_iter_next")
    RESOLVE(message_iter_recurse, "dbus_message_iter_recurse")
#undef RESOLVE
    loaded = &api;
}

const capture_dbus_api *capture_dbus_load(void) {
    pthread_once(&once, load);
    return loaded;
}

const char *capture_dbus_load_error(void) {
    pthread_once(&once, load);
    return load_error;
}
