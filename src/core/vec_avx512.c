/* AVX-512 (F, BW, VL, DQ) forms of the float-vector kernels (core/vec.h): prompt
 * attention's tile products, the activations and the softmax pieces. Every
 * one gives the scalar reference's bits, or stays within the bound its
 * header states (the exp polynomial). Only called when cpuid reports the ISA. */

#include "quant_impl.h"
#include "vec.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- prompt attention (tile_scores, tile_mix) -------------- */

/* Scores of R query rows against C panels (16 C keys) in R x C registers:
 * per key value one load a panel and one broadcast a row. R and C are
 * constants at every call, so acc[][] lives in registers. */
static inline __attribute__((always_inline)) void scores_tile(int R, int C, int64_t d, const float *q, size_t ldq,
                                                              const float *pan, float scale, float *out, size_t ldo,
                                                              int n) {
    __m512 acc[8][2];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < d; k++) {
        __m512 b[2];
        #pragma GCC unroll 8
        for (int c = 0; c < C; c++)
            b[c] = _mm512_loadu_ps(pan + (size_t)c * TILE_PANEL * d + k * TILE_PANEL);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(q[r * ldq + k]);
            #pragma GCC unroll 8
            for (int c = 0; c < C; c++)
                acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    const __m512 s = _mm512_set1_ps(scale);
    #pragma GCC unroll 8
    for (int c = 0; c < C; c++) {
        const int left = n - TILE_PANEL * c;
        const __mmask16 m = left >= TILE_PANEL ? 0xffff : tail_mask(left);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            _mm512_mask_storeu_ps(out + r * ldo + TILE_PANEL * c, m, _mm512_mul_ps(acc[r][c], s));
    }
}

/* Two panels at a time (8 KiB at d = 64) stay in L1 while every row group
 * of the block reads them. (24 accumulators, for three panels or 12 rows,
 * made GCC spill them.) */
static void scores_f32(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                       float *out, size_t ldo) {
    for (int p = 0; p * TILE_PANEL < n; p += 2) {
        const float *pan = panels + (size_t)p * TILE_PANEL * d;
        const int left = n - TILE_PANEL * p;
#define SCORES(R, C) scores_tile(R, C, d, q + i * ldq, ldq, pan, scale, out + i * ldo + TILE_PANEL * p, ldo, left)
        size_t i = 0;
        for (; i + 8 <= (size_t)nq; i += 8)
            left > TILE_PANEL ? SCORES(8, 2) : SCORES(8, 1);
        for (; i + 4 <= (size_t)nq; i += 4)
            left > TILE_PANEL ? SCORES(4, 2) : SCORES(4, 1);
        for (; i < (size_t)nq; i++)
            left > TILE_PANEL ? SCORES(1, 2) : SCORES(1, 1);
#undef SCORES
    }
}

/* R rows of the output, V vectors (up to 64 values) of each, over n keys
 * (MIX_F32 in quant_impl.h): per key V loads of the value row and one
 * broadcast weight a row. */
static inline __attribute__((always_inline)) void mix_tile(int R, int V, const float *w, size_t ldw, const float *v,
                                                           int64_t d, int n, float *y, size_t ldy, int64_t left,
                                                           bool first) {
    __m512 acc[4][4];
    __mmask16 m[4];
    #pragma GCC unroll 8
    for (int c = 0; c < V; c++)
        m[c] = left - 16 * c >= 16 ? 0xffff : tail_mask(left - 16 * c);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            acc[r][c] = first ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m[c], y + r * ldy + 16 * c);
    for (int j = 0; j < n; j++) {
        __m512 b[4];
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            b[c] = _mm512_maskz_loadu_ps(m[c], v + (size_t)j * d + 16 * c);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m512 a = _mm512_set1_ps(w[r * ldw + j]);
            #pragma GCC unroll 8
            for (int c = 0; c < V; c++)
                acc[r][c] = _mm512_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            _mm512_mask_storeu_ps(y + r * ldy + 16 * c, m[c], acc[r][c]);
}

MIX_F32(16, 4)

/* ---- activations and softmax ------------------------------------- */

/* e^x by EXP_POLY (quant_impl.h); NaN stays NaN (min/max return their
 * second operand when one is NaN), under EXP_MIN gives 0. */
static inline __m512 exp16(__m512 x) {
    const __m512 c = _mm512_max_ps(_mm512_set1_ps(EXP_MIN), _mm512_min_ps(_mm512_set1_ps(EXP_MAX), x));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(EXP_LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512 r =
        _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_LO), _mm512_fnmadd_ps(k, _mm512_set1_ps(EXP_LN2_HI), c));
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(EXP_POLY_5), r, _mm512_set1_ps(EXP_POLY_4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_POLY_3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_POLY_2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_POLY_1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EXP_POLY_0));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    const __m512 e = _mm512_scalef_ps(p, k);
    return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ), e);
}

static void sigmoid_mul(float *g, const float *u, int64_t n, float a, float b) {
    const __m512 va = _mm512_set1_ps(a), vb = _mm512_set1_ps(b), one = _mm512_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 z = b != 0 ? _mm512_mul_ps(x, _mm512_fmadd_ps(_mm512_mul_ps(vb, x), x, va)) : _mm512_mul_ps(va, x);
        __m512 y = _mm512_div_ps(x, _mm512_add_ps(one, exp16(_mm512_sub_ps(_mm512_setzero_ps(), z))));
        if (u) y = _mm512_mul_ps(y, _mm512_maskz_loadu_ps(m, u + i));
        _mm512_mask_storeu_ps(g + i, m, y);
    }
}

/* max(x, acc) takes acc where x is NaN, so NaN never wins. */
static float max_f32(const float *x, int64_t n) {
    __m512 acc = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? 0xffff : tail_mask(n - i);
        acc = _mm512_max_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t, x + i), acc);
    }
    return _mm512_reduce_max_ps(acc);
}

static void scale_f32(float *x, float a, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? 0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, t, _mm512_mul_ps(_mm512_maskz_loadu_ps(t, x + i), va));
    }
}

static double exp_sum(float *x, int64_t n, float m) {
    const __m512 vm = _mm512_set1_ps(m);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 t = n - i >= 16 ? 0xffff : tail_mask(n - i);
        /* masked-off lanes load -inf: their exp is 0 */
        const __m512 e = exp16(_mm512_sub_ps(_mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), t, x + i), vm));
        _mm512_mask_storeu_ps(x + i, t, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    return _mm512_reduce_add_pd(_mm512_add_pd(lo, hi));
}

void vec_kernels_avx512(struct quant_kernels *k) {
    k->sigmoid_mul = sigmoid_mul;
    k->exp_sum = exp_sum;
    k->scores_f32 = scores_f32;
    k->mix_f32 = mix_f32;
    k->max_f32 = max_f32;
    k->scale_f32 = scale_f32;
}
