/* The CPU's SIMD features and the level the kernels run at (cpu.c; the
 * level in use is quant.c's dispatch). */
#ifndef KVF_CORE_CPU_H
#define KVF_CORE_CPU_H

#include <stdbool.h>
#include <stddef.h>

enum simd_level { SIMD_SCALAR = 0, SIMD_AVX2 = 1, SIMD_AVX512 = 2 };
/* The CPU features the SIMD levels need, as cpuid reports them and only
 * where the OS saves the registers they use (all false off x86). */
struct cpu_features {
    bool avx2, fma, f16c, avx512f, avx512bw, avx512vl, avx512dq, avx512vnni;
};
struct cpu_features cpu_features(void);
/* The best level the features allow. */
enum simd_level cpu_simd_level(void);
/* "AuthenticAMD 25/1/1 AMD EPYC ...": vendor, family/model/stepping and
 * brand string as cpuid gives them ("unknown" off x86), for keying what
 * was measured on this CPU. */
void cpu_identity(char *buf, size_t n);
/* quant.c's dispatch: the best level this CPU supports, capped by
 * KVFOLD_SIMD=scalar|avx2. */
enum simd_level simd_detect(void);
/* Level used by the dispatching kernels (quant.h); tests force each level. */
enum simd_level simd_get(void);
void simd_set(enum simd_level level); /* clamps to what the CPU supports */
const char *simd_name(enum simd_level level);

#endif
