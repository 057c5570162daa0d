/* AVX2 + FMA + F16C kernels. Integer dots follow ggml's scheme: unsigned
 * weight codes times signed activations with vpmaddubsw (pairs into int16),
 * vpmaddwd by the per-sub-block scale (into int32), then one float FMA by
 * the block scale. Only called when cpuid reports the ISA. */

#include "simd_avx2.h"

#include "common.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------- */

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 16 packed bytes -> 32 codes 0..15: low nibbles first, then high ones
 * (the Q4_0/Q4_1 order). */
static inline __m256i nibbles_32(const uint8_t *qs) {
    const __m128i t = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(t, 4), t), _mm256_set1_epi8(0x0f));
}

/* Sum of u[i]*s[i] (u unsigned, s signed bytes) in 8 int32 lanes. */
static inline __m256i dot_u8_i8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* Broadcast of int16 word k of v (both 128-bit halves hold the same 8
 * words) to every lane, for k = 0..7. */
static const uint8_t word_bcast[8][32] = {
#define W(k) {2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, \
              2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, \
              2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1}
    W(0), W(1), W(2), W(3), W(4), W(5), W(6), W(7),
#undef W
};

static inline __m256i word_lane(__m256i v, int k) {
    return _mm256_shuffle_epi8(v, _mm256_loadu_si256((const __m256i *)word_bcast[k]));
}

/* Q6_K scale pairs: byte g in the low 8 lanes, g+1 in the high 8, for
 * g = 0, 2, ..., 14 (index g/2). Sign-extended to words afterwards. */
static const uint8_t q6_scale_pair[8][16] = {
#define P(g) {g, g, g, g, g, g, g, g, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1}
    P(0), P(2), P(4), P(6), P(8), P(10), P(12), P(14),
#undef P
};

/* The four 32-byte code vectors (0..63) of one 128-value half of a Q6_K
 * block, in output order. */
static inline void q6_codes(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), m2 = _mm256_set1_epi8(0x30);
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, m4), _mm256_and_si256(_mm256_slli_epi16(h, 4), m2));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_and_si256(_mm256_slli_epi16(h, 2), m2));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m4), _mm256_and_si256(h, m2));
    q[3] =
        _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(h, 2), m2));
}

/* Copies a row tail of fewer than `width` elements into a zeroed buffer so
 * the vector body can finish it. */
#define TAIL_COPY(buf, src, elem, count) \
    do {                                  \
        memset(buf, 0, sizeof buf);       \
        memcpy(buf, src, (size_t)(count) * (elem)); \
    } while (0)

/* ---- f32 / f16 / bf16 ----------------------------------------------- */

/* a . b in 8 lanes, before their sum. */
static inline __m256 dot_f32_lanes(const float *a, const float *b, int64_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
        s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
        s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    if (i < n) {
        const __m256i m =
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        s1 = _mm256_fmadd_ps(_mm256_maskload_ps(a + i, m), _mm256_maskload_ps(b + i, m), s1);
    }
    return _mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3));
}

static float dot_f32(const float *a, const float *b, int64_t n) { return hsum_ps(dot_f32_lanes(a, b, n)); }

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        const __m256i m =
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(va, _mm256_maskload_ps(x + i, m), _mm256_maskload_ps(y + i, m)));
    }
}

static float dot_f32_row(int64_t n, const void *w, const void *x) { return dot_f32(w, x, n); }

static inline __m256 load_f16x8(const uint16_t *h) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)h)); }

