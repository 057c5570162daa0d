/* Session files against the prefill they spare: a prompt of N tokens (ids
 * cycled from a text's tokens) prefilled once per cache type, each policy
 * applied to a fork of it, and the compressed session saved to a file
 * (kvf_session_save: write, fsync, rename) and loaded back
 * (kvf_session_load: read, checksum, checks, allocation), best of 3 each.
 * Prints the file size, its share of the full cache's file, the save and
 * load times and how many times faster the load is than the prefill.
 *
 * Not part of the build. From the repository root, after `make`:
 *   gcc -std=gnu11 -O2 -Iinclude bench/bench_session.c -Lbuild -lkvfold -Wl,-rpath,$PWD/build -o /tmp/bench_session
 *   /tmp/bench_session MODEL N_TOKENS THREADS TEXT_FILE [SPEC...]
 * (default specs: snapkv:budget=0.2 snapkv:budget=0.05)
 */
#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "bench_session: %s: %s\n", what, kvf_last_error());
    exit(1);
}

/* Best-of-3 save and load of s to path: ms each; the file's bytes. */
static void save_load(const struct kvf_model *m, const struct kvf_session *s, const char *path, int threads,
                      double *save_ms, double *load_ms, size_t *bytes) {
    *save_ms = *load_ms = 1e30;
    for (int r = 0; r < 3; r++) {
        double t0 = now_ms();
        if (kvf_session_save(s, path) != KVF_OK) die("save");
        const double t1 = now_ms();
        struct kvf_session *l = NULL;
        if (kvf_session_load(m, path, threads, &l) != KVF_OK) die("load");
        const double t2 = now_ms();
        kvf_session_free(l);
        *save_ms = t1 - t0 < *save_ms ? t1 - t0 : *save_ms;
        *load_ms = t2 - t1 < *load_ms ? t2 - t1 : *load_ms;
    }
    *bytes = kvf_session_save_size(s);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: bench_session MODEL N_TOKENS THREADS TEXT_FILE [SPEC...]\n");
        return 2;
    }
    const int n = atoi(argv[2]), threads = atoi(argv[3]);
    static const char *const dflt[] = {"snapkv:budget=0.2", "snapkv:budget=0.05"};
    const char *const *specs = argc > 5 ? (const char *const *)argv + 5 : dflt;
    const int n_specs = argc > 5 ? argc - 5 : 2;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.n_threads = threads;
    struct kvf_model *m = NULL;
    if (kvf_model_load(argv[1], &mp, &m) != KVF_OK) die(argv[1]);
    FILE *f = fopen(argv[4], "rb");
    static char text[1 << 20];
    const size_t tn = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[tn] = '\0';
    int32_t *ids = malloc(sizeof *ids * (size_t)(n + (1 << 16))), *prompt = malloc(sizeof *prompt * (size_t)n);
    int32_t n_ids = 0;
    if (!ids || !prompt || kvf_tokenize(m, text, tn, ids, n + (1 << 16), true, false, &n_ids) != KVF_OK || n_ids <= 0)
        die("tokenize");
    for (int i = 0; i < n; i++) prompt[i] = ids[i % n_ids];
    char path[256];
    snprintf(path, sizeof path, "/tmp/bench_session.%d.kvfs", (int)getpid());
    printf("| cache | kv | KV MiB | file MiB | of full | save ms | load ms | prefill s | load vs prefill |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    const enum kvf_kv_type types[] = {KVF_KV_F32, KVF_KV_F16};
    for (int t = 0; t < 2; t++) {
        struct kvf_session_params sp = kvf_session_default_params();
        sp.n_ctx = n + 16, sp.n_threads = threads, sp.type_k = sp.type_v = types[t], sp.kv_gather = 64;
        struct kvf_session *src = NULL;
        if (kvf_session_init(m, &sp, &src) != KVF_OK) die("session");
        const double t0 = now_ms();
        if (kvf_session_prefill(src, prompt, n, NULL) != KVF_OK) die("prefill");
        const double prefill_ms = now_ms() - t0;
        size_t full_bytes = 0;
        for (int k = -1; k < n_specs; k++) {
            const char *spec = k < 0 ? "full" : specs[k];
            struct kvf_session *s = NULL;
            if (kvf_session_fork(src, spec, 0, &s) != KVF_OK || kvf_session_compress(s) != KVF_OK) die(spec);
            double save_ms, load_ms;
            size_t bytes;
            save_load(m, s, path, threads, &save_ms, &load_ms, &bytes);
            if (k < 0) full_bytes = bytes;
            printf("| %s | %s | %.1f | %.1f | %.3f | %.0f | %.0f | %.1f | %.0fx |\n", kvf_kv_type_name(types[t]), spec,
                   kvf_session_kv_bytes(s) / 1048576.0, bytes / 1048576.0, (double)bytes / (double)full_bytes, save_ms,
                   load_ms, prefill_ms / 1e3, prefill_ms / load_ms);
            fflush(stdout);
            kvf_session_free(s);
        }
        kvf_session_free(src);
    }
    remove(path);
    free(ids);
    free(prompt);
    kvf_model_free(m);
    return 0;
}
