/* The machine's memory read bandwidth (kvfold bench --bandwidth): the
 * limit of decoding, which streams every weight matrix once a token, so
 * that each decode figure can be stated as a share of it. Like STREAM's
 * read kernel (bench/bench_stream.c, the standalone form): each thread sums
 * its part of a buffer far larger than the caches, best of a few passes. */
#include "cli.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PASSES 5

struct part {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

/* Four running sums of the widest loads the CPU has, so that the loop
 * waits on memory, not on an adder or on the load ports: 8-byte loads read
 * 10% slower than 16-byte ones on AMD Zen 3, and 16-byte loads 10-20%
 * slower than 32-byte ones on one thread of AMD Zen 4 (20.7-21.4 GB/s
 * against 22.5-26.1), where decoding's own kernels read with 32- and
 * 64-byte loads and then streamed faster than this measured. */
#ifdef __x86_64__
#include <immintrin.h>
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p, size_t n) {
    __m256i s[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256(), _mm256_setzero_si256()};
    for (size_t i = 0; i + 16 <= n; i += 16)
        for (int k = 0; k < 4; k++) s[k] = _mm256_add_epi64(s[k], _mm256_load_si256((const __m256i *)(p + i) + k));
    uint64_t out[4];
    _mm256_storeu_si256((__m256i *)out, _mm256_add_epi64(_mm256_add_epi64(s[0], s[1]), _mm256_add_epi64(s[2], s[3])));
    return out[0] + out[1] + out[2] + out[3];
}

static uint64_t sum_sse2(const uint64_t *p, size_t n) {
    __m128i s[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128()};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int k = 0; k < 4; k++) s[k] = _mm_add_epi64(s[k], _mm_load_si128((const __m128i *)(p + i) + k));
    uint64_t out[2];
    _mm_storeu_si128((__m128i *)out, _mm_add_epi64(_mm_add_epi64(s[0], s[1]), _mm_add_epi64(s[2], s[3])));
    return out[0] + out[1];
}
#endif

static void *part_sum(void *arg) {
    struct part *t = arg;
#ifdef __x86_64__
    t->sum = __builtin_cpu_supports("avx2") ? sum_avx2(t->p, t->n) : sum_sse2(t->p, t->n);
#else
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= t->n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += t->p[i + k];
    t->sum = s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
#endif
    return NULL;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mem_read_gbps(int threads) {
    /* Four times the last-level cache, and at least 1 GiB (as bench_stream). */
    const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    const size_t bytes = MAX((size_t)1 << 30, 4 * (size_t)MAX(l3, 0L)) / 64 * 64;
    uint64_t *buf = aligned_alloc(64, bytes);
    struct part *parts = calloc((size_t)threads, sizeof *parts);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    double best = 0;
    if (buf && parts && tid && threads > 0) {
        memset(buf, 1, bytes);
        const size_t n = bytes / sizeof *buf, each = n / (size_t)threads / 16 * 16;
        /* Starting the threads inside the timed span costs microseconds
         * against a pass of tens of milliseconds. */
        for (int pass = 0; pass < PASSES; pass++) {
            const double t0 = now_s();
            int made = 0;
            for (; made < threads; made++) {
                parts[made] = (struct part){buf + (size_t)made * each, each, 0};
                if (pthread_create(&tid[made], NULL, part_sum, &parts[made]) != 0) break;
            }
            for (int k = 0; k < made; k++) pthread_join(tid[k], NULL);
            if (made < threads) break;
            best = MAX(best, (double)(each * (size_t)threads * sizeof *buf) / (now_s() - t0) / 1e9);
        }
    }
    free(buf), free(parts), free(tid);
    return best;
}
