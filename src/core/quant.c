/* Type table, fp16/bf16 conversion, the scalar reference kernels for every
 * block format and run-time SIMD dispatch (the reference quantisers are
 * quantize.c's).
 * Block layouts follow ggml exactly (quant_impl.h). The scalar kernels
 * define the results: SIMD dequantisation must match them bit for bit and
 * SIMD dots up to float summation order. */
#include "quant_impl.h"

#include "common.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- fp16 / bf16 ---------------------------------------------------- */

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

float fp16_to_f32(uint16_t h) {
    const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    const uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) /* inf, or NaN made quiet the way vcvtph2ps does */
        return bits_f32(sign | 0x7f800000u | (mant << 13) | (mant ? 0x400000u : 0));
    if (exp == 0) /* zero or subnormal: mant * 2^-24 is exact in f32 */
        return bits_f32(sign | f32_bits((float)mant * 0x1p-24f));
    return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round to nearest even, overflow to inf, NaN kept quiet with its top
 * payload bits (as vcvtps2ph does). */
uint16_t f32_to_fp16(float f) {
    uint32_t u = f32_bits(f);
    const uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    u &= 0x7fffffffu;
    if (u > 0x7f800000u)
        return sign | 0x7e00 | (uint16_t)((u >> 13) & 0x3ff);
    if (u >= 0x47800000u) /* >= 65536 (and inf); 65520..65536 carries below */
        return sign | 0x7c00;
    if (u < 0x38800000u) {
        /* Below 2^-14: adding 0.5f leaves round(|f| * 2^24) in the low
         * mantissa bits, rounded by the FPU in its default RNE mode. */
        const float magic = 0.5f;
        return sign | (uint16_t)(f32_bits(bits_f32(u) + magic) - f32_bits(magic));
    }
    const uint32_t odd = (u >> 13) & 1;
    u += (uint32_t)(15 - 127) * (1u << 23) + 0xfff + odd;
    return sign | (uint16_t)(u >> 13);
}

float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }

uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40); /* keep NaN a (quiet) NaN */
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
}

/* ---- type table ----------------------------------------------------- */

static const struct dtype_traits type_table[DT_COUNT] = {
    [DT_F32] = {"f32", 1, 4, DT_F32},
    [DT_F16] = {"f16", 1, 2, DT_F32},
    [DT_BF16] = {"bf16", 1, 2, DT_F32},
    [DT_Q4_0] = {"q4_0", QK4_0, sizeof(struct block_q4_0), DT_Q8_0},
    [DT_Q4_1] = {"q4_1", QK4_1, sizeof(struct block_q4_1), DT_Q8_1},
    [DT_Q5_0] = {"q5_0", QK5_0, sizeof(struct block_q5_0), DT_Q8_0},
    [DT_Q5_1] = {"q5_1", QK5_1, sizeof(struct block_q5_1), DT_Q8_1},
    [DT_Q8_0] = {"q8_0", QK8_0, sizeof(struct block_q8_0), DT_Q8_0},
    /* Activation formats: readable, and dotted against f32 if ever used
     * as weights. */
    [DT_Q8_1] = {"q8_1", QK8_1, sizeof(struct block_q8_1), DT_F32},
    [DT_Q8_K] = {"q8_K", QK_K, sizeof(struct block_q8_K), DT_F32},
    [DT_Q4_K] = {"q4_K", QK_K, sizeof(struct block_q4_K), DT_Q8_K},
    [DT_Q5_K] = {"q5_K", QK_K, sizeof(struct block_q5_K), DT_Q8_K},
    [DT_Q6_K] = {"q6_K", QK_K, sizeof(struct block_q6_K), DT_Q8_K},
    [DT_Q4_0H] = {"q4_0h", QK4_0, sizeof(struct block_q4_0), DT_F32},
};

const struct dtype_traits *dtype_get(uint32_t type) {
    if (type >= DT_COUNT || type_table[type].name == NULL)
        return NULL;
    return &type_table[type];
}

const struct dtype_traits *dtype_get_file(uint32_t type) { return type < DT_FILE_END ? dtype_get(type) : NULL; }

size_t dtype_row_bytes(uint32_t type, int64_t n) {
    const struct dtype_traits *t = dtype_get(type);
    size_t bytes;
    if (t == NULL || n < 0 || n % t->block != 0)
        return 0;
    if (!size_mul((size_t)(n / t->block), t->block_bytes, &bytes))
        return 0;
    return bytes;
}

/* ---- scalar dequantisation ------------------------------------------ */

