/* Micro-benchmark of quant_gemm_rows, the decode hot path: a matrix
 * times one activation row (one session decoding) and times 8 rows (8
 * sessions in one batch), in calls of 64 weight rows, single thread, at every
 * SIMD level the CPU has, and quant_gemm_ilv on the same matrix interleaved
 * (column "ilv", where the CPU has its kernel). Reports weight bytes streamed per second for a
 * matrix that stays in L2 (~1 MiB) and one that does not (~64 MiB), and for
 * 8 rows how many times one row's time the batch takes. A second table
 * compares the two ways to multiply a prompt's rows at the best level: the
 * integer rows kernels on a tile of 64 weight x 128 activation rows (in
 * L2, as an integer prefill path would block them) against what ops_matmul
 * does, dequantising 256 weight rows and one sgemm with 512 rows.
 *
 * Not part of the build. From the repository root:
 *   F="-std=gnu11 -O2 -D_GNU_SOURCE -Iinclude -Isrc"
 *   gcc $F -c src/core/quant.c -o /tmp/q.o
 *   gcc $F -mavx2 -mfma -mf16c -c src/core/quant_avx2.c -o /tmp/q2.o
 *   gcc $F -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mavx2 \
 *       -c src/core/quant_avx512.c -o /tmp/q5.o
 *   gcc $F -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx512vnni -mfma -mf16c -mavx2 \
 *       -c src/core/quant_vnni.c -o /tmp/qv.o
 *   gcc $F -mavx2 -mfma -mf16c -c src/core/vec_avx2.c -o /tmp/v2.o
 *   gcc $F -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mf16c -mavx2 \
 *       -c src/core/vec_avx512.c -o /tmp/v5.o
 *   gcc $F bench/bench_quant.c src/core/common.c src/core/quant_gemm.c src/core/quant_ilv.c src/core/vec.c \
 *       /tmp/q.o /tmp/q2.o /tmp/q5.o /tmp/qv.o /tmp/v2.o /tmp/v5.o \
 *       -lopenblas -lm -lpthread \
 *       -o /tmp/bench_quant
 *   /tmp/bench_quant [n ...]          (row lengths, default 576 1536)
 */
#include "core/quant.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Seconds per pass over `rows` weight rows of n values against nx rows of x,
 * in calls of 64 rows: quant_gemm_rows, or with `ilv` quant_gemm_ilv on
 * the rows interleaved (rows a multiple of 16, x in its activation form). */
static double bench_one(enum dtype t, int64_t n, int64_t rows, const void *w, const void *x, int nx, float *y,
                        bool ilv) {
    const size_t rb = dtype_row_bytes(t, n);
    int reps = 1;
    double dt;
    for (;;) {
        const double t0 = now_s();
        for (int r = 0; r < reps; r++)
            for (int64_t i = 0; i < rows; i += 64) {
                const int nr = (int)(rows - i < 64 ? rows - i : 64);
                if (ilv)
                    quant_gemm_ilv(t, n, (const char *)w + i * rb, nr / QUANT_ILV_ROWS, x, nx, y + i, (size_t)rows);
                else
                    quant_gemm_rows(t, n, (const char *)w + i * rb, rb, nr, x, nx, y + i, (size_t)rows);
            }
        dt = now_s() - t0;
        if (dt > 0.2)
            break;
        reps *= 2;
    }
    return dt / reps;
}

/* Best of 5 runs of f(arg) of at least 0.2 s each, seconds a call. */
static double best_time(void (*f)(void *), void *arg) {
    double best = 1e30;
    for (int k = 0; k < 5; k++) {
        int reps = 0;
        const double t0 = now_s();
        do
            f(arg), reps++;
        while (now_s() - t0 < 0.2);
        const double dt = (now_s() - t0) / reps;
        best = dt < best ? dt : best;
    }
    return best;
}

struct prompt_case {
    enum dtype t;
    int64_t n;
    const char *w;       /* 256 weight rows */
    const void *xb;      /* 128 activation rows, batch form */
    const float *xf;     /* 512 activation rows, floats */
    float *deq, *y;
    void *tiles, *act;   /* packed form of the 256 rows, 512 activation rows */
};

static void prompt_rows(void *arg) {
    const struct prompt_case *c = arg;
    quant_gemm_rows(c->t, c->n, c->w, dtype_row_bytes(c->t, c->n), 64, c->xb, 128, c->y, 64);
}

