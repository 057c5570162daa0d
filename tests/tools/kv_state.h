/* What the KV-cache tests compare sessions by, and the prompt they share:
 * header-only, for the test tools kv_fork.c and decode_batch.c. */
#ifndef KVF_TEST_KV_STATE_H
#define KVF_TEST_KV_STATE_H

#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* What a session holds, for comparison: bytes, kept tags, merges, budgets. */
static inline int same_state(const struct kvf_session *a, const struct kvf_session *b, const struct kvf_model_info *mi,
                      const char *spec, const char *when) {
    if (kvf_session_kv_bytes(a) != kvf_session_kv_bytes(b) ||
        kvf_session_kv_peak_bytes(a) != kvf_session_kv_peak_bytes(b) ||
        kvf_session_kv_peak_entries(a) != kvf_session_kv_peak_entries(b) ||
        kvf_session_n_past(a) != kvf_session_n_past(b)) {
        fprintf(stderr, "%s %s: bytes %zu / %zu, peak %zu / %zu, peak entries %d / %d\n", spec, when,
                kvf_session_kv_bytes(a), kvf_session_kv_bytes(b), kvf_session_kv_peak_bytes(a),
                kvf_session_kv_peak_bytes(b), kvf_session_kv_peak_entries(a), kvf_session_kv_peak_entries(b));
        return 1;
    }
    for (int l = 0; l < mi->n_layer; l++) {
        double ra = 0, ga = 0, rb = 0, gb = 0;
        const bool ha = kvf_session_kv_layer_budget(a, l, &ra, &ga), hb = kvf_session_kv_layer_budget(b, l, &rb, &gb);
        if (ha != hb || ra != rb || (ga != gb && !(ga != ga && gb != gb))) {
            fprintf(stderr, "%s %s: layer %d budget %.17g / %.17g, gini %.17g / %.17g\n", spec, when, l, ra, rb, ga,
                    gb);
            return 1;
        }
        for (int g = 0; g < mi->n_head_kv; g++) {
            int na, nb, ma, mb;
            const struct kvf_tag *ta = kvf_session_kv_tags(a, l, g, &na), *tb = kvf_session_kv_tags(b, l, g, &nb);
            const struct kvf_kv_merge *xa = kvf_session_kv_merges(a, l, g, &ma),
                                      *xb = kvf_session_kv_merges(b, l, g, &mb);
            if (na != nb || (na && memcmp(ta, tb, sizeof *ta * (size_t)na)) || ma != mb ||
                (ma && memcmp(xa, xb, sizeof *xa * (size_t)ma))) {
                fprintf(stderr, "%s %s: layer %d head %d holds %d / %d entries, %d / %d merges\n", spec, when, l, g, na,
                        nb, ma, mb);
                return 1;
            }
        }
    }
    const float *la = kvf_session_logits(a), *lb = kvf_session_logits(b);
    if (!la || !lb || memcmp(la, lb, sizeof(float) * (size_t)mi->n_vocab)) {
        fprintf(stderr, "%s %s: the logits differ\n", spec, when);
        return 1;
    }
    return 0;
}

/* The session parameters of a check: the defaults, the cache stored as
 * the environment's KVF_TEST_CACHE_TYPES says when set ("q4_0", or
 * "q8_0/q4_0" for keys/values), so that ctest runs each check on other
 * types too. A bad value stops the check (exit 2). */
static inline struct kvf_session_params fixture_params(void) {
    struct kvf_session_params sp = kvf_session_default_params();
    const char *t = getenv("KVF_TEST_CACHE_TYPES");
    if (!t || !*t) return sp;
    char k[16] = "", v[16] = "";
    if (sscanf(t, "%15[^/]/%15s", k, v) < 1 || kvf_kv_type_parse(k, &sp.type_k) != KVF_OK ||
        kvf_kv_type_parse(v[0] ? v : k, &sp.type_v) != KVF_OK) {
        fprintf(stderr, "KVF_TEST_CACHE_TYPES=%s: %s\n", t, kvf_last_error());
        exit(2);
    }
    return sp;
}

/* A session of parameters sp with the fixture's prompt in (NULL after a
 * message naming tool and the spec). */
static inline struct kvf_session *fixture_prefilled(const char *tool, const struct kvf_model *m,
                                                    const struct kvf_prompt *pr, const struct kvf_session_params *sp) {
    struct kvf_session *s = NULL;
    if (kvf_session_init(m, sp, &s) != KVF_OK || kvf_session_prefill_prompt(s, pr, NULL) != KVF_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, sp->kv_spec ? sp->kv_spec : "full", kvf_last_error());
        kvf_session_free(s);
        return NULL;
    }
    return s;
}

static inline int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Two images and a video of up to 3 items. */
#define FIXTURE_MEDIA 5

/* A W x H picture: a smooth colour field, varied by k. */
static inline struct kvf_image *fixture_picture(int k) {
    enum { W = 40, H = 30 };
    static uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)((i * (k + 3) + (i / (W * 3)) * 7 * (k + 1)) & 0xff);
    struct kvf_image *img = NULL;
    return kvf_image_from_rgb(W, H, rgb, &img) == KVF_OK ? img : NULL;
}