static void dequant_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

static void dequant_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = fp16_to_f32(h[i]);
}

static void dequant_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++)
        dst[i] = bf16_to_f32(h[i]);
}

static void dequant_q4_0(const void *src, float *dst, int64_t n) {
    const struct block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = ((b[i].qs[j] & 0xf) - 8) * d;
            dst[j + QK4_0 / 2] = ((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void dequant_q4_1(const void *src, float *dst, int64_t n) {
    const struct block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_1; i++, dst += QK4_1) {
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        for (int j = 0; j < QK4_1 / 2; j++) {
            dst[j] = (b[i].qs[j] & 0xf) * d + m;
            dst[j + QK4_1 / 2] = (b[i].qs[j] >> 4) * d + m;
        }
    }
}

/* The 5th bits of a Q5 block: bit j of qh belongs to value j. */
static inline int q5_value(const uint8_t *qs, uint32_t qh, int j) {
    const int lo = j < 16 ? qs[j] & 0xf : qs[j - 16] >> 4;
    return lo | (int)((qh >> j) & 1) << 4;
}

static void dequant_q5_0(const void *src, float *dst, int64_t n) {
    const struct block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = fp16_to_f32(b[i].d);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < QK5_0; j++)
            dst[j] = (q5_value(b[i].qs, qh, j) - 16) * d;
    }
}

static void dequant_q5_1(const void *src, float *dst, int64_t n) {
    const struct block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_1; i++, dst += QK5_1) {
        const float d = fp16_to_f32(b[i].d), m = fp16_to_f32(b[i].m);
        uint32_t qh;
        memcpy(&qh, b[i].qh, sizeof qh);
        for (int j = 0; j < QK5_1; j++)
            dst[j] = q5_value(b[i].qs, qh, j) * d + m;
    }
}

static void dequant_q8_0(const void *src, float *dst, int64_t n) {
    const struct block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            dst[j] = b[i].qs[j] * d;
    }
}

static void dequant_q8_1(const void *src, float *dst, int64_t n) {
    const struct block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_1; i++, dst += QK8_1) {
        const float d = fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_1; j++)
            dst[j] = b[i].qs[j] * d;
    }
}

static void dequant_q8_K(const void *src, float *dst, int64_t n) {
    const struct block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++)
            dst[j] = b[i].d * b[i].qs[j];
}

/* Value l of a Q4_K/Q5_K super-block: 64-value chunk c = l/64 holds
 * sub-block 2c in the low nibbles of qs[32c..32c+31] and sub-block 2c+1 in
 * the high nibbles; Q5_K's 5th bit is bit (l/32) of qh[l%32]. */
static inline int k4_nibble(const uint8_t *qs, int l) {
    const uint8_t b = qs[(l / 64) * 32 + l % 32];
    return (l / 32) % 2 ? b >> 4 : b & 0xf;
}

static void dequant_q4_K(const void *src, float *dst, int64_t n) {
    const struct block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b[i].scales, sc, mn);
        for (int l = 0; l < QK_K; l++) {
            const float ds = d * sc[l / 32], dm = dmin * mn[l / 32];
            dst[l] = ds * k4_nibble(b[i].qs, l) - dm;
        }
    }
}

static void dequant_q5_K(const void *src, float *dst, int64_t n) {
    const struct block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_f32(b[i].d), dmin = fp16_to_f32(b[i].dmin);
        uint8_t sc[8], mn[8];
        quant_k4_scales(b[i].scales, sc, mn);
        for (int l = 0; l < QK_K; l++) {
            const float ds = d * sc[l / 32], dm = dmin * mn[l / 32];
            const int q = k4_nibble(b[i].qs, l) | ((b[i].qh[l % 32] >> (l / 32)) & 1) << 4;
            dst[l] = ds * q - dm;
        }
    }
}

/* Value l of a Q6_K super-block (0..63, offset 32 not yet removed): within
 * each 128-value half h, quarter k = (l%128)/32 takes the low (k<2) or high
 * nibble of ql[64h + 32(k%2) + l%32] and bits 2k..2k+1 of qh[32h + l%32]. */
static inline int q6_value(const struct block_q6_K *b, int l) {
    const int h = l / 128, k = (l % 128) / 32, r = l % 32;
    const uint8_t lo = b->ql[64 * h + 32 * (k % 2) + r];
    const int nib = k < 2 ? lo & 0xf : lo >> 4;
    return nib | ((b->qh[32 * h + r] >> (2 * k)) & 3) << 4;
}

