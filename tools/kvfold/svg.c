/* SVG by hand: a chart is a plot area with ticks on two axes, one polyline
 * and markers per series, and a legend; a kept map is a grid of cells. */
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <stb/stb_image_write.h>

#define W 760
#define H 460
#define LEFT 80
#define RIGHT 200 /* the legend sits right of the plot */
#define TOP 50
#define BOTTOM 70

/* Colour-blind-safe (Okabe-Ito), then dashes, then dots once they run out. */
static const char *const COLOURS[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"};
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
    for (double v = a->lo; v <= a->hi + step / 2 && a->n_ticks < 32; v += step) a->ticks[a->n_ticks++] = fabs(v) < step / 1e6 ? 0 : v;
}

static void axis_fit(struct axis *a, const struct svg_chart *c, bool x) {
    a->lo = INFINITY, a->hi = -INFINITY;
    for (int s = 0; s < c->n_series; s++)
        for (int i = 0; i < c->series[s].n; i++) {
            const double vx = c->series[s].x[i], vy = c->series[s].y[i];
            if (!usable(vx, c->log_x) || !usable(vy, c->log_y)) continue;
            const double v = unit(x ? vx : vy, a->log);
            a->lo = fmin(a->lo, v), a->hi = fmax(a->hi, v);
        }
    if (a->lo > a->hi) a->lo = 0, a->hi = 1; /* no data */
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

int svg_line_chart(const char *path, const struct svg_chart *c, char *err, size_t err_len) {
    if (!c || c->n_series < 0 || (c->n_series > 0 && !c->series)) return fail_with(err, err_len, "%s: no chart", path);
    FILE *f = fopen(path, "w");
    if (!f) return fail_with(err, err_len, "cannot write %s: %s", path, strerror(errno));
    struct axis ax = {.log = c->log_x}, ay = {.log = c->log_y};
    axis_fit(&ax, c, true);
    axis_fit(&ay, c, false);
    const double x0 = LEFT, x1 = W - RIGHT, y0 = H - BOTTOM, y1 = TOP;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            W, H, W, H, W, H);
    text(f, W / 2.0, 28, "middle", "font-size=\"15\" font-weight=\"bold\"", c->title);
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
    text(f, (x0 + x1) / 2, H - 25, "middle", NULL, c->x_label);
    char rot[64];
    snprintf(rot, sizeof rot, "transform=\"rotate(-90 20 %.1f)\"", (y0 + y1) / 2);
    text(f, 20, (y0 + y1) / 2, "middle", rot, c->y_label);
    if (c->n_series == 0) text(f, (x0 + x1) / 2, (y0 + y1) / 2, "middle", "fill=\"#888\"", "no data");
    for (int s = 0; s < c->n_series; s++) {
        const struct svg_series *sr = &c->series[s];
        const char *col = COLOURS[s % N_COLOURS];
        static const char *const dashes[] = {"", " stroke-dasharray=\"6 3\"", " stroke-dasharray=\"2 3\""};
        const char *dash = dashes[(s / N_COLOURS) % 3];
        fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\"%s points=\"", col, dash);
        for (int i = 0; i < sr->n; i++)
            if (usable(sr->x[i], c->log_x) && usable(sr->y[i], c->log_y))
                fprintf(f, "%.1f,%.1f ", px(&ax, sr->x[i], x0, x1), px(&ay, sr->y[i], y0, y1));
        fputs("\"/>\n", f);
        for (int i = 0; i < sr->n; i++)
            if (usable(sr->x[i], c->log_x) && usable(sr->y[i], c->log_y))
                fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", px(&ax, sr->x[i], x0, x1),
                        px(&ay, sr->y[i], y0, y1), col);
        const double ly = TOP + 10 + 20 * s;
        fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"2\"%s/>\n", W - RIGHT + 15,
                ly, W - RIGHT + 40, ly, col, dash);
        text(f, W - RIGHT + 46, ly + 4, "start", NULL, sr->label);
    }
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : fail_with(err, err_len, "cannot write %s", path);
}