static inline __m256 load_bf16x8(const uint16_t *h) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)h));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* f16 and bf16 rows share everything but the 8-lane widening load. */
#define HALF_ROW_KERNELS(name, load)                                                     \
    static inline __m256 dot_##name##_lanes(int64_t n, const void *w, const float *y) {   \
        const uint16_t *h = w;                                                            \
        __m256 s0 = _mm256_setzero_ps(), s1 = s0;                                         \
        int64_t i = 0;                                                                    \
        for (; i + 16 <= n; i += 16) {                                                    \
            s0 = _mm256_fmadd_ps(load(h + i), _mm256_loadu_ps(y + i), s0);                \
            s1 = _mm256_fmadd_ps(load(h + i + 8), _mm256_loadu_ps(y + i + 8), s1);        \
        }                                                                                 \
        for (; i < n; i += 8) {                                                           \
            uint16_t hb[8];                                                               \
            float yb[8];                                                                  \
            const int64_t k = KVF_MIN((int64_t)8, n - i);                                      \
            TAIL_COPY(hb, h + i, sizeof *h, k);                                           \
            TAIL_COPY(yb, y + i, sizeof *y, k);                                           \
            s0 = _mm256_fmadd_ps(load(hb), _mm256_loadu_ps(yb), s0);                      \
        }                                                                                 \
        return _mm256_add_ps(s0, s1);                                                     \
    }                                                                                     \
    static float dot_##name##_row(int64_t n, const void *w, const void *x) {              \
        return hsum_ps(dot_##name##_lanes(n, w, x));                                      \
    }                                                                                     \
    static void dequant_##name(const void *src, float *dst, int64_t n) {                  \
        const uint16_t *h = src;                                                          \
        int64_t i = 0;                                                                    \
        for (; i + 8 <= n; i += 8)                                                        \
            _mm256_storeu_ps(dst + i, load(h + i));                                       \
        if (i < n) {                                                                      \
            uint16_t hb[8];                                                               \
            float out[8];                                                                 \
            TAIL_COPY(hb, h + i, sizeof *h, n - i);                                       \
            _mm256_storeu_ps(out, load(hb));                                              \
            memcpy(dst + i, out, (size_t)(n - i) * sizeof *dst);                          \
        }                                                                                 \
    }

HALF_ROW_KERNELS(f16, load_f16x8)
HALF_ROW_KERNELS(bf16, load_bf16x8)

/* ---- activation quantisation ---------------------------------------- */

/* max(|x|, acc) keeps acc where |x| is NaN, as fmaxf does. */
static float absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < 32; j += 8)
        m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

/* Clamped in float first (max(NaN, lo) is lo), then rounded half to even
 * by the default MXCSR mode, as lrintf. */
static int codes32(const float *x, float id, int8_t qs[32]) {
    const __m256 v = _mm256_set1_ps(id), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    __m256i q[4];
    for (int j = 0; j < 4; j++)
        q[j] = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * j), v), lo), hi));
    /* The packs work within 128-bit lanes: put the 32 bytes back in order. */
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)qs, _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

/* ---- 32-value blocks ------------------------------------------------ */

/* The 32-value block formats against activations in the batch form
 * (quant_quantize_batch), one weight row against up to four activation
 * rows at a time: w_*() unpacks a weight block once for every row, x_*()
 * multiplies it with a row's 32 codes into 8 exact float partial sums. */
struct wcodes {
    __m256i u;   /* unsigned codes (Q8_0: their magnitudes) */
    __m256i sgn; /* Q8_0: the codes, for their signs */
};

static inline struct wcodes w_q4_0(const struct block_q4_0 *a) { return (struct wcodes){ nibbles_32(a->qs), {0} }; }
static inline struct wcodes w_q4_1(const struct block_q4_1 *a) { return (struct wcodes){ nibbles_32(a->qs), {0} }; }

/* Q5_0/Q5_1: the nibbles plus bit j of qh as bit 4 of value j. Byte j of
 * the mask gets qh's byte j/8, and then everything but its bit j%8 set:
 * it is all ones exactly where that bit is. */
static inline __m256i fives_32(const uint8_t *qs, const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                               _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL,
                                                                  0x0303030303030303LL));
    const __m256i others = _mm256_set1_epi64x(0x7fbfdfeff7fbfdfeLL);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_or_si256(spread, others), _mm256_set1_epi64x(-1));
    return _mm256_or_si256(nibbles_32(qs), _mm256_and_si256(set, _mm256_set1_epi8(0x10)));
}

static inline struct wcodes w_q5_0(const struct block_q5_0 *a) {
    return (struct wcodes){ fives_32(a->qs, a->qh), { 0 } };
}
static inline struct wcodes w_q5_1(const struct block_q5_1 *a) {
    return (struct wcodes){ fives_32(a->qs, a->qh), { 0 } };
}

static inline struct wcodes w_q8_0(const struct block_q8_0 *a) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)a->qs);
    return (struct wcodes){ _mm256_sign_epi8(q, q), q };
}

