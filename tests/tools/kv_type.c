/* KV cache storage types against the float32 cache, end to end: the
 * logits at every prompt position (a batched prefill: the blocked attention
 * path over converted rows) and at N_DECODE decode steps (one query: the
 * typed row kernels), the decode steps fed the f32 run's greedy tokens so
 * all runs see the same text. Each CASE names the keys' and values' types
 * ("q4_0", or "q8_0/q4_0" for keys/values) and its limits: the largest
 * logit error relative to the position's largest f32 logit, and the share
 * of prompt positions whose top token agrees with f32's. Decode steps may
 * be allowed a larger error, DECODE_TOL: one-row matmuls on quantised
 * weights quantise their activations (Q8), which turns any small change
 * (here the cache's rounding) into steps of a Q8 level; with float weights
 * the decode error is the prompt's. The KV bytes must be those of the
 * types' rows (tags counted too, and the running statistics under a policy
 * that keeps them). A block type (Q8_0, Q4_0) on a model whose head
 * dimension is not a multiple of 32 must be refused with
 * KVF_ERR_UNSUPPORTED.
 *
 * usage: kv_type MODEL TEXTFILE N_PROMPT N_DECODE DECODE_TOL CASE=TOL:TOP1...
 * Exit 0 when every check holds, 1 otherwise, 2 on bad arguments, 77 (skip)
 * without the model file. */
#include "kvfold.h"

#include "read_text.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* One session of type t: logits [n_prompt + n_decode][n_vocab] and the KV
 * bytes after the prompt. Decode step s feeds forced[s], or (forced NULL)
 * the greedy token, recorded in greedy[s]. */
static enum kvf_status run(const struct kvf_model *m, int n_vocab, const int32_t *tok, int n_prompt, int n_decode,
                           const enum kvf_kv_type t[2], const char *spec, const int32_t *forced, int32_t *greedy,
                           float *logits, size_t *bytes) {
    struct kvf_session_params sp = kvf_session_default_params();
    sp.n_ctx = n_prompt + n_decode;
    sp.type_k = t[0];
    sp.type_v = t[1];
    sp.kv_spec = spec;
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    if (st == KVF_OK) st = kvf_session_prefill(s, tok, n_prompt, logits);
    *bytes = st == KVF_OK ? kvf_session_kv_bytes(s) : 0;
    for (int i = 0; st == KVF_OK && i < n_decode; i++) {
        const int32_t next = forced ? forced[i] : argmax(kvf_session_logits(s), n_vocab);
        if (greedy) greedy[i] = next;
        if ((st = kvf_session_decode(s, next)) == KVF_OK)
            memcpy(logits + (size_t)(n_prompt + i) * n_vocab, kvf_session_logits(s), sizeof(float) * (size_t)n_vocab);
    }
    kvf_session_free(s);
    return st;
}

static size_t row_bytes(enum kvf_kv_type t, int head_dim) {
    return t == KVF_KV_F32 ? 4 * (size_t)head_dim
         : t == KVF_KV_F16 ? 2 * (size_t)head_dim
         : t == KVF_KV_Q8_0 ? (size_t)head_dim / 32 * 34
                            : (size_t)head_dim / 32 * 18; /* Q4_0, Q4_0H */
}

/* Bytes of one cache entry: key and value rows, tag, statistics. */
static size_t entry_bytes(const enum kvf_kv_type t[2], int head_dim, bool stats) {
    return row_bytes(t[0], head_dim) + row_bytes(t[1], head_dim) + sizeof(struct kvf_tag) +
           (stats ? 3 * sizeof(float) : 0);
}

/* One CASE argument: "TYPE=TOL:TOP1" or "KTYPE/VTYPE=TOL:TOP1". */
struct kv_case {
    enum kvf_kv_type t[2];
    double tol, top1_min;
    char name[32];
};

static bool case_parse(const char *arg, struct kv_case *c) {
    char k[16] = "", v[16] = "";
    const char *eq = strchr(arg, '=');
    if (!eq || eq - arg >= (long)sizeof c->name) return false;
    snprintf(c->name, sizeof c->name, "%.*s", (int)(eq - arg), arg);
    if (sscanf(c->name, "%15[^/]/%15s", k, v) < 1 || sscanf(eq + 1, "%lf:%lf", &c->tol, &c->top1_min) != 2)
        return false;
    return kvf_kv_type_parse(k, &c->t[0]) == KVF_OK && kvf_kv_type_parse(v[0] ? v : k, &c->t[1]) == KVF_OK;
}

