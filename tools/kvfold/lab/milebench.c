/* kvfold eval milebench: the tasks of MileBench (Song et al., 2024) as they
 * lie on disk after its download (DIR/NAME/NAME.json, DIR/NAME/images/),
 * each sample's prompt built as MileBench's generate.py builds it for
 * LLaVA-1.5, and scored by its evaluate.py's rules (metrics.c). */
#include "eval.h"


#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* MileBench's image placeholder inside a context before the model's own. */
#define MB_IMAGE "<ImageHere>"

static const cJSON *item(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* Walks a comma-separated list: for (c = list; c && *c; c = list_next(c)),
 * the item being c's first strcspn(c, ",") bytes. */
static const char *list_next(const char *c) {
    c += strcspn(c, ",");
    return *c ? c + 1 : c;
}

/* Whether name is one of the list's items. */
static bool in_list(const char *list, const char *name) {
    const size_t n = strlen(name);
    for (const char *c = list; *c; c = list_next(c))
        if (strcspn(c, ",") == n && !strncmp(c, name, n)) return true;
    return false;
}

/* The task in folder dir, whose JSON is dir/name.json: 0 with *t filled,
 * -1 when there is no such file, else an exit code (printed). */
static int task_open(const char *dir, const char *name, struct mb_task *t) {
    char path[4096 + 512];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    if (!path_is_file(path)) return -1;
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    snprintf(t->dir, sizeof t->dir, "%s", dir);
    char *text;
    size_t len;
    int rc = read_file(path, &text, &len);
    if (rc) return rc;
    t->root = json_parse(text, len, NULL);
    free(text);
    const cJSON *meta = item(t->root, "meta_data") ? item(t->root, "meta_data") : item(t->root, "metadata");
    const cJSON *qt = item(meta, "question_type");
    t->data = item(t->root, "data");
    t->instructions = item(meta, "task_instruction");
    if (!cJSON_IsObject(meta) || !cJSON_IsArray(t->data) || !cJSON_IsString(qt) ||
        !(cJSON_IsArray(t->instructions) || cJSON_IsString(t->instructions))) {
        print_error("eval milebench: '%s' is not a MileBench task (want {\"meta_data\": {\"task_instruction\": [...], "
                    "\"question_type\": ...}, \"data\": [...]})", path);
        return EXIT_INPUT;
    }
    /* evaluate.py's dispatch: the needle tasks and MMCoQA by name, the rest by question type */
    if (strstr(name, "NeedleInAHaystack")) t->rule = MB_RULE_NEEDLE;
    else if (strstr(name, "MMCoQA")) t->rule = MB_RULE_CONTAINS;
    else if (!strcmp(qt->valuestring, "open-ended")) t->rule = MB_RULE_ROUGE;
    else if (!strcmp(qt->valuestring, "multi-choice")) t->rule = MB_RULE_CHOICE;
    else {
        print_error("eval milebench: '%s': question_type '%s' (MileBench scores open-ended and multi-choice)", path,
                    qt->valuestring);
        return EXIT_INPUT;
    }
    return 0;
}

void mb_tasks_free(struct mb_task *t, int n) {
    for (int i = 0; t && i < n; i++) cJSON_Delete(t[i].root);
    free(t);
}

static int name_cmp(const void *x, const void *y) {
    return strcmp(*(char *const *)x, *(char *const *)y);
}

int mb_tasks_open(const struct args *a, struct mb_task **out, int *n_out) {
    *out = NULL, *n_out = 0;
    if (!a->eval.data) {
        print_error("eval milebench: --data DIR is needed (MileBench's folder: NAME/NAME.json and NAME/images/)");
        return EXIT_USAGE;
    }
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", a->eval.data);
    for (size_t l = strlen(dir); l > 1 && dir[l - 1] == '/';) dir[--l] = '\0';
    const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
    /* DIR is one task's folder, or a folder of task folders */
    struct mb_task *t = calloc(1, sizeof *t);
    if (!t) return fail(KVF_ERR_NOMEM, "eval milebench");
    int rc = task_open(dir, base, t), n = 0;
    if (rc == 0) n = 1;
    else if (rc > 0) cJSON_Delete(t->root);
    else if (rc < 0) {
        rc = 0;
        DIR *d = opendir(dir);
        if (!d) {
            free(t);
            print_error("eval milebench: cannot open the folder '%s'", dir);
            return EXIT_INPUT;
        }
        char **names = NULL;
        int n_names = 0;
        for (struct dirent *e; (e = readdir(d));) {
            char **nn = e->d_name[0] != '.' ? realloc(names, sizeof *names * (size_t)(n_names + 1)) : NULL;
            if (nn) names = nn, names[n_names] = strdup(e->d_name), n_names += names[n_names] != NULL;
        }
        closedir(d);
        qsort(names, (size_t)n_names, sizeof *names, name_cmp);
        struct mb_task *more = realloc(t, sizeof *t * (size_t)(n_names + 1));
        if (more) t = more;
        else rc = fail(KVF_ERR_NOMEM, "eval milebench");
        for (int i = 0; !rc && i < n_names; i++) {
            char sub[4096 + 256];
            snprintf(sub, sizeof sub, "%s/%s", dir, names[i]);
            if (a->eval.tasks && !in_list(a->eval.tasks, names[i])) continue;
            const int r = task_open(sub, names[i], &t[n]);
            if (r == 0) n++;
            else if (r > 0) cJSON_Delete(t[n].root), rc = r;
        }
        for (int i = 0; i < n_names; i++) free(names[i]);
        free(names);
    }
    /* every task --tasks names must be there */
    for (const char *c = a->eval.tasks; !rc && c && *c; c = list_next(c)) {
        const size_t len = strcspn(c, ",");
        bool found = false;
        for (int i = 0; i < n && !found; i++) found = strlen(t[i].name) == len && !strncmp(t[i].name, c, len);
        if (!found) {
            print_error("eval milebench: --tasks: no task '%.*s' in '%s'", (int)strcspn(c, ","), c, dir);
            rc = EXIT_USAGE;
        }
    }
    if (!rc && n == 0) {
        print_error("eval milebench: no MileBench task in '%s' (want NAME/NAME.json with NAME/images/)", dir);
        rc = EXIT_INPUT;
    }
    if (rc) {
        mb_tasks_free(t, n);
        return rc;
    }
    *out = t, *n_out = n;
    return 0;
}

const char *mb_task_metric(const struct mb_task *t) {
    return t->rule == MB_RULE_ROUGE ? "ROUGE-L" : "accuracy";
}

/* ------------------------------------------------------------- samples -- */

/* Every occurrence of from in b's text replaced by to. */
static bool replace_all(struct strbuf *b, const char *from, const char *to) {
    if (!b->s || !strstr(b->s, from)) return true;
    struct strbuf o = {0};
    const size_t lf = strlen(from);
    bool ok = true;
    for (const char *c = b->s, *hit; ok && c;) {
        hit = strstr(c, from);
        ok = strbuf_put(&o, c, hit ? (size_t)(hit - c) : strlen(c)) && (!hit || strbuf_put(&o, to, strlen(to)));
        c = hit ? hit + lf : NULL;
    }
    free(b->s);
    *b = o;
    return ok;
}

/* Python's str() of a JSON number or string, in a new string (NULL for
 * another type or out of memory). */
static char *json_text(const cJSON *v) {
    if (cJSON_IsString(v)) return strdup(v->valuestring);
    if (!cJSON_IsNumber(v)) return NULL;
    char out[64];
    const double x = v->valuedouble;
    if (x == floor(x) && fabs(x) < 1e15) snprintf(out, sizeof out, "%.0f", x);
    else
        for (int p = 1; p <= 17; p++) /* the shortest that reads back, as Python's repr */
            if (snprintf(out, sizeof out, "%.*g", p, x) > 0 && strtod(out, NULL) == x) break;
    return strdup(out);
}

/* A task file names its images relative to its images folder; one that
 * leads out of it (absolute, or through "..") would read any file the
 * user can. */
static bool path_stays_inside(const char *p) {
    if (p[0] == '/') return false;
    for (const char *s = p; *s; s = strchr(s, '/') ? strchr(s, '/') + 1 : s + strlen(s))
        if (s[0] == '.' && s[1] == '.' && (s[2] == '/' || s[2] == '\0')) return false;
    return true;
}

static int bad_sample(const struct mb_task *t, int k, const char *why) {
    print_error("eval milebench: %s sample %d: %s", t->name, k, why);
    return EXIT_INPUT;
}

/* The last n of a text's ids as text: the tokens' pieces, with SPM's
 * leading space dropped as the tokenizer's decode does. */
static int decode_tail(const struct kvf_model *m, const int32_t *ids, int n, struct strbuf *out) {
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    char *piece = NULL;
    int32_t cap = 0;
    int rc = 0;
    for (int i = 0; !rc && i < n; i++) {
        const int32_t np = token_piece(m, ids[i], &piece, &cap);
        const int skip = i == 0 && np > 0 && piece[0] == ' ' && !strcmp(info.tokenizer, "spm");
        if (np < 0 || !strbuf_put(out, piece + skip, (size_t)(np - skip))) rc = fail(KVF_ERR_NOMEM, "eval milebench");
    }
    free(piece);
    return rc;
}

/* generate.py's truncation: the context (fragments between MB_IMAGE) taken
 * from its end while text and images fit in `room` tokens; a last fragment
 * too long alone is cut to its last `room` tokens. Writes the kept context
 * (placeholders in place) to out and the first image kept to *first_image. */
static int fit_context(const struct kvf_model *m, const char *ctx, int n_images, int image_tokens, int room,
                       struct strbuf *out, int *first_image) {
    const size_t lp = strlen(MB_IMAGE);
    int n_frag = 1;
    for (const char *c = ctx; (c = strstr(c, MB_IMAGE)); c += lp) n_frag++;
    const char **frag = malloc(sizeof *frag * (size_t)n_frag); /* fragment f: frag[f], len[f] bytes */
    size_t *len = malloc(sizeof *len * (size_t)n_frag);
    if (!frag || !len) {
        free(frag), free(len);
        return fail(KVF_ERR_NOMEM, "eval milebench");
    }
    frag[0] = ctx;
    for (int f = 0; f < n_frag; f++) {
        const char *end = f + 1 < n_frag ? strstr(frag[f], MB_IMAGE) : frag[f] + strlen(frag[f]);
        len[f] = (size_t)(end - frag[f]);
        if (f + 1 < n_frag) frag[f + 1] = end + lp;
    }
    int past = 0, first = n_frag, img = n_images, rc = 0;
    bool image_start = false, cut = false;
    for (int f = n_frag - 1; !rc && f >= 0; f--) {
        int32_t *ids = NULL, n_ids = 0;
        if ((rc = tokenize_text(m, frag[f], len[f], false, false, &ids, &n_ids))) break;
        if (n_ids + past > room) {
            if (first == n_frag) { /* nothing kept yet: the end of this one */
                rc = decode_tail(m, ids + n_ids - room, room, out);
                first = f, cut = true;
            }
            free(ids);
            break;
        }
        free(ids);
        image_start = false;
        first = f, past += n_ids;
        if (image_tokens + past > room) break;
        if (img > 0) image_start = true, img--, past += image_tokens;
    }
    if (!rc && image_start && !strbuf_put(out, MB_IMAGE, lp)) rc = fail(KVF_ERR_NOMEM, "eval milebench");
    for (int f = first; !rc && !cut && f < n_frag; f++)
        if (!strbuf_put(out, frag[f], len[f]) || (f + 1 < n_frag && !strbuf_put(out, MB_IMAGE, lp)))
            rc = fail(KVF_ERR_NOMEM, "eval milebench");
    if (!rc && !out->s && !strbuf_put(out, "", 0)) rc = fail(KVF_ERR_NOMEM, "eval milebench");
    free(frag);
    free(len);
    *first_image = img;
    return rc;
}

int mb_sample(const struct args *a, const struct kvf_model *m, const struct mb_task *t, int k, struct sample *out) {
    memset(out, 0, sizeof *out);
    out->task = t, out->depth = NAN;
    const cJSON *s = cJSON_GetArrayItem(t->data, k), *inst = item(s, "task_instance");
    const cJSON *ctx = item(inst, "context"), *imgs = item(inst, "images_path"), *opts = item(inst, "choice_list");
    const cJSON *iid = item(s, "task_instruction_id"), *lvl = item(s, "image_quantity_level");
    const int n_img = cJSON_GetArraySize(imgs), n_opt = cJSON_GetArraySize(opts);
    if (!cJSON_IsString(ctx) || (imgs && !cJSON_IsArray(imgs)) || (opts && !cJSON_IsArray(opts)) ||
        !(out->answer = json_text(item(s, "response"))))
        return bad_sample(t, k,
                          "want {\"task_instance\": {\"context\", \"images_path\", [\"choice_list\"]}, \"response\"}");
    for (int i = 0; i < n_img; i++) {
        const cJSON *p = cJSON_GetArrayItem(imgs, i);
        if (!cJSON_IsString(p)) return bad_sample(t, k, "images_path holds a non-string");
        if (!path_stays_inside(p->valuestring))
            return bad_sample(t, k, "images_path leads out of the task's images folder (absolute, or '..')");
    }
    const cJSON *instr = t->instructions;
    if (cJSON_IsArray(instr)) {
        /* compared as a double first: a JSON number need not fit an int */
        const double i = cJSON_IsNumber(iid) ? iid->valuedouble : -1;
        instr = i >= 0 && i < cJSON_GetArraySize(instr) && i == floor(i) ? cJSON_GetArrayItem(instr, (int)i) : NULL;
    }
    if (!cJSON_IsString(instr)) return bad_sample(t, k, "task_instruction_id names no task instruction");
    char *id = json_text(item(s, "sample_id"));
    if (id) snprintf(out->id, sizeof out->id, "%s", id);
    else snprintf(out->id, sizeof out->id, "%d", k);
    free(id);
    out->level = cJSON_IsString(lvl) ? lvl->valuestring : NULL;
    if (n_opt > 0) {
        if (!(out->choices = calloc((size_t)n_opt, sizeof *out->choices))) return fail(KVF_ERR_NOMEM, "eval milebench");
        for (int i = 0; i < n_opt; i++) {
            const cJSON *o = cJSON_GetArrayItem(opts, i);
            if (!cJSON_IsString(o)) return bad_sample(t, k, "choice_list holds a non-string");
            out->choices[i] = o->valuestring;
        }
        out->n_choices = n_opt;
    }
    /* MileBench itself fails on these: a ground truth that no rule can score */
    if (metrics_mb_score(t->rule, out->answer, out->answer, out->choices, out->n_choices) < 0)
        return bad_sample(
            t, k, t->rule == MB_RULE_CHOICE ? "its response is none of its choice_list" : "its response is empty");
    /* the context, the options listed, the images at their placeholders */
    struct strbuf c = {0};
    bool ok = strbuf_put(&c, ctx->valuestring, strlen(ctx->valuestring));
    if (ok && n_opt > 0) {
        ok = strbuf_put(&c, "\nChoice list: \n", 15);
        for (int i = 0; ok && i < n_opt; i++) {
            char letter[8] = "";
            if (strcmp(t->name, "GPR1200")) snprintf(letter, sizeof letter, "%c. ", 'A' + i); /* over 26 options */
            ok = (i == 0 || strbuf_put(&c, "\n", 1)) && strbuf_put(&c, letter, strlen(letter)) &&
                 strbuf_put(&c, out->choices[i], strlen(out->choices[i]));
        }
        ok = ok && strbuf_put(&c, "\nYour answer is: ", 17);
    }
    for (int i = 1; ok && i <= n_img; i++) {
        char img[32], tbl[32];
        snprintf(img, sizeof img, "{image#%d}", i), snprintf(tbl, sizeof tbl, "{table#%d}", i);
        ok = replace_all(&c, img, MB_IMAGE) && replace_all(&c, tbl, MB_IMAGE);
    }
    if (!ok) {
        free(c.s);
        return fail(KVF_ERR_NOMEM, "eval milebench");
    }
    /* kept from the end within --ctx (the model's context by default),
     * the instruction always in front */
    struct kvf_model_info info;
    kvf_model_get_info(m, &info);
    const int max_ctx = a->ctx > 0 ? a->ctx : info.n_ctx_train;
    int32_t *ids = NULL, n_ids = 0;
    int rc = tokenize_text(m, instr->valuestring, strlen(instr->valuestring), false, false, &ids, &n_ids);
    free(ids);
    if (!rc && max_ctx - n_ids <= 0) rc = bad_sample(t, k, "its task instruction alone is over --ctx tokens");
    struct strbuf kept = {0}, text = {0};
    int first_image = 0;
    if (!rc) rc = fit_context(m, c.s, n_img, info.image_tokens, max_ctx - n_ids, &kept, &first_image);
    free(c.s);
    /* MileBench's LLaVA worker: back-to-back images on their own lines */
    ok = !rc && strbuf_put(&text, instr->valuestring, strlen(instr->valuestring)) && strbuf_put(&text, "\n", 1) &&
         strbuf_put(&text, kept.s, kept.n) && replace_all(&text, MB_IMAGE MB_IMAGE, MB_IMAGE "\n" MB_IMAGE "\n") &&
         replace_all(&text, MB_IMAGE, KVF_MARKER_IMAGE);
    free(kept.s);
    if (!rc && !ok) rc = fail(KVF_ERR_NOMEM, "eval milebench");
    out->text = text.s;
    int markers = 0;
    for (const char *p = out->text; !rc && p && (p = strstr(p, KVF_MARKER_IMAGE)); p += strlen(KVF_MARKER_IMAGE))
        markers++;
    if (!rc && markers != n_img - first_image) {
        char why[160];
        snprintf(why, sizeof why, "%d image placeholders in its context for %d images", markers, n_img - first_image);
        rc = bad_sample(t, k, why);
    }
    for (int i = first_image; !rc && i < n_img; i++) {
        char path[4096 + 512];
        snprintf(path, sizeof path, "%s/images/%s", t->dir, cJSON_GetArrayItem(imgs, i)->valuestring);
        rc = media_image_file(a, m, path, &out->media);
        if (!rc && a->eval.kept_map && !out->first_image)
            kvf_image_load(path, 0, &out->first_image); /* under the map */
    }
    return rc;
}

double mb_score(const struct sample *s, const char *output) {
    return metrics_mb_score(s->task->rule, output, s->answer, s->choices, s->n_choices);
}
