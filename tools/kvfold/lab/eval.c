/* kvfold eval: KV policies compared on the protocols of docs/METHODS.md §7.
 *
 *   consistency  PrefixKV's: the full cache's greedy output is the reference;
 *                a policy gets the perplexity of that output teacher-forced
 *                with its compression active, and the ROUGE-L F1 of its own
 *                greedy output against it.
 *   needle       MileBench's idea: a password hidden at a depth among text and
 *                image segments; the answer is correct when it contains it.
 *   milebench    MileBench's own tasks from disk, its prompts and its scoring
 *                (milebench.c).
 *
 * Every --kv runs at every --budgets value (with one model load); each run
 * is a fresh session on the same prompt. One row per (run, sample) goes to
 * JSON lines, the summary per run to markdown/CSV, and the pictures to SVG. */
#include "eval.h"

#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define EVAL_MAX_BUDGETS 16
#define EVAL_MAX_LIST 16
/* Policies a plot shows: every --kv of this run and of the rows resumed. */
#define PLOT_MAX_SPECS 64

/* ------------------------------------------------------------ options -- */

static void eval_defaults(struct args *a) {
    a->n_predict = 0; /* per mode: needle 12, consistency 32 */
    a->eval.budgets = "0.2,0.05";
    a->eval.depths = "0.1,0.5,0.9";
    a->eval.segments = "8";
    a->eval.needle = "text";
    a->eval.grid = "12x12";
    a->eval.n_samples = 0; /* per mode: 1, milebench every sample */
    a->eval.seg_words = 120;
    a->seed = 1;
    a->eval.question = "with";
    a->eval.questions = 1;
}

static int eval_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        OPT_JSON,
        OPT_THREADS,
        OPTS_KV_STORAGE,
        OPTS_VISION,
        { "--kv", NULL, OPT_LIST, &a->kvs, 0, 0, "SPEC",
          "a KV policy to compare (repeatable; default: snapkv, h2o, streaming, lookm)" },
        { "--budgets", NULL, OPT_STR, &a->eval.budgets, 0, 0, "LIST", "budgets each --kv runs at (default 0.2,0.05)" },
        { "--data", NULL, OPT_STR, &a->eval.data, 0, 0, "PATH",
          "consistency, needle: JSON lines {\"prompt\", \"media\", \"question\"} (needle: + \"answer\", \"kind\"; "
          "default: synthetic); milebench: MileBench's folder" },
        { "--question", NULL, OPT_STR, &a->eval.question, 0, 0, "WHERE",
          "with: the question ends the prompt the policy compresses (default); after: the context is compressed, "
          "then the question appended (kvpress's protocol, a chat's next message)" },
        { "--tasks", NULL, OPT_STR, &a->eval.tasks, 0, 0, "LIST",
          "milebench: the tasks to run (default: every task under --data); ruler: of niah_single_1..3, "
          "niah_multikey_1..3, niah_multivalue, niah_multiquery, vt, cwe, fwe (default all)" },
        { "--ctx-size --ctx", "-c", OPT_INT, &a->ctx, 16, 1 << 20, "N",
          "milebench: prompts cut from the left to N tokens, as MileBench does (default: the model's context); ruler: "
          "the length of a sample and its answer (default 4096)" },
        { "--samples", NULL, OPT_INT, &a->eval.n_samples, 1, 100000, "N",
          "samples per configuration (default 1; milebench: per task, default all; ruler: per task)" },
        { "--words", NULL, OPT_STR, &a->eval.words, 0, 0, "FILE",
          "ruler: words for keys and lists, one per line (default /usr/share/dict/words)" },
        { "--haystack", NULL, OPT_STR, &a->eval.haystack, 0, 0, "FILE",
          "ruler: the essay haystack's text (default: made-up sentences)" },
        { "--questions", NULL, OPT_INT, &a->eval.questions, 1, RULER_MAX_QUESTIONS, "N",
          "ruler, --question after: each NIAH context compressed once, then asked N questions of a key each, the "
          "session copied per question (kvpress's questions=; default 1)" },
        { "--turns", NULL, OPT_FLAG, &a->eval.turns, 0, 0, NULL,
          "ruler, --question after: the questions asked in turn in one conversation, as chat and serve hold it: "
          "each a message after the last answer, the cache compressed after every message" },
        { "--dump-samples", NULL, OPT_STR, &a->eval.dump_samples, 0, 0, "FILE",
          "ruler: write each sample as a JSON line {\"task\", \"context\", \"question\", \"answer_prefix\", "
          "\"answers\"} (kvpress's fields; a line per question)" },
        { "--n-predict", "-n", OPT_INT, &a->n_predict, 1, 4096, "N", "tokens generated per answer" },
        { "--seed", "-s", OPT_U64, &a->seed, 0, 0, "N", "seed of the synthetic data (default 1)" },
        { "--segments", NULL, OPT_STR, &a->eval.segments, 0, 0, "LIST",
          "segments in the haystack (default 8; half text, half image)" },
        { "--depths", NULL, OPT_STR, &a->eval.depths, 0, 0, "LIST", "needle depths in [0, 1] (default 0.1,0.5,0.9)" },
        { "--needle", NULL, OPT_STR, &a->eval.needle, 0, 0, "KIND",
          "text, image (inside a pseudo-image) or both (default text)" },
        { "--segment-words", NULL, OPT_INT, &a->eval.seg_words, 1, 100000, "N",
          "words per text segment (default 120)" },
        { "--grid", NULL, OPT_STR, &a->eval.grid, 0, 0, "RxC", "image segments: pseudo-image grid (default 12x12)" },
        OPT_PSEUDO_NOISE,
        { "--chat-template", NULL, OPT_STR, &a->chat_template, 0, 0, "NAME", "chat template (default: the model's)" },
        { "--out", "-o", OPT_STR, &a->eval.out_dir, 0, 0, "DIR",
          "write results.jsonl (a row as each finishes), summary.md and summary.csv" },
        { "--resume", NULL, OPT_FLAG, &a->eval.resume, 0, 0, NULL,
          "keep the rows of --out's results.jsonl and run only the missing ones" },
        OPT_NO_PROGRESS,
        { "--plots", NULL, OPT_STR, &a->eval.plots, 0, 0, "DIR",
          "write SVG charts (quality and KV memory against budget, decode speed)" },
        { "--kept-map", NULL, OPT_STR, &a->eval.kept_map, 0, 0, "DIR",
          "write per-layer SVG maps of the first image's kept entries" },
    };
    OPTS_RETURN(out, t);
}

/* --------------------------------------------------------------- lists -- */

/* "0.2,0.05" -> x[]; false on a malformed item or one out of [lo, hi]. */
static bool parse_list(const char *s, double lo, double hi, double *x, int *n) {
    *n = 0;
    for (const char *c = s; *c;) {
        char *end;
        errno = 0;
        const double v = strtod(c, &end);
        if (end == c || errno || !isfinite(v) || v < lo || v > hi || *n == EVAL_MAX_LIST || (*end && *end != ','))
            return false;
        x[(*n)++] = v;
        c = *end ? end + 1 : end;
    }
    return *n > 0;
}

/* Whether the preset of a spec (its name, up to ':' or '+') takes a budget. */
static bool spec_has_budget_key(const char *spec) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec, ":+"), spec);
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info info;
        if (kvf_kv_policy_get(i, &info) == KVF_OK && !strcmp(info.stage, "preset") && !strcmp(info.name, name))
            return strstr(info.keys, "budget") != NULL;
    }
    return false;
}

/* ----------------------------------------------------- synthetic data -- */

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
static int needle_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, double depth,
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
static int summary_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, uint64_t seed,
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

/* ---------------------------------------------------------------- runs -- */

/* What one (policy, budget) did on one sample. */
struct row {
    char spec[256];     /* the --kv as given ("full" for the reference) */
    double budget;      /* NaN: the preset has none */
    int sample, n_prompt, segments;
    int question, n_questions; /* ruler --questions: which of the sample's questions this row asked */
    double depth;
    const char *needle; /* needle: "text" or "image" */
    const char *task;   /* milebench: the task, its metric, the sample's id, ground truth (owned) and level */
    const char *metric, *level;
    char id[64];
    char *gt;
    int images;         /* milebench: images left after cutting the prompt to --ctx */
    bool synthetic;     /* the prompt holds pseudo-images */
    double score;       /* needle: 1/0; consistency: ROUGE-L F1; milebench: the task's metric */
    double ppl;         /* consistency: of the reference continuation; else NaN */
    double kv_mib, kv_full_mib, kv_peak_mib, prefill_ms, compress_ms, ms_per_token;
    char *output;
};

struct rows {
    struct row *r;
    int n, cap;
};

static int rows_push(struct rows *rs, const struct row *r) {
    if (rs->n == rs->cap) {
        const int cap = rs->cap ? rs->cap * 2 : 64;
        struct row *p = realloc(rs->r, sizeof *p * (size_t)cap);
        if (!p) return fail(KVF_ERR_NOMEM, "eval");
        rs->r = p, rs->cap = cap;
    }
    rs->r[rs->n++] = *r;
    return 0;
}

/* The queries of every layer the shared prefill keeps for the window-scored
 * policies (snapkv's 32, csp's recent entries); a policy that wants more
 * prefills on its own. */
#define EVAL_SHARED_QUERIES 512

/* The runs of the eval: the full cache first, then every --kv at every
 * budget (once when its preset has no budget). */
struct run {
    char label[320];  /* for messages: the --kv, and the budget it runs at */
    const char *kv;   /* the --kv (the session's kv_spec) */
    double budget;    /* the session's kv_budget; NAN: the spec's own */
};

static double run_budget(const struct run *r) { return isnan(r->budget) ? 0 : r->budget; }

/* A sample's prompt prefilled once, gathering what every policy scores
 * with; the runs fork it (kvf_session_fork) instead of prefilling again. */
struct shared {
    struct kvf_session *src;
    double prefill_ms;
};

/* A session prefilled with the prompt under run r (gather: see
 * kvf_session_params.kv_gather). */
static int prefilled_session(const struct args *a, const struct kvf_model *m, const struct kvf_prompt *pr,
                             const struct run *r, int n_extra, int gather, struct kvf_session **out) {
    struct kvf_session_params sp = session_params(a, kvf_prompt_n_tokens(pr) + n_extra + 1);
    sp.kv_spec = r->kv;
    sp.kv_budget = run_budget(r);
    sp.kv_gather = gather;
    char what[sizeof r->label + 16];
    snprintf(what, sizeof what, "eval: --kv %s", r->label);
    int rc = open_session(m, &sp, what, out);
    enum kvf_status st;
    if (!rc && (st = kvf_session_prefill_prompt(*out, pr, NULL)) != KVF_OK) rc = fail(st, "eval: prompt");
    return rc;
}

static int shared_open(const struct args *a, const struct kvf_model *m, const struct kvf_prompt *pr, int n_extra,
                       struct shared *sh) {
    static const struct run full = {"full", "full", NAN};
    const double t0 = now_ms();
    const int rc =
        prefilled_session(a, m, pr, &full, n_extra, MIN(kvf_prompt_n_tokens(pr), EVAL_SHARED_QUERIES), &sh->src);
    sh->prefill_ms = now_ms() - t0;
    return rc;
}

/* The question after compression (--question after): the ids of the
 * prompt from the question on, which run_prefill appends once the context
 * is compressed; none with the question in the prompt. */
struct after {
    int32_t *ids;
    int n;
};

/* A session for one run over the prompt, compressed: a fork of the shared
 * prefill, or (policies that prefill their own way, or want more queries)
 * a prefill of its own; then the question q, if it comes after. base
 * (optional) gets a copy of the compressed session before the question,
 * for the sample's further questions. */
