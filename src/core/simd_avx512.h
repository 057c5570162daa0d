/* The mapping of the width-generic SIMD bodies (vec_simd.h, quant_simd.h)
 * onto AVX-512 (F, BW, VL, DQ): 16-float vectors with mask registers;
 * the names are listed in vec_simd.h and quant_simd.h. Included by the
 * AVX-512 files only. */
#ifndef KVF_CORE_SIMD_AVX512_H
#define KVF_CORE_SIMD_AVX512_H

#include "quant_impl.h"

#include <immintrin.h>
#include <math.h>

#define VW 16
typedef __m512 vf;
typedef __mmask16 vmask;
typedef __m512d vd;
#define V_ZERO() _mm512_setzero_ps()
#define V_SET1(x) _mm512_set1_ps(x)
#define V_LOAD(p) _mm512_loadu_ps(p)
#define V_STORE(p, v) _mm512_storeu_ps(p, v)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_DIV(a, b) _mm512_div_ps(a, b)
#define V_MIN(a, b) _mm512_min_ps(a, b)
#define V_MAX(a, b) _mm512_max_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_FNMA(a, b, c) _mm512_fnmadd_ps(a, b, c)
#define V_LOADM(m, p) _mm512_maskz_loadu_ps(m, p)
#define V_STOREM(p, m, v) _mm512_mask_storeu_ps(p, m, v)
#define VD_ZERO() _mm512_setzero_pd()
#define VD_ADD(a, b) _mm512_add_pd(a, b)

typedef __m512i vi;
#define VI_ZERO() _mm512_setzero_si512()
#define VI_LOAD(p) _mm512_loadu_si512((const void *)(p))
#define VI_SET1_8(x) _mm512_set1_epi8(x)
#define VI_SET1_32(x) _mm512_set1_epi32(x)
#define VI_AND(a, b) _mm512_and_si512(a, b)
#define VI_OR(a, b) _mm512_or_si512(a, b)
#define VI_ADD32(a, b) _mm512_add_epi32(a, b)
#define VI_SUB8(a, b) _mm512_sub_epi8(a, b)
#define VI_SLLI16(v, k) _mm512_slli_epi16(v, k)
#define VI_SRLI16(v, k) _mm512_srli_epi16(v, k)
#define VI_SRLI32(v, k) _mm512_srli_epi32(v, k)
#define VI_MADDUBS(u, s) _mm512_maddubs_epi16(u, s)
#define VI_MADD16(a, b) _mm512_madd_epi16(a, b)
#define VI_TO_F(v) _mm512_cvtepi32_ps(v)
#define V_TO_I(v) _mm512_cvtps_epi32(v)
#define VI_FROM256(v) _mm512_zextsi256_si512(v)
#define VI_U8(p) _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(p)))

static inline vmask v_mask(int64_t left) { return left >= 16 ? 0xffff : left > 0 ? tail_mask(left) : 0; }

static inline vf v_load_fill(vmask m, const float *p, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), m, p);
}

static inline vf v_round(vf x) { return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
static inline vf v_scale2k(vf p, vf k) { return _mm512_scalef_ps(p, k); }

static inline vf v_zero_under(vf x, vf e) {
    return _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(x, _mm512_set1_ps(EXP_MIN), _CMP_LT_OQ), e);
}

static inline float v_hmax(vf v) { return _mm512_reduce_max_ps(v); }

/* Halves, quarters, then elements 0 + 2 and 1 + 3, then the last two, as
 * _mm512_reduce_add_ps sums them in GCC, written out so that the KV rows'
 * reduce16 can take the same tree whatever the compiler (clang's
 * _mm512_reduce_add_ps may pair lanes otherwise, so a clang build's numbers
 * may differ from its earlier ones by rounding). */
static inline float v_hsum(vf v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

static inline vf v_abs(vf x) { return _mm512_abs_ps(x); }

static inline vf v_i8(const int8_t *p) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)));
}

static inline vf v_i8_of(__m128i x, int l) {
    (void)l;
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(x));
}

/* A switch, as the extract takes an immediate. */
static inline __m128i vi_bytes16(vi v, int g) {
    switch (g) {
    case 0: return _mm512_extracti32x4_epi32(v, 0);
    case 1: return _mm512_extracti32x4_epi32(v, 1);
    case 2: return _mm512_extracti32x4_epi32(v, 2);
    default: return _mm512_extracti32x4_epi32(v, 3);
    }
}

static inline vd vd_lo(vf e) { return _mm512_cvtps_pd(_mm512_castps512_ps256(e)); }
static inline vd vd_hi(vf e) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
}
static inline double vd_sum(vd v) { return _mm512_reduce_add_pd(v); }

#endif
