/* kvfold perplexity: llama.cpp's method, optionally with the KV cache
 * compressed halfway through each chunk. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>

static void perplexity_defaults(struct args *a) {
    a->ctx = 512;
    a->batch = kvf_session_default_params().n_batch;
}

static int perplexity_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_NO_REPACK, OPT_FILE,
        { "--ctx-size --ctx", "-c", OPT_INT, &a->ctx, 4, 1 << 20, "N", "tokens per chunk (default 512)" },
        { "--chunks", NULL, OPT_INT, &a->chunks, 0, 1 << 20, "N", "score only the first N chunks, 0 = all (default)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV policy: each chunk's first half is compressed by it, then "
          "the second half is scored token by token (decode stage active)" },
        OPTS_KV_STORAGE, OPT_BATCH, OPT_THREADS, OPT_JSON, OPT_NO_PROGRESS,
    };
    OPTS_RETURN(out, t);
}

double token_nll(const float *row, int n_vocab, int32_t target) {
    float max = row[0];
    for (int i = 1; i < n_vocab; i++)
        max = row[i] > max ? row[i] : max;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++)
        sum += exp((double)row[i] - max);
    return log(sum) + max - row[target];
}

/* Memory for the logits of one scoring pass: vocabularies of 256k tokens
 * make a full chunk's logits (ctx x n_vocab floats) too big to keep. */
#define PPL_LOGITS_BYTES (64u << 20)

struct ppl {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    struct kvf_session *s;
    char *text;
    int32_t *ids, n_tok;
    bool use_bos, short_text;
    int ctx, n_chunks, first; /* chunk length, chunks to score, first position scored */
    int n_done;               /* chunks scored: n_chunks unless Ctrl-C stopped the scoring */
    int rows;                 /* logits rows per scoring pass */
    float *logits;
    double *running;          /* PPL after each chunk */
    double nll, nll2, t_total;
    long count;
    /* --kv: KV bytes a full cache would hold and the policy kept, summed over
     * the chunks, after the first half's compression and at the chunk's end */
    double kv_full, kv_kept, kv_end_full, kv_end_kept;
};

static void ppl_free(struct ppl *p) {
    free(p->running);
    free(p->logits);
    free(p->ids);
    kvf_session_free(p->s);
    kvf_model_free(p->m);
    free(p->text);
}

/* The text, its tokens, the chunks and the session. */
static int ppl_open(struct ppl *p) {
    const struct args *a = p->a;
    size_t len = 0;
    int rc;
    if ((rc = read_text_file(a->file, &p->text, &len)) || (rc = load_model(a, &p->m)) ||
        (rc = tokenize_text(p->m, p->text, len, true, false, &p->ids, &p->n_tok)))
        return rc;
    kvf_model_get_info(p->m, &p->info);
    /* As llama.cpp: every chunk starts with BOS when the model uses one,
     * written over the chunk's first token. */
    int32_t probe[4], n_probe = 0;
    p->use_bos = kvf_tokenize(p->m, "", 0, probe, 4, true, false, &n_probe) == KVF_OK && n_probe == 1 &&
                 p->info.bos >= 0;
    p->ctx = a->ctx, p->n_chunks = p->n_tok / p->ctx, p->first = p->ctx / 2;
    if (a->chunks > 0)
        p->n_chunks = MIN(p->n_chunks, a->chunks);
    p->short_text = p->n_chunks == 0;
    if (p->short_text) {
        if (p->n_tok < 2) {
            print_error("perplexity: '%s' has %d tokens; at least 2 are needed", a->file, p->n_tok);
            return EXIT_INPUT;
        }
        p->ctx = p->n_tok, p->n_chunks = 1, p->first = 1;
        if (!a->json)
            printf("text has %d tokens, fewer than --ctx %d: scoring it as one chunk, all but the first "
                   "token\n", p->n_tok, a->ctx);
    }
    const struct kvf_session_params sp = session_params(a, p->ctx);
    if ((rc = open_session(p->m, &sp, "perplexity: cannot create the session", &p->s)))
        return rc;
    p->rows = (int)MAX(1, MIN((size_t)a->batch, PPL_LOGITS_BYTES / ((size_t)p->info.n_vocab * 4)));
    p->logits = malloc((size_t)p->rows * (size_t)p->info.n_vocab * sizeof *p->logits);
    p->running = malloc((size_t)p->n_chunks * sizeof *p->running);
    return p->logits && p->running ? 0 : fail(KVF_ERR_NOMEM, "perplexity");
}

