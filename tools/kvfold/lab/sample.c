/* kvfold eval's synthetic samples: haystacks of plain sentences, images
 * (pseudo-images of words for text models, soft colour blocks through the
 * vision tower for vision models), a needle hidden at a depth, a request
 * to summarise; and what every sample shares. */
#include "eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Plain sentences from a small vocabulary, so a haystack needs no file. */
static const char *const ADJ[] = {"quiet", "old", "green", "narrow", "bright", "cold", "distant", "small", "heavy",
                                  "early", "wooden", "silver", "patient", "busy", "hidden", "gentle"};
static const char *const NOUN[] = {"river", "boat", "hill", "market", "garden", "bridge", "lantern", "village",
                                   "teacher", "orchard", "harbour", "library", "farmer", "window", "road", "forest"};
static const char *const VERB[] = {"passes", "follows", "watches", "crosses", "reaches", "circles", "leaves", "finds"};
static const char *const PREP[] = {"near", "behind", "beyond", "under", "beside", "past"};

static const char *pick(uint64_t *rng, const char *const *w, int n) {
    *rng = *rng * 6364136223846793005ull + 1442695040888963407ull;
    return w[(*rng >> 33) % (uint64_t)n];
}

#define PICK(rng, w) pick(rng, w, (int)(sizeof w / sizeof *w))

bool haystack_text(uint64_t *rng, int words, struct strbuf *b) {
    bool ok = true;
    for (int w = 0; ok && w < words; w += 10) {
        char s[256];
        snprintf(s, sizeof s, "The %s %s %s the %s %s %s the %s. ", PICK(rng, ADJ), PICK(rng, NOUN), PICK(rng, VERB),
                 PICK(rng, ADJ), PICK(rng, NOUN), PICK(rng, PREP), PICK(rng, NOUN));
        ok = strbuf_put(b, s, strlen(s));
    }
    return ok;
}

/* A seeded synthetic picture (soft colour blocks) for vision models. */
static enum kvf_status synthetic_image(uint64_t *rng, struct kvf_image **out) {
    enum { W = 96, H = 72 };
    static uint8_t rgb[W * H * 3];
    static const char *const level[] = {"40", "90", "150", "210"};
    uint8_t base[4][3];
    for (int k = 0; k < 4; k++)
        for (int c = 0; c < 3; c++) base[k][c] = (uint8_t)atoi(PICK(rng, level));
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int c = 0; c < 3; c++)
                rgb[(y * W + x) * 3 + c] = (uint8_t)(base[(y * 2 / H) * 2 + x * 2 / W][c] + (x + y) % 16);
    return kvf_image_from_rgb(W, H, rgb, out);
}

void sample_free(struct sample *s) {
    free(s->text);
    free(s->answer);
    free(s->choices);
    free(s->answer_prefix);
    for (int j = 0; j < s->n_more; j++) free(s->more[j].text), free(s->more[j].prefix), free(s->more[j].answer);
    free(s->more);
    media_set_free(&s->media);
    kvf_image_free(s->first_image);
    memset(s, 0, sizeof *s);
}

/* A segment's image: a pseudo-image of `words` for text models, a synthetic
 * picture through the vision tower for vision models. */
static int segment_image(const struct args *a, const struct kvf_model *m, bool vision, const char *words, uint64_t *rng,
                         struct sample *out) {
    int r, c;
    sscanf(a->eval.grid, "%dx%d", &r, &c); /* checked by eval_samples */
    struct kvf_media *md = NULL;
    enum kvf_status st;
    if (vision) {
        struct kvf_image *img = NULL;
        if ((st = synthetic_image(rng, &img)) == KVF_OK)
            st = kvf_media_encode_image(m, img, KVF_MOD_IMAGE, a->threads, &md);
        if (st == KVF_OK && !out->first_image) out->first_image = img;
        else kvf_image_free(img);
    } else {
        st = kvf_media_pseudo_image(m, words, r, c, a->pseudo_noise, *rng, &md);
    }
    return st != KVF_OK ? fail(st, "eval: image segment") : media_push(&out->media, md);
}

