/* kvfold bench: prefill and decode speed, like llama-bench, and the time to
 * first token of a multimodal prompt. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>

static double mean_of(const double *x, int n) {
    double s = 0;
    for (int i = 0; i < n; i++)
        s += x[i];
    return n ? s / n : 0;
}

/* Sample standard deviation (0 for fewer than two values). */
static double std_of(const double *x, int n) {
    if (n < 2)
        return 0;
    double m = mean_of(x, n), s = 0;
    for (int i = 0; i < n; i++)
        s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (n - 1));
}

static void bench_defaults(struct args *a) {
    a->n_prompt_bench = 512;
    a->n_predict = 128;
    a->reps = 3;
    a->batch = kvf_session_default_params().n_batch;
    a->parallel = 1;
}

static int bench_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        { "--n-prompt", "-p", OPT_INT, &a->n_prompt_bench, 0, 1 << 20, "N", "prefill test length, 0 = skip (default 512)" },
        { "--n-gen", "-n", OPT_INT, &a->n_predict, 0, 1 << 20, "N", "decode test length, 0 = skip (default 128)" },
        { "--repetitions", "-r", OPT_INT, &a->reps, 1, 1000, "N", "timed runs of each test (default 3)" },
        { "--no-warmup", NULL, OPT_FLAG, &a->no_warmup, 0, 0, NULL, "skip the untimed first run of each test" },
        { "--depth", "-d", OPT_INT, &a->depth, 0, 1 << 24, "N", "decode after a prefilled (and, with --kv, compressed) context of N tokens (default: -p with --kv, else 0)" },
        OPT_BATCH, OPT_THREADS, OPT_JSON, OPTS_MEDIA,
        { "--images", NULL, OPT_INT, &a->n_images, 0, 4096, "N", "add N synthetic 640x480 images (needs a vision tower)" },
        { "--kv", NULL, OPT_STR, &a->kv, 0, 0, "SPEC", "KV policy: tgN then decodes after a -p prompt compressed by it" },
        OPT_KV_TYPE,
        { "--parallel", "-np", OPT_INT, &a->parallel, 1, 256, "N", "decode N sessions together (kvf_session_decode_batch); tg reports their total tokens/s (default 1)" },
    };
    OPTS_RETURN(out, t);
}

struct bench_result {
    char name[32];
    int n_tokens, n_par; /* per session; sessions decoding together */
    double mean, std;   /* tokens per second */
    size_t kv_bytes;    /* after the test   */
    size_t kv_peak;     /* the most allocated during the test, prefill included */
    double prefill_ms;  /* tg after a compressed prompt: mean prefill time of that prompt */
    double compress_ms; /*   and mean kvf_session_compress time, */
    size_t kv_full, kv_kept; /* KV bytes a full cache holds for it and what the policy keeps, */
    cJSON *per_layer;   /*   entries per kv head of each layer after it (owned) */
};

/* Runs one test (prefill of n tokens, or n single-token decodes) reps + 1
 * times; the first run warms caches and is not timed (unless !warmup). Decodes follow a
 * prefilled and compressed context of n_ctx_pre tokens (0: an empty cache),
 * so that policies can be compared at the same prompt length. A prefill runs
 * in ss[0]; decodes run in all n_par sessions together, each step one
 * kvf_session_decode_batch, and count the tokens of all. */
