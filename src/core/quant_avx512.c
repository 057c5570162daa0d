/* AVX-512 (F, BW, VL, DQ) kernels: the same integer scheme as
 * quant_avx2.c on 64-byte vectors, i.e. two 32-value blocks or one 64-value
 * K-quant chunk per instruction. There is no vpsignb at this width, so
 * signs are handled with byte masks. Only called when cpuid reports the ISA;
 * entries not set here keep their AVX2 kernels. */

#include "simd_avx512.h"

#include <immintrin.h>
#include <math.h>
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

/* ---- f32 / f16 / bf16 ----------------------------------------------- */

/* v's 16 lanes summed as _mm512_reduce_add_ps sums them in GCC (halves,
 * quarters, then pairs), written out so that reduce16 below can take the
 * same tree whatever the compiler: the KV rows' dots depend on it bit for
 * bit (clang's _mm512_reduce_add_ps may pair lanes otherwise, so a clang
 * build's numbers may differ from its earlier ones by rounding). */
static inline float hsum16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

/* a . b in 16 lanes, before their sum. */
static inline __m512 dot_f32_lanes(const float *a, const float *b, int64_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
        s2 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 32), _mm512_loadu_ps(b + i + 32), s2);
        s3 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 48), _mm512_loadu_ps(b + i + 48), s3);
    }
    for (; i + 16 <= n; i += 16)
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        s1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), s1);
    }
    return _mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3));
}

static float dot_f32(const float *a, const float *b, int64_t n) { return hsum16(dot_f32_lanes(a, b, n)); }

static void axpy_f32(float *y, float a, const float *x, int64_t n) {
    const __m512 va = _mm512_set1_ps(a);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    if (i < n) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m,
                              _mm512_fmadd_ps(va, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static float dot_f32_row(int64_t n, const void *w, const void *x) { return dot_f32(w, x, n); }

/* 16 halves (masked: the first `m` lanes) widened to f32. */
static inline __m512 load_f16x16(const uint16_t *h, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h));
}

static inline __m512 load_bf16x16(const uint16_t *h, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, h)), 16));
}

/* f16 and bf16 rows share everything but the 16-lane widening load. */
#define HALF_ROW_KERNELS(name, load)                                                         \
    static inline __m512 dot_##name##_lanes(int64_t n, const void *w, const float *y) {       \
        const uint16_t *h = w;                                                                \
        __m512 s0 = _mm512_setzero_ps(), s1 = s0;                                             \
        int64_t i = 0;                                                                        \
        for (; i + 32 <= n; i += 32) {                                                        \
            quant_prefetch(h + i, 64);                                                        \
            s0 = _mm512_fmadd_ps(load(h + i, 0xffff), _mm512_loadu_ps(y + i), s0);            \
            s1 = _mm512_fmadd_ps(load(h + i + 16, 0xffff), _mm512_loadu_ps(y + i + 16), s1);  \
        }                                                                                     \
        for (; i < n; i += 16) {                                                              \
            const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);                      \
            s0 = _mm512_fmadd_ps(load(h + i, m), _mm512_maskz_loadu_ps(m, y + i), s0);         \
        }                                                                                     \
        return _mm512_add_ps(s0, s1);                                                         \
    }                                                                                         \
    static float dot_##name##_row(int64_t n, const void *w, const void *x) {                  \
        return hsum16(dot_##name##_lanes(n, w, x));                                           \
    }                                                                                         \
    static void dequant_##name(const void *src, float *dst, int64_t n) {                      \
        const uint16_t *h = src;                                                              \
        for (int64_t i = 0; i < n; i += 16) {                                                 \
            const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);                      \
            _mm512_mask_storeu_ps(dst + i, m, load(h + i, m));                                \
        }                                                                                     \
    }

HALF_ROW_KERNELS(f16, load_f16x16)
HALF_ROW_KERNELS(bf16, load_bf16x16)

/* ---- 32-value blocks, two per step ---------------------------------- */

