/* The CPU: its features (cpuid, where the OS saves the registers they
 * use), its identity, and the SIMD level its features allow. */
#include "core/cpu.h"

#include "common.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <stdio.h>
#include <string.h>

/* cpuid, and XGETBV for the register state the OS saves (a CPU with AVX
 * under an OS that does not save the YMM/ZMM registers cannot use them):
 * the same rule as GCC's __builtin_cpu_supports, which clang lacks "f16c" for. */
struct cpu_features cpu_features(void) {
    struct cpu_features f = {0};
#if defined(__x86_64__) || defined(__i386__)
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7 || !__get_cpuid(1, &a, &b, &c, &d))
        return f;
    if (!(c & bit_OSXSAVE))
        return f;
    unsigned xcr0_lo, xcr0_hi;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    (void)xcr0_hi;
    const bool ymm = (xcr0_lo & 0x06) == 0x06;  /* XMM, YMM */
    const bool zmm = (xcr0_lo & 0xe6) == 0xe6;  /* and opmask, ZMM 0-15 and 16-31 */
    if (!ymm || !(c & bit_AVX))
        return f;
    f.fma = (c & bit_FMA) != 0;
    f.f16c = (c & bit_F16C) != 0;
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b & bit_AVX2) != 0;
    if (zmm) {
        f.avx512f = (b & bit_AVX512F) != 0;
        f.avx512bw = (b & bit_AVX512BW) != 0;
        f.avx512vl = (b & bit_AVX512VL) != 0;
        f.avx512dq = (b & bit_AVX512DQ) != 0;
        f.avx512vnni = (c & bit_AVX512VNNI) != 0;
    }
#endif
    return f;
}

void cpu_identity(char *buf, size_t n) {
    snprintf(buf, n, "unknown");
#if defined(__x86_64__) || defined(__i386__)
    unsigned r[12] = {0}, a, b, c, d;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return;
    char vendor[13];
    memcpy(vendor, &b, 4), memcpy(vendor + 4, &d, 4), memcpy(vendor + 8, &c, 4);
    vendor[12] = '\0';
    __get_cpuid(1, &a, &b, &c, &d);
    const unsigned base = (a >> 8) & 0xf, family = base == 0xf ? base + ((a >> 20) & 0xff) : base;
    const unsigned model = base == 0x6 || base == 0xf ? ((a >> 4) & 0xf) | ((a >> 12) & 0xf0) : (a >> 4) & 0xf;
    char brand[49] = "";
    if (__get_cpuid_max(0x80000000, NULL) >= 0x80000004) {
        for (unsigned i = 0; i < 3; i++)
            __get_cpuid(0x80000002 + i, &r[4 * i], &r[4 * i + 1], &r[4 * i + 2], &r[4 * i + 3]);
        memcpy(brand, r, 48);
        brand[48] = '\0';
    }
    /* The brand string pads with spaces; only printable ASCII is kept. */
    char *o = brand;
    for (const char *p = brand; *p; p++)
        if (*p > ' ' && *p < 127) *o++ = *p;
        else if (*p == ' ' && o > brand && o[-1] != ' ') *o++ = ' ';
    if (o > brand && o[-1] == ' ') o--;
    *o = '\0';
    snprintf(buf, n, "%s %u/%u/%u %s", vendor, family, model, a & 0xf, brand);
#endif
}

enum simd_level cpu_simd_level(void) {
    const struct cpu_features f = cpu_features();
    if (f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.fma && f.f16c)
        return SIMD_AVX512;
    if (f.avx2 && f.fma && f.f16c)
        return SIMD_AVX2;
    return SIMD_SCALAR;
}

const char *simd_name(enum simd_level level) {
    switch (level) {
    case SIMD_SCALAR: return "scalar";
    case SIMD_AVX2: return "avx2";
    case SIMD_AVX512: return "avx512";
    }
    return "unknown";
}
