/* SVG by hand: a chart is a plot area with ticks on two axes, one polyline
 * and markers per series, and a legend; a heatmap and a kept map are grids
 * of cells. Every picture is a row or grid of panels under one title. */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>

/* A line chart panel: margins around a plot of PW x PH; the legend sits
 * right of the panels. */
#define PANEL_LEFT 70
#define PW 420
#define PH 300
#define PANEL_GAP 24
#define PANEL_W (PANEL_LEFT + PW + PANEL_GAP)
#define HEAD 84 /* title, subtitle and panel title above the plots */
#define LEGEND_W 230

/* Colour-blind-safe (Okabe-Ito), then dashes, then dots once they run out. */
static const char *const COLOURS[] = { "#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                       "#E69F00", "#56B4E9", "#000000", "#F0E442" };
#define N_COLOURS 8

static int fail_with(char *err, size_t err_len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
    return -1;
}

static void put_escaped(FILE *f, const char *s) {
    for (; s && *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fputc(*s, f);
        }
    }
}

static void text(FILE *f, double x, double y, const char *anchor, const char *extra, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" %s>", x, y, anchor, extra ? extra : "");
    put_escaped(f, s);
    fputs("</text>\n", f);
}

/* An axis: the data range, mapped to pixels, with its tick values. */
struct axis {
    bool log;
    double lo, hi;   /* in axis units (log10 when log) */
    double ticks[32];
    int n_ticks;
};

static bool usable(double v, bool log) { return isfinite(v) && (!log || v > 0); }

/* A reference with one point: a horizontal line at its y. */
static bool is_level(const struct svg_series *s) { return s->reference && s->n == 1; }
static double unit(double v, bool log) { return log ? log10(v) : v; }

/* 1, 2 or 5 x 10^k steps for about 6 ticks; decades (and 2, 5 within them
 * when there are few) on a log axis. */
static void axis_ticks(struct axis *a) {
    a->n_ticks = 0;
    if (a->log) {
        const double span = a->hi - a->lo;
        static const double sub[3] = {1, 2, 5};
        for (int e = (int)floor(a->lo); e <= (int)ceil(a->hi) && a->n_ticks < 32; e++)
            for (int k = 0; k < (span < 3 ? 3 : 1) && a->n_ticks < 32; k++) {
                const double v = log10(sub[k]) + e;
                if (v >= a->lo - 1e-9 && v <= a->hi + 1e-9) a->ticks[a->n_ticks++] = v;
            }
        return;
    }
    const double raw = (a->hi - a->lo) / 6, mag = pow(10, floor(log10(raw))), r = raw / mag;
    const double step = (r <= 1 ? 1 : r <= 2 ? 2 : r <= 5 ? 5 : 10) * mag;
    a->lo = floor(a->lo / step) * step, a->hi = ceil(a->hi / step) * step;
    for (double v = a->lo; v <= a->hi + step / 2 && a->n_ticks < 32; v += step)
        a->ticks[a->n_ticks++] = fabs(v) < step / 1e6 ? 0 : v;
}

static void axis_fit(struct axis *a, const struct svg_chart *c, bool x) {
    a->lo = INFINITY, a->hi = -INFINITY;
    for (int s = 0; s < c->n_series; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            const double vx = c->series[s].x[i], vy = c->series[s].y[i];
            if (!usable(vx, c->log_x) || !usable(vy, c->log_y)) continue;
            if (x && is_level(&c->series[s])) continue; /* a level spans the axis, wherever its x */
            const double v = unit(x ? vx : vy, a->log);
            a->lo = fmin(a->lo, v), a->hi = fmax(a->hi, v);
        }
    if (a->lo > a->hi) a->lo = 0, a->hi = 1; /* no data */
    /* scores: from 0, with room above 1 so that a line at 1 (the full cache) is not the frame */
    if (!x && c->unit_y) a->lo = fmin(a->lo, 0), a->hi = fmax(a->hi, 1) + 0.05;
    if (a->hi - a->lo < 1e-12) { /* one value: pad around it */
        const double pad = a->log ? 0.5 : fabs(a->lo) > 0 ? fabs(a->lo) * 0.1 : 1;
        a->lo -= pad, a->hi += pad;
    }
    axis_ticks(a);
}