static inline __m256 x_q4_0(struct wcodes w, __m256i y) {
    /* (q - 8) * y without a signed*signed multiply. */
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w.u, y), _mm256_maddubs_epi16(_mm256_set1_epi8(8), y));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline __m256 x_q4_1(struct wcodes w, __m256i y) { return _mm256_cvtepi32_ps(dot_u8_i8(w.u, y)); }

static inline __m256 x_q5_0(struct wcodes w, __m256i y) {
    /* (q - 16) * y, as x_q4_0 */
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(w.u, y), _mm256_maddubs_epi16(_mm256_set1_epi8(16), y));
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p, _mm256_set1_epi16(1)));
}

static inline __m256 x_q8_0(struct wcodes w, __m256i y) {
    /* |q| * (y with q's sign): y is within [-127, 127] (quant_q8_32) so
     * negating it cannot overflow; |q| = 128 is fine as unsigned. */
    return _mm256_cvtepi32_ps(dot_u8_i8(w.u, _mm256_sign_epi8(y, w.sgn)));
}

static inline float hsum128_ps(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* The fp16 scale d of blocks p, p + k1, p + k2, p + k3 (stride bytes
 * apart) and the two bytes after it (Q4_1/Q5_1's offset m) as floats,
 * block k's in lanes 2k and 2k + 1: a 32-bit load a block and one
 * conversion, where inserting 16-bit fields one by one cost more. For the
 * formats without m, lanes 2k + 1 convert two code bytes as if they were
 * fp16 (unused; a NaN there only sets the invalid flag, which is masked). */
static inline __m256 dm_of4(const void *p, size_t stride, int k1, int k2, int k3) {
    const uint8_t *b = p;
    uint32_t v[4];
    memcpy(&v[0], b, 4), memcpy(&v[1], b + (size_t)k1 * stride, 4);
    memcpy(&v[2], b + (size_t)k2 * stride, 4), memcpy(&v[3], b + (size_t)k3 * stride, 4);
    const __m128i lo = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)v[0]), _mm_cvtsi32_si128((int)v[1]));
    const __m128i hi = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)v[2]), _mm_cvtsi32_si128((int)v[3]));
    return _mm256_cvtph_ps(_mm_unpacklo_epi64(lo, hi));
}

static inline __m256 lane8_ps(__m256 v, int k) { return _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(k)); }

/* Four blocks per step: the weight side (codes, and scales d and offsets m
 * of blocks 0, k1, k2, k3 converted together, each scale spread over 8
 * lanes) is made once for all rows; per row, its codes and its repeated
 * scales are loaded as they lie. Whole groups run with every index and
 * mask constant; in the last, partial group the missing blocks (weights
 * and activations) repeat block 0 under a zero weight scale, and the
 * activation sums are loaded under a mask. `min`: the format has an offset
 * m, whose terms m * s are summed on the side. Each row's arithmetic is
 * the same whatever nr is. */
