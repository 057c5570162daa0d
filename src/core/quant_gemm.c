/* quant_gemm's packed forms (layouts in quant_impl.h): packing weight tiles,
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

/* Row i's codes of one super-block into q (in value order), and its
 * groups' scales and offsets. The loops over codes are written so that the
 * compiler vectorises them: packing is on the prompt's critical path. */
static void unpack_block(enum dtype type, const void *blk, int i, uint8_t q[QK_K], float *fs, float *fm) {
    if (type == DT_Q6_K) {
        const struct block_q6_K *b = blk;
        const float d = fp16_to_f32(b->d);
        for (int h = 0; h < 2; h++)
            for (int r = 0; r < 32; r++) {
                const uint8_t l0 = b->ql[64 * h + r], l1 = b->ql[64 * h + 32 + r], hb = b->qh[32 * h + r];
                q[128 * h + r] = (uint8_t)((l0 & 0xf) | (hb & 3) << 4);
                q[128 * h + 32 + r] = (uint8_t)((l1 & 0xf) | ((hb >> 2) & 3) << 4);
                q[128 * h + 64 + r] = (uint8_t)((l0 >> 4) | ((hb >> 4) & 3) << 4);
                q[128 * h + 96 + r] = (uint8_t)((l1 >> 4) | ((hb >> 6) & 3) << 4);
            }
        for (int g = 0; g < QK_K / 16; g++) {
            fs[g * QUANT_TILE_ROWS + i] = d * b->scales[g];
            fm[g * QUANT_TILE_ROWS + i] = 32 * d * b->scales[g];
        }
        return;
    }
    /* Q4_K and Q5_K share d, dmin and scales; Q5_K adds qh before qs. */
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
    uint8_t sc[8], mn[8];
    quant_k4_scales(b4->scales, sc, mn);
    const float d = fp16_to_f32(b4->d), dmin = fp16_to_f32(b4->dmin);
    for (int g = 0; g < 8; g++) {
        fs[g * QUANT_TILE_ROWS + i] = d * sc[g];
        fm[g * QUANT_TILE_ROWS + i] = dmin * mn[g];
    }
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

void quant_gemm_ref(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
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

void quant_gemm(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                size_t out_stride) {
    const quant_gemm_fn f = (unsigned)type < DT_COUNT ? quant_kernels_active()->gemm[type] : NULL;
    if (f != NULL && quant_gemm_tile_bytes(type, n) != 0)
        f(n, tile, KVF_MIN(nw, QUANT_TILE_ROWS), act, nx, out, out_stride);
    else
        quant_gemm_ref(type, n, tile, KVF_MIN(nw, QUANT_TILE_ROWS), act, nx, out, out_stride);
}
