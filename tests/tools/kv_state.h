/* What the KV-cache tests compare sessions by, and the prompt they share:
 * header-only, for the test tools kv_fork.c and decode_batch.c. */
#ifndef KVF_TEST_KV_STATE_H
#define KVF_TEST_KV_STATE_H

#include "kvfold.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* What a session holds, for comparison: bytes, kept tags, merges, budgets. */
static inline int same_state(const struct kvf_session *a, const struct kvf_session *b, const struct kvf_model_info *mi,
                      const char *spec, const char *when) {
    if (kvf_session_kv_bytes(a) != kvf_session_kv_bytes(b) || kvf_session_kv_peak_bytes(a) != kvf_session_kv_peak_bytes(b) ||
        kvf_session_kv_peak_entries(a) != kvf_session_kv_peak_entries(b) || kvf_session_n_past(a) != kvf_session_n_past(b)) {
        fprintf(stderr, "%s %s: bytes %zu / %zu, peak %zu / %zu, peak entries %d / %d\n", spec, when,
                kvf_session_kv_bytes(a), kvf_session_kv_bytes(b), kvf_session_kv_peak_bytes(a),
                kvf_session_kv_peak_bytes(b), kvf_session_kv_peak_entries(a), kvf_session_kv_peak_entries(b));
        return 1;
    }
    for (int l = 0; l < mi->n_layer; l++) {
        double ra = 0, ga = 0, rb = 0, gb = 0;
        const bool ha = kvf_session_kv_layer_budget(a, l, &ra, &ga), hb = kvf_session_kv_layer_budget(b, l, &rb, &gb);
        if (ha != hb || ra != rb || (ga != gb && !(ga != ga && gb != gb))) {
            fprintf(stderr, "%s %s: layer %d budget %.17g / %.17g, gini %.17g / %.17g\n", spec, when, l, ra, rb, ga, gb);
            return 1;
        }
        for (int g = 0; g < mi->n_head_kv; g++) {
            int na, nb, ma, mb;
            const struct kvf_tag *ta = kvf_session_kv_tags(a, l, g, &na), *tb = kvf_session_kv_tags(b, l, g, &nb);
            const struct kvf_kv_merge *xa = kvf_session_kv_merges(a, l, g, &ma), *xb = kvf_session_kv_merges(b, l, g, &mb);
            if (na != nb || (na && memcmp(ta, tb, sizeof *ta * (size_t)na)) || ma != mb ||
                (ma && memcmp(xa, xb, sizeof *xa * (size_t)ma))) {
                fprintf(stderr, "%s %s: layer %d head %d holds %d / %d entries, %d / %d merges\n", spec, when, l, g, na, nb,
                        ma, mb);
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

static inline int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* The tiny LLaVA fixture's prompt: two pictures (smooth colour fields)
 * through its vision tower, text around them. media[2] receives them (the
 * caller frees them after the prompt); NULL on failure. */
static inline struct kvf_prompt *two_image_prompt(const struct kvf_model *m, struct kvf_media *media[2]) {
    enum kvf_status st = KVF_OK;
    for (int k = 0; k < 2 && st == KVF_OK; k++) {
        enum { W = 40, H = 30 };
        static uint8_t rgb[W * H * 3];
        for (int i = 0; i < W * H * 3; i++) rgb[i] = (uint8_t)((i * (k + 3) + (i / (W * 3)) * 7 * (k + 1)) & 0xff);
        struct kvf_image *img = NULL;
        st = kvf_image_from_rgb(W, H, rgb, &img);
        if (st == KVF_OK) st = kvf_media_encode_image(m, img, KVF_MOD_IMAGE, 2, &media[k]);
        kvf_image_free(img);
    }
    struct kvf_prompt *pr = NULL;
    if (st == KVF_OK)
        st = kvf_prompt_init(m,
                             "USER: Here are two pictures. <image> The first one shows a field of colours. <image> "
                             "The second one is darker. Which picture is brighter, and why? ASSISTANT:",
                             (const struct kvf_media *const *)media, 2, true, false, &pr);
    return st == KVF_OK ? pr : NULL;
}

/* `tool MODEL MMPROJ`: the fixture (2 threads), its info and the two-image
 * prompt; 0, or 2 after a message. */
static inline int fixture_open(const char *tool, int argc, char **argv, struct kvf_model **m,
                               struct kvf_model_info *mi, struct kvf_media *media[2], struct kvf_prompt **pr) {
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
    media[0] = media[1] = NULL;
    if (!(*pr = two_image_prompt(*m, media))) {
        fprintf(stderr, "%s: prompt: %s\n", tool, kvf_last_error());
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    return 0;
}

#endif
