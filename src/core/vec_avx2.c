/* AVX2 + FMA forms of the float-vector kernels (core/vec.h): the mapping
 * of vec_simd.h onto 8-float vectors, whose masks are vectors of 32-bit
 * lanes. Only called when cpuid reports the ISA. */

#include "quant_impl.h"
#include "vec.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

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
/* A tile: 4 query rows of one panel's two vectors; 2 rows of mix output. */
#define SCORES_R 4
#define SCORES_C 1
#define MIX_R 2

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

#include "vec_simd.h"

void vec_kernels_avx2(struct quant_kernels *k) {
    k->sigmoid_mul = sigmoid_mul;
    k->exp_sum = exp_sum;
    k->scores_f32 = scores_f32;
    k->mix_f32 = mix_f32;
    k->max_f32 = max_f32;
    k->scale_f32 = scale_f32;
}
