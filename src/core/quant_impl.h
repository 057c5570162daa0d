/* Private to core/quant*.c and core/vec*.c: the ggml block
 * layouts (byte-for-byte as GGUF stores them, see ggml-common.h) and the
 * kernel tables through which the ISA-specific files plug in. */
#ifndef KVF_QUANT_IMPL_H
#define KVF_QUANT_IMPL_H

#include "quant.h"

#include <assert.h>
#include <stdint.h>
#include <string.h>


#define QK4_0 32
#define QK4_1 32
#define QK5_0 32
#define QK5_1 32
#define QK8_0 32
#define QK8_1 32
#define QK_K 256
#define K_SCALE_SIZE 12
/* The batch form repeats each 32-value block's activation scale this many
 * times, so that the SIMD kernels load a block's scale for the block's
 * 8 partial sums as a vector instead of broadcasting it row by row. */
#define QUANT_D_REPEAT 8

/* Decoding streams every weight from memory once per token; the SIMD dot
 * kernels ask for the bytes this far ahead of the block they are on, which
 * kept more reads in flight than the hardware prefetcher alone on the Intel
 * Xeon (one thread over a 64 MiB Q8_0 matrix: about 6 -> 9 GB/s,
 * bench/bench_quant.c) but cost AMD Zen 4 2-7% of its decoding: whether a
 * thread prefetches is the matrix's (quant_prefetch_set), measured at load.
 * A prefetch past the end of the weights is harmless: it never faults. */
#define QUANT_PREFETCH 2048

extern _Thread_local bool quant_prefetch_on;

/* Prefetches the line QUANT_PREFETCH bytes past each 64-byte step of the
 * `bytes` bytes at p (a kernel's weights for one step), where this thread
 * prefetches. */
static inline void quant_prefetch(const void *p, size_t bytes) {
    if (!quant_prefetch_on) return;
    for (size_t off = 0; off < bytes; off += 64)
        __builtin_prefetch((const char *)p + QUANT_PREFETCH + off);
}

/* Bytes of a planar batch-form row of n values; `sums`: Q8_1 activations. */
static inline size_t quant_planar_row_bytes(int64_t n, int sums) {
    return (size_t)n + (size_t)(n / 32) * sizeof(float) * (size_t)(QUANT_D_REPEAT + (sums != 0));
}

/* fp16 fields are kept as raw uint16_t bits. */
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { uint16_t d, m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };
/* s = fp16(d * sum(qs)): lets Q4_1/Q5_1 dots fold their offset m in once
 * per block instead of per element. */
