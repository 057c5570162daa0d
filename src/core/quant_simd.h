/* The quantised kernels of struct quant_kernels written once for any vector
 * width: quant_avx2.c and quant_avx512.c include this body under their
 * mapping (simd_avx2.h, simd_avx512.h: the float names listed in
 * vec_simd.h and those below) after defining what depends on the ISA's
 * instructions. Where the levels' order of arithmetic differs (the lanes a
 * vector holds, v_hsum's tree, R32_CHAIN), the mapping says which, so that
 * each level's results stay its own, and its row-by-row forms' (the tests
 * compare them). No include guard: one inclusion per file.
 *
 * The mapping's integer vectors, VW 32-bit lanes (VB = 4 VW bytes):
 *   vi VI_ZERO() VI_LOAD(p) VI_SET1_8(x) VI_SET1_32(x) VI_AND VI_OR VI_ADD32
 *   VI_SUB8 VI_SLLI16(v, k) VI_SRLI16 VI_SRLI32 (k constant)
 *   VI_MADDUBS(u, s)     unsigned times signed bytes, pairs summed (int16,
 *                        saturated); VI_MADD16(a, b) int16 pairs into int32
 *   VI_TO_F(v), V_TO_I(v) int32 <-> float (to nearest, ties to even)
 *   VI_FROM256(v)        a 256-bit vector in the low lanes, the rest 0
 *   VI_U8(p)             VW unsigned bytes in 32-bit lanes
 *   v_i8(p), v_i8_of(x, l) VW signed bytes as floats: at p; bytes l .. of
 *                        the 16 in x (l a multiple of VW)
 *   vi_bytes16(v, g)     bytes 16 g .. 16 g + 15 of v (g constant)
 *   v_abs(v), v_hsum(v)  |v|; the sum of the lanes, halves added first
 *                        (V_REDUCE_ROWS sums rows by the same tree)
 * and what the file defines:
 *   v_f16(h, left, m), v_bf16(h, left, m)
 *                        h[0 .. VW) widened (the first `left`, under mask
 *                        m, when fewer remain; the rest 0)
 *   HALF_PREFETCH        whether the f16 / bf16 dots prefetch the row
 *   absmax_lanes(v)      the largest lane of v, all >= +0 and none NaN (so
 *                        any order gives the same bits)
 *   codes_store(q, qs)   the 32 / VW vectors of codes q (in [-127, 127]) to
 *                        the bytes qs in order; returns their sum
 *   q32_codes(t, b, k)   (q32_rows_simd.h)
 *   the 32-value blocks' pieces (ROWS_DOT_32, below):
 *     struct wcodes, w_q4_0 .. w_q8_0, x_q4_0 .. x_q8_0
 *                        a weight vector's codes; their dot with a vector of
 *                        activation codes as exact float partial sums
 *     R32_CODES(w, p, k, v)
 *                        w of the blocks of vector v (of p + k[..])
 *     r32_scales(p, stride, k, cnt, full, min, wd, wm)
 *                        the group's scales d spread over their blocks'
 *                        lanes (0 past cnt), and its offsets m (min) as four
 *                        floats; full (a constant): cnt is 4
 *     r32_dscales(xd, k, v, cnt, full), r32_acts(y, k, v, cnt, full)
 *                        a row's repeated scales and codes for vector v
 *     R32_CHAIN          1: a group's vectors summed in one chain, then
 *                        added to one accumulator; 0: an accumulator each
 *     R32_W2             two weight rows against one activation row too
 *   the K types' pieces (k4_rows_n, q6_rows_n, below):
 *     k4_scales(sc), k4_scale(s, c)
 *                        the sub-block scales, and those of vector c's codes
 *     k4_nibbles(qs, q)  the 64 codes of 32 bytes in 64 / VB vectors: the
 *                        low nibbles, then the high ones
 *     k4_high(qh, hb)    Q5_K's fifth bits for k4_nibbles' vectors: bit 0
 *                        of each byte of hb[c] that of the code in its
 *                        place, for the first 64 codes (then shifted by 2)
 *     q6_codes(ql, qh, q)
 *                        a Q6_K half's 128 codes in 128 / VB vectors
 *     q6_scale(sc8, c)   the scales of codes vector c as int16 lanes
 *   V_REDUCE_ROWS, KV_MIX_VECS, KV_MIX_QN, KV_DOT_QN (kv_rows_simd.h) */

#define VB (4 * VW)