static int run_prefill(const struct args *a, const struct kvf_model *m, const struct kvf_prompt *pr,
                       const struct shared *sh, const struct run *run, int n_extra, const struct after *q,
                       struct kvf_session **out, struct kvf_session **base, struct row *r) {
    double t0 = now_ms();
    enum kvf_status st = kvf_session_fork(sh->src, run->kv, run_budget(run), out);
    int rc = 0;
    if (st == KVF_OK) r->prefill_ms = sh->prefill_ms;
    else if (st != KVF_ERR_UNSUPPORTED) rc = fail_option(st, "eval: kv fork");
    else if (!(rc = prefilled_session(a, m, pr, run, n_extra, 0, out))) r->prefill_ms = now_ms() - t0;
    if (rc) return rc;
    r->kv_full_mib = (double)kvf_session_kv_full_bytes(*out) / MIB;
    t0 = now_ms();
    if ((st = kvf_session_compress(*out)) != KVF_OK) return fail(st, "eval: kv compression");
    r->compress_ms = now_ms() - t0;
    r->kv_mib = (double)kvf_session_kv_bytes(*out) / MIB;
    if (base && (st = kvf_session_copy(*out, base)) != KVF_OK) return fail(st, "eval: a copy for the next questions");
    if (q->n && (st = kvf_session_prefill(*out, q->ids, q->n, NULL)) != KVF_OK) return fail(st, "eval: the question");
    return 0;
}

/* --turns: the cache compressed after a message, as chat and serve do;
 * what the row records is the cache the answer reads. */
static int turn_compress(struct kvf_session *s, struct row *r) {
    const double t0 = now_ms();
    const enum kvf_status st = kvf_session_compress(s);
    if (st != KVF_OK) return fail(st, "eval: kv compression");
    r->compress_ms = now_ms() - t0;
    r->kv_mib = (double)kvf_session_kv_bytes(s) / MIB;
    r->kv_full_mib = (double)kvf_session_kv_full_bytes(s) / MIB;
    return 0;
}

/* --question after: the templated prompt cut where the sample's question
 * starts (text keeps what comes before), the rest tokenized on its own, as
 * kvpress tokenizes context and question apart. */
static int question_split(const struct args *ca, const struct kvf_model *m, const struct sample *smp, char *text,
                          struct after *q) {
    const char *question = smp->text + smp->question_at, *at = NULL;
    for (const char *p = question[0] ? strstr(text, question) : NULL; p; p = strstr(p + 1, question)) at = p;
    if (!smp->question_at || !at) {
        print_error("eval: --question after: this sample's question is not apart from its context");
        return EXIT_INPUT;
    }
    const int rc = tokenize_text(m, at, strlen(at), false, ca->chat, &q->ids, &q->n);
    text[at - text] = '\0';
    return rc;
}

/* --questions: the sample's further questions as question_split leaves
 * the first, each followed by what the chat template put after the first
 * question (text, before question_split cuts it) and its answer's start. */
static int more_split(const struct args *ca, const struct kvf_model *m, const struct sample *smp, const char *text,
                      struct after *more) {
    const char *q0 = smp->text + smp->question_at, *at = NULL;
    for (const char *p = strstr(text, q0); p; p = strstr(p + 1, q0)) at = p;
    if (!at) {
        print_error("eval: --questions: this sample's first question is not apart from its context");
        return EXIT_INPUT;
    }
    const char *tail = at + strlen(q0);
    const size_t n_tail = strlen(tail) - (smp->answer_prefix ? strlen(smp->answer_prefix) : 0);
    int rc = 0;
    for (int j = 0; !rc && j < smp->n_more; j++) {
        struct strbuf b = {0};
        const struct sample_question *sq = &smp->more[j];
        if (!strbuf_put(&b, sq->text, strlen(sq->text)) || !strbuf_put(&b, tail, n_tail) ||
            !strbuf_put(&b, sq->prefix, strlen(sq->prefix)))
            rc = fail(KVF_ERR_NOMEM, "eval");
        if (!rc) rc = tokenize_text(m, b.s, b.n, false, ca->chat, &more[j].ids, &more[j].n);
        free(b.s);
    }
    return rc;
}

/* --turns: the sample's further questions as the messages of a
 * conversation, each after the answer to the one before: the markup the
 * chat template closes that answer with, the question as the user's next
 * message, the assistant's turn and the answer's start. Templates close a
 * reply and open the next message whatever the reply says, so the texts are
 * made before the answers exist, and the sessions are sized for them. */
static int turns_split(const struct args *ca, const struct kvf_model *m, const struct sample *smp,
                       struct after *more) {
    struct kvf_chat_message msgs[2 + 2 * RULER_MAX_QUESTIONS];
    int n = 0, rc = 0;
    if (ca->system) msgs[n++] = (struct kvf_chat_message){"system", ca->system};
    msgs[n++] = (struct kvf_chat_message){"user", smp->text};
    for (int j = 0; !rc && j < smp->n_more; j++) {
        const struct sample_question *sq = &smp->more[j];
        msgs[n++] = (struct kvf_chat_message){"assistant", "The answer."};
        msgs[n++] = (struct kvf_chat_message){"user", sq->text + strspn(sq->text, " \n")}; /* a message's start */
        char *t = NULL;
        struct strbuf b = {0};
        rc = chat_next_text(ca, m, msgs, n, &t);
        if (!rc && (!strbuf_put(&b, t, strlen(t)) || !strbuf_put(&b, sq->prefix, strlen(sq->prefix))))
            rc = fail(KVF_ERR_NOMEM, "eval");
        if (!rc) rc = tokenize_text(m, b.s, b.n, false, true, &more[j].ids, &more[j].n);
        free(t);
        free(b.s);
    }
    return rc;
}

static int32_t argmax(const float *x, int n) {
    int32_t b = 0;
    for (int i = 1; i < n; i++) b = x[i] > x[b] ? i : b;
    return b;
}

/* Greedy decoding of up to n tokens (ids kept in ids[] when given). */
static int run_greedy(const struct kvf_model *m, struct kvf_session *s, int n, struct strbuf *text, int32_t *ids,
                      int *n_ids, struct row *r) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    char *piece = NULL;
    int32_t cap = 0;
    double ms = 0;
    int dec = 0, got = 0, rc = 0;
    for (; got < n; got++) {
        const int32_t tok = argmax(kvf_session_logits(s), info.n_vocab);
        if (kvf_token_is_eog(m, tok)) break;
        const int32_t np = token_piece(m, tok, &piece, &cap);
        if (np < 0 || !strbuf_put(text, piece, (size_t)np)) {
            rc = fail(KVF_ERR_NOMEM, "eval");
            break;
        }
        if (ids) ids[got] = tok;
        if (got + 1 == n) {
            got++;
            break;
        }
        const double t0 = now_ms();
        enum kvf_status st = kvf_session_decode(s, tok);
        if (st != KVF_OK) {
            rc = fail(st, "eval: decode");
            break;
        }
        ms += now_ms() - t0, dec++;
    }
    free(piece);
    if (n_ids) *n_ids = got;
    r->ms_per_token = dec ? ms / dec : NAN;
    r->kv_peak_mib = (double)kvf_session_kv_peak_bytes(s) / MIB;
    return rc;
}

/* Teacher-forced perplexity of ids[0..n) after the prompt. */
static int run_forced(const struct kvf_model *m, struct kvf_session *s, const int32_t *ids, int n, double *ppl) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    double nll = 0;
    for (int t = 0; t < n; t++) {
        nll += token_nll(kvf_session_logits(s), info.n_vocab, ids[t]);
        enum kvf_status st = t + 1 < n ? kvf_session_decode(s, ids[t]) : KVF_OK;
        if (st != KVF_OK) return fail(st, "eval: decode");
    }
    *ppl = n ? exp(nll / n) : NAN;
    return 0;
}

/* mkdir -p: the output directories may be nested and new. */
static void make_dirs(const char *path) {
    char p[4096];
    snprintf(p, sizeof p, "%s", path);
    for (char *c = p + 1; *c; c++)
        if (*c == '/') {
            *c = '\0';
            mkdir(p, 0777);
            *c = '/';
        }
    mkdir(p, 0777);
}

/* A label safe in file names: "snapkv_0.2". */
static void run_label(const char *spec, double budget, char *out, size_t cap) {
    snprintf(out, cap, "%.*s", (int)strcspn(spec, ":+"), spec);
    const size_t l = strlen(out);
    if (!isnan(budget)) snprintf(out + l, cap - l, "_%g", budget);
}

/* --kept-map: per layer, one picture of every kv head (rows) and every
 * image of the prompt (columns): the grid cells the head still holds, those
 * merged into a kept entry, those evicted. An image is a run of positions
 * of one media item; the first image's pixels, when known, lie beneath. */
static int write_kept_maps(const struct args *a, const struct kvf_model *m, const struct kvf_session *s,
                           const struct kvf_prompt *pr, const struct sample *smp, const struct run *run,
                           const char *model) {
    const struct kvf_tag *tags = kvf_prompt_tags(pr);
    const int n = kvf_prompt_n_tokens(pr);
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    int *group = malloc(sizeof *group * (size_t)(n + 1)), n_img = 0;
    struct { int rows, cols; size_t at; } *img = calloc((size_t)n + 1, sizeof *img);
    if (!group || !img) {
        free(group), free(img);
        return fail(KVF_ERR_NOMEM, "eval");
    }
    size_t cells = 0; /* of one kv head's maps */
    for (int i = 0; i < n; i++) {
        if (tags[i].modality == KVF_MOD_TEXT || tags[i].row < 0) {
            group[i] = -1;
            continue;
        }
        if (i == 0 || group[i - 1] < 0 || tags[i].media != tags[i - 1].media ||
            tags[i].modality != tags[i - 1].modality) {
            if (n_img) cells += (size_t)img[n_img - 1].rows * img[n_img - 1].cols;
            img[n_img].at = cells;
            n_img++;
        }
        group[i] = n_img - 1;
        img[n_img - 1].rows = MAX(img[n_img - 1].rows, tags[i].row + 1);
        img[n_img - 1].cols = MAX(img[n_img - 1].cols, tags[i].col + 1);
    }
    if (n_img) cells += (size_t)img[n_img - 1].rows * img[n_img - 1].cols;
    const int n_kv = info.n_head_kv;
    unsigned char *state = n_img ? malloc(cells * (size_t)n_kv) : NULL;
    struct svg_grid *grids = n_img ? calloc((size_t)n_kv * n_img, sizeof *grids) : NULL;
    int rc = n_img && (!state || !grids) ? fail(KVF_ERR_NOMEM, "eval") : 0;
    const struct kvf_image *im = smp->first_image;
    for (int h = 0; !rc && h < n_kv; h++)
        for (int g = 0; g < n_img; g++)
            grids[h * n_img + g] = (struct svg_grid){img[g].rows, img[g].cols, state + h * cells + img[g].at,
                                                     g == 0 && im ? kvf_image_rgb(im) : NULL,
                                                     g == 0 && im ? kvf_image_width(im) : 0,
                                                     g == 0 && im ? kvf_image_height(im) : 0};
    if (n_img) make_dirs(a->eval.kept_map);
    for (int l = 0; !rc && n_img && l < info.n_layer; l++) {
        memset(state, SVG_EVICTED, cells * (size_t)n_kv);
        for (int h = 0; h < n_kv; h++) {
            unsigned char *st = state + h * cells;
            int nt, nm;
            const struct kvf_tag *kt = kvf_session_kv_tags(s, l, h, &nt);
            for (int j = 0; j < nt; j++) {
                const int p = kt[j].pos, g = p >= 0 && p < n ? group[p] : -1;
                if (g >= 0) st[img[g].at + (size_t)tags[p].row * img[g].cols + tags[p].col] = SVG_KEPT;
            }
            const struct kvf_kv_merge *mg = kvf_session_kv_merges(s, l, h, &nm);
            for (int j = 0; j < nm; j++) {
                const int p = mg[j].from, g = p >= 0 && p < n ? group[p] : -1;
                unsigned char *c = g >= 0 ? &st[img[g].at + (size_t)tags[p].row * img[g].cols + tags[p].col] : NULL;
                if (c && *c != SVG_KEPT) *c = SVG_MERGED;
            }
        }
        char path[4096], title[512], subtitle[512], label[128], err[512];
        run_label(run->kv, run->budget, label, sizeof label);
        snprintf(path, sizeof path, "%s/%s_layer%02d.svg", a->eval.kept_map, label, l);
        snprintf(title, sizeof title, "%s: layer %d, the image entries each kv head keeps", run->label, l);
        snprintf(subtitle, sizeof subtitle, "model %s%s", model,
                 kvf_prompt_is_synthetic(pr) ? "; synthetic data: pseudo-images (word embeddings)" : "");
        if (svg_kept_maps(path, title, subtitle, "kv head", "image", n_kv, n_img, grids, err, sizeof err) != 0) {
            print_error("eval: --kept-map: %s", err);
            rc = EXIT_INPUT;
        }
    }
    free(grids);
    free(state);
    free(img);
    free(group);
    return rc;
}


