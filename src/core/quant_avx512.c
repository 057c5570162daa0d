/* AVX-512 (F, BW, VL, DQ) kernels: quant_simd.h under simd_avx512.h's
 * mapping, the integer scheme of quant_avx2.c on 64-byte vectors, i.e. two
 * 32-value blocks or one 64-value K-quant chunk per instruction, and what
 * this level alone has. There is no vpsignb at this width, so signs are
 * handled with byte masks. Only called when cpuid reports the ISA; entries
 * not set here keep their AVX2 kernels. */

#include "simd_avx512.h"

#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <string.h>

/* ---- helpers -------------------------------------------------------- */

/* Two 256-bit halves, lo in the low half. */
static inline __m512i join256(__m256i lo, __m256i hi) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

/* Sum of u[i]*s[i] (u unsigned, s signed bytes) in 16 int32 lanes, each
 * lane covering 4 consecutive bytes. */
static inline __m512i dot_u8_i8(__m512i u, __m512i s) {
    return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

/* Sum of (u[i] - o) * s[i] in the same lanes, for codes u stored with an
 * offset o (Q4_0: 8, Q5_0: 16), without a signed*signed multiply. */
static inline __m512i dot_off_u8_i8(__m512i u, char o, __m512i s) {
    const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(u, s), _mm512_maddubs_epi16(_mm512_set1_epi8(o), s));
    return _mm512_madd_epi16(p, _mm512_set1_epi16(1));
}

/* Codes 0..15 of two Q4_0/Q4_1 blocks, in the order of their activations:
 * [low nibbles of p, high of p, low of q, high of q]. */
static inline __m512i nibbles_2x32(const uint8_t *p, const uint8_t *q) {
    const __m256i pq = _mm256_loadu2_m128i((const __m128i *)q, (const __m128i *)p);
    const __m512i dup = _mm512_shuffle_i64x2(_mm512_castsi256_si512(pq), _mm512_castsi256_si512(pq),
                                             _MM_SHUFFLE(1, 1, 0, 0));
    const __m512i shift = _mm512_set_epi64(4 * 0x0001000100010001LL, 4 * 0x0001000100010001LL, 0, 0,
                                           4 * 0x0001000100010001LL, 4 * 0x0001000100010001LL, 0, 0);
    return _mm512_and_si512(_mm512_srlv_epi16(dup, shift), _mm512_set1_epi8(0x0f));
}

/* 32 activation bytes of each of two blocks. */
static inline __m512i acts_2x32(const int8_t *p, const int8_t *q) {
    return join256(_mm256_loadu_si256((const __m256i *)p), _mm256_loadu_si256((const __m256i *)q));
}

/* ---- f16 / bf16 ----------------------------------------------------- */

static inline __m512 v_f16(const uint16_t *h, int64_t left, __mmask16 m) {
    (void)left;
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h));
}

static inline __m512 v_bf16(const uint16_t *h, int64_t left, __mmask16 m) {
    (void)left;
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h)), 16));
}

/* A step reads one 64-byte line of halves. */
#define HALF_PREFETCH 1

/* ---- activation quantisation ---------------------------------------- */

static inline float absmax_lanes(__m512 m) { return _mm512_reduce_max_ps(m); }

static inline int codes_store(const __m512i q[2], int8_t qs[32]) {
    _mm_storeu_si128((__m128i *)qs, _mm512_cvtepi32_epi8(q[0]));
    _mm_storeu_si128((__m128i *)(qs + 16), _mm512_cvtepi32_epi8(q[1]));
    return _mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1]));
}

/* ---- 32-value blocks, two per step ---------------------------------- */

/* w_*() unpacks two weight blocks once for every row, x_*() multiplies
 * them with the row's 64 codes, giving block 0's dot in lanes 0..7 and
 * block 1's in lanes 8..15 as exact float sums. */
