/* Weight storage types (numbered as in GGUF / ggml) and their kernels:
 * dequantisation, quantisation and dot products. A scalar reference exists
 * for every kernel; AVX2 and AVX-512 variants are chosen at run time. The
 * products are named for their operands and shape:
 *   quant_gemm_rows   weight rows as stored x rows of quantised activations
 *   quant_gemm_ilv    weight rows interleaved by 16 at load x the same
 *   quant_gemm_tiles  weight tiles packed for integer products (VNNI) x
 *                     Q8_K activations, for prompts
 *   quant_kv_dot/axpy one KV cache row (f32, f16, q8_0, q4_0, q4_0h) against f32
 *   quant_kv_scores/mix a run of KV rows against a head's queries, as
 *                     decoding attention needs (scores, then the weighted
 *                     sum of value rows)
 * Kernels on plain float vectors (activations, softmax, attention's tiles)
 * are in core/vec.h. */
#ifndef KVF_QUANT_H
#define KVF_QUANT_H

#include "core/cpu.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum dtype {
    DT_F32 = 0, DT_F16 = 1, DT_Q4_0 = 2, DT_Q4_1 = 3, DT_Q5_0 = 6, DT_Q5_1 = 7,
    DT_Q8_0 = 8, DT_Q8_1 = 9, DT_Q2_K = 10, DT_Q3_K = 11, DT_Q4_K = 12, DT_Q5_K = 13,
    DT_Q6_K = 14, DT_Q8_K = 15, DT_BF16 = 30,
    DT_FILE_END = 40, /* the GGUF type numbers we look up are below it */
    DT_Q4_0H = 40,    /* kvfold's own, for the KV cache only (never a file's): Q4_0 of blocks rotated by
                         the 32-point Hadamard transform */
    DT_COUNT = 41
};

struct dtype_traits {
    const char *name;      /* "q4_K" ... as llama.cpp prints it            */
    int block;             /* values per block                             */
    size_t block_bytes;    /* bytes per block                              */
    enum dtype vec_dot;    /* type the activations are quantised to (quant_quantize_batch) */
};

/* NULL for a type number kvfold cannot read (including types >= DT_COUNT). */
const struct dtype_traits *dtype_get(uint32_t type);
/* dtype_get for a type a model file names: NULL for kvfold's own. */
const struct dtype_traits *dtype_get_file(uint32_t type);
/* Bytes of a row of n values; 0 when n is not a multiple of the block size
 * or the type is unknown. */
size_t dtype_row_bytes(uint32_t type, int64_t n);

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);


/* n must be a multiple of the type's block size. */
void quant_dequant_row(enum dtype type, const void *src, float *dst, int64_t n);
/* Reference quantiser (round to nearest, per-block scales). Supported for
 * every readable type, including DT_Q8_K; used for activations and fixtures. */
void quant_quantize_row(enum dtype type, const float *src, void *dst, int64_t n);
/* Activations for the dot products against weights of `type`, nx rows of
 * n values quantised as quant_quantize_row quantises them to the type's
 * vec_dot type, laid out in the "batch form": for the 32-value block types
 * (vec_dot Q8_0 / Q8_1) each row is planar, its n codes, then its block
 * scales as floats (each repeated, quant_impl.h), then (Q8_1) its block
 * sums as floats, so that kernels load them as vectors; other types keep
 * rows of their vec_dot type.
 * Rows are quant_batch_row_bytes apart (0: type unknown or n not a multiple
 * of its block). */
size_t quant_batch_row_bytes(enum dtype type, int64_t n);
void quant_quantize_batch(enum dtype type, const float *x, int64_t n, int nx, void *dst);
/* sum_j w_i[j] * x_r[j] for each of nw rows w_i of `type` (w_stride bytes
 * apart) and each of nx rows x_r of a batch form, into
 * out[r * out_stride + i]. Each result is bit for bit what it gets alone
 * (nw = nx = 1): a weight row's blocks are unpacked once for all rows of a
 * batch (batched decoding), and neighbouring weight rows share one pass
 * over a single activation row, without changing anyone's result.
 * Unknown types give zeros. */
void quant_gemm_rows(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, const void *xb, int nx,
                     float *out, size_t out_stride);
