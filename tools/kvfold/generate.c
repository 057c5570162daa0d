/* kvfold generate: text from a prompt (with media), streamed to stdout, the
 * KV cache compressed after the prompt by --kv. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void generate_defaults(struct args *a) { sampling_defaults(a, 128); }

static int generate_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        OPT_PROMPT,
        OPT_FILE,
        OPTS_ESCAPE,
        OPTS_SAMPLING,
        OPT_THREADS,
        { "--ctx-size", "-c", OPT_INT, &a->ctx, 0, 1 << 24, "N",
          "context size (default 0: prompt + n, or the model's with -n -1)" },
        OPT_BATCH,
        { "--chat", NULL, OPT_FLAG, &a->chat, 0, 0, NULL, "wrap the prompt in the model's chat template" },
        { "--chat-template", NULL, OPT_STR, &a->chat_template, 0, 0, "NAME",
          "llama2, vicuna, chatml or gemma (implies --chat)" },
        OPT_SYSTEM,
        { "--conversation --interactive -i", "-cnv", OPT_FLAG, &a->conversation, 0, 0, NULL,
          "a conversation on the terminal, as kvfold chat (-p, if given, is the first turn)" },
        { "--special", NULL, OPT_FLAG, &a->special, 0, 0, NULL, "parse special-token text in a raw prompt" },
        OPTS_MEDIA,
        { "--dump-tags", NULL, OPT_FLAG, &a->dump_tags, 0, 0, NULL, "print every prompt position's tag" },
        { "--dump-kv", NULL, OPT_STR, &a->dump_kv, 0, 0, "FILE",
          "write the positions each layer and kv head holds, after compression and at the end, as JSON" },
        { "--session", "--prompt-cache", OPT_STR, &a->session_file, 0, 0, "FILE",
          "start from the session saved in FILE "
          "as far as the prompt begins with its tokens, and save the compressed prompt there (llama.cpp's "
          "--prompt-cache)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC",
          "KV cache policy after the prompt, e.g. snapkv:budget=0.2 "
          "(see kvfold policies)" },
        OPTS_KV_STORAGE,
        OPT_NO_PROGRESS,
        OPT_JSON,
    };
    OPTS_RETURN(out, t);
}

/* Everything one run holds, released by gen_free. */
struct gen {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    struct kvf_session *s;
    struct kvf_session_params sp;
    struct kvf_sampler *smp;
    struct media_set media;
    struct kvf_prompt *pr;
    char *text, *prompt;   /* the input, and as the model sees it */
    int n_prompt;
    int n_cached;          /* --session: the prompt's first positions the saved session held */
    struct reply r;        /* what was generated */
    cJSON *per_layer;      /* entries per layer after compression */
    cJSON *dump;           /* --dump-kv */
    FILE *dump_f;          /* --dump-kv, open from the start */
    double prefill_ms, compress_ms;
    size_t kv_full, kv_kept;
    bool interrupted;      /* Ctrl-C during the prompt or the reply */
};

static void gen_free(struct gen *g) {
    cJSON_Delete(g->per_layer);
    cJSON_Delete(g->dump);
    if (g->dump_f) fclose(g->dump_f);
    free(g->r.text.s);
    kvf_prompt_free(g->pr);
    media_set_free(&g->media);
    kvf_sampler_free(g->smp);
    kvf_session_free(g->s);
    kvf_model_free(g->m);
    free(g->prompt);
    free(g->text);
}

/* Writes a token's text on one line: newlines, quotes, backslashes and
 * control bytes escaped. */
static void print_piece_escaped(const char *buf, int32_t n) {
    for (int k = 0; k < n; k++) {
        const unsigned char ch = (unsigned char)buf[k];
        if (ch == '\n') fputs("\\n", stdout);
        else if (ch == '"' || ch == '\\') printf("\\%c", ch);
        else if (ch < 0x20) printf("\\x%02x", ch);
        else putchar(ch);
    }
}

/* One line per position: pos, modality, image/frame index, grid row and
 * column, and the token (id and text) for text positions. */
static void print_tags(const struct kvf_model *m, const struct kvf_prompt *pr) {
    const struct kvf_tag *t = kvf_prompt_tags(pr);
    printf("# pos modality media row col token\n");
    for (int i = 0; i < kvf_prompt_n_tokens(pr); i++) {
        const int32_t id = kvf_prompt_token(pr, i);
        printf("%d %s %d %d %d", t[i].pos, kvf_modality_str(t[i].modality), t[i].media, t[i].row, t[i].col);
        if (id >= 0) {
            char buf[64];
            int32_t n = 0;
            if (kvf_token_to_piece(m, id, buf, sizeof buf, true, &n) != KVF_OK)
                n = 0;
            printf(" %d \"", id);
            print_piece_escaped(buf, n);
            putchar('"');
        }
        putchar('\n');
    }
}