static double px(const struct axis *a, double v, double p0, double p1) {
    return p0 + (unit(v, a->log) - a->lo) / (a->hi - a->lo) * (p1 - p0);
}

static void tick_label(char *b, size_t n, const struct axis *a, double t) {
    snprintf(b, n, "%g", a->log ? pow(10, t) : t);
}

/* The document and its white page, the title and the subtitle. */
static FILE *svg_open(const char *path, int w, int h, const char *title, const char *subtitle, char *err,
                      size_t err_len) {
    FILE *f = fopen(path, "w");
    if (!f) {
        fail_with(err, err_len, "cannot write %s: %s", path, strerror(errno));
        return NULL;
    }
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            w, h, w, h, w, h);
    text(f, 16, 26, "start", "font-size=\"15\" font-weight=\"bold\"", title);
    if (subtitle) text(f, 16, 46, "start", "fill=\"#444\"", subtitle);
    return f;
}

static int svg_close(FILE *f, const char *path, char *err, size_t err_len) {
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : fail_with(err, err_len, "cannot write %s", path);
}

/* Series s's colour and dash pattern: references black and dashed. */
static void series_style(const struct svg_series *sr, int s, const char **col, const char **dash) {
    static const char *const dashes[] = {"", " stroke-dasharray=\"6 3\"", " stroke-dasharray=\"2 3\""};
    *col = sr->reference ? "#000000" : COLOURS[s % N_COLOURS];
    *dash = sr->reference ? " stroke-dasharray=\"8 4\"" : dashes[(s / N_COLOURS) % 3];
}

/* One panel whose plot area starts at x = ox + PANEL_LEFT. */
static int line_panel(FILE *f, const struct svg_chart *c, double ox) {
    struct axis ax = {.log = c->log_x}, ay = {.log = c->log_y};
    axis_fit(&ax, c, true);
    axis_fit(&ay, c, false);
    const double x0 = ox + PANEL_LEFT, x1 = x0 + PW, y0 = HEAD + PH, y1 = HEAD;
    text(f, (x0 + x1) / 2, HEAD - 10, "middle", "font-weight=\"bold\"", c->title);
    for (int i = 0; i < ax.n_ticks; i++) {
        const double x = x0 + (ax.ticks[i] - ax.lo) / (ax.hi - ax.lo) * (x1 - x0);
        char b[32];
        tick_label(b, sizeof b, &ax, ax.ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x, y0, x, y1);
        text(f, x, y0 + 18, "middle", NULL, b);
    }
    for (int i = 0; i < ay.n_ticks; i++) {
        const double y = y0 + (ay.ticks[i] - ay.lo) / (ay.hi - ay.lo) * (y1 - y0);
        char b[32];
        tick_label(b, sizeof b, &ay, ay.ticks[i]);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n", x0, y, x1, y);
        text(f, x0 - 8, y + 4, "end", NULL, b);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"black\"/>\n", x0, y1,
            x1 - x0, y0 - y1);
    text(f, (x0 + x1) / 2, y0 + 40, "middle", NULL, c->x_label);
    char rot[64];
    snprintf(rot, sizeof rot, "transform=\"rotate(-90 %.1f %.1f)\"", ox + 16, (y0 + y1) / 2);
    text(f, ox + 16, (y0 + y1) / 2, "middle", rot, c->y_label);
    int n_points = 0;
    for (int s = 0; s < c->n_series; s++) n_points += c->series[s].n;
    if (n_points == 0) text(f, (x0 + x1) / 2, (y0 + y1) / 2, "middle", "fill=\"#888\"", "no data");
    int *order = malloc(sizeof *order * (size_t)(n_points + 1));
    if (!order) return -1;
    /* the references last, on top of lines that meet them */
    for (int t = 0; t < 2 * c->n_series; t++) {
        const int s = t % c->n_series;
        const struct svg_series *sr = &c->series[s];
        if (sr->reference != (t >= c->n_series)) continue;
        const char *col, *dash;
        series_style(sr, s, &col, &dash);
        if (is_level(sr)) {
            if (usable(sr->y[0], c->log_y)) {
                const double y = px(&ay, sr->y[0], y0, y1);
                fprintf(f,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n",
                        x0, y, x1, y, col, dash);
            }
            continue;
        }
        /* joined in x order, whatever order the points came in */
        int n = 0;
        for (int i = 0; i < sr->n; i++) {
            if (!usable(sr->x[i], c->log_x) || !usable(sr->y[i], c->log_y)) continue;
            int j = n++;
            for (; j > 0 && sr->x[order[j - 1]] > sr->x[i]; j--) order[j] = order[j - 1];
            order[j] = i;
        }
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col, dash);
        for (int k = 0; k < n; k++)
            fprintf(f, "%.1f,%.1f ", px(&ax, sr->x[order[k]], x0, x1), px(&ay, sr->y[order[k]], y0, y1));
        fputs("\"/>\n", f);
        for (int k = 0; k < n; k++)
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(&ax, sr->x[order[k]], x0, x1),
                    px(&ay, sr->y[order[k]], y0, y1), col);
    }
    free(order);
    return 0;
}