#define ROWS_DOT_32(name, wt, w_block, x_block, min)                                                         \
    static inline __attribute__((always_inline)) void name##_group(                                          \
        const wt *p, const int cnt, const uint8_t *xb, size_t rb, int64_t n, int64_t i, const int nr,        \
        __m256 *acc, __m128 *off) {                                                                          \
        const int k1 = cnt > 1, k2 = cnt > 2 ? 2 : 0, k3 = cnt > 3 ? 3 : 0;                                  \
        const __m128i keep = _mm_cmpgt_epi32(_mm_set1_epi32(cnt), _mm_setr_epi32(0, 1, 2, 3));               \
        quant_prefetch(p, 4 * sizeof(wt));                                                                   \
        __m256 dm = dm_of4(p, sizeof(wt), k1, k2, k3);                                                       \
        if (cnt < 4)                                                                                         \
            dm = _mm256_and_ps(dm, _mm256_castsi256_ps(_mm256_cmpgt_epi32(                                   \
                                       _mm256_set1_epi32(2 * cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)))); \
        const __m256 wd0 = lane8_ps(dm, 0), wd1 = lane8_ps(dm, 2), wd2 = lane8_ps(dm, 4), wd3 = lane8_ps(dm, 6); \
        const __m128 wm =                                                                                    \
            min ? _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7))) \
                : _mm_setzero_ps();                                                                          \
        const struct wcodes w0 = w_block(p), w1 = w_block(p + k1), w2 = w_block(p + k2), w3 = w_block(p + k3); \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {                                               \
            const int8_t *y = (const int8_t *)(xb + (size_t)r * rb) + 32 * i;                                \
            const float *xd = (const float *)(const void *)(xb + (size_t)r * rb + n) + QUANT_D_REPEAT * i;   \
            __m256 t = _mm256_mul_ps(_mm256_mul_ps(wd0, _mm256_loadu_ps(xd)),                                \
                                     x_block(w0, _mm256_loadu_si256((const __m256i *)y)));                   \
            t = _mm256_fmadd_ps(_mm256_mul_ps(wd1, _mm256_loadu_ps(xd + QUANT_D_REPEAT * k1)),               \
                                x_block(w1, _mm256_loadu_si256((const __m256i *)(y + 32 * k1))), t);         \
            t = _mm256_fmadd_ps(_mm256_mul_ps(wd2, _mm256_loadu_ps(xd + QUANT_D_REPEAT * k2)),               \
                                x_block(w2, _mm256_loadu_si256((const __m256i *)(y + 32 * k2))), t);         \
            t = _mm256_fmadd_ps(_mm256_mul_ps(wd3, _mm256_loadu_ps(xd + QUANT_D_REPEAT * k3)),               \
                                x_block(w3, _mm256_loadu_si256((const __m256i *)(y + 32 * k3))), t);         \
            acc[r] = _mm256_add_ps(acc[r], t);                                                               \
            if (min) {                                                                                       \
                const float *xs = (const float *)(const void *)(xb + (size_t)r * rb + n) +                   \
                                  QUANT_D_REPEAT * (n / 32) + i;                                             \
                off[r] = _mm_add_ps(off[r], _mm_mul_ps(wm, cnt < 4 ? _mm_maskload_ps(xs, keep) : _mm_loadu_ps(xs))); \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    static inline __attribute__((always_inline)) void name##_n(int64_t n, const wt *a, const uint8_t *xb,    \
                                                               size_t rb, const int nr, float *out, size_t os) { \
        const int64_t nb = n / 32, full = nb / 4 * 4;                                                        \
        __m256 acc[4];                                                                                       \
        __m128 off[4];                                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {                                               \
            acc[r] = _mm256_setzero_ps();                                                                    \
            off[r] = _mm_setzero_ps();                                                                       \
        }                                                                                                    \
        for (int64_t i = 0; i < full; i += 4) name##_group(a + i, 4, xb, rb, n, i, nr, acc, off);            \
        if (full < nb) name##_group(a + full, (int)(nb - full), xb, rb, n, full, nr, acc, off);              \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)                                                 \
            out[(size_t)r * os] = hsum_ps(acc[r]) + hsum128_ps(off[r]);                                      \
    }                                                                                                        \
    ROWS_BY_4(name, quant_planar_row_bytes(n, min), NULL, name##_n)

ROWS_DOT_32(rows_q4_0_q8_0, struct block_q4_0, w_q4_0, x_q4_0, 0)
ROWS_DOT_32(rows_q4_1_q8_1, struct block_q4_1, w_q4_1, x_q4_1, 1)
ROWS_DOT_32(rows_q5_0_q8_0, struct block_q5_0, w_q5_0, x_q5_0, 0)
ROWS_DOT_32(rows_q5_1_q8_1, struct block_q5_1, w_q5_1, x_q4_1, 1)
ROWS_DOT_32(rows_q8_0_q8_0, struct block_q8_0, w_q8_0, x_q8_0, 0)

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const __m256 d = _mm256_set1_ps(QUANT_H2F(b[i].d));
        for (int j = 0; j < QK8_0; j += 8) {
            const __m256i v = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b[i].qs + j)));
            _mm256_storeu_ps(dst + j, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
        }
    }
}

/* ---- KV cache rows against f32 -------------------------------------- */

/* Values 8k .. 8k+7 of a Q8_0 block as floats (the code, not yet scaled). */
static inline __m256 q8_0_codes8(const struct block_q8_0 *b, int k) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b->qs + 8 * k))));
}

/* Values 8k .. 8k+7 of a Q4_0 block as floats (code - 8, not yet scaled):
 * value j is byte j's low nibble, value j + 16 its high one. Written on
 * the whole block, so that a caller's four k share its load, shift and
 * masks. */
