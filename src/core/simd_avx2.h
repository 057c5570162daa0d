/* The mapping of the width-generic SIMD bodies (vec_simd.h, kv_rows_simd.h)
 * onto AVX2 + FMA: 8-float vectors whose masks are vectors of 32-bit lanes;
 * the names are listed in vec_simd.h. Included by the AVX2 files only. */
#ifndef KVF_CORE_SIMD_AVX2_H
#define KVF_CORE_SIMD_AVX2_H

#include "quant_impl.h"

#include <immintrin.h>
#include <math.h>

#define VW 8
typedef __m256 vf;
typedef __m256i vmask;
typedef __m256d vd;
#define V_ZERO() _mm256_setzero_ps()
#define V_SET1(x) _mm256_set1_ps(x)
#define V_LOAD(p) _mm256_loadu_ps(p)
#define V_STORE(p, v) _mm256_storeu_ps(p, v)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_DIV(a, b) _mm256_div_ps(a, b)
#define V_MIN(a, b) _mm256_min_ps(a, b)
#define V_MAX(a, b) _mm256_max_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm256_fnmadd_ps(a, b, c)
#define V_LOADM(m, p) _mm256_maskload_ps(p, m)
#define V_STOREM(p, m, v) _mm256_maskstore_ps(p, m, v)
#define VD_ZERO() _mm256_setzero_pd()
#define VD_ADD(a, b) _mm256_add_pd(a, b)

static inline vmask v_mask(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(left > 8 ? 8 : left > 0 ? left : 0)),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

static inline vf v_load_fill(vmask m, const float *p, float fill) {
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
}

static inline vf v_round(vf x) { return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }

/* 2^k built in the exponent bits (EXP_MAX keeps k <= 127). */
static inline vf v_scale2k(vf p, vf k) {
    const __m256i two_k = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(two_k));
}

static inline vf v_zero_under(vf x, vf e) {
    return _mm256_andnot_ps(_mm256_cmp_ps(x, _mm256_set1_ps(EXP_MIN), _CMP_LT_OQ), e);
}

static inline float v_hmax(vf v) {
    float t[8], m = -INFINITY;
    _mm256_storeu_ps(t, v);
    for (int j = 0; j < 8; j++)
        m = t[j] > m ? t[j] : m;
    return m;
}

static inline vd vd_lo(vf e) { return _mm256_cvtps_pd(_mm256_castps256_ps128(e)); }
static inline vd vd_hi(vf e) { return _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)); }
static inline double vd_sum(vd v) {
    double t[4];
    _mm256_storeu_pd(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

#endif