/* The fixtures' prompt: two pictures through the model's vision tower (a
 * text model's: two pseudo-images), text around them, and, where the model reads videos, a clip of
 * three more after them (LLaVA: 3 items; Qwen2-VL / Qwen2.5-VL: 2 temporal
 * patches with M-RoPE time positions). media[FIXTURE_MEDIA] receives them,
 * NULL past the last (the caller frees them after the prompt); NULL on
 * failure. */
static inline struct kvf_prompt *fixture_prompt(const struct kvf_model *m, struct kvf_media *media[FIXTURE_MEDIA]) {
    struct kvf_model_info mi;
    kvf_model_get_info(m, &mi);
    const bool video = mi.video_frames_per_item > 0;
    struct kvf_image *img[5] = {0};
    enum kvf_status st = KVF_OK;
    for (int k = 0; k < (video ? 5 : 2) && st == KVF_OK; k++)
        if (!(img[k] = fixture_picture(k))) st = KVF_ERR_NOMEM;
    /* A text model's pictures are pseudo-images: image-tagged rows made
     * from words, which the policies treat as any image's. */
    static const char *const words[2] = {"a field of bright colours", "a dark evening over the hills"};
    for (int k = 0; k < 2 && st == KVF_OK; k++)
        st = mi.has_vision ? kvf_media_encode_image(m, img[k], KVF_MOD_IMAGE, 2, &media[k])
                           : kvf_media_pseudo_image(m, words[k], 3, 4, 0.1f, (uint64_t)k + 7, &media[k]);
    int n = 2, made = 0;
    if (st == KVF_OK && video)
        st = kvf_media_encode_video(m, (const struct kvf_image *const *)img + 2, 3, 0, 1.0, 2, media + 2, &made);
    n += made;
    for (int k = 0; k < 5; k++) kvf_image_free(img[k]);
    struct kvf_prompt *pr = NULL;
    if (st == KVF_OK)
        st = kvf_prompt_init(m,
                             video ? "USER: Here are two pictures. <image> The first one shows a field of colours. "
                                     "<image> The second one is darker. <video> Then a clip. Which picture is "
                                     "brighter, and why? ASSISTANT:"
                                   : "USER: Here are two pictures. <image> The first one shows a field of colours. "
                                     "<image> The second one is darker. Which picture is brighter, and why? ASSISTANT:",
                             (const struct kvf_media *const *)media, n, true, false, &pr);
    return st == KVF_OK ? pr : NULL;
}

/* A KVzap scorer fitted for m (kvf_kvzap_calibrate) on spans of a fixed
 * text, in a new temporary file path[] (the caller unlinks it), and the
 * spec that reads it at budget 0.3 into spec[cap]: 0, or 1 after a
 * message. */
static inline int fixture_kvzap(const struct kvf_model *m, char path[32], char *spec, size_t cap) {
    static const char text[] =
        "The river runs past the mill and under the old stone bridge, where the children of the village throw "
        "bread to the ducks every morning before school. In the afternoon the miller counts his sacks of flour, "
        "writes the numbers in a ledger, and walks to the market to sell what the bakers have ordered. When the "
        "rain comes in autumn the water rises, the wheel turns faster, and the whole house hums with its work.";
    snprintf(path, 32, "/tmp/kvzap_fixture_XXXXXX");
    const int fd = mkstemp(path);
    if (fd < 0) return fprintf(stderr, "fixture_kvzap: no temporary file\n"), 1;
    close(fd);
    struct kvf_kvzap_params p = kvf_kvzap_default_params();
    p.samples = 3, p.test = 0, p.span = 16, p.per_span = 8, p.seed = 5;
    const char *texts[1] = {text};
    if (kvf_kvzap_calibrate(m, texts, 1, &p, path, NULL) != KVF_OK)
        return fprintf(stderr, "fixture_kvzap: %s\n", kvf_last_error()), 1;
    snprintf(spec, cap, "kvzap:budget=0.3,scorer=%s", path);
    return 0;
}

static inline void fixture_media_free(struct kvf_media *media[FIXTURE_MEDIA]) {
    for (int k = 0; k < FIXTURE_MEDIA; k++) kvf_media_free(media[k]);
}

/* `tool MODEL MMPROJ`: the fixture (2 threads), its info and its prompt
 * (fixture_prompt); 0, or 2 after a message. */
static inline int fixture_open(const char *tool, int argc, char **argv, struct kvf_model **m,
                               struct kvf_model_info *mi, struct kvf_media *media[FIXTURE_MEDIA],
                               struct kvf_prompt **pr) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL MMPROJ\n", tool);
        return 2;
    }
    struct kvf_model_params mp = kvf_model_default_params();
    mp.mmproj = strcmp(argv[2], "-") ? argv[2] : NULL; /* "-": a directory with its own tower */
    mp.n_threads = 2;
    if (kvf_model_load(argv[1], &mp, m) != KVF_OK) {
        fprintf(stderr, "%s: %s: %s\n", tool, argv[1], kvf_last_error());
        return 2;
    }
    kvf_model_get_info(*m, mi);
    memset(media, 0, sizeof *media * FIXTURE_MEDIA);
    if (!(*pr = fixture_prompt(*m, media))) {
        fprintf(stderr, "%s: prompt: %s\n", tool, kvf_last_error());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

#endif
