/* quant_gemm_tiles's packed forms (layouts in quant_impl.h): packing weight tiles,
 * quantising activation rows, the scalar reference kernel and the
 * dispatcher. Packing is plain C: a product packs each tile once for all of
 * its activation rows (ops_matmul uses it from 32 rows up). */
#include "quant_impl.h"

#include "common.h"

#include <math.h>

static bool gemm_type(enum dtype type) { return type == DT_Q4_K || type == DT_Q5_K || type == DT_Q6_K; }

size_t quant_gemm_tile_bytes(enum dtype type, int64_t n) {
    if (!gemm_type(type) || n <= 0 || n % QK_K != 0)
        return 0;
    return (size_t)n * QUANT_TILE_ROWS + 2 * sizeof(float) * QUANT_TILE_ROWS * (size_t)(n / quant_gemm_group(type));
}

size_t quant_gemm_act_bytes(enum dtype type, int64_t n) {
    return quant_gemm_tile_bytes(type, n) ? quant_gemm_act_row_bytes(type, n) : 0;
}

/* Row i's group scales and offsets from a super-block's d, dmin and
 * scales (Q4_K/Q5_K: the 12-byte field; Q6_K: the 16 int8 scales). */
static void tile_scales(enum dtype type, uint16_t d16, uint16_t dmin16, const uint8_t *scales, int i, float *fs,
                        float *fm) {
    const float d = fp16_to_f32(d16);
    if (type == DT_Q6_K) {
        for (int g = 0; g < QK_K / 16; g++) {
            fs[g * QUANT_TILE_ROWS + i] = d * (int8_t)scales[g];
            fm[g * QUANT_TILE_ROWS + i] = 32 * d * (int8_t)scales[g];
        }
        return;
    }
    uint8_t sc[8], mn[8];
    quant_k4_scales(scales, sc, mn);
    const float dmin = fp16_to_f32(dmin16);
    for (int g = 0; g < 8; g++) {
        fs[g * QUANT_TILE_ROWS + i] = d * sc[g];
        fm[g * QUANT_TILE_ROWS + i] = dmin * mn[g];
    }
}

/* Row i's codes of one super-block into q (in value order), and its
 * groups' scales and offsets. The loops over codes are written so that the
 * compiler vectorises them: packing is on the prompt's critical path. */
static void unpack_block(enum dtype type, const void *blk, int i, uint8_t q[QK_K], float *fs, float *fm) {
    quant_k_codes(type, blk, q);
    if (type == DT_Q6_K) {
        const struct block_q6_K *b = blk;
        tile_scales(type, b->d, 0, (const uint8_t *)b->scales, i, fs, fm);
        return;
    }
    /* Q4_K and Q5_K share d, dmin and scales. */
    const struct block_q4_K *b4 = blk;
    tile_scales(type, b4->d, b4->dmin, b4->scales, i, fs, fm);
}

void quant_gemm_pack(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, void *tile) {
    const size_t bytes = quant_gemm_tile_bytes(type, n);
    if (bytes == 0)
        return;
    if (nw < QUANT_TILE_ROWS)
        memset(tile, 0, bytes);
    const int G = quant_gemm_group(type);
    const size_t bb = dtype_get(type)->block_bytes;
    uint8_t *codes = tile;
    float *fs = (float *)(void *)(codes + n * QUANT_TILE_ROWS), *fm = fs + QUANT_TILE_ROWS * (n / G);
    for (int i = 0; i < nw && i < QUANT_TILE_ROWS; i++)
        for (int64_t b = 0; b < n / QK_K; b++) {
            const int64_t g0 = b * (QK_K / G);
            uint8_t q[QK_K], *dst = codes + b * QK_K * QUANT_TILE_ROWS + 4 * i;
            unpack_block(type, (const uint8_t *)w + (size_t)i * w_stride + (size_t)b * bb, i, q,
                         fs + g0 * QUANT_TILE_ROWS, fm + g0 * QUANT_TILE_ROWS);
            for (int l = 0; l < QK_K; l += 4)
                memcpy(dst + l * QUANT_TILE_ROWS, q + l, 4);
        }
}