static void prompt_sgemm(void *arg) {
    const struct prompt_case *c = arg;
    const size_t rb = dtype_row_bytes(c->t, c->n);
    for (int r = 0; r < 256; r++)
        quant_dequant_row(c->t, c->w + (size_t)r * rb, c->deq + (size_t)r * c->n, c->n);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, 512, 256, (int)c->n, 1.0f, c->xf, (int)c->n, c->deq,
                (int)c->n, 0.0f, c->y, 256);
}

/* What ops_matmul does for the types with a packed form: the activations
 * quantised once, each tile of 16 weight rows packed, then multiplied. */
static void prompt_gemm(void *arg) {
    const struct prompt_case *c = arg;
    const size_t rb = dtype_row_bytes(c->t, c->n);
    quant_gemm_act(c->t, c->xf, c->n, 512, c->act);
    for (int r = 0; r < 256; r += QUANT_TILE_ROWS) {
        quant_gemm_pack(c->t, c->n, c->w + (size_t)r * rb, rb, QUANT_TILE_ROWS, c->tiles);
        quant_gemm_tiles(c->t, c->n, c->tiles, QUANT_TILE_ROWS, c->act, 512, c->y + r, 256);
    }
}

/* The kernel alone, on tiles packed beforehand. */
static void prompt_gemm_kernel(void *arg) {
    const struct prompt_case *c = arg;
    const size_t tb = quant_gemm_tile_bytes(c->t, c->n);
    for (int r = 0; r < 256; r += QUANT_TILE_ROWS)
        quant_gemm_tiles(c->t, c->n, (const char *)c->tiles + (size_t)r / QUANT_TILE_ROWS * tb, QUANT_TILE_ROWS, c->act,
                         512, c->y + r, 256);
}

static void prompt_table(const enum dtype *types, int ntypes, const int64_t *lens, int nlens) {
    openblas_set_num_threads(1);
    simd_set(simd_detect());
    printf("\n%-6s %6s %12s %12s %12s %12s   (GFLOP/s, %s, 1 thread: rows kernels on 64 x 128 rows; "
           "dequantise + sgemm, 256 x 512 rows; quant_gemm_tiles on the same, with packing and quantising, and "
           "its kernel alone)\n", "type", "n", "int rows", "sgemm", "gemm", "gemm kernel", simd_name(simd_get()));
    for (int ti = 0; ti < ntypes; ti++)
        for (int li = 0; li < nlens; li++) {
            struct prompt_case c = {.t = types[ti], .n = lens[li]};
            const size_t rb = dtype_row_bytes(c.t, c.n);
            if (rb == 0)
                continue;
            float *xf = malloc(512 * (size_t)c.n * sizeof *xf);
            char *w = malloc(256 * rb);
            void *xb = malloc(128 * quant_batch_row_bytes(c.t, c.n));
            for (int64_t i = 0; i < 512 * c.n; i++)
                xf[i] = (float)rand() / RAND_MAX - 0.5f;
            for (int r = 0; r < 256; r++)
                quant_quantize_row(c.t, xf + (size_t)r * c.n, w + (size_t)r * rb, c.n);
            quant_quantize_batch(c.t, xf, c.n, 128, xb);
            c.w = w, c.xb = xb, c.xf = xf;
            c.deq = malloc(256 * (size_t)c.n * sizeof *c.deq);
            c.y = malloc(512 * 256 * sizeof *c.y);
            const double tr = best_time(prompt_rows, &c), ts = best_time(prompt_sgemm, &c);
            printf("%-6s %6lld %12.1f %12.1f", dtype_get(c.t)->name, (long long)c.n,
                   2e-9 * 64 * 128 * (double)c.n / tr, 2e-9 * 256 * 512 * (double)c.n / ts);
            const size_t tb = quant_gemm_tile_bytes(c.t, c.n);
            if (quant_gemm_has(c.t) && tb != 0) {
                c.tiles = malloc(256 / QUANT_TILE_ROWS * tb);
                c.act = malloc(512 * quant_gemm_act_bytes(c.t, c.n));
                const double tg = best_time(prompt_gemm, &c);
                for (int r = 0; r < 256; r += QUANT_TILE_ROWS)
                    quant_gemm_pack(c.t, c.n, w + (size_t)r * rb, rb, QUANT_TILE_ROWS,
                                    (char *)c.tiles + (size_t)r / QUANT_TILE_ROWS * tb);
                const double tk = best_time(prompt_gemm_kernel, &c);
                printf(" %12.1f %12.1f", 2e-9 * 256 * 512 * (double)c.n / tg, 2e-9 * 256 * 512 * (double)c.n / tk);
                free(c.tiles), free(c.act);
            }
            printf("\n");
            fflush(stdout);
            free(xf), free(w), free(xb), free(c.deq), free(c.y);
        }
}

