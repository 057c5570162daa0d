/* kvfold profile: PrefixKV's offline estimation. The per-layer budgets
 * searched on each sample (prefixkv online), averaged, are written for
 * --kv prefixkv:profile=FILE. */
#include "../cli.h"

#include <stdlib.h>
#include <string.h>

static void profile_defaults(struct args *a) {
    a->budget = 0.2f;
    a->batch = kvf_session_default_params().n_batch;
}

static int profile_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_NO_REPACK,
        OPTS_VISION,
        { "--samples", NULL, OPT_STR, &a->samples, 0, 0, "FILE", "sample prompts: one JSON object per line, "
          "{\"prompt\": TEXT, \"media\": [{\"image\"|\"frame\"|\"pseudo\": PATH}, ...]}, paths relative to FILE" },
        { "--budget", NULL, OPT_FLOAT, &a->budget, 0.001, 1, "R", "share of the KV cache kept (default 0.2)" },
        { "--output", "-o", OPT_STR, &a->output, 0, 0, "FILE", "where to write the profile (JSON)" },
        OPT_PSEUDO_NOISE,
        OPT_BATCH, OPT_THREADS, OPT_JSON, OPT_NO_PROGRESS,
    };
    OPTS_RETURN(out, t);
}

struct profile {
    const struct args *a;
    struct kvf_model *m;
    struct kvf_model_info info;
    char dir[4096];      /* of the samples file, for relative media paths */
    double *ratio, *gini;  /* per layer, summed over the samples */
    cJSON *per_sample;   /* each sample's ratios */
    int n, total;        /* samples run, samples in the file */
    FILE *out;           /* -o, open from the start; NULL once written */
    struct progress pg;
};

/* One line of the samples file through prefixkv online; its layers' ratios
 * added to the sums. */
static int profile_sample(struct profile *p, const char *ln, int line) {
    const struct args *a = p->a;
    cJSON *o = json_parse(ln, strlen(ln), NULL);
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    const cJSON *media = cJSON_GetObjectItemCaseSensitive(o, "media");
    struct media_set ms = { 0 };
    struct kvf_prompt *pr = NULL;
    struct kvf_session *s = NULL;
    int rc = 0;
    if (!cJSON_IsString(pt) || (media && !cJSON_IsArray(media))) {
        print_error("profile: %s line %d: expected {\"prompt\": TEXT, \"media\": [...]}", a->samples, line);
        rc = EXIT_INPUT;
    }
    if (!rc)
        rc = samples_media("profile", a, p->m, media, p->dir, line, &ms);
    if (!rc)
        rc = prompt_make(p->m, pt->valuestring, &ms, false, &pr);
    struct kvf_session_params sp = session_params(a, pr ? kvf_prompt_n_tokens(pr) : 0);
    sp.kv_spec = "prefixkv:online=1";
    sp.kv_budget = f32_json(a->budget); /* as the user wrote it */
    enum kvf_status st = KVF_OK;
    if (!rc &&
        ((st = kvf_session_init(p->m, &sp, &s)) != KVF_OK || (st = kvf_session_prefill_prompt(s, pr, NULL)) != KVF_OK ||
         (st = kvf_session_compress(s)) != KVF_OK))
        rc = fail(st, "profile: sample");
    if (!rc) {
        cJSON *rs = cJSON_CreateArray();
        for (int l = 0; l < p->info.n_layer; l++) {
            double r, g;
            kvf_session_kv_layer_budget(s, l, &r, &g);
            p->ratio[l] += r;
            p->gini[l] += g;
            cJSON_AddItemToArray(rs, cJSON_CreateNumber(r));
        }
        cJSON_AddItemToArray(p->per_sample, rs);
        p->n++;
        char detail[64];
        snprintf(detail, sizeof detail, "line %d, %d positions", line, kvf_prompt_n_tokens(pr));
        progress_update(&p->pg, p->n, detail);
    }
    kvf_session_free(s);
    kvf_prompt_free(pr);
    media_set_free(&ms);
    cJSON_Delete(o);
    return rc;
}

/* Whether the line at ln (ending at a newline or NUL) holds only spaces. */
static bool blank_line(const char *ln) {
    const char c = ln[strspn(ln, " \t\r")];
    return c == '\n' || c == '\0';
}

