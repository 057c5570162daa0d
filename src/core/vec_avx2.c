/* AVX2 + FMA forms of the float-vector kernels (core/vec.h): vec_simd.h
 * under simd_avx2.h's mapping. Only called when cpuid reports the ISA. */

#include "simd_avx2.h"
#include "vec.h"

#include <stdbool.h>

/* A tile: 4 query rows of one panel's two vectors; 2 rows of mix output. */
#define SCORES_R 4
#define SCORES_C 1
#define MIX_R 2

#include "vec_simd.h"

void vec_kernels_avx2(struct quant_kernels *k) { vec_kernels_set(k); }
