/* Block formats and kernels: hand-decoded blocks pin the ggml layouts;
 * every SIMD level is checked against the scalar reference (dequant bit
 * for bit, dots within summation-order rounding); the scalar dots against a
 * naive dot of dequantised rows; quantiser error bounds; fp16/bf16. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/quant.h"
#include "core/vec.h"
#include "core/quant_impl.h"
#include "kvfold.h"

/* Every readable type. */
static const enum dtype all_types[] = {DT_F32,  DT_F16,  DT_BF16, DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1,
                                       DT_Q8_0, DT_Q8_1, DT_Q4_K, DT_Q5_K, DT_Q6_K, DT_Q8_K};
#define N_TYPES (sizeof all_types / sizeof all_types[0])

/* ---- helpers -------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 32);
}

static float rnd_uniform(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() >> 8) * 0x1p-24f; }

/* Roughly normal, occasionally an outlier, as in real activations. */
static float rnd_act(void) {
    float s = 0;
    for (int k = 0; k < 4; k++)
        s += rnd_uniform(-1, 1);
    return rnd_u32() % 64 == 0 ? s * 20 : s;
}

static uint16_t rnd_finite_fp16(int wild) {
    for (;;) {
        const uint16_t h = (uint16_t)rnd_u32();
        const int exp = (h >> 10) & 0x1f;
        /* wild: any finite value (subnormals included); else |v| in ~[2^-9, 4) */
        if (exp != 0x1f && (wild || (exp >= 6 && exp <= 16)))
            return h;
    }
}

static void put_fp16(void *block, size_t off, uint16_t h) { memcpy((uint8_t *)block + off, &h, 2); }

/* Offsets of the fp16 scale fields of each block type (-1 terminated). */
static const int *fp16_fields(enum dtype t) {
    static const int d_only[] = {0, -1}, d_m[] = {0, 2, -1}, q6[] = {offsetof(struct block_q6_K, d), -1}, none[] = {-1};
    switch (t) {
    case DT_Q4_0: case DT_Q5_0: case DT_Q8_0: return d_only;
    case DT_Q4_1: case DT_Q5_1: case DT_Q8_1: case DT_Q4_K: case DT_Q5_K: return d_m;
    case DT_Q6_K: return q6;
    default: return none;
    }
}

/* Random but valid bytes for n values of type t: all code bits random,
 * scale fields finite (and moderate unless `wild`). */
static void rnd_row(enum dtype t, void *dst, int64_t n, int wild) {
    const size_t bytes = dtype_row_bytes(t, n);
    uint8_t *p = dst;
    assert_true(bytes > 0);
    if (t == DT_F32) {
        for (int64_t i = 0; i < n; i++)
            ((float *)dst)[i] = rnd_act();
        return;
    }
    for (size_t i = 0; i < bytes; i++)
        p[i] = (uint8_t)rnd_u32();
    if (t == DT_F16) {
        for (int64_t i = 0; i < n; i++)
            ((uint16_t *)dst)[i] = rnd_finite_fp16(1);
        return;
    }
    if (t == DT_BF16) {
        /* wild: any finite value; else exponents within 2^+-27 */
        for (int64_t i = 0; i < n; i++) {
            uint16_t *h = (uint16_t *)dst + i;
            const unsigned exp = wild ? rnd_u32() % 255 : 100 + rnd_u32() % 55;
            *h = (uint16_t)((*h & 0x807f) | exp << 7);
        }
        return;
    }
    const struct dtype_traits *tr = dtype_get(t);
    for (int64_t b = 0; b < n / tr->block; b++) {
        uint8_t *blk = p + b * tr->block_bytes;
        if (t == DT_Q8_K) {
            const float d = rnd_uniform(-0.05f, 0.05f);
            memcpy(blk, &d, sizeof d);
            continue;
        }
        for (const int *f = fp16_fields(t); *f >= 0; f++)
            put_fp16(blk, (size_t)*f, rnd_finite_fp16(wild));
    }
}

/* The per-element offsets of a row with mins (Q4_1, Q5_1, Q4_K, Q5_K):
 * dequantise a copy whose codes are all zero. Zero for other types. Used
 * to size tolerances, since those dots sum scale and min parts apart. */
static void row_offsets(enum dtype t, const void *w, int64_t n, float *off) {
    size_t code_at;
    switch (t) {
    case DT_Q4_1: code_at = offsetof(struct block_q4_1, qs); break;
    case DT_Q5_1: code_at = offsetof(struct block_q5_1, qh); break;
    case DT_Q4_K: code_at = offsetof(struct block_q4_K, qs); break;
    case DT_Q5_K: code_at = offsetof(struct block_q5_K, qh); break;
    default: memset(off, 0, (size_t)n * sizeof *off); return;
    }
    const struct dtype_traits *tr = dtype_get(t);
    const size_t bytes = dtype_row_bytes(t, n);
    uint8_t *z = malloc(bytes);
    assert_non_null(z);
    memcpy(z, w, bytes);
    for (int64_t b = 0; b < n / tr->block; b++)
        memset(z + b * tr->block_bytes + code_at, 0, tr->block_bytes - code_at);
    quant_dequant_row_ref(t, z, off, n);
    free(z);
}

/* Levels this CPU can run; simd_set clamps, so a level is available when
 * it sticks. */
static int levels(enum simd_level out[3]) {
    int k = 0;
    for (int lv = SIMD_SCALAR; lv <= SIMD_AVX512; lv++) {
        simd_set((enum simd_level)lv);
        if (simd_get() == (enum simd_level)lv)
            out[k++] = (enum simd_level)lv;
    }
    simd_set(SIMD_AVX512);
    return k;
}

/* Row lengths: 1..many blocks, odd counts for the paired kernels, and the
 * decode sizes; f32-like types also get lengths that leave vector tails. */
static int row_lengths(enum dtype t, int64_t out[10]) {
    static const int64_t f32_like[] = {1, 7, 17, 33, 100, 576, 1000, 1536};
    static const int64_t blocks[] = {1, 2, 3, 5, 7, 9};
    const int blk = dtype_get(t)->block;
    int k = 0;
    if (blk == 1) {
        memcpy(out, f32_like, sizeof f32_like);
        return 8;
    }
    for (int i = 0; i < 6; i++)
        if (blocks[i] * blk < 1536)
            out[k++] = blocks[i] * blk;
    if (576 % blk == 0)
        out[k++] = 576;
    out[k++] = 1536;
    return k;
}

/* Values, not bits: 0 * negative code is -0.0 in ggml too. */
static void assert_floats_equal(const float *got, const float *want, int n) {
    for (int i = 0; i < n; i++)
        if (got[i] != want[i])
            fail_msg("value %d: got %g, want %g", i, got[i], want[i]);
}

/* ---- hand-decoded blocks -------------------------------------------- */

static void test_q4_0_layout(void **state) {
    (void)state;
    /* d = 0x3800 = 0.5. Byte j holds value j (low nibble) and value j+16
     * (high nibble), each (code - 8) * d:
     *   qs[0] = 0x1f: y[0] = (15-8)*0.5 = 3.5,  y[16] = (1-8)*0.5 = -3.5
     *   qs[1] = 0x80: y[1] = (0-8)*0.5 = -4.0,  y[17] = (8-8)*0.5 = 0
     *   qs[2..15] = 0x88: zeros. */
    uint8_t blk[18] = {0x00, 0x38, 0x1f, 0x80};
    memset(blk + 4, 0x88, 14);
    float y[32], want[32] = {0};
    want[0] = 3.5f, want[16] = -3.5f, want[1] = -4.0f;
    enum simd_level lv[3];
    for (int k = levels(lv) - 1; k >= 0; k--) {
        simd_set(lv[k]);
        quant_dequant_row(DT_Q4_0, blk, y, 32);
        assert_floats_equal(y, want, (int)(sizeof want / sizeof want[0]));
    }
    simd_set(SIMD_AVX512);
}

