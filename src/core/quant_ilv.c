/* quant_ilv's interleaved form (layout in quant_impl.h): packing at load,
 * dequantisation (prompts, embedding rows), activation rows, the scalar
 * reference kernel and the dispatcher. */
#include "quant_impl.h"

#include "common.h"

#include <math.h>

bool quant_ilv_type(enum dtype type) {
    return type == DT_Q4_0 || type == DT_Q4_1 || type == DT_Q5_0 || type == DT_Q5_1 || type == DT_Q8_0 ||
           type == DT_Q4_K || type == DT_Q5_K || type == DT_Q6_K;
}

bool quant_ilv_has(enum dtype type) { return quant_ilv_type(type) && quant_kernels_active()->ilv[type] != NULL; }

/* Code k of row i in a block tile (for Q6_K with its high bits). */
static inline int tile_code(const struct ilv_layout *L, const uint8_t *p, int i, int k) {
    const int g = k / 4, j = k % 4;
    if (L->q8)
        return p[L->codes + 64 * g + 4 * i + j];
    const uint8_t byte = p[L->codes + 64 * (g / 2) + 4 * i + j];
    int u = g % 2 ? byte >> 4 : byte & 0xf;
    if (L->q5) {
        uint32_t qh;
        memcpy(&qh, p + L->qh + 64 * (k / 32) + 4 * i, 4);
        u |= (int)((qh >> (k % 32)) & 1) << 4;
    }
    if (L->q6)
        u |= (p[L->qh + 64 * (g / 4) + 4 * i + j] >> (2 * (g % 4)) & 3) << 4;
    return u;
}

static inline float tile_half(const uint8_t *p, size_t off, int i) {
    uint16_t h;
    memcpy(&h, p + off + 2 * i, 2);
    return fp16_to_f32(h);
}

/* Row i of a block tile from a stored block: scale, offset, fifth bits
 * and codes (u, see quant_impl.h). Inlined with `type` known, so that
 * packing, which a model does for all its weights at load, runs at memory
 * speed rather than branching per code. */
static inline __attribute__((always_inline)) void pack_row(const enum dtype type, const uint8_t *blk, uint8_t *p,
                                                           int i) {
    const struct ilv_layout L = quant_ilv_layout(type);
    memcpy(p + 2 * i, blk, 2);
    if (L.min)
        memcpy(p + L.m + 2 * i, blk + 2, 2);
    uint8_t *c = p + L.codes + 4 * i;
    uint32_t a, b;
    if (L.q8) {
        for (int g = 0; g < 8; g++) {
            memcpy(&a, blk + 2 + 4 * g, 4);
            a ^= 0x80808080u; /* two's complement + 128 */
            memcpy(c + 64 * g, &a, 4);
        }
        return;
    }
    const uint8_t *qs = blk + (L.min ? 4 : 2) + (L.q5 ? 4 : 0);
    if (L.q5)
        memcpy(p + L.qh + 4 * i, blk + (L.min ? 4 : 2), 4); /* bit k of both is value k */
    /* Values k < 16 are the low nibbles of qs[k], the others the high
     * nibbles of qs[k - 16]; vector v holds values 8v + j (low nibbles) and
     * 8v + 4 + j (high), j < 4. */
    for (int v = 0; v < 4; v++) {
        memcpy(&a, qs + 8 * (v % 2), 4);
        memcpy(&b, qs + 8 * (v % 2) + 4, 4);
        const int sh = v < 2 ? 0 : 4;
        a = (a >> sh & 0x0f0f0f0fu) | (b >> sh & 0x0f0f0f0fu) << 4;
        memcpy(c + 64 * v, &a, 4);
    }
}

/* pack_row for the K types: row i of a block tile from a stored
 * super-block. */