int svg_line_charts(const char *path, const char *title, const char *subtitle, const struct svg_chart *panels, int n,
                    char *err, size_t err_len) {
    if (!panels || n <= 0) return fail_with(err, err_len, "%s: no chart", path);
    for (int p = 0; p < n; p++)
        if (panels[p].n_series < 0 || (panels[p].n_series > 0 && !panels[p].series))
            return fail_with(err, err_len, "%s: no series", path);
    const int w = n * PANEL_W + LEGEND_W, h = HEAD + PH + 60;
    FILE *f = svg_open(path, w, h, title, subtitle, err, err_len);
    if (!f) return -1;
    int rc = 0;
    for (int p = 0; !rc && p < n; p++) rc = line_panel(f, &panels[p], p * PANEL_W);
    for (int s = 0; s < panels[0].n_series; s++) {
        const char *col, *dash;
        series_style(&panels[0].series[s], s, &col, &dash);
        const double ly = HEAD + 10 + 20 * s, lx = n * PANEL_W;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", lx,
                ly, lx + 25, ly, col, dash);
        text(f, lx + 31, ly + 4, "start", NULL, panels[0].series[s].label);
    }
    if (rc) {
        fclose(f);
        return fail_with(err, err_len, "%s: out of memory", path);
    }
    return svg_close(f, path, err, err_len);
}

/* Red (0), yellow (0.5), green (1); grey for no data. */
static void heat_colour(double v, char *out, size_t cap) {
    if (!isfinite(v)) {
        snprintf(out, cap, "#e0e0e0");
        return;
    }
    static const double stops[3][3] = {{215, 48, 39}, {254, 224, 139}, {26, 152, 80}};
    const double t = fmin(fmax(v, 0), 1) * 2;
    const int k = t >= 1 ? 1 : 0;
    const double u = t - k;
    int c[3];
    for (int i = 0; i < 3; i++) c[i] = (int)lround(stops[k][i] + (stops[k + 1][i] - stops[k][i]) * u);
    snprintf(out, cap, "#%02x%02x%02x", c[0], c[1], c[2]);
}

#define HEAT_W 300 /* a heatmap's cells fit in HEAT_W x HEAT_H */
#define HEAT_H 180