static void test_q4_K_layout(void **state) {
    (void)state;
    /* d = 1.0 (0x3c00), dmin = 0.5 (0x3800). Scales (6-bit):
     *   scales[0] = 0x42: sc0 = 0x42 & 63 = 2, top bits 01 -> bits 4..5 of sc4
     *   scales[1] = 3:    sc1 = 3
     *   scales[4] = 4:    mn0 = 4
     *   scales[8] = 0x25: sc4 = 5 | 1<<4 = 21, mn4 = 2 | (scales[4]>>6)<<4 = 2
     * everything else 0 (sc2,3,5,6,7 = 0, mn1,2,3,5,6,7 = 0).
     * Value l is sc*q - dmin*mn of sub-block l/32; chunk c = l/64 uses
     * qs[32c..32c+31], low nibbles for the first 32 values, high for the next:
     *   qs[0]  = 0x73: y[0]   = 2*3 - 0.5*4 = 4,    y[32] = 3*7 - 0 = 21
     *   qs[64] = 0x0a: y[128] = 21*10 - 0.5*2 = 209, y[160] = 0
     *   other codes 0: y[1..31] = -2, y[33..127] = 0, y[129..159] = -1,
     *                  y[161..255] = 0. */
    struct block_q4_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3c00, b.dmin = 0x3800;
    b.scales[0] = 0x42, b.scales[1] = 3, b.scales[4] = 4, b.scales[8] = 0x25;
    b.qs[0] = 0x73, b.qs[64] = 0x0a;
    float want[256] = {0}, y[256];
    for (int l = 1; l < 32; l++)
        want[l] = -2;
    for (int l = 129; l < 160; l++)
        want[l] = -1;
    want[0] = 4, want[32] = 21, want[128] = 209;
    enum simd_level lv[3];
    for (int k = levels(lv) - 1; k >= 0; k--) {
        simd_set(lv[k]);
        quant_dequant_row(DT_Q4_K, &b, y, 256);
        assert_floats_equal(y, want, (int)(sizeof want / sizeof want[0]));
    }
    simd_set(SIMD_AVX512);
}

static void test_q6_K_layout(void **state) {
    (void)state;
    /* d = 0.5; value l = d * scales[l/16] * (q - 32), q = 4 bits from ql and
     * 2 from qh (see q6_value in quant.c):
     *   ql[0] = 0x21, qh[0] = 0x02: q(0)  = 1 | 2<<4 = 33 -> 0.5*2*1 = 1
     *                               q(64) = 2 | 0    = 2  -> 0.5*3*-30 = -45
     *   ql[32] = 0, qh bits 2..3 = 0: q(32) = 0 -> 0.5*-1*-32 = 16
     *   scales[0] = 2, scales[2] = -1, scales[4] = 3, others 0; all other
     *   codes are 0, i.e. -32: y[1..15] = -32, y[33..47] = 16,
     *   y[65..79] = -48, everything else 0. */
    struct block_q6_K b;
    memset(&b, 0, sizeof b);
    b.d = 0x3800;
    b.ql[0] = 0x21, b.qh[0] = 0x02;
    b.scales[0] = 2, b.scales[2] = -1, b.scales[4] = 3;
    float want[256] = {0}, y[256];
    for (int l = 0; l < 16; l++)
        want[l] = -32, want[32 + l] = 16, want[64 + l] = -48;
    want[0] = 1, want[64] = -45;
    enum simd_level lv[3];
    for (int k = levels(lv) - 1; k >= 0; k--) {
        simd_set(lv[k]);
        quant_dequant_row(DT_Q6_K, &b, y, 256);
        assert_floats_equal(y, want, (int)(sizeof want / sizeof want[0]));
    }
    simd_set(SIMD_AVX512);
}

/* ---- SIMD vs scalar ------------------------------------------------- */

static void test_dequant_matches_ref(void **state) {
    (void)state;
    enum simd_level lv[3];
    const int nl = levels(lv);
    float *a = malloc(1536 * sizeof *a), *b = malloc(1536 * sizeof *b);
    void *row = malloc(dtype_row_bytes(DT_F32, 1536));
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        for (size_t t = 0; t < N_TYPES; t++) {
            int64_t lens[10];
            const int nn = row_lengths(all_types[t], lens);
            for (int i = 0; i < nn; i++) {
                rnd_row(all_types[t], row, lens[i], 1);
                quant_dequant_row(all_types[t], row, a, lens[i]);
                quant_dequant_row_ref(all_types[t], row, b, lens[i]);
                if (memcmp(a, b, (size_t)lens[i] * sizeof *a) != 0)
                    fail_msg("%s dequant differs at %s, n=%lld", dtype_get(all_types[t])->name, simd_name(lv[k]),
                             (long long)lens[i]);
            }
        }
    }
    simd_set(SIMD_AVX512);
    free(a), free(b), free(row);
}

/* Every fp16 bit pattern, NaNs included, at every level. */
static void test_dequant_f16_all_patterns(void **state) {
    (void)state;
    uint16_t *h = malloc(65536 * sizeof *h);
    float *a = malloc(65536 * sizeof *a), *b = malloc(65536 * sizeof *b);
    for (int i = 0; i < 65536; i++)
        h[i] = (uint16_t)i;
    quant_dequant_row_ref(DT_F16, h, b, 65536);
    enum simd_level lv[3];
    for (int k = levels(lv) - 1; k >= 0; k--) {
        simd_set(lv[k]);
        quant_dequant_row(DT_F16, h, a, 65536);
        assert_memory_equal(a, b, 65536 * sizeof *a);
    }
    simd_set(SIMD_AVX512);
    free(h), free(a), free(b);
}

struct dot_case {
    double got_simd, got_ref, naive, mag, off_mag;
};

/* Weights of type t (random codes if `random_codes`, else quantised
 * activations), activations quantised to the vec_dot type: the naive sum
 * reads them dequantised, the kernels in the batch form. */
static struct dot_case dot_case_run(enum dtype t, int64_t n, int random_codes) {
    const enum dtype vt = dtype_get(t)->vec_dot;
    float *xf = malloc(n * sizeof *xf), *wd = malloc(n * sizeof *wd), *xd = malloc(n * sizeof *xd),
          *off = malloc(n * sizeof *off);
    void *w = malloc(dtype_row_bytes(t, n)), *x = malloc(dtype_row_bytes(vt, n)),
         *xb = malloc(quant_batch_row_bytes(t, n));
    for (int64_t i = 0; i < n; i++)
        xf[i] = rnd_act();
    if (random_codes) {
        rnd_row(t, w, n, 0);
    } else {
        float *wf = malloc(n * sizeof *wf);
        for (int64_t i = 0; i < n; i++)
            wf[i] = rnd_act() * 0.05f;
        quant_quantize_row(t, wf, w, n);
        free(wf);
    }
    quant_quantize_row(vt, xf, x, n);
    quant_quantize_batch(t, xf, n, 1, xb);
    quant_dequant_row_ref(t, w, wd, n);
    quant_dequant_row_ref(vt, x, xd, n);
    row_offsets(t, w, n, off);
    struct dot_case c = {0};
    for (int64_t i = 0; i < n; i++) {
        c.naive += (double)wd[i] * xd[i];
        c.off_mag += fabs((double)off[i] * xd[i]);
        c.mag += fabs((double)wd[i] * xd[i]) + fabs((double)off[i] * xd[i]);
    }
    float got;
    quant_gemm_rows(t, n, w, 0, 1, xb, 1, &got, 1);
    c.got_simd = got;
    quant_gemm_rows_ref(t, n, w, 0, 1, xb, 1, &got, 1);
    c.got_ref = got;
    free(xf), free(wd), free(xd), free(off), free(w), free(x), free(xb);
    return c;
}