/* [[pos, "modality", media, row, col, token], ...] */
static cJSON *tags_json(const struct kvf_prompt *pr) {
    cJSON *arr = cJSON_CreateArray();
    const struct kvf_tag *t = kvf_prompt_tags(pr);
    for (int i = 0; i < kvf_prompt_n_tokens(pr); i++) {
        cJSON *e = cJSON_CreateArray();
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].pos));
        cJSON_AddItemToArray(e, cJSON_CreateString(kvf_modality_str(t[i].modality)));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].media));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].row));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(t[i].col));
        cJSON_AddItemToArray(e, cJSON_CreateNumber(kvf_prompt_token(pr, i)));
        cJSON_AddItemToArray(arr, e);
    }
    return arr;
}

/* --session FILE, when it exists (llama.cpp's --prompt-cache): the saved
 * session replaces the new one when it shares a first part with the prompt
 * (token ids; a media row ends it), cut back to that part, less the last
 * position when it is the whole prompt (whose logits the reply needs). Its
 * policy is the file's. */
static int gen_resume(struct gen *g) {
    struct kvf_session *s = NULL;
    enum kvf_status st = kvf_session_load(g->m, g->a->session_file, g->a->threads, g->a->ctx, &s);
    if (st != KVF_OK) return fail(st, "generate: --session");
    const int n = MIN(kvf_session_n_past(s), kvf_prompt_n_tokens(g->pr));
    const int32_t *ids = kvf_session_tokens(s);
    int k = 0;
    while (k < n && ids[k] >= 0 && ids[k] == kvf_prompt_token(g->pr, k)) k++;
    if (k == kvf_prompt_n_tokens(g->pr)) k--;
    if (k > 0 && kvf_session_truncate(s, k) == KVF_OK) {
        kvf_session_free(g->s);
        g->s = s;
        g->n_cached = k;
        if (strcmp(kvf_session_kv_spec(s), g->a->kv ? g->a->kv : ""))
            fprintf(stderr, "kvfold: generate: --session %s: its policy goes on (%s)\n", g->a->session_file,
                    kvf_session_kv_spec(s)[0] ? kvf_session_kv_spec(s) : "full");
    } else {
        kvf_session_free(s);
        k = 0;
    }
    fprintf(stderr, "kvfold: generate: --session %s: %d of the prompt's %d positions were saved\n", g->a->session_file,
            k, kvf_prompt_n_tokens(g->pr));
    return 0;
}

/* The model, the prompt (chat template, media, tags), the session and the
 * sampler. */
static int gen_open(struct gen *g) {
    const struct args *a = g->a;
    size_t len = 0;
    int rc;
    if ((a->dump_kv && (rc = out_open("--dump-kv", a->dump_kv, &g->dump_f))) ||
        (rc = input_text("generate", a, &g->text, &len)) || (rc = load_model(a, &g->m)) ||
        (rc = build_prompt(a, g->m, g->text, &g->prompt)) || (rc = media_build(a, g->m, &g->media)))
        return rc;
    /* BOS as the model's tokenizer says; chat markup is control-token text. */
    if ((rc = prompt_make(g->m, g->prompt, &g->media, wants_chat(a) || a->special, &g->pr)))
        return rc;
    g->n_prompt = kvf_prompt_n_tokens(g->pr);
    if (a->dump_tags && !a->json)
        print_tags(g->m, g->pr);
    if (kvf_prompt_is_synthetic(g->pr))
        fprintf(stderr, "kvfold: note: the prompt holds synthetic (pseudo-image) segments; results are synthetic\n");
    /* -n -1: the session's default context (the model's, capped) */
    g->sp = session_params(a, a->ctx > 0 ? a->ctx : a->n_predict < 0 ? 0 : g->n_prompt + a->n_predict);
    if ((rc = open_session(g->m, &g->sp, "generate: cannot create the session", &g->s)) ||
        (rc = sampler_open(a, &g->smp)))
        return rc;
    sampler_accept_prompt(g->smp, g->pr);
    kvf_model_get_info(g->m, &g->info);
    return a->session_file && access(a->session_file, F_OK) == 0 ? gen_resume(g) : 0;
}