struct wcodes {
    __m512i u;     /* unsigned codes (Q8_0: their magnitudes) */
    __mmask64 neg; /* Q8_0: the codes' signs */
};

static inline struct wcodes w_q4_0(const struct block_q4_0 *a0, const struct block_q4_0 *a1) {
    return (struct wcodes){ nibbles_2x32(a0->qs, a1->qs), 0 };
}

static inline struct wcodes w_q4_1(const struct block_q4_1 *a0, const struct block_q4_1 *a1) {
    return (struct wcodes){ nibbles_2x32(a0->qs, a1->qs), 0 };
}

/* Q5_0/Q5_1: the nibbles plus bit j of qh as bit 4 of value j. */
static inline __m512i fives_2x32(const uint8_t *p, const uint8_t *ph, const uint8_t *q, const uint8_t *qh) {
    uint32_t hp, hq;
    memcpy(&hp, ph, 4);
    memcpy(&hq, qh, 4);
    const __m512i high = _mm512_maskz_set1_epi8((__mmask64)hp | (__mmask64)hq << 32, 0x10);
    return _mm512_or_si512(nibbles_2x32(p, q), high);
}

static inline struct wcodes w_q5_0(const struct block_q5_0 *a0, const struct block_q5_0 *a1) {
    return (struct wcodes){ fives_2x32(a0->qs, a0->qh, a1->qs, a1->qh), 0 };
}

static inline struct wcodes w_q5_1(const struct block_q5_1 *a0, const struct block_q5_1 *a1) {
    return (struct wcodes){ fives_2x32(a0->qs, a0->qh, a1->qs, a1->qh), 0 };
}

static inline struct wcodes w_q8_0(const struct block_q8_0 *a0, const struct block_q8_0 *a1) {
    const __m512i q = acts_2x32(a0->qs, a1->qs);
    return (struct wcodes){ _mm512_abs_epi8(q), _mm512_movepi8_mask(q) };
}

static inline __m512 x_q4_0(struct wcodes w, __m512i y) {
    return _mm512_cvtepi32_ps(dot_off_u8_i8(w.u, 8, y));
}

static inline __m512 x_q4_1(struct wcodes w, __m512i y) { return _mm512_cvtepi32_ps(dot_u8_i8(w.u, y)); }

static inline __m512 x_q5_0(struct wcodes w, __m512i y) {
    return _mm512_cvtepi32_ps(dot_off_u8_i8(w.u, 16, y));
}

static inline __m512 x_q8_0(struct wcodes w, __m512i y) {
    /* |q| * (y with q's sign); y is within [-127, 127] (quant_q8_32). */
    return _mm512_cvtepi32_ps(dot_u8_i8(w.u, _mm512_mask_sub_epi8(y, w.neg, _mm512_setzero_si512(), y)));
}

#define R32_CODES(w_block, p, k, v) w_block((p) + (k)[2 * (v)], (p) + (k)[2 * (v) + 1])

/* Four fp16 fields `at` bytes into blocks 0, k1, k2, k3 (stride bytes
 * apart) as floats. */
static inline __attribute__((always_inline)) __m128 fp16_of4(const void *p, size_t stride, const int k[4], size_t at) {
    const uint8_t *b = (const uint8_t *)p + at;
    uint16_t f0, f1, f2, f3;
    memcpy(&f0, b + (size_t)k[0] * stride, 2), memcpy(&f1, b + (size_t)k[1] * stride, 2);
    memcpy(&f2, b + (size_t)k[2] * stride, 2), memcpy(&f3, b + (size_t)k[3] * stride, 2);
    return _mm_cvtph_ps(_mm_setr_epi16((short)f0, (short)f1, (short)f2, (short)f3, 0, 0, 0, 0));
}

/* Scales d spread over 8 lanes a block; m is Q4_1's and Q5_1's second
 * field. */
