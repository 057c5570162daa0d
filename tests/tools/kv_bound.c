/* The memory bound during decoding, checked by counting (not timing): a long
 * prompt (text around a pseudo-image) on a real model runs with every KV
 * policy; after compression and after every decode step the inspection API
 * (kvf_session_kv_tags) says how many entries each (layer, kv head) holds,
 * which must follow the policy's decode stage, and the allocated KV bytes
 * must stay within the entries held plus the cache's growth slack. First,
 * on a shorter prompt, every preset at budget=1.0 (which never evicts) must
 * give the full cache's logits bit for bit, after the prompt and at every
 * decode step.
 *
 * usage: kv_bound MODEL TEXTFILE N_PROMPT N_DECODE [MMPROJ]
 * With MMPROJ, the model's vision tower is loaded: on Gemma 3 the
 * pseudo-images then take the image delimiters and attend to themselves
 * bidirectionally, as encoded images do.
 * Exit 0 when every policy keeps its bound, 1 otherwise, 77 (skip) without
 * the model file. */
#include "kvfold.h"

#include "read_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum decode_kind { EVICTS, GROWS, RECOMPRESSES };

struct policy_case {
    const char *spec;
    double budget;        /* the spec's budget: <= 1 a ratio, else a count */
    enum decode_kind kind;
    int every;            /* RECOMPRESSES: steps between compressions */
    bool uniform;         /* every layer keeps round(budget x tokens seen) exactly */
    int block_budget;     /* block-wise prefill: entries per head after each block (0: bulk) */
    int block;            /* ... and the largest block */
};

static const struct policy_case cases[] = {
    {"streaming:budget=0.2", 0.2, EVICTS, 0, true, 0, 0},
    {"h2o:budget=0.2", 0.2, EVICTS, 0, true, 0, 0},
    {"h2o:budget=256", 256, EVICTS, 0, true, 0, 0},
    {"snapkv:budget=0.2", 0.2, GROWS, 0, true, 0, 0},
    {"snapkv:budget=0.2+decode=h2o", 0.2, EVICTS, 0, true, 0, 0},
    {"pyramidkv:budget=0.1+decode=h2o:recent=0.3", 0.1, EVICTS, 0, false, 0, 0},
    {"roco:budget=0.2+decode=window", 0.2, EVICTS, 0, true, 0, 0},
    {"keydiff:budget=0.05+decode=fixed-distance", 0.05, EVICTS, 0, true, 0, 0},
    {"knorm:budget=0.2+decode=recompress:every=8", 0.2, RECOMPRESSES, 8, true, 0, 0},
    {"random:budget=128+decode=window:sinks=8", 128, EVICTS, 0, true, 0, 0},
    {"imgrand:budget=0.5", 0.5, GROWS, 0, false, 0, 0},
    {"lookm:budget=0.2", 0.2, GROWS, 0, true, 0, 0},           /* text first, within the budget */
    {"lookm:budget=0.2,text_prior=all", 0.2, GROWS, 0, false, 0, 0}, /* all text, past it */
    {"lookm:budget=0.2,merge=weighted,text_prior=0+decode=h2o", 0.2, EVICTS, 0, true, 0, 0},
    {"elastic:budget=0.1", 0.1, EVICTS, 0, true, 0, 0},
    {"prefixkv:budget=0.2", 0.2, EVICTS, 0, false, 0, 0}, /* per-layer ratios: checked against each layer's own */
    {"csp:budget=0.2,decode_softmax=1+decode=window", 0.2, EVICTS, 0, true, 0, 0},
    {"blockwise:budget=256,block=64", 256, GROWS, 0, true, 256, 64},
    {"blockwise:budget=300,block=image,evict=keydiff+decode=window", 300, EVICTS, 0, true, 300, 576},
    {"blockwise:budget=256,block=64,question=1", 256, GROWS, 0, true, 256, 64},
    /* the schedule stage under other presets: blocks to M, then the preset's rule */
    {"h2o:budget=0.1+schedule=blocks:budget=256,block=64", 0.1, EVICTS, 0, true, 256, 64},
    {"lookm:budget=0.2+schedule=blocks:budget=300,block=image,evict=keydiff", 0.2, GROWS, 0, false, 300, 576},
};

static int target_of(double budget, int n_seen) {
    const double k = budget <= 1.0 ? floor(budget * n_seen + 0.5) : budget;
    return k >= n_seen ? n_seen : (int)k;
}