static inline __attribute__((always_inline)) void pack_row_k(const enum dtype type, const uint8_t *blk, uint8_t *p,
                                                             int i) {
    const struct ilv_layout L = quant_ilv_layout(type);
    uint8_t *c = p + L.codes + 4 * i;
    if (L.q6) {
        const struct block_q6_K *b = (const void *)blk;
        uint8_t u[QK_K];
        quant_k_codes(type, blk, u);
        memcpy(p + 2 * i, &b->d, 2);
        for (int w = 0; w < 4; w++)
            memcpy(p + L.sc + 64 * w + 4 * i, b->scales + 4 * w, 4);
        for (int h = 0; h < 16; h++)
            for (int j = 0; j < 4; j++) {
                const uint8_t *v = u + 16 * h + j;
                p[L.qh + 64 * h + 4 * i + j] =
                    (uint8_t)(v[0] >> 4 | (v[4] >> 4) << 2 | (v[8] >> 4) << 4 | (v[12] >> 4) << 6);
            }
        for (int v = 0; v < QK_K / 8; v++)
            for (int j = 0; j < 4; j++)
                c[64 * v + j] = (uint8_t)((u[8 * v + j] & 0xf) | (u[8 * v + 4 + j] & 0xf) << 4);
        return;
    }
    const struct block_q5_K *b5 = (const void *)blk;
    const struct block_q4_K *b = (const void *)blk;
    const uint8_t *qs = L.q5 ? b5->qs : b->qs;
    memcpy(p + 2 * i, &b->d, 2);
    memcpy(p + L.m + 2 * i, &b->dmin, 2);
    for (int w = 0; w < 3; w++)
        memcpy(p + L.sc + 64 * w + 4 * i, b->scales + 4 * w, 4);
    if (L.q5) /* bit k of word j: bit j of qh[k] */
        for (int j = 0; j < 8; j++) {
            uint32_t bits = 0;
            for (int k = 0; k < 32; k++)
                bits |= (uint32_t)(b5->qh[k] >> j & 1) << k;
            memcpy(p + L.qh + 64 * j + 4 * i, &bits, 4);
        }
    /* Vector v: values 8v .. 8v + 7, of sub-block v / 4, which is in the
     * low (even) or high (odd) nibbles of qs[32 (v / 8) ..]; as pack_row. */
    for (int v = 0; v < QK_K / 8; v++) {
        uint32_t a, e;
        const uint8_t *q = qs + 32 * (v / 8) + 8 * (v % 4);
        memcpy(&a, q, 4);
        memcpy(&e, q + 4, 4);
        const int sh = (v / 4) % 2 ? 4 : 0;
        a = (a >> sh & 0x0f0f0f0fu) | (e >> sh & 0x0f0f0f0fu) << 4;
        memcpy(c + 64 * v, &a, 4);
    }
}

/* pack_row_k's inverse. */
static void unpack_row_k(enum dtype type, const uint8_t *p, int i, uint8_t *blk) {
    const struct ilv_layout L = quant_ilv_layout(type);
    uint8_t u[QK_K];
    for (int k = 0; k < QK_K; k++)
        u[k] = (uint8_t)tile_code(&L, p, i, k);
    quant_k_set_codes(type, u, blk);
    if (L.q6) {
        struct block_q6_K *b = (void *)blk;
        memcpy(&b->d, p + 2 * i, 2);
        for (int w = 0; w < 4; w++)
            memcpy(b->scales + 4 * w, p + L.sc + 64 * w + 4 * i, 4);
        return;
    }
    struct block_q4_K *b = (void *)blk;
    memcpy(&b->d, p + 2 * i, 2);
    memcpy(&b->dmin, p + L.m + 2 * i, 2);
    for (int w = 0; w < 3; w++)
        memcpy(b->scales + 4 * w, p + L.sc + 64 * w + 4 * i, 4);
}

static inline __attribute__((always_inline)) void pack_tiles(const enum dtype type, int64_t n, const void *w,
                                                             int64_t tiles, void *dst) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const size_t bb = L.bytes / QUANT_ILV_ROWS;
    const int64_t nb = n / L.qk;
    #pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < tiles; t++)
        for (int i = 0; i < QUANT_ILV_ROWS; i++) {
            const uint8_t *row = (const uint8_t *)w + (size_t)(t * QUANT_ILV_ROWS + i) * (size_t)nb * bb;
            for (int64_t b = 0; b < nb; b++) {
                uint8_t *p = (uint8_t *)dst + (size_t)(t * nb + b) * L.bytes;
                if (L.qk == QK_K)
                    pack_row_k(type, row + (size_t)b * bb, p, i);
                else
                    pack_row(type, row + (size_t)b * bb, p, i);
            }
        }
}

void quant_ilv_pack(enum dtype type, int64_t n, const void *w, int64_t rows, void *dst) {
    const int64_t tiles = rows / QUANT_ILV_ROWS;
    switch (type) {
    case DT_Q4_0: pack_tiles(DT_Q4_0, n, w, tiles, dst); break;
    case DT_Q4_1: pack_tiles(DT_Q4_1, n, w, tiles, dst); break;
    case DT_Q5_0: pack_tiles(DT_Q5_0, n, w, tiles, dst); break;
    case DT_Q5_1: pack_tiles(DT_Q5_1, n, w, tiles, dst); break;
    case DT_Q8_0: pack_tiles(DT_Q8_0, n, w, tiles, dst); break;
    case DT_Q4_K: pack_tiles(DT_Q4_K, n, w, tiles, dst); break;
    case DT_Q5_K: pack_tiles(DT_Q5_K, n, w, tiles, dst); break;
    case DT_Q6_K: pack_tiles(DT_Q6_K, n, w, tiles, dst); break;
    default: break;
    }
}