static inline __m256 q4_0_codes8(const struct block_q4_0 *b, int k) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    if (k >= 2) q = _mm_srli_epi16(q, 4);
    q = _mm_sub_epi8(_mm_and_si128(q, _mm_set1_epi8(0xf)), _mm_set1_epi8(8));
    if (k & 1) q = _mm_unpackhi_epi64(q, q);
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q));
}

static inline __attribute__((always_inline)) __m256 q32_codes(enum dtype t, const uint8_t *b, int k) {
    return t == DT_Q8_0 ? q8_0_codes8((const void *)b, k) : q4_0_codes8((const void *)b, k);
}

/* A Q4_0 cache's rows as float32 for the prompt's block products. */
static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const __m256 d = _mm256_set1_ps(QUANT_H2F(b[i].d));
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(dst + 8 * k, _mm256_mul_ps(q4_0_codes8(&b[i], k), d));
    }
}

#include "q32_rows_simd.h"

static float dot_q8_0_f32(int64_t n, const void *w, const void *x) {
    return hsum_ps(dot_q32_lanes(DT_Q8_0, n, w, x));
}
static float dot_q4_0_f32(int64_t n, const void *w, const void *x) {
    return hsum_ps(dot_q32_lanes(DT_Q4_0, n, w, x));
}

static void axpy_f32_row(float *y, float a, const void *x, int64_t n) { axpy_f32(y, a, x, n); }

static void axpy_f16_row(float *y, float a, const void *x, int64_t n) {
    const uint16_t *h = x;
    const __m256 va = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_f16x8(h + i), _mm256_loadu_ps(y + i)));
    if (i < n) {
        uint16_t hb[8];
        TAIL_COPY(hb, h + i, sizeof *h, n - i);
        const __m256i m =
            _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n - i)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        _mm256_maskstore_ps(y + i, m, _mm256_fmadd_ps(va, load_f16x8(hb), _mm256_maskload_ps(y + i, m)));
    }
}

static void axpy_q8_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q8_0, y, a, x, n); }
static void axpy_q4_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q4_0, y, a, x, n); }

/* ---- K quants ------------------------------------------------------- */

/* The K types against up to four Q8_K rows of a batch form (rows rb bytes
 * apart), one super-block at a time: a weight block's codes and scales are
 * unpacked once for all rows (k*_block), and each row adds its integer
 * sums into its own accumulators, so each row's arithmetic is the same
 * whatever nr is. (Two weight rows against one activation row in one loop,
 * as the AVX-512 kernels of the 32-value types do, streamed from memory
 * at two thirds of one row's rate on AMD Zen 3: not done.) */

/* The min term of Q4_K/Q5_K: sum_j mn_j * (sum of the 32 activations of
 * sub-block j), from the Q8_K bsums. */
static inline float k4_min_term(const uint8_t mn[8], const int16_t bsums[16]) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i pair = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn)), pair);
    __m128i s = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return (float)_mm_cvtsi128_si32(s);
}

/* Q4_K (q5 = 0) and Q5_K (q5 = 1) differ only in the 5th bit OR-ed into the
 * codes; the branch on the constant argument folds away after inlining.
 * The min terms, dmin d_x k4_min_term, are summed on the side (mins). */
static inline __attribute__((always_inline)) void k4_block(const void *blk, const uint8_t *xb, size_t rb, int64_t i,
                                                           const int q5, const int nr, __m256 *acc, float *mins) {
    const struct block_q5_K *a5 = blk;
    const struct block_q4_K *a4 = blk;
    const uint8_t *qs = q5 ? a5->qs : a4->qs;
    quant_prefetch(blk, q5 ? sizeof *a5 : sizeof *a4);
    const __m256i m4 = _mm256_set1_epi8(0x0f), bit4 = _mm256_set1_epi8(0x10);
    uint8_t sc[8], mn[8];
    quant_k4_scales(a4->scales, sc, mn);
    const __m128i sc16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc));
    const __m256i scales = _mm256_set_m128i(sc16, sc16);
    __m256i hb = q5 ? _mm256_loadu_si256((const __m256i *)a5->qh) : _mm256_setzero_si256();
    const struct block_q8_K *b[4];
    __m256i sumi[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
        b[r] = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
        sumi[r] = _mm256_setzero_si256();
    }
    _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
        const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
        __m256i lo = _mm256_and_si256(raw, m4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
        if (q5) {
            lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(hb, 4), bit4));
            hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(hb, 3), bit4));
            hb = _mm256_srli_epi16(hb, 2);
        }
        const __m256i sl = word_lane(scales, 2 * j), sh = word_lane(scales, 2 * j + 1);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            const __m256i pl = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)(b[r]->qs + 64 * j)));
            const __m256i ph =
                _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(b[r]->qs + 64 * j + 32)));
            sumi[r] = _mm256_add_epi32(sumi[r], _mm256_add_epi32(_mm256_madd_epi16(pl, sl), _mm256_madd_epi16(ph, sh)));
        }
    }
    const float d = QUANT_H2F(a4->d), dmin = QUANT_H2F(a4->dmin);
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * b[r]->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
        mins[r] += dmin * b[r]->d * k4_min_term(mn, b[r]->bsums);
    }
}