static inline __attribute__((always_inline)) void r32_scales(const void *p, size_t stride, const int k[4], int cnt,
                                                             bool full, int min, __m512 wd[2], __m128 *wm) {
    (void)full;
    static_assert(offsetof(struct block_q4_1, m) == offsetof(struct block_q5_1, m), "m after d");
    const __mmask8 m4 = (__mmask8)((1u << cnt) - 1);
    const __m512 d = _mm512_castps128_ps512(_mm_maskz_mov_ps(m4, fp16_of4(p, stride, k, 0)));
    wd[0] = _mm512_permutexvar_ps(join256(_mm256_setzero_si256(), _mm256_set1_epi32(1)), d);
    wd[1] = _mm512_permutexvar_ps(join256(_mm256_set1_epi32(2), _mm256_set1_epi32(3)), d);
    *wm = min ? _mm_maskz_mov_ps(m4, fp16_of4(p, stride, k, offsetof(struct block_q4_1, m))) : _mm_setzero_ps();
}

/* The missing blocks of a partial group load zeros: masked loads, which
 * read nothing past the row. */
static inline __attribute__((always_inline)) __m512 r32_dscales(const float *xd, const int k[4], int v, int cnt,
                                                                bool full) {
    (void)k;
    const __mmask16 m = (__mmask16)((cnt > 2 * v ? 0xff : 0) | (cnt > 2 * v + 1 ? 0xff00 : 0));
    return full ? _mm512_loadu_ps(xd + 16 * v) : _mm512_maskz_loadu_ps(m, xd + 16 * v);
}

static inline __attribute__((always_inline)) __m512i r32_acts(const int8_t *y, const int k[4], int v, int cnt,
                                                              bool full) {
    (void)k;
    const __mmask64 m = (cnt > 2 * v ? 0xffffffffULL : 0) | (cnt > 2 * v + 1 ? 0xffffffff00000000ULL : 0);
    return full ? _mm512_loadu_si512(y + 64 * v) : _mm512_maskz_loadu_epi8(m, y + 64 * v);
}

#define R32_CHAIN 0
#define R32_W2 1

/* ---- KV cache rows against f32 -------------------------------------- */

/* Values 16k .. 16k+15 of a Q4_0 block as floats (code - 8, not yet
 * scaled): the low nibbles of its 16 bytes, then the high ones. */
static inline __m512 q4_0_codes16(const struct block_q4_0 *b, int k) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    if (k) q = _mm_srli_epi16(q, 4);
    q = _mm_and_si128(q, _mm_set1_epi8(0xf));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(8)));
}

static inline __attribute__((always_inline)) __m512 q32_codes(enum dtype t, const uint8_t *b, int k) {
    return t == DT_Q8_0 ? v_i8(((const struct block_q8_0 *)(const void *)b)->qs + 16 * k)
                        : q4_0_codes16((const void *)b, k);
}

/* The sums of 16 vectors' lanes, lane r that of v[r], each by v_hsum's
 * tree: the halves of each vector are added two vectors at a time, then
 * the quarters, pairs and last two, and the result is put in row order.
 * Three shuffles and adds a row instead of v_hsum's eight, and no
 * dependence between rows. */
static inline __m512 reduce16(const __m512 v[16]) {
    __m512 h[8], q[4], p[2];
    for (int r = 0; r < 8; r++) /* rows r, r + 8: lanes k + 8 added to lanes k */
        h[r] = _mm512_add_ps(_mm512_shuffle_f32x4(v[r], v[r + 8], 0x44), _mm512_shuffle_f32x4(v[r], v[r + 8], 0xee));
    for (int r = 0; r < 4; r++) /* 128-bit lanes: rows r, r + 8, r + 4, r + 12 */
        q[r] = _mm512_add_ps(_mm512_shuffle_f32x4(h[r], h[r + 4], 0x88), _mm512_shuffle_f32x4(h[r], h[r + 4], 0xdd));
    for (int r = 0; r < 2; r++) /* elements 0 + 2 and 1 + 3 of q[r] and q[r + 2] */
        p[r] = _mm512_add_ps(_mm512_shuffle_ps(q[r], q[r + 2], 0x44), _mm512_shuffle_ps(q[r], q[r + 2], 0xee));
    const __m512 t = _mm512_add_ps(_mm512_shuffle_ps(p[0], p[1], 0x88), _mm512_shuffle_ps(p[0], p[1], 0xdd));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15), t);
}