/* Entries held per (layer, head) into n[], their sum returned. */
static long held(const struct kvf_session *s, const struct kvf_model_info *mi, int *n) {
    long sum = 0;
    for (int l = 0; l < mi->n_layer; l++)
        for (int g = 0; g < mi->n_head_kv; g++) {
            kvf_session_kv_tags(s, l, g, &n[l * mi->n_head_kv + g]);
            sum += n[l * mi->n_head_kv + g];
        }
    return sum;
}

/* Text of about n_words words, the passage repeated, split by an <image>. */
static char *make_text(const char *passage, int n_words) {
    const size_t plen = strlen(passage);
    char *t = malloc((size_t)n_words * 12 + plen + 64);
    if (!t || plen == 0) return NULL;
    size_t o = 0;
    for (int w = 0, p = 0; w < n_words; w++) {
        if (w == n_words / 2) o += (size_t)sprintf(t + o, " <image> ");
        while (passage[p % plen] == ' ' || passage[p % plen] == '\n') p++;
        while (passage[p % plen] != ' ' && passage[p % plen] != '\n') t[o++] = passage[p++ % plen];
        t[o++] = ' ';
    }
    t[o] = '\0';
    return t;
}

static int run_case(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr,
                    const struct policy_case *pc, int n_decode, int *n0, int *n) {
    const int np = kvf_prompt_n_tokens(pr), H = mi->n_layer * mi->n_head_kv;
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = np + n_decode + 1;
    sp.kv_spec = pc->spec;
    /* The policy's bound alone: sliding-window layers keeping only their
     * window are kv_swa's subject. */
    sp.kv_swa_full = true;
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    if (st == KVF_OK) st = kvf_session_prefill_prompt(s, pr, NULL);
    const size_t full = st == KVF_OK ? kvf_session_kv_bytes(s) : 0;
    if (st == KVF_OK) st = kvf_session_compress(s);
    if (st != KVF_OK) {
        fprintf(stderr, "%s: %s: %s\n", pc->spec, kvf_status_str(st), kvf_last_error());
        kvf_session_free(s);
        return 1;
    }
    const long total0 = held(s, mi, n0);
    const double entry_bytes = (double)kvf_session_kv_bytes(s) / (double)total0; /* storage fits exactly */
    int bad = 0;
    if (pc->block_budget) {
        /* Never more than budget + block entries per head during the prefill
         * (block=image: the 576-token image is the largest block; an image
         * whose tokens attend to each other is one pass, so no block is
         * smaller than it), growth slack included: the peak is what was
         * really allocated. */
        const int block = mi->image_bidirectional && pc->block < 576 ? 576 : pc->block;
        const double m_b = pc->block_budget + block;
        const double most = (double)H * (m_b + m_b / 8 + 17) * entry_bytes;
        if (kvf_session_kv_peak_entries(s) > pc->block_budget + block) {
            fprintf(stderr, "%s: a head held %d entries during the prefill, over %d + %d\n", pc->spec,
                    kvf_session_kv_peak_entries(s), pc->block_budget, block);
            bad = 1;
        }
        if ((double)kvf_session_kv_peak_bytes(s) > most) {
            fprintf(stderr, "%s: %zu KV bytes at the peak of the prefill, over %.0f\n", pc->spec,
                    kvf_session_kv_peak_bytes(s), most);
            bad = 1;
        }
    }
    for (int g = 0; g < H && pc->uniform; g++)
        if (n0[g] != target_of(pc->budget, np)) {
            fprintf(stderr, "%s: head %d holds %d after compression, want %d\n", pc->spec, g, n0[g],
                    target_of(pc->budget, np));
            bad = 1;
            break;
        }
    int32_t tok = 0;
    size_t most = 0;
    for (int t = 1; t <= n_decode && !bad; t++) {
        const float *lg = kvf_session_logits(s);
        for (int v = 1; v < mi->n_vocab; v++) tok = lg[v] > lg[tok] ? v : tok;
        if ((st = kvf_session_decode(s, tok)) != KVF_OK) {
            fprintf(stderr, "%s: decode: %s\n", pc->spec, kvf_last_error());
            bad = 1;
            break;
        }
        const int n_seen = np + t;
        long total = held(s, mi, n);
        double slack = 0;
        for (int g = 0; g < H && !bad; g++) {
            int lo = 0, hi = 0;
            switch (pc->kind) {
            case GROWS: lo = hi = n0[g] + t; break;
            case RECOMPRESSES: /* back to the budget every `every` steps */
                hi = pc->uniform ? target_of(pc->budget, n_seen - t % pc->every) + t % pc->every : hi;
                lo = hi;
                break;
            case EVICTS: {
                /* The budget of the tokens seen: the layer's own share where the
                 * policy searched one, else under a pyramid at most twice the
                 * uniform share (its widest layer). */
                double ratio, gini;
                if (kvf_session_kv_layer_budget(s, g / mi->n_head_kv, &ratio, &gini)) {
                    lo = hi = (int)floor(ratio * n_seen + 0.5);
                } else {
                    hi = pc->uniform ? target_of(pc->budget, n_seen)
                                     : n0[g] + (pc->budget <= 1.0 ? (int)ceil(2 * pc->budget * t) + 2 : 0);
                    lo = pc->uniform ? hi : 0;
                }
                break;
            }
            }
            if (n[g] < lo || n[g] > hi) {
                fprintf(stderr, "%s: step %d: head %d holds %d entries, want [%d, %d]\n", pc->spec, t, g, n[g], lo, hi);
                bad = 1;
            }
            slack += n[g] / 8 + 17; /* kv_cache_reserve's growth step */
        }
        const size_t bytes = kvf_session_kv_bytes(s);
        most = bytes > most ? bytes : most;
        if (!bad && bytes > entry_bytes * ((double)total + slack)) {
            fprintf(stderr, "%s: step %d: %zu KV bytes for %ld entries (%.0f bytes each)\n", pc->spec, t, bytes, total,
                    entry_bytes);
            bad = 1;
        }
    }
    if (!bad && pc->kind == EVICTS && pc->budget <= 0.2 && !pc->block_budget && most > full / 2) {
        fprintf(stderr, "%s: %zu KV bytes while decoding, over half the full cache's %zu\n", pc->spec, most, full);
        bad = 1;
    }
    printf("%-46s %s  prompt %d, kept %ld -> %ld entries, kv %.2f -> %.2f MiB (full %.2f)\n", pc->spec,
           bad ? "FAIL" : "ok  ", np, total0, held(s, mi, n), (double)total0 * entry_bytes / 1048576.0,
           (double)most / 1048576.0, (double)full / 1048576.0);
    kvf_session_free(s);
    return bad;
}

