/* Micro-benchmark of decoding attention (attn_forward with one query, the
 * path of every generated token): the head shapes of the test models at a
 * range of cache lengths, each on 1..T threads, cycling through as many
 * layers as the model has so that, from about 4096 entries on, the rows
 * come from memory as they do in decoding (shorter caches, 9-12 MB in all
 * at 1024 entries, may stay in a large L3). Reports microseconds a layer
 * and the KV bytes read a second (keys and values as stored). "stats"
 * also gathers the statistics H2O-style policies add at every decoding
 * step (sum, squares, count of each entry's weights). Compare two trees by
 * building this file against each one's library.
 *
 * Not part of the build. From the repository root, after `make build`:
 *   gcc -std=gnu11 -O2 -fopenmp -Iinclude -Isrc bench/bench_attn.c build/libkvfold_internal.a \
 *       -lopenblas -lm -o /tmp/bench_attn
 *   /tmp/bench_attn [T [type [stats]]]   (T: threads, default 2; type: f32 f16 q8_0 q4_0, default f32)
 */
#include "attn/attn.h"
#include "kv/cache.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float frand(unsigned *s) {
    *s = *s * 1664525u + 1013904223u;
    return (float)((*s >> 8) & 0xffff) / 32768.0f - 1.0f;
}

struct shape {
    const char *name;
    int n_layer, n_head, n_head_kv, head_dim;
};

static const struct shape shapes[] = {
    {"SmolLM2-135M", 30, 9, 3, 64},
    {"Gemma3-270M global", 18, 4, 1, 256}, /* every layer as a global one */
    {"Qwen2.5-0.5B", 24, 14, 2, 64},
    {"Qwen2.5-1.5B", 28, 12, 2, 128},
};

/* Best of 3 passes over the layers, seconds a layer. */
static double time_layers(const struct shape *s, struct kv_cache *c, int n, const float *q, float *out,
                          float *scratch, int threads, const struct attn_stats *stats) {
    const struct attn_params p = {.n_head = s->n_head, .n_head_kv = s->n_head_kv, .head_dim = s->head_dim,
                                  .scale = 1.0f / sqrtf((float)s->head_dim)};
    const int32_t qpos = n - 1;
    double best = INFINITY;
    for (int pass = 0; pass < 3; pass++) {
        const int reps = n >= 4096 ? 2 : n >= 1024 ? 8 : 32;
        const double t0 = now_s();
        for (int r = 0; r < reps; r++)
            for (int l = 0; l < s->n_layer; l++)
                if (attn_forward(&p, q, &qpos, 1, kv_cache_head(c, l, 0), out, scratch, threads, stats) != KVF_OK)
                    return NAN;
        const double t = (now_s() - t0) / reps / s->n_layer;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv) {
    const int T = argc > 1 ? atoi(argv[1]) : 2;
    const char *tn = argc > 2 ? argv[2] : "f32";
    const bool with_stats = argc > 3 && !strcmp(argv[3], "stats");
    enum kvf_kv_type type;
    if (kvf_kv_type_parse(tn, &type) != KVF_OK) {
        fprintf(stderr, "bench_attn: %s\n", kvf_last_error());
        return 1;
    }
    static const int lens[] = {256, 512, 1024, 4096, 8192}; /* multiples of 256 */
    enum { N_MAX = 8192 };
    if (T < 1 || T > 256) {
        fprintf(stderr, "bench_attn: threads out of range\n");
        return 1;
    }
    printf("| shape | type | entries | threads | us/layer | KV GB/s |\n|---|---|---|---|---|---|\n");
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        const struct shape *s = &shapes[si];
        const int KD = s->n_head_kv * s->head_dim, QD = s->n_head * s->head_dim;
        unsigned seed = 7;
        float *k = malloc(sizeof(float) * KD * 256), *v = malloc(sizeof(float) * KD * 256);
        float *q = malloc(sizeof(float) * QD), *out = malloc(sizeof(float) * QD);
        float *scratch = malloc(attn_scratch_bytes(N_MAX, T));
        /* The decoder's running statistics: [3][n_head_kv][N_MAX], added to. */
        float *acc = calloc((size_t)3 * s->n_head_kv * N_MAX, sizeof(float));
        static const int kinds[3] = {ATTN_STAT_SUM, ATTN_STAT_SQ, ATTN_STAT_COUNT};
        struct attn_stats st = {.stride = N_MAX};
        for (int a = 0; a < 3; a++) st.a[kinds[a]] = acc + (size_t)a * s->n_head_kv * N_MAX;
        struct kvf_tag tags[256];
        for (int i = 0; i < KD * 256; i++) k[i] = frand(&seed), v[i] = frand(&seed);
        for (int i = 0; i < QD; i++) q[i] = 2.0f * frand(&seed);
        struct kv_cache c;
        if (kv_cache_init(&c, s->n_layer, s->n_head_kv, s->head_dim, false) != KVF_OK ||
            kv_cache_set_type(&c, type, type) != KVF_OK)
            return 1;
        int n = 0;
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++) {
            for (; n < lens[li]; n += 256) /* 256 entries at a time, positions n .. n + 255 */
                for (int l = 0; l < s->n_layer; l++) {
                    memset(tags, 0, sizeof tags);
                    for (int j = 0; j < 256; j++) tags[j].pos = n + j;
                    if (kv_cache_reserve(&c, l, 256) != KVF_OK)
                        return 1;
                    kv_cache_append(&c, l, k, v, tags, 256);
                }
            const double bytes = (double)n * s->n_head_kv * (double)(c.k_row + c.v_row);
            for (int t = 1; t <= T; t++) {
                const double sec = time_layers(s, &c, n, q, out, scratch, t, with_stats ? &st : NULL);
                printf("| %s | %s | %d | %d | %.1f | %.1f |\n", s->name, tn, n, t, 1e6 * sec, bytes / sec / 1e9);
            }
        }
        kv_cache_free(&c);
        free(k), free(v), free(q), free(out), free(scratch), free(acc);
    }
    return 0;
}