#define V_REDUCE_ROWS(v) reduce16(v)
/* 32 registers: 4 queries x 4 vectors of sums (6 heads: passes of 3);
 * 6 x 2 measured the same on Zen 4 (bench/bench_attn.c, within its
 * noise). */
#define KV_MIX_VECS 4
#define KV_MIX_QN 4
#define KV_DOT_QN 4

/* ---- K quants: 64 codes a vector ----------------------------------- */

/* vpermw indices: word c (of 8 or 16) broadcast to each 256-bit half...
 * k4_index[j]: words 2j in lanes 0..15 and 2j+1 in lanes 16..31 (Q4_K/Q5_K
 * chunk j: sub-blocks 2j, 2j+1); q6_index[c]: word 4c+L in the 8 lanes of
 * 128-bit lane L (Q6_K chunk c: groups 4c..4c+3). */
static inline __m512i k4_index(int j) {
    return join256(_mm256_set1_epi16((short)(2 * j)), _mm256_set1_epi16((short)(2 * j + 1)));
}

static inline __m512i q6_index(int c) {
    return _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(4 * c + 1)), _mm_set1_epi16((short)(4 * c)))),
        _mm256_set_m128i(_mm_set1_epi16((short)(4 * c + 3)), _mm_set1_epi16((short)(4 * c + 2))), 1);
}

static inline __m512i k4_scales(const uint8_t sc[8]) {
    return _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
}

static inline __m512i k4_scale(__m512i scales, int c) { return _mm512_permutexvar_epi16(k4_index(c), scales); }

/* Low nibbles in the low half, high nibbles in the high half: exactly the
 * order of the 64 activations. */
static inline void k4_nibbles(const uint8_t *qs, __m512i q[1]) {
    const __m256i raw = _mm256_loadu_si256((const __m256i *)qs);
    q[0] = _mm512_and_si512(join256(raw, _mm256_srli_epi16(raw, 4)), _mm512_set1_epi8(0x0f));
}

/* Bit 2j of qh belongs to the low half of chunk j, bit 2j+1 to the high
 * half: the high copy is shifted by one. */
static inline void k4_high(const uint8_t *qh, __m512i hb[1]) {
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    hb[0] = join256(h, _mm256_srli_epi16(h, 1));
}

/* Codes 0..63 of one 128-value half of a Q6_K block as two vectors:
 * q[0] = values 0..63, q[1] = values 64..127. */
static inline void q6_codes(const uint8_t *ql, const uint8_t *qh, __m512i q[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    const __m512i l = _mm512_loadu_si512(ql);
    const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    /* Bits 2k..2k+1 of qh go to bits 4..5 of quarter k. */
    const __m512i up = _mm512_sllv_epi16(h, join256(_mm256_set1_epi16(4), _mm256_set1_epi16(2)));
    const __m512i down = _mm512_srlv_epi16(h, join256(_mm256_setzero_si256(), _mm256_set1_epi16(2)));
    q[0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(up, m2));
    q[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4), _mm512_and_si512(down, m2));
}

static inline __m512i q6_scale(__m128i sc8, int c) {
    return _mm512_permutexvar_epi16(q6_index(c), _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8)));
}

#include "quant_simd.h"

/* ---- AVX-512's own -------------------------------------------------- */

/* Kernels with no AVX2 counterpart to share a body with: the AVX2 level
 * leaves these to the scalar ones (whose bits they give). */

