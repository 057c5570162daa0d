/* Sliding-window layers free what falls out of their window (Gemma 3's
 * local layers), checked against sessions that keep every entry
 * (kv_swa_full):
 *  - the logits after the prompt (passes of N_BATCH rows) and at every
 *    decode step are the same, bit for bit;
 *  - after every pass and decode step, a windowed (layer, kv head) holds a
 *    run of the latest positions: every position its window still sees,
 *    and at most 64 positions more (freed a few dozen at a time); after
 *    kvf_session_compress exactly the window, and the cache's bytes are
 *    kvf_session_kv_full_bytes, less than the full cache of every layer;
 *  - kvf_session_decode_batch of two such sessions equals decoding alone;
 *  - after N_DECODE steps a session can go back at least 32 positions:
 *    to the oldest position a windowed head holds + window - 1, and not
 *    one further (refused, the session kept as it was); with kv_swa_full
 *    anywhere;
 *  - policies count a windowed layer's budget over its window: knorm, h2o
 *    and keydiff keep round(budget x (window - 1)) entries of it there, and
 *    their share of every position in global layers, and an evicting
 *    decode stage keeps a windowed head within that, in its window; no
 *    merge record (lookm) names an entry the window freed;
 *    prefixkv's online search spends the sum of the layers' even shares.
 *
 * usage: kv_swa MODEL TEXTFILE N_PROMPT N_BATCH
 * Exit 0 when all hold, 1 otherwise, 77 (skip) without the model file. */
#include "kv_state.h"
#include "read_text.h"

#include <math.h>

#define SLACK 64 /* out-of-window entries a windowed head may still hold */
#define N_DECODE 70 /* past the 64 out-of-window entries at which a windowed head frees */

struct ctx {
    const struct kvf_model *m;
    struct kvf_model_info mi;
    const int32_t *ids;
    int n, batch;
};

static struct kvf_session *open_session(const struct ctx *c, const char *spec, bool swa_full) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = c->n + N_DECODE + 2;
    sp.n_batch = c->batch;
    sp.n_threads = 2;
    sp.kv_spec = spec;
    sp.kv_swa_full = swa_full;
    struct kvf_session *s = NULL;
    if (kvf_session_init(c->m, &sp, &s) != KVF_OK) fprintf(stderr, "kv_swa: %s: %s\n", spec, kvf_last_error());
    return s;
}

/* Gemma 3: five windowed layers, then a global one. */
static bool is_local(const struct ctx *c, int l) { return c->mi.sliding_window > 0 && (l + 1) % 6 != 0; }

/* Every head of s: global ones hold every position; windowed ones a run of
 * the latest positions, at least what the window sees (exactly that when
 * exact) and at most SLACK more. */
static int check_heads(const struct ctx *c, const struct kvf_session *s, bool exact, const char *when) {
    const int n_past = kvf_session_n_past(s), W = c->mi.sliding_window;
    const int sees = n_past < W - 1 ? n_past : W - 1;
    for (int l = 0; l < c->mi.n_layer; l++)
        for (int g = 0; g < c->mi.n_head_kv; g++) {
            int n;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, g, &n);
            const int lo = is_local(c, l) ? sees : n_past, hi = is_local(c, l) ? (exact ? sees : sees + SLACK) : n_past;
            bool bad = n < lo || n > hi;
            for (int j = 0; j < n && !bad; j++) bad = t[j].pos != n_past - n + j;
            if (bad) {
                fprintf(stderr,
                        "%s: layer %d head %d holds %d entries (from position %d) after %d positions, not %d-%d "
                        "latest\n",
                        when, l, g, n, n ? t[0].pos : -1, n_past, lo, hi);
                return 1;
            }
        }
    return 0;
}