/* The prompt through the model, then compressed by the policy. */
static int gen_prefill(struct gen *g) {
    enum kvf_status st;
    double t0 = now_ms();
    int rc = prompt_prefill(g->s, g->pr, g->n_cached, g->a, "generate: prompt", &g->interrupted);
    if (rc)
        return rc;
    g->prefill_ms = now_ms() - t0;
    g->n_prompt = kvf_session_n_past(g->s); /* what Ctrl-C let in */
    g->kv_full = kvf_session_kv_full_bytes(g->s);
    t0 = now_ms();
    if ((st = kvf_session_compress(g->s)) != KVF_OK)
        return fail(st, "generate: kv compression");
    g->compress_ms = now_ms() - t0;
    g->kv_kept = kvf_session_kv_bytes(g->s);
    /* --session: the compressed prompt, for the next run that starts with it */
    if (g->a->session_file && !g->interrupted && (st = kvf_session_save(g->s, g->a->session_file)) != KVF_OK)
        return fail(st, "generate: --session");
    g->per_layer = kv_per_layer_json(g->s, &g->info);
    if (g->a->dump_kv) {
        g->dump = cJSON_CreateObject();
        cJSON_AddStringToObject(g->dump, "policy", g->a->kv ? g->a->kv : "full");
        cJSON_AddNumberToObject(g->dump, "n_prompt", g->n_prompt);
        cJSON_AddItemToObject(g->dump, "compressed", kv_positions_json(g->s, &g->info));
        cJSON_AddItemToObject(g->dump, "merged", kv_merges_json(g->s, &g->info));
    }
    return 0;
}

/* --dump-kv: the positions after compression, and now. */
static int gen_write_dump(struct gen *g) {
    cJSON_AddNumberToObject(g->dump, "n_past", kvf_session_n_past(g->s));
    cJSON_AddItemToObject(g->dump, "final", kv_positions_json(g->s, &g->info));
    char *txt = cJSON_PrintUnformatted(g->dump);
    const int rc = out_write("--dump-kv", g->a->dump_kv, g->dump_f, txt);
    g->dump_f = NULL; /* closed */
    free(txt);
    return rc;
}

static cJSON *gen_kv_json(struct gen *g, size_t kv_bytes) {
    const struct args *a = g->a;
    cJSON *kv = cJSON_CreateObject();
    cJSON_AddStringToObject(kv, "policy", a->kv ? a->kv : "full");
    kv_types_json(kv, "type", a);
    cJSON_AddNumberToObject(kv, "bytes", (double)kv_bytes);
    size_t pos = 0, per_cache = 0;
    if (kvf_kv_position_bytes(g->m, a->type_k_id, a->type_v_id, &pos, &per_cache) == KVF_OK) {
        cJSON_AddNumberToObject(kv, "bytes_per_position", (double)pos);
        cJSON_AddNumberToObject(kv, "bytes_per_cache", (double)per_cache);
    }
    kv_kept_json(kv, g->kv_full, g->kv_kept);
    cJSON_AddNumberToObject(kv, "peak_bytes", (double)kvf_session_kv_peak_bytes(g->s));
    cJSON_AddNumberToObject(kv, "peak_entries", kvf_session_kv_peak_entries(g->s));
    cJSON_AddItemToObject(kv, "per_layer", g->per_layer);
    g->per_layer = NULL;
    cJSON_AddItemToObject(kv, "per_layer_final", kv_per_layer_json(g->s, &g->info));
    cJSON *budgets = kv_layer_budgets_json(g->s, &g->info);
    if (budgets)
        cJSON_AddItemToObject(kv, "layer_budgets", budgets);
    cJSON_AddNumberToObject(kv, "n_ctx", g->sp.n_ctx);
    cJSON_AddNumberToObject(kv, "n_past", kvf_session_n_past(g->s));
    return kv;
}

