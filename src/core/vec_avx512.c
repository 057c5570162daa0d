/* AVX-512 (F, BW, VL, DQ) forms of the float-vector kernels (core/vec.h):
 * vec_simd.h under simd_avx512.h's mapping. Only called when cpuid reports
 * the ISA. */

#include "simd_avx512.h"
#include "vec.h"

#include <stdbool.h>

/* A tile: 8 query rows of two panels; 4 rows of mix output. */
#define SCORES_R 8
#define SCORES_C 2
#define MIX_R 4

#include "vec_simd.h"

void vec_kernels_avx512(struct quant_kernels *k) { vec_kernels_set(k); }