static_assert(QUANT_TILE_ROWS == QUANT_ILV_ROWS, "an interleaved tile is a prompt tile's rows");

/* Entry x: byte j holds 16 where bit j of x is set (a fifth bit). */
static const uint32_t fifth_bits[16] = {0x00000000, 0x00000010, 0x00001000, 0x00001010, 0x00100000, 0x00100010,
                                        0x00101000, 0x00101010, 0x10000000, 0x10000010, 0x10001000, 0x10001010,
                                        0x10100000, 0x10100010, 0x10101000, 0x10101010};

/* From the interleaved form, whose code vectors hold the tile's groups of
 * four already: a nibble split (plus the fifth or high bits) per vector,
 * inlined per type. */
static inline __attribute__((always_inline)) void pack_ilv(const enum dtype type, int64_t n, const void *ilv,
                                                           void *tile) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const int G = quant_gemm_group(type);
    uint8_t *codes = tile;
    float *fs = (float *)(void *)(codes + n * QUANT_TILE_ROWS), *fm = fs + QUANT_TILE_ROWS * (n / G);
    for (int64_t b = 0; b < n / QK_K; b++) {
        const uint8_t *p = (const uint8_t *)ilv + (size_t)b * L.bytes;
        uint8_t *dst = codes + b * QK_K * QUANT_TILE_ROWS;
        /* Vector v's low nibbles are group 2v, its high ones group 2v + 1;
         * eight bytes (two rows' four codes) at a time. */
        for (int v = 0; v < QK_K / 8; v++)
            for (int k = 0; k < 64; k += 8) {
                uint64_t c, lo, hi;
                memcpy(&c, p + L.codes + 64 * v + k, 8);
                lo = c & 0x0f0f0f0f0f0f0f0full, hi = c >> 4 & 0x0f0f0f0f0f0f0f0full;
                if (L.q5) { /* bits 8 (v % 4) .. 8 (v % 4) + 7 of each row's word of sub-block v / 4 */
                    uint32_t qh[2];
                    memcpy(qh, p + L.qh + 64 * (v / 4) + k, 8);
                    const int s0 = 8 * (v % 4);
                    lo |= (uint64_t)fifth_bits[qh[0] >> s0 & 0xf] | (uint64_t)fifth_bits[qh[1] >> s0 & 0xf] << 32;
                    hi |= (uint64_t)fifth_bits[qh[0] >> (s0 + 4) & 0xf] |
                          (uint64_t)fifth_bits[qh[1] >> (s0 + 4) & 0xf] << 32;
                }
                if (L.q6) { /* groups 2v, 2v + 1 at bits 2((2v) % 4) of vector v / 2 */
                    uint64_t h;
                    memcpy(&h, p + L.qh + 64 * (v / 2) + k, 8);
                    const int s0 = 4 * (v % 2);
                    lo |= (h >> s0 & 0x0303030303030303ull) << 4;
                    hi |= (h >> (s0 + 2) & 0x0303030303030303ull) << 4;
                }
                memcpy(dst + 64 * (2 * v) + k, &lo, 8);
                memcpy(dst + 64 * (2 * v + 1) + k, &hi, 8);
            }
        const int64_t g0 = b * (QK_K / G);
        for (int i = 0; i < QUANT_TILE_ROWS; i++) {
            uint8_t scales[QK_K / 16];
            uint16_t d, dmin = 0;
            for (int w = 0; w < (L.q6 ? 4 : 3); w++)
                memcpy(scales + 4 * w, p + L.sc + 64 * w + 4 * i, 4);
            memcpy(&d, p + 2 * i, 2);
            if (L.min)
                memcpy(&dmin, p + L.m + 2 * i, 2);
            tile_scales(type, d, dmin, scales, i, fs + g0 * QUANT_TILE_ROWS, fm + g0 * QUANT_TILE_ROWS);
        }
    }
}