/* Q6_K: codes stored +32, so each row subtracts 32 * sum_g sc_g * bsums_g
 * once a block. */
static inline __attribute__((always_inline)) void q6_block(const struct block_q6_K *a, const uint8_t *xb, size_t rb,
                                                           int64_t i, const int nr, __m256 *acc, float *mins) {
    (void)mins;
    quant_prefetch(a, sizeof *a);
    const __m128i sc8 = _mm_loadu_si128((const __m128i *)a->scales);
    const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
    const struct block_q8_K *b[4];
    __m256i sumi[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
        b[r] = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
        const __m256i bias = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b[r]->bsums));
        sumi[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5));
    }
    _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
        __m256i q[4];
        q6_codes(a->ql + 64 * h, a->qh + 32 * h, q);
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {
            const __m256i s = _mm256_cvtepi8_epi16(
                _mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)q6_scale_pair[4 * h + k])));
            _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(b[r]->qs + 128 * h + 32 * k));
                sumi[r] = _mm256_add_epi32(sumi[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q[k], y), s));
            }
        }
    }
    const float d = QUANT_H2F(a->d);
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
        acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * b[r]->d), _mm256_cvtepi32_ps(sumi[r]), acc[r]);
}

static inline __attribute__((always_inline)) void q4k_block(const void *w, int64_t i, const uint8_t *xb, size_t rb,
                                                            const int nr, __m256 *acc, float *mins) {
    k4_block((const struct block_q4_K *)w + i, xb, rb, i, 0, nr, acc, mins);
}

static inline __attribute__((always_inline)) void q5k_block(const void *w, int64_t i, const uint8_t *xb, size_t rb,
                                                            const int nr, __m256 *acc, float *mins) {
    k4_block((const struct block_q5_K *)w + i, xb, rb, i, 1, nr, acc, mins);
}

static inline __attribute__((always_inline)) void q6k_block(const void *w, int64_t i, const uint8_t *xb, size_t rb,
                                                            const int nr, __m256 *acc, float *mins) {
    q6_block((const struct block_q6_K *)w + i, xb, rb, i, nr, acc, mins);
}

/* A K type's rows kernel (ROWS_BY_4) from its block body: name##_n, one
 * weight row against up to four activation rows. */
#define ROWS_K(name, block)                                                                                  \
    static inline __attribute__((always_inline)) void name##_n(int64_t n, const void *w, const uint8_t *xb,  \
                                                               size_t rb, const int nr, float *out, size_t os) { \
        __m256 acc[4];                                                                                       \
        float mins[4];                                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {                                               \
            acc[r] = _mm256_setzero_ps();                                                                    \
            mins[r] = 0;                                                                                     \
        }                                                                                                    \
        for (int64_t i = 0; i < n / QK_K; i++)                                                               \
            block(w, i, xb, rb, nr, acc, mins);                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)                                                 \
            out[(size_t)r * os] = hsum_ps(acc[r]) - mins[r];                                                 \
    }                                                                                                        \
    ROWS_BY_4(name, dtype_row_bytes(DT_Q8_K, n), NULL, name##_n)

ROWS_K(rows_q4_K_q8_K, q4k_block)
ROWS_K(rows_q5_K_q8_K, q5k_block)
ROWS_K(rows_q6_K_q8_K, q6k_block)

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d), dmin = QUANT_H2F(b[i].dmin);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b[i].scales, sc, mn);
        for (int j = 0; j < 8; j++, dst += 32) {
            const __m256 ds = _mm256_set1_ps(d * sc[j]), dm = _mm256_set1_ps(dmin * mn[j]);
            const uint8_t *qs = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l += 8) {
                __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(qs + l)));
                v = j % 2 ? _mm256_srli_epi32(v, 4) : _mm256_and_si256(v, _mm256_set1_epi32(0x0f));
                _mm256_storeu_ps(dst + l, _mm256_sub_ps(_mm256_mul_ps(ds, _mm256_cvtepi32_ps(v)), dm));
            }
        }
    }
}