/* The 32-value block formats against activations in the batch form
 * (quant_quantize_batch), one weight row against up to four activation
 * rows at a time: w_*() unpacks two weight blocks once for every row,
 * x_*() multiplies them with the row's 64 codes, giving block 0's dot in
 * lanes 0..7 and block 1's in lanes 8..15 as exact float sums. */
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

/* A row's result from its two accumulators and its offset terms. */
static inline float row_sum(__m512 acc0, __m512 acc1, __m128 off) {
    __m128 t = _mm_add_ps(off, _mm_movehl_ps(off, off));
    t = _mm_add_ss(t, _mm_movehdup_ps(t));
    return _mm512_reduce_add_ps(_mm512_add_ps(acc0, acc1)) + _mm_cvtss_f32(t);
}

/* Four blocks (two vectors) per step: the weight side (codes, scales d
 * and offsets m of blocks 0, k1, k2, k3, scales spread over each block's
 * 8 lanes) is made once for all rows; per row, its codes and its repeated
 * scales are loaded as they lie. In the last, partial group the missing
 * weight blocks repeat block 0 under a zero scale and the missing
 * activations are loaded as zeros (`full` false: masked loads, which read
 * nothing past the row). `min`: the format has an offset m, whose terms
 * m * s are summed on the side. Each row's arithmetic is the same whatever
 * nr is. */
