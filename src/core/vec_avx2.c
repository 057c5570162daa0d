/* AVX2 + FMA forms of the float-vector kernels (core/vec.h): prompt
 * attention's tile products, the activations and the softmax pieces. Every
 * one gives the scalar reference's bits, or stays within the bound its
 * header states (the exp polynomial). Only called when cpuid reports the ISA. */

#include "quant_impl.h"
#include "vec.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- prompt attention (tile_scores, tile_mix) -------------- */

/* Lanes below `left` (clamped to 0..8) of an 8-lane mask. */
static inline __m256i lanes_below(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left > 8 ? 8 : left > 0 ? left : 0)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* Scores of R query rows against one panel (two vectors) in 2 R registers,
 * as quant_avx512.c's scores_tile. */
static inline __attribute__((always_inline)) void scores_tile(int R, int64_t d, const float *q, size_t ldq,
                                                              const float *pan, float scale, float *out, size_t ldo,
                                                              int n) {
    __m256 acc[4][2];
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    for (int64_t k = 0; k < d; k++) {
        const __m256 b0 = _mm256_loadu_ps(pan + k * TILE_PANEL), b1 = _mm256_loadu_ps(pan + k * TILE_PANEL + 8);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256 a = _mm256_set1_ps(q[r * ldq + k]);
            acc[r][0] = _mm256_fmadd_ps(a, b0, acc[r][0]);
            acc[r][1] = _mm256_fmadd_ps(a, b1, acc[r][1]);
        }
    }
    const __m256 s = _mm256_set1_ps(scale);
    const __m256i m0 = lanes_below(n), m1 = lanes_below(n - 8);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++) {
        _mm256_maskstore_ps(out + r * ldo, m0, _mm256_mul_ps(acc[r][0], s));
        if (n > 8)
            _mm256_maskstore_ps(out + r * ldo + 8, m1, _mm256_mul_ps(acc[r][1], s));
    }
}

static void scores_f32(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                       float *out, size_t ldo) {
    for (int p = 0; p * TILE_PANEL < n; p++) {
        const float *pan = panels + (size_t)p * TILE_PANEL * d;
        const int left = n - TILE_PANEL * p;
        size_t i = 0;
        for (; i + 4 <= (size_t)nq; i += 4)
            scores_tile(4, d, q + i * ldq, ldq, pan, scale, out + i * ldo + TILE_PANEL * p, ldo, left);
        for (; i < (size_t)nq; i++)
            scores_tile(1, d, q + i * ldq, ldq, pan, scale, out + i * ldo + TILE_PANEL * p, ldo, left);
    }
}

/* As quant_avx512.c's mix_tile, on V of up to four 8-value vectors. */
static inline __attribute__((always_inline)) void mix_tile(int R, int V, const float *w, size_t ldw, const float *v,
                                                           int64_t d, int n, float *y, size_t ldy, int64_t left,
                                                           bool first) {
    __m256 acc[2][4];
    __m256i m[4];
    #pragma GCC unroll 8
    for (int c = 0; c < V; c++)
        m[c] = lanes_below(left - 8 * c);
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            acc[r][c] = first ? _mm256_setzero_ps() : _mm256_maskload_ps(y + r * ldy + 8 * c, m[c]);
    for (int j = 0; j < n; j++) {
        __m256 b[4];
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            b[c] = _mm256_maskload_ps(v + (size_t)j * d + 8 * c, m[c]);
        #pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            const __m256 a = _mm256_set1_ps(w[r * ldw + j]);
            #pragma GCC unroll 8
            for (int c = 0; c < V; c++)
                acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    #pragma GCC unroll 8
    for (int r = 0; r < R; r++)
        #pragma GCC unroll 8
        for (int c = 0; c < V; c++)
            _mm256_maskstore_ps(y + r * ldy + 8 * c, m[c], acc[r][c]);
}

MIX_F32(8, 2)

/* ---- activations and softmax ------------------------------------- */

/* e^x by EXP_POLY (quant_impl.h), as the AVX-512 exp16; 2^k is built in
 * the exponent bits (EXP_MAX keeps k <= 127). */
static inline __m256 exp8(__m256 x) {
    const __m256 c = _mm256_max_ps(_mm256_set1_ps(EXP_MIN), _mm256_min_ps(_mm256_set1_ps(EXP_MAX), x));
    const __m256 k =
        _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(EXP_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 r =
        _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_LO), _mm256_fnmadd_ps(k, _mm256_set1_ps(EXP_LN2_HI), c));
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(EXP_POLY_5), r, _mm256_set1_ps(EXP_POLY_4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_POLY_3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_POLY_2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_POLY_1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EXP_POLY_0));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    const __m256 e = _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ), e);
}