struct block_q8_1 { uint16_t d, s; int8_t qs[QK8_1]; };
/* 8 sub-blocks of 32; 6-bit scales and mins packed into `scales`. */
struct block_q4_K { uint16_t d, dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
/* 16 sub-blocks of 16; value = d * scales[i/16] * (q - 32), q 6-bit. */
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
/* Activation type of the K dots; bsums[j] = sum of qs[16j .. 16j+15]. */
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

static_assert(sizeof(struct block_q4_0) == 18, "q4_0 layout");
static_assert(sizeof(struct block_q4_1) == 20, "q4_1 layout");
static_assert(sizeof(struct block_q5_0) == 22, "q5_0 layout");
static_assert(sizeof(struct block_q5_1) == 24, "q5_1 layout");
static_assert(sizeof(struct block_q8_0) == 34, "q8_0 layout");
static_assert(sizeof(struct block_q8_1) == 36, "q8_1 layout");
static_assert(sizeof(struct block_q4_K) == 144, "q4_K layout");
static_assert(sizeof(struct block_q5_K) == 176, "q5_K layout");
static_assert(sizeof(struct block_q6_K) == 210, "q6_K layout");
static_assert(sizeof(struct block_q8_K) == 292, "q8_K layout");

#if defined(__F16C__)
#include <immintrin.h>
/* One vcvtph2ps; identical to fp16_to_f32 for every input (tested). */
#define QUANT_H2F(h) _cvtsh_ss(h)
#else
#define QUANT_H2F(h) fp16_to_f32(h)
#endif

/* Unpacks the 12-byte Q4_K/Q5_K scale field into 8 scales and 8 mins
 * (6 bits each): entries 0..3 are the low 6 bits of bytes 0..3 / 4..7,
 * entries 4..7 take their low nibble from bytes 8..11 and their top two
 * bits from the spare top bits of bytes 0..3 / 4..7. Works on whole
 * words so the SIMD kernels can load sc/mn as vectors. */
static inline void quant_k4_scales(const uint8_t packed[K_SCALE_SIZE], uint8_t sc[8], uint8_t mn[8]) {
    uint32_t w[3], o[4];
    memcpy(w, packed, sizeof w);
    o[0] = w[0] & 0x3f3f3f3fu;
    o[1] = (w[2] & 0x0f0f0f0fu) | (((w[0] >> 6) & 0x03030303u) << 4);
    o[2] = w[1] & 0x3f3f3f3fu;
    o[3] = ((w[2] >> 4) & 0x0f0f0f0fu) | (((w[1] >> 6) & 0x03030303u) << 4);
    memcpy(sc, o, 8);
    memcpy(mn, o + 2, 8);
}

/* The 256 codes of a Q4_K/Q5_K/Q6_K super-block in value order (Q6_K's
 * with its offset 32 not removed), and back (quant_k_set_codes writes the
 * code fields only). Q4_K/Q5_K: 64-value chunk c holds sub-block 2c in the
 * low nibbles of qs[32c .. 32c + 31] and sub-block 2c + 1 in the high ones;
 * Q5_K's fifth bit of value l is bit l/32 of qh[l % 32]. Q6_K: within each
 * 128-value half h, quarter k = (l % 128)/32 takes the low (k < 2) or high
 * nibble of ql[64h + 32(k % 2) + l % 32] and bits 2k, 2k + 1 of
 * qh[32h + l % 32]. Written so that the compiler vectorises the loops. */
static inline void quant_k_codes(enum dtype type, const void *blk, uint8_t q[QK_K]) {
    if (type == DT_Q6_K) {
        const struct block_q6_K *b = blk;
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 32; r++) {
                const uint8_t l0 = b->ql[64 * h + r], l1 = b->ql[64 * h + 32 + r], hb = b->qh[32 * h + r];
                q[128 * h + r] = (uint8_t)((l0 & 0xf) | (hb & 3) << 4);
                q[128 * h + 32 + r] = (uint8_t)((l1 & 0xf) | ((hb >> 2) & 3) << 4);
                q[128 * h + 64 + r] = (uint8_t)((l0 >> 4) | ((hb >> 4) & 3) << 4);
                q[128 * h + 96 + r] = (uint8_t)((l1 >> 4) | ((hb >> 6) & 3) << 4);
            }
        return;
    }
    const struct block_q5_K *b5 = blk;
    const struct block_q4_K *b4 = blk;
    const uint8_t *qs = type == DT_Q5_K ? b5->qs : b4->qs;
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 32; r++) {
            q[64 * c + r] = qs[32 * c + r] & 0xf;
            q[64 * c + 32 + r] = qs[32 * c + r] >> 4;
        }
    if (type == DT_Q5_K)
        for (int l = 0; l < QK_K; l++)
            q[l] |= (uint8_t)(((b5->qh[l % 32] >> (l / 32)) & 1) << 4);
}

static inline void quant_k_set_codes(enum dtype type, const uint8_t q[QK_K], void *blk) {
    if (type == DT_Q6_K) {
        struct block_q6_K *b = blk;
        for (int h = 0; h < 2; h++) {
            const uint8_t *v = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                b->ql[64 * h + l] = (uint8_t)((v[l] & 0xf) | (v[l + 64] & 0xf) << 4);
                b->ql[64 * h + l + 32] = (uint8_t)((v[l + 32] & 0xf) | (v[l + 96] & 0xf) << 4);
                b->qh[32 * h + l] =
                    (uint8_t)(v[l] >> 4 | (v[l + 32] >> 4) << 2 | (v[l + 64] >> 4) << 4 | (v[l + 96] >> 4) << 6);
            }
        }
        return;
    }
    struct block_q5_K *b5 = blk;
    struct block_q4_K *b4 = blk;
    uint8_t *qs = type == DT_Q5_K ? b5->qs : b4->qs;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xf) | (q[64 * c + 32 + l] & 0xf) << 4);
    if (type == DT_Q5_K) {
        memset(b5->qh, 0, sizeof b5->qh);
        for (int l = 0; l < QK_K; l++)
            b5->qh[l % 32] |= (uint8_t)(((q[l] >> 4) & 1) << (l / 32));
    }
}

