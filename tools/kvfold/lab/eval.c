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
 *   ruler        RULER's synthetic tasks (ruler.c).
 *
 * Every --kv runs at every --budgets value (with one model load); each run
 * is a fresh session on the same prompt (or a fork of one shared prefill).
 * One row per (run, sample) goes to JSON lines, the summary per run to
 * markdown/CSV (results.c), and the pictures to SVG (plots.c); the
 * synthetic samples are sample.c's. */
#include "eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_MAX_BUDGETS 16
#define EVAL_MAX_LIST 16

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
    if (strstr(spec, "+budget=threshold")) return false; /* what clears tau stays: no budget to sweep */
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(spec, ":+"), spec);
    for (int i = 0; i < kvf_kv_policy_count(); i++) {
        struct kvf_kv_policy_info info;
        if (kvf_kv_policy_get(i, &info) == KVF_OK && !strcmp(info.stage, "preset") && !strcmp(info.name, name))
            return strstr(info.keys, "budget") != NULL;
    }
    return false;
}

/* ---------------------------------------------------------------- runs -- */

/* The queries of every layer the shared prefill keeps for the window-scored
 * policies (snapkv's 32, csp's recent entries); a policy that wants more
 * prefills on its own. */
#define EVAL_SHARED_QUERIES 512

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
            items[n] = (struct data_line){json_parse(ln, end, NULL), line};
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