static void dequant_q6_K(const void *src, float *dst, int64_t n) {
    const struct block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K) {
        const float d = fp16_to_f32(b[i].d);
        for (int l = 0; l < QK_K; l++)
            dst[l] = d * b[i].scales[l / 16] * (q6_value(&b[i], l) - 32);
    }
}

/* ---- scalar dot products -------------------------------------------- */

static float dot_f32_ref(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)a[i] * b[i];
    return (float)s;
}

static float dot_f32_row(int64_t n, const void *w, const void *x) { return dot_f32_ref(w, x, n); }

static float dot_f16_row(int64_t n, const void *w, const void *x) {
    const uint16_t *h = w;
    const float *y = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)fp16_to_f32(h[i]) * y[i];
    return (float)s;
}

static float dot_bf16_row(int64_t n, const void *w, const void *x) {
    const uint16_t *h = w;
    const float *y = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += (double)bf16_to_f32(h[i]) * y[i];
    return (float)s;
}

/* The 32-value block formats read their activations in the batch form
 * (quant_quantize_batch): a row's codes, then its block scales d as floats
 * (each 8 times, QUANT_D_REPEAT), then (Q8_1) its block sums s. Per block,
 * the exact integer dot of the codes, then s += d_w * d_x * sumi
 * (+ m_w * s_x), as ggml's reference. */
static inline int sumi_q4_0(const struct block_q4_0 *a, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < QK4_0 / 2; j++)
        sumi += ((a->qs[j] & 0xf) - 8) * y[j] + ((a->qs[j] >> 4) - 8) * y[j + 16];
    return sumi;
}

static inline int sumi_q4_1(const struct block_q4_1 *a, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < QK4_1 / 2; j++)
        sumi += (a->qs[j] & 0xf) * y[j] + (a->qs[j] >> 4) * y[j + 16];
    return sumi;
}

static inline int sumi_q5_0(const struct block_q5_0 *a, const int8_t *y) {
    uint32_t qh;
    memcpy(&qh, a->qh, sizeof qh);
    int sumi = 0;
    for (int j = 0; j < QK5_0; j++)
        sumi += (q5_value(a->qs, qh, j) - 16) * y[j];
    return sumi;
}

static inline int sumi_q5_1(const struct block_q5_1 *a, const int8_t *y) {
    uint32_t qh;
    memcpy(&qh, a->qh, sizeof qh);
    int sumi = 0;
    for (int j = 0; j < QK5_1; j++)
        sumi += q5_value(a->qs, qh, j) * y[j];
    return sumi;
}

static inline int sumi_q8_0(const struct block_q8_0 *a, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; j++)
        sumi += a->qs[j] * y[j];
    return sumi;
}

static inline float min_none(const void *a, float xs) {
    (void)a, (void)xs;
    return 0.0f;
}

static inline float min_q4_1(const struct block_q4_1 *a, float xs) { return fp16_to_f32(a->m) * xs; }
static inline float min_q5_1(const struct block_q5_1 *a, float xs) { return fp16_to_f32(a->m) * xs; }

#define SCALAR_ROWS_32(name, wt, sumi, min, x_sums)                                                     \
    static void name(int64_t n, const void *w, size_t wb, int nw, const void *xb, int nx, float *out,   \
                     size_t os) {                                                                       \
        const int64_t nb = n / 32;                                                                      \
        const size_t rb = quant_planar_row_bytes(n, x_sums);                                            \
        for (int k = 0; k < nw; k++) {                                                                  \
            const wt *a = (const wt *)(const void *)((const uint8_t *)w + (size_t)k * wb);              \
            for (int r = 0; r < nx; r++) {                                                              \
                const int8_t *y = (const int8_t *)xb + (size_t)r * rb;                                  \
                const float *xd = (const float *)(const void *)(y + n), *xs = xd + QUANT_D_REPEAT * nb;  \
                float s = 0;                                                                            \
                for (int64_t i = 0; i < nb; i++)                                                        \
                    s += fp16_to_f32(a[i].d) * xd[QUANT_D_REPEAT * i] * (float)sumi(&a[i], y + 32 * i) + \
                         min(&a[i], x_sums ? xs[i] : 0.0f);                                             \
                out[(size_t)r * os + (size_t)k] = s;                                                    \
            }                                                                                           \
        }                                                                                               \
    }