/* ---- f32 / f16 / bf16 ----------------------------------------------- */

/* a . b in lanes, before their sum. */
static inline vf dot_f32_lanes(const float *a, const float *b, int64_t n) {
    vf s0 = V_ZERO(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 4 * VW <= n; i += 4 * VW) {
        s0 = V_FMA(V_LOAD(a + i), V_LOAD(b + i), s0);
        s1 = V_FMA(V_LOAD(a + i + VW), V_LOAD(b + i + VW), s1);
        s2 = V_FMA(V_LOAD(a + i + 2 * VW), V_LOAD(b + i + 2 * VW), s2);
        s3 = V_FMA(V_LOAD(a + i + 3 * VW), V_LOAD(b + i + 3 * VW), s3);
    }
    for (; i + VW <= n; i += VW) s0 = V_FMA(V_LOAD(a + i), V_LOAD(b + i), s0);
    if (i < n) {
        const vmask m = v_mask(n - i);
        s1 = V_FMA(V_LOADM(m, a + i), V_LOADM(m, b + i), s1);
    }
    return V_ADD(V_ADD(s0, s1), V_ADD(s2, s3));
}

static float dot_f32(const float *a, const float *b, int64_t n) { return v_hsum(dot_f32_lanes(a, b, n)); }

static float dot_f32_row(int64_t n, const void *w, const void *x) { return dot_f32(w, x, n); }

/* Values i .. i + VW - 1 of a row of type t (F32, F16, BF16; a constant):
 * the first `left`, under mask m, when fewer remain, the rest 0. */
static inline __attribute__((always_inline)) vf row_values(enum dtype t, const void *x, int64_t i, int64_t left,
                                                           vmask m) {
    if (t == DT_F16) return v_f16((const uint16_t *)x + i, left, m);
    if (t == DT_BF16) return v_bf16((const uint16_t *)x + i, left, m);
    return left >= VW ? V_LOAD((const float *)x + i) : V_LOADM(m, (const float *)x + i);
}

static inline __attribute__((always_inline)) void axpy_row(enum dtype t, float *y, float a, const void *x, int64_t n) {
    const vf va = V_SET1(a);
    int64_t i = 0;
    for (; i + VW <= n; i += VW) V_STORE(y + i, V_FMA(va, row_values(t, x, i, VW, v_mask(VW)), V_LOAD(y + i)));
    if (i < n) {
        const vmask m = v_mask(n - i);
        V_STOREM(y + i, m, V_FMA(va, row_values(t, x, i, n - i, m), V_LOADM(m, y + i)));
    }
}

static void axpy_f32(float *y, float a, const float *x, int64_t n) { axpy_row(DT_F32, y, a, x, n); }
static void axpy_f32_row(float *y, float a, const void *x, int64_t n) { axpy_row(DT_F32, y, a, x, n); }
static void axpy_f16_row(float *y, float a, const void *x, int64_t n) { axpy_row(DT_F16, y, a, x, n); }

/* An f16 or bf16 row (t) . y in lanes: two sums over alternate vectors,
 * the tail into the first. */
static inline __attribute__((always_inline)) vf dot_half_lanes(enum dtype t, int64_t n, const void *w, const float *y) {
    vf s0 = V_ZERO(), s1 = s0;
    int64_t i = 0;
    for (; i + 2 * VW <= n; i += 2 * VW) {
        if (HALF_PREFETCH) quant_prefetch((const uint16_t *)w + i, 4 * VW);
        s0 = V_FMA(row_values(t, w, i, VW, v_mask(VW)), V_LOAD(y + i), s0);
        s1 = V_FMA(row_values(t, w, i + VW, VW, v_mask(VW)), V_LOAD(y + i + VW), s1);
    }
    for (; i < n; i += VW) {
        const vmask m = v_mask(n - i);
        s0 = V_FMA(row_values(t, w, i, n - i, m), V_LOADM(m, y + i), s0);
    }
    return V_ADD(s0, s1);
}

static inline __attribute__((always_inline)) void dequant_half(enum dtype t, const void *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + VW <= n; i += VW) V_STORE(dst + i, row_values(t, src, i, VW, v_mask(VW)));
    if (i < n) {
        const vmask m = v_mask(n - i);
        V_STOREM(dst + i, m, row_values(t, src, i, n - i, m));
    }
}

