// libdbus-1, loaded at run time (dlopen of libdbus-1.so.3) so that `Capture` builds and runs on a
// machine without it: only the camera portal needs it. The few types are declared here as libdbus
// 1.x's public ABI has them (dbus-errors.h, dbus-message.h; stable since 1.0), so no header or
// pkg-config is needed at build time either. Symbols carry the capture_dbus_ prefix.
#ifndef CDBUS_SHIM_H
#define CDBUS_SHIM_H
#include <stdint.h>

typedef struct DBusConnection capture_dbus_connection;
typedef struct DBusMessage capture_dbus_message;
typedef uint32_t capture_dbus_bool;

/// DBusError's layout: two strings, five one-bit flags in one unsigned int, a pointer.
typedef struct {
    const char *name;
    const char *message;
    unsigned int flags;
    void *padding1;
} capture_dbus_error;

/// DBusMessageIter's layout (64-bit and 32-bit pointers alike).
typedef struct {
    void *dummy1;
    void *dummy2;
    uint32_t dummy3;
    int dummy4, dummy5, dummy6, dummy7, dummy8, dummy9, dummy10, dummy11, pad1;
    void *pad2;
    void *pad3;
} capture_dbus_iter;

/// The libdbus functions the portal client calls, resolved by `capture_dbus_api`.
typedef struct {
    void (*error_init)(capture_dbus_error *);
    void (*error_free)(capture_dbus_error *);
    capture_dbus_connection *(*connection_open_private)(const char *address, capture_dbus_error *);
    void (*connection_set_exit_on_disconnect)(capture_dbus_connection *, capture_dbus_bool);
    void (*connection_close)(capture_dbus_connection *);
    void (*connection_unref)(capture_dbus_connection *);
    capture_dbus_bool (*connection_can_send_type)(capture_dbus_connection *, int type);
    capture_dbus_message *(*connection_send_with_reply_and_block)(
        capture_dbus_connection *, capture_dbus_message *, int timeout_ms, capture_dbus_error *);
    capture_dbus_bool (*connection_read_write)(capture_dbus_connection *, int timeout_ms);
    capture_dbus_message *(*connection_pop_message)(capture_dbus_connection *);
    capture_dbus_message *(*message_new_method_call)(const char *destination, const char *path,
                                                     const char *interface, const char *method);
    void (*message_unref)(capture_dbus_message *);
    int (*message_get_type)(capture_dbus_message *);
    const char *(*message_get_path)(capture_dbus_message *);
    const char *(*message_get_interface)(capture_dbus_message *);
    const char *(*message_get_member)(capture_dbus_message *);
    void (*message_iter_init_append)(capture_dbus_message *, capture_dbus_iter *);
    capture_dbus_bool (*message_iter_append_basic)(capture_dbus_iter *, int type, const void *value);
    capture_dbus_bool (*message_iter_open_container)(capture_dbus_iter *, int type, const char *signature,
                                                     capture_dbus_iter *sub);
    capture_dbus_bool (*message_iter_close_container)(capture_dbus_iter *, capture_dbus_iter *sub);
    capture_dbus_bool (*message_iter_init)(capture_dbus_message *, capture_dbus_iter *);
    int (*message_iter_get_arg_type)(capture_dbus_iter *);
    void (*message_iter_get_basic)(capture_dbus_iter *, void *value);
    capture_dbus_bool (*message_iter_next)(capture_dbus_iter *);
    void (*message_iter_recurse)(capture_dbus_iter *, capture_dbus_iter *sub);
} capture_dbus_api;

/// The loaded library, or NULL when libdbus-1.so.3 (or one of the functions) is missing; then
/// `capture_dbus_load_error` says why. Loaded once, on the first call; any thread.
const capture_dbus_api *capture_dbus_load(void);
/// dlerror()'s text from the failed load (empty when it succeeded or was not tried).
const char *capture_dbus_load_error(void);
#endif