static void ppl_add(struct ppl *p, const float *row, int32_t target) {
    const double v = token_nll(row, p->info.n_vocab, target);
    p->nll += v;
    p->nll2 += v * v;
    p->count++;
}

/* --kv: the first half is the prompt, compressed; each later token is
 * decoded against the compressed cache, as in generation. */
static enum kvf_status ppl_chunk_compressed(struct ppl *p, const int32_t *tok) {
    enum kvf_status st;
    if ((st = kvf_session_prefill(p->s, tok, p->first, NULL)) != KVF_OK || (st = kvf_session_compress(p->s)) != KVF_OK)
        return st;
    p->kv_full += (double)kvf_session_kv_full_bytes(p->s);
    p->kv_kept += (double)kvf_session_kv_bytes(p->s);
    for (int i = p->first;; i++) {
        ppl_add(p, kvf_session_logits(p->s), tok[i]);
        if (i == p->ctx - 1) {
            p->kv_end_full += (double)kvf_session_kv_full_bytes(p->s);
            p->kv_end_kept += (double)kvf_session_kv_bytes(p->s);
            return KVF_OK;
        }
        if ((st = kvf_session_decode(p->s, tok[i])) != KVF_OK)
            return st;
    }
}

/* Full cache: logits are needed after tokens first-1 .. ctx-2 (they
 * predict tokens first .. ctx-1); the tokens before need none. */
static enum kvf_status ppl_chunk_full(struct ppl *p, const int32_t *tok) {
    enum kvf_status st;
    if (p->first > 1 && (st = kvf_session_prefill(p->s, tok, p->first - 1, NULL)) != KVF_OK)
        return st;
    for (int i = p->first - 1; i < p->ctx - 1; i += p->rows) {
        const int n = MIN(p->rows, p->ctx - 1 - i);
        if ((st = kvf_session_prefill(p->s, tok + i, n, p->logits)) != KVF_OK)
            return st;
        for (int k = 0; k < n; k++)
            ppl_add(p, p->logits + (size_t)k * p->info.n_vocab, tok[i + k + 1]);
    }
    return KVF_OK;
}

/* Scores the chunks in order until all are done or Ctrl-C stops it. */
static int ppl_score(struct ppl *p) {
    struct progress pg;
    progress_init(&pg, "perplexity", "chunks", p->n_chunks, p->a);
    for (int c = 0; c < p->n_chunks && !interrupted(); c++) {
        int32_t *tok = p->ids + (size_t)c * p->ctx;
        const int32_t saved = tok[0];
        if (p->use_bos && !p->short_text)
            tok[0] = p->info.bos;
        kvf_session_reset(p->s);
        const double t0 = now_ms();
        const enum kvf_status st = p->a->kv ? ppl_chunk_compressed(p, tok) : ppl_chunk_full(p, tok);
        if (st != KVF_OK) {
            progress_end(&pg);
            return fail(st, "perplexity: forward pass");
        }
        p->t_total += now_ms() - t0;
        tok[0] = saved;
        p->running[c] = exp(p->nll / p->count);
        p->n_done = c + 1;
        progress_end(&pg); /* the terminal line goes before stdout's */
        if (!p->a->json) {
            printf("[%d/%d] %.4f\n", c + 1, p->n_chunks, p->running[c]);
            fflush(stdout);
        }
        progress_update(&pg, p->n_done, NULL);
    }
    progress_end(&pg);
    if (p->n_done == 0) {
        print_error("perplexity: interrupted before the first chunk was scored");
        return EXIT_INTERRUPTED;
    }
    return 0;
}

