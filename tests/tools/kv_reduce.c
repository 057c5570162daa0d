/* The reduce stage end to end (LightKV, ToMe, FastV inside the decoder),
 * checked by counting what every layer caches through the inspection API:
 * - on the real SmolLM2 (30 layers) with two 24x24 pseudo-images: each
 *   layer holds every text entry and the number of vision entries of paper
 *   003's formula (Eq. 9: v before the first step, v (1 - rho) after it, ...,
 *   the default steps 12/18/24 of 32 scaled to 11/17/23), summed over the
 *   layers as in Eq. 9; surviving entries keep their true positions and
 *   grid tags; decoding goes on from the true count of tokens seen;
 *   block-wise question=1 keeps another set than question=0;
 * - on the tiny LLaVA fixture with real (synthetic-pixel) images: with
 *   ratio 0 the one-pass prefill gives the full cache's logits (to float
 *   rounding: the batching differs), and a real step changes them;
 * - bad requests fail cleanly: a step at or past the last layer, and logits
 *   of every position once rows were removed.
 *
 * usage: kv_reduce SMOLLM2_GGUF LLAVA_GGUF LLAVA_MMPROJ
 * Exit 0 on success, 1 on a failed check, 77 (skip) without SmolLM2. */
#include "kvfold.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                                                               \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, __VA_ARGS__);                                                                              \
            fputc('\n', stderr);                                                                                       \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

static struct kvf_session *prefill(const struct kvf_model *m, const struct kvf_prompt *pr, const char *spec,
                                   float *all_logits) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + 8;
    sp.kv_spec = spec;
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    if (st == KVF_OK) st = kvf_session_prefill_prompt(s, pr, all_logits);
    if (st == KVF_OK) st = kvf_session_compress(s);
    if (st != KVF_OK) {
        fprintf(stderr, "%s: %s: %s\n", spec, kvf_status_str(st), kvf_last_error());
        failures++;
        kvf_session_free(s);
        return NULL;
    }
    return s;
}

/* Vision entries per layer (kv head 0; every head holds the same rows),
 * after checking each layer's entries against the prompt's tags. */
static void vision_per_layer(const struct kvf_session *s, const struct kvf_model_info *mi, int n_text, int *vis,
                             const char *spec) {
    const struct kvf_tag *all = kvf_session_tags(s);
    for (int l = 0; l < mi->n_layer; l++) {
        for (int g = 0; g < mi->n_head_kv; g++) {
            int n, text = 0, v = 0, bad = 0;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, g, &n);
            for (int j = 0; j < n; j++) {
                bad |= j > 0 && t[j].pos <= t[j - 1].pos;
                bad |= memcmp(&t[j], &all[t[j].pos], sizeof *t) != 0;
                if (t[j].modality == KVF_MOD_TEXT) text++;
                else v++;
            }
            CHECK(!bad, "%s: layer %d head %d: entries out of order or tags changed", spec, l, g);
            CHECK(text == n_text, "%s: layer %d head %d: %d text entries, want %d", spec, l, g, text, n_text);
            if (g == 0) vis[l] = v;
            else CHECK(v == vis[l], "%s: layer %d: heads hold %d and %d vision entries", spec, l, vis[l], v);
        }
    }
}

/* Eq. 9 of the LightKV paper (docs/METHODS.md §5.6.3): vision tokens processed over all layers. */
static double eq9(int v, const int *lambda, int s, double rho, int L) {
    double sum = lambda[0], keep = 1.0;
    for (int i = 1; i < s; i++) keep *= 1.0 - rho, sum += (lambda[i] - lambda[i - 1]) * keep;
    return v * (sum + (L - lambda[s - 1]) * keep * (1.0 - rho));
}

/* One spec on the real model: per-layer vision counts follow `after`:
 * counts[k] vision entries from layer steps[k-1] on (counts[0] before). */