static void test_vec_dot(void **state) {
    (void)state;
    enum simd_level lv[3];
    const int nl = levels(lv);
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        for (size_t t = 0; t < N_TYPES; t++) {
            const enum dtype ty = all_types[t];
            int64_t lens[10];
            const int nn = row_lengths(ty, lens);
            for (int i = 0; i < nn; i++)
                for (int random_codes = 0; random_codes < 2; random_codes++) {
                    const struct dot_case c = dot_case_run(ty, lens[i], random_codes);
                    /* SIMD vs scalar: only the summation order differs. */
                    const double tol = 1e-5 * c.mag + 1e-30;
                    if (fabs(c.got_simd - c.got_ref) > tol)
                        fail_msg("%s %s n=%lld: simd %.9g ref %.9g", dtype_get(ty)->name, simd_name(lv[k]),
                                 (long long)lens[i], c.got_simd, c.got_ref);
                    /* Scalar vs naive: Q8_1's s = fp16(d * sum) adds up to
                     * 2^-11 of each block's min term. */
                    const double tol_naive =
                        tol + (dtype_get(ty)->vec_dot == DT_Q8_1 ? 0x1p-10 * c.off_mag : 0.0);
                    if (fabs(c.got_ref - c.naive) > tol_naive)
                        fail_msg("%s n=%lld: ref %.9g naive %.9g", dtype_get(ty)->name, (long long)lens[i],
                                 c.got_ref, c.naive);
                }
        }
    }
    simd_set(SIMD_AVX512);
}

/* 1..5 weight rows against 1..9 activation rows (a batch of decoding
 * sessions): each result is bit for bit what it gets alone, at every level. */
static void test_vec_dot_rows(void **state) {
    (void)state;
    enum {NW = 5, NX = 9};
    enum simd_level lv[3];
    const int nl = levels(lv);
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        for (size_t t = 0; t < N_TYPES; t++) {
            const enum dtype ty = all_types[t];
            int64_t lens[10];
            const int nn = row_lengths(ty, lens);
            for (int i = 0; i < nn; i++) {
                const int64_t n = lens[i];
                const size_t rb = quant_batch_row_bytes(ty, n), wb = dtype_row_bytes(ty, n);
                uint8_t *w = malloc(NW * wb), *x = malloc(NX * rb);
                float *xf = malloc(NX * n * sizeof *xf), out[NX * (NW + 1)];
                for (int j = 0; j < NW; j++)
                    rnd_row(ty, w + j * wb, n, 0);
                for (int64_t j = 0; j < NX * n; j++)
                    xf[j] = rnd_act();
                quant_quantize_batch(ty, xf, n, NX, x);
                for (int nw = 1; nw <= NW; nw++)
                    for (int nx = 1; nx <= NX; nx++) {
                        quant_gemm_rows(ty, n, w, wb, nw, x, nx, out, NW + 1);
                        for (int r = 0; r < nx; r++)
                            for (int j = 0; j < nw; j++) {
                                float alone;
                                quant_prefetch_set(r % 2 == 0); /* reading ahead or not: the same bits */
                                quant_gemm_rows(ty, n, w + j * wb, 0, 1, x + r * rb, 1, &alone, 1);
                                quant_prefetch_set(true);
                                if (memcmp(&out[(NW + 1) * r + j], &alone, sizeof alone) != 0)
                                    fail_msg("%s %s n=%lld nw=%d nx=%d (%d, %d): %.9g, alone %.9g",
                                             dtype_get(ty)->name, simd_name(lv[k]), (long long)n, nw, nx, j, r,
                                             out[(NW + 1) * r + j], alone);
                            }
                    }
                free(w), free(x), free(xf);
            }
        }
    }
    simd_set(SIMD_AVX512);
}

/* quant_gemm_rows_at (a weight's measured kernel choice, model/kernels.c):
 * level L's rows kernel is bit for bit quant_gemm_rows at level L, and a
 * level above the one in use is capped by it (KVFOLD_SIMD, simd_set).
 * quant_rows_level_has: the levels with a SIMD kernel of their own. */
static void test_rows_at(void **state) {
    (void)state;
    enum { NW = 3, NX = 2 };
    enum simd_level lv[3];
    const int nl = levels(lv);
    assert_false(quant_rows_level_has(DT_Q4_K, SIMD_SCALAR));
    assert_false(quant_rows_level_has((enum dtype)77, SIMD_AVX2));
    static const enum dtype stored[] = {DT_F32, DT_F16, DT_BF16, DT_Q4_0, DT_Q4_1, DT_Q5_0,
                                        DT_Q5_1, DT_Q8_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    for (int k = 0; k < nl; k++)
        if (lv[k] == SIMD_AVX2) /* every type weights come in has an AVX2 rows kernel */
            for (size_t t = 0; t < sizeof stored / sizeof *stored; t++)
                assert_true(quant_rows_level_has(stored[t], SIMD_AVX2));
    for (size_t t = 0; t < N_TYPES; t++) {
        const enum dtype ty = all_types[t];
        const int64_t n = dtype_get(ty)->block == 1 ? 100 : 4 * 256 / dtype_get(ty)->block * dtype_get(ty)->block;
        const size_t rb = quant_batch_row_bytes(ty, n), wb = dtype_row_bytes(ty, n);
        uint8_t *w = malloc(NW * wb), *x = malloc(NX * rb);
        float *xf = malloc(NX * n * sizeof *xf), want[NX * NW], got[NX * NW];
        for (int j = 0; j < NW; j++) rnd_row(ty, w + j * wb, n, 0);
        for (int64_t j = 0; j < NX * n; j++) xf[j] = rnd_act();
        quant_quantize_batch(ty, xf, n, NX, x);
        for (int k = 0; k < nl; k++)
            for (int c = 0; c <= k; c++) { /* in use lv[k], asked for lv[c], then for a level above */
                simd_set(lv[c]);
                quant_gemm_rows(ty, n, w, wb, NW, x, NX, want, NW);
                simd_set(lv[k]);
                quant_gemm_rows_at(lv[c], ty, n, w, wb, NW, x, NX, got, NW);
                assert_floats_equal(got, want, NX * NW);
                simd_set(lv[c]);
                quant_gemm_rows_at(SIMD_AVX512, ty, n, w, wb, NW, x, NX, got, NW);
                assert_floats_equal(got, want, NX * NW);
            }
        free(w), free(x), free(xf);
    }
    simd_set(SIMD_AVX512);
}

/* quant_gemm_tiles: the packed tile times Q8_K activations, at the SIMD level
 * bit for bit the scalar reference, and both the decode path's dot product
 * (the same integer sums, floats added in another order) within float
 * rounding of the sum of |terms|; outputs past nw are left alone. */
static void test_gemm(void **state) {
    (void)state;
    enum { NX = 19, OS = QUANT_TILE_ROWS + 3 };
    static const enum dtype types[] = {DT_Q4_K, DT_Q5_K, DT_Q6_K};
    static const int64_t lens[] = {256, 512, 1536};
    static const int nws[] = {1, 5, 15, 16};
    assert_int_equal(quant_gemm_tile_bytes(DT_Q4_0, 256), 0);
    assert_int_equal(quant_gemm_tile_bytes(DT_Q4_K, 320), 0);
    assert_int_equal(quant_gemm_act_bytes(DT_F32, 256), 0);
    assert_true(quant_gemm_has(DT_Q4_K) == (simd_get() == SIMD_AVX512 && cpu_features().avx512vnni));
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            const enum dtype ty = types[t];
            const int64_t n = lens[li];
            const size_t wb = dtype_row_bytes(ty, n), ab = quant_gemm_act_bytes(ty, n),
                         xb = quant_batch_row_bytes(ty, n);
            uint8_t *w = malloc(QUANT_TILE_ROWS * wb), *tile = malloc(quant_gemm_tile_bytes(ty, n));
            uint8_t *act = malloc(NX * ab), *x = malloc(NX * xb);
            float *xf = malloc(NX * n * sizeof *xf), *wf = malloc(n * sizeof *wf), *xd = malloc(n * sizeof *xd);
            float out[NX * OS], ref[NX * OS];
            for (int j = 0; j < QUANT_TILE_ROWS; j++)
                rnd_row(ty, w + j * wb, n, 0);
            for (int64_t j = 0; j < NX * n; j++)
                xf[j] = rnd_act();
            quant_gemm_act(ty, xf, n, NX, act);
            quant_quantize_batch(ty, xf, n, NX, x);
            for (size_t k = 0; k < sizeof nws / sizeof *nws; k++) {
                const int nw = nws[k];
                quant_gemm_pack(ty, n, w, wb, nw, tile);
                for (int nx = 1; nx <= NX; nx += 6) {
                    for (int i = 0; i < NX * OS; i++)
                        out[i] = ref[i] = -1234.5f;
                    quant_gemm_tiles(ty, n, tile, nw, act, nx, out, OS);
                    quant_gemm_tiles_ref(ty, n, tile, nw, act, nx, ref, OS);
                    assert_memory_equal(out, ref, sizeof out);
                    for (int r = 0; r < nx; r++) {
                        quant_dequant_row_ref(DT_Q8_K, x + r * xb, xd, n);
                        for (int i = 0; i < OS; i++) {
                            if (i >= nw) {
                                assert_true(out[r * OS + i] == -1234.5f);
                                continue;
                            }
                            float dot;
                            quant_gemm_rows_ref(ty, n, w + i * wb, 0, 1, x + r * xb, 1, &dot, 1);
                            quant_dequant_row_ref(ty, w + i * wb, wf, n);
                            double mag = 0;
                            for (int64_t j = 0; j < n; j++)
                                mag += fabs((double)wf[j] * xd[j]);
                            if (fabs((double)out[r * OS + i] - dot) > 1e-5 * mag + 1e-30)
                                fail_msg("%s n=%lld row %d act %d: gemm %.9g, dot %.9g (|terms| %.3g)",
                                         dtype_get(ty)->name, (long long)n, i, r, out[r * OS + i], dot, mag);
                        }
                    }
                }
            }
            free(w), free(tile), free(act), free(x), free(xf), free(wf), free(xd);
        }
}