int main(int argc, char **argv) {
    enum { CASES_MAX = 8 };
    struct kv_case cases[CASES_MAX + 1] = {{{KVF_KV_F32, KVF_KV_F32}, 0, 1, "f32"}}; /* [0]: the reference */
    const int n_case = argc - 6;
    bool args_ok = argc >= 7 && n_case <= CASES_MAX;
    for (int i = 0; args_ok && i < n_case; i++) args_ok = case_parse(argv[6 + i], &cases[1 + i]);
    if (!args_ok) {
        fprintf(stderr, "usage: kv_type MODEL TEXTFILE N_PROMPT N_DECODE DECODE_TOL CASE=TOL:TOP1... (at most %d; "
                        "CASE a type or KTYPE/VTYPE)\n", CASES_MAX);
        return 2;
    }
    const int n_prompt = atoi(argv[3]), n_decode = atoi(argv[4]), n_run = n_case + 1;
    const double decode_tol = atof(argv[5]);
    char *passage = read_text(argv[2]);
    if (!passage || !*passage || n_prompt < 2 || n_decode < 1) {
        fprintf(stderr, "kv_type: bad arguments or unreadable %s\n", argv[2]);
        free(passage);
        return 2;
    }
    FILE *probe = fopen(argv[1], "rb");
    if (!probe) {
        printf("SKIP: %s is absent (scripts/models.sh downloads it)\n", argv[1]);
        free(passage);
        return 77;
    }
    fclose(probe);
    struct kvf_model *m = NULL;
    if (kvf_model_load(argv[1], NULL, &m) != KVF_OK) {
        fprintf(stderr, "kv_type: %s: %s\n", argv[1], kvf_last_error());
        free(passage);
        return 2;
    }
    struct kvf_model_info mi;
    kvf_model_get_info(m, &mi);
    const int V = mi.n_vocab, n_pos = n_prompt + n_decode;

    /* BOS (when the model has one), then the passage's tokens repeated. */
    const size_t plen = strlen(passage);
    int32_t need = 0, n_ptok = 0;
    if (kvf_tokenize(m, passage, plen, NULL, 0, false, false, &need) != KVF_ERR_BUFFER) need = 0;
    int32_t *ptok = need > 0 ? malloc(sizeof(int32_t) * (size_t)need) : NULL;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)n_prompt);
    if (ptok && kvf_tokenize(m, passage, plen, ptok, need, false, false, &n_ptok) != KVF_OK) n_ptok = 0;
    for (int i = 0; tok && n_ptok > 0 && i < n_prompt; i++)
        tok[i] = i == 0 && mi.bos >= 0 ? mi.bos : ptok[i % n_ptok];
    float *ref = malloc(sizeof(float) * (size_t)n_pos * V), *logits = malloc(sizeof(float) * (size_t)n_pos * V);
    int32_t *greedy = malloc(sizeof(int32_t) * (size_t)n_decode);
    int rc = !tok || n_ptok <= 0 || !ref || !logits || !greedy;
    if (rc) fprintf(stderr, "kv_type: cannot make a prompt of %d tokens\n", n_prompt);
    printf("%s: %d layers, %d kv heads of %d dims; %d prompt tokens, %d decode steps\n", mi.name, mi.n_layer,
           mi.n_head_kv, mi.head_dim, n_prompt, n_decode);

    /* A value outside the enum is refused, for keys or values. */
    for (int i = 0; i < 2; i++) {
        struct kvf_session_params bad = kvf_session_default_params();
        *(i ? &bad.type_v : &bad.type_k) = (enum kvf_kv_type)6;
        struct kvf_session *none = NULL;
        if (kvf_session_init(m, &bad, &none) != KVF_ERR_INVALID_ARG || none) {
            fprintf(stderr, "kv_type: %s type 6 was not refused as an invalid argument\n", i ? "value" : "key");
            rc = 1;
        }
    }

    size_t bytes[CASES_MAX + 1] = {0}, stat_bytes[CASES_MAX + 1] = {0};
    float *scratch = rc ? NULL : malloc(sizeof(float) * (size_t)n_prompt * V);
    rc |= !rc && !scratch;
    for (int t = 0; !rc && t < n_run; t++) {
        const struct kv_case *c = &cases[t];
        enum kvf_status st = run(m, V, tok, n_prompt, n_decode, c->t, NULL, t ? greedy : NULL, t ? NULL : greedy,
                                 t ? logits : ref, &bytes[t]);
        if ((c->t[0] >= KVF_KV_Q8_0 || c->t[1] >= KVF_KV_Q8_0) && mi.head_dim % 32 != 0) {
            const bool refused = st == KVF_ERR_UNSUPPORTED && strstr(kvf_last_error(), "multiple of 32");
            printf("%-10s %s  refused for head dimension %d: %s\n", c->name, refused ? "ok  " : "FAIL", mi.head_dim,
                   st == KVF_OK ? "accepted" : kvf_last_error());
            rc |= !refused;
            continue;
        }
        /* Running statistics (h2o keeps them) are counted at every type too;
         * budget 1.0 evicts nothing, so only the prompt's entries are held. */
        if (st == KVF_OK)
            st = run(m, V, tok, n_prompt, 0, c->t, "h2o:budget=1.0", NULL, NULL, scratch, &stat_bytes[t]);
        if (st != KVF_OK) {
            fprintf(stderr, "kv_type: %s: %s\n", c->name, kvf_last_error());
            rc = 1;
            break;
        }
        if (t == 0) continue;
        double err_prompt = 0, err_decode = 0;
        int agree = 0, agree_decode = 0;
        for (int i = 0; i < n_pos; i++) {
            const float *a = ref + (size_t)i * V, *b = logits + (size_t)i * V;
            double amax = 0, d = 0;
            for (int v = 0; v < V; v++) {
                amax = fmax(amax, fabs(a[v]));
                const double e = fabs((double)b[v] - a[v]);
                d = e <= d ? d : isnan(e) ? INFINITY : e;
            }
            const double rel = d / fmax(amax, 1e-30);
            if (i < n_prompt) err_prompt = fmax(err_prompt, rel), agree += argmax(a, V) == argmax(b, V);
            else err_decode = fmax(err_decode, rel), agree_decode += argmax(a, V) == argmax(b, V);
        }
        const double share = (double)agree / n_prompt;
        /* Same capacities at every type, so the byte counts scale exactly as the entries do, once smoothed
         * keys' two vectors a head are taken off */
        const size_t smooth = c->t[0] == KVF_KV_Q4_0S ? 2 * sizeof(float) * mi.head_dim * mi.n_layer * mi.n_head_kv : 0;
        const bool bytes_ok = (bytes[t] - smooth) * entry_bytes(cases[0].t, mi.head_dim, false) ==
                                  bytes[0] * entry_bytes(c->t, mi.head_dim, false) &&
                              (stat_bytes[t] - smooth) * entry_bytes(cases[0].t, mi.head_dim, true) ==
                                  stat_bytes[0] * entry_bytes(c->t, mi.head_dim, true);
        const double dtol = fmax(c->tol, decode_tol);
        const bool ok = err_prompt <= c->tol && err_decode <= dtol && share >= c->top1_min && bytes_ok;
        printf("%-10s %s  logit error: prompt %.3g (limit %.3g), decode %.3g (limit %.3g); top-1 = f32's at %d/%d "
               "prompt positions (%.4f, limit %.4f), %d/%d decode steps; kv %zu bytes = %.4f x f32 (%zu with "
               "statistics = %.4f x)%s\n",
               c->name, ok ? "ok  " : "FAIL", err_prompt, c->tol, err_decode, dtol, agree, n_prompt, share,
               c->top1_min, agree_decode, n_decode, bytes[t], (double)bytes[t] / (double)bytes[0], stat_bytes[t],
               (double)stat_bytes[t] / (double)stat_bytes[0], bytes_ok ? "" : " (bytes not those of the rows)");
        rc |= !ok;
    }
    free(scratch);
    free(ref);
    free(logits);
    free(greedy);
    free(tok);
    free(ptok);
    free(passage);
    kvf_model_free(m);
    return rc;
}