static const char *const full_budget[] = {
    "streaming:budget=1.0",
    "h2o:budget=1.0",
    "snapkv:budget=1.0",
    "pyramidkv:budget=1.0",
    "roco:budget=1.0",
    "keydiff:budget=1.0",
    "knorm:budget=1.0",
    "random:budget=1.0",
    "imgrand:budget=1.0",
    "snapkv:budget=1.0+decode=h2o",
    "knorm:budget=1.0+decode=recompress:every=2",
    "keydiff:budget=1.0+decode=fixed-distance",
    "lookm:budget=1.0",
    "lookm:budget=1.0,merge=weighted,text_prior=0",
    "elastic:budget=1.0",
    "prefixkv:budget=1.0",
    /* block-wise with a budget over the prompt, in blocks of the bulk batch (smaller blocks change
     * the batching, and with it the rounding of the matrix products) */
    "csp:budget=1.0",
    "blockwise:budget=100000,block=512",
    "blockwise:budget=100000,block=image,evict=keydiff",
    "blockwise:budget=100000,block=512,question=1",
    "h2o:budget=1.0+schedule=blocks:budget=100000,block=512",
};

/* Greedy decoding of n tokens under spec (NULL: full); logits [(n+1)][n_vocab]. */
static int run_logits(const struct kvf_model *m, int n_vocab, const struct kvf_prompt *pr, const char *spec, int n,
                      float *logits) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = kvf_prompt_n_tokens(pr) + n;
    sp.kv_spec = spec;
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    if (st == KVF_OK) st = kvf_session_prefill_prompt(s, pr, NULL);
    if (st == KVF_OK) st = kvf_session_compress(s);
    for (int t = 0; st == KVF_OK && t <= n; t++) {
        const float *lg = kvf_session_logits(s);
        memcpy(logits + (size_t)t * n_vocab, lg, sizeof(float) * (size_t)n_vocab);
        int32_t tok = 0;
        for (int v = 1; v < n_vocab; v++) tok = lg[v] > lg[tok] ? v : tok;
        if (t < n) st = kvf_session_decode(s, tok);
    }
    kvf_session_free(s);
    if (st != KVF_OK) fprintf(stderr, "%s: %s\n", spec ? spec : "full", kvf_last_error());
    return st != KVF_OK;
}

