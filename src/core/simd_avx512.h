/* The mapping of the width-generic SIMD bodies (vec_simd.h, kv_rows_simd.h)
 * onto AVX-512 (F, BW, VL, DQ): 16-float vectors with mask registers;
 * the names are listed in vec_simd.h. Included by the AVX-512 files only. */
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

static inline vd vd_lo(vf e) { return _mm512_cvtps_pd(_mm512_castps512_ps256(e)); }
static inline vd vd_hi(vf e) {
    return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
}
static inline double vd_sum(vd v) { return _mm512_reduce_add_pd(v); }

#endif