/* --------------------------------------------------------------- report -- */

/* One run on one sample as a JSON line, with the build that made it. */
static void row_json(FILE *f, const char *mode, const struct row *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "mode", mode);
    cJSON_AddStringToObject(o, "kv", r->spec);
    if (isnan(r->budget)) cJSON_AddNullToObject(o, "budget");
    else cJSON_AddNumberToObject(o, "budget", r->budget);
    cJSON_AddNumberToObject(o, "sample", r->sample);
    if (r->n_questions > 1) cJSON_AddNumberToObject(o, "question", r->question);
    cJSON_AddNumberToObject(o, "n_prompt", r->n_prompt);
    if (r->segments) cJSON_AddNumberToObject(o, "segments", r->segments);
    if (!isnan(r->depth)) cJSON_AddNumberToObject(o, "depth", r->depth);
    if (r->needle) cJSON_AddStringToObject(o, "needle", r->needle);
    if (r->synthetic) cJSON_AddTrueToObject(o, "synthetic");
    if (r->task) {
        cJSON_AddStringToObject(o, "task", r->task);
        cJSON_AddStringToObject(o, "metric", r->metric);
        cJSON_AddStringToObject(o, "sample_id", r->id);
        cJSON_AddStringToObject(o, "gt", r->gt);
        cJSON_AddNumberToObject(o, "images", r->images);
        if (r->level) cJSON_AddStringToObject(o, "image_quantity_level", r->level);
    }
    cJSON_AddNumberToObject(o, "score", r->score);
    if (!isnan(r->ppl)) cJSON_AddNumberToObject(o, "ppl", r->ppl);
    cJSON_AddNumberToObject(o, "kv_mib", r->kv_mib);
    cJSON_AddNumberToObject(o, "kv_full_mib", r->kv_full_mib);
    cJSON_AddNumberToObject(o, "kv_peak_mib", r->kv_peak_mib);
    cJSON_AddNumberToObject(o, "prefill_ms", r->prefill_ms);
    cJSON_AddNumberToObject(o, "compress_ms", r->compress_ms);
    if (!isnan(r->ms_per_token)) cJSON_AddNumberToObject(o, "decode_ms_per_token", r->ms_per_token);
    char *clean = utf8_sanitize(r->output ? r->output : "", r->output ? strlen(r->output) : 0);
    cJSON_AddStringToObject(o, "output", clean ? clean : "");
    free(clean);
    cJSON_AddStringToObject(o, "build", kvf_build_info());
    char *s = cJSON_PrintUnformatted(o);
    if (s) fprintf(f, "%s\n", s);
    free(s);
    cJSON_Delete(o);
}

/* One line of the summary: the mean over a run's samples. */
struct summary {
    const char *spec;
    const char *task, *metric; /* milebench, when summarised by task */
    const char *needle;        /* needle, when summarised by the needle's kind */
    double budget, score, ppl, kv_mib, kv_full_mib, ms_per_token, n_prompt;
    double vs_f16; /* KV bytes against an F16 full cache of the same positions; NaN: no full cache's row */
    int n;
};

static bool same_str(const char *a, const char *b) {
    return a == b || (a && b && !strcmp(a, b));
}

/* Budgets are NaN for presets without one. */
static bool same_budget(double x, double y) { return x == y || (isnan(x) && isnan(y)); }

static bool same_run(const struct row *x, const struct summary *s, bool by_group) {
    return !strcmp(x->spec, s->spec) && same_budget(x->budget, s->budget) &&
           (!by_group || (same_str(x->task, s->task) && same_str(x->needle, s->needle)));
}

/* The full cache's row on r's sample and question (the first run of every
 * sample), or NULL. */
static const struct row *full_row(const struct rows *rs, const struct row *r) {
    for (int i = 0; i < rs->n; i++) {
        const struct row *f = &rs->r[i];
        if (f->sample == r->sample && f->question == r->question && isnan(f->budget) && !strcmp(f->spec, "full"))
            return f;
    }
    return NULL;
}

/* The mean over the samples of each run, and with by_group of each task
 * (milebench) or needle kind. The F16 full cache's bytes are the full
 * cache's row's, less per_cache (MiB its cache holds whatever its length),
 * times f16 (a position's bytes in F16 over those in the sweep's types;
 * the full cache holds no per-entry statistics). */
static int summarise(const struct rows *rs, bool by_group, double f16, double per_cache, struct summary **out) {
    struct summary *s = calloc((size_t)rs->n + 1, sizeof *s);
    int n = 0;
    if (!s) return -1;
    for (int i = 0; i < rs->n; i++) {
        const struct row *r = &rs->r[i];
        int k = 0;
        while (k < n && !same_run(r, &s[k], by_group)) k++;
        if (k == n)
            s[n++] = (struct summary){.spec = r->spec, .budget = r->budget, .task = by_group ? r->task : NULL,
                                      .metric = by_group ? r->metric : NULL, .needle = by_group ? r->needle : NULL};
        struct summary *t = &s[k];
        t->score += r->score, t->ppl += r->ppl, t->kv_mib += r->kv_mib, t->kv_full_mib += r->kv_full_mib;
        t->ms_per_token += r->ms_per_token, t->n_prompt += r->n_prompt, t->n++;
        const struct row *f = full_row(rs, r);
        t->vs_f16 += f ? r->kv_mib / ((f->kv_full_mib - per_cache) * f16) : NAN;
    }
    for (int k = 0; k < n; k++) {
        const double d = s[k].n;
        s[k].score /= d, s[k].ppl /= d, s[k].kv_mib /= d, s[k].kv_full_mib /= d, s[k].ms_per_token /= d;
        s[k].vs_f16 /= d;
        s[k].n_prompt /= d;
    }
    *out = s;
    return n;
}

static const char *score_name(const char *mode) {
    return !strcmp(mode, "needle") ? "accuracy" : !strcmp(mode, "consistency") ? "ROUGE-L F1" : "score";
}

/* The markdown table (csv: comma-separated) of the summary; milebench's
 * is by task, with the metric of each; a needle's, by kind when both ran. */
static void print_summary(FILE *f, const char *mode, const struct summary *s, int n, bool csv) {
    const bool ppl = !strcmp(mode, "consistency"), tasks = n > 0 && s[0].task, kinds = n > 0 && s[0].needle;
    /* one needle per run: say whether it was found */
    bool yes_no = !strcmp(mode, "needle") && !csv;
    for (int k = 0; k < n; k++) yes_no &= s[k].n == 1;
    if (csv) {
        fprintf(f, "%skv,budget,samples,%s%s,kv_mib,kv_full_mib,kv_vs_f16_full,decode_ms_per_token,n_prompt,build\n",
                tasks ? "task,metric," : kinds ? "needle," : "", score_name(mode), ppl ? ",ppl" : "");
    } else {
        fprintf(f, "|%s kv | budget | samples | %s |%s KV MiB | full KV MiB | KV bytes vs F16 full | decode ms/token "
                "| prompt tokens |\n",
                tasks ? " task | metric |" : kinds ? " needle |" : "", yes_no ? "correct" : score_name(mode),
                ppl ? " PPL of the reference |" : "");
        fprintf(f, "|%s---|---|---|---|%s---|---|---|---|---|\n",
                tasks       ? "---|---|"
                    : kinds ? "---|"
                            : "",
                ppl ? "---|" : "");
    }
    for (int k = 0; k < n; k++) {
        char b[32] = "-";
        if (!isnan(s[k].budget)) snprintf(b, sizeof b, "%g", s[k].budget);
        char p[32] = "", t[320] = "";
        if (ppl) snprintf(p, sizeof p, csv ? ",%.4f" : " %.3f |", s[k].ppl);
        if (tasks) snprintf(t, sizeof t, csv ? "\"%s\",%s," : " %s | %s |", s[k].task, s[k].metric);
        else if (kinds) snprintf(t, sizeof t, csv ? "%s," : " %s |", s[k].needle);
        if (csv)
            fprintf(f, "%s\"%s\",%s,%d,%.4f%s,%.3f,%.3f,%.4f,%.3f,%.0f,\"%s\"\n", t, s[k].spec, b, s[k].n, s[k].score,
                    p, s[k].kv_mib, s[k].kv_full_mib, s[k].vs_f16, s[k].ms_per_token, s[k].n_prompt, kvf_build_info());
        else {
            char sc[16];
            if (yes_no) snprintf(sc, sizeof sc, "%s", s[k].score > 0 ? "yes" : "no");
            else snprintf(sc, sizeof sc, "%.3f", s[k].score);
            fprintf(f, "|%s `%s` | %s | %d | %s |%s %.2f | %.2f | %.3f | %.2f | %.0f |\n", t, s[k].spec, b, s[k].n, sc,
                    p, s[k].kv_mib, s[k].kv_full_mib, s[k].vs_f16, s[k].ms_per_token, s[k].n_prompt);
        }
    }
}

/* summary.md and summary.csv (results.jsonl grows as rows finish); note:
 * a line under the build saying the sweep was interrupted, or NULL. */
static int write_outputs(const struct args *a, const char *mode, const struct summary *s, int n, const char *note) {
    static const char *const names[2] = {"summary.md", "summary.csv"};
    for (int k = 0; k < 2; k++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", a->eval.out_dir, names[k]);
        FILE *f = fopen(path, "w");
        if (!f) {
            print_error("eval: cannot write '%s': %s", path, strerror(errno));
            return EXIT_INPUT;
        }
        if (k == 0) fprintf(f, "%s\n\n%s%s", kvf_build_info(), note ? note : "", note ? "\n\n" : "");
        print_summary(f, mode, s, n, k == 1);
        if (fclose(f) != 0) {
            print_error("eval: cannot write '%s'", path);
            return EXIT_INPUT;
        }
    }
    return 0;
}

/* ------------------------------------------------ the sweep, --resume -- */

/* One eval from start to end: its runs, every row so far (those read back
 * by --resume first), results.jsonl growing row by row, the progress. Rows
 * are known by (run, sample index): the settings on results.jsonl's first
 * line pin everything else a sample depends on. */
