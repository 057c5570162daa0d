/* Kernels for CPUs with AVX-512 VNNI on weights repacked so that one vector
 * holds four codes of each of 16 rows (layouts in quant_impl.h): quant_gemm_tiles's
 * for prompts (K types, packed per product) and quant_gemm_ilv's for decoding
 * (32-value block types and K types, interleaved at load).
 *
 * quant_gemm_tiles: each pass keeps GEMM_R activation rows' sums for the tile's 16
 * weight rows in registers: per four codes, one load of the weights and, per
 * row, one vpdpbusd against the row's four codes broadcast; per group, a
 * convert and two FMAs a row; per super-block, one FMA a row. */
#include "quant_impl.h"

#include <immintrin.h>

#define GEMM_R 8

/* t[r] += four codes u of each of 16 rows x activation row r's four codes
 * at x[r] + off, for the R rows of a pass. */
static inline __attribute__((always_inline)) void dot_rows(__m512i *t, __m512i u, const int8_t *const *x,
                                                           int64_t off, const int R) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        int32_t v;
        memcpy(&v, x[r] + off, sizeof v);
        t[r] = _mm512_dpbusd_epi32(t[r], u, _mm512_set1_epi32(v));
    }
}

/* The 16 rows' codes of the low (high = 0) or high nibbles of a vector. */
static inline __m512i nibbles(const uint8_t *v, int high) {
    __m512i u = _mm512_loadu_si512(v);
    if (high)
        u = _mm512_srli_epi16(u, 4);
    return _mm512_and_si512(u, _mm512_set1_epi8(0x0f));
}

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
                dot_rows(t, _mm512_loadu_si512(codes + j * QUANT_TILE_ROWS), qs, j, R);
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
    GEMM_PASS(G, 1) GEMM_PASS(G, 2) GEMM_PASS(G, 3) GEMM_PASS(G, 4) \
    GEMM_PASS(G, 5) GEMM_PASS(G, 6) GEMM_PASS(G, 7) GEMM_PASS(G, 8)
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

/* quant_gemm_ilv (layout in quant_impl.h). A pass keeps up to ILV_R
 * activation rows' results for the tile's 16 weight rows in registers; per
 * block and group of four codes, one code vector (a load, or a nibble
 * unpack, plus the fifth bits through a 16-entry table) and per row one
 * vpdpbusd against the row's four codes broadcast; for the 32-value block
 * types, per block and row, the offset, a convert and one or two FMAs (the
 * K types: ilv_pass_k). */
#define ILV_R 8

/* Codes u of a group with their fifth bits: the next four bits of each
 * row's word in qh (shifted on), through a table whose entry x holds 16
 * in byte j where bit j of x is set. */
static inline __m512i with_fifth(__m512i u, __m512i *qh) {
    const __m512i fifth = _mm512_setr_epi32(0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010,
                                            0x00101000, 0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                            0x10100000, 0x10100010, 0x10101000, 0x10101010);
    u = _mm512_or_si512(u, _mm512_permutexvar_epi32(_mm512_and_si512(*qh, _mm512_set1_epi32(0x0f)), fifth));
    *qh = _mm512_srli_epi32(*qh, 4);
    return u;
}

static inline __attribute__((always_inline)) void ilv_pass_32(const enum dtype type, int64_t n, const uint8_t *tile,
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
                u = nibbles(p + L.codes + 64 * (g / 2), g % 2);
                if (L.q5)
                    u = with_fifth(u, &qh);
            }
            dot_rows(t, u, qs, 32 * b + 4 * g, R);
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

/* The K types: per sub-block and row, the code sums (from vpdpbusd, Q6_K's
 * started at -32 x the activation sum) times the sub-block scales in
 * integers (vpmulld); per super-block and row, Q4_K/Q5_K's min sum (a
 * vpdpwssd per sub-block: mins against the pairs of 16-value activation
 * sums), a convert and one FMA each. */
