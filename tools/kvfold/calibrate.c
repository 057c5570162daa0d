/* kvfold calibrate: fits KVzap's scorer for a model on the user's text
 * (kvf_kvzap_calibrate), so that `--kv kvzap` scores entries as they are
 * written instead of repeating the context as kvzip does. */
#include "cli.h"

#include <math.h>
#include <stdlib.h>

static void calibrate_defaults(struct args *a) {
    const struct kvf_kvzap_params p = kvf_kvzap_default_params();
    a->cal.samples = p.samples, a->cal.test = p.test, a->cal.span = p.span, a->cal.per_span = p.per_span;
    a->cal.alpha = (float)p.alpha;
}

static int calibrate_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL,
        OPT_NO_REPACK,
        { "--corpus", NULL, OPT_LIST, &a->cal.corpus, 0, 0, "FILE",
          "text to calibrate on (repeatable; real prose or code, not the text evaluated on)" },
        { "--output", "-o", OPT_STR, &a->output, 0, 0, "FILE",
          "the scorer file (default: the model's name with .kvzap, where --kv kvzap looks)" },
        { "--samples", NULL, OPT_INT, &a->cal.samples, 1, 1000000, "N", "spans fitted on (default 256)" },
        { "--test", NULL, OPT_INT, &a->cal.test, 0, 100000, "N", "held-out spans measured on (default 8)" },
        { "--span", NULL, OPT_INT, &a->cal.span, 16, 65536, "N", "tokens a span (default 512)" },
        { "--per-span", NULL, OPT_INT, &a->cal.per_span, 1, 65536, "N", "positions of a span fitted on (default 256)" },
        { "--alpha", NULL, OPT_FLOAT, &a->cal.alpha, 1e-9, 1e9, "A", "ridge penalty (default 1)" },
        { "--seed", "-s", OPT_U64, &a->seed, 0, 0, "N", "draws the spans and positions (default 0)" },
        OPT_THREADS,
        OPT_JSON,
        OPT_NO_PROGRESS,
    };
    OPTS_RETURN(out, t);
}

static bool on_progress(int done, int total, void *bar) {
    progress_update(bar, done, NULL);
    (void)total;
    return !interrupted();
}

static void print_report(const struct args *a, const char *path, const struct kvf_kvzap_report *r, double secs) {
    double r2 = 0, rho = 0; /* means over the layers measured (a sliding-window layer may have no pair) */
    int measured = 0;
    for (int l = 0; l < r->n_layer; l++)
        if (!isnan(r->r2[l]) && !isnan(r->spearman[l])) r2 += r->r2[l], rho += r->spearman[l], measured++;
    r2 /= measured, rho /= measured;
    if (a->json) {
        cJSON *o = cJSON_CreateObject(), *lr = cJSON_AddArrayToObject(o, "r2"),
              *ls = cJSON_AddArrayToObject(o, "spearman");
        cJSON_AddStringToObject(o, "scorer", path);
        cJSON_AddNumberToObject(o, "samples", r->samples);
        cJSON_AddNumberToObject(o, "test", r->test);
        cJSON_AddNumberToObject(o, "rows", (double)r->rows);
        cJSON_AddNumberToObject(o, "seconds", secs);
        for (int l = 0; l < r->n_layer; l++) {
            cJSON_AddItemToArray(lr, isnan(r->r2[l]) ? cJSON_CreateNull() : cJSON_CreateNumber(r->r2[l]));
            cJSON_AddItemToArray(ls, isnan(r->spearman[l]) ? cJSON_CreateNull() : cJSON_CreateNumber(r->spearman[l]));
        }
        print_json(o);
        return;
    }
    printf("scorer: %s\nfitted on %d spans (%lld positions a layer) in %.1f s\n", path, r->samples, (long long)r->rows,
           secs);
    if (r->test == 0) {
        printf("not measured on held-out spans (--test 0, or stopped)\n");
        return;
    }
    printf("held out: %d spans; per layer, R^2 and the rank correlation with KVzip+'s scores:\n\n", r->test);
    printf("| layer | R^2 | Spearman |\n|---|---|---|\n");
    for (int l = 0; l < r->n_layer; l++) printf("| %d | %.3f | %.3f |\n", l, r->r2[l], r->spearman[l]);
    printf("| mean | %.3f | %.3f |\n", r2, rho);
}

static int cmd_calibrate(const struct args *a) {
    const struct str_list *files = &a->cal.corpus;
    if (files->n == 0) {
        print_error("calibrate: no --corpus FILE (text to fit on: e.g. documentation, prose, code)");
        return EXIT_USAGE;
    }
    char *texts[STR_LIST_MAX] = { 0 };
    struct kvf_model *m = NULL;
    int rc = 0;
    for (int i = 0; !rc && i < files->n; i++) {
        size_t len;
        rc = read_text_file(files->v[i], &texts[i], &len);
    }
    if (!rc) rc = load_model(a, &m);
    if (!rc) {
        struct kvf_kvzap_params p = kvf_kvzap_default_params();
        p.samples = a->cal.samples, p.test = a->cal.test, p.span = a->cal.span, p.per_span = a->cal.per_span;
        p.alpha = a->cal.alpha, p.seed = a->seed, p.n_threads = a->threads;
        struct progress bar;
        progress_init(&bar, "calibrate", "span", p.samples + p.test, a);
        p.progress = on_progress, p.user = &bar;
        const char *path = a->output ? a->output : kvf_kvzap_default_path(m);
        struct kvf_kvzap_report *r = malloc(sizeof *r);
        const double t0 = now_ms();
        const enum kvf_status st =
            r ? kvf_kvzap_calibrate(m, (const char *const *)texts, files->n, &p, path, r) : KVF_ERR_NOMEM;
        progress_end(&bar);
        if (st != KVF_OK) rc = fail_option(st, "calibrate");
        else print_report(a, path, r, (now_ms() - t0) / 1000.0);
        if (!rc && interrupted()) rc = EXIT_INTERRUPTED;
        free(r);
    }
    for (int i = 0; i < files->n; i++) free(texts[i]);
    kvf_model_free(m);
    return rc;
}

const struct command calibrate_command = {
    .name = "calibrate",
    .summary = "Fit KVzap's scorer for a model on your text, for --kv kvzap.",
    .usage = "-m FILE --corpus FILE... [-o FILE] [--samples N] [--test N] [--span N]",
    .details = "KVzap (arXiv:2601.07891) scores each KV entry from its layer's input as it is written, with a\n"
               "linear map per layer fitted here to KVzip+'s scores: spans of --span tokens drawn from the\n"
               "corpus are prefilled as a user's message, then repeated after it as kvzip does; the most\n"
               "attention each entry gets while the model repeats the context (weighted as KVzip+ weighs it)\n"
               "is the target. A ridge regression per layer is fitted on --samples spans and measured on\n"
               "--test others. The scorer goes beside the model (MODEL.kvzap) unless -o names a file; it\n"
               "names the model it was fitted on. Ctrl-C stops and fits on the spans done.",
    .run = cmd_calibrate,
    .defaults = calibrate_defaults,
    .opts = calibrate_opts,
};