SCALAR_ROWS_32(rows_q4_0_q8_0, struct block_q4_0, sumi_q4_0, min_none, 0)
SCALAR_ROWS_32(rows_q4_1_q8_1, struct block_q4_1, sumi_q4_1, min_q4_1, 1)
SCALAR_ROWS_32(rows_q5_0_q8_0, struct block_q5_0, sumi_q5_0, min_none, 0)
SCALAR_ROWS_32(rows_q5_1_q8_1, struct block_q5_1, sumi_q5_1, min_q5_1, 1)
SCALAR_ROWS_32(rows_q8_0_q8_0, struct block_q8_0, sumi_q8_0, min_none, 0)

/* Activation formats used as weights (unusual): dequantise and dot. */
static float dot_q8_1_f32(int64_t n, const void *w, const void *x) {
    const struct block_q8_1 *a = w;
    const float *y = x;
    double s = 0;
    for (int64_t i = 0; i < n / QK8_1; i++) {
        float v[QK8_1];
        dequant_q8_1(&a[i], v, QK8_1);
        s += dot_f32_ref(v, y + i * QK8_1, QK8_1);
    }
    return (float)s;
}

static float dot_q8_K_f32(int64_t n, const void *w, const void *x) {
    const struct block_q8_K *a = w;
    const float *y = x;
    double s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        float v[QK_K];
        dequant_q8_K(&a[i], v, QK_K);
        s += dot_f32_ref(v, y + i * QK_K, QK_K);
    }
    return (float)s;
}

/* Q4_K/Q5_K: w = d*sc*q - dmin*mn per sub-block of 32, so
 * sum(w*x) = d*xd*sum_j(sc_j * sum(q*xq)) - dmin*xd*sum_j(mn_j * sum(xq)),
 * the last sums coming from the Q8_K bsums. */
static float dot_k4(int64_t n, const void *w, const void *x, int q5) {
    const struct block_q8_K *b = x;
    const size_t stride = q5 ? sizeof(struct block_q5_K) : sizeof(struct block_q4_K);
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        /* The two layouts share d, dmin and scales; Q5_K adds qh before qs. */
        const struct block_q5_K *a5 = (const void *)((const uint8_t *)w + i * stride);
        const struct block_q4_K *a4 = (const void *)a5;
        const uint8_t *qs = q5 ? a5->qs : a4->qs;
        uint8_t sc[8], mn[8];
        quant_k4_scales(a4->scales, sc, mn);
        int sumi = 0, summ = 0;
        for (int j = 0; j < 8; j++) {
            int sub = 0;
            for (int l = 32 * j; l < 32 * j + 32; l++) {
                int q = k4_nibble(qs, l);
                if (q5)
                    q |= ((a5->qh[l % 32] >> j) & 1) << 4;
                sub += q * b[i].qs[l];
            }
            sumi += sc[j] * sub;
            summ += mn[j] * (b[i].bsums[2 * j] + b[i].bsums[2 * j + 1]);
        }
        s += fp16_to_f32(a4->d) * b[i].d * (float)sumi - fp16_to_f32(a4->dmin) * b[i].d * (float)summ;
    }
    return s;
}

static float dot_q4_K_q8_K(int64_t n, const void *w, const void *x) { return dot_k4(n, w, x, 0); }
static float dot_q5_K_q8_K(int64_t n, const void *w, const void *x) { return dot_k4(n, w, x, 1); }

static float dot_q6_K_q8_K(int64_t n, const void *w, const void *x) {
    const struct block_q6_K *a = w;
    const struct block_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int sumi = 0;
        for (int g = 0; g < QK_K / 16; g++) {
            int sub = 0;
            for (int l = 16 * g; l < 16 * g + 16; l++)
                sub += (q6_value(&a[i], l) - 32) * b[i].qs[l];
            sumi += a[i].scales[g] * sub;
        }
        s += fp16_to_f32(a[i].d) * b[i].d * (float)sumi;
    }
    return s;
}

static void axpy_f32_ref(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        y[i] += a * x[i];
}

/* ---- KV cache rows against f32 -------------------------------------- */

/* Attention reads cached keys and values against the float32 query and
 * softmax weights as they are: quantising those as well would add a second
 * error on top of the cache's own. */
static float dot_blocks_f32(enum dtype t, int64_t n, const uint8_t *w, const float *y) {
    const struct dtype_traits *tt = dtype_get(t);
    double s = 0;
    for (int64_t i = 0; i < n / tt->block; i++) {
        float v[QK8_0];
        quant_dequant_row_ref(t, w + i * tt->block_bytes, v, tt->block);
        s += dot_f32_ref(v, y + i * tt->block, tt->block);
    }
    return (float)s;
}