void quant_gemm_pack_ilv(enum dtype type, int64_t n, const void *ilv, void *tile) {
    if (quant_gemm_tile_bytes(type, n) == 0)
        return;
    switch (type) {
    case DT_Q4_K: pack_ilv(DT_Q4_K, n, ilv, tile); break;
    case DT_Q5_K: pack_ilv(DT_Q5_K, n, ilv, tile); break;
    case DT_Q6_K: pack_ilv(DT_Q6_K, n, ilv, tile); break;
    default: break;
    }
}

void quant_gemm_act(enum dtype type, const float *x, int64_t n, int nx, void *act) {
    const size_t rb = quant_gemm_act_bytes(type, n);
    if (rb == 0)
        return;
    const int G = quant_gemm_group(type);
    for (int r = 0; r < nx; r++, x += n) {
        int8_t *qs = (int8_t *)act + (size_t)r * rb;
        float *da = (float *)(void *)(qs + n), *bs = da + n / QK_K;
        for (int64_t b = 0; b < n / QK_K; b++) {
            struct block_q8_K q;
            quant_quantize_row(DT_Q8_K, x + b * QK_K, &q, QK_K);
            memcpy(qs + b * QK_K, q.qs, QK_K);
            da[b] = q.d;
            for (int g = 0; g < QK_K / G; g++)
                bs[b * (QK_K / G) + g] = G == 16 ? q.bsums[g] : q.bsums[2 * g] + q.bsums[2 * g + 1];
        }
    }
}

void quant_gemm_tiles_ref(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                          size_t out_stride) {
    const size_t rb = quant_gemm_act_bytes(type, n);
    if (rb == 0)
        return;
    const int G = quant_gemm_group(type);
    const uint8_t *codes = tile;
    const float *fs = (const float *)(const void *)(codes + n * QUANT_TILE_ROWS), *fm = fs + QUANT_TILE_ROWS * (n / G);
    for (int r = 0; r < nx; r++) {
        const int8_t *qs = (const int8_t *)act + (size_t)r * rb;
        const float *da = (const float *)(const void *)(qs + n), *bs = da + n / QK_K;
        for (int i = 0; i < nw; i++) {
            float acc = 0;
            for (int64_t b = 0; b < n / QK_K; b++) {
                float acc_b = 0;
                for (int64_t g = b * (QK_K / G); g < (b + 1) * (QK_K / G); g++) {
                    int t = 0;
                    for (int64_t j = g * G; j < (g + 1) * G; j++)
                        t += codes[(j / 4) * 64 + 4 * i + j % 4] * qs[j];
                    acc_b = fmaf((float)t, fs[g * QUANT_TILE_ROWS + i], acc_b);
                    acc_b = fmaf(-fm[g * QUANT_TILE_ROWS + i], bs[g], acc_b);
                }
                acc = fmaf(acc_b, da[b], acc);
            }
            out[(size_t)r * out_stride + i] = acc;
        }
    }
}

bool quant_gemm_has(enum dtype type) {
    return (unsigned)type < DT_COUNT && quant_kernels_active()->gemm[type] != NULL;
}

void quant_gemm_tiles(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                      size_t out_stride) {
    const quant_gemm_fn f = (unsigned)type < DT_COUNT ? quant_kernels_active()->gemm[type] : NULL;
    if (f != NULL && quant_gemm_tile_bytes(type, n) != 0)
        f(n, tile, KVF_MIN(nw, QUANT_TILE_ROWS), act, nx, out, out_stride);
    else
        quant_gemm_tiles_ref(type, n, tile, KVF_MIN(nw, QUANT_TILE_ROWS), act, nx, out, out_stride);
}
