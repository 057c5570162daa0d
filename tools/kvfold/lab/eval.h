/* What kvfold eval's files share: eval.c runs the policies over samples;
 * milebench.c makes the samples of MileBench's tasks and scores them. */
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

#endif
