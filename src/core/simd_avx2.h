/* The mapping of the width-generic SIMD bodies (vec_simd.h, quant_simd.h)
 * onto AVX2 + FMA: 8-float vectors whose masks are vectors of 32-bit lanes;
 * the names are listed in vec_simd.h and quant_simd.h. Included by the AVX2
 * files only. */
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

typedef __m256i vi;
#define VI_ZERO() _mm256_setzero_si256()
#define VI_LOAD(p) _mm256_loadu_si256((const __m256i *)(const void *)(p))
#define VI_SET1_8(x) _mm256_set1_epi8(x)
#define VI_SET1_32(x) _mm256_set1_epi32(x)
#define VI_AND(a, b) _mm256_and_si256(a, b)
#define VI_OR(a, b) _mm256_or_si256(a, b)
#define VI_ADD32(a, b) _mm256_add_epi32(a, b)
#define VI_SUB8(a, b) _mm256_sub_epi8(a, b)
#define VI_SLLI16(v, k) _mm256_slli_epi16(v, k)
#define VI_SRLI16(v, k) _mm256_srli_epi16(v, k)
#define VI_SRLI32(v, k) _mm256_srli_epi32(v, k)
#define VI_MADDUBS(u, s) _mm256_maddubs_epi16(u, s)
#define VI_MADD16(a, b) _mm256_madd_epi16(a, b)
#define VI_TO_F(v) _mm256_cvtepi32_ps(v)
#define V_TO_I(v) _mm256_cvtps_epi32(v)
#define VI_FROM256(v) (v)
#define VI_U8(p) _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)(p)))

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

/* Halves, then elements 0 + 2 and 1 + 3, then the last two. */
static inline float v_hsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline vf v_abs(vf x) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x); }

static inline vf v_i8(const int8_t *p) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(const void *)p)));
}

static inline vf v_i8_of(__m128i x, int l) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(l ? _mm_srli_si128(x, 8) : x));
}

static inline __m128i vi_bytes16(vi v, int g) { return g ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v); }

static inline vd vd_lo(vf e) { return _mm256_cvtps_pd(_mm256_castps256_ps128(e)); }
static inline vd vd_hi(vf e) { return _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)); }
static inline double vd_sum(vd v) {
    double t[4];
    _mm256_storeu_pd(t, v);
    return (t[0] + t[1]) + (t[2] + t[3]);
}

#endif