/* pack_row's inverse: row i of a block tile back into the stored block. */
static inline __attribute__((always_inline)) void unpack_row(const enum dtype type, const uint8_t *p, int i,
                                                             uint8_t *blk) {
    const struct ilv_layout L = quant_ilv_layout(type);
    memcpy(blk, p + 2 * i, 2);
    if (L.min)
        memcpy(blk + 2, p + L.m + 2 * i, 2);
    const uint8_t *c = p + L.codes + 4 * i;
    uint32_t w[8];
    for (int v = 0; v < (L.q8 ? 8 : 4); v++)
        memcpy(&w[v], c + 64 * v, 4);
    if (L.q8) {
        for (int g = 0; g < 8; g++) {
            w[g] ^= 0x80808080u;
            memcpy(blk + 2 + 4 * g, &w[g], 4);
        }
        return;
    }
    uint8_t *qs = blk + (L.min ? 4 : 2) + (L.q5 ? 4 : 0);
    if (L.q5)
        memcpy(blk + (L.min ? 4 : 2), p + L.qh + 4 * i, 4);
    for (int v = 0; v < 2; v++) {
        const uint32_t a = (w[v] & 0x0f0f0f0fu) | (w[v + 2] & 0x0f0f0f0fu) << 4;
        const uint32_t b = (w[v] >> 4 & 0x0f0f0f0fu) | (w[v + 2] & 0xf0f0f0f0u);
        memcpy(qs + 8 * v, &a, 4);
        memcpy(qs + 8 * v + 4, &b, 4);
    }
}

/* Bytes of stored blocks unpacked and dequantised at a time (a stack
 * buffer). */
#define DEQUANT_BYTES 2176
static_assert(DEQUANT_BYTES >= sizeof(struct block_q6_K), "a stored block fits the buffer");

/* Rows go back to their stored blocks, which the level's dequantiser turns
 * into floats: the same function on the same bytes as for a plain row. */
static inline __attribute__((always_inline)) void dequant_tiles(const enum dtype type, int64_t n, const void *ilv,
                                                                int64_t r0, int nr, float *dst) {
    const struct ilv_layout L = quant_ilv_layout(type);
    const size_t bb = L.bytes / QUANT_ILV_ROWS;
    const int64_t nb = n / L.qk, per = DEQUANT_BYTES / (int64_t)bb;
    _Alignas(16) uint8_t blocks[DEQUANT_BYTES]; /* read as blocks with 2-byte fields */
    for (int r = 0; r < nr; r++) {
        const int64_t t = (r0 + r) / QUANT_ILV_ROWS;
        const int i = (int)((r0 + r) % QUANT_ILV_ROWS);
        for (int64_t b0 = 0; b0 < nb; b0 += per) {
            const int64_t nbk = KVF_MIN(per, nb - b0);
            for (int64_t b = 0; b < nbk; b++) {
                const uint8_t *p = (const uint8_t *)ilv + (size_t)(t * nb + b0 + b) * L.bytes;
                if (L.qk == QK_K)
                    unpack_row_k(type, p, i, blocks + b * bb);
                else
                    unpack_row(type, p, i, blocks + b * bb);
            }
            quant_dequant_row(type, blocks, dst + (size_t)r * n + L.qk * b0, L.qk * nbk);
        }
    }
}

void quant_ilv_dequant(enum dtype type, int64_t n, const void *ilv, int64_t r0, int nr, float *dst) {
    if (quant_ilv_type(type) && quant_kernels_active()->ilv_dequant[type]) {
        quant_kernels_active()->ilv_dequant[type](n, ilv, r0, nr, dst);
        return;
    }
    switch (type) {
    case DT_Q4_0: dequant_tiles(DT_Q4_0, n, ilv, r0, nr, dst); break;
    case DT_Q4_1: dequant_tiles(DT_Q4_1, n, ilv, r0, nr, dst); break;
    case DT_Q5_0: dequant_tiles(DT_Q5_0, n, ilv, r0, nr, dst); break;
    case DT_Q5_1: dequant_tiles(DT_Q5_1, n, ilv, r0, nr, dst); break;
    case DT_Q8_0: dequant_tiles(DT_Q8_0, n, ilv, r0, nr, dst); break;
    case DT_Q4_K: dequant_tiles(DT_Q4_K, n, ilv, r0, nr, dst); break;
    case DT_Q5_K: dequant_tiles(DT_Q5_K, n, ilv, r0, nr, dst); break;
    case DT_Q6_K: dequant_tiles(DT_Q6_K, n, ilv, r0, nr, dst); break;
    default: break;
    }
}

size_t quant_ilv_act_bytes(enum dtype type, int64_t n) {
    if (!quant_ilv_type(type) || n <= 0 || n % quant_ilv_layout(type).qk != 0)
        return 0;
    return quant_ilv_act_row_bytes(type, n);
}

