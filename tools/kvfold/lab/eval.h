/* What kvfold eval's files share: eval.c runs the policies over samples;
 * sample.c, ruler.c and milebench.c make the samples (and the latter two
 * score them); results.c keeps the rows and writes the tables, plots.c
 * the pictures. */
#ifndef KVF_EVAL_H
#define KVF_EVAL_H

#include "../cli.h"
#include "metrics.h"

/* One MileBench task read from disk: DIR/NAME/NAME.json, images in
 * DIR/NAME/images/. */
struct mb_task {
    char name[256];
    char dir[4096];
    cJSON *root;               /* the whole JSON (owned) */
    const cJSON *data;         /* its samples: root["data"] */
    const cJSON *instructions; /* meta_data.task_instruction: a list, or one string */
    enum metrics_mb_rule rule; /* from the name and meta_data.question_type */
};

/* A further question asked of a sample's context (ruler --questions): its
 * text, the answer's start and the expected strings (a line each). */
struct sample_question {
    char *text, *prefix, *answer;
};

/* One prompt of the eval: its text (markers included; the chat template is
 * applied later), media, the first image's pixels (for the kept map), the
 * expected answer. */
struct sample {
    char *text;
    size_t question_at;            /* bytes of text before its question (--question after); 0: none */
    struct media_set media;
    char *answer;                  /* needle: the password; milebench: the ground truth */
    struct kvf_image *first_image; /* NULL for pseudo-images */
    int segments;
    double depth;
    const char *needle;            /* "text" or "image"; NULL outside needle */
    /* milebench */
    const struct mb_task *task;
    char id[64];                   /* the sample's sample_id */
    const char *level;             /* its image_quantity_level ("Few", "Medium", "Many") */
    const char **choices;          /* multi-choice options (strings of the task's JSON) */
    int n_choices;
    /* ruler: the task's name; answer holds the expected strings, a line each */
    const char *ruler;
    char *answer_prefix;           /* the answer's start, after the chat template (RULER's); NULL: none */
    /* questions after the first (text's own), each asked of the context
     * compressed once (--question after), [n_more] */
    struct sample_question *more;
    int n_more;
};
void sample_free(struct sample *s);
/* The options a sample's prompt is built with: in the model's chat
 * template when it has one (or is a vision model, or --chat-template). */
struct args eval_chat_args(const struct args *a, const struct kvf_model *m);
/* About `words` words of plain sentences from a small vocabulary (a
 * haystack that needs no file). */
bool haystack_text(uint64_t *rng, int words, struct strbuf *b);

/* RULER's synthetic tasks (ruler.c); --ctx-size's default for them; the
 * most questions a NIAH context can take (--questions: a key each). */
#define RULER_CTX 4096
#define RULER_MAX_QUESTIONS 8
struct ruler_task;
struct ruler_data; /* the word list and the essay haystack */
/* The tasks of a comma-separated list of names (NULL: all eleven) into
 * out[11], *n of them; errors printed, an exit code returned. */
int ruler_tasks(const char *list, const struct ruler_task **out, int *n);
const char *ruler_task_name(const struct ruler_task *t);
/* --words (default /usr/share/dict/words) and --haystack read. */
int ruler_data_open(const struct args *a, struct ruler_data **out);
void ruler_data_free(struct ruler_data *d);
/* Sample k of task t (seeded by --seed, the task and k), its haystack as
 * long as the prompt in the model's chat template, the answer's start and
 * n_gen generated tokens fit ctx_size (with --questions N, N questions of
 * a NIAH task, the longest of them). */
int ruler_sample(const struct args *a, const struct kvf_model *m, const struct ruler_data *d,
                 const struct ruler_task *t, int k, int ctx_size, int n_gen, struct sample *out);

/* The tasks of --data DIR (a MileBench root of NAME/NAME.json folders, or one
 * such folder), only those of --tasks when given, in name order; *n gets
 * their count. Errors are printed; returns an exit code. */
int mb_tasks_open(const struct args *a, struct mb_task **out, int *n);
void mb_tasks_free(struct mb_task *t, int n);
/* The metric a task is scored with: "accuracy" or "ROUGE-L". */
const char *mb_task_metric(const struct mb_task *t);
/* Sample k of a task as MileBench's generate.py builds it for LLaVA: the
 * task instruction, the context with its images in place and the options
 * listed, cut from the left to --ctx tokens (each image counted as the
 * model's image tokens); the images kept are encoded. */