static float dot_q8_0_f32(int64_t n, const void *w, const void *x) { return dot_blocks_f32(DT_Q8_0, n, w, x); }
static float dot_q4_0_f32(int64_t n, const void *w, const void *x) { return dot_blocks_f32(DT_Q4_0, n, w, x); }

static void axpy_f32_row(float *y, float a, const void *x, int64_t n) { axpy_f32_ref(y, a, x, n); }

static void axpy_f16_row(float *y, float a, const void *x, int64_t n) {
    const uint16_t *h = x;
    for (int64_t i = 0; i < n; i++)
        y[i] += a * fp16_to_f32(h[i]);
}

static void axpy_q8_0_row(float *y, float a, const void *x, int64_t n) {
    const struct block_q8_0 *b = x;
    for (int64_t i = 0; i < n / QK8_0; i++, y += QK8_0) {
        const float ad = a * fp16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++)
            y[j] += ad * b[i].qs[j];
    }
}

/* Values j and j + 16 of a block share byte j: its low and high nibble. */
static void axpy_q4_0_row(float *y, float a, const void *x, int64_t n) {
    const struct block_q4_0 *b = x;
    for (int64_t i = 0; i < n / QK4_0; i++, y += QK4_0) {
        const float ad = a * fp16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            y[j] += ad * ((b[i].qs[j] & 0xf) - 8);
            y[j + QK4_0 / 2] += ad * ((b[i].qs[j] >> 4) - 8);
        }
    }
}

/* ---- Q4_0H ------------------------------------------------------------ */

static void dequant_q4_0h(const void *src, float *dst, int64_t n) {
    dequant_q4_0(src, dst, n);
    quant_rotate_blocks(dst, n);
}

/* ---- dispatch ------------------------------------------------------- */

static const struct quant_kernels scalar_kernels = {
    .rotate = quant_rotate_blocks,
    .dequant =
        {
            [DT_F32] = dequant_f32,   [DT_F16] = dequant_f16,   [DT_BF16] = dequant_bf16, [DT_Q4_0] = dequant_q4_0,
            [DT_Q4_1] = dequant_q4_1, [DT_Q5_0] = dequant_q5_0, [DT_Q5_1] = dequant_q5_1, [DT_Q8_0] = dequant_q8_0,
            [DT_Q8_1] = dequant_q8_1, [DT_Q8_K] = dequant_q8_K, [DT_Q4_K] = dequant_q4_K, [DT_Q5_K] = dequant_q5_K,
            [DT_Q6_K] = dequant_q6_K, [DT_Q4_0H] = dequant_q4_0h,
        },
    .dot =
        {
            [DT_F32] = dot_f32_row,    [DT_F16] = dot_f16_row,    [DT_BF16] = dot_bf16_row,
            [DT_Q8_1] = dot_q8_1_f32,
            [DT_Q8_K] = dot_q8_K_f32,  [DT_Q4_K] = dot_q4_K_q8_K, [DT_Q5_K] = dot_q5_K_q8_K,
            [DT_Q6_K] = dot_q6_K_q8_K,
        },
    .dot_rows =
        {
            [DT_Q4_0] = rows_q4_0_q8_0, [DT_Q4_1] = rows_q4_1_q8_1, [DT_Q5_0] = rows_q5_0_q8_0,
            [DT_Q5_1] = rows_q5_1_q8_1, [DT_Q8_0] = rows_q8_0_q8_0,
        },
    .absmax32 = quant_absmax32_ref,
    .codes32 = quant_codes32_ref,
    .dot_f32 = dot_f32_ref,
    .axpy_f32 = axpy_f32_ref,
    .dot_f32x = {[DT_F32] = dot_f32_row, [DT_F16] = dot_f16_row, [DT_Q8_0] = dot_q8_0_f32,
                 [DT_Q4_0] = dot_q4_0_f32},
    .axpy = {[DT_F32] = axpy_f32_row, [DT_F16] = axpy_f16_row, [DT_Q8_0] = axpy_q8_0_row,
             [DT_Q4_0] = axpy_q4_0_row},
};

/* One table per level, each starting as a copy of the level below. */
static struct quant_kernels level_kernels[3];
static enum simd_level cpu_level;
/* Level in use; -1 until the tables are built. Read on every kernel call,
 * so it is a plain atomic load rather than a pthread_once. */
static int cur_level = -1;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;

/* KVFOLD_SIMD=scalar|avx2|avx512 caps the level (for comparisons and for
 * working around a misbehaving kernel); other values are ignored. */