static enum kvf_status bench_run(struct kvf_session **ss, int n_par, const struct kvf_model_info *info,
                                 const int32_t *tok, int n, bool decode, int n_ctx_pre, int reps, bool warmup,
                                 struct bench_result *r) {
    double tps[1000], compress = 0, prefill = 0;
    int32_t step[256];
    if (!decode)
        n_par = 1;
    for (int rep = warmup ? 0 : 1; rep <= reps; rep++) {
        enum kvf_status st = KVF_OK;
        for (int k = 0; k < n_par && st == KVF_OK; k++) {
            struct kvf_session *s = ss[k];
            kvf_session_reset(s);
            if (!decode || n_ctx_pre == 0)
                continue;
            double t0 = now_ms();
            st = kvf_session_prefill(s, tok, n_ctx_pre, NULL);
            if (rep > 0)
                prefill += (now_ms() - t0) / n_par;
            r->kv_full = kvf_session_kv_full_bytes(s);
            t0 = now_ms();
            if (st == KVF_OK)
                st = kvf_session_compress(s);
            if (rep > 0)
                compress += (now_ms() - t0) / n_par;
            r->kv_kept = kvf_session_kv_bytes(s);
            if (!r->per_layer)
                r->per_layer = kv_per_layer_json(s, info);
        }
        double t0 = now_ms();
        if (decode) {
            for (int i = 0; i < n && st == KVF_OK; i++) {
                for (int k = 0; k < n_par; k++)
                    step[k] = tok[n_ctx_pre + i];
                st = kvf_session_decode_batch(ss, step, n_par);
            }
        } else if (st == KVF_OK) {
            st = kvf_session_prefill(ss[0], tok, n, NULL);
        }
        if (st != KVF_OK)
            return st;
        double ms = now_ms() - t0;
        if (rep > 0)
            tps[rep - 1] = ms > 0 ? (double)n * n_par * 1e3 / ms : 0;
    }
    const int o = decode && n_ctx_pre > 0 ? snprintf(r->name, sizeof r->name, "tg%d@%d", n, n_ctx_pre)
                                          : snprintf(r->name, sizeof r->name, "%s%d", decode ? "tg" : "pp", n);
    if (n_par > 1 && o > 0 && (size_t)o < sizeof r->name)
        snprintf(r->name + o, sizeof r->name - (size_t)o, "x%d", n_par);
    r->n_tokens = n;
    r->n_par = n_par;
    r->mean = mean_of(tps, reps);
    r->std = std_of(tps, reps);
    r->kv_bytes = r->kv_peak = 0;
    for (int k = 0; k < n_par; k++) {
        r->kv_bytes += kvf_session_kv_bytes(ss[k]);
        r->kv_peak += kvf_session_kv_peak_bytes(ss[k]);
    }
    r->prefill_ms = prefill / reps;
    r->compress_ms = compress / reps;
    return KVF_OK;
}

/* Multimodal test: vision encoding per image, then time to first token
 * (encoding + prefill of the whole prompt) and the KV bytes it leaves. */
struct bench_mm {
    int n_media, n_encoded, n_tokens;
    bool synthetic;
    double encode_ms_per_image, prefill_ms, compress_ms, ttft_ms;
    size_t kv_bytes, kv_peak; /* after the prompt (compressed with --kv); the most held during it */
};

/* Seeded RGB noise: what an image holds does not change the work done. */
static int bench_images(const struct args *a, const struct kvf_model *m, struct media_set *ms) {
    enum { W = 640, H = 480 };
    uint8_t *rgb = malloc((size_t)W * H * 3);
    if (!rgb)
        return fail(KVF_ERR_NOMEM, "bench");
    uint64_t x = 0x9e3779b97f4a7c15ull;
    int rc = 0;
    for (int i = 0; !rc && i < a->n_images; i++) {
        for (size_t k = 0; k < (size_t)W * H * 3; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            rgb[k] = (uint8_t)(x >> 56);
        }
        struct kvf_image *img;
        enum kvf_status st = kvf_image_from_rgb(W, H, rgb, &img);
        if (st != KVF_OK) {
            rc = fail(st, "bench");
            break;
        }
        rc = media_encode(a, m, img, KVF_MOD_IMAGE, "synthetic image", ms);
        kvf_image_free(img);
    }
    free(rgb);
    return rc;
}

/* "<image>\n" per image, "<video>\n" per run of frames, then a question. */
static char *bench_mm_text(const struct media_set *ms) {
    char *t = malloc((size_t)ms->n * 9 + 64);
    if (!t)
        return NULL;
    size_t o = 0;
    for (int i = 0; i < ms->n; i++) {
        const bool frame = kvf_media_modality(ms->items[i]) == KVF_MOD_VIDEO;
        if (frame && i > 0 && kvf_media_modality(ms->items[i - 1]) == KVF_MOD_VIDEO)
            continue;
        o += (size_t)sprintf(t + o, "%s\n", frame ? KVF_MARKER_VIDEO : KVF_MARKER_IMAGE);
    }
    sprintf(t + o, "Describe what you see.");
    return t;
}

