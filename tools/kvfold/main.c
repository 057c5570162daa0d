/* kvfold — the command-line front end of libkvfold.
 *
 *   kvfold COMMAND [options]      (kvfold --help lists the commands)
 *
 * Exit codes: 0 ok, 1 usage error, 2 bad input (files, formats, context),
 * 3 runtime failure. Errors are one line on stderr: "kvfold: error: ...".
 * Each command lives in its own file; this one only picks it. */
#include "cli.h"

#include <string.h>

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