#define ROWS_DOT_32(name, wt, w_pair, x_pair, min, w_min)                                                    \
    static inline __attribute__((always_inline)) void name##_group(                                          \
        const wt *p, int cnt, const bool full, const uint8_t *xb, size_t rb, int64_t n, int64_t i, const int nr, \
        __m512 *acc0, __m512 *acc1, __m128 *off) {                                                           \
        const int k1 = cnt > 1, k2 = cnt > 2 ? 2 : 0, k3 = cnt > 3 ? 3 : 0;                                  \
        const __mmask8 m4 = (__mmask8)((1u << cnt) - 1);                                                     \
        const __mmask16 f01 = cnt > 1 ? 0xffff : 0xff, f23 = cnt > 3 ? 0xffff : cnt > 2 ? 0xff : 0;          \
        const __mmask64 b01 = cnt > 1 ? ~0ULL : 0xffffffffULL, b23 = cnt > 3 ? ~0ULL : cnt > 2 ? 0xffffffffULL : 0; \
        const __m512i lo = join256(_mm256_setzero_si256(), _mm256_set1_epi32(1));                            \
        const __m512i hi = join256(_mm256_set1_epi32(2), _mm256_set1_epi32(3));                              \
        const __m512 wd = _mm512_castps128_ps512(_mm_maskz_mov_ps(m4, fp16x4(p[0].d, p[k1].d, p[k2].d, p[k3].d))); \
        const __m512 wd01 = _mm512_permutexvar_ps(lo, wd), wd23 = _mm512_permutexvar_ps(hi, wd);             \
        const __m128 wm = _mm_maskz_mov_ps(m4, w_min(p, k1, k2, k3));                                        \
        quant_prefetch(p, 4 * sizeof(wt));                                                                   \
        const struct wcodes w01 = w_pair(p, p + k1), w23 = w_pair(p + k2, p + k3);                           \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {                                               \
            const int8_t *y = (const int8_t *)(xb + (size_t)r * rb) + 32 * i;                                \
            const float *xd = (const float *)(const void *)(xb + (size_t)r * rb + n) + QUANT_D_REPEAT * i;   \
            const __m512 d01 = full ? _mm512_loadu_ps(xd) : _mm512_maskz_loadu_ps(f01, xd);                  \
            const __m512 d23 = full ? _mm512_loadu_ps(xd + 16) : _mm512_maskz_loadu_ps(f23, xd + 16);        \
            const __m512i y01 = full ? _mm512_loadu_si512(y) : _mm512_maskz_loadu_epi8(b01, y);              \
            const __m512i y23 = full ? _mm512_loadu_si512(y + 64) : _mm512_maskz_loadu_epi8(b23, y + 64);    \
            acc0[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd01, d01), x_pair(w01, y01), acc0[r]);                  \
            acc1[r] = _mm512_fmadd_ps(_mm512_mul_ps(wd23, d23), x_pair(w23, y23), acc1[r]);                  \
            if (min) {                                                                                       \
                const float *xs = (const float *)(const void *)(xb + (size_t)r * rb + n) +                   \
                                  QUANT_D_REPEAT * (n / 32) + i;                                             \
                off[r] = _mm_add_ps(off[r], _mm_mul_ps(wm, full ? _mm_loadu_ps(xs) : _mm_maskz_loadu_ps(m4, xs))); \
            }                                                                                                \
        }                                                                                                    \
    }                                                                                                        \
    static inline __attribute__((always_inline)) void name##_n(int64_t n, const wt *a, const uint8_t *xb,    \
                                                               size_t rb, const int nr, float *out, size_t os) { \
        const int64_t nb = n / 32, full = nb / 4 * 4;                                                        \
        __m512 acc0[4], acc1[4];                                                                             \
        __m128 off[4];                                                                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {                                               \
            acc0[r] = acc1[r] = _mm512_setzero_ps();                                                         \
            off[r] = _mm_setzero_ps();                                                                       \
        }                                                                                                    \
        for (int64_t i = 0; i < full; i += 4)                                                                \
            name##_group(a + i, 4, true, xb, rb, n, i, nr, acc0, acc1, off);                                 \
        if (full < nb)                                                                                       \
            name##_group(a + full, (int)(nb - full), false, xb, rb, n, full, nr, acc0, acc1, off);           \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)                                                 \
            out[(size_t)r * os] = row_sum(acc0[r], acc1[r], off[r]);                                         \
    }                                                                                                        \
    /* Two weight rows against one activation row: name##_n's arithmetic for                           \
     * each, sharing the activation loads and the loop. */                                                  \
    static inline __attribute__((always_inline)) void name##_w2(int64_t n, const void *wa, const void *wb,    \
                                                                const uint8_t *xb, size_t rb, float *out) {  \
        const wt *a = wa, *b = wb;                                                                           \
        const int64_t nb = n / 32, full = nb / 4 * 4;                                                        \
        __m512 a0[1] = {_mm512_setzero_ps()}, a1[1] = {a0[0]}, b0[1] = {a0[0]}, b1[1] = {a0[0]};             \
        __m128 ao[1] = {_mm_setzero_ps()}, bo[1] = {ao[0]};                                                  \
        for (int64_t i = 0; i < full; i += 4) {                                                              \
            name##_group(a + i, 4, true, xb, rb, n, i, 1, a0, a1, ao);                                       \
            name##_group(b + i, 4, true, xb, rb, n, i, 1, b0, b1, bo);                                       \
        }                                                                                                    \
        if (full < nb) {                                                                                     \
            name##_group(a + full, (int)(nb - full), false, xb, rb, n, full, 1, a0, a1, ao);                 \
            name##_group(b + full, (int)(nb - full), false, xb, rb, n, full, 1, b0, b1, bo);                 \
        }                                                                                                    \
        out[0] = row_sum(a0[0], a1[0], ao[0]);                                                               \
        out[1] = row_sum(b0[0], b1[0], bo[0]);                                                               \
    }                                                                                                        \
    ROWS_BY_4(name, quant_planar_row_bytes(n, min), name##_w2, name##_n)

ROWS_DOT_32(rows_q4_0_q8_0, struct block_q4_0, w_q4_0, x_q4_0, 0, no_min)
ROWS_DOT_32(rows_q4_1_q8_1, struct block_q4_1, w_q4_1, x_q4_1, 1, m_q4_1)
ROWS_DOT_32(rows_q5_0_q8_0, struct block_q5_0, w_q5_0, x_q5_0, 0, no_min)
ROWS_DOT_32(rows_q5_1_q8_1, struct block_q5_1, w_q5_1, x_q4_1, 1, m_q5_1)
ROWS_DOT_32(rows_q8_0_q8_0, struct block_q8_0, w_q8_0, x_q8_0, 0, no_min)

/* Dequantisation of the other 32-value formats, two blocks at a time from
 * the codes the dot kernels unpack: (code - o) * d, plus m where the format
 * has one (min_of(block): its m as a float). Every product is exact, so
 * this equals the scalar kernels. */
#define DEQUANT_32(name, wt, w_pair, o, has_min, min_of)                                                \
    static void name(const void *src, float *dst, int64_t n) {                                          \
        const wt *b = src;                                                                              \
        const int64_t nb = n / 32;                                                                      \
        for (int64_t i = 0; i < nb; i += 2, dst += 64) {                                                \
            const int64_t i1 = i + 1 < nb ? i + 1 : i;                                                  \
            uint8_t codes[64];                                                                          \
            _mm512_storeu_si512(codes, w_pair(&b[i], &b[i1]).u);                                        \
            for (int k = 0; k < (i1 > i ? 4 : 2); k++) {                                                \
                const wt *blk = &b[k < 2 ? i : i1];                                                     \
                const __m512 v = _mm512_cvtepi32_ps(                                                    \
                    _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(codes + 16 * k))));          \
                const __m512 d = _mm512_set1_ps(QUANT_H2F(blk->d));                                     \
                __m512 y = _mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(o)), d);                       \
                if (has_min)                                                                            \
                    y = _mm512_add_ps(y, _mm512_set1_ps(min_of(blk)));                                  \
                _mm512_storeu_ps(dst + 16 * k, y);                                                      \
            }                                                                                           \
        }                                                                                               \
    }

