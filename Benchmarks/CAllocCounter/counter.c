// Heap allocation counter: malloc and friends forward to glibc's __libc_* entry points after
// bumping counters. Atomics for the process total, a thread-local for the calling thread
// (initial-exec TLS in the executable: no allocation on first touch).
#define _GNU_SOURCE
#include "CAllocCounter.h"
#include <stddef.h>
#include <errno.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

static uint64_t total, total_bytes, frees;
static __thread uint64_t mine __attribute__((tls_model("initial-exec")));

static inline void count(size_t bytes) {
    __atomic_fetch_add(&total, 1, __ATOMIC_RELAXED);
    __atomic_fetch_add(&total_bytes, bytes, __ATOMIC_RELAXED);
    mine++;
}

void *malloc(size_t n) { count(n); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { count(a * b); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { count(n); return __libc_realloc(p, n); }
void free(void *p) {
    if (p) __atomic_fetch_add(&frees, 1, __ATOMIC_RELAXED);
    __libc_free(p);
}
void *memalign(size_t a, size_t n) { count(n); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { count(n); return __libc_memalign(a, n); }
void *valloc(size_t n) { count(n); return __libc_valloc(n); }
void *pvalloc(size_t n) { count(n); return __libc_pvalloc(n); }
int posix_memalign(void **out, size_t a, size_t n) {
    if (a < sizeof(void *) || (a & (a - 1)) != 0) return EINVAL;
    count(n);
    void *p = __libc_memalign(a, n);
    if (!p) return ENOMEM;
    *out = p;
    return 0;
}

uint64_t calloc_counter_total(void) { return __atomic_load_n(&total, __ATOMIC_RELAXED); }
uint64_t calloc_counter_thread(void) { return mine; }
uint64_t calloc_counter_total_bytes(void) { return __atomic_load_n(&total_bytes, __ATOMIC_RELAXED); }
uint64_t calloc_counter_frees(void) { return __atomic_load_n(&frees, __ATOMIC_RELAXED); }

int calloc_counter_is_active(void) {
    uint64_t before = mine;
    // Through a volatile pointer so the compiler cannot elide the pair.
    void *(*volatile m)(size_t) = malloc;
    void *p = m(24);
    __libc_free(p);
    return mine != before;
}