int svg_heatmaps(const char *path, const char *title, const char *subtitle, const char *x_label, const char *y_label,
                 const char *v_label, const struct svg_heat *panels, int n, int per_row, char *err, size_t err_len) {
    if (!panels || n <= 0 || per_row <= 0) return fail_with(err, err_len, "%s: no heatmap", path);
    for (int p = 0; p < n; p++)
        if (panels[p].nx <= 0 || panels[p].ny <= 0 || !panels[p].xs || !panels[p].ys || !panels[p].v)
            return fail_with(err, err_len, "%s: an empty heatmap", path);
    const int cols = n < per_row ? n : per_row, rows = (n + per_row - 1) / per_row;
    /* cells of one size in every panel, the panels as large as the widest */
    double cw = 70, ch = 40;
    for (int p = 0; p < n; p++)
        cw = fmin(cw, HEAT_W / (double)panels[p].nx), ch = fmin(ch, HEAT_H / (double)panels[p].ny);
    int nx = 0, ny = 0;
    for (int p = 0; p < n; p++) nx = panels[p].nx > nx ? panels[p].nx : nx, ny = panels[p].ny > ny ? panels[p].ny : ny;
    const double left = 50, top = 30, pw = left + fmax(nx * cw, 190) + 30, ph = top + ny * ch + 50;
    /* tall enough for the colour scale too (its 11 steps and "no run" from y = 100) */
    const int w = (int)(cols * pw) + 150, h = (int)fmax(70 + rows * ph + 20, 100 + 13 * 14 + 20);
    FILE *f = svg_open(path, w, h, title, subtitle, err, err_len);
    if (!f) return -1;
    for (int p = 0; p < n; p++) {
        const struct svg_heat *hm = &panels[p];
        const double ox = (p % per_row) * pw + left, oy = 70 + (p / per_row) * ph + top;
        text(f, ox + cw * hm->nx / 2, oy - 10, "middle", "font-weight=\"bold\"", hm->title);
        for (int y = 0; y < hm->ny; y++)
            for (int x = 0; x < hm->nx; x++) {
                const double v = hm->v[y * hm->nx + x];
                char col[16], b[32];
                heat_colour(v, col, sizeof col);
                fprintf(f,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\"/>\n",
                        ox + x * cw, oy + y * ch, cw, ch, col);
                if (isfinite(v) && cw >= 26 && ch >= 14) {
                    snprintf(b, sizeof b, "%.2g", v);
                    text(f, ox + (x + 0.5) * cw, oy + (y + 0.5) * ch + 4, "middle", "font-size=\"10\"", b);
                }
            }
        for (int y = 0; y < hm->ny; y++) {
            char b[32];
            snprintf(b, sizeof b, "%g", hm->ys[y]);
            text(f, ox - 6, oy + (y + 0.5) * ch + 4, "end", NULL, b);
        }
        for (int x = 0; x < hm->nx; x++) {
            char b[32];
            snprintf(b, sizeof b, "%g", hm->xs[x]);
            text(f, ox + (x + 0.5) * cw, oy + hm->ny * ch + 16, "middle", NULL, b);
        }
        text(f, ox + cw * hm->nx / 2, oy + hm->ny * ch + 34, "middle", "fill=\"#444\"", x_label);
        char rot[64];
        snprintf(rot, sizeof rot, "transform=\"rotate(-90 %.1f %.1f)\"", ox - 36, oy + ch * hm->ny / 2);
        text(f, ox - 36, oy + ch * hm->ny / 2, "middle", rot, y_label);
    }
    /* the colour scale */
    const double sx = cols * pw + 20, sy = 100;
    text(f, sx, sy - 12, "start", "font-weight=\"bold\"", v_label);
    for (int k = 0; k <= 10; k++) {
        char col[16], b[16];
        heat_colour(1 - k / 10.0, col, sizeof col);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>\n", sx, sy + k * 14, col);
        if (k % 5 == 0) {
            snprintf(b, sizeof b, "%g", 1 - k / 10.0);
            text(f, sx + 24, sy + k * 14 + 11, "start", NULL, b);
        }
    }
    char grey[16];
    heat_colour(NAN, grey, sizeof grey);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"18\" height=\"14\" fill=\"%s\"/>\n", sx, sy + 11 * 14 + 8, grey);
    text(f, sx + 24, sy + 11 * 14 + 19, "start", NULL, "no run");
    return svg_close(f, path, err, err_len);
}