/* SIMD dequantisation equals the scalar kernels bit for bit even though
 * these files are built with -mfma and GCC may fuse d*q - m: every product
 * there (fp16 scale x 6-bit scale x code) is exact in f32, so fusing
 * cannot change the rounding.
 *
 * n values per row; w and x point at whole blocks. */
typedef void (*quant_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*quant_quantize_fn)(const float *src, void *dst, int64_t n);
typedef float (*quant_dot_fn)(int64_t n, const void *w, const void *x);
typedef void (*quant_axpy_fn)(float *y, float a, const void *x, int64_t n);
/* Rows of rb bytes the decoding run kernels take at a time, a multiple of
 * the g rows a SIMD level sums at once: 16 KiB (up to 2 g rows past 16 KiB
 * / g bytes a row), so that each is read from memory once and from L1 by
 * every other query head. */
static inline int quant_kv_run_rows(size_t rb, int g) {
    const int r = (int)(16384 / rb / (size_t)g) * g;
    return r < g ? g : r;
}

/* What an axpy multiplies its weight a by for a KV row's values c..: the
 * block's scale for Q8_0 and Q4_0 (whose values are their codes), as
 * axpy_q8_0_row and axpy_q4_0_row do; 1 for F32 / F16 (a * 1 is a). */
static inline __attribute__((always_inline)) float quant_kv_scale(enum dtype t, const uint8_t *row, int64_t c) {
    if (t == DT_Q8_0) return QUANT_H2F(((const struct block_q8_0 *)(const void *)row)[c / QK8_0].d);
    if (t == DT_Q4_0) return QUANT_H2F(((const struct block_q4_0 *)(const void *)row)[c / QK4_0].d);
    return 1.0f;
}

/* The scale of the Q8_0 or Q4_0 block at b (t a constant). */
static inline __attribute__((always_inline)) float quant_q32_scale(enum dtype t, const uint8_t *b) {
    return QUANT_H2F(t == DT_Q8_0 ? ((const struct block_q8_0 *)(const void *)b)->d
                                  : ((const struct block_q4_0 *)(const void *)b)->d);
}

/* A SIMD level's quant_dots_fn / quant_axpys_fn for KV row type t, from
 * its inline dots_kv / axpys_kv (t a constant, so each type gets its own
 * code). */
#define KV_RUN_KERNELS(name, t)                                                                                   \
    static void dots_##name(int64_t d, const void *rows, int n, const float *x, size_t ldx, int nx, float scale, \
                            float *out, size_t ldo) {                                                             \
        dots_kv(t, d, rows, n, x, ldx, nx, scale, out, ldo);                                                      \
    }                                                                                                             \
    static void axpys_##name(float *y, size_t ldy, const float *w, size_t ldw, int ny, const void *rows,         \
                             size_t ldr, int n, int64_t d) {                                                      \
        axpys_kv(t, y, ldy, w, ldw, ny, rows, ldr, n, d);                                                         \
    }

typedef void (*quant_dots_fn)(int64_t d, const void *rows, int n, const float *x, size_t ldx, int nx, float scale,
                              float *out, size_t ldo);
typedef void (*quant_axpys_fn)(float *y, size_t ldy, const float *w, size_t ldw, int ny, const void *rows,
                               size_t ldr, int n, int64_t d);
/* nw weight rows (w_stride bytes apart) against nx activation rows in the
 * batch form (quant_quantize_batch): out[r * out_stride + i] for activation
 * row r and weight row i, each result's arithmetic the same whatever nw and
 * nx are. */
typedef void (*quant_rows_fn)(int64_t n, const void *w, size_t w_stride, int nw, const void *xb, int nx, float *out,
                              size_t out_stride);

/* quant_gemm_tiles's packed forms (quant.h). A tile of QUANT_TILE_ROWS = 16
 * weight rows of n values:
 *   codes  uint8 [n/4][16][4]  codes j..j+3 of row i at 64 (j/4) + 4 i
 *   fs     float [n/G][16]     group g of row i: value = fs q - fm,
 *   fm     float [n/G][16]     q the code, G = quant_gemm_group(type)
 * rows past nw all zero. An activation row (quant_gemm_act_row_bytes):
 *   qs  int8  [n]       Q8_K's codes (quant_quantize_row(DT_Q8_K))
 *   da  float [n/256]   Q8_K's scales
 *   bs  float [n/G]     each group's sum of codes
 * so that  sum_j w_j x_j = sum_blocks da (sum_groups fs t_g - fm bs_g)
 * with t_g the group's integer sum of q x codes. */
