/* Image decoding through stb_image, with the size checked before any pixel
 * is decoded, and LLaVA-1.5's preprocessing. The resize reproduces Pillow's
 * Image.resize(BICUBIC) — separable convolution, support widened by the
 * scale when shrinking, cubic a = -0.5, 22-bit fixed-point coefficients,
 * horizontal pass first into an 8-bit image — because that is what LLaVA's
 * image processor runs, and the vision tower was trained on its output. */
#include "io/image.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <stb/stb_image.h>

#define IMAGE_MAX_FILE (1024u * 1024u * 1024u) /* bytes read from one image file */
#define IMAGE_MAX_SIDE 65535

void kvf_image_free(struct kvf_image *img) {
    if (!img) return;
    free(img->rgb);
    free(img);
}

int kvf_image_width(const struct kvf_image *img) { return img->w; }
int kvf_image_height(const struct kvf_image *img) { return img->h; }
const uint8_t *kvf_image_rgb(const struct kvf_image *img) { return img->rgb; }

static enum kvf_status image_alloc(int w, int h, struct kvf_image **out) {
    struct kvf_image *img = malloc(sizeof *img);
    uint8_t *rgb = malloc((size_t)w * (size_t)h * 3);
    if (!img || !rgb) {
        free(img);
        free(rgb);
        return err_set(KVF_ERR_NOMEM, "out of memory for a %dx%d image", w, h);
    }
    img->rgb = rgb;
    img->w = w;
    img->h = h;
    *out = img;
    return KVF_OK;
}

enum kvf_status kvf_image_from_rgb(int w, int h, const uint8_t *rgb, struct kvf_image **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!rgb || w <= 0 || h <= 0 || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "image of %dx%d pixels (sides 1..%d)", w, h, IMAGE_MAX_SIDE);
    enum kvf_status st = image_alloc(w, h, out);
    if (st == KVF_OK) memcpy((*out)->rgb, rgb, (size_t)w * h * 3);
    return st;
}

static enum kvf_status decode(const char *label, const void *data, size_t size, int64_t max_pixels,
                              struct kvf_image **out) {
    if (max_pixels <= 0) max_pixels = KVF_IMAGE_MAX_PIXELS_DEFAULT;
    if (size == 0) return err_set(KVF_ERR_FORMAT, "%s: empty file", label);
    if (size > INT_MAX) return err_set(KVF_ERR_FORMAT, "%s: %zu bytes is too large", label, size);
    int w, h, comp;
    /* The header alone: a hostile size is refused before any allocation. */
    if (!stbi_info_from_memory(data, (int)size, &w, &h, &comp))
        return err_set(KVF_ERR_FORMAT, "%s: not a readable image (%s); PNG, JPEG, BMP, PPM/PGM, TGA, GIF are read",
                       label, stbi_failure_reason());
    if (w <= 0 || h <= 0) return err_set(KVF_ERR_FORMAT, "%s: image of %dx%d pixels", label, w, h);
    if ((int64_t)w * h > max_pixels || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "%s: %dx%d pixels is over the limit of %lld pixels (sides <= %d)", label,
                       w, h, (long long)max_pixels, IMAGE_MAX_SIDE);
    int dw, dh;
    uint8_t *px = stbi_load_from_memory(data, (int)size, &dw, &dh, &comp, 3);
    if (!px) return err_set(KVF_ERR_FORMAT, "%s: cannot decode (%s)", label, stbi_failure_reason());
    enum kvf_status st = KVF_OK;
    if (dw != w || dh != h) st = err_set(KVF_ERR_FORMAT, "%s: decoded size differs from the header", label);
    if (st == KVF_OK) st = image_alloc(w, h, out);
    if (st == KVF_OK) memcpy((*out)->rgb, px, (size_t)w * h * 3);
    stbi_image_free(px);
    return st;
}

enum kvf_status kvf_image_load_memory(const void *data, size_t size, int64_t max_pixels, struct kvf_image **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!data && size) return err_set(KVF_ERR_INVALID_ARG, "image: NULL data");
    return decode("image", data, size, max_pixels, out);
}

enum kvf_status kvf_image_load(const char *path, int64_t max_pixels, struct kvf_image **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "no output");
    *out = NULL;
    if (!path) return err_set(KVF_ERR_INVALID_ARG, "image: NULL path");
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(KVF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return err_set(KVF_ERR_IO, "%s: not a regular file", path);
    }
    if ((uint64_t)sb.st_size > IMAGE_MAX_FILE) {
        fclose(f);
        return err_set(KVF_ERR_FORMAT, "%s: %lld bytes is too large for an image file", path, (long long)sb.st_size);
    }
    const size_t n = (size_t)sb.st_size;
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        fclose(f);
        return err_set(KVF_ERR_NOMEM, "%s: out of memory", path);
    }
    const size_t got = fread(buf, 1, n, f);
    const bool bad = ferror(f) != 0;
    fclose(f);
    enum kvf_status st = bad || got != n ? err_set(KVF_ERR_IO, "%s: read failed", path)
                                         : decode(path, buf, n, max_pixels, out);
    free(buf);
    return st;
}

/* ------------------------------------------------------ preprocessing -- */

#define PRECISION_BITS (32 - 8 - 2) /* Pillow's fixed point for 8-bit images */

