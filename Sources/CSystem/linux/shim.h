// Linux headers the Glibc module leaves out; libc's own functions, so nothing more is linked.
#include <sys/eventfd.h>
#include <sys/prctl.h>

/* prctl is variadic, which Swift cannot call: the thread-name request alone. */
static inline int clinux_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}
