/* The reference quantisers of every block format (float32 to blocks, as
 * ggml's quantize_row_*_ref: the same codes, bit for bit), Q4_0H's
 * rotation, and the table the dispatch falls back on where a SIMD level
 * has no quantiser of its own. */
#include "quant_impl.h"

#include "common.h"

#include <math.h>
#include <string.h>

/* ---- reference quantisers ------------------------------------------- */

/* Nearest integer, clamped to [lo, hi]; NaN goes to lo. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v > (float)lo))
        return lo;
    if (v >= (float)hi)
        return hi;
    return (int)lrintf(v);
}

/* Stores d as fp16 and returns the value dequantisation will see, so the
 * levels are chosen against the rounded scale. */
static inline float store_fp16(uint16_t *dst, float d) {
    *dst = f32_to_fp16(d);
    return fp16_to_f32(*dst);
}

float quant_absmax32_ref(const float *x) {
    float amax = 0;
    for (int j = 0; j < 32; j++)
        amax = fmaxf(amax, fabsf(x[j]));
    return amax;
}

int quant_codes32_ref(const float *x, float id, int8_t qs[32]) {
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)round_clamp(x[j] * id, -127, 127);
        sum += qs[j];
    }
    return sum;
}

/* The element of largest magnitude, sign kept. */
static float signed_absmax(const float *x, int n) {
    float amax = 0, max = 0;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    return max;
}

static void min_max(const float *x, int n, float *min, float *max) {
    *min = INFINITY;
    *max = -INFINITY;
    for (int j = 0; j < n; j++) {
        *min = fminf(*min, x[j]);
        *max = fmaxf(*max, x[j]);
    }
}

static void quant_f32(const float *x, void *dst, int64_t n) { memcpy(dst, x, (size_t)n * sizeof(float)); }

static void quant_f16(const float *x, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_fp16(x[i]);
}

static void quant_bf16(const float *x, void *dst, int64_t n) {
    uint16_t *h = dst;
    for (int64_t i = 0; i < n; i++)
        h[i] = f32_to_bf16(x[i]);
}

/* Symmetric 2^bits-level quantisation of one 32-value block (Q4_0, Q5_0):
 * the element of largest magnitude maps to -2^(bits-1) exactly. */
static float quant_sym32(const float *x, int bits, uint16_t *d, int q[32]) {
    const int half = 1 << (bits - 1);
    const float df = store_fp16(d, signed_absmax(x, 32) / -half);
    const float id = df != 0 ? 1.0f / df : 0;
    for (int j = 0; j < 32; j++)
        q[j] = round_clamp(x[j] * id, -half, half - 1) + half;
    return df;
}

/* Asymmetric: min + d*q with q in [0, 2^bits - 1] (Q4_1, Q5_1). */
static void quant_asym32(const float *x, int bits, uint16_t *d, uint16_t *m, int q[32]) {
    const int top = (1 << bits) - 1;
    float min, max;
    min_max(x, 32, &min, &max);
    const float mf = store_fp16(m, min);
    const float df = store_fp16(d, (max - mf) / top);
    const float id = df != 0 ? 1.0f / df : 0;
    for (int j = 0; j < 32; j++)
        q[j] = round_clamp((x[j] - mf) * id, 0, top);
}

static void pack_nibbles(const int q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)((q[j] & 0xf) | (q[j + 16] & 0xf) << 4);
}

static void pack_q5_high(const int q[32], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; j++)
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
    memcpy(qh, &h, sizeof h);
}

static void quant_q4_0(const float *x, void *dst, int64_t n) {
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        int q[32];
        quant_sym32(x, 4, &b[i].d, q);
        pack_nibbles(q, b[i].qs);
    }
}

/* ---- Q4_0H: Q4_0 of rotated blocks (KV cache only) ------------------- */

/* x[0..32) becomes H x / sqrt(32), H the Sylvester-Hadamard matrix of
 * order 32: orthogonal and symmetric, so the same transform takes a block
 * into the stored form and back, and a dot product of two rotated vectors
 * is that of the vectors. A channel many times the others (keys have them)
 * is spread over its block, instead of leaving the block's 4-bit scale too
 * coarse for the rest (QuaRot, arXiv 2404.00456, rotates for the same
 * reason). */
