/* Plain SVG pictures for kvfold eval: line charts with axes and a legend,
 * and kept maps of an image's grid. Failures return -1 with a message in
 * err (err_len bytes). */
#ifndef KVF_SVG_H
#define KVF_SVG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* n points in x order; a NaN y (or a value <= 0 on a log axis) is skipped. */
struct svg_series {
    const char *label;
    int n;
    const double *x, *y;
};

struct svg_chart {
    const char *title, *x_label, *y_label;
    bool log_x, log_y;
    const struct svg_series *series;
    int n_series;
};

int svg_line_chart(const char *path, const struct svg_chart *c, char *err, size_t err_len);

enum svg_cell { SVG_EVICTED = 0, SVG_KEPT = 1, SVG_MERGED = 2 };

/* rows x cols cells, state[r * cols + c] an enum svg_cell; rgb (optional,
 * [h][w][3]) is drawn beneath the grid, stretched to it, as an embedded PNG. */
int svg_kept_map(const char *path, const char *title, int rows, int cols, const unsigned char *state,
                 const uint8_t *rgb, int w, int h, char *err, size_t err_len);

#endif