static inline int quant_gemm_group(enum dtype type) { return type == DT_Q6_K ? 16 : 32; }

static inline size_t quant_gemm_act_row_bytes(enum dtype type, int64_t n) {
    const size_t b = (size_t)n + sizeof(float) * (size_t)(n / QK_K + n / quant_gemm_group(type));
    return (b + 63) / 64 * 64;
}

/* out[r * out_stride + i] for tile row i < nw and activation row r < nx
 * (rows act_row_bytes apart), every lane's arithmetic in this order:
 * per block acc_b = 0; per group acc_b = fma(-fm, bs, fma(float(t), fs,
 * acc_b)); per block acc = fma(acc_b, da, acc), so a SIMD kernel and the
 * scalar reference agree bit for bit. */
typedef void (*quant_gemm_fn)(int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                              size_t out_stride);

/* quant_ilv's interleaved form (quant.h). Per tile of 16 rows, its n/qk
 * blocks in order, each a block tile of 16 x the type's block bytes.
 * The 32-value block types (qk = 32):
 *   d      fp16   [16]  row i's scale
 *   m      fp16   [16]  row i's offset (Q4_1, Q5_1)
 *   qh     uint32 [16]  row i's fifth bits, bit k for value k (Q5_0, Q5_1)
 *   codes  eight groups g, each values 4g .. 4g + 3 of the 16 rows, value
 *          4g + j of row i at byte 4i + j of its vector:
 *          4- and 5-bit types: 4 vectors of 64 bytes, groups 2c and 2c + 1
 *          in vector c's low and high nibbles (the fifth bit from qh);
 *          Q8_0: 8 vectors, group g in vector g, as code + 128.
 * A code u (unsigned, as vpdpbusd takes it) stands for (u - o) d, or
 * u d + m for the formats with an offset (o = 0).
 * The K types (qk = 256), groups of four values and nibbles as above:
 *   Q4_K, Q5_K: d, m (dmin) fp16 [16]; sc: the 12 bytes of scales and
 *          mins of row i as three words, word w at sc + 64 w + 4 i (so
 *          quant_k4_scales runs in 32-bit lanes); Q5_K: qh, one vector per
 *          sub-block j of 32 values, row i's fifth bits of values 32 j + k
 *          at bit k of word i; codes: 32 vectors, groups 2c and 2c + 1 in
 *          vector c. Value = d sc_j u - dmin mn_j.
 *   Q6_K: d fp16 [16]; sc: the 16 int8 scales of row i, scales 4w .. 4w + 3
 *          at sc + 64 w + 4 i; codes: the low four bits, 32 vectors as
 *          above; qh: the high two bits, vector h for groups 4h .. 4h + 3,
 *          group 4h + s at bits 2s, 2s + 1 of each byte. Value =
 *          d sc_g (u - 32), sub-block g of 16 values. (A block tile of
 *          3360 bytes: every other one starts 32 bytes into a cache line.)
 * An activation row (quant_ilv_act_bytes): for the K types, Q8_K blocks
 * (as quant_quantize_batch gives them); else int8 qs[n], then per block
 * float d[n/32], float s[n/32] (fp16(d sum), as Q8_1 holds it) and int32
 * sum[n/32], the sum of the block's codes. */
struct ilv_layout {
    int qk;                /* values a block                            */
    int o;                 /* the codes' offset                         */
    bool min, q5, q8, q6;  /* an offset m; fifth bits; 8-bit codes; Q6_K */
    size_t m, sc, qh, codes; /* byte offsets inside a block tile         */
    size_t bytes;          /* a block tile: 16 x block bytes             */
};

static inline struct ilv_layout quant_ilv_layout(enum dtype type) {
    struct ilv_layout l = {.qk = 32};
    if (type == DT_Q4_K || type == DT_Q5_K) {
        l.qk = QK_K, l.min = true, l.q5 = type == DT_Q5_K;
        l.m = 32, l.sc = 64, l.qh = 256;
        l.codes = l.qh + (l.q5 ? 512 : 0);
        l.bytes = l.codes + 2048;
        return l;
    }
    if (type == DT_Q6_K) {
        l.qk = QK_K, l.o = 32, l.q6 = true;
        l.sc = 32, l.codes = 288, l.qh = l.codes + 2048;
        l.bytes = l.qh + 1024;
        return l;
    }
    l.min = type == DT_Q4_1 || type == DT_Q5_1, l.q5 = type == DT_Q5_0 || type == DT_Q5_1;
    l.o = type == DT_Q4_0 ? 8 : type == DT_Q5_0 ? 16 : type == DT_Q8_0 ? 128 : 0;
    l.q8 = type == DT_Q8_0;
    l.m = 32;
    l.qh = l.m + (l.min ? 32 : 0);
    l.codes = l.qh + (l.q5 ? 64 : 0);
    l.bytes = l.codes + (l.q8 ? 512 : 256);
    return l;
}