/* stb_image_write's sink: the PNG bytes, base64 encoded as they come. */
struct b64 {
    FILE *f;
    unsigned char pend[3];
    int n_pend;
};

static void b64_put(struct b64 *b, const unsigned char *p, int n) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < n; i++) {
        b->pend[b->n_pend++] = p[i];
        if (b->n_pend < 3) continue;
        const unsigned v = (unsigned)b->pend[0] << 16 | (unsigned)b->pend[1] << 8 | b->pend[2];
        fputc(A[v >> 18], b->f), fputc(A[(v >> 12) & 63], b->f), fputc(A[(v >> 6) & 63], b->f), fputc(A[v & 63], b->f);
        b->n_pend = 0;
    }
}

static void b64_end(struct b64 *b) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    if (!b->n_pend) return;
    const unsigned v = (unsigned)b->pend[0] << 16 | (b->n_pend > 1 ? (unsigned)b->pend[1] << 8 : 0);
    fputc(A[v >> 18], b->f), fputc(A[(v >> 12) & 63], b->f);
    fputc(b->n_pend > 1 ? A[(v >> 6) & 63] : '=', b->f), fputc('=', b->f);
}

static void png_sink(void *ctx, void *data, int size) { b64_put(ctx, data, size); }

int svg_kept_map(const char *path, const char *title, int rows, int cols, const unsigned char *state,
                 const uint8_t *rgb, int w, int h, char *err, size_t err_len) {
    if (rows <= 0 || cols <= 0 || rows > 4096 || cols > 4096 || !state)
        return fail_with(err, err_len, "%s: no grid (%d x %d)", path, rows, cols);
    if (rgb && (w <= 0 || h <= 0)) return fail_with(err, err_len, "%s: image of %d x %d", path, w, h);
    FILE *f = fopen(path, "w");
    if (!f) return fail_with(err, err_len, "cannot write %s: %s", path, strerror(errno));
    static const char *const fill[3] = {"#bbbbbb", "#009E73", "#E69F00"};
    static const char *const name[3] = {"evicted", "kept", "merged"};
    int count[3] = {0, 0, 0};
    for (int i = 0; i < rows * cols; i++) count[state[i] < 3 ? state[i] : 0]++;
    const double cell = fmin(480.0 / cols, 480.0 / rows), gw = cell * cols, gh = cell * rows;
    const int width = (int)gw + 200, height = (int)gh + 70;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
               "font-family=\"sans-serif\" font-size=\"12\">\n<rect width=\"%d\" height=\"%d\" fill=\"white\"/>\n",
            width, height, width, height, width, height);
    text(f, 10, 24, "start", "font-size=\"14\" font-weight=\"bold\"", title);
    if (rgb) {
        fprintf(f, "<image x=\"10\" y=\"40\" width=\"%.1f\" height=\"%.1f\" preserveAspectRatio=\"none\" href=\"data:image/png;base64,",
                gw, gh);
        struct b64 b = {.f = f};
        stbi_write_png_to_func(png_sink, &b, w, h, 3, rgb, w * 3);
        b64_end(&b);
        fputs("\"/>\n", f);
    }
    const char *opacity = rgb ? " fill-opacity=\"0.55\"" : "";
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < cols; c++) {
            const int s = state[r * cols + c] < 3 ? state[r * cols + c] : 0;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"%s stroke=\"white\" "
                       "stroke-width=\"0.5\"/>\n", 10 + c * cell, 40 + r * cell, cell, cell, fill[s], opacity);
        }
    for (int s = 0; s < 3; s++) {
        const double y = 50 + 24 * s;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"14\" fill=\"%s\"/>\n", gw + 30, y - 11, fill[s]);
        char label[64];
        snprintf(label, sizeof label, "%s: %d", name[s], count[s]);
        text(f, gw + 50, y, "start", NULL, label);
    }
    fputs("</svg>\n", f);
    return fclose(f) == 0 ? 0 : fail_with(err, err_len, "cannot write %s", path);
}
