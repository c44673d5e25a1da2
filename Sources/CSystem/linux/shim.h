// Linux headers the Glibc module leaves out; libc's own functions, so nothing more is linked.
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* prctl is variadic, which Swift cannot call: the thread-name request alone. */
static inline int clinux_set_thread_name(const char *name) {
    return prctl(PR_SET_NAME, (unsigned long)name, 0UL, 0UL, 0UL);
}

/* The calling thread's nice value: Linux keeps one per thread, which setpriority(PRIO_PROCESS)
   sets when given the thread's ID (syscall is variadic too). */
static inline int clinux_set_thread_nice(int nice) {
    return setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), nice);
}
