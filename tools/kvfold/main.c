/* kvfold — the command-line front end of libkvfold.
 *
 *   kvfold COMMAND [options]      (kvfold --help lists the commands)
 *
 * Exit codes: 0 ok, 1 usage error, 2 bad input (files, formats, context),
 * 3 runtime failure. Errors are one line on stderr: "kvfold: error: ...".
 * Each command lives in its own file; this one only picks it. */
#include "cli.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* OpenMP threads (libgomp) spin up to GOMP_SPINCOUNT iterations at a
 * barrier before they sleep; the default, 300000, is about a millisecond.
 * With another busy process on one of two cores, every barrier then waits
 * out the time slice of the thread that lost its core: decoding at two
 * threads fell from 63 to 3-6 tok/s. 3000 keeps the idle speed and falls to
 * about the one-thread speed instead (docs/PERFORMANCE.md). A user's
 * OMP_WAIT_POLICY or GOMP_SPINCOUNT wins. */
static bool omp_spin_default(void) {
    return !getenv("OMP_WAIT_POLICY") && !getenv("GOMP_SPINCOUNT") && setenv("GOMP_SPINCOUNT", "3000", 1) == 0;
}

/* OpenBLAS picks its kernels from the CPU model, and a release older than
 * the CPU falls back to older ones ("Prescott", SSE3: Debian 12's 0.3.21 on a
 * Xeon of model 207), which made prompts on the sgemm path four times
 * slower (SmolLM2 pp512 at two threads 234 -> 881 tok/s). On such a
 * fallback, where the CPU has AVX2 and FMA, kvfold names the kernels the
 * CPU can run (SkylakeX's where it has AVX-512: 0.3.21 takes no newer name;
 * the same speed as its Cooperlake ones here). A user's OPENBLAS_CORETYPE
 * wins. */
static bool blas_core_default(void) {
    static const char *const fallbacks[] = {"prescott", "core2", "penryn", "dunnington", "nehalem", "sandybridge"};
    const char *core = openblas_get_corename();
    bool fallback = false;
    for (size_t i = 0; core && i < COUNT_OF(fallbacks); i++) fallback |= strcasecmp(core, fallbacks[i]) == 0;
#if defined(__x86_64__) || defined(__i386__)
    if (getenv("OPENBLAS_CORETYPE") || !fallback || !__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
        return false;
    const bool skx = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                     __builtin_cpu_supports("avx512cd");
    return setenv("OPENBLAS_CORETYPE", skx ? "SkylakeX" : "Haswell", 1) == 0;
#else
    (void)fallback;
    return false;
#endif
}

/* libgomp and OpenBLAS read their environment once, when they are loaded,
 * before main (and the C library resets the environment after an
 * executable's preinit functions), so kvfold sets what it wants and runs
 * itself again, once; where the new run cannot start, this run goes on
 * with the libraries' defaults. */
static void env_defaults(char **argv) {
    const bool spin = omp_spin_default(), blas = blas_core_default();
    if (!spin && !blas)
        return;
    execv("/proc/self/exe", argv);
    if (spin) unsetenv("GOMP_SPINCOUNT"); /* not what this run's libraries read */
    if (blas) unsetenv("OPENBLAS_CORETYPE");
}

static const struct command *const commands[] = {
    &info_command, &tokenize_command, &generate_command, &chat_command, &perplexity_command,
    &bench_command, &profile_command, &calibrate_command, &eval_command, &policies_command, &serve_command,
};

static void print_usage(FILE *f) {
    fprintf(f, "kvfold %s — language-model inference with a compressed KV cache\n\n"
               "usage: kvfold COMMAND [options]   (kvfold COMMAND --help for details)\n\ncommands:\n",
            KVF_VERSION_STRING);
    for (size_t i = 0; i < COUNT_OF(commands); i++)
        fprintf(f, "  %-12s %s\n", commands[i]->name, commands[i]->summary);
    fputs("\nexit status: 0 ok, 1 usage error, 2 bad input (file, format, context), 3 runtime failure\n", f);
}

/* "info, tokenize, ..." */
static void command_names(char *out, size_t cap) {
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < COUNT_OF(commands) && o < cap; i++)
        o += (size_t)snprintf(out + o, cap - o, "%s%s", i ? ", " : "", commands[i]->name);
}

int main(int argc, char **argv) {
    env_defaults(argv);
    json_hooks_init();
    if (argc < 2) {
        print_error("no command given (see kvfold --help)");
        return EXIT_USAGE;
    }
    if (strcmp(argv[1], "--version") == 0) {
        printf("%s\n", kvf_build_info());
        return 0;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    for (size_t i = 0; i < COUNT_OF(commands); i++)
        if (strcmp(argv[1], commands[i]->name) == 0)
            return command_main(commands[i], argc - 2, argv + 2);
    char names[256];
    command_names(names, sizeof names);
    print_error("unknown command '%s' (commands: %s; see kvfold --help)", argv[1], names);
    return EXIT_USAGE;
}