static int bench_media(const struct args *a, const struct kvf_model *m, const struct kvf_session_params *base,
                       struct bench_mm *r) {
    struct media_set ms = { 0 };
    struct kvf_prompt *pr = NULL;
    struct kvf_session *s = NULL;
    char *text = NULL;
    int rc = media_build(a, m, &ms);
    if (!rc)
        rc = bench_images(a, m, &ms);
    if (rc)
        goto done;
    if (!(text = bench_mm_text(&ms))) {
        rc = fail(KVF_ERR_NOMEM, "bench");
        goto done;
    }
    if ((rc = prompt_make(m, text, &ms, false, &pr)))
        goto done;
    struct kvf_session_params sp = *base;
    sp.n_ctx = kvf_prompt_n_tokens(pr);
    enum kvf_status st = kvf_session_init(m, &sp, &s);
    double best = 0, compress = 0;
    for (int rep = a->no_warmup ? 1 : 0; st == KVF_OK && rep <= a->reps; rep++) {
        kvf_session_reset(s);
        const double t0 = now_ms();
        st = kvf_session_prefill_prompt(s, pr, NULL);
        const double t1 = now_ms();
        if (st == KVF_OK)
            st = kvf_session_compress(s);
        const double ms_run = t1 - t0, ms_compress = now_ms() - t1;
        if (rep == 1 || (rep > 1 && ms_run + ms_compress < best + compress))
            best = ms_run, compress = ms_compress;
    }
    if (st != KVF_OK) {
        rc = fail(st, "bench: multimodal prompt");
        goto done;
    }
    *r = (struct bench_mm){
        .n_media = ms.n, .n_encoded = ms.n_encoded, .n_tokens = kvf_prompt_n_tokens(pr),
        .synthetic = kvf_prompt_is_synthetic(pr),
        .encode_ms_per_image = ms.n_encoded ? ms.encode_ms / ms.n_encoded : 0, .prefill_ms = best,
        .compress_ms = compress, .ttft_ms = ms.encode_ms + best + compress, .kv_bytes = kvf_session_kv_bytes(s),
        .kv_peak = kvf_session_kv_peak_bytes(s),
    };
done:
    kvf_session_free(s);
    kvf_prompt_free(pr);
    free(text);
    media_set_free(&ms);
    return rc;
}

/* Random ids, as llama-bench: content does not change the work done. */
static int32_t *bench_tokens(int n, int n_vocab) {
    int32_t *tok = malloc((size_t)n * sizeof *tok);
    uint64_t x = 0x2545f4914f6cdd1dull;
    for (int i = 0; tok && i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        tok[i] = (int32_t)(x % (uint64_t)n_vocab);
    }
    return tok;
}

static cJSON *bench_test_json(const struct args *a, const struct kvf_model_info *info, struct bench_result *r) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", r->name);
    cJSON_AddNumberToObject(t, "n_tokens", r->n_tokens);
    cJSON_AddNumberToObject(t, "tok_per_s", r->mean);
    cJSON_AddNumberToObject(t, "tok_per_s_std", r->std);
    cJSON_AddNumberToObject(t, "kv_bytes", (double)r->kv_bytes);
    cJSON_AddNumberToObject(t, "kv_peak_bytes", (double)r->kv_peak);
    cJSON_AddNumberToObject(t, "parallel", r->n_par);
    if (r->name[0] == 't') {
        /* one step decodes a token in each session */
        cJSON_AddNumberToObject(t, "decode_ms_per_token", r->mean > 0 ? 1e3 * r->n_par / r->mean : 0);
        cJSON_AddNumberToObject(t, "prefill_ms", r->prefill_ms);
        cJSON_AddNumberToObject(t, "compress_ms", r->compress_ms);
    }
    if (r->per_layer) { /* the context the decode test followed */
        cJSON *kv = cJSON_AddObjectToObject(t, "kv");
        cJSON_AddStringToObject(kv, "policy", a->kv ? a->kv : "full");
        kv_kept_json(kv, r->kv_full, r->kv_kept);
        cJSON_AddNumberToObject(kv, "peak_bytes", (double)r->kv_peak);
        cJSON_AddItemToObject(kv, "per_layer", r->per_layer);
        r->per_layer = NULL;
    }
    if (r->name[0] == 't')
        cJSON_AddNumberToObject(t, "weight_bytes_per_s", (double)info->weight_bytes * r->mean / r->n_par);
    return t;
}