static int ppl_report(const struct ppl *p) {
    const struct args *a = p->a;
    /* llama.cpp's estimate: the error of the mean NLL, carried through exp. */
    const double mean = p->nll / p->count, var = p->nll2 / p->count - mean * mean;
    const double ppl = exp(mean), err = p->count > 1 && var > 0 ? ppl * sqrt(var / (p->count - 1)) : 0;
    const double tps = p->t_total > 0 ? (double)p->n_done * (p->ctx - 1) * 1e3 / p->t_total : 0;
    const bool stopped = p->n_done < p->n_chunks;
    const int rc = stopped ? EXIT_INTERRUPTED : 0;
    if (!a->json) {
        printf("PPL = %.4f +/- %.4f (%ld tokens scored in %d chunk%s of %d; %.1f tok/s)", ppl, err, p->count,
               p->n_done, p->n_done == 1 ? "" : "s", p->ctx, tps);
        if (stopped)
            printf(", interrupted after %d of %d chunks", p->n_done, p->n_chunks);
        if (a->kv)
            printf("\nkv %s kept %.1f%% of a full cache after compressing each chunk's first half (%.2f of %.2f MiB), "
                   "%.1f%% at the chunk's end", a->kv, 100 * p->kv_kept / p->kv_full, p->kv_kept / p->n_done / MIB,
                   p->kv_full / p->n_done / MIB, 100 * p->kv_end_kept / p->kv_end_full);
        putchar('\n');
        return rc;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", p->info.name);
    cJSON_AddStringToObject(o, "file", a->file);
    cJSON_AddNumberToObject(o, "ppl", ppl);
    cJSON_AddNumberToObject(o, "ppl_stderr", err);
    cJSON_AddNumberToObject(o, "n_tokens", p->n_tok);
    cJSON_AddNumberToObject(o, "n_scored", (double)p->count);
    cJSON_AddNumberToObject(o, "n_chunks", p->n_done);
    cJSON_AddBoolToObject(o, "interrupted", stopped);
    cJSON_AddNumberToObject(o, "ctx", p->ctx);
    cJSON_AddStringToObject(o, "kv", a->kv ? a->kv : "full");
    kv_types_json(o, "kv_type", a);
    if (a->kv) { /* means per chunk */
        cJSON *m = cJSON_AddObjectToObject(o, "kv_memory");
        kv_kept_json(m, (size_t)(p->kv_full / p->n_done), (size_t)(p->kv_kept / p->n_done));
        cJSON_AddNumberToObject(m, "ratio_end", p->kv_end_kept / p->kv_end_full);
    }
    cJSON_AddBoolToObject(o, "short_text", p->short_text);
    cJSON_AddItemToObject(o, "running_ppl", cJSON_CreateDoubleArray(p->running, p->n_done));
    cJSON_AddNumberToObject(o, "tok_per_s", tps);
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)kvf_peak_rss_bytes());
    const int jrc = print_json(o);
    return jrc ? jrc : rc;
}

static int cmd_perplexity(const struct args *a) {
    if (!a->file) {
        print_error("perplexity: missing -f TEXTFILE");
        return EXIT_USAGE;
    }
    struct ppl p = { .a = a };
    int rc = ppl_open(&p);
    if (!rc)
        rc = ppl_score(&p);
    if (!rc)
        rc = ppl_report(&p);
    ppl_free(&p);
    return rc;
}

const struct command perplexity_command = {
    .name = "perplexity",
    .summary = "Perplexity of a text file, llama.cpp's method.",
    .usage = "-m FILE -f TEXTFILE [options]",
    .details = "The text is split into chunks of --ctx tokens (BOS first when the model uses one); the\n"
               "second half of each chunk is scored. A text shorter than one chunk is scored as a\n"
               "single chunk, all but its first token. Prints the running PPL per chunk and the final\n"
               "PPL with its standard error. Progress goes to stderr. Ctrl-C stops after the chunk\n"
               "being scored and reports the PPL of the chunks scored so far (--json: \"interrupted\":\n"
               "true); the exit status is then 130.",
    .run = cmd_perplexity,
    .defaults = perplexity_defaults,
    .opts = perplexity_opts,
};