static int gen_report_json(struct gen *g, double ms_per_tok, size_t kv_bytes, size_t rss) {
    const struct args *a = g->a;
    char *clean = utf8_sanitize(g->r.text.s ? g->r.text.s : "", g->r.text.n);
    if (!clean)
        return fail(KVF_ERR_NOMEM, "generate");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "text", clean);
    free(clean);
    cJSON_AddBoolToObject(o, "interrupted", g->interrupted);
    cJSON_AddStringToObject(o, "model", g->info.name);
    cJSON_AddStringToObject(o, "build", kvf_build_info());
    cJSON_AddNumberToObject(o, "n_prompt", g->n_prompt);
    cJSON_AddNumberToObject(o, "n_prompt_cached", g->n_cached);
    cJSON_AddNumberToObject(o, "n_media", g->media.n);
    cJSON_AddBoolToObject(o, "synthetic", kvf_prompt_is_synthetic(g->pr));
    cJSON_AddNumberToObject(o, "n_gen", g->r.n_gen);
    cJSON_AddStringToObject(o, "stop", g->r.stop);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, "vision_encode_ms", g->media.encode_ms);
    cJSON_AddNumberToObject(t, "prefill_ms", g->prefill_ms);
    cJSON_AddNumberToObject(t, "prefill_tok_per_s", g->prefill_ms > 0 ? g->n_prompt * 1e3 / g->prefill_ms : 0);
    cJSON_AddNumberToObject(t, "decode_ms", g->r.decode_ms);
    cJSON_AddNumberToObject(t, "decode_ms_per_token", ms_per_tok);
    cJSON_AddNumberToObject(t, "decode_tok_per_s", ms_per_tok > 0 ? 1e3 / ms_per_tok : 0);
    cJSON_AddNumberToObject(t, "compress_ms", g->compress_ms);
    cJSON_AddItemToObject(o, "kv", gen_kv_json(g, kv_bytes));
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
    cJSON *sa = cJSON_AddObjectToObject(o, "sampler");
    cJSON_AddNumberToObject(sa, "temp", f32_json(a->temp));
    cJSON_AddNumberToObject(sa, "top_k", a->top_k);
    cJSON_AddNumberToObject(sa, "top_p", f32_json(a->top_p));
    cJSON_AddNumberToObject(sa, "min_p", f32_json(a->min_p));
    cJSON_AddNumberToObject(sa, "seed", (double)a->seed);
    cJSON_AddNumberToObject(sa, "repeat_penalty", f32_json(a->repeat_penalty));
    cJSON_AddNumberToObject(sa, "repeat_last_n", a->repeat_last_n);
    cJSON_AddBoolToObject(sa, "ignore_eos", a->ignore_eos);
    if (a->dump_tags)
        cJSON_AddItemToObject(o, "tags", tags_json(g->pr));
    return print_json(o);
}

static int gen_report(struct gen *g) {
    const double ms_per_tok = g->r.n_decoded ? g->r.decode_ms / g->r.n_decoded : 0;
    const size_t kv_bytes = kvf_session_kv_bytes(g->s), rss = kvf_peak_rss_bytes();
    int rc = g->dump ? gen_write_dump(g) : 0;
    if (rc)
        return rc;
    if (g->a->json)
        return gen_report_json(g, ms_per_tok, kv_bytes, rss);
    putchar('\n');
    fflush(stdout);
    fprintf(stderr,
            "kvfold: prompt %d tokens in %.1f ms (%.1f tok/s); generated %d tokens, %.2f ms/token "
            "(%.1f tok/s); stop %s; kv %.2f MiB; peak rss %.1f MiB\n",
            g->n_prompt, g->prefill_ms, g->prefill_ms > 0 ? g->n_prompt * 1e3 / g->prefill_ms : 0, g->r.n_gen,
            ms_per_tok, ms_per_tok > 0 ? 1e3 / ms_per_tok : 0, g->r.stop, kv_bytes / MIB, rss / MIB);
    return 0;
}

static int cmd_generate(const struct args *a) {
    /* Reject an unknown template name before spending time on the model:
     * an empty conversation fails only for a name that does not exist. */
    int32_t n;
    if (a->chat_template && kvf_chat_apply(NULL, a->chat_template, NULL, 0, false, NULL, 0, &n) != KVF_ERR_BUFFER) {
        print_error("generate: %s", kvf_last_error());
        return EXIT_USAGE;
    }
    if (a->n_predict == 0) {
        print_error("generate: -n must be -1 (until the end of generation or of the context) or at least 1");
        return EXIT_USAGE;
    }
    if (a->conversation)
        return chat_run(a);
    struct gen g = { .a = a, .r.stop = "interrupted" };
    int rc = gen_open(&g);
    if (!rc)
        rc = gen_prefill(&g);
    if (!rc && !g.interrupted) {
        rc = reply_generate(g.s, g.m, g.smp, a, !a->json, "generate", &g.r);
        g.interrupted = !strcmp(g.r.stop, "interrupted");
    }
    if (!rc)
        rc = gen_report(&g);
    gen_free(&g);
    return rc ? rc : g.interrupted ? EXIT_INTERRUPTED : 0;
}

const struct command generate_command = {
    .name = "generate",
    .summary = "Generate text from a prompt, streaming it to stdout; timings go to stderr.",
    .usage = "-m FILE (-p TEXT | -f FILE) [options]",
    .details = "Decoding is greedy by default (--temp 0), so runs are reproducible; with --temp > 0 the\n"
               "sampler applies temperature, then top-k, top-p and min-p, and draws with --seed.\n"
               "Generation stops at an end-of-generation token, after -n tokens, at an -r text or at the end\n"
               "of the context. --json prints one object (text, n_prompt, n_gen, stop, interrupted, timings,\n"
               "kv, peak_rss_bytes) instead of streaming. Ctrl-C stops the prompt or the reply where it is\n"
               "and reports as usual (stop \"interrupted\", exit status 130); a second Ctrl-C quits at once.\n"
               "-cnv runs kvfold chat.",
    .run = cmd_generate,
    .defaults = generate_defaults,
    .opts = generate_opts,
};