void quant_ilv_act(enum dtype type, const float *x, int64_t n, int nx, void *act) {
    const size_t rb = quant_ilv_act_bytes(type, n);
    if (rb == 0)
        return;
    if (quant_ilv_layout(type).qk == QK_K) {
        quant_quantize_batch(type, x, n, nx, act);
        return;
    }
    const int64_t nb = n / 32;
    for (int r = 0; r < nx; r++, x += n) {
        int8_t *qs = (int8_t *)act + (size_t)r * rb;
        float *xd = (float *)(void *)(qs + n), *xs = xd + nb;
        int32_t *sum = (int32_t *)(void *)(xs + nb);
        for (int64_t b = 0; b < nb; b++) {
            uint16_t d;
            sum[b] = quant_q8_32(x + 32 * b, &d, qs + 32 * b);
            xd[b] = fp16_to_f32(d);
            xs[b] = fp16_to_f32(f32_to_fp16(xd[b] * (float)sum[b]));
        }
    }
}

/* Row i of block tile p against one Q8_K block: a K type's result as
 * quant_gemm_ilv (quant.h) accumulates it. */
static float ref_block_k(const struct ilv_layout *L, const uint8_t *p, int i, const struct block_q8_K *y,
                         float acc) {
    int32_t sumi = 0, summ = 0;
    if (L->q6) {
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = -32 * y->bsums[g];
            for (int k = 16 * g; k < 16 * g + 16; k++)
                s += tile_code(L, p, i, k) * y->qs[k];
            sumi += (int8_t)p[L->sc + 64 * (g / 4) + 4 * i + g % 4] * s;
        }
        return fmaf((float)sumi, tile_half(p, 0, i) * y->d, acc);
    }
    uint8_t packed[K_SCALE_SIZE], sc[8], mn[8];
    for (int w = 0; w < 3; w++)
        memcpy(packed + 4 * w, p + L->sc + 64 * w + 4 * i, 4);
    quant_k4_scales(packed, sc, mn);
    for (int j = 0; j < 8; j++) {
        int32_t s = 0;
        for (int k = 32 * j; k < 32 * j + 32; k++)
            s += tile_code(L, p, i, k) * y->qs[k];
        sumi += sc[j] * s;
        summ += mn[j] * (y->bsums[2 * j] + y->bsums[2 * j + 1]);
    }
    acc = fmaf((float)sumi, tile_half(p, 0, i) * y->d, acc);
    return fmaf(-(float)summ, tile_half(p, L->m, i) * y->d, acc);
}

/* The same for a 32-value block. */
static float ref_block_32(const struct ilv_layout *L, const uint8_t *p, int i, const uint8_t *act, int64_t n,
                          int64_t b, float acc) {
    const int8_t *y = (const int8_t *)act;
    const int64_t nb = n / 32;
    const float *xd = (const float *)(const void *)(y + n), *xs = xd + nb;
    const int32_t *sum = (const int32_t *)(const void *)(xs + nb);
    int32_t s = -L->o * sum[b];
    for (int k = 0; k < 32; k++)
        s += tile_code(L, p, i, k) * y[32 * b + k];
    acc = fmaf((float)s, tile_half(p, 0, i) * xd[b], acc);
    return L->min ? fmaf(tile_half(p, L->m, i), xs[b], acc) : acc;
}

void quant_gemm_ilv_ref(enum dtype type, int64_t n, const void *tiles, int nt, const void *act, int nx, float *out,
                        size_t os) {
    const size_t rb = quant_ilv_act_bytes(type, n);
    if (rb == 0)
        return;
    const struct ilv_layout L = quant_ilv_layout(type);
    const int64_t nb = n / L.qk;
    for (int t = 0; t < nt; t++)
        for (int i = 0; i < QUANT_ILV_ROWS; i++)
            for (int r = 0; r < nx; r++) {
                const uint8_t *y = (const uint8_t *)act + (size_t)r * rb;
                float acc = 0.0f;
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *p = (const uint8_t *)tiles + (size_t)(t * nb + b) * L.bytes;
                    if (L.qk == QK_K)
                        acc = ref_block_k(&L, p, i, (const struct block_q8_K *)(const void *)y + b, acc);
                    else
                        acc = ref_block_32(&L, p, i, y, n, b, acc);
                }
                out[(size_t)r * os + (size_t)(QUANT_ILV_ROWS * t + i)] = acc;
            }
}

void quant_gemm_ilv(enum dtype type, int64_t n, const void *tiles, int nt, const void *act, int nx, float *out,
                    size_t os) {
    const quant_ilv_fn f = quant_ilv_type(type) ? quant_kernels_active()->ilv[type] : NULL;
    if (f)
        f(n, tiles, nt, act, nx, out, os);
    else
        quant_gemm_ilv_ref(type, n, tiles, nt, act, nx, out, os);
}