static void hadamard32(float *x) {
    for (int len = 1; len < 32; len *= 2)
        for (int i = 0; i < 32; i += 2 * len)
            for (int j = i; j < i + len; j++) {
                const float a = x[j], b = x[j + len];
                x[j] = a + b;
                x[j + len] = a - b;
            }
    for (int j = 0; j < 32; j++)
        x[j] *= 0.17677669529663688f; /* 1 / sqrt(32) */
}

void quant_rotate_blocks(float *x, int64_t n) {
    for (int64_t i = 0; i + 32 <= n; i += 32)
        hadamard32(x + i);
}

static void quant_q4_0h(const float *x, void *dst, int64_t n) {
    struct block_q4_0 *b = dst;
    for (int64_t i = 0; i < n / QK4_0; i++, x += QK4_0) {
        float r[QK4_0];
        memcpy(r, x, sizeof r);
        hadamard32(r);
        quant_q4_0(r, &b[i], QK4_0);
    }
}


static void quant_q5_0(const float *x, void *dst, int64_t n) {
    struct block_q5_0 *b = dst;
    for (int64_t i = 0; i < n / QK5_0; i++, x += QK5_0) {
        int q[32];
        quant_sym32(x, 5, &b[i].d, q);
        pack_nibbles(q, b[i].qs);
        pack_q5_high(q, b[i].qh);
    }
}

static void quant_q4_1(const float *x, void *dst, int64_t n) {
    struct block_q4_1 *b = dst;
    for (int64_t i = 0; i < n / QK4_1; i++, x += QK4_1) {
        int q[32];
        quant_asym32(x, 4, &b[i].d, &b[i].m, q);
        pack_nibbles(q, b[i].qs);
    }
}

static void quant_q5_1(const float *x, void *dst, int64_t n) {
    struct block_q5_1 *b = dst;
    for (int64_t i = 0; i < n / QK5_1; i++, x += QK5_1) {
        int q[32];
        quant_asym32(x, 5, &b[i].d, &b[i].m, q);
        pack_nibbles(q, b[i].qs);
        pack_q5_high(q, b[i].qh);
    }
}

/* Q8_0 and Q8_1 stay within [-127, 127], which the sign trick of the SIMD
 * Q8_0 dot relies on. Returns sum(qs). */
int quant_q8_32(const float *x, uint16_t *d, int8_t qs[32]) {
    const struct quant_kernels *k = quant_kernels_active();
    const float df = store_fp16(d, k->absmax32(x) / 127);
    return k->codes32(x, df != 0 ? 1.0f / df : 0, qs);
}

static void quant_q8_0(const float *x, void *dst, int64_t n) {
    struct block_q8_0 *b = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, x += QK8_0)
        quant_q8_32(x, &b[i].d, b[i].qs);
}

static void quant_q8_1(const float *x, void *dst, int64_t n) {
    struct block_q8_1 *b = dst;
    for (int64_t i = 0; i < n / QK8_1; i++, x += QK8_1) {
        const int sum = quant_q8_32(x, &b[i].d, b[i].qs);
        b[i].s = f32_to_fp16(fp16_to_f32(b[i].d) * (float)sum);
    }
}

static void quant_q8_K(const float *x, void *dst, int64_t n) {
    struct block_q8_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        const float max = signed_absmax(x, QK_K);
        /* max maps to -128; the other sign reaches at most +128 -> 127. */
        const float iscale = max != 0 ? -128.0f / max : 0;
        b[i].d = iscale != 0 ? 1.0f / iscale : 0;
        for (int j = 0; j < QK_K; j++)
            b[i].qs[j] = (int8_t)round_clamp(iscale * x[j], -128, 127);
        for (int g = 0; g < QK_K / 16; g++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += b[i].qs[16 * g + l];
            b[i].bsums[g] = (int16_t)s;
        }
    }
}

/* Q4_K/Q5_K: each sub-block j of 32 gets x ~ d*ls_j*q - dmin*lm_j with
 * 6-bit ls/lm and q in [0, top]. The mins are rounded up and the scales
 * chosen (rounded up) after them, so the whole sub-block range is covered
 * and nothing clips: error <= half a step. Not ggml's optimiser, but
 * dequantises with exactly ggml's formula. */