static enum simd_level env_cap(enum simd_level level) {
    const char *e = getenv("KVFOLD_SIMD");
    enum simd_level cap = SIMD_AVX512;
    if (e == NULL)
        return level;
    if (strcmp(e, "scalar") == 0)
        cap = SIMD_SCALAR;
    else if (strcmp(e, "avx2") == 0)
        cap = SIMD_AVX2;
    return KVF_MIN(level, cap);
}

static void kernels_init(void) {
    cpu_level = cpu_simd_level();
    level_kernels[SIMD_SCALAR] = scalar_kernels;
    vec_kernels_scalar(&level_kernels[SIMD_SCALAR]);
    level_kernels[SIMD_AVX2] = level_kernels[SIMD_SCALAR];
    if (cpu_level >= SIMD_AVX2) {
        quant_kernels_avx2(&level_kernels[SIMD_AVX2]);
        vec_kernels_avx2(&level_kernels[SIMD_AVX2]);
    }
    level_kernels[SIMD_AVX512] = level_kernels[SIMD_AVX2];
    if (cpu_level >= SIMD_AVX512) {
        quant_kernels_avx512(&level_kernels[SIMD_AVX512]);
        vec_kernels_avx512(&level_kernels[SIMD_AVX512]);
        if (cpu_features().avx512vnni)
            quant_kernels_vnni(&level_kernels[SIMD_AVX512]);
    }
    __atomic_store_n(&cur_level, (int)env_cap(cpu_level), __ATOMIC_RELEASE);
}

static inline const struct quant_kernels *kernels(void) {
    int lv = __atomic_load_n(&cur_level, __ATOMIC_ACQUIRE);
    if (lv < 0) {
        pthread_once(&init_once, kernels_init);
        lv = __atomic_load_n(&cur_level, __ATOMIC_ACQUIRE);
    }
    return &level_kernels[lv];
}

const struct quant_kernels *quant_kernels_active(void) { return kernels(); }

enum simd_level simd_detect(void) {
    pthread_once(&init_once, kernels_init);
    return env_cap(cpu_level);
}

enum simd_level simd_get(void) { return (enum simd_level)(kernels() - level_kernels); }

void simd_set(enum simd_level level) {
    pthread_once(&init_once, kernels_init);
    if ((int)level < SIMD_SCALAR)
        level = SIMD_SCALAR;
    if (level > cpu_level)
        level = cpu_level;
    __atomic_store_n(&cur_level, (int)level, __ATOMIC_RELEASE);
}

const char *kvf_simd_level(void) { return simd_name(simd_get()); }

/* Unknown types (callers are expected to have checked dtype_get) give
 * zeros rather than garbage. */
void quant_dequant_row(enum dtype type, const void *src, float *dst, int64_t n) {
    const quant_dequant_fn f = (unsigned)type < DT_COUNT ? kernels()->dequant[type] : NULL;
    if (f != NULL)
        f(src, dst, n);
    else if (n > 0)
        memset(dst, 0, (size_t)n * sizeof *dst);
}

void quant_dequant_row_ref(enum dtype type, const void *src, float *dst, int64_t n) {
    const quant_dequant_fn f = (unsigned)type < DT_COUNT ? scalar_kernels.dequant[type] : NULL;
    if (f != NULL)
        f(src, dst, n);
    else if (n > 0)
        memset(dst, 0, (size_t)n * sizeof *dst);
}

void quant_quantize_row(enum dtype type, const float *src, void *dst, int64_t n) {
    if ((unsigned)type >= DT_COUNT)
        return;
    const quant_quantize_fn simd = kernels()->quantize[type], f = simd ? simd : quant_ref_quantize[type];
    if (f != NULL)
        f(src, dst, n);
}

/* Whether the batch form of `type`'s activations is planar (32-value
 * blocks: codes, then float scales, then Q8_1's float sums). */
static bool batch_planar(enum dtype vt) { return vt == DT_Q8_0 || vt == DT_Q8_1; }

size_t quant_batch_row_bytes(enum dtype type, int64_t n) {
    const struct dtype_traits *t = dtype_get(type);
    if (t == NULL || n < 0 || n % t->block != 0)
        return 0;
    if (batch_planar(t->vec_dot))
        return quant_planar_row_bytes(n, t->vec_dot == DT_Q8_1);
    return dtype_row_bytes(t->vec_dot, n);
}

