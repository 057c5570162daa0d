/* Plain SVG pictures for kvfold eval: line charts with axes and a legend,
 * heatmaps, and kept maps of images' grids, each a row or grid of panels
 * under one title. Failures return -1 with a message in err (err_len
 * bytes). */
#ifndef KVF_SVG_H
#define KVF_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* n points, drawn joined in x order; a NaN y (or a value <= 0 on a log
 * axis) is skipped. A reference series (the full cache) is drawn black and
 * dashed, and when it has one point as a horizontal line across the plot. */
struct svg_series {
    const char *label;
    int n;
    const double *x, *y;
    bool reference;
};

/* One panel of line charts; panels of one picture list the same series in
 * the same order (the legend is the first panel's). */
struct svg_chart {
    const char *title, *x_label, *y_label;
    bool log_x, log_y;
    const struct svg_series *series;
    int n_series;
    bool unit_y; /* the y axis spans [0, 1] at least (scores) */
};

/* n panels side by side under title and subtitle (optional: the model, the
 * data). */
int svg_line_charts(const char *path, const char *title, const char *subtitle, const struct svg_chart *panels, int n,
                    char *err, size_t err_len);

/* One heatmap panel: v[y * nx + x] in [0, 1] (NaN: no data) over the
 * categories xs[nx] (columns) and ys[ny] (rows, the first on top). */
struct svg_heat {
    const char *title;
    int nx, ny;
    const double *xs, *ys, *v;
};

/* Panels in rows of per_row, sharing the axis names and a colour scale
 * from 0 (red) to 1 (green) named v_label. */
int svg_heatmaps(const char *path, const char *title, const char *subtitle, const char *x_label, const char *y_label,
                 const char *v_label, const struct svg_heat *panels, int n, int per_row, char *err, size_t err_len);

enum svg_cell { SVG_EVICTED = 0, SVG_KEPT = 1, SVG_MERGED = 2 };

/* One kept map: rows x cols cells, state[r * cols + c] an enum svg_cell;
 * rgb (optional, [h][w][3]) is drawn beneath, stretched to the grid, as an
 * embedded PNG. */
struct svg_grid {
    int rows, cols;
    const unsigned char *state;
    const uint8_t *rgb;
    int w, h;
};

/* n_rows x n_cols kept maps, g[r * n_cols + c], labelled "ROW_NAME r" on
 * the left and "COL_NAME c" on top, grid coordinates along the first
 * column and row, and the counts of each state over all of them. */
int svg_kept_maps(const char *path, const char *title, const char *subtitle, const char *row_name,
                  const char *col_name, int n_rows, int n_cols, const struct svg_grid *g, char *err, size_t err_len);

#endif