struct sweep {
    const char *mode;
    const struct run *runs;
    int n_runs, n_gen;        /* n_gen: tokens generated per answer */
    struct rows rows;
    cJSON *old;               /* --resume: results.jsonl's lines; the rows read back point into them */
    FILE *results;            /* --out DIR/results.jsonl, a line flushed as each row finishes */
    char path[4096];
    struct progress prog;
    char label[96];
    char model[256];          /* the model's file name, in the pictures' titles */
    long total, todo, done;   /* rows of the sweep; left to do at the start; done since */
    double f16;               /* a position's bytes in F16 over those in the sweep's types */
    double per_cache_mib;     /* ... and what a cache in those types holds whatever its length */
    bool stopped;             /* Ctrl-C left rows undone */
};

/* Tokens generated per answer: -n, else the mode's default. */
static int n_generate(const struct args *a, const char *mode) {
    return a->n_predict > 0 ? a->n_predict
           : !strcmp(mode, "needle") ? 12
           : !strcmp(mode, "milebench") || !strcmp(mode, "ruler") ? 64
                                                                   : 32;
}

/* The row of run k on sample index, when there is one. */
static const struct row *row_find(const struct sweep *sw, int k, int index) {
    for (int i = 0; i < sw->rows.n; i++) {
        const struct row *r = &sw->rows.r[i];
        if (r->sample == index && !strcmp(r->spec, sw->runs[k].kv) && same_budget(r->budget, sw->runs[k].budget))
            return r;
    }
    return NULL;
}

/* Once the sample count is known: the total, what --resume left to do, and
 * the progress line over that. */
static void sweep_begin(struct sweep *sw, int n_samples, const struct args *a) {
    sw->total = (long)n_samples * sw->n_runs;
    long have = 0;
    for (int i = 0; i < n_samples; i++)
        for (int k = 0; k < sw->n_runs; k++) have += row_find(sw, k, i) != NULL;
    sw->todo = sw->total - have;
    if (have) snprintf(sw->label, sizeof sw->label, "eval %s (resumed, %ld rows done before)", sw->mode, have);
    else snprintf(sw->label, sizeof sw->label, "eval %s", sw->mode);
    progress_init(&sw->prog, sw->label, "rows", sw->todo, a);
}

/* Whether sample index has a row left to do; the sweep stops here (a safe
 * point) once Ctrl-C was pressed. */
static bool sweep_wants(struct sweep *sw, int index) {
    bool todo = false;
    for (int k = 0; !todo && k < sw->n_runs; k++) todo = !row_find(sw, k, index);
    if (todo && interrupted()) sw->stopped = true;
    return todo && !sw->stopped;
}

/* A finished row: on stdout with --json, appended to results.jsonl (flushed,
 * so that a kill loses no finished row), kept for the summary (which takes
 * its strings). */
static int sweep_add(struct sweep *sw, const struct args *a, struct row *r) {
    if (a->json) row_json(stdout, sw->mode, r);
    if (sw->results) {
        row_json(sw->results, sw->mode, r);
        if (fflush(sw->results) != 0 || ferror(sw->results)) {
            print_error("eval: cannot write '%s': %s", sw->path, strerror(errno));
            free(r->output), free(r->gt);
            return EXIT_INPUT;
        }
    }
    sw->done += r->question == 0; /* progress counts runs on samples, whatever their questions */
    const int rc = rows_push(&sw->rows, r);
    if (rc) free(r->output), free(r->gt);
    return rc;
}

/* The last component of a path ("models/llava-hf/" -> "llava-hf"). */
static void path_name(const char *path, char *out, size_t cap) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--;
    size_t b = n;
    while (b > 0 && path[b - 1] != '/') b--;
    snprintf(out, cap, "%.*s", (int)(n - b), path + b);
}

/* A file by its name and size (a directory: the name), so that a moved
 * file still resumes while another model of the same file name (llama.cpp's
 * 7b/ggml-model-q4_0.gguf, 13b/ggml-model-q4_0.gguf) or an edited data file
 * does not. */
static void add_name(cJSON *o, const char *key, const char *path) {
    char name[1024];
    struct stat sb;
    if (path) path_name(path, name, sizeof name);
    if (path && stat(path, &sb) == 0 && S_ISREG(sb.st_mode)) {
        const size_t n = strlen(name);
        snprintf(name + n, sizeof name - n, " (%lld bytes)", (long long)sb.st_size);
    }
    if (path) cJSON_AddStringToObject(o, key, name);
    else cJSON_AddNullToObject(o, key);
}

static void add_str(cJSON *o, const char *key, const char *v) {
    if (v) cJSON_AddStringToObject(o, key, v);
    else cJSON_AddNullToObject(o, key);
}

/* What the rows depend on besides their run and sample index, keyed by the
 * option that sets it (for the error of a --resume that does not fit):
 * the mode, the model, and the options of the mode that shape a sample or
 * its answer. Threads are left out (they change timings, not results). */
static cJSON *sweep_settings(const struct args *a, const char *mode, int n_gen) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    const bool mb = !strcmp(mode, "milebench"), synthetic = !mb && !a->eval.data;
    add_str(o, "mode", mode);
    add_name(o, "--model", a->model);
    add_name(o, "--mmproj", a->mmproj);
    cJSON_AddNumberToObject(o, "--n-predict", n_gen);
    add_str(o, "--chat-template", a->chat_template);
    if (a->type_k_id == a->type_v_id) { /* as results written before -ctk / -ctv, so that --resume takes them */
        add_str(o, "--kv-type", kvf_kv_type_name(a->type_k_id));
    } else {
        add_str(o, "-ctk", kvf_kv_type_name(a->type_k_id));
        add_str(o, "-ctv", kvf_kv_type_name(a->type_v_id));
    }
    cJSON_AddNumberToObject(o, "--batch", a->batch);
    cJSON_AddNumberToObject(o, "--pseudo-noise", f32_json(a->pseudo_noise));
    add_name(o, "--data", a->eval.data);
    add_str(o, "--question", a->eval.question);
    if (mb || !strcmp(mode, "ruler")) {
        add_str(o, "--tasks", a->eval.tasks);
        cJSON_AddNumberToObject(o, "--ctx-size", a->ctx > 0 || mb ? a->ctx : RULER_CTX);
    }
    if (!strcmp(mode, "ruler")) {
        add_name(o, "--words", a->eval.words);
        add_name(o, "--haystack", a->eval.haystack);
        if (a->eval.questions > 1) cJSON_AddNumberToObject(o, "--questions", a->eval.questions);
        if (a->eval.turns) cJSON_AddBoolToObject(o, "--turns", true);
    }
    cJSON_AddNumberToObject(o, "--samples", a->eval.n_samples);
    if (synthetic) {
        char seed[32];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)a->seed);
        add_str(o, "--seed", seed);
        add_str(o, "--segments", a->eval.segments);
        cJSON_AddNumberToObject(o, "--segment-words", a->eval.seg_words);
        add_str(o, "--grid", a->eval.grid);
    }
    if (synthetic && !strcmp(mode, "needle")) {
        add_str(o, "--depths", a->eval.depths);
        add_str(o, "--needle", a->eval.needle);
    }
    return o;
}

/* results.jsonl's first line against this run's settings: the first that
 * differs is a usage error naming it. */
static int settings_check(const struct sweep *sw, const cJSON *line, const cJSON *want) {
    const cJSON *have = cJSON_GetObjectItemCaseSensitive(line, "settings");
    if (!cJSON_IsObject(have)) {
        print_error("eval: --resume: %s line 1: not the settings of kvfold eval", sw->path);
        return EXIT_INPUT;
    }
    for (const cJSON *w = want->child; w; w = w->next) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(have, w->string);
        if (h && cJSON_Compare(h, w, true)) continue;
        char *hs = h ? cJSON_PrintUnformatted(h) : NULL, *ws = cJSON_PrintUnformatted(w);
        print_error("eval: --resume: %s holds rows made with %s %s, this run has %s: use another --out, or leave "
                    "--resume out to start over", sw->path, w->string, hs ? hs : "unset", ws ? ws : "?");
        free(hs), free(ws);
        return EXIT_USAGE;
    }
    return 0;
}

static double num_or(const cJSON *o, const char *key, double dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static const char *str_or_null(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* A line of results.jsonl back into a row (row_json's fields); its strings
 * point into o, but for gt and output, which rows own. */
static bool row_read(const cJSON *o, struct row *r) {
    const cJSON *kv = cJSON_GetObjectItemCaseSensitive(o, "kv"), *b = cJSON_GetObjectItemCaseSensitive(o, "budget");
    const cJSON *smp = cJSON_GetObjectItemCaseSensitive(o, "sample"),
                *score = cJSON_GetObjectItemCaseSensitive(o, "score");
    if (!cJSON_IsString(kv) || !(cJSON_IsNumber(b) || cJSON_IsNull(b)) || !cJSON_IsNumber(smp) ||
        !cJSON_IsNumber(score))
        return false;
    *r = (struct row){.budget = cJSON_IsNumber(b) ? b->valuedouble : NAN, .sample = smp->valueint,
                      .question = (int)num_or(o, "question", 0),
                      .score = score->valuedouble, .n_prompt = (int)num_or(o, "n_prompt", 0),
                      .segments = (int)num_or(o, "segments", 0), .depth = num_or(o, "depth", NAN),
                      .needle = str_or_null(o, "needle"), .task = str_or_null(o, "task"),
                      .metric = str_or_null(o, "metric"), .level = str_or_null(o, "image_quantity_level"),
                      .images = (int)num_or(o, "images", 0), .ppl = num_or(o, "ppl", NAN),
                      .synthetic = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, "synthetic")),
                      .kv_mib = num_or(o, "kv_mib", NAN), .kv_full_mib = num_or(o, "kv_full_mib", NAN),
                      .kv_peak_mib = num_or(o, "kv_peak_mib", NAN), .prefill_ms = num_or(o, "prefill_ms", NAN),
                      .compress_ms = num_or(o, "compress_ms", NAN),
                      .ms_per_token = num_or(o, "decode_ms_per_token", NAN)};
    snprintf(r->spec, sizeof r->spec, "%s", kv->valuestring);
    const char *id = str_or_null(o, "sample_id"), *gt = str_or_null(o, "gt"), *out = str_or_null(o, "output");
    snprintf(r->id, sizeof r->id, "%s", id ? id : "");
    r->gt = r->task ? strdup(gt ? gt : "") : NULL;
    r->output = strdup(out ? out : "");
    if ((r->task && !r->gt) || !r->output) {
        free(r->gt), free(r->output);
        return false;
    }
    return true;
}

/* --resume: the settings line checked, the rows read back into sw. A last
 * line without its newline was cut short by a kill: it is dropped, and cut
 * from the file before rows are appended. *any: the file had its settings. */
static int sweep_read(struct sweep *sw, const cJSON *settings, bool *any) {
    char *text = NULL;
    size_t len = 0;
    int rc = read_file(sw->path, &text, &len), line = 0;
    if (rc) return rc;
    size_t keep = len;
    while (keep > 0 && text[keep - 1] != '\n') keep--;
    if (keep < len && truncate(sw->path, (off_t)keep) != 0) {
        print_error("eval: --resume: cannot cut the unfinished last line of '%s': %s", sw->path, strerror(errno));
        rc = EXIT_INPUT;
    }
    if (!rc && !(sw->old = cJSON_CreateArray())) rc = fail(KVF_ERR_NOMEM, "eval");
    for (size_t at = 0; !rc && at < keep; line++) {
        const size_t end = at + strcspn(text + at, "\n");
        cJSON *o = cJSON_ParseWithLength(text + at, end - at);
        at = end + 1;
        struct row r;
        if (o) cJSON_AddItemToArray(sw->old, o);
        if (o && line == 0) rc = settings_check(sw, o, settings);
        else if (o && row_read(o, &r)) rc = rows_push(&sw->rows, &r);
        else {
            print_error("eval: --resume: %s line %d: not a row of kvfold eval", sw->path, line + 1);
            rc = EXIT_INPUT;
        }
    }
    free(text);
    *any = line > 0;
    return rc;
}

/* --out: results.jsonl opened before the model loads (a bad path, or a
 * --resume that does not fit, fails at once). Its first line is the
 * settings, each further line a row; --resume reads the rows there and
 * appends, else the file starts over. Without --out nothing is written. */
static int sweep_open(struct sweep *sw, const struct args *a) {
    if (!a->eval.out_dir) {
        if (!a->eval.resume) return 0;
        print_error("eval: --resume continues the rows of DIR/results.jsonl: give --out DIR");
        return EXIT_USAGE;
    }
    make_dirs(a->eval.out_dir);
    snprintf(sw->path, sizeof sw->path, "%s/results.jsonl", a->eval.out_dir);
    cJSON *settings = sweep_settings(a, sw->mode, sw->n_gen);
    bool append = false;
    int rc = settings ? 0 : fail(KVF_ERR_NOMEM, "eval");
    if (!rc && a->eval.resume && path_is_file(sw->path)) rc = sweep_read(sw, settings, &append);
    if (!rc && !(sw->results = fopen(sw->path, append ? "a" : "w"))) {
        print_error("eval: cannot write '%s': %s", sw->path, strerror(errno));
        rc = EXIT_INPUT;
    }
    if (!rc && !append) {
        cJSON *head = cJSON_CreateObject();
        char *line = NULL;
        if (head && cJSON_AddItemReferenceToObject(head, "settings", settings) &&
            cJSON_AddStringToObject(head, "build", kvf_build_info()))
            line = cJSON_PrintUnformatted(head);
        if (!line) rc = fail(KVF_ERR_NOMEM, "eval");
        else if (fprintf(sw->results, "%s\n", line) < 0 || fflush(sw->results) != 0) {
            print_error("eval: cannot write '%s': %s", sw->path, strerror(errno));
            rc = EXIT_INPUT;
        }
        free(line);
        cJSON_Delete(head);
    }
    cJSON_Delete(settings);
    return rc;
}

static void sweep_free(struct sweep *sw) {
    if (sw->results) fclose(sw->results);
    for (int i = 0; i < sw->rows.n; i++) free(sw->rows.r[i].output), free(sw->rows.r[i].gt);
    free(sw->rows.r);
    cJSON_Delete(sw->old);
}

/* --plots: quality, perplexity and KV memory against budget (a line per
 * --kv; a needle's quality in a panel per kind, text and image), decode
 * ms/token against prompt length, and the needle heatmap. The full cache is
 * the black dashed reference in each. */
struct plots {
    const struct args *a;
    char subtitle[512];
    const char *specs[PLOT_MAX_SPECS]; /* the --kv of the summaries, in order ("full" first) */
    int n_specs;
};

static int plot_write(const struct plots *pl, const char *file, const char *title, const struct svg_chart *panels,
                      int n) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s", pl->a->eval.plots, file);
    if (svg_line_charts(path, title, pl->subtitle, panels, n, err, sizeof err) == 0) return 0;
    print_error("eval: --plots: %s", err);
    return EXIT_INPUT;
}

