/* The machine's memory read bandwidth: the physical limit of decoding, which
 * streams every weight once a token. Like STREAM's kernels, on a buffer far
 * larger than the caches (default 1 GiB): `read` sums it (what a weight
 * stream does: loads only), `copy` and `triad` (a[i] = b[i] + s c[i]) also
 * write, counted as bytes read plus bytes written. Each runs with 1..T
 * OpenMP threads, splitting the buffer; best of 5 passes, GB/s (1e9 B/s).
 * Compare with decode's weight bytes x tokens/s (docs/PERFORMANCE.md).
 *
 * Not part of the build. From the repository root:
 *   gcc -std=gnu11 -O3 -march=native -fopenmp bench/bench_stream.c -o /tmp/bench_stream
 *   /tmp/bench_stream [MiB [T]]        (default 1024 MiB, T = all cores)
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum kernel { READ, COPY, TRIAD };
static const char *const names[] = {"read", "copy", "triad"};

/* One pass of kernel k over n floats with t threads: seconds. *sink keeps
 * the read kernel's sum alive. */
static double pass(enum kernel k, float *a, const float *b, const float *c, size_t n, int t, double *sink) {
    double sum = 0;
    const double t0 = now_s();
    if (k == READ) {
        /* In SIMD blocks: one running sum would measure the adder's latency, not the memory. */
        #pragma omp parallel for num_threads(t) schedule(static) reduction(+ : sum)
        for (size_t blk = 0; blk < n; blk += 4096) {
            const size_t end = blk + 4096 < n ? blk + 4096 : n;
            float s = 0;
            #pragma omp simd reduction(+ : s)
            for (size_t i = blk; i < end; i++) s += b[i];
            sum += s;
        }
    } else {
        #pragma omp parallel for num_threads(t) schedule(static)
        for (size_t i = 0; i < n; i++) a[i] = k == COPY ? b[i] : b[i] + 3.0f * c[i];
    }
    const double s = now_s() - t0;
    *sink += sum;
    return s;
}

int main(int argc, char **argv) {
    const size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    const int tmax = argc > 2 ? atoi(argv[2]) : omp_get_num_procs();
    const size_t n = mib * (1u << 20) / sizeof(float);
    float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b), *c = malloc(n * sizeof *c);
    if (!mib || tmax < 1 || !a || !b || !c) {
        fprintf(stderr, "usage: bench_stream [MiB [threads]] (out of memory for 3 x %zu MiB?)\n", mib);
        return 1;
    }
    #pragma omp parallel for num_threads(tmax) schedule(static)
    for (size_t i = 0; i < n; i++) a[i] = 0.0f, b[i] = (float)(i & 1023), c[i] = 1.0f; /* pages touched where used */
    double sink = 0;
    printf("| kernel | threads | GB/s |\n|---|---|---|\n");
    for (int k = READ; k <= TRIAD; k++)
        for (int t = 1; t <= tmax; t++) {
            double best = 1e30;
            for (int r = 0; r < 5; r++) {
                const double s = pass((enum kernel)k, a, b, c, n, t, &sink);
                best = s < best ? s : best;
            }
            const double bytes = (double)n * sizeof(float) * (k == READ ? 1 : k == COPY ? 2 : 3);
            printf("| %s | %d | %.1f |\n", names[k], t, bytes / best / 1e9);
        }
    fprintf(stderr, "(checksum %g)\n", sink);
    free(a);
    free(b);
    free(c);
    return 0;
}
