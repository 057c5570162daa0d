/* AVX2 + FMA + F16C kernels: quant_simd.h under simd_avx2.h's mapping, and
 * what the mapping leaves to the ISA. Integer dots follow ggml's scheme:
 * unsigned weight codes times signed activations with vpmaddubsw (pairs
 * into int16), vpmaddwd by the per-sub-block scale (into int32), then one
 * float FMA by the block scale. Only called when cpuid reports the ISA. */

#include "simd_avx2.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------- */

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

/* ---- f16 / bf16 ----------------------------------------------------- */

/* h, or the first `left` (< 8) of it copied into hb after zeros: there is
 * no masked 16-bit load at this level. */
static inline const uint16_t *halves8(const uint16_t *h, int64_t left, uint16_t hb[8]) {
    if (left >= 8) return h;
    memset(hb, 0, 8 * sizeof *hb);
    memcpy(hb, h, (size_t)left * sizeof *h);
    return hb;
}

static inline __m256 v_f16(const uint16_t *h, int64_t left, __m256i m) {
    (void)m;
    uint16_t hb[8];
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)halves8(h, left, hb)));
}

static inline __m256 v_bf16(const uint16_t *h, int64_t left, __m256i m) {
    (void)m;
    uint16_t hb[8];
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)halves8(h, left, hb)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

/* As they were measured: only the AVX-512 dots prefetch, a line a step. */
#define HALF_PREFETCH 0

/* ---- activation quantisation ---------------------------------------- */

static inline float absmax_lanes(__m256 m) {
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    return _mm_cvtss_f32(_mm_max_ss(h, _mm_movehdup_ps(h)));
}

static inline int codes_store(const __m256i q[4], int8_t qs[32]) {
    /* The packs work within 128-bit lanes: put the 32 bytes back in order. */
    const __m256i b = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)qs, _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    __m256i s = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

/* ---- 32-value blocks: one a vector ---------------------------------- */

/* w_*() unpacks a weight block once for every row, x_*() multiplies it
 * with a row's 32 codes into 8 exact float partial sums. */
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

#define R32_CODES(w_block, p, k, v) w_block((p) + (k)[v])

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

static inline __attribute__((always_inline)) void r32_scales(const void *p, size_t stride, const int k[4], int cnt,
                                                             bool full, int min, __m256 wd[4], __m128 *wm) {
    __m256 dm = dm_of4(p, stride, k[1], k[2], k[3]);
    if (!full)
        dm = _mm256_and_ps(dm, _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(2 * cnt),
                                                                      _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
    _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++) wd[v] = lane8_ps(dm, 2 * v);
    *wm = min ? _mm256_castps256_ps128(_mm256_permutevar8x32_ps(dm, _mm256_setr_epi32(1, 3, 5, 7, 1, 3, 5, 7)))
              : _mm_setzero_ps();
}

/* The missing blocks of a partial group read block 0's activations: their
 * scale is 0. */
static inline __attribute__((always_inline)) __m256 r32_dscales(const float *xd, const int k[4], int v, int cnt,
                                                                bool full) {
    (void)cnt, (void)full;
    return _mm256_loadu_ps(xd + QUANT_D_REPEAT * k[v]);
}

static inline __attribute__((always_inline)) __m256i r32_acts(const int8_t *y, const int k[4], int v, int cnt,
                                                              bool full) {
    (void)cnt, (void)full;
    return _mm256_loadu_si256((const __m256i *)(y + 32 * k[v]));
}

#define R32_CHAIN 1
#define R32_W2 0

/* ---- KV cache rows against f32 -------------------------------------- */

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
    return t == DT_Q8_0 ? v_i8(((const struct block_q8_0 *)(const void *)b)->qs + 8 * k)
                        : q4_0_codes8((const void *)b, k);
}

/* The sums of 8 vectors' lanes, lane r that of v[r], each by v_hsum's
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

#define V_REDUCE_ROWS(v) reduce8(v)
/* 16 registers: 6 queries x 2 vectors of sums, and the row's 2; the
 * fastest of the shapes tried on Zen 3 (bench/bench_attn.c, the 1.5B's 6
 * heads a kv head). */
#define KV_MIX_VECS 2
#define KV_MIX_QN 6
#define KV_DOT_QN 6

/* ---- K quants: 32 codes a vector ------------------------------------ */

/* Broadcast of int16 word k of v (both 128-bit halves hold the same 8
 * words) to every lane, for k = 0..7. */
static const uint8_t word_bcast[8][32] = {
#define W(k) \
    { \
        2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, \
            2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, \
            2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1, 2 * k, 2 * k + 1 \
    }
    W(0), W(1), W(2), W(3), W(4), W(5), W(6), W(7),
#undef W
};

/* The 8 sub-block scales as words, in both 128-bit halves. */
static inline __m256i k4_scales(const uint8_t sc[8]) {
    const __m128i sc16 = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc));
    return _mm256_set_m128i(sc16, sc16);
}

/* Vector c holds sub-block c. */
static inline __m256i k4_scale(__m256i scales, int c) {
    return _mm256_shuffle_epi8(scales, _mm256_loadu_si256((const __m256i *)word_bcast[c]));
}

static inline void k4_nibbles(const uint8_t *qs, __m256i q[2]) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), raw = _mm256_loadu_si256((const __m256i *)qs);
    q[0] = _mm256_and_si256(raw, m4);
    q[1] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), m4);
}

/* Bit 2j of qh belongs to the low nibbles of chunk j, bit 2j+1 to the high
 * ones: the second copy is shifted by one. */
static inline void k4_high(const uint8_t *qh, __m256i hb[2]) {
    hb[0] = _mm256_loadu_si256((const __m256i *)qh);
    hb[1] = _mm256_srli_epi16(hb[0], 1);
}

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

/* Q6_K scale pairs: byte g in the low 8 lanes, g+1 in the high 8, for
 * g = 0, 2, ..., 14 (index g/2). Sign-extended to words afterwards. */
static const uint8_t q6_scale_pair[8][16] = {
#define P(g) \
    { g, g, g, g, g, g, g, g, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1, g + 1 }
    P(0), P(2), P(4), P(6), P(8), P(10), P(12), P(14),
#undef P
};

static inline __m256i q6_scale(__m128i sc8, int c) {
    return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc8, _mm_loadu_si128((const __m128i *)q6_scale_pair[c])));
}

#include "quant_simd.h"

/* ---- AVX2's own ----------------------------------------------------- */

/* No AVX-512 counterpart: that level keeps this one. */

/* Lanes whose bit is in `set` (an immediate) get p - v, the others
 * v + p: one butterfly stage of hadamard32 (quantize.c) on partners p. */
#define BUTTERFLY(v, p, set) _mm256_blend_ps(_mm256_add_ps(v, p), _mm256_sub_ps(p, v), set)

/* quant_rotate_blocks: the stages of lengths 1, 2 and 4 within each
 * vector, 8 and 16 between them, then the scale; every value the adds of
 * the scalar form, in its order. The first three stages are immediate
 * blends within 8 lanes. */
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
    quant_simd_set(k);
    k->rotate = rotate_blocks;
}