static float dot_f16_row(int64_t n, const void *w, const void *x) { return v_hsum(dot_half_lanes(DT_F16, n, w, x)); }
static float dot_bf16_row(int64_t n, const void *w, const void *x) { return v_hsum(dot_half_lanes(DT_BF16, n, w, x)); }
static void dequant_f16(const void *src, float *dst, int64_t n) { dequant_half(DT_F16, src, dst, n); }
static void dequant_bf16(const void *src, float *dst, int64_t n) { dequant_half(DT_BF16, src, dst, n); }

/* ---- activation quantisation ---------------------------------------- */

/* max(|x|, acc) keeps acc where |x| is NaN, as fmaxf does. */
static float absmax32(const float *x) {
    vf m = V_ZERO();
    for (int j = 0; j < 32; j += VW) m = V_MAX(v_abs(V_LOAD(x + j)), m);
    return absmax_lanes(m);
}

/* Clamped in float first (max(NaN, lo) is lo), then rounded half to even
 * by the default MXCSR mode, as lrintf. */
static int codes32(const float *x, float id, int8_t qs[32]) {
    const vf v = V_SET1(id), lo = V_SET1(-127.0f), hi = V_SET1(127.0f);
    vi q[32 / VW];
    for (int k = 0; k < 32 / VW; k++) q[k] = V_TO_I(V_MIN(V_MAX(V_MUL(V_LOAD(x + VW * k), v), lo), hi));
    return codes_store(q, qs);
}

/* ---- 32-value blocks ------------------------------------------------ */

static inline float hsum128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

/* Vectors of four blocks' 8 x 4 lanes of partial sums; accumulators a row. */
#define R32_VECS (32 / VW)
#define R32_ACCS (R32_CHAIN ? 1 : R32_VECS)

/* A row's result from its accumulators and its offset terms. */
static inline float r32_sum(const vf acc[R32_ACCS], __m128 off) {
    vf s = acc[0];
    for (int c = 1; c < R32_ACCS; c++) s = V_ADD(s, acc[c]);
    return v_hsum(s) + hsum128(off);
}

/* The 32-value block formats against activations in the batch form
 * (quant_quantize_batch), one weight row against up to four activation
 * rows at a time, four blocks a step: the weight side (codes, scales d and
 * offsets m of blocks 0, k1, k2, k3) is made once for all rows; per row,
 * its codes and its repeated scales are loaded as they lie. Whole groups
 * (`full`) run with every index and mask constant; in the last, partial
 * group the
 * missing weight blocks repeat block 0 under a zero scale (r32_acts gives
 * their activations as block 0's or zeros), and the activation sums are
 * loaded under a mask. `min`: the format has an offset m, whose terms
 * m * s are summed on the side. Each row's arithmetic is the same whatever
 * nr is, and with R32_W2 two weight rows against one activation row share
 * the loop. */