/* quant_ilv: the interleaved form dequantises to the rows' own floats (bit
 * for bit, at every level) and, for the K types, packs into the prompts'
 * tiles of the rows (quant_gemm_pack); its kernel at the level in use equals the scalar reference bit
 * for bit, gives each activation row the same bits whatever the batch, and
 * writes nothing outside its tiles' columns; and both are within float
 * rounding of the rows kernels (same integer sums, floats added in another
 * order). */
static void test_ilv(void **state) {
    (void)state;
    enum { NT = 2, ROWS = NT * QUANT_ILV_ROWS, NX = 11, OS = ROWS + 3 };
    static const enum dtype types[] = {DT_Q4_0, DT_Q4_1, DT_Q5_0, DT_Q5_1, DT_Q8_0, DT_Q4_K, DT_Q5_K, DT_Q6_K};
    /* 2304 and 4096: rows dequantised in more than one chunk of blocks */
    static const int64_t lens[] = {32, 64, 96, 160, 576, 1536, 2304}, lens_k[] = {256, 512, 1536, 4096, 0, 0, 0};
    assert_false(quant_ilv_type(DT_Q8_K));
    assert_false(quant_ilv_has(DT_F32));
    assert_int_equal(quant_ilv_act_bytes(DT_Q4_0, 48), 0);
    assert_int_equal(quant_ilv_act_bytes(DT_Q4_K, 288), 0);
    assert_int_equal(quant_ilv_act_bytes(DT_F16, 256), 0);
    for (size_t t = 0; t < sizeof types / sizeof *types; t++) {
        const enum dtype ty = types[t];
        const bool kt = dtype_get(ty)->block == QK_K;
        assert_true(quant_ilv_has(ty) == (simd_get() == SIMD_AVX512 && cpu_features().avx512vnni));
        for (size_t li = 0; li < sizeof lens / sizeof *lens && (kt ? lens_k : lens)[li]; li++) {
            const int64_t n = (kt ? lens_k : lens)[li];
            const size_t wb = dtype_row_bytes(ty, n), ab = quant_ilv_act_bytes(ty, n),
                         xb = quant_batch_row_bytes(ty, n);
            uint8_t *w = malloc(ROWS * wb), *ilv = malloc(ROWS * wb), *act = malloc(NX * ab), *x = malloc(NX * xb);
            float *xf = malloc(NX * n * sizeof *xf), *wf = malloc(ROWS * n * sizeof *wf),
                  *mine = malloc(n * sizeof *mine);
            float out[NX * OS], ref[NX * OS];
            for (int j = 0; j < ROWS; j++)
                rnd_row(ty, w + j * wb, n, 0);
            for (int64_t j = 0; j < NX * n; j++)
                xf[j] = rnd_act();
            quant_ilv_pack(ty, n, w, ROWS, ilv);
            enum simd_level lv[3];
            const int nl = levels(lv);
            for (int k = 0; k < nl; k++) {
                simd_set(lv[k]);
                quant_ilv_dequant(ty, n, ilv, 0, ROWS, wf);
                for (int j = 0; j < ROWS; j++) {
                    quant_dequant_row_ref(ty, w + j * wb, mine, n);
                    assert_memory_equal(wf + j * n, mine, n * sizeof *mine);
                }
            }
            simd_set(SIMD_AVX512);
            quant_ilv_dequant(ty, n, ilv, 17, 1, mine);
            assert_memory_equal(mine, wf + 17 * n, n * sizeof *mine);
            if (kt) /* prompts' tiles from either form are the same bytes */
                for (int tt = 0; tt < NT; tt++) {
                    const size_t tb = quant_gemm_tile_bytes(ty, n);
                    uint8_t *ta = malloc(tb), *tc = malloc(tb);
                    quant_gemm_pack(ty, n, w + tt * QUANT_ILV_ROWS * wb, wb, QUANT_ILV_ROWS, ta);
                    quant_gemm_pack_ilv(ty, n, ilv + tt * QUANT_ILV_ROWS * wb, tc);
                    assert_memory_equal(ta, tc, tb);
                    free(ta), free(tc);
                }
            quant_ilv_act(ty, xf, n, NX, act);
            quant_quantize_batch(ty, xf, n, NX, x);
            for (int nx = 1; nx <= NX; nx++) {
                for (int i = 0; i < NX * OS; i++)
                    out[i] = ref[i] = -1234.5f;
                quant_gemm_ilv(ty, n, ilv, NT, act, nx, out, OS);
                quant_gemm_ilv_ref(ty, n, ilv, NT, act, nx, ref, OS);
                assert_memory_equal(out, ref, sizeof out);
                for (int r = 0; r < nx; r++) {
                    float alone[ROWS];
                    quant_prefetch_set(r % 2 == 0); /* reading ahead or not: the same bits */
                    quant_gemm_ilv(ty, n, ilv, NT, act + r * ab, 1, alone, ROWS);
                    quant_prefetch_set(true);
                    assert_memory_equal(alone, out + r * OS, sizeof alone);
                    for (int i = ROWS; i < OS; i++)
                        assert_true(out[r * OS + i] == -1234.5f);
                    if (nx < NX)
                        continue;
                    for (int i = 0; i < ROWS; i++) {
                        float dot;
                        quant_gemm_rows_ref(ty, n, w + i * wb, 0, 1, x + r * xb, 1, &dot, 1);
                        double mag = 0;
                        for (int64_t j = 0; j < n; j++)
                            mag += fabs((double)wf[i * n + j] * xf[r * n + j]);
                        if (fabs((double)out[r * OS + i] - dot) > 1e-5 * mag + 1e-30)
                            fail_msg("%s n=%lld row %d act %d: ilv %.9g, rows kernel %.9g (|terms| %.3g)",
                                     dtype_get(ty)->name, (long long)n, i, r, out[r * OS + i], dot, mag);
                    }
                }
            }
            free(w), free(ilv), free(act), free(x), free(xf), free(wf), free(mine);
        }
    }
}

