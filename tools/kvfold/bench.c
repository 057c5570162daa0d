/* kvfold bench: prefill and decode speed, like llama-bench: comma lists of
 * lengths, context depths and thread counts, and several --kv policies, run
 * as their cross product and reported as llama-bench's markdown table, JSON
 * or CSV; and the time to first token of a multimodal prompt. */
#include "cli.h"

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* The comma-list options, indexes into args.bench_lists. */
enum { L_PROMPT, L_GEN, L_THREADS, L_DEPTH, N_LISTS };
#define LIST_MAX 32

static const struct list_opt {
    const char *lng, *shrt, *help;
    int hi;
} list_opts[N_LISTS] = {
    [L_PROMPT] = { "--n-prompt", "-p", "prefill test lengths, 0 = none (default 512)", 1 << 20 },
    [L_GEN] = { "--n-gen", "-n", "decode test lengths, 0 = none (default 128)", 1 << 20 },
    [L_THREADS] = { "--threads", "-t", "thread counts, 0 = all cores (default 0)", 1024 },
    [L_DEPTH] = { "--depth --n-depth", "-d", "tg after a context of N tokens, compressed by --kv (default: each -p "
                  "with --kv, else 0)", 1 << 24 },
};

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
    a->bench_lists[L_PROMPT] = "512";
    a->bench_lists[L_GEN] = "128";
    a->bench_lists[L_THREADS] = "0";
    a->reps = 3;
    a->batch = kvf_session_default_params().n_batch;
    a->parallel = 1;
}

#define OPT_INT_LIST(k) \
    { list_opts[k].lng, list_opts[k].shrt, OPT_STR, &a->bench_lists[k], 0, list_opts[k].hi, "N,...", list_opts[k].help }

static int bench_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        OPT_INT_LIST(L_PROMPT),
        OPT_INT_LIST(L_GEN),
        { "--repetitions", "-r", OPT_INT, &a->reps, 1, 1000, "N", "timed runs of each test (default 3)" },
        { "--no-warmup", NULL, OPT_FLAG, &a->no_warmup, 0, 0, NULL, "skip the untimed first run of each test" },
        OPT_INT_LIST(L_DEPTH),
        OPT_BATCH,
        OPT_INT_LIST(L_THREADS),
        { "--output", "-o", OPT_STR, &a->bench_format, 0, 0, "FORMAT",
          "md (llama-bench's markdown table, default), json (an array, one object per test) or csv" },
        { "--json", NULL, OPT_FLAG, &a->json, 0, 0, NULL,
          "print one JSON object on stdout: the model, every test (\"tests\") and the peak memory" },
        OPTS_MEDIA,
        { "--images", NULL, OPT_INT, &a->n_images, 0, 4096, "N",
          "add N synthetic 640x480 images (needs a vision tower)" },
        { "--kv", NULL, OPT_LIST, &a->kvs, 0, 0, "SPEC",
          "KV policy (repeatable: each runs every test; none: the "
          "full cache); tgN then decodes after a -p prompt compressed by it" },
        OPTS_KV_STORAGE,
        { "--parallel", "-np", OPT_INT, &a->parallel, 1, 256, "N",
          "decode N sessions together (kvf_session_decode_batch); tg reports their total tokens/s (default 1)" },
        { "--bandwidth", NULL, OPT_FLAG, &a->bandwidth, 0, 0, NULL,
          "measure the memory read bandwidth at each thread count first, and state each decode test's "
          "weight stream as a share of it" },
        { "--explain", NULL, OPT_FLAG, &a->explain, 0, 0, NULL,
          "say which kernels were chosen for this CPU and why (also in --json and -o json as \"kernels\")" },
        OPT_NO_PROGRESS,
    };
    OPTS_RETURN(out, t);
}

struct int_list { int v[LIST_MAX], n; };

/* "16,32": integers in [0, hi], at most LIST_MAX; an empty item, a sign, a
 * space or anything else is refused. */
static bool parse_int_list(const char *s, int hi, struct int_list *l) {
    l->n = 0;
    for (const char *p = s;; p++) {
        if (*p < '0' || *p > '9' || l->n == LIST_MAX)
            return false;
        char *end;
        errno = 0;
        const long x = strtol(p, &end, 10);
        if (errno || x > hi)
            return false;
        l->v[l->n++] = (int)x;
        if (*end == '\0')
            return true;
        if (*end != ',')
            return false;
        p = end;
    }
}

static int count_nonzero(const struct int_list *l) {
    int n = 0;
    for (int i = 0; i < l->n; i++)
        n += l->v[i] != 0;
    return n;
}