#define ROWS_DOT_32(name, wt, w_block, x_block, min) \
    static inline __attribute__((always_inline)) void name##_group(const wt *p, const int cnt, const bool full, \
                                                                   const uint8_t *xb, size_t rb, int64_t n, int64_t i, \
                                                                   const int nr, vf(*acc)[R32_ACCS], __m128 *off) { \
        const int k[4] = {0, cnt > 1, cnt > 2 ? 2 : 0, cnt > 3 ? 3 : 0}; \
        const __m128i keep = _mm_cmpgt_epi32(_mm_set1_epi32(cnt), _mm_setr_epi32(0, 1, 2, 3)); \
        quant_prefetch(p, 4 * sizeof(wt)); \
        vf wd[R32_VECS]; \
        __m128 wm; \
        r32_scales(p, sizeof(wt), k, cnt, full, min, wd, &wm); \
        struct wcodes w[R32_VECS]; \
        _Pragma("GCC unroll 4") for (int v = 0; v < R32_VECS; v++) w[v] = R32_CODES(w_block, p, k, v); \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) { \
            const int8_t *y = (const int8_t *)(xb + (size_t)r * rb) + 32 * i; \
            const float *xd = (const float *)(const void *)(xb + (size_t)r * rb + n) + QUANT_D_REPEAT * i; \
            vf t = V_ZERO(); \
            _Pragma("GCC unroll 4") for (int v = 0; v < R32_VECS; v++) { \
                const vf s = V_MUL(wd[v], r32_dscales(xd, k, v, cnt, full)); \
                const vf x = x_block(w[v], r32_acts(y, k, v, cnt, full)); \
                if (R32_CHAIN) t = v == 0 ? V_MUL(s, x) : V_FMA(s, x, t); \
                else acc[r][v] = V_FMA(s, x, acc[r][v]); \
            } \
            if (R32_CHAIN) acc[r][0] = V_ADD(acc[r][0], t); \
            if (min) { \
                const float *xs = \
                    (const float *)(const void *)(xb + (size_t)r * rb + n) + QUANT_D_REPEAT * (n / 32) + i; \
                off[r] = _mm_add_ps(off[r], _mm_mul_ps(wm, full ? _mm_loadu_ps(xs) : _mm_maskload_ps(xs, keep))); \
            } \
        } \
    } \
    static inline __attribute__((always_inline)) void name##_n(int64_t n, const void *w, const uint8_t *xb, size_t rb, \
                                                               const int nr, float *out, size_t os) { \
        const wt *a = w; \
        const int64_t nb = n / 32, whole = nb / 4 * 4; \
        vf acc[4][R32_ACCS]; \
        __m128 off[4]; \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) { \
            _Pragma("GCC unroll 4") for (int c = 0; c < R32_ACCS; c++) acc[r][c] = V_ZERO(); \
            off[r] = _mm_setzero_ps(); \
        } \
        for (int64_t i = 0; i < whole; i += 4) name##_group(a + i, 4, true, xb, rb, n, i, nr, acc, off); \
        if (whole < nb) name##_group(a + whole, (int)(nb - whole), false, xb, rb, n, whole, nr, acc, off); \
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) out[(size_t)r * os] = r32_sum(acc[r], off[r]); \
    } \
    static inline __attribute__((always_inline)) void name##_w2(int64_t n, const void *wa, const void *wb, \
                                                                const uint8_t *xb, size_t rb, float *out) { \
        const wt *a = wa, *b = wb; \
        const int64_t nb = n / 32, whole = nb / 4 * 4; \
        vf acc[2][1][R32_ACCS]; \
        __m128 off[2][1] = {{_mm_setzero_ps()}, {_mm_setzero_ps()}}; \
        _Pragma("GCC unroll 4") for (int c = 0; c < R32_ACCS; c++) acc[0][0][c] = acc[1][0][c] = V_ZERO(); \
        for (int64_t i = 0; i < whole; i += 4) { \
            name##_group(a + i, 4, true, xb, rb, n, i, 1, acc[0], off[0]); \
            name##_group(b + i, 4, true, xb, rb, n, i, 1, acc[1], off[1]); \
        } \
        if (whole < nb) { \
            name##_group(a + whole, (int)(nb - whole), false, xb, rb, n, whole, 1, acc[0], off[0]); \
            name##_group(b + whole, (int)(nb - whole), false, xb, rb, n, whole, 1, acc[1], off[1]); \
        } \
        out[0] = r32_sum(acc[0][0], off[0][0]); \
        out[1] = r32_sum(acc[1][0], off[1][0]); \
    } \
    ROWS_BY_4(name, quant_planar_row_bytes(n, min), R32_W2 ? name##_w2 : NULL, name##_n)

ROWS_DOT_32(rows_q4_0_q8_0, struct block_q4_0, w_q4_0, x_q4_0, 0)
ROWS_DOT_32(rows_q4_1_q8_1, struct block_q4_1, w_q4_1, x_q4_1, 1)
ROWS_DOT_32(rows_q5_0_q8_0, struct block_q5_0, w_q5_0, x_q5_0, 0)
ROWS_DOT_32(rows_q5_1_q8_1, struct block_q5_1, w_q5_1, x_q4_1, 1)
ROWS_DOT_32(rows_q8_0_q8_0, struct block_q8_0, w_q8_0, x_q8_0, 0)

/* Q8_0 and Q4_0 (t) as float32: every product of a code and the block's
 * scale is exact, so these equal the scalar kernels. */
static inline __attribute__((always_inline)) void dequant_q32(enum dtype t, const void *src, float *dst, int64_t n) {
    const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    for (int64_t i = 0; i < n / 32; i++, dst += 32) {
        const uint8_t *b = (const uint8_t *)src + i * bb;
        const vf d = V_SET1(quant_q32_scale(t, b));
        _Pragma("GCC unroll 4") for (int k = 0; k < 32 / VW; k++) V_STORE(dst + VW * k, V_MUL(q32_codes(t, b, k), d));
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) { dequant_q32(DT_Q8_0, src, dst, n); }
static void dequant_q4_0(const void *src, float *dst, int64_t n) { dequant_q32(DT_Q4_0, src, dst, n); }

/* ---- KV cache rows against f32 -------------------------------------- */

#include "q32_rows_simd.h"

static float dot_q8_0_f32(int64_t n, const void *w, const void *x) { return v_hsum(dot_q32_lanes(DT_Q8_0, n, w, x)); }
static float dot_q4_0_f32(int64_t n, const void *w, const void *x) { return v_hsum(dot_q32_lanes(DT_Q4_0, n, w, x)); }
static void axpy_q8_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q8_0, y, a, x, n); }
static void axpy_q4_0_row(float *y, float a, const void *x, int64_t n) { axpy_q32_row(DT_Q4_0, y, a, x, n); }