void quant_quantize_batch(enum dtype type, const float *x, int64_t n, int nx, void *dst) {
    const size_t rb = quant_batch_row_bytes(type, n);
    if (rb == 0)
        return;
    const enum dtype vt = dtype_get(type)->vec_dot;
    for (int r = 0; r < nx; r++, x += n) {
        uint8_t *row = (uint8_t *)dst + (size_t)r * rb;
        if (!batch_planar(vt)) {
            quant_quantize_row(vt, x, row, n);
            continue;
        }
        float *xd = (float *)(void *)(row + n), *xs = xd + QUANT_D_REPEAT * (n / 32);
        for (int64_t i = 0; i < n / 32; i++) {
            uint16_t d;
            const int sum = quant_q8_32(x + 32 * i, &d, (int8_t *)row + 32 * i);
            const float df = fp16_to_f32(d);
            for (int k = 0; k < QUANT_D_REPEAT; k++)
                xd[QUANT_D_REPEAT * i + k] = df;
            if (vt == DT_Q8_1) /* rounded to fp16 as Q8_1 stores it */
                xs[i] = fp16_to_f32(f32_to_fp16(df * (float)sum));
        }
    }
}

static void rows_run(const struct quant_kernels *k, enum dtype type, int64_t n, const void *w, size_t wb, int nw,
                     const void *xb, int nx, float *out, size_t os) {
    if ((unsigned)type < DT_COUNT && k->dot_rows[type] != NULL) {
        k->dot_rows[type](n, w, wb, nw, xb, nx, out, os);
        return;
    }
    const quant_dot_fn f = (unsigned)type < DT_COUNT ? k->dot[type] : NULL;
    const size_t rb = quant_batch_row_bytes(type, n);
    for (int i = 0; i < nw; i++)
        for (int r = 0; r < nx; r++)
            out[(size_t)r * os + (size_t)i] =
                f != NULL ? f(n, (const uint8_t *)w + (size_t)i * wb, (const uint8_t *)xb + (size_t)r * rb) : 0.0f;
}

void quant_gemm_rows(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, const void *xb, int nx,
                     float *out, size_t os) {
    rows_run(kernels(), type, n, w, w_stride, nw, xb, nx, out, os);
}

void quant_gemm_rows_at(enum simd_level level, enum dtype type, int64_t n, const void *w, size_t w_stride, int nw,
                        const void *xb, int nx, float *out, size_t os) {
    const enum simd_level cur = simd_get();
    rows_run(&level_kernels[level < cur && level >= SIMD_SCALAR ? level : cur], type, n, w, w_stride, nw, xb, nx, out,
             os);
}

bool quant_rows_level_has(enum dtype type, enum simd_level level) {
    pthread_once(&init_once, kernels_init);
    if ((unsigned)type >= DT_COUNT || level <= SIMD_SCALAR || level > cpu_level) return false;
    const struct quant_kernels *a = &level_kernels[level], *b = &level_kernels[level - 1];
    return (a->dot_rows[type] && a->dot_rows[type] != b->dot_rows[type]) ||
           (!a->dot_rows[type] && a->dot[type] && a->dot[type] != b->dot[type]);
}

_Thread_local bool quant_prefetch_on = true;

void quant_prefetch_set(bool on) { quant_prefetch_on = on; }

void quant_gemm_rows_ref(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, const void *xb,
                         int nx, float *out, size_t os) {
    rows_run(&scalar_kernels, type, n, w, w_stride, nw, xb, nx, out, os);
}

/* Q4_0H's rows are Q4_0 rows of rotated blocks: their dots are Q4_0's
 * against the rotated x, and an axpy adds the rotation of Q4_0's sum. */
static float kv_dot(const struct quant_kernels *k, enum dtype type, int64_t n, const void *w, const float *x) {
    if (type == DT_Q4_0H) {
        float xr[QUANT_ROT_MAX];
        if (n > QUANT_ROT_MAX)
            return 0.0f;
        memcpy(xr, x, sizeof(float) * (size_t)n);
        k->rotate(xr, n);
        return k->dot_f32x[DT_Q4_0](n, w, xr);
    }
    const quant_dot_fn f = (unsigned)type < DT_COUNT ? k->dot_f32x[type] : NULL;
    return f != NULL ? f(n, w, x) : 0.0f;
}

/* y += rotated (the Q4_0 sum t, rotated in place). */
static void add_rotated(const struct quant_kernels *k, float *y, float *t, int64_t n) {
    k->rotate(t, n);
    for (int64_t i = 0; i < n; i++)
        y[i] += t[i];
}