/* The activation quantiser's SIMD paths give the scalar one's bytes: ties
 * rounded to even, values past the clamp, NaN, infinities, zeros. */
/* Q4_0H's rows against a query are Q4_0's against the query rotated: at
 * every level, the rotation the kernels use gives the reference's bits
 * (quant_rotate_blocks), on values of every size, a NaN and infinities
 * among them. */
static void test_rotate_levels(void **state) {
    (void)state;
    enum { N = 32 * 6 };
    float x[N], xr[N];
    uint8_t row[N / 32 * 18];
    for (int i = 0; i < N; i++)
        x[i] = rnd_act() * (i % 7 == 0 ? 1e4f : 1.0f);
    quant_quantize_row(DT_Q4_0H, x, row, N);
    x[33] = NAN, x[70] = INFINITY, x[101] = -INFINITY, x[150] = 0.0f;
    memcpy(xr, x, sizeof x);
    quant_rotate_blocks(xr, N);
    enum simd_level lv[3];
    const int nl = levels(lv);
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        for (int64_t n = 32; n <= N; n += 32) {
            float a = quant_kv_dot(DT_Q4_0H, n, row, x), b = quant_kv_dot(DT_Q4_0, n, row, xr);
            if (memcmp(&a, &b, sizeof a) != 0 && !(isnan(a) && isnan(b)))
                fail_msg("%s n=%lld: q4_0h %.9g, q4_0 on the rotated query %.9g", simd_name(lv[k]), (long long)n, a,
                         b);
        }
        float y1[N] = {0}, y2[N] = {0}, t[N] = {0};
        quant_kv_axpy(DT_Q4_0H, y1, 0.75f, row, 64);
        quant_kv_axpy(DT_Q4_0, t, 0.75f, row, 64);
        quant_rotate_blocks(t, 64);
        for (int i = 0; i < 64; i++) y2[i] += t[i];
        assert_memory_equal(y1, y2, sizeof y1);
    }
    simd_set(SIMD_AVX512);
}

static void test_quantize_levels(void **state) {
    (void)state;
    enum {N = 32 * 40};
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = rnd_act() * (float)(1 << (i % 7));
    for (int i = 0; i < 32; i++) /* amax 127 -> d = 1: every x.5 is a tie */
        x[i] = i == 0 ? 127.0f : (float)(i - 16) + 0.5f;
    x[40] = NAN, x[70] = INFINITY, x[101] = -INFINITY, x[140] = -NAN;
    for (int i = 160; i < 192; i++)
        x[i] = i % 2 ? 0.0f : -0.0f;
    x[200] = 1e30f, x[230] = -1e-30f;
    /* Q8_K's second block: -128 first of two largest magnitudes (it sets the
     * sign, scale 1), every other value a tie */
    for (int i = 256; i < 512; i++)
        x[i] = (float)(i % 64 - 32) + 0.5f;
    x[300] = -128.0f, x[400] = 128.0f;
    const enum dtype types[3] = {DT_Q8_0, DT_Q8_1, DT_Q8_K};
    for (int t = 0; t < 3; t++) {
        const size_t rb = dtype_row_bytes(types[t], N);
        uint8_t *want = malloc(rb), *got = malloc(rb);
        simd_set(SIMD_SCALAR);
        quant_quantize_row(types[t], x, want, N);
        enum simd_level lv[3];
        const int nl = levels(lv);
        for (int k = 0; k < nl; k++) {
            simd_set(lv[k]);
            quant_quantize_row(types[t], x, got, N);
            if (memcmp(got, want, rb) != 0)
                fail_msg("%s at %s differs from scalar", dtype_get(types[t])->name, simd_name(lv[k]));
        }
        free(want), free(got);
    }
    simd_set(SIMD_AVX512);
}

static void test_f32_helpers(void **state) {
    (void)state;
    enum simd_level lv[3];
    const int nl = levels(lv);
    float a[203], b[203], y[203], want[203];
    for (int i = 0; i < 203; i++)
        a[i] = rnd_act(), b[i] = rnd_act(), y[i] = rnd_act();
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        for (int n = 0; n <= 203; n += (n < 40 ? 1 : 37)) {
            double naive = 0, mag = 0;
            for (int i = 0; i < n; i++)
                naive += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]);
            assert_true(fabs(quant_kv_dot(DT_F32, n, a, b) - naive) <= 1e-6 * mag + 1e-30);
            float out[203];
            memcpy(out, y, sizeof y);
            quant_kv_axpy(DT_F32, out, 0.75f, a, n);
            for (int i = 0; i < 203; i++) {
                want[i] = i < n ? (float)(y[i] + 0.75 * a[i]) : y[i];
                /* fused or not, within one rounding of the exact value */
                assert_true(fabsf(out[i] - want[i]) <= 0x1p-23f * (fabsf(y[i]) + fabsf(0.75f * a[i])));
            }
        }
    }
    simd_set(SIMD_AVX512);
}

/* ---- quantisers ----------------------------------------------------- */

static int has_min(enum dtype t) { return t == DT_Q4_1 || t == DT_Q5_1 || t == DT_Q4_K || t == DT_Q5_K; }

/* Worst error of dequant(quant(x)) per element as a fraction of the
 * block's range R (max(x,0) - min(x,0) for types with a min, 2 max|x| for
 * symmetric ones): symmetric types clip the one
 * level opposite the largest-magnitude element (a full step), the others
 * round to within half a step; K types add 6-bit scale rounding. */
static double err_fraction(enum dtype t) {
    switch (t) {
    case DT_Q4_0: return 1.0 / 16;
    case DT_Q5_0: return 1.0 / 32;
    case DT_Q4_1: return 0.5 / 15;
    case DT_Q5_1: return 0.5 / 31;
    case DT_Q8_0: case DT_Q8_1: return 0.5 / 254;
    case DT_Q8_K: return 1.0 / 256;
    case DT_Q4_K: return 0.5 / 15 * (1 + 2.0 / 63);
    case DT_Q5_K: return 0.5 / 31 * (1 + 2.0 / 63);
    case DT_Q6_K: return 1.0 / 64 * (1 + 1.0 / 127);
    default: return 0;
    }
}

static void fill_pattern(float *x, int n, int pattern) {
    for (int i = 0; i < n; i++) {
        switch (pattern) {
        case 0: x[i] = rnd_act(); break;
        case 1: x[i] = rnd_uniform(0.5f, 3.0f); break;    /* all positive */
        case 2: x[i] = rnd_uniform(-3.0f, -0.25f); break; /* all negative */
        case 3: x[i] = 0; break;
        case 4: x[i] = 1.25f; break;
        case 5: x[i] = rnd_act() * 1e-3f * (float)(1 + i % 64); break; /* sub-blocks of differing scale */
        default: x[i] = (i % 97 == 0) ? 100.0f : rnd_uniform(-0.01f, 0.01f); break;
        }
    }
}

/* tile_scores / tile_mix: each level bit for bit the reference,
 * the reference within rounding of a double product, nothing written past
 * the n columns (d values) asked for, tails of every width. */