/* stb_image_write's sink: the PNG bytes, base64 encoded as they come. */
static const char B64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

struct b64 {
    FILE *f;
    unsigned char pend[3];
    int n_pend;
};

static void b64_put(struct b64 *b, const unsigned char *p, int n) {
    const char *A = B64;
    for (int i = 0; i < n; i++) {
        b->pend[b->n_pend++] = p[i];
        if (b->n_pend < 3) continue;
        const unsigned v = (unsigned)b->pend[0] << 16 | (unsigned)b->pend[1] << 8 | b->pend[2];
        fputc(A[v >> 18], b->f), fputc(A[(v >> 12) & 63], b->f), fputc(A[(v >> 6) & 63], b->f), fputc(A[v & 63], b->f);
        b->n_pend = 0;
    }
}

static void b64_end(struct b64 *b) {
    const char *A = B64;
    if (!b->n_pend) return;
    const unsigned v = (unsigned)b->pend[0] << 16 | (b->n_pend > 1 ? (unsigned)b->pend[1] << 8 : 0);
    fputc(A[v >> 18], b->f), fputc(A[(v >> 12) & 63], b->f);
    fputc(b->n_pend > 1 ? A[(v >> 6) & 63] : '=', b->f), fputc('=', b->f);
}

static void png_sink(void *ctx, void *data, int size) { b64_put(ctx, data, size); }

/* Grid coordinates every few cells (about 6 labels along a side). */
static int label_step(int n) { return n <= 8 ? 1 : (n + 5) / 6; }

#define MAP_MAX 200 /* a map's longer side, in pixels */

