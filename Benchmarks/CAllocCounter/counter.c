// Heap allocation counter: malloc and friends forward to glibc's __libc_* entry points after
// bumping counters. Atomics for the process total, a thread-local for the calling thread
// (initial-exec TLS in the executable: no allocation on first touch).
#define _GNU_SOURCE
#include "CAllocCounter.h"
#include <stddef.h>
#include <errno.h>
#include <link.h>
#include <malloc.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static uint64_t total, total_bytes, frees;
// Blocks and usable bytes held now (allocated and not yet freed): a leak shows as growth that
// keeps pace with the work, whatever the allocator keeps resident.
static int64_t live_blocks, live_bytes;
static __thread uint64_t mine __attribute__((tls_model("initial-exec")));

// Code ranges of the libraries named by calloc_counter_mark_libraries: an allocation whose
// caller (return address) lies in one is also counted as theirs. Written once, before counting.
#define MAX_RANGES 64
static uintptr_t range_start[MAX_RANGES], range_end[MAX_RANGES];
static int ranges;
static uint64_t marked_total;
static __thread uint64_t marked_mine __attribute__((tls_model("initial-exec")));

static inline void count_from(size_t bytes, const void *caller) {
    __atomic_fetch_add(&total, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&total_bytes, bytes, __ATOMIC_RELAXED);
    mine++;
    uintptr_t a = (uintptr_t)caller;
    for (int i = 0; i < ranges; i++) {
        if (a >= range_start[i] && a < range_end[i]) {
            __atomic_fetch_add(&marked_total, 1, __ATOMIC_RELAXED);
            marked_mine++;
            break;
        }
    }
}
#define count(bytes) count_from((bytes), __builtin_return_address(0))

// Under a sanitizer its allocator must see every block (and intercepts malloc_usable_size, which
// would be asked about glibc's blocks): nothing is replaced, and the counter says it is inactive.
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define CALLOC_COUNTER_OFF 1
#endif
#endif

#ifndef CALLOC_COUNTER_OFF

static inline void *held(void *p) {
    if (p) {
        __atomic_fetch_add(&live_blocks, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&live_bytes, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
    }
    return p;
}
static inline void released(void *p) {
    if (p) {
        __atomic_fetch_sub(&live_blocks, 1, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&live_bytes, (int64_t)malloc_usable_size(p), __ATOMIC_RELAXED);
    }
}

void *malloc(size_t n) { count(n); return held(__libc_malloc(n)); }
void *calloc(size_t a, size_t b) { count(a * b); return held(__libc_calloc(a, b)); }
void *realloc(void *p, size_t n) {
    count(n);
    // Counted out before the call (the old block may be gone after it) and back in if it failed.
    size_t old = p ? malloc_usable_size(p) : 0;
    if (p) {
        __atomic_fetch_sub(&live_blocks, 1, __ATOMIC_RELAXED);
        __atomic_fetch_sub(&live_bytes, (int64_t)old, __ATOMIC_RELAXED);
    }
    void *q = __libc_realloc(p, n);
    if (q) {
        held(q);
    } else if (p && n != 0) {
        __atomic_fetch_add(&live_blocks, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&live_bytes, (int64_t)old, __ATOMIC_RELAXED);
    }
    return q;
}
void free(void *p) {
    if (p) __atomic_fetch_add(&frees, 1, __ATOMIC_RELAXED);
    released(p);
    __libc_free(p);
}
void *memalign(size_t a, size_t n) { count(n); return held(__libc_memalign(a, n)); }
void *aligned_alloc(size_t a, size_t n) { count(n); return held(__libc_memalign(a, n)); }
void *valloc(size_t n) { count(n); return held(__libc_valloc(n)); }
void *pvalloc(size_t n) { count(n); return held(__libc_pvalloc(n)); }
int posix_memalign(void **out, size_t a, size_t n) {
    if (a < sizeof(void *) || (a & (a - 1)) != 0) return EINVAL;
    count(n);
    void *p = held(__libc_memalign(a, n));
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

#endif

uint64_t calloc_counter_total(void) { return __atomic_load_n(&total, __ATOMIC_RELAXED); }
uint64_t calloc_counter_thread(void) { return mine; }
uint64_t calloc_counter_total_bytes(void) { return __atomic_load_n(&total_bytes, __ATOMIC_RELAXED); }
uint64_t calloc_counter_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }
int64_t calloc_counter_live_blocks(void) { return __atomic_load_n(&live_blocks, __ATOMIC_RELAXED); }
int64_t calloc_counter_live_bytes(void) { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }

static int mark_one(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    const char *const *prefixes = data;
    const char *name = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    name = name ? name + 1 : info->dlpi_name;
    if (!name || !*name) return 0;
    int match = 0;
    for (int i = 0; prefixes[i]; i++) {
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0) { match = 1; break; }
    }
    if (!match) return 0;
    for (int i = 0; i < info->dlpi_phnum && ranges < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
        range_start[ranges] = info->dlpi_addr + ph->p_vaddr;
        range_end[ranges] = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        ranges++;
    }
    return 0;
}

int calloc_counter_mark_libraries(const char *const *prefixes) {
    ranges = 0;
    dl_iterate_phdr(mark_one, (void *)prefixes);
    return ranges;
}

uint64_t calloc_counter_marked_total(void) { return __atomic_load_n(&marked_total, __ATOMIC_RELAXED); }
uint64_t calloc_counter_marked_thread(void) { return marked_mine; }

int calloc_counter_is_active(void) {
#ifdef CALLOC_COUNTER_OFF
    return 0;
#else
    uint64_t before = mine;
    // Through a volatile pointer so the compiler cannot elide the pair.
    void *(*volatile m)(size_t) = malloc;
    void *p = m(24);
    released(p);
    __libc_free(p);
    return mine != before;
#endif
}