/* quant_gemm_rows with the rows kernel of SIMD level `level` (capped by the
 * level in use, so that KVFOLD_SIMD and simd_set still hold), for a
 * weight whose kernel was chosen by measurement (model/kernels.c).
 * quant_rows_level_has: `level` has a SIMD rows kernel of its own for
 * `type` on this CPU (not the one of the level below it). */
void quant_gemm_rows_at(enum simd_level level, enum dtype type, int64_t n, const void *w, size_t w_stride, int nw,
                        const void *xb, int nx, float *out, size_t out_stride);
bool quant_rows_level_has(enum dtype type, enum simd_level level);
/* Whether the calling thread's decoding kernels (rows and interleaved)
 * prefetch the weights ahead of the hardware prefetcher (on until set
 * off): a property of the matrix, chosen with its kernel. The results are
 * the same bits either way. */
void quant_prefetch_set(bool on);

/* Prompt products in integers, for the K types where the CPU has AVX-512
 * VNNI. A tile of up to QUANT_TILE_ROWS weight rows is repacked so that one
 * vector holds four consecutive codes of each of 16 rows (and each row's
 * group scales as floats): a vpdpbusd against four broadcast activation
 * bytes then feeds 16 outputs, and no horizontal sums are left (the rows
 * kernels above sum within a row). The activations are Q8_K's, as in
 * quant_gemm_rows; each group's integer sum then takes its scale and
 * offset in float, where the dot products apply them in integers.
 * quant_gemm_has: whether the level in use has the kernel for `type`.
 * Sizes: 0 when the type has no packed form or n is not a multiple of 256.
 * quant_gemm_pack: nw <= QUANT_TILE_ROWS rows of `type` (w_stride apart).
 * quant_gemm_pack_ilv: the same tile from one tile of the interleaved form
 * (quant_ilv_pack below), which holds 16 rows.
 * quant_gemm_act: nx rows of n floats, quant_gemm_act_bytes(type, n) apart.
 * quant_gemm_tiles: out[r * out_stride + i] for tile row i < nw and activation
 * row r < nx; quant_gemm_tiles_ref is its scalar reference (bit for bit). */
#define QUANT_TILE_ROWS 16
bool quant_gemm_has(enum dtype type);
size_t quant_gemm_tile_bytes(enum dtype type, int64_t n);
size_t quant_gemm_act_bytes(enum dtype type, int64_t n);
void quant_gemm_pack(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, void *tile);
void quant_gemm_pack_ilv(enum dtype type, int64_t n, const void *ilv, void *tile);
void quant_gemm_act(enum dtype type, const float *x, int64_t n, int nx, void *act);
void quant_gemm_tiles(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                      size_t out_stride);
void quant_gemm_tiles_ref(enum dtype type, int64_t n, const void *tile, int nw, const void *act, int nx, float *out,
                          size_t out_stride);

/* Decoding products for the 32-value block types (Q4_0, Q4_1, Q5_0, Q5_1,
 * Q8_0) and the K types (Q4_K, Q5_K, Q6_K) on weights interleaved by 16
 * rows at load. The rows kernels above
 * sum within a row, so every activation row pays again for loading its
 * scales, converting its block sums and reducing the row; at 8 rows (8
 * sessions decoding together) that is most of the time. Interleaved, one
 * vector holds four codes of each of 16 rows: a vpdpbusd against four
 * broadcast activation codes feeds 16 outputs, a block's scales take one
 * multiply for 16 rows, and nothing is reduced across lanes.
 * The form has the bytes of the rows it holds, so tile t (rows 16t ..
 * 16t + 15) starts at t * 16 * row_bytes and a slice of whole tiles is a
 * slice of the matrix (layout: quant_impl.h).
 * quant_ilv_type: `type` has the form. quant_ilv_has: the level in use has
 * a kernel for it (AVX-512 VNNI); elsewhere the scalar reference computes
 * the same bits, slowly, so a model interleaves its weights only where
 * quant_ilv_has.
 * quant_ilv_pack: rows (a multiple of 16) rows of n values (contiguous,
 * dtype_row_bytes apart) into dst.
 * quant_ilv_dequant: rows r0 .. r0 + nr - 1 of an interleaved matrix as
 * floats, nr rows of n at dst, bit for bit quant_dequant_row's.
 * quant_ilv_act: nx rows of n floats (x, n apart) into activation rows
 * quant_ilv_act_bytes(type, n) apart (act): for the K types the Q8_K rows
 * quant_quantize_batch gives; for the others Q8_0's codes and scales (those
 * quant_quantize_batch gives), each block's sum of codes and (for
 * Q4_1/Q5_1) Q8_1's fp16 sum. 0 bytes: n is not a whole number of blocks.
 * quant_gemm_ilv: out[r * out_stride + 16 t + i] for row i of tile t < nt
 * (tiles from `tiles` on) and activation row r < nx; every result is one
 * chain of fmas over the blocks b in order, whatever nx is: batched and
 * single decoding give the same bits, and so do the kernel and
 * quant_gemm_ilv_ref. 32-value blocks: acc = fma(float(t_b), dw_b * dx_b,
 * acc) (t_b the block's integer sum of code x code, less the format's
 * offset times the activation codes' sum), plus fma(m_b, s_b, acc) for
 * Q4_1/Q5_1 (s_b Q8_1's fp16 sum). K types, as ggml sums a super-block:
 * acc = fma(float(sumi), d dx, acc) with sumi the integer sum over
 * sub-blocks of scale x (code x code sum, Q6_K's less 32 x the activation
 * sum), then for Q4_K/Q5_K acc = fma(-float(summ), dmin dx, acc) with
 * summ the sum of min x activation sum. */
