/* Image decoding through stb_image, with the size checked before any pixel
 * is decoded, and LLaVA-1.5's preprocessing. The resize reproduces Pillow's
 * Image.resize(BICUBIC) — separable convolution, support widened by the
 * scale when shrinking, cubic a = -0.5, 22-bit fixed-point coefficients,
 * horizontal pass first into an 8-bit image — because that is what LLaVA's
 * image processor runs, and the vision tower was trained on its output. */
#include "io/image.h"

#include "core/sys.h"

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

int kvf_image_width(const struct kvf_image *img) { return img ? img->w : 0; }
int kvf_image_height(const struct kvf_image *img) { return img ? img->h : 0; }
const uint8_t *kvf_image_rgb(const struct kvf_image *img) { return img ? img->rgb : NULL; }

/* w, h are already within 1..IMAGE_MAX_SIDE. */
static enum kvf_status image_alloc(int w, int h, struct kvf_image **out) {
    size_t n;
    if (!size_mul((size_t)w, (size_t)h, &n) || !size_mul(n, 3, &n))
        return err_set(KVF_ERR_INVALID_ARG, "image of %dx%d pixels is too large", w, h);
    struct kvf_image *img = malloc(sizeof *img);
    uint8_t *rgb = malloc(n);
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
        return err_set(KVF_ERR_INVALID_ARG, "image of %dx%d pixels (sides 1..%d, RGB data required)", w, h,
                       IMAGE_MAX_SIDE);
    enum kvf_status st = image_alloc(w, h, out);
    if (st == KVF_OK) memcpy((*out)->rgb, rgb, (size_t)w * h * 3);
    return st;
}

/* stb_image 2.27 copies a binary PNM's pixels without checking that the
 * file holds them all: the header is parsed here to count them (the
 * grammar stb reads: magic, then width, height and maxval each after
 * whitespace and '#' comments, then one whitespace byte). */
static bool pnm_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static bool pnm_truncated(const uint8_t *p, size_t n, int w, int h) {
    if (n < 2 || p[0] != 'P' || (p[1] != '5' && p[1] != '6')) return false;
    size_t i = 2;
    uint32_t v[3];
    for (int f = 0; f < 3; f++) {
        for (;;) {
            while (i < n && pnm_space(p[i])) i++;
            if (i >= n || p[i] != '#') break;
            while (i < n && p[i] != '\n' && p[i] != '\r') i++;
        }
        v[f] = 0;
        /* Saturated: only "over 255" matters, and only for maxval. */
        for (; i < n && p[i] >= '0' && p[i] <= '9'; i++) v[f] = v[f] > 1000000 ? v[f] : v[f] * 10 + (p[i] - '0');
    }
    i++; /* the whitespace byte after maxval */
    const uint64_t need = (uint64_t)w * h * (p[1] == '6' ? 3 : 1) * (v[2] > 255 ? 2 : 1);
    return i > n || n - i < need;
}

/* Pixels are decoded through callbacks rather than from memory because a
 * short read from memory leaves stb_image's buffer uninitialised (2.27's
 * TGA rows, for one), while this reader fills what is past the end with
 * zeros: a truncated file then decodes the same every time. */
struct mem_reader {
    const uint8_t *p;
    size_t n, pos;
};

static int mem_read(void *user, char *data, int size) {
    struct mem_reader *r = user;
    const size_t want = size > 0 ? (size_t)size : 0, left = r->n - r->pos, k = want < left ? want : left;
    memcpy(data, r->p + r->pos, k);
    memset(data + k, 0, want - k);
    r->pos += k;
    return (int)k;
}

static void mem_skip(void *user, int n) {
    struct mem_reader *r = user;
    const size_t back = n < 0 ? (size_t)(-(int64_t)n) : 0;
    if (n < 0) r->pos = back < r->pos ? r->pos - back : 0;
    else r->pos = (size_t)n < r->n - r->pos ? r->pos + (size_t)n : r->n;
}

static int mem_eof(void *user) {
    const struct mem_reader *r = user;
    return r->pos >= r->n;
}

