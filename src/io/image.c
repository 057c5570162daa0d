/* Image decoding and LLaVA-1.5's preprocessing.
 *
 * Each format is decoded by the library that production image stacks fuzz
 * continuously (libpng, libjpeg-turbo, giflib, libwebp), never by a
 * hand-written or single-header decoder: images come from anyone once the
 * server runs. What is written here is the policy around them: the size is
 * read from the header and checked against the caller's pixel limit before
 * any pixel buffer exists, every pixel buffer is sized from that checked
 * header, and the conversion to RGB follows Pillow's convert("RGB"), which
 * LLaVA's image processor runs. Memory per image, P = width x height <= the
 * limit: 3P for the result, plus 2P for 16-bit grey PNG, 8(w+32)(h+32) for
 * progressive or CMYK JPEG, 8P for lossless or alpha WebP, each plus O(width)
 * and libpng's 8 MB cap on ancillary chunks (docs/RELIABILITY.md).
 *
 * The resize reproduces Pillow's Image.resize(BICUBIC) — separable
 * convolution, support widened by the scale when shrinking, cubic a = -0.5,
 * 22-bit fixed-point coefficients, horizontal pass first into an 8-bit
 * image — because that is what LLaVA's image processor runs, and the vision
 * tower was trained on its output. */
#include "io/image.h"

#include "core/sys.h"

#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gif_lib.h>
#include <jpeglib.h> /* before jerror.h */
#include <jerror.h>
#include <png.h>
#include <webp/decode.h>

#define IMAGE_MAX_FILE ((size_t)256 << 20) /* bytes read from one image file */
#define IMAGE_MAX_SIDE 65535
/* A progressive JPEG may repeat scans without end, each a pass over every
 * block (libjpeg-turbo's advice for untrusted input: limit them). Real
 * encoders write about ten. */
#define JPEG_MAX_SCANS 500

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

/* The header's size against the limit: the only gate before allocation. */
static enum kvf_status size_check(const char *label, uint64_t w, uint64_t h, int64_t max_pixels) {
    if (w == 0 || h == 0)
        return err_set(KVF_ERR_FORMAT, "%s: image of %llux%llu pixels", label, (unsigned long long)w,
                       (unsigned long long)h);
    if (w > IMAGE_MAX_SIDE || h > IMAGE_MAX_SIDE || w * h > (uint64_t)max_pixels)
        return err_set(KVF_ERR_INVALID_ARG, "%s: %llux%llu pixels is over the limit of %lld pixels (sides <= %d)",
                       label, (unsigned long long)w, (unsigned long long)h, (long long)max_pixels, IMAGE_MAX_SIDE);
    return KVF_OK;
}

/* The bytes of one image being decoded, and why decoding stopped. */
struct src {
    const char *label;
    const uint8_t *p;
    size_t n, pos;
    char why[200]; /* the decoder's message */
};

static size_t src_take(struct src *s, void *out, size_t want) {
    const size_t k = want < s->n - s->pos ? want : s->n - s->pos;
    memcpy(out, s->p + s->pos, k);
    s->pos += k;
    return k;
}

/* ---------------------------------------------------------------- PNG -- */

static void png_on_error(png_structp png, png_const_charp msg) {
    struct src *s = png_get_error_ptr(png);
    snprintf(s->why, sizeof s->why, "%s", msg);
    png_longjmp(png, 1);
}

/* Warnings (a bad ancillary chunk CRC, an unknown sRGB profile) change
 * nothing kvfold reads, and a library does not print. */
static void png_on_warning(png_structp png, png_const_charp msg) {
    (void)png;
    (void)msg;
}

static void png_on_read(png_structp png, png_bytep out, size_t n) {
    if (src_take(png_get_io_ptr(png), out, n) != n) png_error(png, "file truncated");
}

/* Pillow's conversions: palette through the palette (transparency
 * ignored), grey replicated, alpha dropped, 16 bits by their high byte,
 * except 16-bit grey, which Pillow holds as I;16 and clips to 255. */
static enum kvf_status png_decode(struct src *s, int64_t max_pixels, struct kvf_image **out) {
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, s, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return err_set(KVF_ERR_NOMEM, "%s: out of memory", s->label);
    }
    /* Set before the longjmp and read after it. */
    struct kvf_image *volatile img = NULL;
    uint16_t *volatile grey = NULL;
    png_bytep *volatile rows = NULL;
    volatile enum kvf_status st = KVF_OK;
    if (setjmp(png_jmpbuf(png))) {
        st = err_set(KVF_ERR_FORMAT, "%s: not a readable PNG (%s)", s->label, s->why);
        goto done;
    }
    png_set_read_fn(png, s, png_on_read);
    png_read_info(png, info);
    png_uint_32 w, h;
    int depth, colour, interlace;
    png_get_IHDR(png, info, &w, &h, &depth, &colour, &interlace, NULL, NULL);
    if ((st = size_check(s->label, w, h, max_pixels)) != KVF_OK) goto done;
    const bool grey16 = colour == PNG_COLOR_TYPE_GRAY && depth == 16;
    if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    png_set_strip_alpha(png);
    if (!grey16) {
        png_set_strip_16(png);
        png_set_gray_to_rgb(png);
    } else {
        png_set_swap(png); /* host order: little-endian x86-64 */
    }
    (void)png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * (grey16 ? 2 : 3)) png_error(png, "unexpected row layout");
    struct kvf_image *made;
    if ((st = image_alloc((int)w, (int)h, &made)) != KVF_OK) goto done;
    img = made;
    rows = malloc(sizeof *rows * h);
    if (grey16) grey = malloc(sizeof *grey * (size_t)w * h);
    if (!rows || (grey16 && !grey)) {
        st = err_set(KVF_ERR_NOMEM, "%s: out of memory for %ux%u pixels", s->label, (unsigned)w, (unsigned)h);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = grey16 ? (png_bytep)(grey + (size_t)y * w) : img->rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    if (grey16)
        for (size_t i = 0; i < (size_t)w * h; i++) memset(img->rgb + 3 * i, grey[i] > 255 ? 255 : grey[i], 3);
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(grey);
    if (st == KVF_OK) *out = img;
    else kvf_image_free(img);
    return st;
}