static double bicubic(double x) {
    const double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* Per output sample: the first input sample, how many are read, and their
 * fixed-point weights (ksize per output). Pillow's precompute_coeffs. */
struct resample_plan {
    int ksize;
    int *bounds; /* [out][2]: xmin, count */
    int32_t *k;  /* [out][ksize] */
};

static void plan_free(struct resample_plan *p) {
    free(p->bounds);
    free(p->k);
}

static enum kvf_status plan_make(int in_size, int out_size, struct resample_plan *p) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * filterscale;
    p->ksize = (int)ceil(support) * 2 + 1;
    p->bounds = malloc(sizeof(int) * 2 * (size_t)out_size);
    p->k = malloc(sizeof(int32_t) * (size_t)p->ksize * out_size);
    double *w = malloc(sizeof(double) * (size_t)p->ksize);
    if (!p->bounds || !p->k || !w) {
        free(w);
        plan_free(p);
        return err_set(KVF_ERR_NOMEM, "out of memory for resampling");
    }
    for (int xx = 0; xx < out_size; xx++) {
        const double center = (xx + 0.5) * scale, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        double ww = 0.0;
        for (int x = 0; x < xmax; x++) {
            w[x] = bicubic((x + xmin - center + 0.5) * ss);
            ww += w[x];
        }
        int32_t *k = p->k + (size_t)xx * p->ksize;
        for (int x = 0; x < p->ksize; x++) {
            const double v = x < xmax && ww != 0.0 ? w[x] / ww : 0.0;
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        p->bounds[2 * xx] = xmin;
        p->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return KVF_OK;
}

static uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass over RGB rows: `stride` steps between taps (3: along a row,
 * 3*w: down a column); n_lines lines of `out_len` outputs each. */
static void resample_pass(const uint8_t *in, uint8_t *out, int n_lines, size_t in_line, size_t out_line,
                          size_t in_tap, size_t out_step, int out_len, const struct resample_plan *p) {
    for (int ln = 0; ln < n_lines; ln++)
        for (int o = 0; o < out_len; o++) {
            const int xmin = p->bounds[2 * o], cnt = p->bounds[2 * o + 1];
            const int32_t *k = p->k + (size_t)o * p->ksize;
            int32_t s[3] = {1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1), 1 << (PRECISION_BITS - 1)};
            for (int x = 0; x < cnt; x++) {
                const uint8_t *px = in + (size_t)ln * in_line + (size_t)(xmin + x) * in_tap;
                for (int c = 0; c < 3; c++) s[c] += px[c] * k[x];
            }
            uint8_t *q = out + (size_t)ln * out_line + (size_t)o * out_step;
            for (int c = 0; c < 3; c++) q[c] = clip8(s[c]);
        }
}

/* Pillow's resize of an RGB image to size x size: horizontal, then vertical. */
static enum kvf_status resize_bicubic(const uint8_t *in, int w, int h, int size, uint8_t *out) {
    if (w == size && h == size) {
        memcpy(out, in, (size_t)size * size * 3);
        return KVF_OK;
    }
    struct resample_plan ph = {0}, pv = {0};
    uint8_t *tmp = malloc((size_t)size * h * 3);
    enum kvf_status st = tmp ? plan_make(w, size, &ph) : err_set(KVF_ERR_NOMEM, "out of memory for resampling");
    if (st == KVF_OK && (st = plan_make(h, size, &pv)) != KVF_OK) plan_free(&ph);
    if (st != KVF_OK) {
        free(tmp);
        return st;
    }
    const uint8_t *src = in;
    int cur_w = w;
    if (w != size) {
        resample_pass(in, tmp, h, (size_t)w * 3, (size_t)size * 3, 3, 3, size, &ph);
        src = tmp;
        cur_w = size;
    }
    if (h != size)
        /* Columns: a "line" is one column, taps go down rows. */
        resample_pass(src, out, cur_w, 3, 3, (size_t)cur_w * 3, (size_t)cur_w * 3, size, &pv);
    else
        memcpy(out, src, (size_t)size * size * 3);
    plan_free(&ph);
    plan_free(&pv);
    free(tmp);
    return KVF_OK;
}

enum kvf_status image_preprocess_llava(const struct kvf_image *img, int size, const float mean[3], const float std[3],
                                       float *out) {
    const int w = img->w, h = img->h, side = w > h ? w : h;
    /* expand2square: the background is tuple(int(x * 255) for x in mean). */
    uint8_t bg[3];
    for (int c = 0; c < 3; c++) {
        const float v = mean[c] * 255.0f;
        bg[c] = (uint8_t)(v <= 0.0f ? 0 : v >= 255.0f ? 255 : (int)v);
    }
    const int ox = (side - w) / 2, oy = (side - h) / 2;
    uint8_t *sq = malloc((size_t)side * side * 3), *rs = malloc((size_t)size * size * 3);
    if (!sq || !rs) {
        free(sq);
        free(rs);
        return err_set(KVF_ERR_NOMEM, "out of memory preprocessing a %dx%d image", w, h);
    }
    for (size_t i = 0; i < (size_t)side * side; i++) memcpy(sq + 3 * i, bg, 3);
    for (int y = 0; y < h; y++)
        memcpy(sq + ((size_t)(y + oy) * side + ox) * 3, img->rgb + (size_t)y * w * 3, (size_t)w * 3);
    /* CLIPImageProcessor's shortest-edge resize and centre crop are the
     * identity after this square resize. */
    enum kvf_status st = resize_bicubic(sq, side, side, size, rs);
    if (st == KVF_OK)
        for (int c = 0; c < 3; c++)
            for (size_t i = 0; i < (size_t)size * size; i++)
                out[(size_t)c * size * size + i] = (rs[3 * i + c] * (1.0f / 255.0f) - mean[c]) / std[c];
    free(sq);
    free(rs);
    return st;
}