static void test_attn_products(void **state) {
    (void)state;
    enum simd_level lv[3];
    const int nl = levels(lv);
    static const int64_t dims[] = {1, 8, 12, 24, 40, 64, 72, 80, 100, 112, 128, 256};
    static const int rows[] = {1, 3, 4, 5, 8, 9, 13, 32};
    static const int keys[] = {0, 1, 15, 16, 17, 47, 48, 49, 130};
    const int maxd = 256, maxq = 32, maxn = 130, ld = maxn + 5;
    float *q = malloc(sizeof(float) * maxq * (maxd + 3)), *k = malloc(sizeof(float) * maxn * maxd);
    float *pan = malloc(sizeof(float) * (maxn + TILE_PANEL) * maxd), *v = malloc(sizeof(float) * maxn * maxd);
    float *w = malloc(sizeof(float) * maxq * ld), *got = malloc(sizeof(float) * maxq * (maxd + 7));
    float *want = malloc(sizeof(float) * maxq * (maxd + 7));
    assert_true(q && k && pan && v && w && got && want);
    for (int i = 0; i < maxq * (maxd + 3); i++)
        q[i] = rnd_act();
    for (int i = 0; i < maxn * maxd; i++)
        k[i] = rnd_act(), v[i] = rnd_act();
    for (int i = 0; i < maxq * ld; i++)
        w[i] = rnd_act();
    for (size_t a = 0; a < sizeof dims / sizeof *dims; a++) {
        const int64_t d = dims[a];
        const size_t ldq = (size_t)d + 3, ldy = (size_t)d + 7;
        for (size_t b = 0; b < sizeof keys / sizeof *keys; b++) {
            const int n = keys[b];
            /* two packing calls, as attention adds rows to a head's panels */
            memset(pan, 0x7f, sizeof(float) * (maxn + TILE_PANEL) * maxd);
            tile_pack(d, k, 0, n / 3, pan);
            tile_pack(d, k + (size_t)(n / 3) * d, n / 3, n, pan);
            for (size_t c = 0; c < sizeof rows / sizeof *rows; c++) {
                const int nq = rows[c];
                float sref[32 * 135], sgot[32 * 135];
                for (int i = 0; i < nq * ld; i++)
                    sref[i] = -7.0f;
                tile_scores_ref(d, q, ldq, nq, pan, n, 0.125f, sref, ld);
                for (int i = 0; i < nq; i++)
                    for (int j = 0; j < ld; j++) {
                        if (j >= n) {
                            assert_true(sref[i * ld + j] == -7.0f);
                            continue;
                        }
                        double e = 0, mag = 0;
                        for (int64_t t = 0; t < d; t++)
                            e += (double)q[i * ldq + t] * k[j * d + t],
                                mag += fabs((double)q[i * ldq + t] * k[j * d + t]);
                        assert_true(fabs(sref[i * ld + j] - 0.125 * e) <= 0.125 * 1e-6 * mag * (double)d + 1e-30);
                    }
                for (int i = 0; i < nq * (int)ldy; i++)
                    want[i] = -7.0f;
                tile_mix_ref(d, w, ld, nq, v, n, want, ldy);
                for (int i = 0; i < nq; i++)
                    for (int64_t t = 0; t < (int64_t)ldy; t++) {
                        if (t >= d) {
                            assert_true(want[i * ldy + t] == -7.0f);
                            continue;
                        }
                        double e = 0, mag = 0;
                        for (int j = 0; j < n; j++)
                            e += (double)w[i * ld + j] * v[j * d + t],
                                mag += fabs((double)w[i * ld + j] * v[j * d + t]);
                        assert_true(fabs(want[i * ldy + t] - e) <= 1e-6 * mag * (n + 1) + 1e-30);
                    }
                for (int l = 0; l < nl; l++) {
                    simd_set(lv[l]);
                    for (int i = 0; i < nq * ld; i++)
                        sgot[i] = -7.0f;
                    tile_scores(d, q, ldq, nq, pan, n, 0.125f, sgot, ld);
                    assert_memory_equal(sgot, sref, sizeof(float) * nq * ld);
                    for (int i = 0; i < nq * (int)ldy; i++)
                        got[i] = -7.0f;
                    tile_mix(d, w, ld, nq, v, n, got, ldy);
                    assert_memory_equal(got, want, sizeof(float) * nq * ldy);
                }
                simd_set(SIMD_AVX512);
            }
        }
    }
    free(q), free(k), free(pan), free(v), free(w), free(got), free(want);
}

static void test_quantize_error(void **state) {
    (void)state;
    enum { N = 2048 };
    float x[N], y[N];
    static uint8_t buf[N * 4];
    for (size_t t = 0; t < N_TYPES; t++) {
        const enum dtype ty = all_types[t];
        const int blk = dtype_get(ty)->block;
        for (int pattern = 0; pattern < 7; pattern++) {
            fill_pattern(x, N, pattern);
            quant_quantize_row(ty, x, buf, N);
            quant_dequant_row_ref(ty, buf, y, N);
            for (int b = 0; b < N; b += blk) {
                float lo = 0, hi = 0, amax = 0;
                for (int i = b; i < b + blk; i++)
                    lo = fminf(lo, x[i]), hi = fmaxf(hi, x[i]), amax = fmaxf(amax, fabsf(x[i]));
                for (int i = b; i < b + blk; i++) {
                    double bound;
                    if (ty == DT_F32)
                        bound = 0;
                    else if (ty == DT_F16)
                        bound = 0x1p-11 * fabsf(x[i]) + 0x1p-25;
                    else if (ty == DT_BF16)
                        bound = 0x1p-8 * fabsf(x[i]);
                    else /* + fp16 rounding of the block scales */
                        bound = err_fraction(ty) * (has_min(ty) ? hi - lo : 2 * amax) + 0x1p-10 * amax;
                    if (fabs((double)y[i] - x[i]) > bound)
                        fail_msg("%s pattern %d: x[%d] = %g -> %g (bound %g)", dtype_get(ty)->name, pattern, i, x[i],
                                 y[i], bound);
                }
            }
        }
    }
}

/* Q8_K's block sums and Q8_1's s are part of the format (the dots use
 * them), so check them directly. */
static void test_activation_sums(void **state) {
    (void)state;
    float x[512];
    struct block_q8_K k[2];
    struct block_q8_1 q[16];
    fill_pattern(x, 512, 0);
    quant_quantize_row(DT_Q8_K, x, k, 512);
    quant_quantize_row(DT_Q8_1, x, q, 512);
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += k[b].qs[16 * g + l];
            assert_int_equal(k[b].bsums[g], s);
        }
    for (int b = 0; b < 16; b++) {
        int s = 0;
        for (int l = 0; l < 32; l++) {
            s += q[b].qs[l];
            assert_true(q[b].qs[l] >= -127);
        }
        assert_int_equal(q[b].s, f32_to_fp16(fp16_to_f32(q[b].d) * (float)s));
    }
}

/* ---- fp16 / bf16 ---------------------------------------------------- */