int main(int argc, char **argv) {
    static const enum dtype types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q8_0, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_F16};
    static const size_t sets[] = {1u << 20, 64u << 20};
    int64_t lens[8] = {576, 1536};
    int nlens = 2;
    if (argc > 1) {
        nlens = 0;
        for (int a = 1; a < argc && nlens < 8; a++)
            lens[nlens++] = atoll(argv[a]);
    }
    printf("%-6s %6s %8s", "type", "n", "set");
    for (int lv = SIMD_SCALAR; lv <= SIMD_AVX512; lv++)
        printf(" %10s %6s", simd_name((enum simd_level)lv), "x8");
    printf(" %10s %6s   (GB/s of weights for 1 row; time of 8 rows / 1 row; 1 thread)\n", "ilv", "x8");
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const enum dtype t = types[ti];
        for (int li = 0; li < nlens; li++) {
            const int64_t n = lens[li];
            const size_t rb = dtype_row_bytes(t, n);
            if (rb == 0)
                continue;
            float *xf = malloc(8 * (size_t)n * sizeof *xf);
            void *x = malloc(8 * quant_batch_row_bytes(t, n));
            for (int64_t i = 0; i < 8 * n; i++)
                xf[i] = (float)rand() / RAND_MAX - 0.5f;
            quant_quantize_batch(t, xf, n, 8, x);
            for (size_t si = 0; si < 2; si++) {
                const int64_t rows = (int64_t)(sets[si] / rb);
                float *wf = malloc((size_t)n * sizeof *wf), *y = malloc(8 * (size_t)rows * sizeof *y);
                char *w = malloc(rb * (size_t)rows);
                for (int64_t r = 0; r < rows; r++) {
                    if (r < 64) {
                        for (int64_t i = 0; i < n; i++)
                            wf[i] = (float)rand() / RAND_MAX - 0.5f;
                        quant_quantize_row(t, wf, w + r * rb, n);
                    } else {
                        memcpy(w + r * rb, w + (r % 64) * rb, rb);
                    }
                }
                printf("%-6s %6lld %6zuMi", dtype_get(t)->name, (long long)n, sets[si] >> 20);
                for (int lv = SIMD_SCALAR; lv <= SIMD_AVX512; lv++) {
                    simd_set((enum simd_level)lv);
                    if (simd_get() != (enum simd_level)lv) {
                        printf(" %10s %6s", "-", "-");
                        continue;
                    }
                    const double t1 = bench_one(t, n, rows, w, x, 1, y, false);
                    const double t8 = bench_one(t, n, rows, w, x, 8, y, false);
                    printf(" %10.2f %6.2f", (double)rb * (double)rows / t1 * 1e-9, t8 / t1);
                    fflush(stdout);
                }
                if (quant_ilv_has(t)) {
                    const int64_t ir = rows / QUANT_ILV_ROWS * QUANT_ILV_ROWS;
                    char *iw = malloc(rb * (size_t)ir);
                    void *act = malloc(8 * quant_ilv_act_bytes(t, n));
                    quant_ilv_pack(t, n, w, ir, iw);
                    quant_ilv_act(t, xf, n, 8, act);
                    const double t1 = bench_one(t, n, ir, iw, act, 1, y, true);
                    const double t8 = bench_one(t, n, ir, iw, act, 8, y, true);
                    printf(" %10.2f %6.2f", (double)rb * (double)ir / t1 * 1e-9, t8 / t1);
                    free(iw), free(act);
                }
                printf("\n");
                free(wf), free(y), free(w);
            }
            free(xf), free(x);
        }
    }
    prompt_table(types, (int)(sizeof types / sizeof types[0]), lens, nlens);
    return 0;
}