/* A tail of fewer than 8 floats, as one vector: every element goes through
 * the same code whatever the length. */
static inline __m256 load_tail(const float *p, int64_t n, float fill) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = j < n ? p[j] : fill;
    return _mm256_loadu_ps(t);
}

static inline void store_tail(float *p, int64_t n, __m256 v) {
    float t[8];
    _mm256_storeu_ps(t, v);
    memcpy(p, t, (size_t)n * sizeof *p);
}

static void sigmoid_mul(float *g, const float *u, int64_t n, float a, float b) {
    const __m256 va = _mm256_set1_ps(a), vb = _mm256_set1_ps(b), one = _mm256_set1_ps(1.0f);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t left = n - i;
        const __m256 x = left >= 8 ? _mm256_loadu_ps(g + i) : load_tail(g + i, left, 0.0f);
        const __m256 z = b != 0 ? _mm256_mul_ps(x, _mm256_fmadd_ps(_mm256_mul_ps(vb, x), x, va)) : _mm256_mul_ps(va, x);
        __m256 y = _mm256_div_ps(x, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), z))));
        if (u) y = _mm256_mul_ps(y, left >= 8 ? _mm256_loadu_ps(u + i) : load_tail(u + i, left, 0.0f));
        if (left >= 8) _mm256_storeu_ps(g + i, y);
        else store_tail(g + i, left, y);
    }
}

/* max(x, acc) takes acc where x is NaN, so NaN never wins. */
static float max_f32(const float *x, int64_t n) {
    __m256 acc = _mm256_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t left = n - i;
        acc = _mm256_max_ps(left >= 8 ? _mm256_loadu_ps(x + i) : load_tail(x + i, left, -INFINITY), acc);
    }
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, acc);
    for (int j = 0; j < 8; j++)
        m = t[j] > m ? t[j] : m;
    return m;
}

static void scale_f32(float *x, float a, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), va));
    for (; i < n; i++)
        x[i] *= a;
}

static double exp_sum(float *x, int64_t n, float m) {
    const __m256 vm = _mm256_set1_ps(m);
    __m256d lo = _mm256_setzero_pd(), hi = _mm256_setzero_pd();
    for (int64_t i = 0; i < n; i += 8) {
        const int64_t left = n - i;
        const __m256 e =
            exp8(_mm256_sub_ps(left >= 8 ? _mm256_loadu_ps(x + i) : load_tail(x + i, left, -INFINITY), vm));
        if (left >= 8) _mm256_storeu_ps(x + i, e);
        else store_tail(x + i, left, e);
        lo = _mm256_add_pd(lo, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        hi = _mm256_add_pd(hi, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double t[4];
    _mm256_storeu_pd(t, _mm256_add_pd(lo, hi));
    return (t[0] + t[1]) + (t[2] + t[3]);
}

void vec_kernels_avx2(struct quant_kernels *k) {
    k->sigmoid_mul = sigmoid_mul;
    k->exp_sum = exp_sum;
    k->scores_f32 = scores_f32;
    k->mix_f32 = mix_f32;
    k->max_f32 = max_f32;
    k->scale_f32 = scale_f32;
}