/* One KV row of type t (a constant at every call) against x, in lanes, as
 * the one-row dot_f32x[t] sums them. */
static inline __attribute__((always_inline)) vf kv_dot_lanes(enum dtype t, const uint8_t *row, const float *x,
                                                             int64_t d) {
    return t == DT_F32   ? dot_f32_lanes((const float *)(const void *)row, x, d)
           : t == DT_F16 ? dot_half_lanes(DT_F16, d, row, x)
                         : dot_q32_lanes(t, d, row, x);
}

/* Values c .. c + VW - 1 of a KV row (the first `left`, under mask m, when
 * fewer remain); Q8_0 and Q4_0 give their codes, the scale going into the
 * axpy's factor (quant_kv_scale). */
static inline __attribute__((always_inline)) vf kv_values(enum dtype t, const uint8_t *row, int64_t c, int64_t left,
                                                          vmask m) {
    if (t != DT_Q8_0 && t != DT_Q4_0) return row_values(t, row, c, left, m);
    const size_t bb = t == DT_Q8_0 ? sizeof(struct block_q8_0) : sizeof(struct block_q4_0);
    return q32_codes(t, row + (size_t)(c / 32) * bb, (int)(c % 32) / VW);
}

#include "kv_rows_simd.h"

KV_RUN_KERNELS(f32, DT_F32)
KV_RUN_KERNELS(f16, DT_F16)
KV_RUN_KERNELS(q8_0, DT_Q8_0)
KV_RUN_KERNELS(q4_0, DT_Q4_0)

/* ---- K quants ------------------------------------------------------- */

/* The K types against up to four Q8_K rows of a batch form (rows rb bytes
 * apart), one super-block at a time: a weight block's codes and scales are
 * unpacked once for all rows, a vector of codes at a time, and each row
 * adds its integer sums into its own accumulators (exact in any order), so
 * each row's arithmetic is the same whatever nr is. (Two weight rows
 * against one activation row in one loop, as R32_W2 does, streamed from
 * memory at two thirds of one row's rate on AMD Zen 3: not done.) */

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
static inline __attribute__((always_inline)) void k4_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                            const int q5, const int nr, float *out, size_t os) {
    const size_t stride = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    const vi bit4 = VI_SET1_8(0x10);
    vf acc[4];
    float mins[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
        acc[r] = V_ZERO();
        mins[r] = 0;
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const struct block_q5_K *a5 = (const void *)((const uint8_t *)w + i * stride);
        const struct block_q4_K *a4 = (const void *)a5;
        quant_prefetch(a5, stride);
        uint8_t sc[8], mn[8];
        quant_k4_scales(a4->scales, sc, mn);
        const vi scales = k4_scales(sc);
        vi hb[64 / VB];
        if (q5) k4_high(a5->qh, hb);
        const struct block_q8_K *b[4];
        vi sumi[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            b[r] = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
            sumi[r] = VI_ZERO();
        }
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++) {
            vi q[64 / VB];
            k4_nibbles((q5 ? a5->qs : a4->qs) + 32 * j, q);
            _Pragma("GCC unroll 2") for (int c = 0; c < 64 / VB; c++) {
                if (q5) {
                    q[c] = VI_OR(q[c], VI_AND(VI_SLLI16(hb[c], 4), bit4));
                    hb[c] = VI_SRLI16(hb[c], 2);
                }
                const vi s = k4_scale(scales, j * (64 / VB) + c);
                _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
                    const vi y = VI_LOAD(b[r]->qs + 64 * j + VB * c);
                    sumi[r] = VI_ADD32(sumi[r], VI_MADD16(VI_MADDUBS(q[c], y), s));
                }
            }
        }
        const float d = QUANT_H2F(a4->d), dmin = QUANT_H2F(a4->dmin);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            acc[r] = V_FMA(V_SET1(d * b[r]->d), VI_TO_F(sumi[r]), acc[r]);
            mins[r] += dmin * b[r]->d * k4_min_term(mn, b[r]->bsums);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) out[(size_t)r * os] = v_hsum(acc[r]) - mins[r];
}