int svg_kept_maps(const char *path, const char *title, const char *subtitle, const char *row_name,
                  const char *col_name, int n_rows, int n_cols, const struct svg_grid *g, char *err, size_t err_len) {
    if (n_rows <= 0 || n_cols <= 0 || !g) return fail_with(err, err_len, "%s: no map", path);
    double cell = 24;
    for (int i = 0; i < n_rows * n_cols; i++) {
        if (g[i].rows <= 0 || g[i].cols <= 0 || g[i].rows > 4096 || g[i].cols > 4096 || !g[i].state)
            return fail_with(err, err_len, "%s: no grid (%d x %d)", path, g[i].rows, g[i].cols);
        if (g[i].rgb && (g[i].w <= 0 || g[i].h <= 0))
            return fail_with(err, err_len, "%s: image of %d x %d", path, g[i].w, g[i].h);
        cell = fmin(cell, MAP_MAX / (double)(g[i].rows > g[i].cols ? g[i].rows : g[i].cols));
    }
    /* columns as wide as their widest map, rows as tall as their tallest */
    double *cx = calloc((size_t)n_cols + 1, sizeof *cx), *ry = calloc((size_t)n_rows + 1, sizeof *ry);
    if (!cx || !ry) {
        free(cx), free(ry);
        return fail_with(err, err_len, "%s: out of memory", path);
    }
    const double left = 110, top = 100, gap = 18;
    cx[0] = left, ry[0] = top;
    for (int c = 0; c < n_cols; c++) {
        int wmax = 0;
        for (int r = 0; r < n_rows; r++) wmax = g[r * n_cols + c].cols > wmax ? g[r * n_cols + c].cols : wmax;
        cx[c + 1] = cx[c] + wmax * cell + gap;
    }
    for (int r = 0; r < n_rows; r++) {
        int hmax = 0;
        for (int c = 0; c < n_cols; c++) hmax = g[r * n_cols + c].rows > hmax ? g[r * n_cols + c].rows : hmax;
        ry[r + 1] = ry[r] + hmax * cell + gap;
    }
    static const char *const fill[3] = {"#bbbbbb", "#009E73", "#E69F00"};
    static const char *const name[3] = {"evicted", "kept", "merged"};
    /* wide enough for the legend, and for the titles at about 9 and 7 px a character */
    const double text_w = fmax(9.0 * (double)strlen(title), subtitle ? 7.0 * (double)strlen(subtitle) : 0);
    const int width = (int)fmax(cx[n_cols] + 170, 30 + text_w), height = (int)ry[n_rows] + 20;
    FILE *f = svg_open(path, width, height, title, subtitle, err, err_len);
    if (!f) {
        free(cx), free(ry);
        return -1;
    }
    long count[3] = {0, 0, 0};
    for (int r = 0; r < n_rows; r++) {
        char b[96];
        snprintf(b, sizeof b, "%s %d", row_name, r);
        text(f, 10, ry[r] + 14, "start", "font-weight=\"bold\"", b);
    }
    for (int c = 0; c < n_cols; c++) {
        char b[96];
        snprintf(b, sizeof b, "%s %d", col_name, c);
        text(f, cx[c], top - 34, "start", "font-weight=\"bold\"", b);
    }
    for (int r = 0; r < n_rows; r++)
        for (int c = 0; c < n_cols; c++) {
            const struct svg_grid *m = &g[r * n_cols + c];
            const double ox = cx[c], oy = ry[r], gw = cell * m->cols, gh = cell * m->rows;
            if (m->rgb) {
                fprintf(f, "<image x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" preserveAspectRatio=\"none\" "
                           "href=\"data:image/png;base64,", ox, oy, gw, gh);
                struct b64 b = {.f = f};
                stbi_write_png_to_func(png_sink, &b, m->w, m->h, 3, m->rgb, m->w * 3);
                b64_end(&b);
                fputs("\"/>\n", f);
            }
            const char *opacity = m->rgb ? " fill-opacity=\"0.75\"" : "";
            for (int y = 0; y < m->rows; y++)
                for (int x = 0; x < m->cols; x++) {
                    const int st = m->state[y * m->cols + x] < 3 ? m->state[y * m->cols + x] : 0;
                    count[st]++;
                    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.2f\" height=\"%.2f\" fill=\"%s\"%s/>\n",
                            ox + x * cell, oy + y * cell, cell, cell, fill[st], opacity);
                }
            /* grid coordinates: rows left of the first column, columns above the first row */
            for (int y = 0; c == 0 && y < m->rows; y += label_step(m->rows)) {
                char b[16];
                snprintf(b, sizeof b, "%d", y);
                text(f, ox - 4, oy + (y + 0.5) * cell + 4, "end", "font-size=\"9\" fill=\"#666\"", b);
            }
            for (int x = 0; r == 0 && x < m->cols; x += label_step(m->cols)) {
                char b[16];
                snprintf(b, sizeof b, "%d", x);
                text(f, ox + (x + 0.5) * cell, oy - 5, "middle", "font-size=\"9\" fill=\"#666\"", b);
            }
        }
    text(f, left - 24, top - 16, "end", "font-size=\"9\" fill=\"#666\"", "grid row \\ col");
    for (int s = 0; s < 3; s++) {
        const double y = top + 10 + 24 * s;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", cx[n_cols] + 10, y - 11,
                fill[s]);
        char label[64];
        snprintf(label, sizeof label, "%s: %ld", name[s], count[s]);
        text(f, cx[n_cols] + 30, y, "start", NULL, label);
    }
    free(cx), free(ry);
    return svg_close(f, path, err, err_len);
}