static int check_full_budget(const struct kvf_model *m, const struct kvf_model_info *mi, const struct kvf_prompt *pr) {
    const int n = 6;
    float *want = malloc(sizeof(float) * (size_t)(n + 1) * mi->n_vocab),
          *got = malloc(sizeof(float) * (size_t)(n + 1) * mi->n_vocab);
    int bad = !want || !got || run_logits(m, mi->n_vocab, pr, NULL, n, want);
    for (size_t i = 0; !bad && i < sizeof full_budget / sizeof *full_budget; i++) {
        bad = run_logits(m, mi->n_vocab, pr, full_budget[i], n, got);
        if (!bad && memcmp(want, got, sizeof(float) * (size_t)(n + 1) * mi->n_vocab) != 0) bad = 1;
        if (bad) fprintf(stderr, "%s: logits differ from the full cache's\n", full_budget[i]);
        printf("%-46s %s  logits of the prompt and %d decode steps %s the full cache's\n", full_budget[i],
               bad ? "FAIL" : "ok  ", n, bad ? "differ from" : "equal");
    }
    free(want);
    free(got);
    return bad;
}

int main(int argc, char **argv) {
    if (argc != 5 && argc != 6) {
        fprintf(stderr, "usage: kv_bound MODEL TEXTFILE N_PROMPT N_DECODE [MMPROJ]\n");
        return 2;
    }
    const int n_words = atoi(argv[3]) * 3 / 4, n_decode = atoi(argv[4]);
    char *passage = read_text(argv[2]);
    if (!passage || n_words <= 0 || n_decode <= 0) {
        fprintf(stderr, "kv_bound: bad arguments or unreadable %s\n", argv[2]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0); /* progress lines as they come */
    FILE *probe = fopen(argv[1], "rb");
    if (!probe) {
        printf("SKIP: %s is absent (scripts/models.sh downloads it)\n", argv[1]);
        free(passage);
        return 77;
    }
    fclose(probe);
    struct kvf_model *m = NULL;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.mmproj = argc == 6 ? argv[5] : NULL;
    enum kvf_status st = kvf_model_load(argv[1], &mp, &m);
    if (st != KVF_OK) {
        fprintf(stderr, "kv_bound: %s: %s\n", argv[1], kvf_last_error());
        free(passage);
        return 2;
    }
    struct kvf_model_info mi;
    kvf_model_get_info(m, &mi);
    char *text = make_text(passage, n_words), *short_text = make_text(passage, 100);
    struct kvf_media *img = NULL, *small = NULL;
    struct kvf_prompt *pr = NULL, *short_pr = NULL;
    const struct kvf_media *media[1];
    if (text && short_text && (st = kvf_media_pseudo_image(m, "a red square", 24, 24, 0.1f, 7, &img)) == KVF_OK &&
        (st = kvf_media_pseudo_image(m, "a blue circle", 4, 6, 0.1f, 3, &small)) == KVF_OK) {
        media[0] = small;
        st = kvf_prompt_init(m, short_text, media, 1, true, false, &short_pr);
        media[0] = img;
        if (st == KVF_OK) st = kvf_prompt_init(m, text, media, 1, true, false, &pr);
    }
    int *n0 = malloc(sizeof(int) * (size_t)mi.n_layer * mi.n_head_kv),
        *n = malloc(sizeof(int) * (size_t)mi.n_layer * mi.n_head_kv);
    int rc = !text || st != KVF_OK || !n0 || !n;
    if (rc) fprintf(stderr, "kv_bound: prompt: %s\n", kvf_last_error());
    if (!rc) rc = check_full_budget(m, &mi, short_pr);
    for (size_t i = 0; !rc && i < sizeof cases / sizeof *cases; i++)
        rc |= run_case(m, &mi, pr, &cases[i], n_decode, n0, n);
    free(n0);
    free(n);
    kvf_prompt_free(pr);
    kvf_prompt_free(short_pr);
    kvf_media_free(img);
    kvf_media_free(small);
    free(text);
    free(short_text);
    free(passage);
    kvf_model_free(m);
    return rc;
}