static inline __attribute__((always_inline)) void q4k_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                             const int nr, float *out, size_t os) {
    k4_rows_n(n, w, xb, rb, 0, nr, out, os);
}

static inline __attribute__((always_inline)) void q5k_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                             const int nr, float *out, size_t os) {
    k4_rows_n(n, w, xb, rb, 1, nr, out, os);
}

/* Q6_K: codes stored +32, so each row subtracts 32 * sum_g sc_g * bsums_g
 * once a block. */
static inline __attribute__((always_inline)) void q6_rows_n(int64_t n, const void *w, const uint8_t *xb, size_t rb,
                                                            const int nr, float *out, size_t os) {
    const struct block_q6_K *a = w;
    vf acc[4];
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) acc[r] = V_ZERO();
    for (int64_t i = 0; i < n / QK_K; i++) {
        quant_prefetch(&a[i], sizeof a[i]);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        const struct block_q8_K *b[4];
        vi sumi[4];
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            b[r] = (const struct block_q8_K *)(const void *)(xb + (size_t)r * rb) + i;
            const __m256i bias = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b[r]->bsums));
            sumi[r] = VI_FROM256(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(bias, 5)));
        }
        _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
            vi q[128 / VB];
            q6_codes(a[i].ql + 64 * h, a[i].qh + 32 * h, q);
            _Pragma("GCC unroll 4") for (int c = 0; c < 128 / VB; c++) {
                const vi s = q6_scale(sc8, h * (128 / VB) + c);
                _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
                    const vi y = VI_LOAD(b[r]->qs + 128 * h + VB * c);
                    sumi[r] = VI_ADD32(sumi[r], VI_MADD16(VI_MADDUBS(q[c], y), s));
                }
            }
        }
        const float d = QUANT_H2F(a[i].d);
        _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) {
            acc[r] = V_FMA(V_SET1(d * b[r]->d), VI_TO_F(sumi[r]), acc[r]);
        }
    }
    _Pragma("GCC unroll 4") for (int r = 0; r < nr; r++) out[(size_t)r * os] = v_hsum(acc[r]);
}

ROWS_BY_4(rows_q4_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q4k_rows_n)
ROWS_BY_4(rows_q5_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q5k_rows_n)
ROWS_BY_4(rows_q6_K_q8_K, dtype_row_bytes(DT_Q8_K, n), NULL, q6_rows_n)

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d), dmin = QUANT_H2F(b[i].dmin);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b[i].scales, sc, mn);
        for (int j = 0; j < 8; j++, dst += 32) {
            const vf ds = V_SET1(d * sc[j]), dm = V_SET1(dmin * mn[j]);
            const uint8_t *qs = b[i].qs + 32 * (j / 2);
            for (int l = 0; l < 32; l += VW) {
                vi v = VI_U8(qs + l);
                v = j % 2 ? VI_SRLI32(v, 4) : VI_AND(v, VI_SET1_32(0x0f));
                V_STORE(dst + l, V_SUB(V_MUL(ds, VI_TO_F(v)), dm));
            }
        }
    }
}

/* Each 16 codes (code - 32) times d and their group's scale: exact. */
static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = QUANT_H2F(b[i].d);
        for (int h = 0; h < 2; h++) {
            vi q[128 / VB];
            q6_codes(b[i].ql + 64 * h, b[i].qh + 32 * h, q);
            for (int c = 0; c < 128 / VB; c++, dst += VB) {
                const vi v = VI_SUB8(q[c], VI_SET1_8(32));
                _Pragma("GCC unroll 4") for (int g = 0; g < VB / 16; g++) {
                    const vf ds = V_SET1(d * b[i].scales[8 * h + VB / 16 * c + g]);
                    const __m128i x = vi_bytes16(v, g);
                    _Pragma("GCC unroll 2") for (int l = 0; l < 16; l += VW)
                        V_STORE(dst + 16 * g + l, V_MUL(ds, v_i8_of(x, l)));
                }
            }
        }
    }
}

/* The entries of a level's kernel table this body fills. */
static void quant_simd_set(struct quant_kernels *k) {
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

#undef R32_ACCS
#undef R32_VECS
#undef VB
