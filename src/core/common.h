/* Internal helpers shared by every module: error reporting and checked
 * arithmetic. Nothing here is public API. */
#ifndef KVF_COMMON_H
#define KVF_COMMON_H

#include "kvfold.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__GNUC__)
#define KVF_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define KVF_PRINTF(a, b)
#endif

/* Records a message for kvf_last_error() on this thread and returns st, so
 * that failures read `return err_set(KVF_ERR_FORMAT, "...", ...);`. */
enum kvf_status err_set(enum kvf_status st, const char *fmt, ...) KVF_PRINTF(2, 3);
void err_clear(void);

/* Overflow-checked size arithmetic: return false on overflow. */
static inline bool size_mul(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline bool size_add(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* n elements of `size` bytes (malloc'd), or NULL with *ok cleared: a run of
 * allocations checks ok once at the end. */
static inline void *mem_alloc(size_t n, size_t size, bool *ok) {
    size_t bytes;
    void *p = size_mul(n, size, &bytes) ? malloc(bytes ? bytes : 1) : NULL;
    if (!p) *ok = false;
    return p;
}

/* Resizes the array *pp (any T *, passed as &array) to n elements of `size`
 * bytes; false, with the array left as it was, when out of memory. */
static inline bool mem_resize(void *pp, size_t n, size_t size) {
    size_t bytes;
    if (!size_mul(n, size, &bytes)) return false;
    void **slot = (void **)pp;
    void *grown = realloc(*slot, bytes ? bytes : 1);
    if (!grown) return false;
    *slot = grown;
    return true;
}

#define KVF_MIN(a, b) ((a) < (b) ? (a) : (b))
#define KVF_MAX(a, b) ((a) > (b) ? (a) : (b))

/* splitmix64: a full-period stream from any seed (0 included); used for
 * sampler seeding, pseudo-image noise and the random policies. */
static inline uint64_t rng_splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
/* A standard normal draw (Box-Muller over two splitmix64 draws). */
double rng_gauss(uint64_t *s);

#endif