static int same_logits(const struct ctx *c, const struct kvf_session *a, const struct kvf_session *b,
                       const char *when) {
    const float *la = kvf_session_logits(a), *lb = kvf_session_logits(b);
    if (la && lb && !memcmp(la, lb, sizeof(float) * (size_t)c->mi.n_vocab)) return 0;
    double most = 0;
    for (int i = 0; la && lb && i < c->mi.n_vocab; i++) most = fmax(most, fabs((double)la[i] - lb[i]));
    fprintf(stderr, "%s: the logits differ (largest difference %g)\n", when, most);
    return 1;
}

/* The full cache with and without freeing: logits, heads, bytes, decode
 * (alone and batched), truncation. */
static int check_full(const struct ctx *c) {
    struct kvf_session *a = open_session(c, NULL, false), *b = open_session(c, NULL, true),
                       *a2 = open_session(c, NULL, false), *a3 = open_session(c, NULL, false);
    int bad = !a || !b || !a2 || !a3;
    char when[96];
    for (int i = 0; !bad && i < c->n; i += c->batch) {
        const int nb = c->n - i < c->batch ? c->n - i : c->batch;
        bad = kvf_session_prefill(a, c->ids + i, nb, NULL) != KVF_OK ||
            kvf_session_prefill(b, c->ids + i, nb, NULL) != KVF_OK ||
            kvf_session_prefill(a2, c->ids + i, nb, NULL) != KVF_OK ||
            kvf_session_prefill(a3, c->ids + i, nb, NULL) != KVF_OK;
        snprintf(when, sizeof when, "full, prompt pass at %d", i);
        bad = bad || check_heads(c, a, false, when);
    }
    bad = bad || same_logits(c, a, b, "full, after the prompt");
    bad = bad || kvf_session_compress(a) != KVF_OK || kvf_session_compress(b) != KVF_OK ||
          kvf_session_compress(a2) != KVF_OK || kvf_session_compress(a3) != KVF_OK;
    bad = bad || check_heads(c, a, true, "full, after compression");
    if (!bad && (kvf_session_kv_bytes(a) != kvf_session_kv_full_bytes(a) ||
                 kvf_session_kv_bytes(b) != kvf_session_kv_full_bytes(b) ||
                 kvf_session_kv_bytes(a) >= kvf_session_kv_bytes(b))) {
        fprintf(stderr, "full: %zu bytes (full %zu), with every entry %zu (full %zu)\n", kvf_session_kv_bytes(a),
                kvf_session_kv_full_bytes(a), kvf_session_kv_bytes(b), kvf_session_kv_full_bytes(b));
        bad = 1;
    }
    if (!bad)
        printf("full: %zu KV bytes after the prompt, %zu with every entry\n", kvf_session_kv_bytes(a),
               kvf_session_kv_bytes(b));
    const int n0 = kvf_session_n_past(a);
    for (int t = 0; !bad && t < N_DECODE; t++) {
        const int32_t tok = argmax(kvf_session_logits(b), c->mi.n_vocab), toks[2] = {tok, tok};
        struct kvf_session *pair[2] = {a2, a3};
        bad = kvf_session_decode(a, tok) != KVF_OK || kvf_session_decode(b, tok) != KVF_OK ||
              kvf_session_decode_batch(pair, toks, 2) != KVF_OK;
        snprintf(when, sizeof when, "full, decode step %d", t);
        bad = bad || same_logits(c, a, b, when) || same_logits(c, a, a2, when) || same_logits(c, a, a3, when) ||
              check_heads(c, a, false, when) || check_heads(c, a2, false, when);
    }
    /* How far back the session can go: to what its windowed heads still hold. */
    if (!bad) {
        int n;
        const struct kvf_tag *t = kvf_session_kv_tags(a, 0, 0, &n);
        const size_t bytes = kvf_session_kv_bytes(a);
        const int n_past = kvf_session_n_past(a), back = t[0].pos + c->mi.sliding_window - 1;
        const enum kvf_status st = kvf_session_truncate(a, back - 1);
        if (back > n_past - 32 || back <= n0 || st != KVF_ERR_UNSUPPORTED || kvf_session_n_past(a) != n_past ||
            kvf_session_kv_bytes(a) != bytes) {
            fprintf(stderr, "full: back to %d of %d (prompt %d); truncate to %d gave %s (n_past %d)\n", back, n_past,
                    n0, back - 1, kvf_status_str(st), kvf_session_n_past(a));
            bad = 1;
        }
        bad = bad || kvf_session_truncate(a, back) != KVF_OK || kvf_session_truncate(b, 3) != KVF_OK ||
              check_heads(c, a, false, "full, truncated");
    }
    if (kvf_last_error()[0] && bad) fprintf(stderr, "full: %s\n", kvf_last_error());
    printf("%-44s %s\n", "full (freeing vs every entry)", bad ? "FAIL" : "ok");
    kvf_session_free(a);
    kvf_session_free(b);
    kvf_session_free(a2);
    kvf_session_free(a3);
    return bad;
}