enum bench_format { FMT_MD, FMT_JSON, FMT_CSV, FMT_REPORT /* --json */ };

/* The lists, the --kv specs and the format: 0 or a usage error. */
static int bench_check(const struct args *a, struct int_list l[N_LISTS], enum bench_format *fmt) {
    for (int k = 0; k < N_LISTS; k++) {
        const char *s = a->bench_lists[k];
        if (!s) {
            l[k].n = 0;
        } else if (!parse_int_list(s, list_opts[k].hi, &l[k])) {
            print_error("bench: option '%.*s': '%s' is not a comma list of at most %d integers in [0, %d]",
                        NAME1(list_opts[k].lng), s, LIST_MAX, list_opts[k].hi);
            return EXIT_USAGE;
        }
    }
    for (int i = 0; i < a->kvs.n; i++)
        if (kvf_kv_policy_check(a->kvs.v[i]) != KVF_OK) {
            print_error("bench: --kv: %s (see kvfold policies)", kvf_last_error());
            return EXIT_USAGE;
        }
    *fmt = a->json ? FMT_REPORT : FMT_MD;
    if (!a->bench_format)
        return 0;
    if (a->json) {
        print_error("bench: give one of -o %s and --json", a->bench_format);
        return EXIT_USAGE;
    }
    static const char *const names[] = { [FMT_MD] = "md", [FMT_JSON] = "json", [FMT_CSV] = "csv" };
    int f = 0;
    while (f < (int)COUNT_OF(names) && strcmp(a->bench_format, names[f]) != 0)
        f++;
    if (f == (int)COUNT_OF(names)) {
        print_error("bench: option '--output': '%s' is not one of md, json, csv", a->bench_format);
        return EXIT_USAGE;
    }
    *fmt = (enum bench_format)f;
    return 0;
}

enum test_kind { TEST_MM, TEST_PP, TEST_TG };

/* One test of the cross product: what it runs and what it measured. */
struct bench_row {
    enum test_kind kind;
    const char *kv;      /* --kv spec; NULL without --kv: the full cache */
    int threads;         /* as given: 0 = all cores */
    int n, depth;        /* pp, tg: tokens of the test; tg: the context it decodes after */
    char name[32];       /* pp512, tg128, tg128@512, tg32x4 (--parallel), mm1174 (prompt tokens) */
    bool done;           /* every repetition ran (not stopped by Ctrl-C) */
    int n_par;           /* sessions decoding together */
    double mean, std;    /* tokens per second; mm: prompt tokens per second of the time to first token */
    size_t kv_bytes;     /* after the test   */
    size_t kv_peak;      /* the most allocated during the test, prefill included */
    double prefill_ms;   /* tg after a context: mean prefill time of that context; mm: of the prompt */
    double compress_ms;  /*   and mean kvf_session_compress time, */
    size_t kv_full, kv_kept; /* KV bytes a full cache holds for it and what the policy keeps, */
    cJSON *per_layer;    /*   entries per kv head of each layer after it (owned) */
    struct {             /* TEST_MM: vision encoding, then the whole prompt */
        int n_media, n_encoded, n_tokens;
        bool synthetic;
        double encode_ms_per_image, ttft_ms;
    } mm;
};

/* The thread count a test ran with: 0 is every core this process may run
 * on, as the library's OpenMP counts them. */
