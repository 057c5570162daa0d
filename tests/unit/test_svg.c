/* The SVG writer: well-formed XML (tags balanced, text escaped) in every
 * picture. Line charts: one polyline per series per panel and one legend
 * entry per series, points that cannot be drawn (NaN, <= 0 on a log axis)
 * skipped, points joined in x order, references black and dashed (one point:
 * a level across the plot), the [0, 1] axis of scores, several panels, "no
 * data". Heatmaps: one cell per (x, y), NaN cells grey, the colour scale,
 * rows of per_row panels. Kept maps: a grid of kv heads x images, one cell
 * per grid position coloured by state, the labels, the counts over all maps
 * and an embedded PNG that decodes to a PNG. Clean errors everywhere. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "lab/svg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    assert_non_null(s);
    assert_int_equal(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* Tags balance (a stack of names), attribute values and text hold no raw
 * '<' or '&' outside entities. */
static void assert_well_formed(const char *s) {
    char stack[64][32];
    int depth = 0;
    for (const char *p = s; *p; p++) {
        if (*p == '&') assert_true(!strncmp(p, "&lt;", 4) || !strncmp(p, "&gt;", 4) || !strncmp(p, "&amp;", 5) ||
                                   !strncmp(p, "&quot;", 6) || !strncmp(p, "&apos;", 6));
        if (*p != '<') continue;
        const char *e = strchr(p, '>');
        assert_non_null(e);
        for (const char *q = p + 1; q < e; q++) assert_true(*q != '<');
        char name[32];
        const bool close = p[1] == '/', self = e[-1] == '/';
        const size_t n = strcspn(p + 1 + close, " />");
        snprintf(name, sizeof name, "%.*s", (int)n, p + 1 + close);
        if (close) {
            assert_true(depth > 0);
            assert_string_equal(stack[--depth], name);
        } else if (!self) {
            assert_true(depth < 64);
            strcpy(stack[depth++], name);
        }
        p = e;
    }
    assert_int_equal(depth, 0);
    /* one document, and no number printf could not print */
    assert_int_equal(strncmp(s, "<svg ", 5), 0);
    assert_null(strstr(s, "nan"));
    assert_null(strstr(s, "inf\""));
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

/* The numeric attribute NAME="..." of the element that starts at or before
 * at (searching back to its '<'). */
static double attr(const char *s, const char *at, const char *name) {
    const char *open = at;
    while (open > s && *open != '<') open--;
    const char *end = strchr(open, '>');
    assert_non_null(end);
    char key[32];
    snprintf(key, sizeof key, " %s=\"", name);
    const char *a = strstr(open, key);
    assert_non_null(a);
    assert_true(a < end);
    return strtod(a + strlen(key), NULL);
}

/* The <text> element whose content is exactly label: its x and y. */
static void text_at(const char *s, const char *label, double *x, double *y) {
    char key[128];
    snprintf(key, sizeof key, ">%s</text>", label);
    const char *p = strstr(s, key);
    assert_non_null(p);
    assert_null(strstr(p + 1, key)); /* one of them */
    *x = attr(s, p, "x"), *y = attr(s, p, "y");
}

/* The points of the polyline drawn in colour col: n of them into xs, ys. */
static int polyline_points(const char *s, const char *col, double *xs, double *ys, int cap) {
    char key[64];
    snprintf(key, sizeof key, "<polyline fill=\"none\" stroke=\"%s\"", col);
    const char *p = strstr(s, key);
    assert_non_null(p);
    p = strstr(p, "points=\"");
    assert_non_null(p);
    p += strlen("points=\"");
    int n = 0;
    while (*p != '"') {
        char *e;
        const double x = strtod(p, &e);
        assert_true(e > p && *e == ',');
        p = e + 1;
        const double y = strtod(p, &e);
        assert_true(e > p && *e == ' ');
        p = e + 1;
        assert_true(n < cap);
        xs[n] = x, ys[n] = y, n++;
    }
    return n;
}

/* The frame of each plot: its left and right edges. */
static void frame_x(const char *s, int k, double *left, double *right) {
    const char *p = s;
    for (int i = 0; i <= k; i++) {
        p = strstr(p + (i > 0), "fill=\"none\" stroke=\"black\"/>");
        assert_non_null(p);
    }
    *left = attr(s, p, "x"), *right = *left + attr(s, p, "width");
}

#define CHART KVF_TEST_TMP "/chart.svg"

static void test_chart(void **st) {
    (void)st;
    const double x[4] = {0.05, 0.1, 0.5, 1.0}, y1[4] = {0.2, 0.4, 0.9, 1.0}, y2[4] = {0.1, NAN, 0.7, 1.0};
    const double xz[3] = {0, -1, 0.5}, yz[3] = {1, 2, 3};
    const double xu[4] = {1.0, 0.05, 0.5, 0.1}, yu[4] = {1.0, 0.2, 0.9, 0.4}; /* unsorted, y rising with x */
    const double xr[1] = {123}, yr[1] = {0.95};                                  /* the full cache: a level */
    const struct svg_series s[5] = {
        {.label = "snapkv", .n = 4, .x = x, .y = y1},
        {.label = "a<b&c", .n = 4, .x = x, .y = y2},
        {.label = "zero x", .n = 3, .x = xz, .y = yz},
        {.label = "unsorted", .n = 4, .x = xu, .y = yu},
        {.label = "full cache", .n = 1, .x = xr, .y = yr, .reference = true},
    };
    const struct svg_chart c = {.title = "Quality \"vs\" budget", .x_label = "budget", .y_label = "accuracy",
                                .log_x = true, .series = s, .n_series = 5};
    char err[256];
    assert_int_equal(svg_line_charts(CHART, "Title <1>", "model 'm' & data", &c, 1, err, sizeof err), 0);
    char *t = slurp(CHART);
    assert_well_formed(t);
    /* the titles, escaped */
    assert_int_equal(count(t, ">Title &lt;1&gt;</text>"), 1);
    assert_int_equal(count(t, ">model &apos;m&apos; &amp; data</text>"), 1);
    assert_int_equal(count(t, ">Quality &quot;vs&quot; budget</text>"), 1);
    assert_int_equal(count(t, ">budget</text>"), 1);
    assert_int_equal(count(t, ">accuracy</text>"), 1);
    /* a polyline per series but the level, a legend entry for each */
    assert_int_equal(count(t, "<polyline"), 4);
    assert_int_equal(count(t, ">snapkv</text>"), 1);
    assert_int_equal(count(t, ">a&lt;b&amp;c</text>"), 1);
    assert_int_equal(count(t, ">zero x</text>"), 1);
    assert_int_equal(count(t, ">unsorted</text>"), 1);
    assert_int_equal(count(t, ">full cache</text>"), 1);
    assert_int_equal(count(t, "stroke-width=\"2\""), 4 + 1 + 5); /* polylines, the level, legend lines */
    /* the NaN and the non-positive x on a log axis are skipped */
    assert_int_equal(count(t, "<circle"), 4 + 3 + 1 + 4);
    double px[8], py[8];
    assert_int_equal(polyline_points(t, "#D55E00", px, py, 8), 3);
    assert_int_equal(polyline_points(t, "#009E73", px, py, 8), 1);
    /* joined in x order: x rises, and so does y (up the page: pixels fall) */
    assert_int_equal(polyline_points(t, "#CC79A7", px, py, 8), 4);
    for (int i = 1; i < 4; i++) {
        assert_true(px[i] > px[i - 1]);
        assert_true(py[i] < py[i - 1]);
    }
    /* the same points as snapkv's, which came sorted */
    double qx[8], qy[8];
    assert_int_equal(polyline_points(t, "#0072B2", qx, qy, 8), 4);
    assert_memory_equal(px, qx, sizeof *px * 4);
    assert_memory_equal(py, qy, sizeof *py * 4);
    /* the reference: black, dashed, across the whole plot whatever its x */
    const char *lv = strstr(t, "stroke=\"#000000\" stroke-width=\"2\" stroke-dasharray=\"8 4\"/>");
    assert_non_null(lv);
    double left, right;
    frame_x(t, 0, &left, &right);
    assert_float_equal(attr(t, lv, "x1"), left, 0.05);
    assert_float_equal(attr(t, lv, "x2"), right, 0.05);
    assert_float_equal(attr(t, lv, "y1"), attr(t, lv, "y2"), 1e-9);
    assert_true(attr(t, lv, "y1") < py[2]); /* 0.95 above unsorted's 0.9 */
    assert_true(attr(t, lv, "y1") > py[3]); /* and below its 1.0 */
    assert_int_equal(count(t, "stroke-dasharray=\"8 4\""), 2); /* the level and its legend line */
    free(t);

    /* several panels (the same series), a reference of many points as a
     * dashed polyline; one legend */
    const double yb[3] = {0.3, 0.5, 0.6}, yf[3] = {0.8, 0.8, 0.8}, xb[3] = {1, 2, 4};
    const struct svg_series s2[2][2] = {
        {{.label = "tova", .n = 3, .x = xb, .y = yb}, {.label = "full", .n = 3, .x = xb, .y = yf, .reference = true}},
        {{.label = "tova", .n = 2, .x = xb, .y = yb}, {.label = "full", .n = 3, .x = xb, .y = yf, .reference = true}},
    };
    const struct svg_chart p3[3] = {
        { .title = "panel one",
          .x_label = "budget",
          .y_label = "score",
          .series = s2[0],
          .n_series = 2,
          .unit_y = true },
        { .title = "panel two", .x_label = "budget", .y_label = "score", .series = s2[1], .n_series = 2 },
        { .title = "panel three",
          .x_label = "budget",
          .y_label = "score",
          .log_y = true,
          .series = s2[0],
          .n_series = 2 },
    };
    assert_int_equal(svg_line_charts(CHART, "three", NULL, p3, 3, err, sizeof err), 0);
    t = slurp(CHART);
    assert_well_formed(t);
    assert_int_equal(count(t, "fill=\"none\" stroke=\"black\"/>"), 3);
    assert_int_equal(count(t, "<polyline"), 3 * 2);
    assert_int_equal(count(t, "<circle"), 3 + 3 + 2 + 3 + 3 + 3);
    assert_int_equal(count(t, "<polyline fill=\"none\" stroke=\"#000000\" stroke-width=\"2\" stroke-dasharray=\"8 4\""),
                     3);
    assert_int_equal(count(t, ">tova</text>"), 1);
    assert_int_equal(count(t, ">full</text>"), 1);
    assert_int_equal(count(t, ">score</text>"), 3);
    double x1, y1p, x2, y2p, x3, y3p;
    text_at(t, "panel one", &x1, &y1p);
    text_at(t, "panel two", &x2, &y2p);
    text_at(t, "panel three", &x3, &y3p);
    assert_true(x1 < x2 && x2 < x3); /* side by side */
    assert_float_equal(y1p, y2p, 1e-9);
    assert_float_equal(y2p, y3p, 1e-9);
    double l0, r0, l1, r1;
    frame_x(t, 0, &l0, &r0);
    frame_x(t, 1, &l1, &r1);
    assert_true(r0 < l1); /* the plots do not overlap */
    assert_true(x1 > l0 && x1 < r0 && x2 > l1 && x2 < r1);
    /* scores: the first panel's y axis runs from 0 past 1, the second's
     * only over its data (0.3 to 0.8) */
    assert_true(strstr(t, "text-anchor=\"end\" >0</text>") != NULL);
    assert_int_equal(count(t, "text-anchor=\"end\" >1</text>"), 1); /* only where unit_y */
    assert_int_equal(count(t, "text-anchor=\"end\" >0.3</text>"), 1); /* the second panel's lowest tick */
    assert_null(strstr(t, "no data"));
    free(t);

    /* the unit axis alone: a single panel without it has no 0 or 1 tick */
    const struct svg_chart u[2] = {
        {.title = "u", .x_label = "x", .y_label = "y", .series = s2[0], .n_series = 1, .unit_y = true},
        {.title = "u", .x_label = "x", .y_label = "y", .series = s2[0], .n_series = 1},
    };
    assert_int_equal(svg_line_charts(CHART, "unit", NULL, &u[0], 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_int_equal(count(t, "text-anchor=\"end\" >0</text>"), 1);
    assert_int_equal(count(t, "text-anchor=\"end\" >1</text>"), 1);
    free(t);
    assert_int_equal(svg_line_charts(CHART, "not unit", NULL, &u[1], 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_int_equal(count(t, "text-anchor=\"end\" >0</text>"), 0);
    assert_int_equal(count(t, "text-anchor=\"end\" >1</text>"), 0);
    free(t);

    /* one point; non-positive y on a log y axis; no series at all */
    const double yl[3] = {0, 1, 2};
    const struct svg_series one = { .label = "one", .n = 1, .x = x, .y = y1 },
                            logy = { .label = "ly", .n = 3, .x = x, .y = yl };
    const struct svg_chart c1 = {
        .title = "one", .x_label = "x", .y_label = "y", .log_y = true, .series = &one, .n_series = 1
    };
    const struct svg_chart cl = {
        .title = "ly", .x_label = "x", .y_label = "y", .log_y = true, .series = &logy, .n_series = 1
    };
    const struct svg_chart c0 = {.title = "none", .x_label = "x", .y_label = "y"};
    assert_int_equal(svg_line_charts(CHART, "one", NULL, &c1, 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_well_formed(t);
    assert_int_equal(count(t, "<circle"), 1);
    free(t);
    assert_int_equal(svg_line_charts(CHART, "log y", NULL, &cl, 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_well_formed(t);
    assert_int_equal(count(t, "<circle"), 2);
    free(t);
    assert_int_equal(svg_line_charts(CHART, "none", NULL, &c0, 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_well_formed(t);
    assert_int_equal(count(t, ">no data</text>"), 1);
    assert_null(strstr(t, "<polyline"));
    free(t);
    /* series without points: no data either */
    const struct svg_series empty[2] = {{.label = "e1", .x = x, .y = y1}, {.label = "e2", .x = x, .y = y1}};
    const struct svg_chart ce = {.title = "empty", .x_label = "x", .y_label = "y", .series = empty, .n_series = 2};
    assert_int_equal(svg_line_charts(CHART, "empty", NULL, &ce, 1, err, sizeof err), 0);
    t = slurp(CHART);
    assert_well_formed(t);
    assert_int_equal(count(t, ">no data</text>"), 1);
    assert_int_equal(count(t, ">e2</text>"), 1);
    free(t);

    /* errors */
    err[0] = '\0';
    assert_int_equal(svg_line_charts("/nonexistent-dir/x.svg", "t", NULL, &c, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x.svg"));
    assert_int_equal(svg_line_charts(CHART, "t", NULL, &c, 0, err, sizeof err), -1);
    assert_int_equal(svg_line_charts(CHART, "t", NULL, NULL, 1, err, sizeof err), -1);
    const struct svg_chart bad = {.title = "bad", .x_label = "x", .y_label = "y", .n_series = 2};
    err[0] = '\0';
    assert_int_equal(svg_line_charts(CHART, "t", NULL, &bad, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, CHART));
}

#define HEAT KVF_TEST_TMP "/heat.svg"

static void test_heatmap(void **st) {
    (void)st;
    const double xs[3] = {0.1, 0.25, 0.5}, ys[2] = {1024, 4096};
    const double v0[6] = {0, 0.25, NAN, 0.75, 1, 0.5};
    const double v1[6] = {1, 1, 1, NAN, NAN, 0.75};
    const double xs4[4] = {1, 2, 3, 4}, ys1[1] = {7}, v2[4] = {0.25, 0.25, 0.25, 0.25};
    const struct svg_heat h[3] = {
        {.title = "snapkv <a>", .nx = 3, .ny = 2, .xs = xs, .ys = ys, .v = v0},
        {.title = "tova", .nx = 3, .ny = 2, .xs = xs, .ys = ys, .v = v1},
        {.title = "wide", .nx = 4, .ny = 1, .xs = xs4, .ys = ys1, .v = v2},
    };
    char err[256];
    assert_int_equal(svg_heatmaps(HEAT, "Needle & haystack", "model 'm'", "budget", "context", "score", h, 3, 2,
                                  err, sizeof err),
                     0);
    char *t = slurp(HEAT);
    assert_well_formed(t);
    assert_int_equal(count(t, ">Needle &amp; haystack</text>"), 1);
    assert_int_equal(count(t, ">model &apos;m&apos;</text>"), 1);
    assert_int_equal(count(t, ">snapkv &lt;a&gt;</text>"), 1);
    /* one cell per (x, y) */
    assert_int_equal(count(t, "stroke=\"white\"/>"), 6 + 6 + 4);
    /* NaN cells grey and unlabelled (and the scale's "no run" swatch) */
    assert_int_equal(count(t, "fill=\"#e0e0e0\""), 3 + 1);
    assert_int_equal(count(t, ">no run</text>"), 1);
    assert_int_equal(count(t, "font-size=\"10\""), 16 - 3); /* a value in each cell with data */
    assert_int_equal(count(t, "font-size=\"10\">0.25</text>"), 1 + 4);
    assert_int_equal(count(t, "font-size=\"10\">0.75</text>"), 2);
    assert_int_equal(count(t, "font-size=\"10\">1</text>"), 4);
    /* red at 0, yellow at 0.5, green at 1: the cells and the scale's steps */
    assert_int_equal(count(t, "fill=\"#d73027\""), 1 + 1);
    assert_int_equal(count(t, "fill=\"#fee08b\""), 1 + 1);
    assert_int_equal(count(t, "fill=\"#1a9850\""), 4 + 1);
    /* the colour scale: 11 steps, 1 / 0.5 / 0 named, v_label */
    assert_int_equal(count(t, "width=\"18\" height=\"14\""), 11 + 1);
    assert_int_equal(count(t, ">score</text>"), 1);
    assert_int_equal(count(t, "text-anchor=\"start\" >1</text>"), 1);
    assert_int_equal(count(t, "text-anchor=\"start\" >0.5</text>"), 1);
    assert_int_equal(count(t, "text-anchor=\"start\" >0</text>"), 1);
    /* the categories and the axis names on every panel */
    assert_int_equal(count(t, ">budget</text>"), 3);
    assert_int_equal(count(t, ">context</text>"), 3);
    assert_int_equal(count(t, "text-anchor=\"end\" >4096</text>"), 2);
    assert_int_equal(count(t, "text-anchor=\"end\" >7</text>"), 1);
    assert_int_equal(count(t, "text-anchor=\"middle\" >0.1</text>"), 2);
    /* two per row: the third under the first */
    double ax, ay, bx, by, cx, cy;
    text_at(t, "snapkv &lt;a&gt;", &ax, &ay);
    text_at(t, "tova", &bx, &by);
    text_at(t, "wide", &cx, &cy);
    assert_float_equal(ay, by, 1e-9);
    assert_true(bx > ax);
    assert_true(cy > ay);
    assert_true(cx < bx);
    free(t);
    /* three per row: one row */
    assert_int_equal(svg_heatmaps(HEAT, "row", NULL, "budget", "context", "score", h, 3, 3, err, sizeof err), 0);
    t = slurp(HEAT);
    assert_well_formed(t);
    text_at(t, "snapkv &lt;a&gt;", &ax, &ay);
    text_at(t, "tova", &bx, &by);
    text_at(t, "wide", &cx, &cy);
    assert_float_equal(ay, by, 1e-9);
    assert_float_equal(by, cy, 1e-9);
    assert_true(ax < bx && bx < cx);
    free(t);
    /* one per row: a column */
    assert_int_equal(svg_heatmaps(HEAT, "column", NULL, "budget", "context", "score", h, 3, 1, err, sizeof err), 0);
    t = slurp(HEAT);
    text_at(t, "snapkv &lt;a&gt;", &ax, &ay);
    text_at(t, "tova", &bx, &by);
    assert_true(by > ay);
    free(t);

    /* errors: no panel, a bad per_row, empty or missing data, a bad path */
    const struct svg_heat no_x = {.title = "e", .nx = 0, .ny = 2, .xs = xs, .ys = ys, .v = v0};
    const struct svg_heat no_v = {.title = "e", .nx = 3, .ny = 2, .xs = xs, .ys = ys};
    const struct svg_heat no_ys = {.title = "e", .nx = 3, .ny = 2, .xs = xs, .v = v0};
    const struct svg_heat neg_y = {.title = "e", .nx = 3, .ny = -1, .xs = xs, .ys = ys, .v = v0};
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", h, 0, 2, err, sizeof err), -1);
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", NULL, 1, 2, err, sizeof err), -1);
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", h, 3, 0, err, sizeof err), -1);
    err[0] = '\0';
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", &no_x, 1, 1, err, sizeof err), -1);
    assert_non_null(strstr(err, HEAT));
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", &no_v, 1, 1, err, sizeof err), -1);
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", &no_ys, 1, 1, err, sizeof err), -1);
    assert_int_equal(svg_heatmaps(HEAT, "t", NULL, "x", "y", "v", &neg_y, 1, 1, err, sizeof err), -1);
    err[0] = '\0';
    assert_int_equal(svg_heatmaps("/nonexistent-dir/h.svg", "t", NULL, "x", "y", "v", h, 3, 2, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/h.svg"));
}

static int b64v(char c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Base64 from d up to the closing quote into out: the number of bytes. */
static size_t b64_decode(const char *d, unsigned char *out, size_t cap) {
    const char *end = strchr(d, '"');
    assert_non_null(end);
    assert_true((end - d) % 4 == 0);
    size_t n = 0;
    for (const char *p = d; p < end; p += 4) {
        unsigned v = 0;
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (p[k] == '=') {
                assert_true(p + 4 == end && k >= 2);
                pad++, v <<= 6;
                continue;
            }
            assert_int_equal(pad, 0);
            const int b = b64v(p[k]);
            assert_true(b >= 0);
            v = v << 6 | (unsigned)b;
        }
        for (int k = 0; k < 3 - pad; k++) {
            assert_true(n < cap);
            out[n++] = (unsigned char)(v >> (16 - 8 * k));
        }
    }
    return n;
}

static unsigned be32(const unsigned char *p) {
    return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 | (unsigned)p[2] << 8 | p[3];
}

/* The one embedded picture of s: a PNG of w x h, signature to IEND. */
static void assert_png(const char *s, int w, int h) {
    const char *d = strstr(s, "data:image/png;base64,");
    assert_non_null(d);
    d += strlen("data:image/png;base64,");
    unsigned char *png = malloc(1 << 16);
    assert_non_null(png);
    const size_t n = b64_decode(d, png, 1 << 16);
    assert_true(n > 8 + 25 + 12);
    assert_memory_equal(png, "\x89PNG\r\n\x1a\n", 8);
    assert_memory_equal(png + 12, "IHDR", 4);
    assert_int_equal(be32(png + 16), w); /* the picture's own size */
    assert_int_equal(be32(png + 20), h);
    assert_memory_equal(png + n - 12, "\0\0\0\0IEND\xae\x42\x60\x82", 12); /* to the last byte: its CRC */
    free(png);
}

static const char *const STATE_FILL[3] = {"fill=\"#bbbbbb\"", "fill=\"#009E73\"", "fill=\"#E69F00\""};

/* Cells: rects of a state's colour (the legend's swatches, 14 wide, aside).
 * Two cells never share a corner: n cells at n places. */
static int cells(const char *s, int *per_state) {
    double (*at)[2] = malloc(sizeof *at * 4096);
    assert_non_null(at);
    int n = 0;
    for (int st = 0; st < 3; st++) {
        per_state[st] = 0;
        for (const char *p = s; (p = strstr(p, STATE_FILL[st])); p++) {
            if (attr(s, p, "width") == 14) continue;
            assert_true(n < 4096);
            at[n][0] = attr(s, p, "x"), at[n][1] = attr(s, p, "y");
            for (int j = 0; j < n; j++) assert_false(at[j][0] == at[n][0] && at[j][1] == at[n][1]);
            n++, per_state[st]++;
        }
    }
    free(at);
    return n;
}

#define MAP KVF_TEST_TMP "/map.svg"

static void test_kept_maps(void **st) {
    (void)st;
    /* 2 kv heads x 3 images, maps of different sizes, one with a picture */
    enum { NR = 2, NC = 3 };
    unsigned char state[NR * NC][12 * 12];
    struct svg_grid g[NR * NC];
    long want[3] = {0, 0, 0};
    int total = 0, first_col_rows = 0, first_row_cols = 0;
    uint8_t rgb[20 * 10 * 3];
    for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7);
    for (int m = 0; m < NR * NC; m++) {
        const int rows = 3 + m, cols = 4 + (m % NC);
        for (int i = 0; i < rows * cols; i++) {
            state[m][i] = (unsigned char)((i + m) % 3);
            if (i == 5) state[m][i] = 7; /* unknown: drawn evicted */
            want[state[m][i] < 3 ? state[m][i] : 0]++;
        }
        g[m] = (struct svg_grid){.rows = rows, .cols = cols, .state = state[m]};
        total += rows * cols;
        if (m % NC == 0) first_col_rows += rows;
        if (m / NC == 0) first_row_cols += cols;
    }
    char err[256];
    assert_int_equal(svg_kept_maps(MAP, "layer 3 <kept>", "model 'm' & image", "kv head", "image", NR, NC, g, err,
                                   sizeof err),
                     0);
    char *t = slurp(MAP);
    assert_well_formed(t);
    assert_int_equal(count(t, ">layer 3 &lt;kept&gt;</text>"), 1);
    assert_int_equal(count(t, ">model &apos;m&apos; &amp; image</text>"), 1);
    /* one cell per grid position, coloured by state, plus a swatch each */
    for (int s = 0; s < 3; s++) assert_int_equal(count(t, STATE_FILL[s]), want[s] + 1);
    int per[3];
    assert_int_equal(cells(t, per), total);
    for (int s = 0; s < 3; s++) assert_int_equal(per[s], want[s]);
    /* the counts over all maps */
    char b[64];
    snprintf(b, sizeof b, ">evicted: %ld</text>", want[0]);
    assert_int_equal(count(t, b), 1);
    snprintf(b, sizeof b, ">kept: %ld</text>", want[1]);
    assert_int_equal(count(t, b), 1);
    snprintf(b, sizeof b, ">merged: %ld</text>", want[2]);
    assert_int_equal(count(t, b), 1);
    /* the labels: every kv head on the left, every image on top */
    double hx[NR], hy[NR], ix[NC], iy[NC];
    for (int r = 0; r < NR; r++) {
        snprintf(b, sizeof b, "kv head %d", r);
        text_at(t, b, &hx[r], &hy[r]);
    }
    for (int c = 0; c < NC; c++) {
        snprintf(b, sizeof b, "image %d", c);
        text_at(t, b, &ix[c], &iy[c]);
    }
    assert_null(strstr(t, ">kv head 2<"));
    assert_null(strstr(t, ">image 3<"));
    assert_float_equal(hx[0], hx[1], 1e-9);
    assert_true(hy[1] > hy[0]);
    assert_true(ix[0] < ix[1] && ix[1] < ix[2]);
    assert_float_equal(iy[0], iy[2], 1e-9);
    assert_true(iy[0] < hy[0]); /* the images' names above the first row */
    /* grid coordinates along the first column and the first row (and the
     * corner's note) */
    assert_int_equal(count(t, "font-size=\"9\""), first_col_rows + first_row_cols + 1);
    assert_null(strstr(t, "<image"));
    assert_null(strstr(t, "fill-opacity"));
    free(t);

    /* other names, one map with the picture beneath it */
    g[4].rgb = rgb, g[4].w = 20, g[4].h = 10;
    assert_int_equal(svg_kept_maps(MAP, "with image", NULL, "layer", "frame", NR, NC, g, err, sizeof err), 0);
    t = slurp(MAP);
    assert_well_formed(t);
    assert_non_null(strstr(t, ">layer 1</text>"));
    assert_non_null(strstr(t, ">frame 2</text>"));
    assert_null(strstr(t, "kv head"));
    assert_null(strstr(t, ">image 0<"));
    assert_int_equal(count(t, "<image"), 1);
    assert_int_equal(count(t, "fill-opacity=\"0.75\""), g[4].rows * g[4].cols);
    assert_int_equal(cells(t, per), total);
    assert_png(t, 20, 10);
    /* the picture stretched to its grid: the <image>'s box is the cells' */
    const char *im = strstr(t, "<image");
    double cell = -1, x0 = 1e9, y0 = 1e9;
    for (const char *p = im; (p = strstr(p, "fill-opacity=\"0.75\"")); p++) {
        cell = attr(t, p, "width");
        x0 = fmin(x0, attr(t, p, "x")), y0 = fmin(y0, attr(t, p, "y"));
    }
    assert_float_equal(attr(t, im, "x"), x0, 0.05);
    assert_float_equal(attr(t, im, "y"), y0, 0.05);
    assert_float_equal(attr(t, im, "width"), cell * g[4].cols, 0.05);
    assert_float_equal(attr(t, im, "height"), cell * g[4].rows, 0.05);
    free(t);

    /* pictures of other sizes (PNGs of every length mod 3: base64's padding) */
    static const int sizes[][2] = {{1, 1}, {3, 2}, {7, 5}, {13, 4}, {16, 9}, {5, 17}};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        struct svg_grid one = g[1];
        one.rgb = rgb, one.w = sizes[k][0], one.h = sizes[k][1];
        assert_int_equal(svg_kept_maps(MAP, "sizes", NULL, "kv head", "image", 1, 1, &one, err, sizeof err), 0);
        t = slurp(MAP);
        assert_well_formed(t);
        assert_png(t, sizes[k][0], sizes[k][1]);
        free(t);
    }

    /* one map alone */
    assert_int_equal(svg_kept_maps(MAP, "one", NULL, "kv head", "image", 1, 1, g, err, sizeof err), 0);
    t = slurp(MAP);
    assert_well_formed(t);
    assert_int_equal(cells(t, per), g[0].rows * g[0].cols);
    assert_non_null(strstr(t, ">kv head 0</text>"));
    assert_null(strstr(t, ">kv head 1</text>"));
    free(t);

    /* errors: no rows or columns, no maps, no state, a bad image size */
    err[0] = '\0';
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", 0, NC, g, err, sizeof err), -1);
    assert_non_null(strstr(err, MAP));
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, 0, g, err, sizeof err), -1);
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, NC, NULL, err, sizeof err), -1);
    struct svg_grid bad[NR * NC];
    memcpy(bad, g, sizeof bad);
    bad[5].state = NULL;
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, NC, bad, err, sizeof err), -1);
    memcpy(bad, g, sizeof bad);
    bad[3].rows = 0;
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, NC, bad, err, sizeof err), -1);
    memcpy(bad, g, sizeof bad);
    bad[4].w = 0;
    err[0] = '\0';
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, NC, bad, err, sizeof err), -1);
    assert_non_null(strstr(err, MAP));
    bad[4].w = 20, bad[4].h = -1;
    assert_int_equal(svg_kept_maps(MAP, "x", NULL, "kv head", "image", NR, NC, bad, err, sizeof err), -1);
    err[0] = '\0';
    assert_int_equal(svg_kept_maps("/nonexistent-dir/m.svg", "x", NULL, "kv head", "image", NR, NC, g, err, sizeof err),
                     -1);
    assert_non_null(strstr(err, "/nonexistent-dir/m.svg"));
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_chart), cmocka_unit_test(test_heatmap),
                                       cmocka_unit_test(test_kept_maps)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