static enum kvf_status decode(const char *label, const void *data, size_t size, int64_t max_pixels,
                              struct kvf_image **out) {
    if (max_pixels <= 0) max_pixels = KVF_IMAGE_MAX_PIXELS_DEFAULT;
    if (size == 0) return err_set(KVF_ERR_FORMAT, "%s: empty file", label);
    if (size > INT_MAX) return err_set(KVF_ERR_FORMAT, "%s: %zu bytes is too large for an image", label, size);
    int w, h, comp;
    /* The header alone: a hostile size is refused before any allocation. */
    if (!stbi_info_from_memory(data, (int)size, &w, &h, &comp))
        return err_set(KVF_ERR_FORMAT, "%s: not a readable image (%s); PNG, JPEG, BMP, PPM/PGM, TGA, GIF are read",
                       label, stbi_failure_reason());
    if (w <= 0 || h <= 0) return err_set(KVF_ERR_FORMAT, "%s: image of %dx%d pixels", label, w, h);
    if ((int64_t)w * h > max_pixels || w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "%s: %dx%d pixels is over the limit of %lld pixels (sides <= %d)", label,
                       w, h, (long long)max_pixels, IMAGE_MAX_SIDE);
    if (pnm_truncated(data, size, w, h))
        return err_set(KVF_ERR_FORMAT, "%s: PNM file truncated (%dx%d pixels, %zu bytes)", label, w, h, size);
    int dw, dh;
    struct mem_reader rd = {.p = data, .n = size};
    const stbi_io_callbacks io = {.read = mem_read, .skip = mem_skip, .eof = mem_eof};
    /* 3 channels asked for: grey is replicated, alpha dropped (as PIL's
     * convert("RGB") that LLaVA applies). */
    uint8_t *px = stbi_load_from_callbacks(&io, &rd, &dw, &dh, &comp, 3);
    if (!px) return err_set(KVF_ERR_FORMAT, "%s: cannot decode (%s)", label, stbi_failure_reason());
    enum kvf_status st = KVF_OK;
    if (dw != w || dh != h)
        st = err_set(KVF_ERR_FORMAT, "%s: decoded %dx%d pixels, the header said %dx%d", label, dw, dh, w, h);
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
    FILE *f = sys_fopen_read(path);
    if (!f) return err_set(KVF_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return err_set(KVF_ERR_IO, "%s: not a regular file", path);
    }
    if (sb.st_size < 0 || (uint64_t)sb.st_size > IMAGE_MAX_FILE) {
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
 * fixed-point weights (ksize per output), as Pillow's precompute_coeffs and
 * normalize_coeffs_8bpc make them. */
struct resample_plan {
    int ksize;
    int *bounds; /* [out][2]: first, count */
    int32_t *k;  /* [out][ksize] */
};

static void plan_free(struct resample_plan *p) {
    free(p->bounds);
    free(p->k);
    p->bounds = NULL;
    p->k = NULL;
}

static enum kvf_status plan_make(int in_size, int out_size, struct resample_plan *p) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = 2.0 * filterscale;
    p->ksize = (int)ceil(support) * 2 + 1; /* in_size <= 65535: no overflow */
    size_t nk, nb;
    if (!size_mul((size_t)p->ksize, (size_t)out_size, &nk) || !size_mul(nk, sizeof(int32_t), &nk) ||
        !size_mul((size_t)out_size, 2 * sizeof(int), &nb))
        return err_set(KVF_ERR_INVALID_ARG, "resampling %d to %d samples is too large", in_size, out_size);
    p->bounds = malloc(nb);
    p->k = malloc(nk);
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
            double v = 0.0;
            if (x < xmax) v = ww != 0.0 ? w[x] / ww : w[x];
            k[x] = (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        p->bounds[2 * xx] = xmin;
        p->bounds[2 * xx + 1] = xmax;
    }
    free(w);
    return KVF_OK;
}

/* The sums are those of Pillow's int accumulators; 64 bits only so that no
 * input can overflow them (Pillow's never do for this filter). */
static uint8_t clip8(int64_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The padded square of expand2square, never built whole (a 65535x1000
 * image would make a 12 GiB square): row y into row[side][3]. */
struct square {
    const struct kvf_image *img;
    int side, ox, oy;
    uint8_t bg[3];
};

static bool square_row_is_bg(const struct square *sq, int y) { return y < sq->oy || y >= sq->oy + sq->img->h; }

static void square_row(const struct square *sq, int y, uint8_t *row) {
    const int w = sq->img->w;
    for (int x = 0; x < sq->side; x++) memcpy(row + 3 * (size_t)x, sq->bg, 3);
    if (!square_row_is_bg(sq, y))
        memcpy(row + 3 * (size_t)sq->ox, sq->img->rgb + (size_t)(y - sq->oy) * w * 3, (size_t)w * 3);
}

static void resample_row(const uint8_t *in, const struct resample_plan *p, int out_len, uint8_t *out) {
    for (int o = 0; o < out_len; o++) {
        const int first = p->bounds[2 * o], cnt = p->bounds[2 * o + 1];
        const int32_t *k = p->k + (size_t)o * p->ksize;
        const uint8_t *px = in + 3 * (size_t)first;
        int64_t s0 = 1 << (PRECISION_BITS - 1), s1 = s0, s2 = s0;
        for (int x = 0; x < cnt; x++) {
            s0 += (int64_t)px[3 * x] * k[x];
            s1 += (int64_t)px[3 * x + 1] * k[x];
            s2 += (int64_t)px[3 * x + 2] * k[x];
        }
        out[3 * o] = clip8(s0);
        out[3 * o + 1] = clip8(s1);
        out[3 * o + 2] = clip8(s2);
    }
}

/* Pillow's resize of the side x side square to size x size, into
 * out[size][size][3]: horizontal pass into 8-bit rows, then vertical. */
static enum kvf_status square_resize(const struct square *sq, int size, uint8_t *out) {
    const int side = sq->side;
    size_t row_bytes, tmp_bytes, acc_n;
    if (!size_mul((size_t)side, 3, &row_bytes) || !size_mul((size_t)side, (size_t)size * 3, &tmp_bytes) ||
        !size_mul((size_t)size, 3, &acc_n))
        return err_set(KVF_ERR_INVALID_ARG, "resizing %dx%d to %dx%d is too large", side, side, size, size);
    struct resample_plan p = {0};
    enum kvf_status st = plan_make(side, size, &p);
    if (st != KVF_OK) return st;
    uint8_t *row = malloc(row_bytes), *tmp = malloc(tmp_bytes);
    int64_t *acc = malloc(acc_n * sizeof *acc);
    if (!row || !tmp || !acc) {
        st = err_set(KVF_ERR_NOMEM, "out of memory resizing a %dx%d image", side, side);
        goto done;
    }
    const size_t line = (size_t)size * 3;
    int bg_done = -1; /* a background row already resampled: all others equal it */
    for (int y = 0; y < side; y++) {
        uint8_t *t = tmp + (size_t)y * line;
        if (square_row_is_bg(sq, y) && bg_done >= 0) {
            memcpy(t, tmp + (size_t)bg_done * line, line);
            continue;
        }
        square_row(sq, y, row);
        resample_row(row, &p, size, t);
        if (square_row_is_bg(sq, y)) bg_done = y;
    }
    /* The vertical plan equals the horizontal one (a square). Integer sums
     * are exact, so accumulating tap by tap over a whole row gives Pillow's
     * per-pixel sums. */
    for (int yy = 0; yy < size; yy++) {
        const int first = p.bounds[2 * yy], cnt = p.bounds[2 * yy + 1];
        const int32_t *k = p.k + (size_t)yy * p.ksize;
        for (size_t i = 0; i < acc_n; i++) acc[i] = 1 << (PRECISION_BITS - 1);
        for (int y = 0; y < cnt; y++) {
            const uint8_t *t = tmp + (size_t)(first + y) * line;
            for (size_t i = 0; i < acc_n; i++) acc[i] += (int64_t)t[i] * k[y];
        }
        for (size_t i = 0; i < acc_n; i++) out[(size_t)yy * line + i] = clip8(acc[i]);
    }
done:
    free(row);
    free(tmp);
    free(acc);
    plan_free(&p);
    return st;
}

enum kvf_status image_preprocess_llava(const struct kvf_image *img, int size, const float mean[3], const float std[3],
                                       float *out) {
    if (!img || !img->rgb || !mean || !std || !out)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: NULL argument");
    if (img->w <= 0 || img->h <= 0 || img->w > IMAGE_MAX_SIDE || img->h > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: image of %dx%d pixels", img->w, img->h);
    if (size <= 0 || size > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: output size %d (1..%d)", size, IMAGE_MAX_SIDE);
    for (int c = 0; c < 3; c++)
        if (std[c] == 0.0f || !isfinite(std[c]) || !isfinite(mean[c]))
            return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: mean %g / std %g of channel %d", mean[c],
                           std[c], c);
    const int w = img->w, h = img->h;
    struct square sq = {.img = img, .side = w > h ? w : h};
    /* expand2square: the background is tuple(int(x * 255) for x in mean),
     * the image pasted at ((side - w) // 2, (side - h) // 2). */
    for (int c = 0; c < 3; c++) {
        const double v = (double)mean[c] * 255.0;
        sq.bg[c] = (uint8_t)(v <= 0.0 ? 0 : v >= 255.0 ? 255 : (int)v);
    }
    sq.ox = (sq.side - w) / 2;
    sq.oy = (sq.side - h) / 2;
    size_t n, bytes;
    if (!size_mul((size_t)size, (size_t)size, &n) || !size_mul(n, 3, &bytes))
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: output size %d is too large", size);
    uint8_t *rs = malloc(bytes);
    if (!rs) return err_set(KVF_ERR_NOMEM, "out of memory preprocessing a %dx%d image", w, h);
    enum kvf_status st = KVF_OK;
    if (sq.side == size) {
        /* Pillow's resize to the same size is a copy. */
        for (int y = 0; y < size; y++) square_row(&sq, y, rs + (size_t)y * size * 3);
    } else {
        st = square_resize(&sq, size, rs);
    }
    /* CLIPImageProcessor then resizes the shortest edge to `size` and crops
     * size x size at the centre: the identity on this square. Its rescale
     * multiplies by 1/255 in double and rounds to float, then normalises in
     * float; so do we. */
    if (st == KVF_OK)
        for (int c = 0; c < 3; c++)
            for (size_t i = 0; i < n; i++)
                out[(size_t)c * n + i] = ((float)(rs[3 * i + c] * (1.0 / 255.0)) - mean[c]) / std[c];
    free(rs);
    return st;
}