/* --------------------------------------------------------------- JPEG -- */

struct jpeg_fail {
    struct jpeg_error_mgr mgr; /* first: libjpeg hands back its address */
    struct jpeg_progress_mgr progress;
    jmp_buf jb;
    struct src *s;
};

static void jpeg_on_error(j_common_ptr c) {
    struct jpeg_fail *f = (struct jpeg_fail *)c->err;
    char msg[JMSG_LENGTH_MAX];
    c->err->format_message(c, msg);
    snprintf(f->s->why, sizeof f->s->why, "%s", msg);
    longjmp(f->jb, 1);
}

/* A file that ends early is an error, as in Pillow (libjpeg would pad it
 * with grey); other warnings (extraneous bytes) are tolerated, as there. */
static void jpeg_on_message(j_common_ptr c, int level) {
    if (level < 0 && c->err->msg_code == JWRN_JPEG_EOF) c->err->error_exit(c);
}

static void jpeg_on_progress(j_common_ptr c) {
    const j_decompress_ptr d = (j_decompress_ptr)c;
    struct jpeg_fail *f = (struct jpeg_fail *)c->err;
    if (d->input_scan_number > JPEG_MAX_SCANS) {
        snprintf(f->s->why, sizeof f->s->why, "more than %d scans", JPEG_MAX_SCANS);
        longjmp(f->jb, 1);
    }
}

/* Pillow reads every CMYK JPEG as inverted (Adobe's convention) and turns
 * CMYK into RGB as 255 - k - c(255 - k)/255 with its rounding. */
static void cmyk_to_rgb(const uint8_t *in, int w, uint8_t *out) {
    for (int x = 0; x < w; x++) {
        const int nk = in[4 * x + 3];
        for (int c = 0; c < 3; c++) {
            const int t = (255 - in[4 * x + c]) * nk + 128;
            out[3 * x + c] = (uint8_t)(nk - (((t >> 8) + t) >> 8));
        }
    }
}

static enum kvf_status jpeg_decode(struct src *s, int64_t max_pixels, struct kvf_image **out) {
    struct jpeg_decompress_struct d;
    struct jpeg_fail f = {.s = s};
    d.err = jpeg_std_error(&f.mgr);
    f.mgr.error_exit = jpeg_on_error;
    f.mgr.emit_message = jpeg_on_message;
    f.progress.progress_monitor = jpeg_on_progress;
    struct kvf_image *volatile img = NULL;
    uint8_t *volatile cmyk = NULL;
    volatile enum kvf_status st = KVF_OK;
    volatile bool created = false;
    if (setjmp(f.jb)) {
        st = err_set(KVF_ERR_FORMAT, "%s: not a readable JPEG (%s)", s->label, s->why);
        goto done;
    }
    jpeg_create_decompress(&d);
    created = true;
    d.progress = &f.progress;
    jpeg_mem_src(&d, s->p, (unsigned long)s->n);
    jpeg_read_header(&d, TRUE);
    if ((st = size_check(s->label, d.image_width, d.image_height, max_pixels)) != KVF_OK) goto done;
    const int w = (int)d.image_width, h = (int)d.image_height;
    const bool is_cmyk = d.jpeg_color_space == JCS_CMYK || d.jpeg_color_space == JCS_YCCK;
    if (!is_cmyk && d.jpeg_color_space != JCS_GRAYSCALE && d.jpeg_color_space != JCS_YCbCr &&
        d.jpeg_color_space != JCS_RGB) {
        st = err_set(KVF_ERR_FORMAT, "%s: JPEG of %d components in no colour space kvfold reads "
                     "(grey, YCbCr, RGB, CMYK, YCCK)", s->label, d.num_components);
        goto done;
    }
    d.out_color_space = is_cmyk ? JCS_CMYK : JCS_RGB;
    /* A progressive file keeps every coefficient, 2 bytes per sample of at
     * most 4 components padded to whole blocks: more is hostile (libjpeg
     * has no backing store to fall back on, so it fails). */
    d.mem->max_memory_to_use = 8L * (w + 32) * (h + 32) + (16L << 20);
    jpeg_start_decompress(&d);
    struct kvf_image *made;
    if ((st = image_alloc(w, h, &made)) != KVF_OK) goto done;
    img = made;
    if (is_cmyk && !(cmyk = malloc((size_t)w * 4))) {
        st = err_set(KVF_ERR_NOMEM, "%s: out of memory", s->label);
        goto done;
    }
    while (d.output_scanline < d.output_height) {
        uint8_t *row = img->rgb + (size_t)d.output_scanline * w * 3;
        JSAMPROW line = is_cmyk ? cmyk : row;
        jpeg_read_scanlines(&d, &line, 1);
        if (is_cmyk) cmyk_to_rgb(cmyk, w, row);
    }
done:
    if (created) jpeg_destroy_decompress(&d);
    free(cmyk);
    if (st == KVF_OK) *out = img;
    else kvf_image_free(img);
    return st;
}

/* ---------------------------------------------------------------- GIF -- */

static int gif_on_read(GifFileType *g, GifByteType *out, int n) {
    return (int)src_take(g->UserData, out, n > 0 ? (size_t)n : 0);
}

static enum kvf_status gif_fail(struct src *s, int code) {
    const char *why = GifErrorString(code);
    return err_set(KVF_ERR_FORMAT, "%s: not a readable GIF (%s)", s->label, why ? why : "unknown error");
}