#define no_min_of(b) 0.0f
#define min_of_m(b) QUANT_H2F((b)->m)

DEQUANT_32(dequant_q4_0, struct block_q4_0, w_q4_0, 8, 0, no_min_of)
DEQUANT_32(dequant_q4_1, struct block_q4_1, w_q4_1, 0, 1, min_of_m)
DEQUANT_32(dequant_q5_0, struct block_q5_0, w_q5_0, 16, 0, no_min_of)
DEQUANT_32(dequant_q5_1, struct block_q5_1, w_q5_1, 0, 1, min_of_m)

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const __m512 d = _mm512_set1_ps(QUANT_H2F(b[i].d));
        for (int j = 0; j < QK8_0; j += 16) {
            const __m512i v = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b[i].qs + j)));
            _mm512_storeu_ps(dst + j, _mm512_mul_ps(_mm512_cvtepi32_ps(v), d));
        }
    }
}

/* ---- activation quantisation ---------------------------------------- */

/* max(|x|, acc) keeps acc where |x| is NaN, as fmaxf does. */
static float absmax32(const float *x) {
    const __m512 a = _mm512_abs_ps(_mm512_loadu_ps(x)), b = _mm512_abs_ps(_mm512_loadu_ps(x + 16));
    return _mm512_reduce_max_ps(_mm512_max_ps(b, _mm512_max_ps(a, _mm512_setzero_ps())));
}

/* Clamped in float first (max(NaN, lo) is lo), then rounded half to even
 * by the default MXCSR mode, as lrintf. */
static int codes32(const float *x, float id, int8_t qs[32]) {
    const __m512 v = _mm512_set1_ps(id), lo = _mm512_set1_ps(-127.0f), hi = _mm512_set1_ps(127.0f);
    __m512i sum = _mm512_setzero_si512();
    for (int j = 0; j < 32; j += 16) {
        const __m512 f = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(x + j), v), lo), hi);
        const __m512i q = _mm512_cvtps_epi32(f);
        _mm_storeu_si128((__m128i *)(qs + j), _mm512_cvtepi32_epi8(q));
        sum = _mm512_add_epi32(sum, q);
    }
    return _mm512_reduce_add_epi32(sum);
}

/* ---- KV cache rows against f32 -------------------------------------- */

/* Values 16k .. 16k+15 of a Q8_0 block as floats (the code, not yet scaled). */
static inline __m512 q8_0_codes16(const struct block_q8_0 *b, int k) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b->qs + 16 * k))));
}

/* Values 16k .. 16k+15 of a Q4_0 block as floats (code - 8, not yet
 * scaled): the low nibbles of its 16 bytes, then the high ones. */
static inline __m512 q4_0_codes16(const struct block_q4_0 *b, int k) {
    __m128i q = _mm_loadu_si128((const __m128i *)b->qs);
    if (k) q = _mm_srli_epi16(q, 4);
    q = _mm_and_si128(q, _mm_set1_epi8(0xf));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(8)));
}