static void check_counts(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                         int n_text, const char *spec, const int *steps, int n_steps, const int *counts) {
    struct kvf_session *s = prefill(m, pr, spec, NULL);
    if (!s) return;
    int vis[256], bad = failures;
    vision_per_layer(s, mi, n_text, vis, spec);
    long total = 0;
    for (int l = 0, k = 0; l < mi->n_layer; l++) {
        while (k < n_steps && l >= steps[k]) k++;
        CHECK(vis[l] == counts[k], "%s: layer %d caches %d vision entries, want %d", spec, l, vis[l], counts[k]);
        total += vis[l];
    }
    /* Decoding continues at the true count of tokens seen, in every layer. */
    const int np = kvf_prompt_n_tokens(pr);
    for (int t = 0; t < 3; t++) {
        const float *lg = kvf_session_logits(s);
        int32_t tok = 0;
        for (int v = 1; v < mi->n_vocab; v++) tok = lg[v] > lg[tok] ? v : tok;
        CHECK(kvf_session_decode(s, tok) == KVF_OK, "%s: decode: %s", spec, kvf_last_error());
    }
    for (int l = 0; l < mi->n_layer; l++) {
        int n;
        const struct kvf_tag *t = kvf_session_kv_tags(s, l, 0, &n);
        CHECK(n == n_text + vis[l] + 3 && t[n - 1].pos == np + 2, "%s: layer %d after decoding: %d entries, last at %d",
              spec, l, n, n > 0 ? t[n - 1].pos : -1);
    }
    printf("%-44s %s  vision entries per layer %d .. %d, %ld over all layers\n", spec, failures > bad ? "FAIL" : "ok  ",
           vis[0], vis[mi->n_layer - 1], total);
    kvf_session_free(s);
}