/* Every non-blank line of text (modified in place), until Ctrl-C. */
static int profile_samples(struct profile *p, char *text) {
    for (const char *ln = text; ln;) {
        p->total += !blank_line(ln);
        if ((ln = strchr(ln, '\n')))
            ln++;
    }
    progress_init(&p->pg, "profile", "samples", p->total, p->a);
    int rc = 0, line = 0;
    for (char *ln = text, *next; ln && *ln && !rc && !interrupted(); ln = next) {
        next = strchr(ln, '\n');
        if (next)
            *next++ = '\0';
        line++;
        if (!blank_line(ln))
            rc = profile_sample(p, ln, line);
    }
    progress_end(&p->pg);
    if (!rc && p->n == 0 && interrupted()) {
        print_error("profile: interrupted before the first sample was run; %s is left empty", p->a->output);
        rc = EXIT_INTERRUPTED;
    }
    if (!rc && p->n == 0) {
        print_error("profile: '%s' holds no samples", p->a->samples);
        rc = EXIT_INPUT;
    }
    return rc;
}

/* The averages to -o FILE (and stdout). */
static int profile_write(struct profile *p) {
    const struct args *a = p->a;
    const int n = p->n;
    cJSON *out = cJSON_CreateObject();
    cJSON_AddStringToObject(out, "model", p->info.name);
    cJSON_AddStringToObject(out, "arch", p->info.arch);
    cJSON_AddNumberToObject(out, "n_layer", p->info.n_layer);
    cJSON_AddNumberToObject(out, "budget", f32_json(a->budget));
    cJSON_AddNumberToObject(out, "samples", n);
    cJSON *jr = cJSON_AddArrayToObject(out, "ratios"), *jg = cJSON_AddArrayToObject(out, "gini");
    for (int l = 0; l < p->info.n_layer; l++) {
        cJSON_AddItemToArray(jr, cJSON_CreateNumber(p->ratio[l] / n));
        cJSON_AddItemToArray(jg, cJSON_CreateNumber(p->gini[l] / n));
    }
    cJSON_AddItemToObject(out, "per_sample", p->per_sample);
    p->per_sample = NULL;
    char *txt = cJSON_Print(out);
    int rc = out_write("-o", a->output, p->out, txt);
    p->out = NULL;
    free(txt);
    if (!rc && a->json)
        return print_json(out);
    if (!rc) {
        printf("layer  ratio   gini   (budget %.3g, %d sample%s) -> %s\n", (double)a->budget, n, n == 1 ? "" : "s",
               a->output);
        for (int l = 0; l < p->info.n_layer; l++)
            printf("%5d  %.3f   %.3f\n", l, p->ratio[l] / n, p->gini[l] / n);
    }
    cJSON_Delete(out);
    return rc;
}

static int cmd_profile(const struct args *a) {
    if (!a->samples || !a->output) {
        print_error("profile: --samples FILE and -o FILE are required");
        return EXIT_USAGE;
    }
    char *text = NULL;
    size_t len = 0;
    struct profile p = { .a = a };
    int rc = read_file(a->samples, &text, &len);
    if (rc || (rc = out_open("-o", a->output, &p.out))) {
        free(text);
        return rc;
    }
    p.per_sample = cJSON_CreateArray();
    const char *slash = strrchr(a->samples, '/');
    snprintf(p.dir, sizeof p.dir, "%.*s", slash ? (int)(slash - a->samples + 1) : 0, a->samples);
    if (!(rc = load_model(a, &p.m))) {
        kvf_model_get_info(p.m, &p.info);
        p.ratio = calloc((size_t)p.info.n_layer, sizeof *p.ratio);
        p.gini = calloc((size_t)p.info.n_layer, sizeof *p.gini);
        if (!p.ratio || !p.gini)
            rc = fail(KVF_ERR_NOMEM, "profile");
    }
    if (!rc)
        rc = profile_samples(&p, text);
    if (!rc)
        rc = profile_write(&p);
    if (!rc && p.n < p.total) {
        fprintf(stderr, "kvfold: profile: interrupted: %s averages the first %d of %d samples\n", a->output, p.n,
                p.total);
        rc = EXIT_INTERRUPTED;
    }
    cJSON_Delete(p.per_sample);
    if (p.out) fclose(p.out);
    free(p.ratio);
    free(p.gini);
    kvf_model_free(p.m);
    free(text);
    return rc;
}

const struct command profile_command = {
    .name = "profile",
    .summary = "Search PrefixKV's per-layer KV budgets on sample prompts and write them to a file.",
    .usage = "-m FILE --samples FILE --budget R -o FILE [options]",
    .details = "Each sample runs with prefixkv online (a binary search for the retention threshold at\n"
               "which the layers' budgets add up to R); the per-layer ratios averaged over the samples\n"
               "are written as JSON, with the Gini coefficient of each layer's priority curve, for\n"
               "--kv prefixkv:profile=FILE. Progress goes to stderr. Ctrl-C stops after the sample\n"
               "running and writes the averages of the samples done (none done: nothing is written);\n"
               "the exit status is then 130.",
    .run = cmd_profile,
    .defaults = profile_defaults,
    .opts = profile_opts,
};