static int keep_count(double budget, int n) {
    const int k = (int)floor(budget * n + 0.5);
    return k < 1 ? 1 : k > n ? n : k;
}

/* A policy's kept counts: per head `windowed` in windowed layers and
 * `global` in the others (< 0: not checked), or a total; then `steps`
 * steps of its decode stage, checked after each when it `evicts`. */
static int check_policy(const struct ctx *c, const char *spec, int windowed, int global, long total, int steps,
                        bool evicts) {
    struct kvf_session *s = open_session(c, spec, false);
    int bad = !s || kvf_session_prefill(s, c->ids, c->n, NULL) != KVF_OK || kvf_session_compress(s) != KVF_OK;
    long sum = 0;
    for (int l = 0; !bad && l < c->mi.n_layer; l++)
        for (int g = 0; g < c->mi.n_head_kv && !bad; g++) {
            int n;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, g, &n);
            sum += n;
            const int want = is_local(c, l) ? windowed : global;
            if ((want >= 0 && n != want) || (is_local(c, l) && n > 0 && t[0].pos <= c->n - c->mi.sliding_window)) {
                fprintf(stderr, "%s: layer %d head %d keeps %d entries from position %d, not %d\n", spec, l, g, n,
                        n ? t[0].pos : -1, want);
                bad = 1;
            }
        }
    if (!bad && total > 0 && sum != total * c->mi.n_head_kv) {
        fprintf(stderr, "%s: %ld entries kept in all, not %ld\n", spec, sum, total * c->mi.n_head_kv);
        bad = 1;
    }
    /* An evicting decode stage: a windowed head stays within its budget,
     * every entry in the window (what left it never takes the budget). */
    for (int t = 0; !bad && t < steps; t++) {
        bad = kvf_session_decode(s, argmax(kvf_session_logits(s), c->mi.n_vocab)) != KVF_OK;
        if (!evicts) continue;
        const int n_past = kvf_session_n_past(s);
        for (int l = 0; !bad && l < c->mi.n_layer; l++)
            for (int g = 0; g < c->mi.n_head_kv && !bad && is_local(c, l); g++) {
                int n;
                const struct kvf_tag *t0 = kvf_session_kv_tags(s, l, g, &n);
                if ((windowed >= 0 && n > windowed) || (n > 0 && t0[0].pos <= n_past - c->mi.sliding_window)) {
                    fprintf(stderr,
                            "%s: decode step %d: layer %d head %d holds %d entries from position %d (budget %d, "
                            "window from %d)\n",
                            spec, t, l, g, n, n ? t0[0].pos : -1, windowed, n_past - c->mi.sliding_window + 1);
                    bad = 1;
                }
            }
    }
    /* Merge records name kept entries: none goes into an entry the window freed. */
    for (int l = 0; !bad && l < c->mi.n_layer; l++)
        for (int g = 0; g < c->mi.n_head_kv && !bad; g++) {
            int n, nm;
            const struct kvf_tag *t = kvf_session_kv_tags(s, l, g, &n);
            const struct kvf_kv_merge *mg = kvf_session_kv_merges(s, l, g, &nm);
            for (int i = 0; i < nm && !bad; i++) {
                bool held = false;
                for (int j = 0; j < n && !held; j++) held = t[j].pos == mg[i].into;
                if (!held && is_local(c, l)) {
                    fprintf(stderr, "%s: layer %d head %d: %d merged into %d, which it no longer holds\n", spec, l, g,
                            mg[i].from, mg[i].into);
                    bad = 1;
                }
            }
        }
    if (!s || (bad && kvf_last_error()[0])) fprintf(stderr, "%s: %s\n", spec, kvf_last_error());
    printf("%-44s %s\n", spec, bad ? "FAIL" : "ok");
    kvf_session_free(s);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: kv_swa MODEL TEXTFILE N_PROMPT N_BATCH\n");
        return 1;
    }
    FILE *probe = fopen(argv[1], "rb");
    if (!probe) {
        printf("kv_swa: %s not found: skipped\n", argv[1]);
        return 77;
    }
    fclose(probe);
    struct ctx c = {.n = atoi(argv[3]), .batch = atoi(argv[4])};
    char *text = read_text(argv[2]);
    struct kvf_model_params mp = kvf_model_default_params();
    struct kvf_model *m = NULL;
    if (!text || c.n < 1 || c.batch < 1 || kvf_model_load(argv[1], &mp, &m) != KVF_OK) {
        fprintf(stderr, "kv_swa: %s\n", text ? kvf_last_error() : "cannot read the text");
        return 1;
    }
    c.m = m;
    kvf_model_get_info(m, &c.mi);
    /* The passage, repeated, to N_PROMPT tokens. */
    int32_t *ids = malloc(sizeof *ids * (size_t)c.n), n_text = 0;
    int32_t *piece = malloc(sizeof *piece * (strlen(text) + 2));
    int bad = !ids || !piece ||
        kvf_tokenize(m, text, strlen(text), piece, (int32_t)strlen(text) + 2, false, false, &n_text) != KVF_OK ||
        n_text < 1 || c.mi.sliding_window < 2;
    for (int i = 0; !bad && i < c.n; i++) ids[i] = i == 0 && c.mi.bos >= 0 ? c.mi.bos : piece[i % n_text];
    c.ids = ids;
    if (bad) fprintf(stderr, "kv_swa: no prompt, or a model without a sliding window (%d)\n", c.mi.sliding_window);
    const int W = c.mi.sliding_window, L = c.mi.n_layer;
    if (!bad && c.n <= W + SLACK) {
        fprintf(stderr, "kv_swa: a prompt of %d tokens does not leave the window of %d\n", c.n, W);
        bad = 1;
    }
    bad = bad || check_full(&c);
    bad |= !bad && check_policy(&c, "knorm:budget=0.5", keep_count(0.5, W - 1), keep_count(0.5, c.n), 0, 0, false);
    bad |=
        !bad && check_policy(&c, "h2o:budget=0.3+decode=h2o", keep_count(0.3, W - 1), keep_count(0.3, c.n), 0, 8, true);
    bad |= !bad && check_policy(&c, "keydiff:budget=0.3+decode=fixed-distance", keep_count(0.3, W - 1),
                                keep_count(0.3, c.n), 0, 8, true);
    /* merges, then a growing cache whose window moves past the entries merged into */
    bad |= !bad && check_policy(&c, "lookm:budget=0.3", -1, -1, 0, N_DECODE, false);
    if (!bad) { /* prefixkv: the layers' even shares, searched together */
        const long total = (long)(L / 6) * keep_count(0.2, c.n) + (long)(L - L / 6) * keep_count(0.2, W - 1);
        bad |= check_policy(&c, "prefixkv:budget=0.2", -1, -1, total, 0, false);
    }
    free(piece);
    free(ids);
    free(text);
    kvf_model_free(m);
    return bad;
}
