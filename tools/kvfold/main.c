/* kvfold — the command-line front end of libkvfold.
 *
 *   kvfold COMMAND [options]      (kvfold --help lists the commands)
 *
 * Exit codes: 0 ok, 1 usage error, 2 bad input (files, formats, context),
 * 3 runtime failure. Errors are one line on stderr: "kvfold: error: ...".
 * Each command lives in its own file; this one only picks it. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* OpenMP threads (libgomp) spin up to GOMP_SPINCOUNT iterations at a
 * barrier before they sleep; the default, 300000, is about a millisecond.
 * With another busy process on one of two cores, every barrier then waits
 * out the time slice of the thread that lost its core: decoding at two
 * threads fell from 63 to 3-6 tok/s. 3000 keeps the idle speed and falls to
 * about the one-thread speed instead (docs/PERFORMANCE.md). libgomp reads
 * its environment once, when it is loaded, before main (and the C library
 * resets the environment after an executable's preinit functions), so
 * kvfold sets it and runs itself again, once. A user's OMP_WAIT_POLICY or
 * GOMP_SPINCOUNT wins; where the new run cannot start, libgomp's default. */
static void omp_spin_default(char **argv) {
    if (getenv("OMP_WAIT_POLICY") || getenv("GOMP_SPINCOUNT") || setenv("GOMP_SPINCOUNT", "3000", 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("GOMP_SPINCOUNT"); /* not what this run's libgomp read */
}

static const struct command *const commands[] = {
    &info_command, &tokenize_command, &generate_command, &chat_command, &perplexity_command,
    &bench_command, &profile_command, &eval_command, &policies_command, &serve_command,
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
    omp_spin_default(argv);
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