static inline __attribute__((always_inline)) __m512 q32_codes(enum dtype t, const uint8_t *b, int k) {
    return t == DT_Q8_0 ? q8_0_codes16((const void *)b, k) : q4_0_codes16((const void *)b, k);
}

#include "q32_rows_simd.h"

static float dot_q8_0_f32(int64_t n, const void *w, const void *x) {
    return hsum16(dot_q32_lanes(DT_Q8_0, n, w, x));
}
static float dot_q4_0_f32(int64_t n, const void *w, const void *x) {
    return hsum16(dot_q32_lanes(DT_Q4_0, n, w, x));
}

static void axpy_f32_row(float *y, float a, const void *x, int64_t n) { axpy_f32(y, a, x, n); }

static void axpy_f16_row(float *y, float a, const void *x, int64_t n) {
    const uint16_t *h = x;
    const __m512 va = _mm512_set1_ps(a);
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? 0xffff : tail_mask(n - i);
        _mm512_mask_storeu_ps(y + i, m, _mm512_fmadd_ps(va, load_f16x16(h + i, m), _mm512_maskz_loadu_ps(m, y + i)));
    }
}

static void axpy_q8_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q8_0, y, a, x, n); }
static void axpy_q4_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q4_0, y, a, x, n); }

/* ---- K quants ------------------------------------------------------- */

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

/* Min term of Q4_K/Q5_K, as in quant_avx2.c. */
static inline float k4_min_term(const uint8_t mn[8], const int16_t bsums[16]) {
    const __m256i bs = _mm256_loadu_si256((const __m256i *)bsums);
    const __m128i pair = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
    const __m128i prod = _mm_madd_epi16(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)mn)), pair);
    __m128i s = _mm_add_epi32(prod, _mm_unpackhi_epi64(prod, prod));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return (float)_mm_cvtsi128_si32(s);
}

/* Q4_K (q5 = 0) and Q5_K (q5 = 1) against up to four Q8_K rows of a batch
 * form (rows rb bytes apart); one 64-value chunk (two sub-blocks) per
 * vector: low nibbles in the low half, high nibbles in the high half,
 * which is exactly the order of the 64 activations. A weight block's codes
 * and scales are unpacked once for all rows; each row's arithmetic is the
 * same whatever nr is. */
static inline __attribute__((always_inline)) void k4_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                            const int q5, const int nr, float *out, size_t os) {
    const size_t stride = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const __m512i m4 = _mm512_set1_epi8(0x0f), bit4 = _mm512_set1_epi8(0x10);
    __m512 acc[4];
    float mins[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        mins[r] = 0;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q5_K *a5 = (const void *)((const uint8_t *)w + i * stride);
        const struct block_q4_K *a4 = (const void *)a5;
        const uint8_t *qs = q5 ? a5->qs : a4->qs;
        quant_prefetch(a5, stride);
        uint8_t sc[8], mn[8];
        quant_k4_scales(a4->scales, sc, mn);
        const __m512i scales = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
        __m512i hb = _mm512_setzero_si512();
        if (q5) {
            /* Bit 2j of qh belongs to the low half of chunk j, bit 2j+1 to
             * the high half: pre-shift the high copy by one. */
            const __m256i h = _mm256_loadu_si256((const __m256i *)a5->qh);
            hb = join256(h, _mm256_srli_epi16(h, 1));
        }
        __m512i q[4], s[4];
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * j));
            q[j] = _mm512_and_si512(join256(raw, _mm256_srli_epi16(raw, 4)), m4);
            if (q5) {
                q[j] = _mm512_or_si512(q[j], _mm512_and_si512(_mm512_slli_epi16(hb, 4), bit4));
                hb = _mm512_srli_epi16(hb, 2);
            }
            s[j] = _mm512_permutexvar_epi16(k4_index(j), scales);
        }
        const float d = QUANT_H2F(a4->d), dmin = QUANT_H2F(a4->dmin);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            const struct block_q8_K *b = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
            __m512i sumi = _mm512_setzero_si512();
            _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
                const __m512i y = _mm512_loadu_si512(b->qs + 64 * j);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q[j], y), s[j]));
            }
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * b->d), _mm512_cvtepi32_ps(sumi), acc[r]);
            mins[r] += dmin * b->d * k4_min_term(mn, b->bsums);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = _mm512_reduce_add_ps(acc[r]) - mins[r];
}

