/* kvfold eval's results: every row as a JSON line in results.jsonl
 * (flushed as each finishes, read back by --resume), the summary per run
 * in summary.md and summary.csv. */
#include "eval.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* mkdir -p: the output directories may be nested and new. */
void make_dirs(const char *path) {
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

bool same_str(const char *a, const char *b) {
    return a == b || (a && b && !strcmp(a, b));
}

/* Budgets are NaN for presets without one. */
bool same_budget(double x, double y) { return x == y || (isnan(x) && isnan(y)); }

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
int summarise(const struct rows *rs, bool by_group, double f16, double per_cache, struct summary **out) {
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

const char *score_name(const char *mode) {
    return !strcmp(mode, "needle") ? "accuracy" : !strcmp(mode, "consistency") ? "ROUGE-L F1" : "score";
}

/* The markdown table (csv: comma-separated) of the summary; milebench's
 * is by task, with the metric of each; a needle's, by kind when both ran. */
void print_summary(FILE *f, const char *mode, const struct summary *s, int n, bool csv) {
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
int write_outputs(const struct args *a, const char *mode, const struct summary *s, int n, const char *note) {
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
/* Tokens generated per answer: -n, else the mode's default. */
int n_generate(const struct args *a, const char *mode) {
    return a->n_predict > 0 ? a->n_predict
           : !strcmp(mode, "needle") ? 12
           : !strcmp(mode, "milebench") || !strcmp(mode, "ruler") ? 64
                                                                   : 32;
}

/* The row of run k on sample index, when there is one. */
const struct row *row_find(const struct sweep *sw, int k, int index) {
    for (int i = 0; i < sw->rows.n; i++) {
        const struct row *r = &sw->rows.r[i];
        if (r->sample == index && !strcmp(r->spec, sw->runs[k].kv) && same_budget(r->budget, sw->runs[k].budget))
            return r;
    }
    return NULL;
}

/* Once the sample count is known: the total, what --resume left to do, and
 * the progress line over that. */
void sweep_begin(struct sweep *sw, int n_samples, const struct args *a) {
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
bool sweep_wants(struct sweep *sw, int index) {
    bool todo = false;
    for (int k = 0; !todo && k < sw->n_runs; k++) todo = !row_find(sw, k, index);
    if (todo && interrupted()) sw->stopped = true;
    return todo && !sw->stopped;
}

/* A finished row: on stdout with --json, appended to results.jsonl (flushed,
 * so that a kill loses no finished row), kept for the summary (which takes
 * its strings). */
int sweep_add(struct sweep *sw, const struct args *a, struct row *r) {
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
void path_name(const char *path, char *out, size_t cap) {
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
        cJSON *o = json_parse(text + at, end - at, NULL);
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
int sweep_open(struct sweep *sw, const struct args *a) {
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

void sweep_free(struct sweep *sw) {
    if (sw->results) fclose(sw->results);
    for (int i = 0; i < sw->rows.n; i++) free(sw->rows.r[i].output), free(sw->rows.r[i].gt);
    free(sw->rows.r);
    cJSON_Delete(sw->old);
}