static void kv_axpy(const struct quant_kernels *k, enum dtype type, float *y, float a, const void *w, int64_t n) {
    if (type == DT_Q4_0H) {
        float t[QUANT_ROT_MAX];
        if (n > QUANT_ROT_MAX)
            return;
        memset(t, 0, sizeof(float) * (size_t)n);
        k->axpy[DT_Q4_0](t, a, w, n);
        add_rotated(k, y, t, n);
        return;
    }
    const quant_axpy_fn f = (unsigned)type < DT_COUNT ? k->axpy[type] : NULL;
    if (f != NULL)
        f(y, a, w, n);
}

/* Unsupported types give 0 and leave y, like quant_gemm_rows. */
float quant_kv_dot(enum dtype type, int64_t n, const void *w, const float *x) {
    return kv_dot(kernels(), type, n, w, x);
}

float quant_kv_dot_ref(enum dtype type, int64_t n, const void *w, const float *x) {
    return kv_dot(&scalar_kernels, type, n, w, x);
}

void quant_kv_axpy(enum dtype type, float *y, float a, const void *w, int64_t n) {
    kv_axpy(kernels(), type, y, a, w, n);
}

void quant_kv_axpy_ref(enum dtype type, float *y, float a, const void *w, int64_t n) {
    kv_axpy(&scalar_kernels, type, y, a, w, n);
}

void quant_kv_scores(enum dtype type, int64_t d, const void *rows, int n, const float *x, size_t ldx, int nx,
                     float scale, float *out, size_t ldo) {
    if (type == DT_Q4_0H) {
        /* the queries rotated, as many at a time as fit */
        float xr[QUANT_ROT_MAX];
        const int g = d > 0 && d <= QUANT_ROT_MAX ? (int)(QUANT_ROT_MAX / d) : 0;
        const struct quant_kernels *k = kernels();
        for (int q0 = 0; g > 0 && q0 < nx; q0 += g) {
            const int m = nx - q0 < g ? nx - q0 : g;
            for (int q = 0; q < m; q++) {
                memcpy(xr + q * d, x + (q0 + q) * ldx, sizeof(float) * (size_t)d);
                k->rotate(xr + q * d, d);
            }
            quant_kv_scores(DT_Q4_0, d, rows, n, xr, (size_t)d, m, scale, out + q0 * ldo, ldo);
        }
        return;
    }
    const struct quant_kernels *k = kernels();
    if ((unsigned)type >= DT_COUNT || !k->dot_f32x[type])
        return;
    if (k->dots[type]) {
        k->dots[type](d, rows, n, x, ldx, nx, scale, out, ldo);
        return;
    }
    const size_t rb = dtype_row_bytes(type, d);
    for (int q = 0; q < nx; q++)
        for (int j = 0; j < n; j++)
            out[q * ldo + j] = k->dot_f32x[type](d, (const uint8_t *)rows + j * rb, x + q * ldx) * scale;
}

void quant_kv_mix(enum dtype type, float *y, size_t ldy, const float *w, size_t ldw, int ny, const void *rows,
                  size_t ldr, int n, int64_t d) {
    if (type == DT_Q4_0H) {
        /* Q4_0's sums, rotated once and added, as many queries at a time as fit */
        float t[QUANT_ROT_MAX];
        const int g = d > 0 && d <= QUANT_ROT_MAX ? (int)(QUANT_ROT_MAX / d) : 0;
        const struct quant_kernels *k = kernels();
        for (int q0 = 0; g > 0 && q0 < ny; q0 += g) {
            const int m = ny - q0 < g ? ny - q0 : g;
            memset(t, 0, sizeof(float) * (size_t)(m * d));
            quant_kv_mix(DT_Q4_0, t, (size_t)d, w + q0 * ldw, ldw, m, rows, ldr, n, d);
            for (int q = 0; q < m; q++)
                add_rotated(k, y + (q0 + q) * ldy, t + q * d, d);
        }
        return;
    }
    const struct quant_kernels *k = kernels();
    if ((unsigned)type >= DT_COUNT || !k->axpy[type])
        return;
    if (k->axpys[type]) {
        k->axpys[type](y, ldy, w, ldw, ny, rows, ldr, n, d);
        return;
    }
    for (int q = 0; q < ny; q++)
        for (int j = 0; j < n; j++)
            if (w[q * ldw + j] != 0.0f)
                k->axpy[type](y + q * ldy, w[q * ldw + j], (const uint8_t *)rows + j * ldr, d);
}