/* One panel's lines against budget from the summaries of a needle kind
 * (NULL: all of them): what 0 the score, 1 the perplexity, 2 KV MiB. The
 * points go to x[], y[] (n entries free; returns the count used), series[]
 * gets one per spec. */
static int budget_series(const struct plots *pl, const struct summary *s, int n, const char *kind, int what,
                          double *x, double *y, struct svg_series *series) {
    int used = 0;
    for (int j = 0; j < pl->n_specs; j++) {
        const int from = used;
        for (int k = 0; k < n; k++) {
            if (strcmp(s[k].spec, pl->specs[j]) || (kind && !same_str(s[k].needle, kind))) continue;
            /* the full cache and budget-less presets sit at budget 1 */
            x[used] = isnan(s[k].budget) ? 1.0 : s[k].budget;
            y[used++] = what == 0 ? s[k].score : what == 1 ? s[k].ppl : s[k].kv_mib;
        }
        series[j] = (struct svg_series){.label = pl->specs[j], .n = used - from, .x = x + from, .y = y + from,
                                        .reference = !strcmp(pl->specs[j], "full")};
    }
    return used;
}

/* The index of v in x[0..*n), appended when absent. */
static int category(double *x, int *n, double v) {
    int i = 0;
    while (i < *n && x[i] != v) i++;
    if (i == *n) x[(*n)++] = v;
    return i;
}

/* Decode ms/token against prompt length: each --kv at its lowest budget
 * (so that lines compare methods), the mean over its rows of each length. */
static int plot_decode_speed(const struct plots *pl, const struct rows *rs) {
    double *xs = calloc((size_t)rs->n + 1, sizeof *xs), *ys = calloc((size_t)rs->n + 1, sizeof *ys);
    double *cnt = calloc((size_t)rs->n + 1, sizeof *cnt);
    struct svg_series series[PLOT_MAX_SPECS];
    int rc = xs && ys && cnt ? 0 : fail(KVF_ERR_NOMEM, "eval");
    for (int j = 0, used = 0; !rc && j < pl->n_specs; j++) {
        double lo = INFINITY;
        for (int i = 0; i < rs->n; i++)
            if (!strcmp(rs->r[i].spec, pl->specs[j]) && !isnan(rs->r[i].budget)) lo = fmin(lo, rs->r[i].budget);
        double *x = xs + used, *y = ys + used, *c = cnt + used;
        int np = 0;
        for (int i = 0; i < rs->n; i++) {
            const struct row *r = &rs->r[i];
            if (strcmp(r->spec, pl->specs[j]) || isnan(r->ms_per_token) || (!isnan(r->budget) && r->budget != lo))
                continue;
            const int p = category(x, &np, r->n_prompt);
            y[p] += r->ms_per_token, c[p] += 1;
        }
        for (int p = 0; p < np; p++) y[p] /= c[p];
        series[j] = (struct svg_series){.label = pl->specs[j], .n = np, .x = x, .y = y,
                                        .reference = !strcmp(pl->specs[j], "full")};
        used += np;
    }
    const struct svg_chart ch = {NULL, "prompt tokens", "decode ms/token", false, false, series, pl->n_specs, false};
    if (!rc)
        rc = plot_write(pl, "decode_speed.svg", "Decode speed against prompt length (each method at its lowest budget)",
                        &ch, 1);
    free(cnt), free(xs), free(ys);
    return rc;
}