/* Dequantisation of the 32-value formats AVX2 leaves to the scalar
 * kernels, two blocks at a time from the codes the dot kernels unpack:
 * (code - o) * d, plus m where the format has one (min_of(block): its m as
 * a float). Every product is exact, so this equals the scalar kernels. */
#define DEQUANT_32(name, wt, w_pair, o, has_min, min_of) \
    static void name(const void *src, float *dst, int64_t n) { \
        const wt *b = src; \
        const int64_t nb = n / 32; \
        for (int64_t i = 0; i < nb; i += 2, dst += 64) { \
            const int64_t i1 = i + 1 < nb ? i + 1 : i; \
            uint8_t codes[64]; \
            _mm512_storeu_si512(codes, w_pair(&b[i], &b[i1]).u); \
            for (int k = 0; k < (i1 > i ? 4 : 2); k++) { \
                const wt *blk = &b[k < 2 ? i : i1]; \
                const __m512 v = \
                    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + 16 * k)))); \
                const __m512 d = _mm512_set1_ps(QUANT_H2F(blk->d)); \
                __m512 y = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(o)), d); \
                if (has_min) y = _mm512_add_ps(y, _mm512_set1_ps(min_of(blk))); \
                _mm512_storeu_ps(dst + 16 * k, y); \
            } \
        } \
    }

#define no_min_of(b) 0.0f
#define min_of_m(b) QUANT_H2F((b)->m)

DEQUANT_32(dequant_q4_1, struct block_q4_1, w_q4_1, 0, 1, min_of_m)
DEQUANT_32(dequant_q5_0, struct block_q5_0, w_q5_0, 16, 0, no_min_of)
DEQUANT_32(dequant_q5_1, struct block_q5_1, w_q5_1, 0, 1, min_of_m)

/* Q8_K, bit for bit the reference quant_q8_K: the value of the largest
 * magnitude (its first occurrence, NaN ignored) maps to -128; codes
 * clamp(round_even(x * iscale), -128, 127), NaN -> -128 (max_ps returns its
 * second operand when either is NaN). */
static void quant_q8_K(const float *x, void *dst, int64_t n) {
    struct block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        __m512 am = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16)
            am = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + j)), am);
        const float amax = _mm512_reduce_max_ps(am);
        float max = 0;
        for (int j = 0; amax > 0 && j < QK_K; j += 16) {
            const __mmask16 at = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + j)), _mm512_set1_ps(amax),
                                                    _CMP_EQ_OQ);
            if (at) {
                max = x[j + __builtin_ctz(at)];
                break;
            }
        }
        const float iscale = max != 0 ? -128.0f / max : 0;
        b[i].d = iscale != 0 ? 1.0f / iscale : 0;
        const __m512 v = _mm512_set1_ps(iscale), lo = _mm512_set1_ps(-128.0f), hi = _mm512_set1_ps(127.0f);
        for (int g = 0; g < QK_K / 16; g++) {
            const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + 16 * g), v), lo), hi);
            const __m512i q = _mm512_cvtps_epi32(f);
            _mm_storeu_si128((__m128i *)(b[i].qs + 16 * g), _mm512_cvtepi32_epi8(q));
            b[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
        }
    }
}

/* quant_ilv_dequant on the interleaved form: row i's codes of a block tile
 * gathered from its four (Q8_0: eight) vectors into value order, then the
 * scalar kernels' expressions, whose products are exact: the same bits. */
