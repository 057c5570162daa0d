/* Kernels for CPUs with AVX-512 VNNI on weights repacked so that one vector
 * holds four codes of each of 16 rows (layouts in quant_impl.h): quant_gemm's
 * for prompts (K types, packed per product) and quant_ilv_rows's for decoding
 * (32-value block types, interleaved at load).
 *
 * quant_gemm: each pass keeps GEMM_R activation rows' sums for the tile's 16
 * weight rows in registers: per four codes, one load of the weights and, per
 * row, one vpdpbusd against the row's four codes broadcast; per group, a
 * convert and two FMAs a row; per super-block, one FMA a row. */
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

/* quant_ilv_rows (layout in quant_impl.h). A pass keeps up to ILV_R
 * activation rows' results for the tile's 16 weight rows in registers; per
 * block and group of four codes, one code vector (a load, or a nibble
 * unpack, plus the fifth bits through a 16-entry table) and per row one
 * vpdpbusd against the row's four codes broadcast; per block and row, the
 * offset, a convert and one or two FMAs. */
#define ILV_R 8

static inline __attribute__((always_inline)) void ilv_pass(const enum dtype type, int64_t n, const uint8_t *tile,
                                                           const uint8_t *act, size_t rb, const int R, float *out,
                                                           size_t os) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const int64_t nb = n / 32;
    const int8_t *qs[ILV_R];
    const float *xd[ILV_R], *xs[ILV_R];
    const int32_t *sum[ILV_R];
    __m512 acc[ILV_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        qs[r] = (const int8_t *)(act + (size_t)r * rb);
        xd[r] = (const float *)(const void *)(qs[r] + n);
        xs[r] = xd[r] + nb;
        sum[r] = (const int32_t *)(const void *)(xs[r] + nb);
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i nib = _mm512_set1_epi8(0x0f), low4 = _mm512_set1_epi32(0x0f);
    /* Entry x: byte j holds 16 where bit j of x is set (a fifth bit). */
    const __m512i fifth = _mm512_setr_epi32(0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010,
                                            0x00101000, 0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                            0x10100000, 0x10100010, 0x10101000, 0x10101010);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = tile + (size_t)b * L.bytes;
        quant_prefetch(p, L.bytes);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
        const __m512 mw = L.min ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + L.m)))
                                : _mm512_setzero_ps();
        __m512i qh = L.q5 ? _mm512_loadu_si512(p + L.qh) : _mm512_setzero_si512();
        __m512i t[ILV_R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            t[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            __m512i u;
            if (L.q8) {
                u = _mm512_loadu_si512(p + L.codes + 64 * g);
            } else {
                u = _mm512_loadu_si512(p + L.codes + 64 * (g / 2));
                if (g % 2)
                    u = _mm512_srli_epi16(u, 4);
                u = _mm512_and_si512(u, nib);
                if (L.q5) {
                    u = _mm512_or_si512(u, _mm512_permutexvar_epi32(_mm512_and_si512(qh, low4), fifth));
                    qh = _mm512_srli_epi32(qh, 4);
                }
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) {
                int32_t x;
                memcpy(&x, qs[r] + 32 * b + 4 * g, sizeof x);
                t[r] = _mm512_dpbusd_epi32(t[r], u, _mm512_set1_epi32(x));
            }
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512i s = L.o ? _mm512_sub_epi32(t[r], _mm512_set1_epi32(L.o * sum[r][b])) : t[r];
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw, _mm512_set1_ps(xd[r][b])), acc[r]);
            if (L.min)
                acc[r] = _mm512_fmadd_ps(mw, _mm512_set1_ps(xs[r][b]), acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + (size_t)r * os, acc[r]);
}

typedef void (*ilv_pass_fn)(int64_t, const uint8_t *, const uint8_t *, size_t, float *, size_t);

/* One function per (type, rows a pass), every loop unrolled with its bounds
 * known, and one rows kernel per type over tiles and passes. */
#define ILV_PASS(name, T, R)                                                                                       \
    static void name##_r##R(int64_t n, const uint8_t *tile, const uint8_t *act, size_t rb, float *out, size_t os) { \
        ilv_pass(T, n, tile, act, rb, R, out, os);                                                                 \
    }
#define ILV_ROWS(name, T)                                                                                          \
    ILV_PASS(name, T, 1) ILV_PASS(name, T, 2) ILV_PASS(name, T, 3) ILV_PASS(name, T, 4) ILV_PASS(name, T, 5)       \
    ILV_PASS(name, T, 6) ILV_PASS(name, T, 7) ILV_PASS(name, T, 8)                                                 \
    static void name(int64_t n, const void *tiles, int nt, const void *act, int nx, float *out, size_t os) {       \
        static const ilv_pass_fn passes[ILV_R + 1] = {NULL,       name##_r1, name##_r2, name##_r3, name##_r4,      \
                                                      name##_r5, name##_r6, name##_r7, name##_r8};                \
        const size_t rb = quant_ilv_act_row_bytes(n), tb = (size_t)(n / 32) * quant_ilv_layout(T).bytes;          \
        for (int t = 0; t < nt; t++)                                                                               \
            for (int r = 0; r < nx; r += ILV_R)                                                                    \
                passes[nx - r < ILV_R ? nx - r : ILV_R](n, (const uint8_t *)tiles + (size_t)t * tb,                \
                                                        (const uint8_t *)act + (size_t)r * rb, rb,                 \
                                                        out + (size_t)r * os + QUANT_ILV_ROWS * t, os);            \
    }
ILV_ROWS(ilv_q4_0, DT_Q4_0)
ILV_ROWS(ilv_q4_1, DT_Q4_1)
ILV_ROWS(ilv_q5_0, DT_Q5_0)
ILV_ROWS(ilv_q5_1, DT_Q5_1)
ILV_ROWS(ilv_q8_0, DT_Q8_0)

void quant_kernels_vnni(struct quant_kernels *k) {
    k->gemm[DT_Q4_K] = gemm_g32;
    k->gemm[DT_Q5_K] = gemm_g32;
    k->gemm[DT_Q6_K] = gemm_g16;
    k->ilv[DT_Q4_0] = ilv_q4_0;
    k->ilv[DT_Q4_1] = ilv_q4_1;
    k->ilv[DT_Q5_0] = ilv_q5_0;
    k->ilv[DT_Q5_1] = ilv_q5_1;
    k->ilv[DT_Q8_0] = ilv_q8_0;
}