static int real_model(const char *path) {
    struct kvf_model *m = NULL;
    if (kvf_model_load(path, NULL, &m) != KVF_OK) {
        fprintf(stderr, "kv_reduce: %s: %s\n", path, kvf_last_error());
        return 1;
    }
    struct kvf_model_info mi;
    kvf_model_get_info(m, &mi);
    struct kvf_media *img[2] = {NULL, NULL};
    struct kvf_prompt *pr = NULL;
    enum kvf_status st = kvf_media_pseudo_image(m, "a red fox in the snow", 24, 24, 0.1f, 7, &img[0]);
    if (st == KVF_OK) st = kvf_media_pseudo_image(m, "a lighthouse by the sea", 24, 24, 0.1f, 9, &img[1]);
    const struct kvf_media *media[2] = {img[0], img[1]};
    if (st == KVF_OK)
        st = kvf_prompt_init(m, "Two pictures: <image> and <image>. Which of them shows an animal, and which one?",
                             media, 2, true, false, &pr);
    if (st != KVF_OK) {
        fprintf(stderr, "kv_reduce: prompt: %s\n", kvf_last_error());
        return 1;
    }
    const int np = kvf_prompt_n_tokens(pr), n_text = np - 2 * 576, L = mi.n_layer;
    /* The default steps for 32 layers, scaled: round(12 L / 32), ... */
    const int def[3] = { (int)floor(12.0 * L / 32 + 0.5), (int)floor(18.0 * L / 32 + 0.5),
                         (int)floor(24.0 * L / 32 + 0.5) };
    const int halves[4] = {1152, 576, 288, 144};
    check_counts(m, &mi, pr, n_text, "lightkv", def, 3, halves);
    check_counts(m, &mi, pr, n_text, "tome", def, 3, halves);
    /* Eq. 9, for the record and as a check of the formula itself. */
    long sum = 0;
    for (int l = 0, k = 0; l < L; l++) {
        while (k < 3 && l >= def[k]) k++;
        sum += halves[k];
    }
    CHECK(fabs(eq9(1152, def, 3, 0.5, L) - (double)sum) < 1e-6, "Eq. 9 gives %.1f vision tokens, the layers hold %ld",
          eq9(1152, def, 3, 0.5, L), sum);
    printf("Eq. 9 (v=1152, layers %d/%d/%d of %d, rho=0.5): %.0f vision tokens processed, %.1f%% of v x L\n", def[0],
           def[1], def[2], L, eq9(1152, def, 3, 0.5, L), 100.0 * eq9(1152, def, 3, 0.5, L) / (1152.0 * L));
    /* Windows of 144 then all 432 left of each image, a quarter merged. */
    const int steps2[2] = {4, 8}, quarter[3] = {1152, 2 * 108 * 4, 2 * (432 - 108)};
    check_counts(m, &mi, pr, n_text, "lightkv:layers=4,8,windows=2,1,ratio=0.25", steps2, 2, quarter);
    /* FastV ranks every image token together: half of 1152 go after layer 2. */
    const int k2[1] = {2}, fastv[2] = {1152, 576};
    check_counts(m, &mi, pr, n_text, "fastv", k2, 1, fastv);
    const int k5[1] = {5}, fastv_r[2] = {1152, 1152 - 864};
    check_counts(m, &mi, pr, n_text, "fastv:k=5,r=0.75", k5, 1, fastv_r);
    /* Composed with a post-prefill method: every layer within its budget. */
    struct kvf_session *s = prefill(m, pr, "snapkv:budget=0.2+reduce=lightkv", NULL);
    for (int l = 0; s && l < L; l++) {
        int n;
        kvf_session_kv_tags(s, l, 0, &n);
        CHECK(n <= (int)floor(0.2 * np + 0.5), "snapkv+reduce=lightkv: layer %d holds %d entries", l, n);
    }
    kvf_session_free(s);

    /* Block-wise question=1 scores blocks with the question's queries: it
     * must keep another set than the window of the last tokens seen. */
    struct kvf_session *a = prefill(m, pr, "blockwise:budget=256,block=64", NULL);
    struct kvf_session *b = prefill(m, pr, "blockwise:budget=256,block=64,question=1", NULL);
    int differ = 0;
    for (int l = 0; a && b && l < L; l++) {
        int na, nb;
        const struct kvf_tag *ta = kvf_session_kv_tags(a, l, 0, &na), *tb = kvf_session_kv_tags(b, l, 0, &nb);
        differ += na != nb || memcmp(ta, tb, sizeof *ta * (size_t)na) != 0;
    }
    CHECK(differ > 0, "blockwise question=1 keeps the same entries as question=0 in every layer");
    printf("%-44s %s  kept sets differ from question=0 in %d of %d layers\n",
           "blockwise:budget=256,block=64,question=1", differ ? "ok  " : "FAIL", differ, L);
    kvf_session_free(a);
    kvf_session_free(b);

    /* Bad requests. */
    struct kvf_session_params sp = kvf_session_default_params();
    char spec[64];
    snprintf(spec, sizeof spec, "lightkv:layers=%d,windows=2", L);
    sp.kv_spec = spec;
    s = NULL;
    CHECK(kvf_session_init(m, &sp, &s) == KVF_ERR_INVALID_ARG && !s && strstr(kvf_last_error(), "layer"),
          "%s on %d layers: accepted or unclear (%s)", spec, L, kvf_last_error());
    sp.kv_spec = "fastv";
    sp.n_ctx = np;
    float *all = malloc(sizeof(float) * (size_t)np * mi.n_vocab);
    CHECK(all && kvf_session_init(m, &sp, &s) == KVF_OK &&
              kvf_session_prefill_prompt(s, pr, all) == KVF_ERR_UNSUPPORTED,
          "fastv: logits of every position after rows were removed: not refused");
    free(all);
    kvf_session_free(s);
    kvf_prompt_free(pr);
    kvf_media_free(img[0]);
    kvf_media_free(img[1]);
    kvf_model_free(m);
    return 0;
}