static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline __attribute__((always_inline)) void ilv_dequant_tiles(const enum dtype type, int64_t n,
                                                                    const void *ilv, int64_t r0, int nr, float *dst) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const int64_t nb = n / 32;
    for (int r = 0; r < nr; r++) {
        const int64_t t = (r0 + r) / QUANT_ILV_ROWS;
        const int i = (int)((r0 + r) % QUANT_ILV_ROWS);
        for (int64_t b = 0; b < nb; b++) {
            const uint8_t *p = (const uint8_t *)ilv + (size_t)(t * nb + b) * L.bytes, *c = p + L.codes + 4 * i;
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            const __m512 d = _mm512_set1_ps(QUANT_H2F(h));
            __m512i v0, v1;
            if (L.q8) {
                const __m256i q = _mm256_xor_si256(
                    _mm256_setr_epi32((int)ld32(c), (int)ld32(c + 64), (int)ld32(c + 128), (int)ld32(c + 192),
                                      (int)ld32(c + 256), (int)ld32(c + 320), (int)ld32(c + 384), (int)ld32(c + 448)),
                    _mm256_set1_epi8((char)0x80));
                v0 = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(q));
                v1 = _mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1));
            } else {
                const __m128i x =
                    _mm_setr_epi32((int)ld32(c), (int)ld32(c + 64), (int)ld32(c + 128), (int)ld32(c + 192));
                const __m128i nib = _mm_set1_epi8(0x0f);
                const __m128i lo = _mm_and_si128(x, nib), hi = _mm_and_si128(_mm_srli_epi16(x, 4), nib);
                __m128i a = _mm_unpacklo_epi32(lo, hi), z = _mm_unpackhi_epi32(lo, hi);
                if (L.q5) {
                    const uint32_t qh = ld32(p + L.qh + 4 * i);
                    a = _mm_mask_add_epi8(a, (__mmask16)(qh & 0xffff), a, _mm_set1_epi8(16));
                    z = _mm_mask_add_epi8(z, (__mmask16)(qh >> 16), z, _mm_set1_epi8(16));
                }
                v0 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(a), _mm512_set1_epi32(L.o));
                v1 = _mm512_sub_epi32(_mm512_cvtepu8_epi32(z), _mm512_set1_epi32(L.o));
            }
            __m512 y0 = _mm512_mul_ps(_mm512_cvtepi32_ps(v0), d), y1 = _mm512_mul_ps(_mm512_cvtepi32_ps(v1), d);
            if (L.min) {
                memcpy(&h, p + L.m + 2 * i, 2);
                const __m512 m = _mm512_set1_ps(QUANT_H2F(h));
                y0 = _mm512_add_ps(y0, m);
                y1 = _mm512_add_ps(y1, m);
            }
            float *o = dst + (size_t)r * n + 32 * b;
            _mm512_storeu_ps(o, y0);
            _mm512_storeu_ps(o + 16, y1);
        }
    }
}

#define ILV_DEQUANT(name, T)                                                                       \
    static void name(int64_t n, const void *ilv, int64_t r0, int nr, float *dst) {                 \
        ilv_dequant_tiles(T, n, ilv, r0, nr, dst);                                                 \
    }
ILV_DEQUANT(ilv_dequant_q4_0, DT_Q4_0)
ILV_DEQUANT(ilv_dequant_q4_1, DT_Q4_1)
ILV_DEQUANT(ilv_dequant_q5_0, DT_Q5_0)
ILV_DEQUANT(ilv_dequant_q5_1, DT_Q5_1)
ILV_DEQUANT(ilv_dequant_q8_0, DT_Q8_0)

void quant_kernels_avx512(struct quant_kernels *k) {
    quant_simd_set(k);
    k->quantize[DT_Q8_K] = quant_q8_K;
    k->dequant[DT_Q4_1] = dequant_q4_1;
    k->dequant[DT_Q5_0] = dequant_q5_0;
    k->dequant[DT_Q5_1] = dequant_q5_1;
    k->ilv_dequant[DT_Q4_0] = ilv_dequant_q4_0;
    k->ilv_dequant[DT_Q4_1] = ilv_dequant_q4_1;
    k->ilv_dequant[DT_Q5_0] = ilv_dequant_q5_0;
    k->ilv_dequant[DT_Q5_1] = ilv_dequant_q5_1;
    k->ilv_dequant[DT_Q8_0] = ilv_dequant_q8_0;
}