static inline size_t quant_ilv_act_row_bytes(enum dtype type, int64_t n) {
    if (quant_ilv_layout(type).qk == QK_K)
        return (size_t)(n / QK_K) * sizeof(struct block_q8_K);
    return ((size_t)n + 12 * (size_t)(n / 32) + 63) / 64 * 64;
}

/* out[r * out_stride + 16 t + i] for tile t < nt and activation row r < nx
 * (quant.h: quant_gemm_ilv). */
typedef void (*quant_ilv_fn)(int64_t n, const void *tiles, int nt, const void *act, int nx, float *out,
                             size_t out_stride);

/* Codes of one 32-value block as quant_q8_0 makes them (scale d as fp16
 * bits); returns their sum. */
int quant_q8_32(const float *x, uint16_t *d, int8_t qs[32]);
/* quantize.c: the reference quantisers by type (NULL: none), and Q4_0H's
 * rotation of every whole 32-value block of x (its own inverse). */
extern const quant_quantize_fn quant_ref_quantize[DT_COUNT];
void quant_rotate_blocks(float *x, int64_t n);
/* The scalar absmax32 and codes32 of struct quant_kernels. */
float quant_absmax32_ref(const float *x);
int quant_codes32_ref(const float *x, float id, int8_t qs[32]);

/* A rows kernel from its body for one weight row and up to four activation
 * rows (activation rows in fours, then the rest) and, when not NULL, a
 * body for two weight rows against a single activation row. */
#define ROWS_BY_4(name, row_bytes, w2, body)                                                             \
    static void name(int64_t n, const void *w, size_t wb, int nw, const void *xb, int nx, float *out,    \
                     size_t os) {                                                                        \
        const size_t rb = row_bytes;                                                                     \
        void (*const pair)(int64_t, const void *, const void *, const uint8_t *, size_t, float *) = w2;  \
        const uint8_t *wr = w;                                                                           \
        int i = 0;                                                                                       \
        if (nx == 1 && pair != NULL)                                                                     \
            for (; i + 2 <= nw; i += 2)                                                                  \
                pair(n, wr + (size_t)i * wb, wr + (size_t)(i + 1) * wb, xb, rb, out + i);                \
        for (; i < nw; i++) {                                                                            \
            const void *a = wr + (size_t)i * wb;                                                         \
            const uint8_t *x = xb;                                                                       \
            float *o = out + i;                                                                          \
            int left = nx;                                                                               \
            for (; left >= 4; left -= 4, x += 4 * rb, o += 4 * os)                                       \
                body(n, a, x, rb, 4, o, os);                                                             \
            if (left == 3)                                                                               \
                body(n, a, x, rb, 3, o, os);                                                             \
            else if (left == 2)                                                                          \
                body(n, a, x, rb, 2, o, os);                                                             \
            else if (left == 1)                                                                          \
                body(n, a, x, rb, 1, o, os);                                                             \
        }                                                                                                \
    }