static inline __attribute__((always_inline)) void ilv_pass_k(const enum dtype type, int64_t n, const uint8_t *tile,
                                                             const uint8_t *act, size_t rb, const int R, float *out,
                                                             size_t os) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const int64_t nb = n / QK_K;
    const struct block_q8_K *y[ILV_R];
    __m512 acc[ILV_R];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        y[r] = (const struct block_q8_K *)(const void *)(act + (size_t)r * rb);
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i hi2 = _mm512_set1_epi8(0x30), byte = _mm512_set1_epi32(0xff);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *p = tile + (size_t)b * L.bytes;
        quant_prefetch(p, L.bytes);
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
        __m512i isum[ILV_R], t[ILV_R];
        const int8_t *qs[ILV_R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            isum[r] = _mm512_setzero_si512();
            qs[r] = y[r][b].qs;
        }
        if (L.q6) {
#pragma GCC unroll 16
            for (int g = 0; g < QK_K / 16; g++) {
                const __m512i s4 = _mm512_loadu_si512(p + L.sc + 64 * (g / 4));
                const __m512i sc = _mm512_srai_epi32(_mm512_slli_epi32(s4, 24 - 8 * (g % 4)), 24);
                const __m512i hv = _mm512_loadu_si512(p + L.qh + 64 * g);
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    t[r] = _mm512_set1_epi32(-32 * y[r][b].bsums[g]);
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    const int gg = 4 * g + q;
                    const __m512i h = q == 0 ? _mm512_slli_epi16(hv, 4)
                                      : q == 1 ? _mm512_slli_epi16(hv, 2)
                                      : q == 2 ? hv
                                               : _mm512_srli_epi16(hv, 2);
                    const __m512i u = _mm512_or_si512(nibbles(p + L.codes + 64 * (gg / 2), gg % 2),
                                                      _mm512_and_si512(h, hi2));
                    dot_rows(t, u, qs, 4 * gg, R);
                }
#pragma GCC unroll 8
                for (int r = 0; r < R; r++)
                    isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(t[r], sc));
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dw, _mm512_set1_ps(y[r][b].d)),
                                         acc[r]);
            continue;
        }
        /* quant_k4_scales in 32-bit lanes: o[0], o[1] the scales of
         * sub-blocks 0-3, 4-7 (a byte each), o[2], o[3] their mins. */
        const __m512i w0 = _mm512_loadu_si512(p + L.sc), w1 = _mm512_loadu_si512(p + L.sc + 64),
                      w2 = _mm512_loadu_si512(p + L.sc + 128);
        const __m512i m6 = _mm512_set1_epi32(0x3f3f3f3f), m4 = _mm512_set1_epi32(0x0f0f0f0f),
                      m2 = _mm512_set1_epi32(0x03030303);
        const __m512i o[4] = {
            _mm512_and_si512(w0, m6),
            _mm512_or_si512(_mm512_and_si512(w2, m4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w0, 6), m2), 4)),
            _mm512_and_si512(w1, m6),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(w2, 4), m4),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(w1, 6), m2), 4)),
        };
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i sc = _mm512_and_si512(_mm512_srli_epi32(o[j / 4], 8 * (j % 4)), byte);
            __m512i qh = L.q5 ? _mm512_loadu_si512(p + L.qh + 64 * j) : _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                t[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int gg = 0; gg < 8; gg++) {
                __m512i u = nibbles(p + L.codes + 256 * j + 64 * (gg / 2), gg % 2);
                if (L.q5)
                    u = with_fifth(u, &qh);
                dot_rows(t, u, qs, 32 * j + 4 * gg, R);
            }
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
                isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(t[r], sc));
        }
        /* Both 16-value halves of sub-block j take its min. */
        __m512i mm[8];
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m512i mn = _mm512_and_si512(_mm512_srli_epi32(o[2 + j / 4], 8 * (j % 4)), byte);
            mm[j] = _mm512_or_si512(mn, _mm512_slli_epi32(mn, 16));
        }
        const __m512 mw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)(p + L.m)));
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            __m512i summ = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) {
                int32_t x;
                memcpy(&x, y[r][b].bsums + 2 * j, sizeof x);
                summ = _mm512_dpwssd_epi32(summ, mm[j], _mm512_set1_epi32(x));
            }
            const __m512 dx = _mm512_set1_ps(y[r][b].d);
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), _mm512_mul_ps(dw, dx), acc[r]);
            acc[r] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(summ), _mm512_mul_ps(mw, dx), acc[r]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        _mm512_storeu_ps(out + (size_t)r * os, acc[r]);
}

static inline __attribute__((always_inline)) void ilv_pass(const enum dtype type, int64_t n, const uint8_t *tile,
                                                           const uint8_t *act, size_t rb, const int R, float *out,
                                                           size_t os) {
    if (quant_ilv_layout(type).qk == QK_K)
        ilv_pass_k(type, n, tile, act, rb, R, out, os);
    else
        ilv_pass_32(type, n, tile, act, rb, R, out, os);
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
        const size_t rb = quant_ilv_act_row_bytes(T, n);                                                          \
        const size_t tb = (size_t)(n / quant_ilv_layout(T).qk) * quant_ilv_layout(T).bytes;                       \
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
ILV_ROWS(ilv_q4_K, DT_Q4_K)
ILV_ROWS(ilv_q5_K, DT_Q5_K)
ILV_ROWS(ilv_q6_K, DT_Q6_K)

void quant_kernels_vnni(struct quant_kernels *k) {
    k->gemm[DT_Q4_K] = gemm_g32;
    k->gemm[DT_Q5_K] = gemm_g32;
    k->gemm[DT_Q6_K] = gemm_g16;
    k->ilv[DT_Q4_0] = ilv_q4_0;
    k->ilv[DT_Q4_1] = ilv_q4_1;
    k->ilv[DT_Q5_0] = ilv_q5_0;
    k->ilv[DT_Q5_1] = ilv_q5_1;
    k->ilv[DT_Q8_0] = ilv_q8_0;
    k->ilv[DT_Q4_K] = ilv_q4_K;
    k->ilv[DT_Q5_K] = ilv_q5_K;
    k->ilv[DT_Q6_K] = ilv_q6_K;
}