/* The first frame, as Pillow shows it: on a canvas of the logical screen
 * (grown to hold the frame), the area outside the frame in palette entry
 * 0, or in the transparent entry when there is one; indices through the
 * frame's palette (the global one when it has none; grey without either),
 * indices past its end black. */
static enum kvf_status gif_decode(struct src *s, int64_t max_pixels, struct kvf_image **out) {
    int code = 0;
    GifFileType *g = DGifOpen(s, gif_on_read, &code);
    if (!g) return gif_fail(s, code);
    enum kvf_status st = KVF_OK;
    int transparent = -1;
    GifRecordType type;
    uint8_t *line = NULL;
    struct kvf_image *img = NULL;
    for (;;) {
        if (DGifGetRecordType(g, &type) != GIF_OK) {
            st = gif_fail(s, g->Error);
            goto done;
        }
        if (type == TERMINATE_RECORD_TYPE) {
            st = err_set(KVF_ERR_FORMAT, "%s: GIF without an image", s->label);
            goto done;
        }
        if (type == IMAGE_DESC_RECORD_TYPE) break;
        if (type != EXTENSION_RECORD_TYPE) continue;
        int ext_code;
        GifByteType *ext;
        if (DGifGetExtension(g, &ext_code, &ext) != GIF_OK) {
            st = gif_fail(s, g->Error);
            goto done;
        }
        /* A graphic control block: [4] flags delay delay index. */
        if (ext_code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4) transparent = ext[1] & 1 ? ext[4] : -1;
        while (ext)
            if (DGifGetExtensionNext(g, &ext) != GIF_OK) {
                st = gif_fail(s, g->Error);
                goto done;
            }
    }
    if (DGifGetImageDesc(g) != GIF_OK) {
        st = gif_fail(s, g->Error);
        goto done;
    }
    const GifImageDesc *fr = &g->Image;
    const int64_t right = (int64_t)fr->Left + fr->Width, bottom = (int64_t)fr->Top + fr->Height;
    const int64_t cw = right > g->SWidth ? right : g->SWidth, ch = bottom > g->SHeight ? bottom : g->SHeight;
    if ((st = size_check(s->label, (uint64_t)cw, (uint64_t)ch, max_pixels)) != KVF_OK) goto done;
    if (fr->Width <= 0 || fr->Height <= 0) {
        st = err_set(KVF_ERR_FORMAT, "%s: GIF frame of %dx%d pixels", s->label, fr->Width, fr->Height);
        goto done;
    }
    const ColorMapObject *map = fr->ColorMap ? fr->ColorMap : g->SColorMap;
    uint8_t pal[256][3] = {{0}};
    for (int i = 0; i < 256; i++) {
        if (!map) memset(pal[i], i, 3);
        else if (i < map->ColorCount) memcpy(pal[i], &map->Colors[i], 3); /* GifColorType: r, g, b bytes */
    }
    if ((st = image_alloc((int)cw, (int)ch, &img)) != KVF_OK) goto done;
    const uint8_t *bg = pal[transparent >= 0 ? transparent : 0];
    for (size_t i = 0; i < (size_t)cw * ch; i++) memcpy(img->rgb + 3 * i, bg, 3);
    if (!(line = malloc((size_t)fr->Width))) {
        st = err_set(KVF_ERR_NOMEM, "%s: out of memory", s->label);
        goto done;
    }
    /* Interlaced rows come in four passes: every 8th from 0, from 4, every
     * 4th from 2, every 2nd from 1. */
    static const int first[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
    const int passes = fr->Interlace ? 4 : 1;
    for (int p = 0; p < passes; p++)
        for (int y = fr->Interlace ? first[p] : 0; y < fr->Height; y += fr->Interlace ? step[p] : 1) {
            if (DGifGetLine(g, line, fr->Width) != GIF_OK) {
                st = gif_fail(s, g->Error);
                goto done;
            }
            uint8_t *row = img->rgb + ((size_t)(fr->Top + y) * cw + fr->Left) * 3;
            for (int x = 0; x < fr->Width; x++) memcpy(row + 3 * x, pal[line[x]], 3);
        }
done:
    free(line);
    DGifCloseFile(g, &code);
    if (st == KVF_OK) *out = img;
    else kvf_image_free(img);
    return st;
}

/* --------------------------------------------------------------- WebP -- */

/* A still image; alpha dropped as stored. Animated files need libwebp's
 * demuxer and are refused. */
static enum kvf_status webp_decode(struct src *s, int64_t max_pixels, struct kvf_image **out) {
    WebPBitstreamFeatures f;
    const VP8StatusCode vs = WebPGetFeatures(s->p, s->n, &f);
    if (vs != VP8_STATUS_OK)
        return err_set(KVF_ERR_FORMAT, "%s: not a readable WebP (libwebp status %d)", s->label, (int)vs);
    if (f.has_animation) return err_set(KVF_ERR_UNSUPPORTED, "%s: animated WebP is not read", s->label);
    enum kvf_status st = size_check(s->label, (uint64_t)f.width, (uint64_t)f.height, max_pixels);
    if (st != KVF_OK) return st;
    struct kvf_image *img;
    if ((st = image_alloc(f.width, f.height, &img)) != KVF_OK) return st;
    const size_t stride = (size_t)f.width * 3;
    if (!WebPDecodeRGBInto(s->p, s->n, img->rgb, stride * f.height, (int)stride)) {
        kvf_image_free(img);
        return err_set(KVF_ERR_FORMAT, "%s: WebP data cannot be decoded", s->label);
    }
    *out = img;
    return KVF_OK;
}

/* ---------------------------------------------------------------- PNM -- */

/* Binary grey (P5) or RGB (P6) with 8-bit samples: a header and raw bytes,
 * read here because no Debian library reads it from memory. The grammar:
 * magic, then width, height and maxval each after whitespace and '#'
 * comments, then one whitespace byte. */
static bool pnm_space(uint8_t c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static enum kvf_status pnm_decode(struct src *s, int64_t max_pixels, struct kvf_image **out) {
    const uint8_t *p = s->p;
    const size_t n = s->n;
    size_t i = 2;
    uint64_t v[3];
    for (int f = 0; f < 3; f++) {
        for (;;) {
            while (i < n && pnm_space(p[i])) i++;
            if (i >= n || p[i] != '#') break;
            while (i < n && p[i] != '\n' && p[i] != '\r') i++;
        }
        if (i >= n || p[i] < '0' || p[i] > '9') return err_set(KVF_ERR_FORMAT, "%s: PNM header cut short", s->label);
        /* Saturated: any value past the side limit is refused the same. */
        for (v[f] = 0; i < n && p[i] >= '0' && p[i] <= '9'; i++)
            v[f] = v[f] > 1000000 ? v[f] : v[f] * 10 + (p[i] - '0');
    }
    if (i >= n || !pnm_space(p[i])) return err_set(KVF_ERR_FORMAT, "%s: PNM header cut short", s->label);
    i++;
    enum kvf_status st = size_check(s->label, v[0], v[1], max_pixels);
    if (st != KVF_OK) return st;
    if (v[2] != 255)
        return err_set(KVF_ERR_UNSUPPORTED, "%s: PNM with maxval %llu (8-bit, maxval 255, is read)", s->label,
                       (unsigned long long)v[2]);
    const int w = (int)v[0], h = (int)v[1], comp = p[1] == '6' ? 3 : 1;
    const size_t need = (size_t)w * h * comp;
    if (n - i < need)
        return err_set(KVF_ERR_FORMAT, "%s: PNM file truncated (%dx%d pixels, %zu bytes)", s->label, w, h, n);
    struct kvf_image *img;
    if ((st = image_alloc(w, h, &img)) != KVF_OK) return st;
    if (comp == 3) memcpy(img->rgb, p + i, need);
    else
        for (size_t k = 0; k < need; k++) memset(img->rgb + 3 * k, p[i + k], 3);
    *out = img;
    return KVF_OK;
}

static bool has_prefix(const struct src *s, const char *magic, size_t n) {
    return s->n >= n && memcmp(s->p, magic, n) == 0;
}

static enum kvf_status decode(const char *label, const void *data, size_t size, int64_t max_pixels,
                              struct kvf_image **out) {
    if (max_pixels <= 0) max_pixels = KVF_IMAGE_MAX_PIXELS_DEFAULT;
    if (size == 0) return err_set(KVF_ERR_FORMAT, "%s: empty file", label);
    struct src s = {.label = label, .p = data, .n = size};
    if (has_prefix(&s, "\x89PNG\r\n\x1a\n", 8)) return png_decode(&s, max_pixels, out);
    if (has_prefix(&s, "\xff\xd8\xff", 3)) return jpeg_decode(&s, max_pixels, out);
    if (has_prefix(&s, "GIF87a", 6) || has_prefix(&s, "GIF89a", 6)) return gif_decode(&s, max_pixels, out);
    if (size >= 12 && has_prefix(&s, "RIFF", 4) && memcmp(s.p + 8, "WEBP", 4) == 0)
        return webp_decode(&s, max_pixels, out);
    if (has_prefix(&s, "P5", 2) || has_prefix(&s, "P6", 2)) return pnm_decode(&s, max_pixels, out);
    return err_set(KVF_ERR_FORMAT, "%s: not an image kvfold reads (PNG, JPEG, GIF, WebP, binary PGM/PPM)", label);
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
    char *buf;
    size_t n;
    enum kvf_status st = sys_read_file(path, IMAGE_MAX_FILE, "an image file", &buf, &n);
    if (st == KVF_OK) st = decode(path, buf, n, max_pixels, out);
    free(buf);
    return st;
}

/* ------------------------------------------------------ preprocessing -- */

#define PRECISION_BITS (32 - 8 - 2) /* Pillow's fixed point for 8-bit images */

static double filter_support(enum image_filter f) {
    return f == IMAGE_BILINEAR ? 1.0 : f == IMAGE_LANCZOS ? 3.0 : 2.0;
}

static double sinc(double x) {
    if (x == 0.0) return 1.0;
    x *= M_PI;
    return sin(x) / x;
}

/* Pillow's filters; torchvision's antialiased bicubic is Pillow's (a = -0.5).
 * Lanczos is evaluated on the signed offset over [-3, 3), as Pillow's. */
static double filter_eval(enum image_filter f, double x) {
    if (f == IMAGE_LANCZOS) return x >= -3.0 && x < 3.0 ? sinc(x) * sinc(x / 3.0) : 0.0;
    if (x < 0.0) x = -x;
    if (f == IMAGE_BILINEAR) return x < 1.0 ? 1.0 - x : 0.0;
    const double a = -0.5;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
    if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
    return 0.0;
}

/* Per output sample: the first input sample, how many are read, and their
 * fixed-point weights (ksize per output) of prec fractional bits, as
 * Pillow's precompute_coeffs and normalize_coeffs_8bpc make them (prec 22),
 * or torch's int16 weights for uint8 images (_compute_indices_int16_weights_aa:
 * the same weights in double, prec as large as the largest allows under
 * 2^15). */
struct resample_plan {
    int ksize, prec;
    int *bounds; /* [out][2]: first, count */
    int32_t *k;  /* [out][ksize] */
};

static void plan_free(struct resample_plan *p) {
    free(p->bounds);
    free(p->k);
    p->bounds = NULL;
    p->k = NULL;
}

static enum kvf_status plan_make(int in_size, int out_size, enum image_filter f, struct resample_plan *p) {
    const double scale = (double)in_size / out_size;
    const double filterscale = scale < 1.0 ? 1.0 : scale;
    const double support = filter_support(f) * filterscale;
    p->ksize = (int)ceil(support) * 2 + 1; /* in_size <= 65535: no overflow */
    size_t nk, w_bytes, nb;
    if (!size_mul((size_t)p->ksize, (size_t)out_size, &nk) || !size_mul(nk, sizeof(double), &w_bytes) ||
        !size_mul((size_t)out_size, 2 * sizeof(int), &nb))
        return err_set(KVF_ERR_INVALID_ARG, "resampling %d to %d samples is too large", in_size, out_size);
    p->bounds = malloc(nb);
    p->k = malloc(nk * sizeof(int32_t));
    double *w = malloc(w_bytes), wmax = 0.0;
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
        double ww = 0.0, *wx = w + (size_t)xx * p->ksize;
        for (int x = 0; x < xmax; x++) {
            wx[x] = filter_eval(f, (x + xmin - center + 0.5) * ss);
            ww += wx[x];
        }
        for (int x = 0; x < p->ksize; x++) {
            wx[x] = x >= xmax ? 0.0 : ww != 0.0 ? wx[x] / ww : wx[x];
            if (wx[x] > wmax) wmax = wx[x];
        }
        p->bounds[2 * xx] = xmin;
        p->bounds[2 * xx + 1] = xmax;
    }
    p->prec = PRECISION_BITS;
    if (f == IMAGE_TV_BICUBIC)
        for (p->prec = 0; p->prec < 22 && (int)(0.5 + wmax * (1 << (p->prec + 1))) < (1 << 15); p->prec++) {}
    for (size_t i = 0; i < nk; i++)
        p->k[i] = (int32_t)(w[i] < 0 ? -0.5 + w[i] * (1 << p->prec) : 0.5 + w[i] * (1 << p->prec));
    free(w);
    return KVF_OK;
}

/* The sums are those of Pillow's (torch's) int accumulators; 64 bits only
 * so that no input can overflow them (theirs never do for these filters). */
static uint8_t clip8(int64_t v, int prec) {
    v >>= prec;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* The image on a w x h canvas of colour bg at offset (ox, oy): LLaVA's
 * padded square (expand2square), never built whole (a 65535x1000 image
 * would make a 12 GiB square), or the image itself (offset 0). */
struct canvas {
    const struct kvf_image *img;
    int w, h, ox, oy;
    uint8_t bg[3];
};

static bool canvas_row_is_bg(const struct canvas *cv, int y) { return y < cv->oy || y >= cv->oy + cv->img->h; }

static void canvas_row(const struct canvas *cv, int y, uint8_t *row) {
    const int w = cv->img->w;
    for (int x = 0; x < cv->w; x++) memcpy(row + 3 * (size_t)x, cv->bg, 3);
    if (!canvas_row_is_bg(cv, y))
        memcpy(row + 3 * (size_t)cv->ox, cv->img->rgb + (size_t)(y - cv->oy) * w * 3, (size_t)w * 3);
}

/* One row of pixels resampled by plan p into out [n_out][3]. */
static void row_resample(const uint8_t *in, const struct resample_plan *p, int n_out, uint8_t *out) {
    for (int o = 0; o < n_out; o++) {
        const int first = p->bounds[2 * o], cnt = p->bounds[2 * o + 1];
        const int32_t *k = p->k + (size_t)o * p->ksize;
        const int64_t half = (int64_t)1 << (p->prec - 1);
        int64_t s3[3] = {half, half, half};
        for (int x = 0; x < cnt; x++)
            for (int c = 0; c < 3; c++) s3[c] += (int64_t)k[x] * in[3 * (size_t)(first + x) + c];
        for (int c = 0; c < 3; c++) out[3 * o + c] = clip8(s3[c], p->prec);
    }
}

/* Pillow 13's order when the height shrinks more than twice as much as the
 * width: the vertical pass into 8-bit rows of the canvas's width, then the
 * horizontal one. Output as canvas_resize. */
static enum kvf_status canvas_resize_vertical_first(const struct canvas *cv, int ow, int oh, enum image_filter f,
                                                    uint8_t *out) {
    const size_t line = (size_t)cv->w * 3;
    size_t tmp_bytes;
    if (!size_mul(line, (size_t)oh, &tmp_bytes))
        return err_set(KVF_ERR_INVALID_ARG, "resizing %dx%d to %dx%d is too large", cv->w, cv->h, ow, oh);
    struct resample_plan ph = {0}, pv = {0};
    enum kvf_status st = plan_make(cv->w, ow, f, &ph);
    if (st == KVF_OK) st = plan_make(cv->h, oh, f, &pv);
    uint8_t *tmp = st == KVF_OK ? malloc(tmp_bytes) : NULL, *row = st == KVF_OK ? malloc(line) : NULL;
    int64_t *acc = st == KVF_OK ? malloc(line * sizeof *acc) : NULL;
    if (st == KVF_OK && (!tmp || !row || !acc))
        st = err_set(KVF_ERR_NOMEM, "out of memory resizing a %dx%d image", cv->w, cv->h);
    for (int yy = 0; st == KVF_OK && yy < oh; yy++) {
        const int first = pv.bounds[2 * yy], cnt = pv.bounds[2 * yy + 1];
        const int32_t *k = pv.k + (size_t)yy * pv.ksize;
        for (size_t i = 0; i < line; i++) acc[i] = (int64_t)1 << (pv.prec - 1);
        for (int y = 0; y < cnt; y++) {
            canvas_row(cv, first + y, row);
            for (size_t i = 0; i < line; i++) acc[i] += (int64_t)row[i] * k[y];
        }
        for (size_t i = 0; i < line; i++) tmp[(size_t)yy * line + i] = clip8(acc[i], pv.prec);
        row_resample(tmp + (size_t)yy * line, &ph, ow, out + (size_t)yy * ow * 3);
    }
    free(tmp);
    free(row);
    free(acc);
    plan_free(&ph);
    plan_free(&pv);
    return st;
}

/* Pillow's resize of the canvas to ow x oh with filter f, into
 * out[oh][ow][3]: horizontal pass into 8-bit rows, then vertical (a pass
 * over an unchanged side is the identity, as Pillow and torch skip it),
 * except where Pillow 13 runs the vertical pass first (Resample.c: the
 * height shrinks, by more than twice what the width does); torch always
 * runs the horizontal one first. */
static enum kvf_status canvas_resize(const struct canvas *cv, int ow, int oh, enum image_filter f, uint8_t *out) {
    const int dh = cv->h - oh, dw = cv->w - ow;
    if (f != IMAGE_TV_BICUBIC && dh > 0 && dh > 2 * dw) return canvas_resize_vertical_first(cv, ow, oh, f, out);
    const int ch = cv->h, w = cv->img->w;
    size_t tmp_bytes, acc_n;
    if (!size_mul((size_t)ch, (size_t)ow * 3, &tmp_bytes) || !size_mul((size_t)ow, 3, &acc_n))
        return err_set(KVF_ERR_INVALID_ARG, "resizing %dx%d to %dx%d is too large", cv->w, ch, ow, oh);
    struct resample_plan p = {0}, pv = {0};
    enum kvf_status st = plan_make(cv->w, ow, f, &p);
    if (st == KVF_OK) st = plan_make(ch, oh, f, &pv);
    if (st != KVF_OK) {
        plan_free(&p);
        return st;
    }
    uint8_t *tmp = malloc(tmp_bytes), *bg_line = malloc(acc_n);
    int64_t *acc = malloc(acc_n * sizeof *acc), *bg_acc = malloc(acc_n * sizeof *bg_acc);
    if (!tmp || !bg_line || !acc || !bg_acc) {
        st = err_set(KVF_ERR_NOMEM, "out of memory resizing a %dx%d image", cv->w, ch);
        goto done;
    }
    /* Every row is background outside the image's columns [ox, ox + w): an
     * output sample is the background row's sum plus, over its taps on the
     * image, k x (pixel - background), which is exact in integers. A row
     * costs O(ow + w x taps per input sample), so a tall narrow image is
     * linear in its side, not O(side^2 / ow). */
    for (int o = 0; o < ow; o++) {
        int64_t ksum = 0;
        for (int x = 0; x < p.bounds[2 * o + 1]; x++) ksum += p.k[(size_t)o * p.ksize + x];
        for (int c = 0; c < 3; c++) {
            bg_acc[3 * o + c] = ((int64_t)1 << (p.prec - 1)) + ksum * cv->bg[c];
            bg_line[3 * o + c] = clip8(bg_acc[3 * o + c], p.prec);
        }
    }
    int o_lo = 0, o_hi = ow;
    while (o_lo < ow && p.bounds[2 * o_lo] + p.bounds[2 * o_lo + 1] <= cv->ox) o_lo++;
    while (o_hi > o_lo && p.bounds[2 * (o_hi - 1)] >= cv->ox + w) o_hi--;
    const size_t line = (size_t)ow * 3;
    for (int y = 0; y < ch; y++) {
        uint8_t *t = tmp + (size_t)y * line;
        memcpy(t, bg_line, line);
        if (canvas_row_is_bg(cv, y)) continue;
        const uint8_t *src = cv->img->rgb + (size_t)(y - cv->oy) * w * 3;
        for (int o = o_lo; o < o_hi; o++) {
            const int first = p.bounds[2 * o], end = first + p.bounds[2 * o + 1];
            const int x0 = first > cv->ox ? first : cv->ox, x1 = end < cv->ox + w ? end : cv->ox + w;
            const int32_t *k = p.k + (size_t)o * p.ksize;
            int64_t s3[3] = {bg_acc[3 * o], bg_acc[3 * o + 1], bg_acc[3 * o + 2]};
            for (int x = x0; x < x1; x++) {
                const uint8_t *px = src + 3 * (size_t)(x - cv->ox);
                for (int c = 0; c < 3; c++) s3[c] += (int64_t)k[x - first] * (px[c] - cv->bg[c]);
            }
            for (int c = 0; c < 3; c++) t[3 * o + c] = clip8(s3[c], p.prec);
        }
    }
    /* Integer sums are exact, so accumulating tap by tap over a whole row
     * gives Pillow's per-pixel sums. */
    for (int yy = 0; yy < oh; yy++) {
        const int first = pv.bounds[2 * yy], cnt = pv.bounds[2 * yy + 1];
        const int32_t *k = pv.k + (size_t)yy * pv.ksize;
        for (size_t i = 0; i < acc_n; i++) acc[i] = (int64_t)1 << (pv.prec - 1);
        for (int y = 0; y < cnt; y++) {
            const uint8_t *t = tmp + (size_t)(first + y) * line;
            for (size_t i = 0; i < acc_n; i++) acc[i] += (int64_t)t[i] * k[y];
        }
        for (size_t i = 0; i < acc_n; i++) out[(size_t)yy * line + i] = clip8(acc[i], pv.prec);
    }
done:
    free(tmp);
    free(bg_line);
    free(acc);
    free(bg_acc);
    plan_free(&p);
    plan_free(&pv);
    return st;
}

static enum kvf_status preprocess_check(const struct kvf_image *img, int ow, int oh, const float mean[3],
                                        const float std[3], const float *out) {
    if (!img || !img->rgb || !mean || !std || !out)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: NULL argument");
    if (img->w <= 0 || img->h <= 0 || img->w > IMAGE_MAX_SIDE || img->h > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: image of %dx%d pixels", img->w, img->h);
    if (ow <= 0 || ow > IMAGE_MAX_SIDE || oh <= 0 || oh > IMAGE_MAX_SIDE)
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: output size %dx%d (sides 1..%d)", ow, oh,
                       IMAGE_MAX_SIDE);
    for (int c = 0; c < 3; c++)
        if (std[c] == 0.0f || !isfinite(std[c]) || !isfinite(mean[c]))
            return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: mean %g / std %g of channel %d", mean[c],
                           std[c], c);
    return KVF_OK;
}

/* The canvas resized to ow x oh, scaled to [0, 1] and normalised into out
 * [3][oh][ow]. transformers' rescale multiplies by 1/255 in double and
 * rounds to float, then normalises in float; so do we. Its torchvision
 * backend (IMAGE_TV_BICUBIC) folds the two: (x - 255 mean) / (255 std),
 * all in float. */
static enum kvf_status canvas_to_pixels(const struct canvas *cv, int ow, int oh, enum image_filter f,
                                        const float mean[3], const float std[3], float *out) {
    size_t n, bytes;
    if (!size_mul((size_t)ow, (size_t)oh, &n) || !size_mul(n, 3, &bytes))
        return err_set(KVF_ERR_INVALID_ARG, "image preprocessing: output size %dx%d is too large", ow, oh);
    uint8_t *rs = malloc(bytes);
    if (!rs) return err_set(KVF_ERR_NOMEM, "out of memory preprocessing a %dx%d image", cv->img->w, cv->img->h);
    enum kvf_status st = KVF_OK;
    if (cv->w == ow && cv->h == oh) {
        /* Pillow's resize to the same size is a copy. */
        for (int y = 0; y < oh; y++) canvas_row(cv, y, rs + (size_t)y * ow * 3);
    } else {
        st = canvas_resize(cv, ow, oh, f, rs);
    }
    for (int c = 0; st == KVF_OK && c < 3; c++) {
        const float m255 = mean[c] * 255.0f, s255 = std[c] * 255.0f;
        for (size_t i = 0; i < n; i++)
            out[(size_t)c * n + i] = f == IMAGE_TV_BICUBIC
                                         ? ((float)rs[3 * i + c] - m255) / s255
                                         : ((float)(rs[3 * i + c] * (1.0 / 255.0)) - mean[c]) / std[c];
    }
    free(rs);
    return st;
}

enum kvf_status image_preprocess_llava(const struct kvf_image *img, int size, const float mean[3], const float std[3],
                                       float *out) {
    enum kvf_status st = preprocess_check(img, size, size, mean, std, out);
    if (st != KVF_OK) return st;
    const int w = img->w, h = img->h, side = w > h ? w : h;
    struct canvas cv = {.img = img, .w = side, .h = side};
    /* expand2square: the background is tuple(int(x * 255) for x in mean),
     * the image pasted at ((side - w) // 2, (side - h) // 2). */
    for (int c = 0; c < 3; c++) {
        const double v = (double)mean[c] * 255.0;
        cv.bg[c] = (uint8_t)(v <= 0.0 ? 0 : v >= 255.0 ? 255 : (int)v);
    }
    cv.ox = (side - w) / 2;
    cv.oy = (side - h) / 2;
    /* CLIPImageProcessor then resizes the shortest edge to `size` and crops
     * size x size at the centre: the identity on this square. */
    return canvas_to_pixels(&cv, size, size, IMAGE_BICUBIC, mean, std, out);
}

enum kvf_status image_preprocess_resize(const struct kvf_image *img, int ow, int oh, enum image_filter f,
                                        const float mean[3], const float std[3], float *out) {
    enum kvf_status st = preprocess_check(img, ow, oh, mean, std, out);
    if (st != KVF_OK) return st;
    const struct canvas cv = {.img = img, .w = img->w, .h = img->h};
    return canvas_to_pixels(&cv, ow, oh, f, mean, std, out);
}

enum kvf_status image_resize(const struct kvf_image *img, int ow, int oh, enum image_filter f, struct kvf_image **out) {
    *out = NULL;
    if (!img || !img->rgb || img->w <= 0 || img->h <= 0 || img->w > IMAGE_MAX_SIDE || img->h > IMAGE_MAX_SIDE ||
        ow <= 0 || oh <= 0 || ow > IMAGE_MAX_SIDE || oh > IMAGE_MAX_SIDE || f == IMAGE_TV_BICUBIC)
        return err_set(KVF_ERR_INVALID_ARG, "image resize: %dx%d to %dx%d", img ? img->w : 0, img ? img->h : 0, ow,
                       oh);
    struct kvf_image *r;
    enum kvf_status st = image_alloc(ow, oh, &r);
    if (st != KVF_OK) return st;
    const struct canvas cv = {.img = img, .w = img->w, .h = img->h};
    if (ow == img->w && oh == img->h) memcpy(r->rgb, img->rgb, (size_t)ow * oh * 3);
    else st = canvas_resize(&cv, ow, oh, f, r->rgb);
    if (st != KVF_OK) kvf_image_free(r);
    else *out = r;
    return st;
}

#define IDEFICS3_MAX_SIDE 4096 /* the processor's MAX_IMAGE_SIZE */

/* The processor's resize of the longer side to `longest`
 * (_resize_output_size_rescale_to_max_len: the shorter side truncated from
 * the aspect ratio in double, then made even), then below MAX_IMAGE_SIZE
 * (_resize_output_size_scale_below_upper_bound); each side at least 1. */
static void idefics3_longest(int h, int w, int longest, int *rh, int *rw) {
    double ar = (double)w / h;
    if (w >= h) {
        w = longest;
        h = (int)(w / ar);
        h += h % 2;
    } else {
        h = longest;
        w = (int)(h * ar);
        w += w % 2;
    }
    h = KVF_MAX(h, 1), w = KVF_MAX(w, 1);
    ar = (double)w / h;
    if (w >= h && w > IDEFICS3_MAX_SIDE) {
        w = IDEFICS3_MAX_SIDE;
        h = (int)(w / ar);
    } else if (h > w && h > IDEFICS3_MAX_SIDE) {
        h = IDEFICS3_MAX_SIDE;
        w = (int)(h * ar);
    }
    *rh = KVF_MAX(h, 1), *rw = KVF_MAX(w, 1);
}

/* resize_for_vision_encoder: the longer side rounded up to a multiple of
 * tile, the other truncated from the aspect ratio, then rounded up too. */
static void idefics3_multiple(int h, int w, int tile, int *rh, int *rw) {
    const double ar = (double)w / h;
    if (w >= h) {
        w = (w + tile - 1) / tile * tile;
        h = ((int)(w / ar) + tile - 1) / tile * tile;
    } else {
        h = (h + tile - 1) / tile * tile;
        w = ((int)(h * ar) + tile - 1) / tile * tile;
    }
    *rh = h, *rw = w;
}

bool image_idefics3_tiles(int h, int w, int longest, int tile, bool split, int *rows, int *cols) {
    *rows = *cols = 0;
    if (h <= 0 || w <= 0 || longest <= 0 || longest > IDEFICS3_MAX_SIDE || tile <= 0 || tile > IDEFICS3_MAX_SIDE)
        return false;
    if (!split) return true;
    idefics3_longest(h, w, longest, &h, &w);
    idefics3_multiple(h, w, tile, &h, &w);
    if (h > tile || w > tile) *rows = h / tile, *cols = w / tile;
    return true;
}

/* The tile x tile square of img at (x0, y0), normalised into out [3][tile][tile]. */
static enum kvf_status idefics3_crop(const struct kvf_image *img, int x0, int y0, int tile, const float mean[3],
                                     const float std[3], float *out) {
    struct kvf_image *crop;
    enum kvf_status st = image_alloc(tile, tile, &crop);
    if (st != KVF_OK) return st;
    for (int y = 0; y < tile; y++)
        memcpy(crop->rgb + (size_t)y * tile * 3, img->rgb + ((size_t)(y0 + y) * img->w + x0) * 3, (size_t)tile * 3);
    st = image_preprocess_resize(crop, tile, tile, IMAGE_BILINEAR, mean, std, out); /* the same size: a copy */
    kvf_image_free(crop);
    return st;
}

enum kvf_status image_preprocess_idefics3(const struct kvf_image *img, int longest, int tile, bool split,
                                          enum image_filter f, const float mean[3], const float std[3], float *out) {
    int rows, cols, h, w;
    enum kvf_status st = preprocess_check(img, tile, tile, mean, std, out);
    if (st != KVF_OK) return st;
    if (!image_idefics3_tiles(img->h, img->w, longest, tile, split, &rows, &cols))
        return err_set(KVF_ERR_INVALID_ARG, "Idefics3 preprocessing: longest edge %d, tiles of %d (each 1..%d)",
                       longest, tile, IDEFICS3_MAX_SIDE);
    struct kvf_image *a = NULL, *b = NULL;
    idefics3_longest(img->h, img->w, longest, &h, &w);
    st = image_resize(img, w, h, f, &a);
    if (st == KVF_OK && split) {
        idefics3_multiple(h, w, tile, &h, &w);
        st = image_resize(a, w, h, f, &b);
    }
    const size_t plane = (size_t)3 * tile * tile;
    for (int r = 0; st == KVF_OK && r < rows; r++)
        for (int c = 0; st == KVF_OK && c < cols; c++)
            st = idefics3_crop(b, c * tile, r * tile, tile, mean, std, out + (size_t)(r * cols + c) * plane);
    /* The global image: the last resize's output squeezed to tile x tile. */
    if (st == KVF_OK)
        st = image_preprocess_resize(b ? b : a, tile, tile, f, mean, std, out + (size_t)rows * cols * plane);
    kvf_image_free(a);
    kvf_image_free(b);
    return st;
}

/* smart_resize's rule for n frames of h x w (frames: n rounded to its
 * temporal factor; 1 and 1 for an image). */
static bool smart_resize(double n, double frames, double h, double w, int factor, int64_t min_pixels,
                         int64_t max_pixels, int *rh, int *rw) {
    if (h <= 0 || w <= 0 || factor <= 0 || KVF_MAX(h, w) / KVF_MIN(h, w) > 200.0) return false;
    /* Python's round() halves to even, as rint does in the default mode. */
    double hb = rint(h / factor) * factor, wb = rint(w / factor) * factor;
    if (frames * hb * wb > (double)max_pixels) {
        const double beta = sqrt(n * h * w / (double)max_pixels);
        hb = KVF_MAX((double)factor, floor(h / beta / factor) * factor);
        wb = KVF_MAX((double)factor, floor(w / beta / factor) * factor);
    } else if (frames * hb * wb < (double)min_pixels) {
        const double beta = sqrt((double)min_pixels / (n * h * w));
        hb = ceil(h * beta / factor) * factor;
        wb = ceil(w * beta / factor) * factor;
    }
    if (!(hb >= factor && wb >= factor && hb <= IMAGE_MAX_SIDE && wb <= IMAGE_MAX_SIDE)) return false;
    *rh = (int)hb;
    *rw = (int)wb;
    return true;
}

bool image_smart_resize(int h, int w, int factor, int64_t min_pixels, int64_t max_pixels, int *rh, int *rw) {
    return smart_resize(1, 1, h, w, factor, min_pixels, max_pixels, rh, rw);
}

bool image_smart_resize_video(int n_frames, int t_factor, int h, int w, int factor, int64_t min_pixels,
                              int64_t max_pixels, int *rh, int *rw) {
    if (t_factor <= 0 || n_frames < t_factor || h <= 0 || w <= 0 || factor <= 0) return false;
    double hh = h, ww = w;
    if (h < factor || w < factor) { /* int(side * scale), as the processor truncates */
        const double scale = KVF_MAX((double)factor / h, (double)factor / w);
        hh = floor(h * scale), ww = floor(w * scale);
    }
    const double frames = rint((double)n_frames / t_factor) * t_factor;
    return smart_resize(n_frames, frames, hh, ww, factor, min_pixels, max_pixels, rh, rw);
}