/* The tiny LLaVA: two 8x8-token images of synthetic pixels. */
static int llava(const char *gguf, const char *mmproj) {
    struct kvf_model_params mp = kvf_model_default_params();
    mp.mmproj = mmproj;
    struct kvf_model *m = NULL;
    if (kvf_model_load(gguf, &mp, &m) != KVF_OK) {
        fprintf(stderr, "kv_reduce: %s: %s\n", gguf, kvf_last_error());
        return 1;
    }
    struct kvf_model_info mi;
    kvf_model_get_info(m, &mi);
    uint8_t rgb[40 * 30 * 3];
    struct kvf_image *im[2] = {NULL, NULL};
    struct kvf_media *md[2] = {NULL, NULL};
    enum kvf_status st = KVF_OK;
    for (int k = 0; k < 2 && st == KVF_OK; k++) {
        for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)((i * (7 + 5 * k) + i / 97 * 13) & 255);
        st = kvf_image_from_rgb(40, 30, rgb, &im[k]);
        if (st == KVF_OK) st = kvf_media_encode_image(m, im[k], KVF_MOD_IMAGE, 0, &md[k]);
    }
    const struct kvf_media *media[2] = {md[0], md[1]};
    struct kvf_prompt *pr = NULL;
    if (st == KVF_OK)
        st = kvf_prompt_init(m, "USER: <image>\n<image>\nWhat changed? ASSISTANT:", media, 2, true, false, &pr);
    if (st != KVF_OK) {
        fprintf(stderr, "kv_reduce: llava prompt: %s\n", kvf_last_error());
        return 1;
    }
    const int np = kvf_prompt_n_tokens(pr), V = mi.n_vocab, n_text = np - 128;
    float *want = malloc(sizeof(float) * V), *got = malloc(sizeof(float) * V);
    struct kvf_session *s = prefill(m, pr, NULL, NULL);
    if (s) memcpy(want, kvf_session_logits(s), sizeof(float) * V);
    kvf_session_free(s);
    static const char *const same[] = {"lightkv:layers=1,windows=2,ratio=0", "tome:layers=1,ratio=0", "fastv:k=1,r=0"};
    for (size_t c = 0; c < sizeof same / sizeof *same; c++) {
        if (!(s = prefill(m, pr, same[c], NULL))) continue;
        double err = 0, scale = 0;
        for (int v = 0; v < V; v++)
            err = fmax(err, fabs(kvf_session_logits(s)[v] - want[v])), scale = fmax(scale, fabs(want[v]));
        CHECK(err <= 1e-5 * scale, "%s: logits differ from the full cache's by %.3g (scale %.3g)", same[c], err, scale);
        printf("%-44s %s  logits within %.2g of the full cache's\n", same[c], err <= 1e-5 * scale ? "ok  " : "FAIL",
               err / scale);
        kvf_session_free(s);
    }
    /* One step after layer 1 of 2: 64 -> 32 per image (w=2: windows of 16). */
    const int step[1] = {1}, half[2] = {128, 64};
    static const char *const real[] = {"lightkv:layers=1,windows=2", "tome:layers=1", "fastv:k=1"};
    for (size_t c = 0; c < sizeof real / sizeof *real; c++) {
        check_counts(m, &mi, pr, n_text, real[c], step, 1, half);
        if (!(s = prefill(m, pr, real[c], NULL))) continue;
        double err = 0;
        for (int v = 0; v < V; v++) err = fmax(err, fabs(kvf_session_logits(s)[v] - want[v]));
        CHECK(err > 1e-6, "%s: logits equal the full cache's: nothing was reduced", real[c]);
        kvf_session_free(s);
    }
    /* The stage with fewer than 8 w^2 tokens per image is skipped: 64 < 128. */
    const int none[1] = {128};
    check_counts(m, &mi, pr, n_text, "lightkv:layers=1,windows=4", step, 0, none);
    free(want);
    free(got);
    kvf_prompt_free(pr);
    for (int k = 0; k < 2; k++) kvf_media_free(md[k]), kvf_image_free(im[k]);
    kvf_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: kv_reduce SMOLLM2_GGUF LLAVA_GGUF LLAVA_MMPROJ\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (llava(argv[2], argv[3])) return 1;
    FILE *f = fopen(argv[1], "rb");
    if (!f) {
        printf("SKIP (real model): %s is absent (scripts/models.sh downloads it)\n", argv[1]);
        return failures ? 1 : 77;
    }
    fclose(f);
    if (real_model(argv[1])) return 1;
    return failures ? 1 : 0;
}