static int threads_used(int threads) {
    cpu_set_t set;
    return threads > 0 ? threads : sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

struct bench {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    struct kvf_session *ss[256]; /* --parallel sessions of the (--kv, threads) running */
    int32_t *tok;
    int n_max;                   /* positions of the longest pp or tg test with its context */
    struct bench_row *rows;
    int n_rows, n_done;          /* tests; those done, the first n_done in order */
    struct progress pg;
    char detail[160];            /* the test running, for the progress line */
    struct int_list threads;     /* -t */
    double read_gbps[LIST_MAX];  /* --bandwidth: per thread count of -t, in its order */
};

/* The measured read bandwidth at a thread count, 0 when not measured. */
static double bench_gbps(const struct bench *b, int threads) {
    for (int i = 0; b->a->bandwidth && i < b->threads.n; i++)
        if (threads_used(b->threads.v[i]) == threads_used(threads)) return b->read_gbps[i];
    return 0;
}

/* Weight bytes a second a decode test streamed (a step decodes a token in
 * each of its sessions). */
static double bench_stream(const struct bench *b, const struct bench_row *r) {
    return (double)b->info.decode_bytes * r->mean / r->n_par;
}

/* The tests in llama-bench's order: for each --kv and each thread count, the
 * multimodal prompt, each pp, then each tg after each context depth.
 * Without -d a tg follows an empty cache, or with --kv each -p prompt
 * compressed by the policy, so that policies compare at one length. */
static int bench_plan(struct bench *b, const struct int_list l[N_LISTS]) {
    const struct args *a = b->a;
    const bool mm = a->n_media > 0 || a->n_images > 0;
    const int n_pp = count_nonzero(&l[L_PROMPT]), n_tg = count_nonzero(&l[L_GEN]);
    if (n_pp == 0 && n_tg == 0 && !mm) {
        print_error("bench: nothing to run (-p 0 and -n 0)");
        return EXIT_USAGE;
    }
    struct int_list depths = { .v = { 0 }, .n = 1 };
    if (l[L_DEPTH].n > 0)
        depths = l[L_DEPTH];
    else if (a->kvs.n > 0 && n_pp > 0) {
        depths.n = 0;
        for (int i = 0; i < l[L_PROMPT].n; i++)
            if (l[L_PROMPT].v[i] > 0)
                depths.v[depths.n++] = l[L_PROMPT].v[i];
    }
    const int n_kv = MAX(a->kvs.n, 1), per = mm + n_pp + depths.n * n_tg;
    b->rows = calloc((size_t)n_kv * l[L_THREADS].n * per, sizeof *b->rows);
    if (!b->rows)
        return fail(KVF_ERR_NOMEM, "bench");
    b->n_max = 1;
    for (int k = 0; k < n_kv; k++)
        for (int t = 0; t < l[L_THREADS].n; t++) {
            const struct bench_row base = { .kv = a->kvs.n ? a->kvs.v[k] : NULL, .threads = l[L_THREADS].v[t] };
            if (mm) {
                b->rows[b->n_rows] = base;
                b->rows[b->n_rows++].kind = TEST_MM;
            }
            for (int i = 0; i < l[L_PROMPT].n; i++) {
                if (l[L_PROMPT].v[i] == 0)
                    continue;
                struct bench_row *r = &b->rows[b->n_rows++];
                *r = base;
                r->kind = TEST_PP, r->n = l[L_PROMPT].v[i];
                snprintf(r->name, sizeof r->name, "pp%d", r->n);
                b->n_max = MAX(b->n_max, r->n);
            }
            for (int d = 0; d < depths.n; d++)
                for (int i = 0; i < l[L_GEN].n; i++) {
                    if (l[L_GEN].v[i] == 0)
                        continue;
                    struct bench_row *r = &b->rows[b->n_rows++];
                    *r = base;
                    r->kind = TEST_TG, r->n = l[L_GEN].v[i], r->depth = depths.v[d];
                    const int o = r->depth > 0 ? snprintf(r->name, sizeof r->name, "tg%d@%d", r->n, r->depth)
                                               : snprintf(r->name, sizeof r->name, "tg%d", r->n);
                    if (a->parallel > 1)
                        snprintf(r->name + o, sizeof r->name - (size_t)o, "x%d", a->parallel);
                    b->n_max = MAX(b->n_max, r->depth + r->n);
                }
        }
    return 0;
}

/* Runs one pp or tg test a->reps + 1 times; the first run warms caches and
 * is not timed (unless --no-warmup). Decodes follow a prefilled and
 * compressed context of r->depth tokens (0: an empty cache), so that
 * policies can be compared at the same prompt length. A prefill runs in
 * ss[0]; decodes run in all --parallel sessions together, each step one
 * kvf_session_decode_batch, and count the tokens of all. Ctrl-C stops it
 * between repetitions, r->done false. */
static enum kvf_status bench_run(struct bench *b, struct bench_row *r) {
    const struct args *a = b->a;
    const bool decode = r->kind == TEST_TG;
    const int n = r->n, n_pre = r->depth, n_par = decode ? a->parallel : 1;
    double tps[1000], compress = 0, prefill = 0;
    int32_t step[256];
    for (int rep = a->no_warmup ? 1 : 0; rep <= a->reps; rep++) {
        progress_update(&b->pg, b->n_done, b->detail);
        if (interrupted())
            return KVF_OK;
        enum kvf_status st = KVF_OK;
        for (int k = 0; k < n_par && st == KVF_OK; k++) {
            struct kvf_session *s = b->ss[k];
            kvf_session_reset(s);
            if (!decode || n_pre == 0)
                continue;
            double t0 = now_ms();
            st = kvf_session_prefill(s, b->tok, n_pre, NULL);
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
                r->per_layer = kv_per_layer_json(s, &b->info);
        }
        double t0 = now_ms();
        if (decode) {
            for (int i = 0; i < n && st == KVF_OK; i++) {
                for (int k = 0; k < n_par; k++)
                    step[k] = b->tok[n_pre + i];
                st = kvf_session_decode_batch(b->ss, step, n_par);
            }
        } else if (st == KVF_OK) {
            st = kvf_session_prefill(b->ss[0], b->tok, n, NULL);
        }
        if (st != KVF_OK)
            return st;
        double ms = now_ms() - t0;
        if (rep > 0)
            tps[rep - 1] = ms > 0 ? (double)n * n_par * 1e3 / ms : 0;
    }
    r->n_par = n_par;
    r->mean = mean_of(tps, a->reps);
    r->std = std_of(tps, a->reps);
    r->kv_bytes = r->kv_peak = 0;
    for (int k = 0; k < n_par; k++) {
        r->kv_bytes += kvf_session_kv_bytes(b->ss[k]);
        r->kv_peak += kvf_session_kv_peak_bytes(b->ss[k]);
    }
    r->prefill_ms = prefill / a->reps;
    r->compress_ms = compress / a->reps;
    r->done = true;
    return KVF_OK;
}

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
        rc = media_encode(a, m, img, "synthetic image", ms);
        kvf_image_free(img);
    }
    free(rgb);
    return rc;
}