static int cmp_double(const void *p, const void *q) {
    const double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

/* needle_heatmap.svg: for each kind and run, the mean score over depth
 * (rows, the shallowest on top) x prompt length (columns: a --segments
 * count's mean prompt tokens, or each length of --data). */
static int plot_heatmap(const struct plots *pl, const struct rows *rs, const struct summary *all, int n_all) {
    const int n = rs->n;
    double *depths = calloc((size_t)n + 1, sizeof *depths), *lens = calloc((size_t)n + 1, sizeof *lens);
    double *keys = calloc((size_t)n + 1, sizeof *keys), *key_sum = calloc((size_t)n + 1, sizeof *key_sum);
    double *key_n = calloc((size_t)n + 1, sizeof *key_n);
    int n_depth = 0, n_key = 0, rc = depths && lens && keys && key_sum && key_n ? 0 : fail(KVF_ERR_NOMEM, "eval");
    for (int i = 0; !rc && i < n; i++) {
        const struct row *r = &rs->r[i];
        if (isnan(r->depth)) continue;
        category(depths, &n_depth, r->depth);
        /* one column per --segments count: its samples' lengths differ by a few tokens */
        const int k = category(keys, &n_key, r->segments ? r->segments : -r->n_prompt);
        key_sum[k] += r->n_prompt, key_n[k]++;
    }
    qsort(depths, (size_t)n_depth, sizeof *depths, cmp_double);
    for (int k = 0; k < n_key; k++) lens[k] = round(key_sum[k] / key_n[k]);
    static const char *const kinds[2] = {"text", "image"};
    const int n_cells = n_depth * n_key, n_panels = 2 * n_all;
    double *v = calloc((size_t)n_panels * n_cells + 1, sizeof *v),
           *cnt = calloc((size_t)n_panels * n_cells + 1, sizeof *cnt);
    struct svg_heat *panels = calloc((size_t)n_panels + 1, sizeof *panels);
    char (*titles)[400] = calloc((size_t)n_panels + 1, sizeof *titles);
    if (!rc && (!v || !cnt || !panels || !titles)) rc = fail(KVF_ERR_NOMEM, "eval");
    /* the columns in length order: keys sorted by their mean length */
    int *col = calloc((size_t)n_key + 1, sizeof *col);
    if (!rc && !col) rc = fail(KVF_ERR_NOMEM, "eval");
    for (int k = 0; !rc && k < n_key; k++)
        for (int j = 0; j < n_key; j++) col[k] += lens[j] < lens[k] || (lens[j] == lens[k] && j < k);
    double *xs = rc ? NULL : calloc((size_t)n_key + 1, sizeof *xs);
    if (!rc && !xs) rc = fail(KVF_ERR_NOMEM, "eval");
    for (int k = 0; !rc && k < n_key; k++) xs[col[k]] = lens[k];
    int used = 0;
    for (int kind = 0; !rc && kind < 2; kind++)
        for (int s = 0; s < n_all; s++) {
            double *pv = v + (size_t)used * n_cells, *pc = cnt + (size_t)used * n_cells;
            bool any = false;
            for (int i = 0; i < n; i++) {
                const struct row *r = &rs->r[i];
                if (isnan(r->depth) || !same_str(r->needle, kinds[kind]) || strcmp(r->spec, all[s].spec) ||
                    !same_budget(r->budget, all[s].budget))
                    continue;
                int d = 0, k = 0;
                while (depths[d] != r->depth) d++;
                while (keys[k] != (r->segments ? r->segments : -r->n_prompt)) k++;
                pv[d * n_key + col[k]] += r->score, pc[d * n_key + col[k]]++;
                any = true;
            }
            if (!any) continue;
            for (int c = 0; c < n_cells; c++) pv[c] = pc[c] ? pv[c] / pc[c] : NAN;
            if (isnan(all[s].budget))
                snprintf(titles[used], sizeof titles[used], "%s needle: %s", kinds[kind], all[s].spec);
            else
                snprintf(titles[used], sizeof titles[used], "%s needle: %s at %g", kinds[kind], all[s].spec,
                         all[s].budget);
            panels[used] = (struct svg_heat){titles[used], n_key, n_depth, xs, depths, pv};
            used++;
        }
    if (!rc && used) {
        char path[4096], err[512];
        snprintf(path, sizeof path, "%s/needle_heatmap.svg", pl->a->eval.plots);
        if (svg_heatmaps(path, "Needle retrieval by depth and prompt length", pl->subtitle, "prompt tokens",
                         "needle depth", "accuracy", panels, used, 4, err, sizeof err) != 0) {
            print_error("eval: --plots: %s", err);
            rc = EXIT_INPUT;
        }
    }
    free(xs), free(col), free(titles), free(panels), free(cnt), free(v);
    free(key_n), free(key_sum), free(keys), free(lens), free(depths);
    return rc;
}

static int write_plots(const struct args *a, const struct sweep *sw, const struct summary *all, int n_all) {
    struct plots pl = {.a = a};
    bool synthetic = false;
    for (int i = 0; i < sw->rows.n; i++) synthetic |= sw->rows.r[i].synthetic;
    const bool generated = strcmp(sw->mode, "milebench") && !a->eval.data;
    snprintf(pl.subtitle, sizeof pl.subtitle, "model %s%s", sw->model,
             synthetic ? "; synthetic data: haystacks with pseudo-images (word embeddings)"
             : generated ? "; synthetic data: generated haystacks" : "");
    for (int k = 0; k < n_all; k++) {
        int j = 0;
        while (j < pl.n_specs && strcmp(pl.specs[j], all[k].spec)) j++;
        if (j < pl.n_specs) continue;
        if (pl.n_specs == PLOT_MAX_SPECS) {
            fprintf(stderr, "kvfold: eval: the plots show the first %d policies of the rows\n", PLOT_MAX_SPECS);
            break;
        }
        pl.specs[pl.n_specs++] = all[k].spec;
    }
    make_dirs(a->eval.plots);
    /* a needle's quality in a panel per kind, text first: never averaged together */
    const bool needle = !strcmp(sw->mode, "needle");
    static const char *const kinds[2] = {"text", "image"};
    const char *kind[2];
    int n_kinds = 0;
    for (int k = 0; needle && k < 2; k++)
        for (int i = 0; i < sw->rows.n; i++)
            if (same_str(sw->rows.r[i].needle, kinds[k])) {
                kind[n_kinds++] = kinds[k];
                break;
            }
    struct summary *by_kind = NULL;
    const int n_by = n_kinds ? summarise(&sw->rows, true, sw->f16, sw->per_cache_mib, &by_kind) : 0;
    double *xs = calloc((size_t)(n_by + n_all + 1), sizeof *xs), *ys = calloc((size_t)(n_by + n_all + 1), sizeof *ys);
    struct svg_series series[2][PLOT_MAX_SPECS];
    int rc = xs && ys && n_by >= 0 ? 0 : fail(KVF_ERR_NOMEM, "eval");
    const struct { const char *file, *title, *ylabel; int what; } charts[] = {
        {"quality.svg", "Answer quality against KV budget", score_name(sw->mode), 0},
        {"perplexity.svg", "Perplexity of the full cache's answer", "perplexity", 1},
        {"kv_memory.svg", "KV cache memory against budget", "KV cache (MiB)", 2},
    };
    for (size_t c = 0; !rc && c < COUNT_OF(charts); c++) {
        if (charts[c].what == 1 && strcmp(sw->mode, "consistency")) continue;
        const bool per_kind = charts[c].what == 0 && n_kinds > 0;
        struct svg_chart panels[2];
        char titles[2][32];
        int used = 0;
        for (int p = 0; p < (per_kind ? n_kinds : 1); p++) {
            snprintf(titles[p], sizeof titles[p], "%s needle", per_kind ? kind[p] : "");
            used += per_kind
                ? budget_series(&pl, by_kind, n_by, kind[p], charts[c].what, xs + used, ys + used, series[p])
                : budget_series(&pl, all, n_all, NULL, charts[c].what, xs, ys, series[p]);
            panels[p] = (struct svg_chart){per_kind ? titles[p] : NULL, "KV budget (share of the prompt)",
                                           charts[c].ylabel, true, false, series[p], pl.n_specs, charts[c].what == 0};
        }
        rc = plot_write(&pl, charts[c].file, charts[c].title, panels, per_kind ? n_kinds : 1);
    }
    free(xs), free(ys), free(by_kind);
    if (!rc) rc = plot_decode_speed(&pl, &sw->rows);
    if (!rc && needle) rc = plot_heatmap(&pl, &sw->rows, all, n_all);
    return rc;
}

/* ---------------------------------------------------------------- driver -- */

static int make_runs(const struct args *a, struct run *runs, int *n_runs) {
    static const char *const defaults[] = {"snapkv", "h2o", "streaming", "lookm"};
    double b[EVAL_MAX_LIST];
    int nb;
    if (!parse_list(a->eval.budgets, 1e-6, 1e9, b, &nb)) {
        print_error("eval: --budgets '%s': want a comma-separated list of ratios in (0, 1] or entry counts",
                    a->eval.budgets);
        return EXIT_USAGE;
    }
    const int n_kv = a->kvs.n ? a->kvs.n : (int)(sizeof defaults / sizeof *defaults);
    int n = 0;
    runs[n++] = (struct run){"full", "full", NAN};
    for (int i = 0; i < n_kv; i++) {
        const char *kv = a->kvs.n ? a->kvs.v[i] : defaults[i];
        if (kvf_kv_policy_check(kv) != KVF_OK) {
            print_error("eval: --kv: %s (see kvfold policies)", kvf_last_error());
            return EXIT_USAGE;
        }
        if (!strcmp(kv, "full")) continue;
        const bool sweep = spec_has_budget_key(kv);
        for (int k = 0; k < (sweep ? nb : 1); k++) {
            struct run *r = &runs[n++];
            r->kv = kv, r->budget = sweep ? b[k] : NAN;
            if (sweep) snprintf(r->label, sizeof r->label, "%s at budget %g", kv, b[k]);
            else snprintf(r->label, sizeof r->label, "%s", kv);
            if (kvf_kv_policy_check_budget(kv, run_budget(r)) != KVF_OK) {
                print_error("eval: --kv %s: %s", r->label, kvf_last_error());
                return EXIT_USAGE;
            }
        }
    }
    *n_runs = n;
    return 0;
}

struct args eval_chat_args(const struct args *a, const struct kvf_model *m) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    struct args ca = *a;
    ca.chat = strcmp(info.chat_template_name, "none") != 0 || info.has_vision || a->chat_template;
    return ca;
}

/* Runs every run that has no row yet on one sample; consistency's reference
 * is the full cache's output (run again, without a new row, when only its
 * row is there). Stops between runs once Ctrl-C was pressed. */
static int eval_sample(const struct args *a, const struct kvf_model *m, struct sample *smp, int index,
                       struct sweep *sw) {
    const struct args ca = eval_chat_args(a, m);
    char *text = NULL;
    struct kvf_prompt *pr = NULL;
    struct after q = {0}, more[RULER_MAX_QUESTIONS - 1] = {0};
    int rc = build_prompt(&ca, m, smp->text, &text);
    if (!rc && smp->answer_prefix) { /* the answer starts with it, after the chat template's turn to the assistant */
        const size_t n = strlen(text), p = strlen(smp->answer_prefix);
        char *t = realloc(text, n + p + 1);
        if (t) memcpy(t + n, smp->answer_prefix, p + 1), text = t;
        else rc = fail(KVF_ERR_NOMEM, "eval");
    }
    const bool turns = a->eval.turns;
    if (!rc && smp->n_more) rc = turns ? turns_split(&ca, m, smp, more) : more_split(&ca, m, smp, text, more);
    if (!rc && !strcmp(a->eval.question, "after")) rc = question_split(&ca, m, smp, text, &q);
    const int n_gen = sw->n_gen;
    /* the sessions' room after the context: the longest question and its answer; --turns: every question, every
     * answer and the token each answer stopped on */
    int room = q.n + n_gen;
    for (int j = 0; j < smp->n_more; j++) room = turns ? room + more[j].n + n_gen + 1 : MAX(room, more[j].n + n_gen);
    if (!rc) rc = prompt_make(m, text, &smp->media, ca.chat, &pr);
    free(text);
    const bool consistency = !strcmp(sw->mode, "consistency");
    const struct run *runs = sw->runs;
    /* the reference's tokens (consistency), an answer's (--turns) */
    int32_t *ref = calloc((size_t)n_gen + 1, sizeof *ref), *ids = calloc((size_t)n_gen + 1, sizeof *ids);
    char *ref_text = NULL;
    int n_ref = 0;
    if (!rc && (!ref || !ids)) rc = fail(KVF_ERR_NOMEM, "eval");
    struct shared sh = {0};
    if (!rc) rc = shared_open(a, m, pr, room, &sh);
    char what[400] = "";
    if (smp->task) snprintf(what, sizeof what, " (%s %s)", smp->task->name, smp->id);
    else if (smp->ruler) snprintf(what, sizeof what, " (%s)", smp->ruler);
    else if (smp->needle && !isnan(smp->depth))
        snprintf(what, sizeof what, " (%s needle at depth %g)", smp->needle, smp->depth);
    for (int k = 0; !rc && k < sw->n_runs; k++) {
        const bool have = row_find(sw, k, index) != NULL, ref_only = have && k == 0 && consistency;
        if (have && !ref_only) continue;
        char detail[sizeof what + sizeof runs[k].label + 32];
        snprintf(detail, sizeof detail, "sample %d/%ld%s, %s", index + 1, sw->total / sw->n_runs, what, runs[k].label);
        progress_update(&sw->prog, sw->done, detail);
        if (interrupted()) {
            sw->stopped = true;
            break;
        }
        struct row r = {.budget = runs[k].budget, .sample = index, .segments = smp->segments, .depth = smp->depth,
                        .needle = smp->needle, .ppl = NAN, .n_prompt = kvf_prompt_n_tokens(pr) + q.n,
                        .synthetic = kvf_prompt_is_synthetic(pr), .n_questions = 1 + smp->n_more};
        snprintf(r.spec, sizeof r.spec, "%s", runs[k].kv);
        if (smp->task) {
            r.task = smp->task->name, r.metric = mb_task_metric(smp->task), r.level = smp->level;
            r.images = smp->media.n;
            snprintf(r.id, sizeof r.id, "%s", smp->id);
            if (!(r.gt = strdup(smp->answer))) rc = fail(KVF_ERR_NOMEM, "eval");
        } else if (smp->ruler) {
            r.task = smp->ruler, r.metric = "string_match_all";
            if (!(r.gt = strdup(smp->answer))) rc = fail(KVF_ERR_NOMEM, "eval");
        }
        struct kvf_session *s = NULL, *base = NULL;
        struct strbuf out = { 0 };
        if (!rc) rc = run_prefill(a, m, pr, &sh, &runs[k], room, &q, &s, smp->n_more && !turns ? &base : NULL, &r);
        if (!rc && turns) rc = turn_compress(s, &r);
        if (!rc && a->eval.kept_map && index == 0 && !ref_only)
            rc = write_kept_maps(a, m, s, pr, smp, &runs[k], sw->model);
        int n_ids = 0;
        if (!rc) rc = run_greedy(m, s, n_gen, &out, ids, &n_ids, &r);
        if (k == 0) memcpy(ref, ids, sizeof *ref * (size_t)(n_ref = n_ids));
        if (!turns) kvf_session_free(s), s = NULL;
        if (!rc && k == 0 && consistency && !(ref_text = strdup(out.s ? out.s : ""))) rc = fail(KVF_ERR_NOMEM, "eval");
        if (!rc && consistency && !ref_only) {
            r.score = metrics_rouge_l_f1(out.s ? out.s : "", ref_text);
            /* the reference continuation, teacher-forced under the policy */
            struct row forced = r;
            rc = run_prefill(a, m, pr, &sh, &runs[k], room, &q, &s, NULL, &forced);
            if (!rc) rc = run_forced(m, s, ref, n_ref, &r.ppl);
            kvf_session_free(s), s = NULL;
        } else if (!rc && smp->task) {
            r.score = mb_score(smp, out.s ? out.s : "");
        } else if (!rc && smp->ruler) {
            r.score = metrics_match_all(out.s ? out.s : "", smp->answer);
        } else if (!rc && !consistency) {
            r.score = metrics_contains(out.s ? out.s : "", smp->answer) ? 1.0 : 0.0;
        }
        r.output = out.s ? out.s : strdup("");
        /* the further questions, each of a copy of the compressed context (--turns: each a message of the
         * conversation s holds); the rows of a run added together */
        struct row rq[RULER_MAX_QUESTIONS];
        int n_rq = 0;
        rq[n_rq++] = r;
        for (int j = 0; !rc && j < smp->n_more; j++) {
            struct row *x = &rq[n_rq];
            *x = (struct row){.budget = r.budget, .sample = index, .question = j + 1, .n_questions = r.n_questions,
                              .depth = r.depth, .ppl = NAN, .n_prompt = kvf_prompt_n_tokens(pr) + more[j].n,
                              .task = r.task, .metric = r.metric, .kv_mib = r.kv_mib, .kv_full_mib = r.kv_full_mib,
                              .prefill_ms = r.prefill_ms, .compress_ms = r.compress_ms};
            snprintf(x->spec, sizeof x->spec, "%s", r.spec);
            struct kvf_session *c = turns ? s : base;
            enum kvf_status st = KVF_OK;
            /* --turns: the token the last answer stopped on goes in, as chat's reply does */
            if (turns && n_ids == n_gen) st = kvf_session_decode(s, ids[n_gen - 1]);
            else if (!turns && j + 1 < smp->n_more) st = kvf_session_copy(base, &c);
            const double t0 = now_ms();
            if (st == KVF_OK) st = kvf_session_prefill(c, more[j].ids, more[j].n, NULL);
            rc = st != KVF_OK ? fail(st, "eval: a further question") : 0;
            if (!rc && turns) {
                x->prefill_ms = now_ms() - t0, x->n_prompt = kvf_session_n_past(s);
                rc = turn_compress(s, x);
            }
            struct strbuf o = { 0 };
            if (!rc) rc = run_greedy(m, c, n_gen, &o, turns ? ids : NULL, turns ? &n_ids : NULL, x);
            if (c != base && c != s) kvf_session_free(c);
            x->score = metrics_match_all(o.s ? o.s : "", smp->more[j].answer);
            x->gt = strdup(smp->more[j].answer);
            x->output = o.s ? o.s : strdup("");
            n_rq++;
            if (!rc && (!x->gt || !x->output)) rc = fail(KVF_ERR_NOMEM, "eval");
        }
        kvf_session_free(base);
        kvf_session_free(s);
        for (int j = 0; j < n_rq; j++) {
            if (!rc && !ref_only) rc = sweep_add(sw, a, &rq[j]);
            else free(rq[j].output), free(rq[j].gt);
        }
    }
    for (int j = 0; j < smp->n_more; j++) free(more[j].ids);
    kvf_session_free(sh.src);
    free(q.ids);
    free(ref);
    free(ids);
    free(ref_text);
    kvf_prompt_free(pr);
    return rc;
}