static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d);
        for (int h = 0; h < 2; h++) {
            __m256i q[4];
            q6_codes(b[i].ql + 64 * h, b[i].qh + 32 * h, q);
            for (int k = 0; k < 4; k++, dst += 32) {
                const __m256i v = _mm256_sub_epi8(q[k], _mm256_set1_epi8(32));
                const __m128i half[2] = {_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1)};
                for (int g = 0; g < 2; g++) {
                    const __m256 ds = _mm256_set1_ps(d * b[i].scales[8 * h + 2 * k + g]);
                    const __m256 v0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(half[g]));
                    const __m256 v1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(half[g], 8)));
                    _mm256_storeu_ps(dst + 16 * g, _mm256_mul_ps(ds, v0));
                    _mm256_storeu_ps(dst + 16 * g + 8, _mm256_mul_ps(ds, v1));
                }
            }
        }
    }
}

/* ---- decoding attention: runs of KV rows against a group's query heads */

/* The sums of 8 vectors' lanes, lane r that of v[r], each by hsum_ps's
 * tree (halves, then elements 0 + 2 and 1 + 3, then the last two), two
 * vectors at a time, put back in row order. */
static inline __m256 reduce8(const __m256 v[8]) {
    __m256 h[4], q[2];
    for (int r = 0; r < 4; r++) /* 128-bit lanes: rows r, r + 4 */
        h[r] =
            _mm256_add_ps(_mm256_permute2f128_ps(v[r], v[r + 4], 0x20), _mm256_permute2f128_ps(v[r], v[r + 4], 0x31));
    for (int r = 0; r < 2; r++)
        q[r] = _mm256_add_ps(_mm256_shuffle_ps(h[r], h[r + 2], 0x44), _mm256_shuffle_ps(h[r], h[r + 2], 0xee));
    const __m256 t = _mm256_add_ps(_mm256_shuffle_ps(q[0], q[1], 0x88), _mm256_shuffle_ps(q[0], q[1], 0xdd));
    return _mm256_permute_ps(t, 0xd8); /* rows 0, 2, 1, 3 of each 128-bit lane -> 0, 1, 2, 3 */
}

/* One KV row of type t (a constant at every call) against x, in lanes. */
static inline __attribute__((always_inline)) __m256 kv_dot_lanes(enum dtype t, const uint8_t *row, const float *x,
                                                                 int64_t d) {
    return t == DT_F32 ? dot_f32_lanes((const float *)(const void *)row, x, d)
         : t == DT_F16 ? dot_f16_lanes(d, row, x)
                       : dot_q32_lanes(t, d, row, x);
}

/* Values c .. c + 7 of a KV row (the first `left` of them when fewer
 * remain, the rest 0); Q8_0 and Q4_0 give their codes, the scale going into the
 * axpy's factor (quant_kv_scale). */
static inline __attribute__((always_inline)) __m256 kv_values(enum dtype t, const uint8_t *row, int64_t c,
                                                              int64_t left, __m256i m) {
    if (t == DT_F32) return _mm256_maskload_ps((const float *)(const void *)row + c, m);
    if (t == DT_Q8_0 || t == DT_Q4_0) {
        const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
        return q32_codes(t, row + (size_t)(c / 32) * bb, (int)(c % 32) / 8);
    }
    const uint16_t *h = (const uint16_t *)(const void *)row + c;
    if (left >= 8) return load_f16x8(h);
    uint16_t hb[8];
    TAIL_COPY(hb, h, sizeof *h, left);
    return load_f16x8(hb);
}

#define V_REDUCE_ROWS(v) reduce8(v)
/* 16 registers: 6 queries x 2 vectors of sums, and the row's 2; the
 * fastest of the shapes tried on Zen 3 (bench/bench_attn.c, the 1.5B's 6
 * heads a kv head). */