static cJSON *bench_mm_json(const struct bench_mm *mmr) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "n_media", mmr->n_media);
    cJSON_AddNumberToObject(t, "n_encoded", mmr->n_encoded);
    cJSON_AddBoolToObject(t, "synthetic", mmr->synthetic);
    cJSON_AddNumberToObject(t, "n_tokens", mmr->n_tokens);
    cJSON_AddNumberToObject(t, "encode_ms_per_image", mmr->encode_ms_per_image);
    cJSON_AddNumberToObject(t, "prefill_ms", mmr->prefill_ms);
    cJSON_AddNumberToObject(t, "compress_ms", mmr->compress_ms);
    cJSON_AddNumberToObject(t, "ttft_ms", mmr->ttft_ms);
    cJSON_AddNumberToObject(t, "kv_bytes", (double)mmr->kv_bytes);
    cJSON_AddNumberToObject(t, "kv_peak_bytes", (double)mmr->kv_peak);
    return t;
}

static int bench_report_json(const struct args *a, const struct kvf_model_info *info, struct bench_result *res,
                             int n_res, const struct bench_mm *mmr, size_t rss) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", info->name);
    cJSON_AddStringToObject(o, "arch", info->arch);
    cJSON_AddNumberToObject(o, "n_params", (double)info->n_params);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)info->weight_bytes);
    cJSON_AddStringToObject(o, "weight_types", info->weight_types);
    cJSON_AddNumberToObject(o, "n_threads", a->threads);
    cJSON_AddNumberToObject(o, "n_batch", a->batch);
    cJSON_AddStringToObject(o, "simd", kvf_simd_level());
    cJSON_AddStringToObject(o, "build", kvf_build_info());
    cJSON_AddNumberToObject(o, "repetitions", a->reps);
    cJSON_AddStringToObject(o, "kv", a->kv ? a->kv : "full");
    cJSON_AddStringToObject(o, "kv_type", kvf_kv_type_name(a->kv_type_id));
    cJSON *tests = cJSON_AddArrayToObject(o, "tests");
    for (int i = 0; i < n_res; i++)
        cJSON_AddItemToArray(tests, bench_test_json(a, info, &res[i]));
    if (mmr)
        cJSON_AddItemToObject(o, "multimodal", bench_mm_json(mmr));
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
    return print_json(o);
}

static void bench_report_text(const struct args *a, const struct kvf_model_info *info, const struct bench_result *res,
                              int n_res, const struct bench_mm *mmr, size_t rss) {
    printf("model %s (%s, %.1f M params, %.1f MiB of weights), %s, batch %d, kv %s, %d repetitions\n", info->name,
           info->arch, (double)info->n_params / 1e6, (double)info->weight_bytes / MIB, kvf_simd_level(),
           a->batch, kvf_kv_type_name(a->kv_type_id), a->reps);
    for (int i = 0; i < n_res; i++) {
        const struct bench_result *r = &res[i];
        printf("%-8s %10.2f ± %-8.2f tok/s   kv %8.2f MiB", r->name, r->mean, r->std, r->kv_bytes / MIB);
        if (r->name[0] == 't')
            printf("   weights %.2f GB/s   %.3f ms/%s", (double)info->weight_bytes * r->mean / r->n_par / 1e9,
                   r->mean > 0 ? 1e3 * r->n_par / r->mean : 0, r->n_par > 1 ? "step" : "token");
        if (r->compress_ms > 0)
            printf("   compress %.2f ms (%.1f%% of the %.0f ms prefill)", r->compress_ms,
                   r->prefill_ms > 0 ? 100 * r->compress_ms / r->prefill_ms : 0, r->prefill_ms);
        putchar('\n');
    }
    if (mmr)
        printf("mm       %d media (%d encoded%s), %d tokens: encode %.2f ms/image, prefill %.2f ms, "
               "compress %.2f ms, ttft %.2f ms, kv %.2f MiB (peak %.2f MiB)\n", mmr->n_media, mmr->n_encoded,
               mmr->synthetic ? ", synthetic" : "", mmr->n_tokens, mmr->encode_ms_per_image, mmr->prefill_ms,
               mmr->compress_ms, mmr->ttft_ms, mmr->kv_bytes / MIB, mmr->kv_peak / MIB);
    printf("peak rss %.1f MiB\n", rss / MIB);
}