#define QUANT_ILV_ROWS 16
bool quant_ilv_type(enum dtype type);
bool quant_ilv_has(enum dtype type);
void quant_ilv_pack(enum dtype type, int64_t n, const void *w, int64_t rows, void *dst);
void quant_ilv_dequant(enum dtype type, int64_t n, const void *ilv, int64_t r0, int nr, float *dst);
size_t quant_ilv_act_bytes(enum dtype type, int64_t n);
void quant_ilv_act(enum dtype type, const float *x, int64_t n, int nx, void *act);
void quant_gemm_ilv(enum dtype type, int64_t n, const void *tiles, int nt, const void *act, int nx, float *out,
                    size_t out_stride);
void quant_gemm_ilv_ref(enum dtype type, int64_t n, const void *tiles, int nt, const void *act, int nx, float *out,
                        size_t out_stride);

/* The scalar references behind the dispatchers, for tests. */
void quant_dequant_row_ref(enum dtype type, const void *src, float *dst, int64_t n);
void quant_gemm_rows_ref(enum dtype type, int64_t n, const void *w, size_t w_stride, int nw, const void *xb,
                         int nx, float *out, size_t out_stride);

/* Rows of a KV cache type (DT_F32, DT_F16, DT_Q8_0, DT_Q4_0, DT_Q4_0H)
 * against plain f32, nothing quantised on the f32 side: sum_i w[i] * x[i],
 * and y += a * w. n: a multiple of the type's block size (at most
 * QUANT_ROT_MAX for DT_Q4_0H). Other types: 0 / y unchanged. */
#define QUANT_ROT_MAX 4096
float quant_kv_dot(enum dtype type, int64_t n, const void *w, const float *x);
void quant_kv_axpy(enum dtype type, float *y, float a, const void *w, int64_t n);
/* Decoding attention over n consecutive KV rows of d values each (rows of
 * type's row bytes) for nx query vectors of d values (the query heads
 * sharing a kv head): x[q] = x + q * ldx gives out[q * ldo + j] = scale *
 * quant_kv_dot(row j, x[q]), and y[q] = y + q * ldy gets w[q * ldw + j]
 * row j for every such weight != 0, in j order. The axpy's rows are ldr
 * bytes apart, so that d may be a slice of wider rows (whole blocks of the
 * type: the columns [c0, c0 + d) of rows rb wide are rows + row bytes of
 * c0, ldr = rb), each column's arithmetic the same as in the whole row's.
 * Bit for bit the row-by-row calls (but DT_Q4_0H's axpys, which rotate
 * their sum once, not each row); the SIMD forms read a run of rows once
 * for every query (and keep y in registers across it). */
void quant_kv_scores(enum dtype type, int64_t d, const void *rows, int n, const float *x, size_t ldx, int nx,
                     float scale, float *out, size_t ldo);
void quant_kv_mix(enum dtype type, float *y, size_t ldy, const float *w, size_t ldw, int ny, const void *rows,
                  size_t ldr, int n, int64_t d);
float quant_kv_dot_ref(enum dtype type, int64_t n, const void *w, const float *x);
void quant_kv_axpy_ref(enum dtype type, float *y, float a, const void *w, int64_t n);

#endif