/* consistency and needle --data FILE: JSON lines {"prompt": TEXT, "media":
 * [{"image"|"frame"|"pseudo": PATH}, ...]} (kvfold profile's samples),
 * paths relative to the file's directory; a needle's line also gives the
 * "answer" the output must contain and its "kind" ("text" or "image",
 * default text). */
static bool data_line_ok(const struct args *a, bool needle, const cJSON *o, int line) {
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "prompt"),
                *media = cJSON_GetObjectItemCaseSensitive(o, "media");
    const cJSON *answer = cJSON_GetObjectItemCaseSensitive(o, "answer"),
                *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (!cJSON_IsString(pt) || (media && !cJSON_IsArray(media))) {
        print_error("eval: %s line %d: expected {\"prompt\": TEXT, \"media\": [...]%s}", a->eval.data, line,
                    needle ? ", \"answer\": TEXT, \"kind\": \"text\"|\"image\"" : "");
        return false;
    }
    const cJSON *question = cJSON_GetObjectItemCaseSensitive(o, "question");
    if ((question && !(cJSON_IsString(question) && question->valuestring[0])) ||
        (!question && !strcmp(a->eval.question, "after"))) {
        print_error("eval: %s line %d: %s", a->eval.data, line,
                    question ? "\"question\" must be a non-empty string" : "--question after needs the line's "
                    "\"question\" (asked after its \"prompt\")");
        return false;
    }
    if (needle && (!cJSON_IsString(answer) || !answer->valuestring[0] ||
                   (kind && (!cJSON_IsString(kind) || (strcmp(kind->valuestring, "text") &&
                                                       strcmp(kind->valuestring, "image")))))) {
        print_error("eval: %s line %d: a needle needs a non-empty \"answer\" and a \"kind\" of text or image",
                    a->eval.data, line);
        return false;
    }
    return true;
}

/* One sample of the file (a checked line): its text, answer and media. */
static int data_sample(const struct args *a, const struct kvf_model *m, bool needle, const cJSON *o, const char *dir,
                       int line, bool first, struct sample *smp) {
    const cJSON *media = cJSON_GetObjectItemCaseSensitive(o, "media");
    const cJSON *answer = cJSON_GetObjectItemCaseSensitive(o, "answer"),
                *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    const cJSON *question = cJSON_GetObjectItemCaseSensitive(o, "question");
    const char *prompt = cJSON_GetObjectItemCaseSensitive(o, "prompt")->valuestring;
    *smp = (struct sample){.depth = NAN};
    /* a "question" follows the prompt; --question after compresses the prompt before it */
    struct strbuf text = { 0 };
    if (!strbuf_put(&text, prompt, strlen(prompt)) ||
        (question && !strbuf_put(&text, question->valuestring, strlen(question->valuestring))) ||
        (needle && !(smp->answer = strdup(answer->valuestring)))) {
        free(text.s);
        return fail(KVF_ERR_NOMEM, "eval");
    }
    smp->text = text.s;
    smp->question_at = question ? strlen(prompt) : 0;
    if (needle) smp->needle = kind && !strcmp(kind->valuestring, "image") ? "image" : "text";
    const int rc = samples_media("eval", a, m, media, dir, line, &smp->media);
    const cJSON *item = media ? cJSON_GetArrayItem(media, 0) : NULL;
    if (!rc && a->eval.kept_map && first && item && item->child && !strcmp(item->child->string, "image")) {
        char path[4096];
        snprintf(path, sizeof path, "%s%s", item->child->valuestring[0] == '/' ? "" : dir, item->child->valuestring);
        kvf_image_load(path, 0, &smp->first_image); /* only for the picture beneath the map */
    }
    return rc;
}

static int eval_data(const struct args *a, const struct kvf_model *m, struct sweep *sw) {
    char *text = NULL, dir[4096];
    size_t len = 0;
    int rc = read_file(a->eval.data, &text, &len), n = 0, line = 0;
    if (rc) return rc;
    const bool needle = !strcmp(sw->mode, "needle");
    const char *slash = strrchr(a->eval.data, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - a->eval.data + 1) : 0, a->eval.data);
    /* Every line is parsed and checked before the first run: bad data fails fast. */
    struct data_line {
        cJSON *o;
        int line;
    } *items = calloc(len / 2 + 1, sizeof *items); /* k lines that are not blank take 2k - 1 bytes at least */
    if (!items) rc = fail(KVF_ERR_NOMEM, "eval");
    for (const char *ln = text; !rc && *ln;) {
        const size_t end = strcspn(ln, "\n");
        line++;
        if (strspn(ln, " \t\r") < end) {
            items[n] = (struct data_line){cJSON_ParseWithLength(ln, end), line};
            if (!data_line_ok(a, needle, items[n++].o, line)) rc = EXIT_INPUT;
        }
        ln += end + (ln[end] == '\n');
    }
    if (!rc && n == 0) {
        print_error("eval: %s holds no samples", a->eval.data);
        rc = EXIT_INPUT;
    }
    if (!rc) sweep_begin(sw, n, a);
    for (int i = 0; !rc && !sw->stopped && i < n; i++) {
        if (!sweep_wants(sw, i)) continue;
        struct sample smp;
        rc = data_sample(a, m, needle, items[i].o, dir, items[i].line, i == 0, &smp);
        if (!rc) rc = eval_sample(a, m, &smp, i, sw);
        sample_free(&smp);
    }
    for (int i = 0; i < n; i++) cJSON_Delete(items[i].o);
    free(items);
    free(text);
    return rc;
}

/* The samples of a task that run: --samples of them at most. */
static int mb_task_samples(const struct args *a, const struct mb_task *t) {
    const int n = cJSON_GetArraySize(t->data);
    return a->eval.n_samples > 0 && a->eval.n_samples < n ? a->eval.n_samples : n;
}

/* MileBench's tasks, each sample under every run. */
static int eval_milebench(const struct args *a, const struct kvf_model *m, const struct mb_task *tasks, int n_tasks,
                          struct sweep *sw) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    if (!info.has_vision) {
        print_error("eval milebench: the tasks' images need a vision model (a LLaVA GGUF with --mmproj, or a Hugging "
                    "Face LLaVA directory)");
        return EXIT_USAGE;
    }
    int rc = 0, index = 0, n_samples = 0;
    for (int t = 0; t < n_tasks; t++) n_samples += mb_task_samples(a, &tasks[t]);
    sweep_begin(sw, n_samples, a);
    for (int t = 0; !rc && !sw->stopped && t < n_tasks; t++)
        for (int k = 0; !rc && !sw->stopped && k < mb_task_samples(a, &tasks[t]); k++, index++) {
            if (!sweep_wants(sw, index)) continue;
            struct sample smp;
            rc = mb_sample(a, m, &tasks[t], k, &smp);
            if (!rc) rc = eval_sample(a, m, &smp, index, sw);
            sample_free(&smp);
        }
    return rc;
}

/* A RULER sample's question as a JSON line: the context, the question,
 * the answer's start and the expected strings apart, as kvpress's RULER data
 * holds them. */
static int ruler_dump_one(FILE *f, const char *path, const struct sample *smp, const char *question,
                          const char *prefix, const char *answer) {
    cJSON *o = cJSON_CreateObject(), *answers = cJSON_AddArrayToObject(o, "answers");
    char *context = strndup(smp->text, smp->question_at);
    bool ok = o && answers && context && cJSON_AddStringToObject(o, "task", smp->ruler) &&
              cJSON_AddStringToObject(o, "context", context) && cJSON_AddStringToObject(o, "question", question) &&
              cJSON_AddStringToObject(o, "answer_prefix", prefix);
    for (const char *c = answer; ok && *c;) {
        const size_t w = strcspn(c, "\n");
        char *one = strndup(c, w);
        ok = one && cJSON_AddItemToArray(answers, cJSON_CreateString(one));
        free(one);
        c += w + (c[w] == '\n');
    }
    char *line = ok ? cJSON_PrintUnformatted(o) : NULL;
    int rc = line ? 0 : fail(KVF_ERR_NOMEM, "eval ruler");
    if (line && (fprintf(f, "%s\n", line) < 0 || fflush(f) != 0)) {
        print_error("eval ruler: cannot write '%s': %s", path, strerror(errno));
        rc = EXIT_INPUT;
    }
    free(line);
    free(context);
    cJSON_Delete(o);
    return rc;
}

/* A line per question (kvpress's rows that share a context). */
static int ruler_dump(FILE *f, const char *path, const struct sample *smp) {
    int rc = ruler_dump_one(f, path, smp, smp->text + smp->question_at, smp->answer_prefix, smp->answer);
    for (int j = 0; !rc && j < smp->n_more; j++)
        rc = ruler_dump_one(f, path, smp, smp->more[j].text, smp->more[j].prefix, smp->more[j].answer);
    return rc;
}