__attribute__((target("f16c"))) static float hw_h2f(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) static uint16_t hw_f2h(float f) { return _cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT); }

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static void test_fp16(void **state) {
    (void)state;
    /* Hand-checked values. */
    assert_int_equal(f32_to_fp16(1.0f), 0x3c00);
    assert_int_equal(f32_to_fp16(-2.0f), 0xc000);
    assert_int_equal(f32_to_fp16(65504.0f), 0x7bff);
    assert_int_equal(f32_to_fp16(65519.0f), 0x7bff);
    assert_int_equal(f32_to_fp16(65520.0f), 0x7c00); /* rounds up to inf */
    assert_int_equal(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);     /* tie -> even */
    assert_int_equal(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02); /* tie -> even */
    assert_int_equal(f32_to_fp16(0x1p-24f), 0x0001);            /* smallest subnormal */
    assert_int_equal(f32_to_fp16(0x1p-25f), 0x0000);            /* tie -> even (0) */
    assert_int_equal(f32_to_fp16(0x1.8p-24f), 0x0002);          /* tie -> even (2) */
    assert_int_equal(f32_to_fp16(0x1p-14f), 0x0400);            /* smallest normal */
    assert_int_equal(f32_to_fp16(-0.0f), 0x8000);
    assert_int_equal(f32_to_fp16(INFINITY), 0x7c00);
    assert_int_equal(f32_to_fp16(-INFINITY), 0xfc00);
    assert_true((f32_to_fp16(NAN) & 0x7e00) == 0x7e00);
    assert_true(fp16_to_f32(0x0001) == 0x1p-24f);
    assert_true(fp16_to_f32(0x03ff) == 0x3ffp-24f);
    assert_true(fp16_to_f32(0xfbff) == -65504.0f);
    assert_true(isinf(fp16_to_f32(0x7c00)) && fp16_to_f32(0xfc00) < 0);
    assert_true(isnan(fp16_to_f32(0x7d00)));
    /* Every pattern round-trips (NaNs stay NaN, made quiet, sign kept). */
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = fp16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_int_equal(f32_to_fp16(f), h | 0x0200);
        else
            assert_int_equal(f32_to_fp16(f), h);
    }
    /* Against the hardware conversion, where there is one. */
    if (cpu_features().f16c) {
        for (uint32_t h = 0; h < 65536; h++)
            assert_int_equal(bits_of(fp16_to_f32((uint16_t)h)), bits_of(hw_h2f((uint16_t)h)));
        for (int i = 0; i < 300000; i++) {
            uint32_t u = rnd_u32();
            if (i % 2) /* concentrate on the fp16 range, subnormals included */
                u = (u & 0x807fffffu) | ((uint32_t)(95 + rnd_u32() % 50) << 23);
            assert_int_equal(f32_to_fp16(float_of(u)), hw_f2h(float_of(u)));
        }
    }
}

static void test_bf16(void **state) {
    (void)state;
    assert_true(bf16_to_f32(0x3f80) == 1.0f);
    assert_true(bf16_to_f32(0xc040) == -3.0f);
    assert_int_equal(f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);     /* tie -> even */
    assert_int_equal(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82); /* tie -> even */
    assert_int_equal(f32_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);
    assert_int_equal(f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(f32_to_bf16(float_of(0x7f7fffffu)), 0x7f80); /* FLT_MAX rounds to inf */
    assert_int_equal(f32_to_bf16(float_of(0x00010000u)), 0x0001); /* subnormal kept */
    assert_true(isnan(bf16_to_f32(f32_to_bf16(NAN))));
    assert_true(isnan(bf16_to_f32(f32_to_bf16(float_of(0x7f800001u))))); /* payload only in low bits */
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = bf16_to_f32((uint16_t)h);
        if (isnan(f))
            assert_true(isnan(bf16_to_f32(f32_to_bf16(f))));
        else
            assert_int_equal(f32_to_bf16(f), h);
    }
}

/* ---- table ---------------------------------------------------------- */

static void test_dtype_table(void **state) {
    (void)state;
    assert_null(dtype_get(DT_Q2_K));
    assert_null(dtype_get(DT_Q3_K));
    assert_null(dtype_get(4)); /* retired Q4_2 */
    assert_null(dtype_get(5));
    assert_null(dtype_get(16)); /* IQ types */
    assert_null(dtype_get(DT_COUNT));
    assert_null(dtype_get(1000));
    assert_null(dtype_get(UINT32_MAX));
    assert_string_equal(dtype_get(DT_Q4_K)->name, "q4_K");
    assert_string_equal(dtype_get(DT_BF16)->name, "bf16");
    assert_int_equal(dtype_get(DT_Q4_0)->vec_dot, DT_Q8_0);
    assert_int_equal(dtype_get(DT_Q5_0)->vec_dot, DT_Q8_0);
    assert_int_equal(dtype_get(DT_Q8_0)->vec_dot, DT_Q8_0);
    assert_int_equal(dtype_get(DT_Q4_1)->vec_dot, DT_Q8_1);
    assert_int_equal(dtype_get(DT_Q5_1)->vec_dot, DT_Q8_1);
    assert_int_equal(dtype_get(DT_Q6_K)->vec_dot, DT_Q8_K);
    assert_int_equal(dtype_get(DT_F16)->vec_dot, DT_F32);
    /* ggml sizes (bytes per block of 32 or 256). */
    assert_int_equal(dtype_row_bytes(DT_Q4_0, 32), 18);
    assert_int_equal(dtype_row_bytes(DT_Q4_1, 64), 40);
    assert_int_equal(dtype_row_bytes(DT_Q5_0, 32), 22);
    assert_int_equal(dtype_row_bytes(DT_Q5_1, 32), 24);
    assert_int_equal(dtype_row_bytes(DT_Q8_0, 4096), 128 * 34);
    assert_int_equal(dtype_row_bytes(DT_Q8_1, 32), 36);
    assert_int_equal(dtype_row_bytes(DT_Q4_K, 256), 144);
    assert_int_equal(dtype_row_bytes(DT_Q5_K, 512), 352);
    assert_int_equal(dtype_row_bytes(DT_Q6_K, 256), 210);
    assert_int_equal(dtype_row_bytes(DT_Q8_K, 256), 292);
    assert_int_equal(dtype_row_bytes(DT_F32, 3), 12);
    assert_int_equal(dtype_row_bytes(DT_F16, 3), 6);
    assert_int_equal(dtype_row_bytes(DT_BF16, 5), 10);
    assert_int_equal(dtype_row_bytes(DT_F32, 0), 0);
    /* Non-multiples, bad counts, unknown types, overflow. */
    assert_int_equal(dtype_row_bytes(DT_Q4_0, 33), 0);
    assert_int_equal(dtype_row_bytes(DT_Q4_K, 128), 0);
    assert_int_equal(dtype_row_bytes(DT_Q6_K, 255), 0);
    assert_int_equal(dtype_row_bytes(DT_F32, -4), 0);
    assert_int_equal(dtype_row_bytes(DT_Q2_K, 256), 0);
    assert_int_equal(dtype_row_bytes(99, 32), 0);
    assert_int_equal(dtype_row_bytes(DT_F32, INT64_MAX), 0);
}

static void test_unknown_type_is_harmless(void **state) {
    (void)state;
    float y[32];
    uint8_t junk[64] = {0};
    memset(y, 0xff, sizeof y);
    quant_dequant_row(DT_Q2_K, junk, y, 32);
    for (int i = 0; i < 32; i++)
        assert_true(y[i] == 0);
    float d[2] = {1, 1};
    quant_gemm_rows(DT_Q3_K, 256, junk, 0, 1, junk, 1, &d[0], 1);
    quant_gemm_rows((enum dtype)77, 32, junk, 0, 1, junk, 1, &d[1], 1);
    assert_true(d[0] == 0 && d[1] == 0);
    assert_int_equal(quant_batch_row_bytes(DT_Q3_K, 256), 0);
    assert_int_equal(quant_batch_row_bytes(DT_Q4_1, 33), 0);
}