int mb_sample(const struct args *a, const struct kvf_model *m, const struct mb_task *t, int k, struct sample *out);
/* The sample's score for output, by MileBench's rule for its task. */
double mb_score(const struct sample *s, const char *output);

/* ------------------------------------------------------- runs and rows -- */
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

/* The runs of the eval: the full cache first, then every --kv at every
 * budget (once when its preset has no budget). */
struct run {
    char label[320];  /* for messages: the --kv, and the budget it runs at */
    const char *kv;   /* the --kv (the session's kv_spec) */
    double budget;    /* the session's kv_budget; NAN: the spec's own */
};

/* One line of the summary: the mean over a run's samples. */
struct summary {
    const char *spec;
    const char *task, *metric; /* milebench, when summarised by task */
    const char *needle;        /* needle, when summarised by the needle's kind */
    double budget, score, ppl, kv_mib, kv_full_mib, ms_per_token, n_prompt;
    double vs_f16; /* KV bytes against an F16 full cache of the same positions; NaN: no full cache's row */
    int n;
};

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

/* results.c: the rows, their summaries and files (results.jsonl growing a
 * row at a time, summary.md, summary.csv), --resume. */
/* mkdir -p: the output directories may be nested and new. */
void make_dirs(const char *path);
bool same_str(const char *a, const char *b);
/* Budgets are NaN for presets without one. */
bool same_budget(double x, double y);
/* The last component of a path ("models/llava-hf/" -> "llava-hf"). */
void path_name(const char *path, char *out, size_t cap);
/* The name of the mode's score in tables and plots. */
const char *score_name(const char *mode);
/* The mean over the samples of each run, and with by_group of each task
 * (milebench) or needle kind, into *out (freed by the caller); their count,
 * or -1 without memory. The F16 full cache's bytes are the full cache's
 * row's, less per_cache (MiB its cache holds whatever its length), times
 * f16 (a position's bytes in F16 over those in the sweep's types). */
int summarise(const struct rows *rs, bool by_group, double f16, double per_cache, struct summary **out);
/* summary.md and summary.csv; note: a line under the build saying the
 * sweep was interrupted, or NULL. */
int write_outputs(const struct args *a, const char *mode, const struct summary *s, int n, const char *note);
/* The markdown table (csv: comma-separated) of a summary. */
void print_summary(FILE *f, const char *mode, const struct summary *s, int n, bool csv);
/* Tokens generated per answer: -n, else the mode's default. */
int n_generate(const struct args *a, const char *mode);
/* The row of run k on sample index, when there is one. */
const struct row *row_find(const struct sweep *sw, int k, int index);
/* Once the sample count is known: the total, what --resume left to do, and
 * the progress line over that. */
void sweep_begin(struct sweep *sw, int n_samples, const struct args *a);
/* Whether sample index has a row left to do; the sweep stops here (a safe
 * point) once Ctrl-C was pressed. */
bool sweep_wants(struct sweep *sw, int index);
/* A finished row: on stdout with --json, appended to results.jsonl, kept
 * for the summary (which takes its strings). */
int sweep_add(struct sweep *sw, const struct args *a, struct row *r);
/* --out: results.jsonl opened (and with --resume read back) before the
 * model loads. */
int sweep_open(struct sweep *sw, const struct args *a);
void sweep_free(struct sweep *sw);

/* plots.c: --plots (quality, perplexity and KV memory against budget,
 * decode speed, the needle heatmap) and --kept-map. */
int write_plots(const struct args *a, const struct sweep *sw, const struct summary *all, int n_all);
int write_kept_maps(const struct args *a, const struct kvf_model *m, const struct kvf_session *s,
                    const struct kvf_prompt *pr, const struct sample *smp, const struct run *run, const char *model);

/* sample.c: the synthetic samples of needle and consistency. */
/* Needle in a haystack: n_seg segments alternating text and image, the
 * password sentence in the segment at `depth` of the kind asked for. */
int needle_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, double depth,
                  bool image_needle, uint64_t seed, struct sample *out);
/* Consistency without --data: a haystack and a request to summarise it. */
int summary_sample(const struct args *a, const struct kvf_model *m, bool vision, int n_seg, uint64_t seed,
                   struct sample *out);
/* A RULER sample's questions as JSON lines (ruler.c; --dump-samples). */
int ruler_dump(FILE *f, const char *path, const struct sample *smp);

#endif