static int cmd_bench(const struct args *a) {
    const bool mm = a->n_media > 0 || a->n_images > 0;
    if (a->n_prompt_bench == 0 && a->n_predict == 0 && !mm) {
        print_error("bench: nothing to run (-p 0 and -n 0)");
        return EXIT_USAGE;
    }
    struct kvf_model *m = NULL;
    struct kvf_session *ss[256] = { NULL };
    int32_t *tok = NULL;
    struct bench_result res[2] = { 0 };
    struct bench_mm mmr = { 0 };
    int n_res = 0;
    int rc = load_model(a, &m);
    if (rc)
        return rc;
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    /* Decoding follows a context of --depth tokens, by default (with --kv)
     * the compressed -p prompt. */
    const int n_pre = a->depth > 0 ? a->depth : a->kv ? a->n_prompt_bench : 0;
    const int n_max = MAX(MAX(a->n_prompt_bench, n_pre + a->n_predict), 1);
    const struct kvf_session_params sp = session_params(a, n_max);
    enum kvf_status st = KVF_OK;
    for (int k = 0; k < a->parallel; k++)
        if ((rc = open_session(m, &sp, "bench: cannot create the session", &ss[k])))
            goto done;
    if (!(tok = bench_tokens(n_max, info.n_vocab))) {
        rc = fail(KVF_ERR_NOMEM, "bench");
        goto done;
    }
    if (mm && (rc = bench_media(a, m, &sp, &mmr)))
        goto done;
    if (a->n_prompt_bench > 0)
        st = bench_run(ss, 1, &info, tok, a->n_prompt_bench, false, 0, a->reps, !a->no_warmup, &res[n_res++]);
    if (st == KVF_OK && a->n_predict > 0)
        st = bench_run(ss, a->parallel, &info, tok, a->n_predict, true, n_pre, a->reps, !a->no_warmup,
                       &res[n_res++]);
    if (st != KVF_OK) {
        rc = fail(st, "bench");
        goto done;
    }
    const size_t rss = kvf_peak_rss_bytes();
    if (a->json)
        rc = bench_report_json(a, &info, res, n_res, mm ? &mmr : NULL, rss);
    else
        bench_report_text(a, &info, res, n_res, mm ? &mmr : NULL, rss);
done:
    for (int i = 0; i < n_res; i++)
        cJSON_Delete(res[i].per_layer);
    free(tok);
    for (int k = 0; k < a->parallel; k++)
        kvf_session_free(ss[k]);
    kvf_model_free(m);
    return rc;
}

const struct command bench_command = {
    .name = "bench",
    .summary = "Prefill and decode speed, like llama-bench.",
    .usage = "-m FILE [-p N] [-n N] [-r REPS] [options]",
    .details = "ppN prefills N random tokens at once; tgN decodes N tokens one at a time. Each runs\n"
               "once untimed, then -r times; reported as mean ± std tokens/s, with the KV cache size,\n"
               "peak resident memory, and for tg the weight bytes read per second. With --parallel N,\n"
               "tgNxP decodes in N sessions at once (one batched step each token, as a server runs\n"
               "them) and reports their total tokens/s and KV bytes.",
    .run = cmd_bench,
    .defaults = bench_defaults,
    .opts = bench_opts,
};