static inline __attribute__((always_inline)) void q4k_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                             const int nr, float *out, size_t os) {
    k4_rows_n(n, w, xb, rb, 0, nr, out, os);
}

static inline __attribute__((always_inline)) void q5k_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                             const int nr, float *out, size_t os) {
    k4_rows_n(n, w, xb, rb, 1, nr, out, os);
}

ROWS_BY_4(rows_q4_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q4k_rows_n)
ROWS_BY_4(rows_q5_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q5k_rows_n)

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d), dmin = QUANT_H2F(b[i].dmin);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b[i].scales, sc, mn);
        for (int j = 0; j < 8; j++, dst += 32) {
            const __m512 ds = _mm512_set1_ps(d * sc[j]), dm = _mm512_set1_ps(dmin * mn[j]);
            const uint8_t *qs = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l += 16) {
                __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(qs + l)));
                v = j % 2 ? _mm512_srli_epi32(v, 4) : _mm512_and_si512(v, _mm512_set1_epi32(0x0f));
                _mm512_storeu_ps(dst + l, _mm512_sub_ps(_mm512_mul_ps(ds, _mm512_cvtepi32_ps(v)), dm));
            }
        }
    }
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

/* Q6_K against up to four Q8_K rows, as k4_rows_n. The codes are stored
 * +32: each row subtracts 32 * sum_g sc_g * bsums_g once per block. */
static inline __attribute__((always_inline)) void q6_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                            const int nr, float *out, size_t os) {
    const struct block_q6_K *a = w;
    __m512 acc[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        quant_prefetch(&a[i], sizeof a[i]);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        const __m512i scales = _mm512_castsi256_si512(sc16);
        __m512i q[4], s[4];
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            q6_codes(a[i].ql + 64 * h, a[i].qh + 32 * h, q + 2 * h);
            s[2 * h] = _mm512_permutexvar_epi16(q6_index(2 * h), scales);
            s[2 * h + 1] = _mm512_permutexvar_epi16(q6_index(2 * h + 1), scales);
        }
        const float d = QUANT_H2F(a[i].d);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            const struct block_q8_K *b = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
            const __m256i bias = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b->bsums));
            __m512i sumi = _mm512_zextsi256_si512(_mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), bias), 5));
            _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {
                const __m512i y = _mm512_loadu_si512(b->qs + 64 * c);
                sumi = _mm512_add_epi32(sumi, _mm512_madd_epi16(_mm512_maddubs_epi16(q[c], y), s[c]));
            }
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(d * b->d), _mm512_cvtepi32_ps(sumi), acc[r]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++)
        out[(size_t)r * os] = _mm512_reduce_add_ps(acc[r]);
}

ROWS_BY_4(rows_q6_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q6_rows_n)

/* dst[0..15] = ds * v (16 signed bytes). */
static inline void q6_store16(float *dst, float ds, __m128i v) {
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_set1_ps(ds), _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))));
}

static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d);
        for (int h = 0; h < 2; h++) {
            __m512i q[2];
            q6_codes(b[i].ql + 64 * h, b[i].qh + 32 * h, q);
            for (int c = 0; c < 2; c++) {
                const __m512i v = _mm512_sub_epi8(q[c], _mm512_set1_epi8(32));
                const int8_t *sc = b[i].scales + 8 * h + 4 * c;
                q6_store16(dst, d * sc[0], _mm512_extracti32x4_epi32(v, 0));
                q6_store16(dst + 16, d * sc[1], _mm512_extracti32x4_epi32(v, 1));
                q6_store16(dst + 32, d * sc[2], _mm512_extracti32x4_epi32(v, 2));
                q6_store16(dst + 48, d * sc[3], _mm512_extracti32x4_epi32(v, 3));
                dst += 64;
            }
        }
    }
}