struct quant_kernels {
    quant_dequant_fn dequant[DT_COUNT]; /* NULL: type not readable */
    quant_dot_fn dot[DT_COUNT];
    /* dot[t]: one row of t's vec_dot type; dot_rows[t]: the batch form,
     * which the 32-value block types have only (NULL: dot[] row by row). */
    quant_rows_fn dot_rows[DT_COUNT];
    /* Activation quantisation of a 32-value block: max |x_j| (NaN
     * ignored), and the codes clamp(round_even(x_j * id), -127, 127)
     * with their sum (NaN -> -127). */
    float (*absmax32)(const float *x);
    int (*codes32)(const float *x, float id, int8_t qs[32]);
    float (*dot_f32)(const float *a, const float *b, int64_t n);
    void (*axpy_f32)(float *y, float a, const float *x, int64_t n);
    /* KV cache rows (F32, F16, Q8_0, Q4_0) against plain f32 vectors:
     * dot_f32x[t](n, row, x) and axpy[t](y, a, row, n). */
    quant_dot_fn dot_f32x[DT_COUNT];
    quant_axpy_fn axpy[DT_COUNT];
    /* The same over a run of rows for several query vectors
     * (quant_kv_scores, quant_kv_mix), each (row, query)'s arithmetic
     * that of dot_f32x / axpy; NULL: those row by row. */
    quant_dots_fn dots[DT_COUNT];
    quant_axpys_fn axpys[DT_COUNT];
    /* Activations and softmax (ops.c), see vec_sigmoid_mul and
     * vec_exp_sum (core/vec.h). The SIMD levels share one expf approximation
     * (EXP_POLY_*), so that every element, a vector's or a tail's, gets the
     * same value. */
    void (*sigmoid_mul)(float *g, const float *u, int64_t n, float a, float b);
    double (*exp_sum)(float *x, int64_t n, float m);
    float (*max_f32)(const float *x, int64_t n);
    void (*scale_f32)(float *x, float a, int64_t n);
    /* Activation quantisers bit for bit the reference ones (quant.c);
     * NULL: the reference. */
    quant_quantize_fn quantize[DT_COUNT];
    /* quant_gemm_tiles's kernel for the weight type; NULL: no integer path. */
    quant_gemm_fn gemm[DT_COUNT];
    /* quant_gemm_ilv's kernel for the weight type; NULL: the reference. */
    quant_ilv_fn ilv[DT_COUNT];
    /* quant_ilv_dequant for the type; NULL: rows unpacked to their stored
     * blocks for dequant[]. */
    void (*ilv_dequant[DT_COUNT])(int64_t n, const void *ilv, int64_t r0, int nr, float *dst);
    /* tile_scores and tile_mix (prompt attention, core/vec.h). */
    void (*scores_f32)(int64_t d, const float *q, size_t ldq, int nq, const float *panels, int n, float scale,
                       float *out, size_t ldo);
    void (*mix_f32)(int64_t d, const float *w, size_t ldw, int nq, const float *v, int n, float *y, size_t ldy);
    /* quant_rotate_blocks, each value by the same adds in the same order
     * (the same bits): Q4_0H's attention rotates its queries and value
     * sums every chunk of rows, and the scalar butterflies were a fifth of
     * its time. */
    void (*rotate)(float *x, int64_t n);
};

/* e^r = 1 + r + r^2 p(r) on |r| <= ln2/2 (Cephes' expf polynomial: within
 * 2 ulp of expf once 2^k scales it back); x = k ln2 + r with ln2 in two
 * parts for an exact reduction. Inputs are clamped to the range where 2^k
 * is a normal float: below EXP_MIN the result is flushed to 0. */
#define EXP_LOG2E 1.44269504088896341f
#define EXP_LN2_HI 0.693359375f
#define EXP_LN2_LO -2.12194440e-4f
#define EXP_MIN -87.33654475f
#define EXP_MAX 88.02969193f
#define EXP_POLY_5 1.9875691500e-4f
#define EXP_POLY_4 1.3981999507e-3f
#define EXP_POLY_3 8.3334519073e-3f
#define EXP_POLY_2 4.1665795894e-2f
#define EXP_POLY_1 1.6666665459e-1f
#define EXP_POLY_0 5.0000001201e-1f

/* Each overrides the entries it has a faster kernel for and leaves the rest
 * (the next lower level's) in place. Only called when the CPU has the ISA. */
void quant_kernels_avx2(struct quant_kernels *k);
void quant_kernels_avx512(struct quant_kernels *k);
void quant_kernels_vnni(struct quant_kernels *k);
/* The float-vector kernels' entries (core/vec.h): the scalar references
 * (vec.c), then each level's (vec_avx2.c, vec_avx512.c). */
void vec_kernels_scalar(struct quant_kernels *k);
void vec_kernels_avx2(struct quant_kernels *k);
void vec_kernels_avx512(struct quant_kernels *k);
/* The table of the level in use. */
const struct quant_kernels *quant_kernels_active(void);

#ifdef __AVX512F__
#include <immintrin.h>
/* Lanes below `left` (0..16) of a 16-lane mask (the AVX-512 files). */
static inline __mmask16 tail_mask(int64_t left) { return (__mmask16)((1u << left) - 1); }
#endif

#endif
