// Counts every heap allocation of the process: this target defines malloc and friends, which
// the dynamic linker then uses for the Swift runtime, Foundation and libc alike. Link it into
// one executable only (capture-bench).
#ifndef CALLOC_COUNTER_H
#define CALLOC_COUNTER_H
#include <stdint.h>

/// Allocations (malloc, calloc, realloc, posix_memalign, aligned_alloc, memalign, valloc) by
/// every thread since the process started.
uint64_t calloc_counter_total(void);
/// Allocations made by the calling thread.
uint64_t calloc_counter_thread(void);
/// Bytes requested by every thread since the process started.
uint64_t calloc_counter_total_bytes(void);
/// Calls to free with a non-NULL pointer, by every thread.
uint64_t calloc_counter_frees(void);
/// Blocks allocated and not yet freed, by every thread (those allocated before the process
/// reached main included).
int64_t calloc_counter_live_blocks(void);
/// Their usable bytes (malloc_usable_size), by every thread.
int64_t calloc_counter_live_bytes(void);
/// Non-zero when this target's malloc is the one the process really uses (it is not when the
/// link put another definition first).
int calloc_counter_is_active(void);

/// Marks the code of the loaded libraries whose file names start with one of `prefixes` (a
/// NULL-terminated list, e.g. "libavcodec"): allocations called from their code are also counted
/// as theirs below. Returns the number of code ranges marked. Call before counting.
int calloc_counter_mark_libraries(const char *const *prefixes);
/// Allocations called directly from marked libraries' code, by every thread.
uint64_t calloc_counter_marked_total(void);
/// The same, by the calling thread.
uint64_t calloc_counter_marked_thread(void);

#endif