/* Needle in a haystack: n_seg segments alternating text and image, the
 * password sentence in the segment at `depth` of the kind asked for. */
int needle_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, double depth,
                         bool image_needle, uint64_t seed, struct sample *out) {
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 1;
    memset(out, 0, sizeof *out);
    out->segments = n_seg, out->depth = depth, out->needle = image_needle ? "image" : "text";
    rng = rng * 6364136223846793005ull + 1;
    char answer[8];
    snprintf(answer, sizeof answer, "%05u", (unsigned)((rng >> 33) % 100000u));
    if (!(out->answer = strdup(answer))) return fail(KVF_ERR_NOMEM, "eval");
    char needle[96];
    snprintf(needle, sizeof needle, "The secret password is %s. ", out->answer);
    /* segment k holds the needle: text segments are even, image segments odd */
    int k = (int)floor(depth * (n_seg - 1) + 0.5);
    if ((k % 2 == 1) != image_needle) k = k + 1 < n_seg ? k + 1 : k - 1;
    struct strbuf b = { 0 };
    int rc = 0;
    for (int i = 0; !rc && i < n_seg; i++) {
        if (i % 2 == 0) {
            struct strbuf t = { 0 };
            bool ok = haystack_text(&rng, a->eval.seg_words / 2, &t) &&
                (i != k || strbuf_put(&t, needle, strlen(needle))) &&
                haystack_text(&rng, a->eval.seg_words - a->eval.seg_words / 2, &t) && strbuf_put(&b, t.s, t.n) &&
                strbuf_put(&b, "\n", 1);
            free(t.s);
            rc = ok ? 0 : fail(KVF_ERR_NOMEM, "eval");
        } else {
            struct strbuf w = { 0 };
            bool ok = i == k ? strbuf_put(&w, needle, strlen(needle)) : haystack_text(&rng, 40, &w);
            rc = ok ? segment_image(a, m, vision, w.s, &rng, out) : fail(KVF_ERR_NOMEM, "eval");
            free(w.s);
            if (!rc && !strbuf_put(&b, "<image>\n", 8)) rc = fail(KVF_ERR_NOMEM, "eval");
        }
    }
    const char *q = "What is the secret password? Answer with the number only.";
    out->question_at = b.n;
    if (!rc && !strbuf_put(&b, q, strlen(q))) rc = fail(KVF_ERR_NOMEM, "eval");
    out->text = b.s;
    return rc;
}

/* Consistency without --data: a haystack and a request to summarise it. */
int summary_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, uint64_t seed,
                          struct sample *out) {
    uint64_t rng = seed * 0x9e3779b97f4a7c15ull + 7;
    memset(out, 0, sizeof *out);
    out->segments = n_seg, out->depth = NAN;
    struct strbuf b = { 0 };
    int rc = 0;
    for (int i = 0; !rc && i < n_seg; i++) {
        if (i % 2 == 0) {
            rc =
                haystack_text(&rng, a->eval.seg_words, &b) && strbuf_put(&b, "\n", 1) ? 0 : fail(KVF_ERR_NOMEM, "eval");
        } else {
            struct strbuf w = { 0 };
            rc =
                haystack_text(&rng, 40, &w) ? segment_image(a, m, vision, w.s, &rng, out) : fail(KVF_ERR_NOMEM, "eval");
            free(w.s);
            if (!rc && !strbuf_put(&b, "<image>\n", 8)) rc = fail(KVF_ERR_NOMEM, "eval");
        }
    }
    const char *q = "Describe what happens in the passage above in a few sentences.";
    out->question_at = b.n;
    if (!rc && !strbuf_put(&b, q, strlen(q))) rc = fail(KVF_ERR_NOMEM, "eval");
    out->text = b.s;
    return rc;
}

struct args eval_chat_args(const struct args *a, const struct kvf_model *m) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    struct args ca = *a;
    ca.chat = strcmp(info.chat_template_name, "none") != 0 || info.has_vision || a->chat_template;
    return ca;
}
