/* quant_gemm's kernel for CPUs with AVX-512 VNNI (layouts in quant_impl.h).
 * Each pass keeps GEMM_R activation rows' sums for the tile's 16 weight rows
 * in registers: per four codes, one load of the weights and, per row, one
 * vpdpbusd against the row's four codes broadcast; per group, a convert and
 * two FMAs a row; per super-block, one FMA a row. */
#include "quant_impl.h"

#include <immintrin.h>

#define GEMM_R 8

static inline __attribute__((always_inline)) void gemm_pass(int64_t n, const uint8_t *codes, const float *fs,
                                                            const float *fm, const int G, const uint8_t *act,
                                                            size_t rb, const int R, __mmask16 keep, float *out,
                                                            size_t os) {
    const int8_t *qs[GEMM_R];
    const float *da[GEMM_R], *bs[GEMM_R];
    __m512 acc[GEMM_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        qs[r] = (const int8_t *)(act + (size_t)r * rb);
        da[r] = (const float *)(const void *)(qs[r] + n);
        bs[r] = da[r] + n / QK_K;
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t b = 0; b < n / QK_K; b++) {
        __m512 acc_b[GEMM_R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc_b[r] = _mm512_setzero_ps();
        for (int64_t g = b * (QK_K / G); g < (b + 1) * (QK_K / G); g++) {
            __m512i t[GEMM_R];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                t[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < G / 4; k++) {
                const int64_t j = g * G + 4 * k;
                const __m512i w = _mm512_loadu_si512(codes + j * QUANT_TILE_ROWS);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    int32_t x;
                    memcpy(&x, qs[r] + j, sizeof x);
                    t[r] = _mm512_dpbusd_epi32(t[r], w, _mm512_set1_epi32(x));
                }
            }
            const __m512 s = _mm512_loadu_ps(fs + g * QUANT_TILE_ROWS), m = _mm512_loadu_ps(fm + g * QUANT_TILE_ROWS);
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                acc_b[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r]), s, acc_b[r]);
                acc_b[r] = _mm512_fnmadd_ps(m, _mm512_set1_ps(bs[r][g]), acc_b[r]);
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_fmadd_ps(acc_b[r], _mm512_set1_ps(da[r][b]), acc[r]);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        _mm512_mask_storeu_ps(out + (size_t)r * os, keep, acc[r]);
}

/* One function per (group size, rows a pass), so that every loop above
 * over rows and codes is unrolled with its bounds known. */
#define GEMM_PASS(G, R)                                                                                           \
    static void pass_g##G##_r##R(int64_t n, const uint8_t *c, const float *fs, const float *fm, const uint8_t *a, \
                                 size_t rb, __mmask16 keep, float *out, size_t os) {                             \
        gemm_pass(n, c, fs, fm, G, a, rb, R, keep, out, os);                                                     \
    }
#define GEMM_PASSES(G) \
    GEMM_PASS(G, 1) GEMM_PASS(G, 2) GEMM_PASS(G, 3) GEMM_PASS(G, 4) GEMM_PASS(G, 5) GEMM_PASS(G, 6) GEMM_PASS(G, 7) GEMM_PASS(G, 8)
GEMM_PASSES(16)
GEMM_PASSES(32)

typedef void (*pass_fn)(int64_t, const uint8_t *, const float *, const float *, const uint8_t *, size_t, __mmask16,
                        float *, size_t);
static const pass_fn passes16[GEMM_R + 1] = {NULL, pass_g16_r1, pass_g16_r2, pass_g16_r3, pass_g16_r4,
                                             pass_g16_r5, pass_g16_r6, pass_g16_r7, pass_g16_r8};
static const pass_fn passes32[GEMM_R + 1] = {NULL, pass_g32_r1, pass_g32_r2, pass_g32_r3, pass_g32_r4,
                                             pass_g32_r5, pass_g32_r6, pass_g32_r7, pass_g32_r8};

static void gemm(int64_t n, const void *tile, int nw, const void *act, int nx, float *out, size_t os, int G) {
    const uint8_t *codes = tile;
    const float *fs = (const float *)(const void *)(codes + n * QUANT_TILE_ROWS), *fm = fs + QUANT_TILE_ROWS * (n / G);
    const size_t rb = quant_gemm_act_row_bytes(G == 16 ? DT_Q6_K : DT_Q4_K, n);
    const __mmask16 keep = (__mmask16)((1u << nw) - 1);
    const pass_fn *passes = G == 16 ? passes16 : passes32;
    for (int r = 0; r < nx; r += GEMM_R) {
        const int R = nx - r < GEMM_R ? nx - r : GEMM_R;
        passes[R](n, codes, fs, fm, (const uint8_t *)act + (size_t)r * rb, rb, keep, out + (size_t)r * os, os);
    }
}

static void gemm_g16(int64_t n, const void *tile, int nw, const void *act, int nx, float *out, size_t os) {
    gemm(n, tile, nw, act, nx, out, os, 16);
}

static void gemm_g32(int64_t n, const void *tile, int nw, const void *act, int nx, float *out, size_t os) {
    gemm(n, tile, nw, act, nx, out, os, 32);
}

void quant_kernels_vnni(struct quant_kernels *k) {
    k->gemm[DT_Q4_K] = gemm_g32;
    k->gemm[DT_Q5_K] = gemm_g32;
    k->gemm[DT_Q6_K] = gemm_g16;
}