static void quant_k4_block(const float *x, int top, uint16_t *d, uint16_t *dmin, uint8_t scales[K_SCALE_SIZE],
                           uint8_t q[QK_K]) {
    float neg[8], max[8], mmax = 0;
    for (int j = 0; j < 8; j++) {
        float mn;
        min_max(x + 32 * j, 32, &mn, &max[j]);
        neg[j] = fmaxf(0, -mn);
        mmax = fmaxf(mmax, neg[j]);
    }
    const float dminf = store_fp16(dmin, mmax / 63);
    uint8_t ls[8], lm[8];
    float off[8], range[8], rmax = 0;
    for (int j = 0; j < 8; j++) {
        lm[j] = dminf > 0 ? (uint8_t)round_clamp(ceilf(neg[j] / dminf), 0, 63) : 0;
        off[j] = dminf * lm[j];
        range[j] = fmaxf(0, max[j] + off[j]);
        rmax = fmaxf(rmax, range[j]);
    }
    const float df = store_fp16(d, rmax / (63.0f * top));
    for (int j = 0; j < 8; j++) {
        ls[j] = df > 0 ? (uint8_t)round_clamp(ceilf(range[j] / (top * df)), 0, 63) : 0;
        const float step = df * ls[j];
        const float istep = step > 0 ? 1.0f / step : 0;
        for (int l = 0; l < 32; l++)
            q[32 * j + l] = (uint8_t)round_clamp((x[32 * j + l] + off[j]) * istep, 0, top);
    }
    /* Inverse of quant_k4_scales. */
    memset(scales, 0, K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] |= ls[j];
            scales[j + 4] |= lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xf) | (lm[j] & 0xf) << 4);
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

static void quant_q4_K(const float *x, void *dst, int64_t n) {
    struct block_q4_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t q[QK_K];
        quant_k4_block(x, 15, &b[i].d, &b[i].dmin, b[i].scales, q);
        quant_k_set_codes(DT_Q4_K, q, &b[i]);
    }
}

static void quant_q5_K(const float *x, void *dst, int64_t n) {
    struct block_q5_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t q[QK_K];
        quant_k4_block(x, 31, &b[i].d, &b[i].dmin, b[i].scales, q);
        quant_k_set_codes(DT_Q5_K, q, &b[i]);
    }
}

/* Q6_K: per 16-value group the largest-magnitude element maps to -32; the
 * int8 group scales are rounded away from zero so nothing but the single
 * +32 level clips. */
static void quant_q6_K(const float *x, void *dst, int64_t n) {
    struct block_q6_K *b = dst;
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16], smax = 0;
        for (int g = 0; g < 16; g++) {
            scale[g] = signed_absmax(x + 16 * g, 16) / -32;
            smax = fmaxf(smax, fabsf(scale[g]));
        }
        const float df = store_fp16(&b[i].d, smax / 127);
        uint8_t q[QK_K];
        for (int g = 0; g < 16; g++) {
            const int mag = df > 0 ? round_clamp(ceilf(fabsf(scale[g]) / df), 0, 127) : 0;
            b[i].scales[g] = (int8_t)(scale[g] < 0 ? -mag : mag);
            const float step = df * b[i].scales[g];
            const float istep = step != 0 ? 1.0f / step : 0;
            for (int l = 16 * g; l < 16 * g + 16; l++)
                q[l] = (uint8_t)(round_clamp(x[l] * istep, -32, 31) + 32);
        }
        quant_k_set_codes(DT_Q6_K, q, &b[i]);
    }
}

const quant_quantize_fn quant_ref_quantize[DT_COUNT] = {
    [DT_F32] = quant_f32,   [DT_F16] = quant_f16,   [DT_BF16] = quant_bf16, [DT_Q4_0] = quant_q4_0,
    [DT_Q4_1] = quant_q4_1, [DT_Q5_0] = quant_q5_0, [DT_Q5_1] = quant_q5_1, [DT_Q8_0] = quant_q8_0,
    [DT_Q8_1] = quant_q8_1, [DT_Q8_K] = quant_q8_K, [DT_Q4_K] = quant_q4_K, [DT_Q5_K] = quant_q5_K,
    [DT_Q6_K] = quant_q6_K, [DT_Q4_0H] = quant_q4_0h,
};