/* ---- decoding attention: runs of KV rows against a group's query heads */

/* The sums of 16 vectors' lanes, lane r that of v[r], each by hsum16's
 * tree: the halves of each vector are added two vectors at a time, then
 * the quarters, pairs and last two, and the result is put in row order.
 * Three shuffles and adds a row instead of hsum16's eight, and no
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

/* One KV row of type t (a constant at every call) against x, in lanes. */
static inline __attribute__((always_inline)) __m512 kv_dot_lanes(enum dtype t, const uint8_t *row, const float *x,
                                                                 int64_t d) {
    return t == DT_F32 ? dot_f32_lanes((const float *)(const void *)row, x, d)
         : t == DT_F16 ? dot_f16_lanes(d, row, x)
                       : dot_q32_lanes(t, d, row, x);
}

/* Values c .. c + 15 of a KV row (masked to m, which says where the row
 * ends); Q8_0 and Q4_0 give their codes, the scale going into the axpy's factor
 * (quant_kv_scale). */
static inline __attribute__((always_inline)) __m512 kv_values(enum dtype t, const uint8_t *row, int64_t c,
                                                               int64_t left, __mmask16 m) {
    (void)left;
    if (t == DT_F32) return _mm512_maskz_loadu_ps(m, (const float *)(const void *)row + c);
    if (t == DT_F16) return load_f16x16((const uint16_t *)(const void *)row + c, m);
    const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    return q32_codes(t, row + (size_t)(c / 32) * bb, (int)(c % 32) / 16);
}

#define V_REDUCE_ROWS(v) reduce16(v)
/* 32 registers: 4 queries x 4 vectors of sums (6 heads: passes of 3);
 * 6 x 2 measured the same on Zen 4 (bench/bench_attn.c, within its
 * noise). */
#define KV_MIX_VECS 4
#define KV_MIX_QN 4
#define KV_DOT_QN 4
#include "kv_rows_simd.h"

KV_RUN_KERNELS(f32, DT_F32)
KV_RUN_KERNELS(f16, DT_F16)
KV_RUN_KERNELS(q8_0, DT_Q8_0)
KV_RUN_KERNELS(q4_0, DT_Q4_0)

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
    k->quantize[DT_Q8_K] = quant_q8_K;
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
    k->dequant[DT_Q4_0] = dequant_q4_0;
    k->dequant[DT_Q4_1] = dequant_q4_1;
    k->dequant[DT_Q5_0] = dequant_q5_0;
    k->dequant[DT_Q5_1] = dequant_q5_1;
    k->dequant[DT_Q8_0] = dequant_q8_0;
    k->ilv_dequant[DT_Q4_0] = ilv_dequant_q4_0;
    k->ilv_dequant[DT_Q4_1] = ilv_dequant_q4_1;
    k->ilv_dequant[DT_Q5_0] = ilv_dequant_q5_0;
    k->ilv_dequant[DT_Q5_1] = ilv_dequant_q5_1;
    k->ilv_dequant[DT_Q8_0] = ilv_dequant_q8_0;
    k->dequant[DT_Q4_K] = dequant_q4_K;
    k->dequant[DT_Q6_K] = dequant_q6_K;
    k->dot[DT_F32] = dot_f32_row;
    k->dot[DT_F16] = dot_f16_row;
    k->dot[DT_BF16] = dot_bf16_row;
    k->dot_rows[DT_Q4_0] = rows_q4_0_q8_0;
    k->dot_rows[DT_Q4_1] = rows_q4_1_q8_1;
    k->dot_rows[DT_Q5_0] = rows_q5_0_q8_0;
    k->dot_rows[DT_Q5_1] = rows_q5_1_q8_1;
    k->dot_rows[DT_Q8_0] = rows_q8_0_q8_0;
    k->dot_rows[DT_Q4_K] = rows_q4_K_q8_K;
    k->dot_rows[DT_Q5_K] = rows_q5_K_q8_K;
    k->dot_rows[DT_Q6_K] = rows_q6_K_q8_K;
    k->absmax32 = absmax32;
    k->codes32 = codes32;
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