static void test_simd_levels(void **state) {
    (void)state;
    enum simd_level lv[3];
    const int nl = levels(lv);
    assert_int_equal(lv[0], SIMD_SCALAR);
    for (int k = 0; k < nl; k++) {
        simd_set(lv[k]);
        assert_int_equal(simd_get(), lv[k]);
        assert_string_equal(kvf_simd_level(), simd_name(lv[k]));
    }
    /* Asking for more than the CPU has gives the most it has. */
    simd_set(SIMD_AVX512);
    assert_int_equal(simd_get(), lv[nl - 1]);
    assert_true(simd_detect() <= lv[nl - 1]);
    assert_string_equal(simd_name(SIMD_SCALAR), "scalar");
    assert_string_equal(simd_name(SIMD_AVX2), "avx2");
    assert_string_equal(simd_name(SIMD_AVX512), "avx512");
}

/* vec_sigmoid_mul and vec_exp_sum at every level against double
 * references: within 4e-7 relative (expf's and the shared polynomial's
 * error; the sigmoid's argument, rounded in float, adds |z| ulp), 1e-30
 * absolute where the exact value underflows (inputs past expf's range are
 * clamped); NaN stays NaN, -inf's exp is exactly 0; and an
 * element's value does not depend on the length of the call (vector or
 * tail). */
static void test_exp_kernels(void **state) {
    (void)state;
    enum { N = 77 };
    static const float edge[] = { 0.0f, -0.0f, 1e-30f, -1e-30f, 1e-3f, -0.25f, 3.0f, -3.0f, 12.0f, -12.0f,
                                  40.0f, -40.0f, 87.0f, -87.5f, 88.5f, -100.0f, 100.0f, 1e4f, -1e4f };
    float x[N], u[N], g[N], full[N], part[N];
    for (int i = 0; i < N; i++) {
        x[i] = i < (int)(sizeof edge / sizeof *edge) ? edge[i] : (float)((i * 7919 % 1000) / 50.0 - 10.0);
        u[i] = (float)(0.5 + (i % 5) * 0.37) * (i % 3 ? 1.0f : -1.0f);
    }
    const float c2 = 2 * 0.7978845608028654f;
    const float ab[3][2] = { { 1.0f, 0.0f }, { 1.702f, 0.0f }, { c2, c2 * 0.044715f } };
    enum simd_level lv[3];
    const int n_lv = levels(lv);
    for (int k = 0; k < n_lv; k++) {
        simd_set(lv[k]);
        for (int f = 0; f < 3; f++)
            for (int with_u = 0; with_u < 2; with_u++) {
                memcpy(full, x, sizeof x);
                vec_sigmoid_mul(full, with_u ? u : NULL, N, ab[f][0], ab[f][1]);
                for (int i = 0; i < N; i++) {
                    const double xd = x[i], z = ab[f][1] != 0 ? xd * (ab[f][0] + (double)ab[f][1] * xd * xd)
                                                             : ab[f][0] * xd;
                    const double ref = xd / (1 + exp(-z)) * (with_u ? u[i] : 1.0);
                    /* z itself is rounded in float: exp(-z) then carries |z| ulp-sized errors */
                    if (fabs(full[i] - ref) > (4e-7 + 2.5e-7 * fabs(z)) * fabs(ref) + 1e-30)
                        fail_msg("%s sigmoid_mul(%g, %g) at %g: %.9g, want %.9g", simd_name(lv[k]), ab[f][0],
                                 ab[f][1], x[i], full[i], ref);
                }
                for (int n = 1; n <= N; n += 5) { /* every length: the same values */
                    memcpy(part, x, sizeof x);
                    vec_sigmoid_mul(part, with_u ? u : NULL, n, ab[f][0], ab[f][1]);
                    assert_memory_equal(part, full, (size_t)n * sizeof *part);
                    assert_memory_equal(part + n, x + n, (size_t)(N - n) * sizeof *part); /* past n: untouched */
                }
            }
        /* softmax's use: every x - m <= 0, down into the range that underflows */
        float e[N];
        for (int i = 0; i < N; i++)
            e[i] = fabsf(x[i]) > 100 ? -200.0f : x[i];
        memcpy(g, e, sizeof e);
        g[3] = -INFINITY;
        g[5] = NAN;
        const float m = 100.0f;
        const double sum = vec_exp_sum(g, N, m);
        double want = 0;
        for (int i = 0; i < N; i++) {
            if (i == 3) {
                assert_true(g[i] == 0.0f);
                continue;
            }
            if (i == 5) {
                assert_true(isnan(g[i]));
                continue;
            }
            const double ref = exp((double)(e[i] - m)); /* of the float difference, as the kernels take it */
            want += ref;
            if (fabs(g[i] - ref) > 4e-7 * ref + 1e-30)
                fail_msg("%s exp(%g - %g): %.9g, want %.9g", simd_name(lv[k]), e[i], m, g[i], ref);
        }
        assert_true(isnan(sum)); /* the NaN reaches the sum, as in the scalar loop */
        memcpy(part, e, sizeof e);
        part[3] = -INFINITY;
        part[5] = -INFINITY;
        const double s2 = vec_exp_sum(part, N, m);
        if (fabs(s2 - want) > 1e-6 * want)
            fail_msg("%s exp sum %.9g, want %.9g", simd_name(lv[k]), s2, want);
        for (int n = 1; n <= 20; n++) { /* e^0 = 1 exactly: lanes past n add nothing */
            float z[20] = { 0 };
            assert_true(vec_exp_sum(z, n, 0.0f) == n && z[n - 1] == 1.0f);
        }
    }
    simd_set(SIMD_AVX512);
}

/* vec_max and vec_scale are exact: every level gives the
 * scalar loop's bits, NaN never the maximum, every length (tails). */
static void test_max_scale(void **state) {
    (void)state;
    enum { N = 77 };
    float x[N], a[N], b[N];
    for (int i = 0; i < N; i++)
        x[i] = (float)((i * 7919 % 1000) / 37.0 - 12.0);
    x[5] = NAN, x[9] = -INFINITY, x[40] = 1e30f, x[41] = -0.0f;
    enum simd_level lv[3];
    const int n_lv = levels(lv);
    for (int n = 0; n <= N; n++) {
        float want = -INFINITY;
        for (int i = 0; i < n; i++)
            want = x[i] > want ? x[i] : want;
        for (int i = 0; i < n; i++)
            a[i] = x[i] * 0.37f;
        for (int k = 0; k < n_lv; k++) {
            simd_set(lv[k]);
            const float got = vec_max(x, n);
            assert_memory_equal(&got, &want, sizeof got);
            memcpy(b, x, sizeof x);
            vec_scale(b, 0.37f, n);
            assert_memory_equal(b, a, (size_t)n * sizeof *b); /* NaN: the same bits too */
            assert_memory_equal(b + n, x + n, (size_t)(N - n) * sizeof *b);
        }
    }
    float nan2[3] = { NAN, NAN, NAN };
    assert_true(vec_max(nan2, 3) == -INFINITY);
    simd_set(SIMD_AVX512);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_q4_0_layout),
        cmocka_unit_test(test_q4_K_layout),
        cmocka_unit_test(test_q6_K_layout),
        cmocka_unit_test(test_dequant_matches_ref),
        cmocka_unit_test(test_dequant_f16_all_patterns),
        cmocka_unit_test(test_vec_dot),
        cmocka_unit_test(test_vec_dot_rows),
        cmocka_unit_test(test_rows_at),
        cmocka_unit_test(test_quantize_levels),
        cmocka_unit_test(test_rotate_levels),
        cmocka_unit_test(test_f32_helpers),
        cmocka_unit_test(test_quantize_error),
        cmocka_unit_test(test_activation_sums),
        cmocka_unit_test(test_fp16),
        cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_dtype_table),
        cmocka_unit_test(test_unknown_type_is_harmless),
        cmocka_unit_test(test_simd_levels),
        cmocka_unit_test(test_exp_kernels),
        cmocka_unit_test(test_max_scale),
        cmocka_unit_test(test_gemm),
        cmocka_unit_test(test_attn_products),
        cmocka_unit_test(test_ilv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
