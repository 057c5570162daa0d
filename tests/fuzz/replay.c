/* Runs a fuzz harness without libFuzzer: every file named, and every file
 * of every folder named (in name order, dot files skipped), is passed once
 * to LLVMFuzzerTestOneInput. The ctest fuzz_<kind> runs it over the seed
 * corpus and the regression inputs, so that the sanitizer builds replay
 * them. An input after which the process has held more than
 * FUZZ_RSS_LIMIT_MB is a failure, as it is to libFuzzer. Exits 77
 * (skipped) when there was no input at all. */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    uint8_t *data = NULL;
    long n = -1;
    if (f && !fseek(f, 0, SEEK_END) && (n = ftell(f)) >= 0 && !fseek(f, 0, SEEK_SET))
        data = malloc((size_t)n + 1); /* + 1: a valid pointer for an empty file */
    const bool ok = data && fread(data, 1, (size_t)n, f) == (size_t)n;
    if (f) fclose(f);
    if (ok) LLVMFuzzerTestOneInput(data, (size_t)n);
    else fprintf(stderr, "replay: cannot read '%s'\n", path);
    free(data);
    struct rusage ru;
    if (ok && !getrusage(RUSAGE_SELF, &ru) && ru.ru_maxrss > (long)FUZZ_RSS_LIMIT_MB << 10) { /* kB */
        fprintf(stderr, "replay: '%s' took the process to %ld MB, over the %d MB libFuzzer allows\n", path,
                ru.ru_maxrss >> 10, FUZZ_RSS_LIMIT_MB);
        return -1;
    }
    return ok ? 1 : -1;
}

/* The number of inputs run from path, or -1 after an unreadable one. */
static int run_path(const char *path) {
    struct stat st;
    if (stat(path, &st)) {
        fprintf(stderr, "replay: no file or folder '%s'\n", path);
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) return run_file(path);
    struct dirent **names;
    const int n = scandir(path, &names, NULL, alphasort);
    if (n < 0) {
        fprintf(stderr, "replay: cannot list '%s'\n", path);
        return -1;
    }
    int done = 0;
    for (int i = 0; i < n; i++) {
        char sub[FUZZ_PATH_MAX];
        snprintf(sub, sizeof sub, "%s/%s", path, names[i]->d_name);
        if (names[i]->d_name[0] != '.' && done >= 0 && !stat(sub, &st) && S_ISREG(st.st_mode)) {
            const int r = run_file(sub);
            done = r < 0 ? -1 : done + r;
        }
        free(names[i]);
    }
    free(names);
    return done;
}

int main(int argc, char **argv) {
    int total = 0;
    for (int i = 1; i < argc; i++) {
        const int n = run_path(argv[i]);
        if (n < 0) return 1;
        printf("%s: %d inputs\n", argv[i], n);
        total += n;
    }
    return total ? 0 : 77;
}