/* "<image>\n" per image, "<video>\n" per video, then a question. */
static char *bench_mm_text(const struct media_set *ms) {
    char *t = malloc((size_t)ms->n * 9 + 64);
    if (!t)
        return NULL;
    size_t o = 0;
    for (int i = 0; i < ms->n; i++)
        if (media_marker(ms, i))
            o += (size_t)sprintf(t + o, "%s\n", media_marker(ms, i));
    sprintf(t + o, "Describe what you see.");
    return t;
}

/* The multimodal test: vision encoding per image (with a->threads), then
 * the time to first token (encoding + best prefill and compression of the
 * whole prompt) and the KV bytes it leaves. */
static int bench_media(struct bench *b, const struct args *a, const struct kvf_session_params *base,
                       struct bench_row *r) {
    struct media_set ms = { 0 };
    struct kvf_prompt *pr = NULL;
    struct kvf_session *s = NULL;
    char *text = NULL;
    int rc = media_build(a, b->m, &ms);
    if (!rc)
        rc = bench_images(a, b->m, &ms);
    if (rc)
        goto done;
    if (!(text = bench_mm_text(&ms))) {
        rc = fail(KVF_ERR_NOMEM, "bench");
        goto done;
    }
    if ((rc = prompt_make(b->m, text, &ms, false, &pr)))
        goto done;
    struct kvf_session_params sp = *base;
    sp.n_ctx = kvf_prompt_n_tokens(pr);
    enum kvf_status st = kvf_session_init(b->m, &sp, &s);
    double best = 0, compress = 0;
    int rep = a->no_warmup ? 1 : 0;
    for (; st == KVF_OK && rep <= a->reps; rep++) {
        progress_update(&b->pg, b->n_done, b->detail);
        if (interrupted())
            break;
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
    r->done = rep > a->reps;
    r->n_par = 1;
    r->mm.n_media = ms.n;
    r->mm.n_encoded = ms.n_encoded;
    r->mm.n_tokens = kvf_prompt_n_tokens(pr);
    r->mm.synthetic = kvf_prompt_is_synthetic(pr);
    r->mm.encode_ms_per_image = ms.n_encoded ? ms.encode_ms / ms.n_encoded : 0;
    r->mm.ttft_ms = ms.encode_ms + best + compress;
    r->prefill_ms = best;
    r->compress_ms = compress;
    r->mean = r->mm.ttft_ms > 0 ? r->mm.n_tokens * 1e3 / r->mm.ttft_ms : 0;
    r->kv_bytes = kvf_session_kv_bytes(s);
    r->kv_peak = kvf_session_kv_peak_bytes(s);
    snprintf(r->name, sizeof r->name, "mm%d", r->mm.n_tokens);
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

static bool same_setup(const struct bench_row *x, const struct bench_row *y) {
    return x->threads == y->threads && x->kv == y->kv;
}

/* Runs the tests in order, one set of sessions per (--kv, threads), until
 * all are done or Ctrl-C stops them (b->n_done tells how far they got). */
static int bench_all(struct bench *b) {
    const struct args *a = b->a;
    int rc = 0;
    while (!rc && b->n_done < b->n_rows && !interrupted()) {
        const struct bench_row *first = &b->rows[b->n_done];
        struct args ra = *a;
        ra.threads = first->threads;
        ra.kv = first->kv;
        const struct kvf_session_params sp = session_params(&ra, b->n_max);
        for (int k = 0; !rc && k < a->parallel; k++)
            rc = open_session(b->m, &sp, "bench: cannot create the session", &b->ss[k]);
        for (int i = b->n_done; !rc && i < b->n_rows && same_setup(first, &b->rows[i]) && !interrupted(); i++) {
            struct bench_row *r = &b->rows[i];
            snprintf(b->detail, sizeof b->detail, "%s, threads %d, kv %s", r->kind == TEST_MM ? "multimodal" : r->name,
                     r->threads, r->kv ? r->kv : "full");
            if (r->kind == TEST_MM) {
                rc = bench_media(b, &ra, &sp, r);
            } else {
                const enum kvf_status st = bench_run(b, r);
                if (st != KVF_OK)
                    rc = fail(st, "bench");
            }
            b->n_done += r->done;
        }
        for (int k = 0; k < a->parallel; k++) {
            kvf_session_free(b->ss[k]);
            b->ss[k] = NULL;
        }
    }
    return rc;
}

/* ------------------------------------------------------------ reports -- */

/* What every test shares: the model, the build and the fixed options. */
static void bench_model_json(const struct bench *b, cJSON *o) {
    const struct args *a = b->a;
    cJSON_AddStringToObject(o, "model", b->info.name);
    cJSON_AddStringToObject(o, "arch", b->info.arch);
    cJSON_AddNumberToObject(o, "n_params", (double)b->info.n_params);
    cJSON_AddNumberToObject(o, "weight_bytes", (double)b->info.weight_bytes);
    cJSON_AddStringToObject(o, "weight_types", b->info.weight_types);
    cJSON_AddNumberToObject(o, "n_batch", a->batch);
    cJSON_AddStringToObject(o, "simd", kvf_simd_level());
    cJSON_AddStringToObject(o, "build", kvf_build_info());
    /* How idle OpenMP threads wait (kvfold sets GOMP_SPINCOUNT where neither is set; main.c) */
    const char *spin = getenv("GOMP_SPINCOUNT"), *policy = getenv("OMP_WAIT_POLICY");
    cJSON_AddItemToObject(o, "gomp_spincount", spin ? cJSON_CreateString(spin) : cJSON_CreateNull());
    cJSON_AddItemToObject(o, "omp_wait_policy", policy ? cJSON_CreateString(policy) : cJSON_CreateNull());
    /* The kernels OpenBLAS runs the sgemm prompt products with (main.c may have named them) */
    cJSON_AddStringToObject(o, "openblas_core", openblas_get_corename());
    cJSON_AddNumberToObject(o, "repetitions", a->reps);
    kv_types_json(o, "kv_type", a);
    cJSON_AddNumberToObject(o, "decode_bytes", (double)b->info.decode_bytes);
    cJSON_AddStringToObject(o, "kernels", b->info.kernels);
    if (a->bandwidth) {
        cJSON *bw = cJSON_AddObjectToObject(o, "read_gbps"); /* by thread count */
        for (int i = 0; i < b->threads.n; i++) {
            char k[16];
            snprintf(k, sizeof k, "%d", threads_used(b->threads.v[i]));
            cJSON_AddNumberToObject(bw, k, b->read_gbps[i]);
        }
    }
}

/* One test's setup and numbers, added to t; takes r->per_layer. */
static void bench_row_json(const struct bench *b, struct bench_row *r, cJSON *t) {
    cJSON_AddStringToObject(t, "name", r->name);
    cJSON_AddNumberToObject(t, "n_threads", threads_used(r->threads));
    cJSON_AddStringToObject(t, "policy", r->kv ? r->kv : "full");
    cJSON_AddNumberToObject(t, "n_prompt", r->kind == TEST_PP ? r->n : r->kind == TEST_MM ? r->mm.n_tokens : 0);
    cJSON_AddNumberToObject(t, "n_gen", r->kind == TEST_TG ? r->n : 0);
    cJSON_AddNumberToObject(t, "n_depth", r->depth);
    cJSON_AddNumberToObject(t, "n_tokens", r->kind == TEST_MM ? r->mm.n_tokens : r->n);
    cJSON_AddNumberToObject(t, "tok_per_s", r->mean);
    cJSON_AddNumberToObject(t, "tok_per_s_std", r->std);
    cJSON_AddNumberToObject(t, "kv_bytes", (double)r->kv_bytes);
    cJSON_AddNumberToObject(t, "kv_peak_bytes", (double)r->kv_peak);
    cJSON_AddNumberToObject(t, "parallel", r->n_par);
    if (r->kind != TEST_PP) {
        cJSON_AddNumberToObject(t, "prefill_ms", r->prefill_ms);
        cJSON_AddNumberToObject(t, "compress_ms", r->compress_ms);
    }
    if (r->kind == TEST_TG) {
        /* one step decodes a token in each session */
        cJSON_AddNumberToObject(t, "decode_ms_per_token", r->mean > 0 ? 1e3 * r->n_par / r->mean : 0);
        cJSON_AddNumberToObject(t, "weight_bytes_per_s", (double)b->info.weight_bytes * r->mean / r->n_par);
        /* what a step really streams: the matrices, not an embedding read a row a token */
        const double stream = bench_stream(b, r), bw = bench_gbps(b, r->threads);
        cJSON_AddNumberToObject(t, "decode_bytes_per_s", stream);
        if (bw > 0) cJSON_AddNumberToObject(t, "bandwidth_share", stream / (bw * 1e9));
    }
    if (r->kind == TEST_MM) {
        cJSON_AddNumberToObject(t, "n_media", r->mm.n_media);
        cJSON_AddNumberToObject(t, "n_encoded", r->mm.n_encoded);
        cJSON_AddBoolToObject(t, "synthetic", r->mm.synthetic);
        cJSON_AddNumberToObject(t, "encode_ms_per_image", r->mm.encode_ms_per_image);
        cJSON_AddNumberToObject(t, "ttft_ms", r->mm.ttft_ms);
    }
    if (r->per_layer) { /* the context the decode test followed */
        cJSON *kv = cJSON_AddObjectToObject(t, "kv");
        cJSON_AddStringToObject(kv, "policy", r->kv ? r->kv : "full");
        kv_kept_json(kv, r->kv_full, r->kv_kept);
        cJSON_AddNumberToObject(kv, "peak_bytes", (double)r->kv_peak);
        cJSON_AddItemToObject(kv, "per_layer", r->per_layer);
        r->per_layer = NULL;
    }
}

/* A test as one self-contained object (-o json and csv). */
static cJSON *bench_test_json(const struct bench *b, struct bench_row *r) {
    cJSON *t = cJSON_CreateObject();
    bench_model_json(b, t);
    bench_row_json(b, r, t);
    return t;
}

/* --json: the model, the tests and the peak memory in one object. */
static int bench_report_json(struct bench *b, size_t rss) {
    cJSON *o = cJSON_CreateObject();
    bench_model_json(b, o);
    cJSON *tests = cJSON_AddArrayToObject(o, "tests");
    for (int i = 0; i < b->n_done; i++) {
        cJSON *t = cJSON_CreateObject();
        bench_row_json(b, &b->rows[i], t);
        cJSON_AddItemToArray(tests, t);
        /* where scripts written before the lists find the multimodal test */
        if (b->rows[i].kind == TEST_MM && !cJSON_GetObjectItemCaseSensitive(o, "multimodal"))
            cJSON_AddItemToObject(o, "multimodal", cJSON_Duplicate(t, true));
    }
    cJSON_AddNumberToObject(o, "peak_rss_bytes", (double)rss);
    cJSON_AddBoolToObject(o, "interrupted", b->n_done < b->n_rows);
    return print_json(o);
}

/* -o json: llama-bench's array, one object per test. */
static int bench_report_array(struct bench *b) {
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < b->n_done; i++)
        cJSON_AddItemToArray(arr, bench_test_json(b, &b->rows[i]));
    return print_json(arr);
}

/* -o csv: a header, then a line per test; strings quoted, a field a test
 * does not have left empty. */
static int bench_report_csv(struct bench *b) {
    static const char *const cols[] = {
        "model", "arch", "n_params", "weight_bytes", "simd", "n_batch", "kv_type", "type_k", "type_v", "repetitions",
        "name",
        "n_threads", "policy", "parallel", "n_prompt", "n_gen", "n_depth", "tok_per_s", "tok_per_s_std",
        "kv_bytes", "kv_peak_bytes", "prefill_ms", "compress_ms", "ttft_ms",
    };
    for (size_t c = 0; c < COUNT_OF(cols); c++)
        printf("%s%s", c ? "," : "", cols[c]);
    putchar('\n');
    for (int i = 0; i < b->n_done; i++) {
        cJSON *t = bench_test_json(b, &b->rows[i]);
        for (size_t c = 0; c < COUNT_OF(cols); c++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(t, cols[c]);
            if (c)
                putchar(',');
            if (cJSON_IsNumber(v)) {
                printf("%.10g", v->valuedouble);
            } else if (cJSON_IsString(v)) {
                putchar('"');
                for (const char *s = v->valuestring; *s; s++) {
                    if (*s == '"')
                        putchar('"');
                    putchar(*s);
                }
                putchar('"');
            }
        }
        putchar('\n');
        cJSON_Delete(t);
    }
    return 0;
}

/* Columns a string takes on a terminal (UTF-8: "±" is one). */
static int text_width(const char *s) {
    int w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* "92.08 MiB", "1.50 GiB" */
static void fmt_bytes(char *out, size_t cap, double bytes) {
    if (bytes >= 1024 * MIB)
        snprintf(out, cap, "%.2f GiB", bytes / (1024 * MIB));
    else
        snprintf(out, cap, "%.2f MiB", bytes / MIB);
}

/* The default: llama-bench's markdown table, a row per test, then a line
 * with the build, the fixed options and the peak memory. */
static int bench_report_md(const struct bench *b, size_t rss) {
    enum { N_COLS = 9, CELL = 96 };
    static const char *const head[N_COLS] = { "model", "size", "params", "backend", "threads", "kv", "kv MiB",
                                              "test", "t/s" };
    static const bool right[N_COLS] = { false, true, true, false, true, false, true, true, true };
    char(*cells)[N_COLS][CELL] = malloc((size_t)(b->n_done + 1) * sizeof *cells);
    if (!cells)
        return fail(KVF_ERR_NOMEM, "bench");
    int width[N_COLS];
    for (int c = 0; c < N_COLS; c++) {
        snprintf(cells[0][c], CELL, "%s", head[c]);
        width[c] = MAX(text_width(head[c]), 3);
    }
    const double params = (double)b->info.n_params;
    for (int i = 0; i < b->n_done; i++) {
        const struct bench_row *r = &b->rows[i];
        char(*row)[CELL] = cells[i + 1];
        snprintf(row[0], CELL, "%s", b->info.name);
        fmt_bytes(row[1], CELL, (double)b->info.weight_bytes);
        snprintf(row[2], CELL, params >= 1e9 ? "%.2f B" : "%.2f M", params >= 1e9 ? params / 1e9 : params / 1e6);
        snprintf(row[3], CELL, "CPU %s", kvf_simd_level());
        snprintf(row[4], CELL, "%d", threads_used(r->threads));
        snprintf(row[5], CELL, "%s", r->kv ? r->kv : "full");
        snprintf(row[6], CELL, "%.2f", r->kv_bytes / MIB);
        snprintf(row[7], CELL, "%s", r->name);
        snprintf(row[8], CELL, "%.2f ± %.2f", r->mean, r->std);
        for (int c = 0; c < N_COLS; c++)
            width[c] = MAX(width[c], text_width(row[c]));
    }
    for (int i = 0; i <= b->n_done; i++) {
        for (int c = 0; c < N_COLS; c++) {
            const int pad = width[c] - text_width(cells[i][c]);
            printf("| %*s%s%*s ", right[c] ? pad : 0, "", cells[i][c], right[c] ? 0 : pad, "");
        }
        puts("|");
        if (i > 0)
            continue;
        for (int c = 0; c < N_COLS; c++) { /* the alignment row: "| --- | ---: |" */
            fputs("| ", stdout);
            for (int k = 0; k < width[c] - right[c]; k++)
                putchar('-');
            fputs(right[c] ? ": " : " ", stdout);
        }
        puts("|");
    }
    free(cells);
    putchar('\n');
    for (int i = 0; i < b->n_done; i++) {
        const struct bench_row *r = &b->rows[i];
        if (r->kind == TEST_MM)
            printf("%s (threads %d, kv %s): %d media (%d encoded%s): encode %.2f ms/image, prefill %.2f ms, "
                   "compress %.2f ms, ttft %.2f ms, kv peak %.2f MiB\n", r->name, threads_used(r->threads),
                   r->kv ? r->kv : "full", r->mm.n_media, r->mm.n_encoded,
                   r->mm.synthetic ? ", synthetic" : "", r->mm.encode_ms_per_image, r->prefill_ms, r->compress_ms,
                   r->mm.ttft_ms, r->kv_peak / MIB);
    }
    for (int i = 0; i < b->threads.n && b->a->bandwidth; i++)
        printf("memory read bandwidth, %d thread%s: %.1f GB/s\n", threads_used(b->threads.v[i]),
               threads_used(b->threads.v[i]) == 1 ? "" : "s", b->read_gbps[i]);
    for (int i = 0; i < b->n_done && b->a->bandwidth; i++) {
        const struct bench_row *r = &b->rows[i];
        const double stream = bench_stream(b, r) / 1e9, bw = bench_gbps(b, r->threads);
        if (r->kind == TEST_TG && bw > 0)
            printf("%s (threads %d): weights streamed at %.1f GB/s (%.0f MB a token), %.0f%% of the read "
                   "bandwidth\n", r->name, threads_used(r->threads), stream, b->info.decode_bytes / 1e6,
                   100 * stream / bw);
    }
    if (b->a->explain)
        printf("kernels: %s\nprompt products: %s\n", b->info.kernels,
               "integer tiles (VNNI) for the K and 32-value types where the CPU has them, else dequantised "
               "tiles through OpenBLAS's sgemm");
    printf("build: %s, %s, batch %d, kv %s storage, %d repetitions, peak rss %.1f MiB\n", kvf_build_info(),
           kvf_simd_level(), b->a->batch, b->a->kv_types, b->a->reps, rss / MIB);
    return 0;
}

static int cmd_bench(const struct args *a) {
    struct int_list lists[N_LISTS];
    enum bench_format fmt;
    struct bench b = { .a = a };
    int rc = bench_check(a, lists, &fmt);
    if (!rc)
        rc = bench_plan(&b, lists);
    b.threads = lists[L_THREADS];
    /* before the model is loaded, so that its pages do not share the memory */
    for (int i = 0; !rc && a->bandwidth && i < b.threads.n; i++)
        if ((b.read_gbps[i] = mem_read_gbps(threads_used(b.threads.v[i]))) <= 0)
            rc = fail(KVF_ERR_NOMEM, "bench: --bandwidth");
    if (!rc)
        rc = load_model(a, &b.m);
    if (!rc) {
        kvf_model_get_info(b.m, &b.info);
        if (!(b.tok = bench_tokens(b.n_max, b.info.n_vocab)))
            rc = fail(KVF_ERR_NOMEM, "bench");
    }
    if (!rc) {
        progress_init(&b.pg, "bench", "tests", b.n_rows, a);
        rc = bench_all(&b);
        progress_end(&b.pg);
    }
    if (!rc) {
        const size_t rss = kvf_peak_rss_bytes();
        rc = fmt == FMT_REPORT ? bench_report_json(&b, rss) : fmt == FMT_JSON ? bench_report_array(&b)
           : fmt == FMT_CSV ? bench_report_csv(&b) : bench_report_md(&b, rss);
    }
    if (!rc && b.n_done < b.n_rows) {
        fprintf(stderr, "kvfold: bench: interrupted after %d of %d tests\n", b.n_done, b.n_rows);
        rc = EXIT_INTERRUPTED;
    }
    for (int i = 0; i < b.n_rows; i++)
        cJSON_Delete(b.rows[i].per_layer);
    free(b.rows);
    free(b.tok);
    kvf_model_free(b.m);
    return rc;
}

const struct command bench_command = {
    .name = "bench",
    .summary = "Prefill and decode speed, like llama-bench.",
    .usage = "-m FILE [-p N,...] [-n N,...] [-t N,...] [-d N,...] [--kv SPEC]... [-o md|json|csv] [options]",
    .details = "ppN prefills N random tokens at once; tgN decodes N tokens one at a time (tgN@D after a\n"
               "context of D tokens, compressed by --kv). Each runs once untimed, then -r times; reported\n"
               "as mean ± std tokens/s with the KV cache size after it. -p, -n, -t and -d take comma lists\n"
               "and --kv repeats: every test runs for each --kv and thread count, as in llama-bench\n"
               "(for each --kv, each -t: each pp, then each tg after each depth). With --parallel N,\n"
               "tgNxP decodes in N sessions at once (one batched step each token, as a server runs\n"
               "them) and reports their total tokens/s and KV bytes. With media (--image, --images,\n"
               "...), mmT encodes them and prefills the T-token prompt: tokens/s of the time to first\n"
               "token, the best of the repetitions. -o json and csv give every number (prefill and\n"
               "compression times, the KV kept per layer in json); --json gives them in one object\n"
               "with the model and the peak memory. Progress goes to stderr. Ctrl-C stops at the next\n"
               "repetition and reports the tests completed; the exit status is then 130.",
    .run = cmd_bench,
    .defaults = bench_defaults,
    .opts = bench_opts,
};