#define KV_MIX_VECS 2
#define KV_MIX_QN 6
#define KV_DOT_QN 6
#include "kv_rows_simd.h"

KV_RUN_KERNELS(f32, DT_F32)
KV_RUN_KERNELS(f16, DT_F16)
KV_RUN_KERNELS(q8_0, DT_Q8_0)
KV_RUN_KERNELS(q4_0, DT_Q4_0)

/* Lanes whose bit is in `set` (an immediate) get p - v, the others
 * v + p: one butterfly stage of hadamard32 (quantize.c) on partners p. */
#define BUTTERFLY(v, p, set) _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), set)

/* quant_rotate_blocks: the stages of lengths 1, 2 and 4 within each
 * vector, 8 and 16 between them, then the scale; every value the adds of
 * the scalar form, in its order. */
static void rotate_blocks(float *x, int64_t n) {
    for (int64_t i = 0; i + 32 <= n; i += 32) {
        __m256 v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + i + 8 * k);
            v[k] = BUTTERFLY(v[k], _mm256_permute_ps(v[k], 0xb1), 0xaa);
            v[k] = BUTTERFLY(v[k], _mm256_permute_ps(v[k], 0x4e), 0xcc);
            v[k] = BUTTERFLY(v[k], _mm256_permute2f128_ps(v[k], v[k], 1), 0xf0);
        }
        for (int len = 1; len <= 2; len *= 2)
            for (int k = 0; k < 4; k++)
                if (!(k & len)) {
                    const __m256 a = v[k], b = v[k + len];
                    v[k] = _mm256_add_ps(a, b);
                    v[k + len] = _mm256_sub_ps(a, b);
                }
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(x + i + 8 * k, _mm256_mul_ps(v[k], _mm256_set1_ps(0.17677669529663688f)));
    }
}

void quant_kernels_avx2(struct quant_kernels *k) {
    k->rotate = rotate_blocks;
    k->dots[DT_F32] = dots_f32;
    k->dots[DT_F16] = dots_f16;
    k->dots[DT_Q8_0] = dots_q8_0;
    k->dots[DT_Q4_0] = dots_q4_0;
    k->axpys[DT_F32] = axpys_f32;
    k->axpys[DT_F16] = axpys_f16;
    k->axpys[DT_Q8_0] = axpys_q8_0;
    k->axpys[DT_Q4_0] = axpys_q4_0;
    k->dequant[DT_F16] = dequant_f16;
    k->dequant[DT_BF16] = dequant_bf16;
    k->dequant[DT_Q8_0] = dequant_q8_0;
    k->dequant[DT_Q4_0] = dequant_q4_0;
    k->dequant[DT_Q4_K] = dequant_q4_K;
    k->dequant[DT_Q6_K] = dequant_q6_K;
    k->dot[DT_F32] = dot_f32_row;
    k->dot[DT_F16] = dot_f16_row;
    k->dot[DT_BF16] = dot_bf16_row;
    k->absmax32 = absmax32;
    k->codes32 = codes32;
    k->dot_rows[DT_Q4_0] = rows_q4_0_q8_0;
    k->dot_rows[DT_Q4_1] = rows_q4_1_q8_1;
    k->dot_rows[DT_Q5_0] = rows_q5_0_q8_0;
    k->dot_rows[DT_Q5_1] = rows_q5_1_q8_1;
    k->dot_rows[DT_Q8_0] = rows_q8_0_q8_0;
    k->dot_rows[DT_Q4_K] = rows_q4_K_q8_K;
    k->dot_rows[DT_Q5_K] = rows_q5_K_q8_K;
    k->dot_rows[DT_Q6_K] = rows_q6_K_q8_K;
    k->dot_f32 = dot_f32;
    k->axpy_f32 = axpy_f32;
    k->dot_f32x[DT_F32] = dot_f32_row;
    k->dot_f32x[DT_F16] = dot_f16_row;
    k->dot_f32x[DT_Q8_0] = dot_q8_0_f32;
    k->dot_f32x[DT_Q4_0] = dot_q4_0_f32;
    k->axpy[DT_F32] = axpy_f32_row;
    k->axpy[DT_F16] = axpy_f16_row;
    k->axpy[DT_Q8_0] = axpy_q8_0_row;
    k->axpy[DT_Q4_0] = axpy_q4_0_row;
}