/* RULER's tasks, --samples of each under every run. */
static int eval_ruler(const struct args *a, const struct kvf_model *m, struct sweep *sw) {
    const struct ruler_task *tasks[16];
    int n_tasks = 0, rc = ruler_tasks(a->eval.tasks, tasks, &n_tasks), index = 0;
    struct ruler_data *d = NULL;
    FILE *dump = NULL;
    if (!rc && a->eval.dump_samples) rc = out_open("--dump-samples", a->eval.dump_samples, &dump);
    if (!rc) rc = ruler_data_open(a, &d);
    const int per = a->eval.n_samples > 0 ? a->eval.n_samples : 1, ctx = a->ctx > 0 ? a->ctx : RULER_CTX;
    if (!rc) sweep_begin(sw, n_tasks * per, a);
    for (int t = 0; !rc && !sw->stopped && t < n_tasks; t++)
        for (int k = 0; !rc && !sw->stopped && k < per; k++, index++) {
            /* every sample is dumped, also those whose rows an earlier run wrote */
            const bool want = sweep_wants(sw, index);
            if (!want && !dump) continue;
            struct sample smp;
            rc = ruler_sample(a, m, d, tasks[t], k, ctx, sw->n_gen, &smp);
            if (!rc && dump) rc = ruler_dump(dump, a->eval.dump_samples, &smp);
            if (!rc && want) rc = eval_sample(a, m, &smp, index, sw);
            sample_free(&smp);
        }
    if (dump) fclose(dump);
    ruler_data_free(d);
    return rc;
}

/* The samples of a mode, one at a time; synthetic unless --data. */
static int eval_samples(const struct args *a, const struct kvf_model *m, struct sweep *sw) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    const bool vision = info.has_vision;
    const int per = a->eval.n_samples > 0 ? a->eval.n_samples : 1;
    double segs[EVAL_MAX_LIST], depths[EVAL_MAX_LIST];
    int n_segs, n_depths, index = 0, rc = 0;
    if (!parse_list(a->eval.segments, 1, 4096, segs, &n_segs)) {
        print_error("eval: --segments '%s': want a list of counts >= 1", a->eval.segments);
        return EXIT_USAGE;
    }
    int gr, gc;
    char tail;
    if (sscanf(a->eval.grid, "%dx%d%c", &gr, &gc, &tail) != 2 || gr <= 0 || gc <= 0 || gr > 256 || gc > 256) {
        print_error("eval: --grid '%s': want RxC with 1 <= R, C <= 256 (for example 12x12)", a->eval.grid);
        return EXIT_USAGE;
    }
    if (!parse_list(a->eval.depths, 0, 1, depths, &n_depths)) {
        print_error("eval: --depths '%s': want a list of depths in [0, 1]", a->eval.depths);
        return EXIT_USAGE;
    }
    if (a->eval.data) return eval_data(a, m, sw);
    if (!strcmp(sw->mode, "needle")) {
        const bool text = strcmp(a->eval.needle, "image") != 0, image = strcmp(a->eval.needle, "text") != 0;
        if (strcmp(a->eval.needle, "text") && strcmp(a->eval.needle, "image") && strcmp(a->eval.needle, "both")) {
            print_error("eval: --needle '%s': want text, image or both", a->eval.needle);
            return EXIT_USAGE;
        }
        if (image && vision) {
            print_error("eval: --needle image hides the password in a pseudo-image, which needs a text model");
            return EXIT_USAGE;
        }
        for (int g = 0; image && g < n_segs; g++)
            if (segs[g] < 2) {
                print_error("eval: an image needle needs --segments of at least 2");
                return EXIT_USAGE;
            }
        sweep_begin(sw, n_segs * n_depths * (text + image) * per, a);
        for (int g = 0; !rc && !sw->stopped && g < n_segs; g++)
            for (int d = 0; !rc && !sw->stopped && d < n_depths; d++)
                for (int kind = 0; !rc && !sw->stopped && kind < 2; kind++) {
                    if (!(kind ? image : text)) continue;
                    for (int i = 0; !rc && !sw->stopped && i < per; i++, index++) {
                        if (!sweep_wants(sw, index)) continue;
                        struct sample smp;
                        rc =
                            needle_sample(a, m, vision, (int)segs[g], depths[d], kind, a->seed + (uint64_t)index, &smp);
                        if (!rc) rc = eval_sample(a, m, &smp, index, sw);
                        sample_free(&smp);
                    }
                }
        return rc;
    }
    sweep_begin(sw, n_segs * per, a); /* consistency */
    for (int g = 0; !rc && !sw->stopped && g < n_segs; g++)
        for (int i = 0; !rc && !sw->stopped && i < per; i++, index++) {
            if (!sweep_wants(sw, index)) continue;
            struct sample smp;
            rc = summary_sample(a, m, vision, (int)segs[g], a->seed + (uint64_t)index, &smp);
            if (!rc) rc = eval_sample(a, m, &smp, index, sw);
            sample_free(&smp);
        }
    return rc;
}

static int cmd_eval(const struct args *a) {
    const char *mode = a->eval_mode;
    const bool mb = mode && !strcmp(mode, "milebench"), ruler = mode && !strcmp(mode, "ruler");
    if (!mode || (strcmp(mode, "consistency") && strcmp(mode, "needle") && !mb && !ruler)) {
        print_error("eval: want a mode first: kvfold eval consistency|needle|milebench|ruler -m FILE ...");
        return EXIT_USAGE;
    }
    if (ruler && a->eval.data) {
        print_error("eval ruler: makes its own samples (--words, --haystack), it reads no --data");
        return EXIT_USAGE;
    }
    if (strcmp(a->eval.question, "with") && strcmp(a->eval.question, "after")) {
        print_error("eval: --question '%s': want with or after", a->eval.question);
        return EXIT_USAGE;
    }
    if (a->eval.turns && (strcmp(a->eval_mode, "ruler") || strcmp(a->eval.question, "after"))) {
        print_error("eval: --turns asks the questions in the turns of a conversation: eval ruler with --question "
                    "after");
        return EXIT_USAGE;
    }
    if (a->eval.questions > 1 && (strcmp(a->eval_mode, "ruler") || strcmp(a->eval.question, "after"))) {
        print_error("eval: --questions %d asks several questions of one compressed context: eval ruler with "
                    "--question after", a->eval.questions);
        return EXIT_USAGE;
    }
    if (strcmp(a->eval.question, "after") == 0 && mb) {
        print_error("eval: --question after: MileBench's prompts do not keep their question apart (not yet)");
        return EXIT_USAGE;
    }
    struct run *runs = calloc(1 + (size_t)STR_LIST_MAX * EVAL_MAX_LIST, sizeof *runs);
    if (!runs) return fail(KVF_ERR_NOMEM, "eval");
    struct sweep sw = {.mode = mode, .runs = runs, .n_gen = n_generate(a, mode)};
    /* the model's file name without its extension (a directory's name for Hugging Face) */
    path_name(a->model ? a->model : "", sw.model, sizeof sw.model);
    const size_t ml = strlen(sw.model);
    if (ml > 5 && !strcmp(sw.model + ml - 5, ".gguf")) sw.model[ml - 5] = '\0';
    int n_tasks = 0, rc = make_runs(a, runs, &sw.n_runs);
    struct mb_task *tasks = NULL;
    if (!rc && mb) rc = mb_tasks_open(a, &tasks, &n_tasks); /* before the model: bad data fails fast */
    if (!rc) rc = sweep_open(&sw, a);
    struct kvf_model *m = NULL;
    if (!rc) rc = load_model(a, &m);
    size_t pos_f16 = 0, pos = 0, per_cache = 0;
    if (!rc && (kvf_kv_position_bytes(m, KVF_KV_F16, KVF_KV_F16, &pos_f16, NULL) != KVF_OK ||
                kvf_kv_position_bytes(m, a->type_k_id, a->type_v_id, &pos, &per_cache) != KVF_OK))
        rc = fail_option(KVF_ERR_UNSUPPORTED, "eval: --kv-type");
    sw.f16 = pos ? (double)pos_f16 / (double)pos : NAN;
    sw.per_cache_mib = (double)per_cache / MIB;
    if (!rc)
        rc = mb ? eval_milebench(a, m, tasks, n_tasks, &sw) : ruler ? eval_ruler(a, m, &sw) : eval_samples(a, m, &sw);
    progress_end(&sw.prog);
    /* Ctrl-C: the summary of the rows there are, saying so */
    char note[160] = "";
    if (sw.stopped)
        snprintf(note, sizeof note, "**Interrupted** (Ctrl-C) with %ld of %ld rows done: `--resume` runs the rest.",
                 sw.total - sw.todo + sw.done, sw.total);
    /* the tables by task (milebench) or needle kind (both), the charts over every sample of a run */
    const bool by_group = mb || ruler || (!strcmp(mode, "needle") && !strcmp(a->eval.needle, "both"));
    struct summary *sum = NULL, *all = NULL;
    const int n_sum = rc ? 0 : summarise(&sw.rows, by_group, sw.f16, sw.per_cache_mib, &sum),
              n_all = rc ? 0 : summarise(&sw.rows, false, sw.f16, sw.per_cache_mib, &all);
    if (!rc && (n_sum < 0 || n_all < 0)) rc = fail(KVF_ERR_NOMEM, "eval");
    if (!rc && !a->json) {
        if (sw.stopped) printf("%s\n\n", note);
        print_summary(stdout, mode, sum, n_sum, false);
    }
    if (!rc && a->eval.out_dir) rc = write_outputs(a, mode, sum, n_sum, sw.stopped ? note : NULL);
    if (!rc && a->eval.plots) rc = write_plots(a, &sw, all, n_all);
    if (!rc && sw.stopped) rc = EXIT_INTERRUPTED;
    sweep_free(&sw);
    free(sum);
    free(all);
    free(runs);
    mb_tasks_free(tasks, n_tasks);
    kvf_model_free(m);
    return rc;
}

const struct command eval_command = {
    .name = "eval",
    .summary = "Compare KV policies: consistency with the full cache, needle in a haystack, MileBench, RULER.",
    .usage = "consistency|needle|milebench|ruler -m FILE [--kv SPEC]... [--budgets LIST] [options]",
    .details =
        "consistency: the full cache's greedy output is the reference; each policy and budget gets the\n"
        "perplexity of that output (teacher-forced, compression active) and the ROUGE-L F1 of its own\n"
        "greedy output. needle: a password hidden at --depths among --segments text and image\n"
        "segments; correct when the answer contains it. Without --data, consistency and needle\n"
        "make their own data from --seed. milebench: MileBench's tasks from --data DIR (NAME/NAME.json\n"
        "and NAME/images/, as downloaded), prompts built and cut to --ctx as MileBench does for\n"
        "LLaVA, scored by its own rules (accuracy or ROUGE-L); needs a vision model. ruler: RULER's\n"
        "synthetic tasks (needles: single, multi-key, multi-value, multi-query; variable tracking;\n"
        "common and frequent words) made here at --ctx-size tokens, scored as RULER scores them (the\n"
        "share of the expected strings in the answer); no QA tasks (their data is not here). Each --kv runs\n"
        "at every budget of --budgets (presets without a budget run once); the full cache always\n"
        "runs. Prints a markdown summary (--json: one JSON line per run and sample instead); --out\n"
        "DIR adds results.jsonl (its settings, then a row as each finishes), summary.md and\n"
        "summary.csv, --plots DIR SVG charts, --kept-map DIR per-layer maps of the image entries\n"
        "kept, merged and evicted. Ctrl-C stops after the row that is running, writes the summary\n"
        "of the rows done and exits 130; --resume then runs only the rows results.jsonl lacks\n"
        "(refused when the model or a setting that shapes the samples differs) and summarises\n"
        "them all.",
    .run = cmd_eval,
    .defaults = eval_defaults,
    .opts = eval_opts,
    .takes_mode = true,
};
