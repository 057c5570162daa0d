/* kvfold eval's pictures: --plots (quality, perplexity and KV memory
 * against budget, decode speed against prompt length, the needle heatmap)
 * and --kept-map (the image entries each kv head keeps). */
#include "eval.h"

#include "svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Policies a plot shows: every --kv of this run and of the rows resumed. */
#define PLOT_MAX_SPECS 64

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
int write_kept_maps(const struct args *a, const struct kvf_model *m, const struct kvf_session *s,
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

int write_plots(const struct args *a, const struct sweep *sw, const struct summary *all, int n_all) {
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
