/* Image loading and LLaVA-1.5 preprocessing: every format we promise, grey
 * and alpha conversion, hostile and broken files, the pixel limit checked
 * from each format's header alone, and the padding / normalisation / resize
 * against naive references. Decoding is checked pixel for pixel against
 * Pillow, with the memory each hostile file costs, in
 * tests/ref/image_decode_ref.py; the resize in tests/ref/image_ref.py.
 * stb_image_write only writes the test images. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "io/image.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <stb/stb_image_write.h>

/* ------------------------------------------------------------ helpers -- */

static char tmp_dir[512];

static int tmp_setup(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "%s/image_test_XXXXXX", KVF_TEST_TMP);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static const char *created[64];
static int n_created;

static int tmp_teardown(void **state) {
    (void)state;
    for (int i = 0; i < n_created; i++) {
        unlink(created[i]);
        free((void *)created[i]);
    }
    n_created = 0;
    rmdir(tmp_dir);
    return 0;
}

/* A path in the test directory, removed at the end. */
static const char *tmp_path(const char *name) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", tmp_dir, name);
    for (int i = 0; i < n_created; i++)
        if (!strcmp(created[i], p)) return created[i];
    assert_true(n_created < 64);
    char *s = strdup(p);
    assert_non_null(s);
    created[n_created++] = s;
    return s;
}

static const char *write_bytes(const char *name, const void *data, size_t n) {
    const char *p = tmp_path(name);
    FILE *f = fopen(p, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
    return p;
}

static uint8_t *read_all(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    assert_true(len > 0);
    rewind(f);
    uint8_t *b = malloc((size_t)len);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* A reproducible RGB pattern with every channel distinct. */
static uint8_t *pattern(int w, int h, int comp, uint32_t seed) {
    uint8_t *p = malloc((size_t)w * h * comp);
    assert_non_null(p);
    uint32_t s = seed * 2654435761u + 1;
    for (size_t i = 0; i < (size_t)w * h * comp; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (uint8_t)(s >> 24);
    }
    return p;
}

static struct kvf_image *load_ok(const char *path) {
    struct kvf_image *img = NULL;
    enum kvf_status st = kvf_image_load(path, 0, &img);
    if (st) fail_msg("%s: %s", path, kvf_last_error());
    assert_non_null(img);
    return img;
}

static void assert_load_fails(const char *path, int64_t max_pixels, enum kvf_status want) {
    struct kvf_image *img = (struct kvf_image *)&img; /* must be reset to NULL */
    assert_int_equal(kvf_image_load(path, max_pixels, &img), want);
    assert_null(img);
    /* The message names the file. */
    if (!strstr(kvf_last_error(), path)) fail_msg("message without the path: %s", kvf_last_error());
}

static void assert_rgb(const struct kvf_image *img, int w, int h, const uint8_t *rgb) {
    assert_int_equal(kvf_image_width(img), w);
    assert_int_equal(kvf_image_height(img), h);
    assert_memory_equal(kvf_image_rgb(img), rgb, (size_t)w * h * 3);
}

/* Netpbm files written by hand (stb_image_write has no PPM writer). */
static const char *write_pnm(const char *name, const char *magic, int w, int h, const uint8_t *px, size_t n) {
    char hdr[64];
    const int k = snprintf(hdr, sizeof hdr, "%s\n# a comment\n%d %d\n255\n", magic, w, h);
    uint8_t *buf = malloc((size_t)k + n);
    assert_non_null(buf);
    memcpy(buf, hdr, (size_t)k);
    if (n) memcpy(buf + k, px, n);
    const char *p = write_bytes(name, buf, (size_t)k + n);
    free(buf);
    return p;
}

/* PNG chunks need their CRC (stb_image ignores it, other decoders do not). */
static uint32_t crc32_png(const uint8_t *p, size_t n) {
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    }
    return c ^ 0xffffffffu;
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A PNG signature and IHDR chunk claiming w x h (colour type 2: RGB, or 0:
 * grey), followed by a tiny IDAT and IEND: the header is valid, the pixels
 * are not there. */
static size_t png_header_only(uint8_t *buf, uint32_t w, uint32_t h, int colour) {
    static const uint8_t sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    size_t n = 0;
    memcpy(buf, sig, 8);
    n = 8;
    put_be32(buf + n, 13);
    memcpy(buf + n + 4, "IHDR", 4);
    put_be32(buf + n + 8, w);
    put_be32(buf + n + 12, h);
    buf[n + 16] = 8; /* bit depth */
    buf[n + 17] = (uint8_t)colour;
    buf[n + 18] = buf[n + 19] = buf[n + 20] = 0;
    put_be32(buf + n + 21, crc32_png(buf + n + 4, 17));
    n += 25;
    static const uint8_t idat[] = {0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01};
    put_be32(buf + n, sizeof idat);
    memcpy(buf + n + 4, "IDAT", 4);
    memcpy(buf + n + 8, idat, sizeof idat);
    put_be32(buf + n + 8 + sizeof idat, crc32_png(buf + n + 4, 4 + sizeof idat));
    n += 12 + sizeof idat;
    put_be32(buf + n, 0);
    memcpy(buf + n + 4, "IEND", 4);
    put_be32(buf + n + 8, crc32_png(buf + n + 4, 4));
    return n + 12;
}

struct membuf {
    uint8_t *p;
    size_t n;
};

static void membuf_write(void *ctx, void *data, int size) {
    struct membuf *m = ctx;
    m->p = realloc(m->p, m->n + (size_t)size);
    assert_non_null(m->p);
    memcpy(m->p + m->n, data, (size_t)size);
    m->n += (size_t)size;
}

/* -------------------------------------------------------------- loading -- */

static void test_lossless_formats(void **state) {
    (void)state;
    const int w = 13, h = 7;
    uint8_t *rgb = pattern(w, h, 3, 1);
    const char *png = tmp_path("a.png");
    assert_true(stbi_write_png(png, w, h, 3, rgb, w * 3));
    const char *ppm = write_pnm("a.ppm", "P6", w, h, rgb, (size_t)w * h * 3);
    const char *paths[] = {png, ppm};
    for (int i = 0; i < 2; i++) {
        struct kvf_image *img = load_ok(paths[i]);
        assert_rgb(img, w, h, rgb);
        kvf_image_free(img);
    }
    /* The same bytes from memory. */
    size_t n;
    uint8_t *bytes = read_all(png, &n);
    struct kvf_image *img = NULL;
    assert_int_equal(kvf_image_load_memory(bytes, n, 0, &img), KVF_OK);
    assert_rgb(img, w, h, rgb);
    kvf_image_free(img);
    free(bytes);
    free(rgb);
}

static void test_jpeg(void **state) {
    (void)state;
    /* A smooth image survives JPEG at quality 95 within a few levels. */
    const int w = 48, h = 32;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    assert_non_null(rgb);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = (uint8_t)(40 + 4 * x);
            p[1] = (uint8_t)(200 - 5 * y);
            p[2] = (uint8_t)(100 + 2 * x + 2 * y);
        }
    const char *jpg = tmp_path("a.jpg");
    assert_true(stbi_write_jpg(jpg, w, h, 3, rgb, 95));
    struct kvf_image *img = load_ok(jpg);
    assert_int_equal(kvf_image_width(img), w);
    assert_int_equal(kvf_image_height(img), h);
    const uint8_t *got = kvf_image_rgb(img);
    double sum = 0;
    int worst = 0;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) {
        const int d = abs((int)got[i] - (int)rgb[i]);
        sum += d;
        worst = d > worst ? d : worst;
    }
    assert_true(sum / (w * h * 3) < 3.0);
    assert_true(worst <= 24);
    kvf_image_free(img);
    free(rgb);
}

static void test_grey_to_rgb(void **state) {
    (void)state;
    const int w = 9, h = 5;
    uint8_t *g = pattern(w, h, 1, 2);
    uint8_t *want = malloc((size_t)w * h * 3);
    assert_non_null(want);
    for (size_t i = 0; i < (size_t)w * h; i++) want[3 * i] = want[3 * i + 1] = want[3 * i + 2] = g[i];
    const char *png = tmp_path("g.png");
    assert_true(stbi_write_png(png, w, h, 1, g, w));
    const char *pgm = write_pnm("g.pgm", "P5", w, h, g, (size_t)w * h);
    const char *paths[] = {png, pgm};
    for (int i = 0; i < 2; i++) {
        struct kvf_image *img = load_ok(paths[i]);
        assert_rgb(img, w, h, want);
        kvf_image_free(img);
    }
    free(g);
    free(want);
}

static void test_alpha_dropped(void **state) {
    (void)state;
    /* RGBA and grey+alpha: the colour stays as stored (not blended with a
     * background, not premultiplied), as PIL's convert("RGB") keeps it. */
    const int w = 6, h = 4;
    uint8_t *rgba = pattern(w, h, 4, 3), *ga = pattern(w, h, 2, 4);
    uint8_t *want_rgb = malloc((size_t)w * h * 3), *want_g = malloc((size_t)w * h * 3);
    assert_non_null(want_rgb);
    assert_non_null(want_g);
    for (size_t i = 0; i < (size_t)w * h; i++) {
        memcpy(want_rgb + 3 * i, rgba + 4 * i, 3);
        want_g[3 * i] = want_g[3 * i + 1] = want_g[3 * i + 2] = ga[2 * i];
    }
    const char *p4 = tmp_path("a4.png"), *p2 = tmp_path("a2.png");
    assert_true(stbi_write_png(p4, w, h, 4, rgba, w * 4));
    assert_true(stbi_write_png(p2, w, h, 2, ga, w * 2));
    struct kvf_image *img = load_ok(p4);
    assert_rgb(img, w, h, want_rgb);
    kvf_image_free(img);
    img = load_ok(p2);
    assert_rgb(img, w, h, want_g);
    kvf_image_free(img);
    free(rgba);
    free(ga);
    free(want_rgb);
    free(want_g);
}

static void test_broken_files(void **state) {
    (void)state;
    /* Truncated PNG: a valid header, half the compressed data. */
    const int w = 40, h = 30;
    uint8_t *rgb = pattern(w, h, 3, 5);
    struct membuf m = {0};
    assert_true(stbi_write_png_to_func(membuf_write, &m, w, h, 3, rgb, w * 3));
    assert_true(m.n > 200);
    assert_load_fails(write_bytes("trunc.png", m.p, m.n / 2), 0, KVF_ERR_FORMAT);
    /* A header and nothing else. */
    assert_load_fails(write_bytes("hdr.png", m.p, 33), 0, KVF_ERR_FORMAT);
    free(m.p);
    free(rgb);

    uint8_t garbage[300];
    uint32_t s = 7;
    for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (uint8_t)((s = s * 1103515245u + 12345u) >> 16);
    assert_load_fails(write_bytes("garbage.png", garbage, sizeof garbage), 0, KVF_ERR_FORMAT);
    assert_load_fails(write_bytes("empty.png", "", 0), 0, KVF_ERR_FORMAT);
    /* Truncated PPM pixels. */
    uint8_t px[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    assert_load_fails(write_pnm("short.ppm", "P6", 8, 8, px, sizeof px), 0, KVF_ERR_FORMAT);

    /* Formats not read (TIFF, BMP, TGA: no magic), said with the list of
     * those that are; a WebP whose VP8 chunk is garbage, with libwebp's
     * reason. */
    static const uint8_t tiff[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    static const uint8_t webp[] = {'R', 'I', 'F', 'F', 26, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', ' ',
                                   14,  0,   0,   0,   0,  0, 0, 0, 0,   0,   0,   0,   0,   0,   0,   0};
    assert_load_fails(write_bytes("a.tiff", tiff, sizeof tiff), 0, KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "PNG, JPEG, GIF, WebP"));
    m = (struct membuf){0};
    assert_true(stbi_write_bmp_to_func(membuf_write, &m, 4, 4, 3, garbage));
    assert_load_fails(write_bytes("a.bmp", m.p, m.n), 0, KVF_ERR_FORMAT);
    free(m.p);
    m = (struct membuf){0};
    assert_true(stbi_write_tga_to_func(membuf_write, &m, 4, 4, 3, garbage));
    assert_load_fails(write_bytes("a.tga", m.p, m.n), 0, KVF_ERR_FORMAT);
    free(m.p);
    assert_load_fails(write_bytes("a.webp", webp, sizeof webp), 0, KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "WebP ("));
    /* PNM other than 8-bit binary. */
    static const char p16[] = "P6 1 1 65535\n\0\1\0\2\0\3";
    assert_load_fails(write_bytes("16.ppm", p16, sizeof p16 - 1), 0, KVF_ERR_UNSUPPORTED);
    assert_load_fails(write_bytes("cut.ppm", "P6 12", 5), 0, KVF_ERR_FORMAT);

    /* Missing file, a directory. */
    assert_load_fails(tmp_path("missing.png"), 0, KVF_ERR_IO);
    assert_load_fails(tmp_dir, 0, KVF_ERR_IO);

    /* From memory. */
    struct kvf_image *img = NULL;
    assert_int_equal(kvf_image_load_memory(garbage, sizeof garbage, 0, &img), KVF_ERR_FORMAT);
    assert_int_equal(kvf_image_load_memory(NULL, 10, 0, &img), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_image_load_memory("", 0, 0, &img), KVF_ERR_FORMAT);
    assert_null(img);
    assert_int_equal(kvf_image_load_memory(garbage, sizeof garbage, 0, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_image_load(NULL, 0, &img), KVF_ERR_INVALID_ARG);
}

/* The findings of the fuzzing campaign against the former decoder. Each
 * must fail at once with a format error (the memory they cost is measured
 * in tests/ref/image_decode_ref.py). */
static void test_hostile_files(void **state) {
    (void)state;
    /* F2: 1x1 PNG whose IDAT claims 0x7fffffff bytes and holds none. */
    uint8_t png[128];
    png_header_only(png, 1, 1, 2);
    put_be32(png + 33, 0x7fffffffu);
    assert_load_fails(write_bytes("f2.png", png, 41), 0, KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "truncated"));

    /* F1: a JPEG whose DHT code counts sum past 256. */
    const int w = 16, h = 16;
    uint8_t *rgb = pattern(w, h, 3, 11);
    struct membuf m = {0};
    assert_true(stbi_write_jpg_to_func(membuf_write, &m, w, h, 3, rgb, 90));
    size_t dht = 0;
    for (size_t i = 2; i + 1 < m.n && !dht; i++)
        if (m.p[i] == 0xff && m.p[i + 1] == 0xc4) dht = i;
    assert_true(dht && dht + 21 < m.n);
    memset(m.p + dht + 5, 0xff, 16); /* 16 counts of 255 */
    assert_load_fails(write_bytes("f1.jpg", m.p, m.n), 0, KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "JPEG ("));
    free(m.p);
    /* Truncated JPEG: an error, not a grey-padded image. */
    m = (struct membuf){0};
    assert_true(stbi_write_jpg_to_func(membuf_write, &m, w, h, 3, rgb, 90));
    assert_load_fails(write_bytes("cut.jpg", m.p, m.n - 40), 0, KVF_ERR_FORMAT);
    free(m.p);
    free(rgb);
}

static void test_pixel_limit(void **state) {
    (void)state;
    /* PPM headers claiming huge or empty images, with 3 bytes of pixels. A
     * decoder that read past the header would fail with KVF_ERR_FORMAT (or
     * try to allocate 30 GB); the header check says KVF_ERR_INVALID_ARG. */
    uint8_t px[3] = {0};
    assert_load_fails(write_pnm("huge.ppm", "P6", 100000, 100000, px, 3), 0, KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "limit"));
    assert_load_fails(write_pnm("wide.ppm", "P6", 70000, 1, px, 3), 0, KVF_ERR_INVALID_ARG);
    assert_load_fails(write_pnm("big.ppm", "P6", 9000, 9000, px, 3), 0, KVF_ERR_INVALID_ARG);
    const char *zero = write_pnm("zero.ppm", "P6", 0, 5, px, 3);
    struct kvf_image *img = NULL;
    const enum kvf_status st = kvf_image_load(zero, 0, &img);
    assert_true(st == KVF_ERR_FORMAT || st == KVF_ERR_INVALID_ARG);
    assert_null(img);

    /* PNG headers: 100000^2 RGB, 60000^2 (within the side limit), 20000^2
     * grey (over the default pixel limit): the size and the limit named. */
    uint8_t png[128];
    size_t n = png_header_only(png, 100000, 100000, 2);
    const char *p = write_bytes("huge.png", png, n);
    assert_load_fails(p, 0, KVF_ERR_INVALID_ARG);
    n = png_header_only(png, 60000, 60000, 2);
    assert_load_fails(write_bytes("60k.png", png, n), 0, KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "60000x60000 pixels is over the limit"));
    n = png_header_only(png, 20000, 20000, 0);
    assert_load_fails(write_bytes("big.png", png, n), 0, KVF_ERR_INVALID_ARG);
    n = png_header_only(png, 0, 10, 2);
    p = write_bytes("zero.png", png, n);
    const enum kvf_status st2 = kvf_image_load(p, 0, &img);
    assert_true(st2 == KVF_ERR_FORMAT || st2 == KVF_ERR_INVALID_ARG);

    /* JPEG: an 8x8 file whose SOF0 says 60000x60000. */
    uint8_t *small = pattern(8, 8, 3, 12);
    struct membuf m = {0};
    assert_true(stbi_write_jpg_to_func(membuf_write, &m, 8, 8, 3, small, 90));
    size_t sof = 0;
    for (size_t i = 2; i + 8 < m.n && !sof; i++)
        if (m.p[i] == 0xff && m.p[i + 1] == 0xc0) sof = i;
    assert_true(sof);
    m.p[sof + 5] = m.p[sof + 7] = 0xea; /* 0xea60 = 60000 */
    m.p[sof + 6] = m.p[sof + 8] = 0x60;
    assert_load_fails(write_bytes("60k.jpg", m.p, m.n), 0, KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "60000x60000 pixels is over the limit"));
    free(m.p);
    free(small);
    /* GIF: a 60000x60000 screen and frame, no pixels. */
    static const uint8_t gif[] = {'G', 'I', 'F', '8', '9', 'a', 0x60, 0xea, 0x60, 0xea, 0, 0, 0,
                                  ',', 0, 0, 0, 0, 0x60, 0xea, 0x60, 0xea, 0, 8, 0, ';'};
    assert_load_fails(write_bytes("60k.gif", gif, sizeof gif), 0, KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "60000x60000 pixels is over the limit"));
    /* WebP: a lossless header of 16384x16384. */
    uint8_t webp[40] = {'R', 'I', 'F', 'F', 32, 0, 0, 0, 'W', 'E', 'B', 'P', 'V', 'P', '8', 'L', 20, 0, 0, 0, 0x2f};
    const uint32_t bits = 16383u | 16383u << 14;
    for (int i = 0; i < 4; i++) webp[21 + i] = (uint8_t)(bits >> (8 * i));
    assert_load_fails(write_bytes("16k.webp", webp, sizeof webp), 0, KVF_ERR_INVALID_ARG);
    assert_non_null(strstr(kvf_last_error(), "16384x16384 pixels is over the limit"));

    /* The caller's limit: exactly at it loads, one pixel under refuses. */
    const int w = 64, h = 64;
    uint8_t *rgb = pattern(w, h, 3, 6);
    const char *ok = tmp_path("64.png");
    assert_true(stbi_write_png(ok, w, h, 3, rgb, w * 3));
    assert_int_equal(kvf_image_load(ok, w * h, &img), KVF_OK);
    kvf_image_free(img);
    assert_load_fails(ok, w * h - 1, KVF_ERR_INVALID_ARG);
    free(rgb);
}

static void test_from_rgb(void **state) {
    (void)state;
    uint8_t rgb[2 * 3 * 3];
    for (int i = 0; i < (int)sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7);
    struct kvf_image *img = NULL;
    assert_int_equal(kvf_image_from_rgb(3, 2, rgb, &img), KVF_OK);
    assert_rgb(img, 3, 2, rgb);
    assert_ptr_not_equal(kvf_image_rgb(img), rgb); /* a copy */
    kvf_image_free(img);
    const int bad[][2] = {{0, 2}, {3, 0}, {-1, 2}, {3, -5}, {70000, 1}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        img = (struct kvf_image *)&img;
        assert_int_equal(kvf_image_from_rgb(bad[i][0], bad[i][1], rgb, &img), KVF_ERR_INVALID_ARG);
        assert_null(img);
    }
    assert_int_equal(kvf_image_from_rgb(3, 2, NULL, &img), KVF_ERR_INVALID_ARG);
    assert_int_equal(kvf_image_from_rgb(3, 2, rgb, NULL), KVF_ERR_INVALID_ARG);
    kvf_image_free(NULL);
    assert_int_equal(kvf_image_width(NULL), 0);
    assert_null(kvf_image_rgb(NULL));
}

/* -------------------------------------------------------- preprocessing -- */

static const float MEAN[3] = {0.5f, 0.4578275f, 0.40821073f};
static const float STD[3] = {0.25f, 0.26130258f, 0.27577711f};

/* expand2square + normalisation written out directly, for images that are
 * size x size once padded (no resample in Pillow). */
static void naive_pad_normalise(const uint8_t *rgb, int w, int h, int size, float *out) {
    const int side = w > h ? w : h;
    assert_int_equal(side, size);
    const int ox = (side - w) / 2, oy = (side - h) / 2;
    for (int c = 0; c < 3; c++) {
        const int bg = (int)(MEAN[c] * 255.0); /* Python's int(x * 255) */
        for (int y = 0; y < size; y++)
            for (int x = 0; x < size; x++) {
                const bool in = x >= ox && x < ox + w && y >= oy && y < oy + h;
                const int v = in ? rgb[((size_t)(y - oy) * w + (x - ox)) * 3 + c] : bg;
                out[((size_t)c * size + y) * size + x] = ((float)(v / 255.0) - MEAN[c]) / STD[c];
            }
    }
}

static void check_pad(int w, int h) {
    const int size = w > h ? w : h;
    uint8_t *rgb = pattern(w, h, 3, (uint32_t)(w * 100 + h));
    struct kvf_image *img;
    assert_int_equal(kvf_image_from_rgb(w, h, rgb, &img), KVF_OK);
    const size_t n = (size_t)3 * size * size;
    float *got = malloc(n * sizeof *got), *want = malloc(n * sizeof *want);
    assert_non_null(got);
    assert_non_null(want);
    assert_int_equal(image_preprocess_llava(img, size, MEAN, STD, got), KVF_OK);
    naive_pad_normalise(rgb, w, h, size, want);
    for (size_t i = 0; i < n; i++)
        if (fabsf(got[i] - want[i]) > 1e-6f) fail_msg("%dx%d: element %zu: %g, want %g", w, h, i, got[i], want[i]);
    kvf_image_free(img);
    free(rgb);
    free(got);
    free(want);
}

static void test_preprocess_pad(void **state) {
    (void)state;
    check_pad(3, 5);  /* tall, even padding: 1 column each side */
    check_pad(5, 2);  /* wide, odd padding: 1 row above, 2 below */
    check_pad(2, 7);  /* 2 columns left, 3 right */
    check_pad(6, 6);  /* already square */
    check_pad(1, 1);
    check_pad(9, 1);
    /* The background of the real CLIP mean: (122, 116, 104). */
    static const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float one[3] = {1, 1, 1};
    const uint8_t px[1 * 3 * 3] = {0}; /* 1 x 3, black */
    struct kvf_image *img;
    assert_int_equal(kvf_image_from_rgb(1, 3, px, &img), KVF_OK);
    float out[3 * 9];
    assert_int_equal(image_preprocess_llava(img, 3, clip_mean, one, out), KVF_OK);
    static const int bg[3] = {122, 116, 104};
    for (int c = 0; c < 3; c++) {
        assert_float_equal(out[c * 9 + 0] + clip_mean[c], bg[c] / 255.0f, 1e-6); /* left column */
        assert_float_equal(out[c * 9 + 1] + clip_mean[c], 0.0f, 1e-6);          /* the image */
    }
    kvf_image_free(img);
}

static void test_preprocess_resize(void **state) {
    (void)state;
    /* A constant image stays exactly constant through the resize (the
     * coefficients of each output sum to one), up and down, and padding in
     * the background colour is invisible. */
    const int sizes[] = {1, 7, 16, 23, 64, 100};
    const int dims[][2] = {{40, 40}, {37, 23}, {5, 50}, {3, 3}};
    for (size_t d = 0; d < sizeof dims / sizeof dims[0]; d++) {
        const int w = dims[d][0], h = dims[d][1];
        uint8_t *rgb = malloc((size_t)w * h * 3);
        assert_non_null(rgb);
        const uint8_t col[3] = {127, 116, 104}; /* the background of MEAN */
        for (size_t i = 0; i < (size_t)w * h; i++) memcpy(rgb + 3 * i, col, 3);
        struct kvf_image *img;
        assert_int_equal(kvf_image_from_rgb(w, h, rgb, &img), KVF_OK);
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            const int size = sizes[s];
            float *out = malloc((size_t)3 * size * size * sizeof *out);
            assert_non_null(out);
            assert_int_equal(image_preprocess_llava(img, size, MEAN, STD, out), KVF_OK);
            for (int c = 0; c < 3; c++) {
                const float want = ((float)(col[c] / 255.0) - MEAN[c]) / STD[c];
                for (int i = 0; i < size * size; i++)
                    if (out[(size_t)c * size * size + i] != want)
                        fail_msg("%dx%d -> %d: channel %d pixel %d: %g, want %g", w, h, size, c, i,
                                 out[(size_t)c * size * size + i], want);
            }
            free(out);
        }
        kvf_image_free(img);
        free(rgb);
    }

    /* Outputs stay within the normalised 0..255 range, and a black and white
     * step stays ordered (dark side darker) after an upscale. */
    const int w = 8, h = 8, size = 20;
    uint8_t rgb[8 * 8 * 3];
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) memset(rgb + ((size_t)y * w + x) * 3, x < 4 ? 0 : 255, 3);
    struct kvf_image *img;
    assert_int_equal(kvf_image_from_rgb(w, h, rgb, &img), KVF_OK);
    float out[3 * 20 * 20];
    assert_int_equal(image_preprocess_llava(img, size, MEAN, STD, out), KVF_OK);
    for (int c = 0; c < 3; c++)
        for (int i = 0; i < size * size; i++) {
            const float v = out[c * size * size + i] * STD[c] + MEAN[c];
            assert_true(v >= -1e-6f && v <= 1.0f + 1e-6f);
        }
    for (int y = 0; y < size; y++) {
        assert_true(out[y * size + 0] < out[y * size + size - 1]);
        assert_float_equal(out[y * size + 0] * STD[0] + MEAN[0], 0.0f, 1e-6);
        assert_float_equal(out[y * size + size - 1] * STD[0] + MEAN[0], 1.0f, 1e-6);
    }
    kvf_image_free(img);

    /* A thin, wide image: the square is 3000 x 3000 but only its 2 middle
     * rows hold pixels. */
    uint8_t *thin = pattern(3000, 2, 3, 9);
    assert_int_equal(kvf_image_from_rgb(3000, 2, thin, &img), KVF_OK);
    float *o = malloc((size_t)3 * 336 * 336 * sizeof *o);
    assert_non_null(o);
    assert_int_equal(image_preprocess_llava(img, 336, MEAN, STD, o), KVF_OK);
    /* The first row is far from the image: pure background. */
    assert_float_equal(o[0] * STD[0] + MEAN[0], 127 / 255.0f, 1e-6);
    free(o);
    free(thin);
    kvf_image_free(img);
}

static double bicubic(double x) {
    x = fabs(x);
    return x < 1.0 ? (1.5 * x - 2.5) * x * x + 1.0 : x < 2.0 ? ((-0.5 * x + 2.5) * x - 4.0) * x + 2.0 : 0.0;
}

static double lanczos3(double x) {
    if (fabs(x) >= 3.0) return 0.0;
    if (x == 0.0) return 1.0;
    const double a = M_PI * x, b = a / 3.0;
    return sin(a) / a * (sin(b) / b);
}

/* A filter's weights (Pillow's bicubic, a = -0.5, or Lanczos 3) of n_out
 * samples from n_in, in double and normalised, written out for the
 * references below. */
static double *naive_weights(int n_in, int n_out, double (*kernel)(double)) {
    double *w = calloc((size_t)n_in * n_out, sizeof *w);
    assert_non_null(w);
    const double scale = (double)n_in / n_out, fs = scale < 1.0 ? 1.0 : scale;
    for (int o = 0; o < n_out; o++) {
        const double c = (o + 0.5) * scale;
        double sum = 0.0;
        for (int i = 0; i < n_in; i++) {
            const double v = kernel((i + 0.5 - c) / fs);
            w[(size_t)o * n_in + i] = v;
            sum += v;
        }
        for (int i = 0; i < n_in; i++) w[(size_t)o * n_in + i] /= sum;
    }
    return w;
}

/* rgb [h][w][3] resized to ow x oh in double with a separable kernel, at (x, y, c). */
static double naive_resize(const uint8_t *rgb, int w, int h, const double *wx, const double *wy, int x, int y, int c) {
    double v = 0.0;
    for (int iy = 0; iy < h; iy++)
        for (int ix = 0; ix < w; ix++)
            v += wy[(size_t)y * h + iy] * wx[(size_t)x * w + ix] * rgb[(iy * w + ix) * 3 + c];
    return v;
}

/* A smooth 37 x 23 picture and the same size in one colour. */
static void smooth_and_flat(uint8_t *smooth, uint8_t *flat, const uint8_t col[3]) {
    for (int y = 0; y < 23; y++)
        for (int x = 0; x < 37; x++)
            for (int c = 0; c < 3; c++) {
                smooth[(y * 37 + x) * 3 + c] = (uint8_t)(30 + 3 * x + 2 * y + 20 * sin((x + 2 * c) * 0.3));
                flat[(y * 37 + x) * 3 + c] = col[c];
            }
}

/* torchvision's resize (IMAGE_TV_BICUBIC; pixel-exact against torchvision
 * in tests/ref/hf_qwen25vl_check.py): a constant image stays constant,
 * normalised in one float step; a smooth image is within a level of the
 * resize done in double without the fixed point and the 8-bit pass
 * between the two directions. */
static void test_preprocess_tv_bicubic(void **state) {
    (void)state;
    const int outs[][2] = {{56, 28}, {84, 140}, {5, 7}, {37, 23}, {300, 11}};
    const uint8_t col[3] = {255, 0, 93};
    uint8_t rgb[37 * 23 * 3], one[37 * 23 * 3];
    smooth_and_flat(rgb, one, col);
    struct kvf_image *flat, *smooth;
    assert_int_equal(kvf_image_from_rgb(37, 23, one, &flat), KVF_OK);
    assert_int_equal(kvf_image_from_rgb(37, 23, rgb, &smooth), KVF_OK);
    for (size_t k = 0; k < sizeof outs / sizeof *outs; k++) {
        const int ow = outs[k][0], oh = outs[k][1];
        const size_t n = (size_t)ow * oh;
        float *out = malloc(3 * n * sizeof *out);
        assert_non_null(out);
        assert_int_equal(image_preprocess_resize(flat, ow, oh, IMAGE_TV_BICUBIC, MEAN, STD, out), KVF_OK);
        for (int c = 0; c < 3; c++) {
            const float want = ((float)col[c] - MEAN[c] * 255.0f) / (STD[c] * 255.0f);
            for (size_t i = 0; i < n; i++)
                if (out[c * n + i] != want)
                    fail_msg("flat -> %dx%d: channel %d pixel %zu: %g, want %g", ow, oh, c, i, out[c * n + i], want);
        }
        assert_int_equal(image_preprocess_resize(smooth, ow, oh, IMAGE_TV_BICUBIC, MEAN, STD, out), KVF_OK);
        double *wx = naive_weights(37, ow, bicubic), *wy = naive_weights(23, oh, bicubic);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < 3; c++) {
                    const double v = naive_resize(rgb, 37, 23, wx, wy, x, y, c);
                    const double got = out[c * n + (size_t)y * ow + x] * STD[c] * 255.0 + MEAN[c] * 255.0;
                    if (fabs(got - v) > 1.01)
                        fail_msg("smooth -> %dx%d at (%d, %d, %d): %g, in double %g", ow, oh, x, y, c, got, v);
                }
        free(wx);
        free(wy);
        free(out);
    }
    kvf_image_free(flat);
    kvf_image_free(smooth);
}

/* Pillow's Lanczos (image_resize, pixel-exact against Pillow through the
 * Idefics3 processor in tests/ref/hf_smolvlm_check.py): a constant image
 * stays constant, up and down; a smooth one is within a level of the
 * resize done in double, whose negative lobes the 8-bit pass between the
 * directions and the clamp leave alone on a picture this smooth. */
static void test_resize_lanczos(void **state) {
    (void)state;
    const int outs[][2] = {{56, 28}, {84, 140}, {5, 7}, {37, 23}, {300, 11}, {12, 60}};
    const uint8_t col[3] = {255, 0, 93};
    uint8_t rgb[37 * 23 * 3], one[37 * 23 * 3];
    smooth_and_flat(rgb, one, col);
    struct kvf_image *flat, *smooth, *out;
    assert_int_equal(kvf_image_from_rgb(37, 23, one, &flat), KVF_OK);
    assert_int_equal(kvf_image_from_rgb(37, 23, rgb, &smooth), KVF_OK);
    for (size_t k = 0; k < sizeof outs / sizeof *outs; k++) {
        const int ow = outs[k][0], oh = outs[k][1];
        assert_int_equal(image_resize(flat, ow, oh, IMAGE_LANCZOS, &out), KVF_OK);
        assert_int_equal(kvf_image_width(out), ow);
        assert_int_equal(kvf_image_height(out), oh);
        for (int i = 0; i < ow * oh * 3; i++)
            if (kvf_image_rgb(out)[i] != col[i % 3])
                fail_msg("flat -> %dx%d: byte %d: %d", ow, oh, i, kvf_image_rgb(out)[i]);
        kvf_image_free(out);
        assert_int_equal(image_resize(smooth, ow, oh, IMAGE_LANCZOS, &out), KVF_OK);
        double *wx = naive_weights(37, ow, lanczos3), *wy = naive_weights(23, oh, lanczos3);
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int c = 0; c < 3; c++) {
                    const double v = naive_resize(rgb, 37, 23, wx, wy, x, y, c);
                    const int got = kvf_image_rgb(out)[((size_t)y * ow + x) * 3 + c];
                    if (fabs(got - v) > 1.1)
                        fail_msg("smooth -> %dx%d at (%d, %d, %d): %d, in double %g", ow, oh, x, y, c, got, v);
                }
        free(wx);
        free(wy);
        kvf_image_free(out);
    }
    /* The same size is a copy; torchvision's filter is not Pillow's. */
    assert_int_equal(image_resize(smooth, 37, 23, IMAGE_LANCZOS, &out), KVF_OK);
    assert_memory_equal(kvf_image_rgb(out), rgb, sizeof rgb);
    kvf_image_free(out);
    assert_int_equal(image_resize(smooth, 0, 23, IMAGE_LANCZOS, &out), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_resize(smooth, 5, 5, IMAGE_TV_BICUBIC, &out), KVF_ERR_INVALID_ARG);
    assert_null(out);
    kvf_image_free(flat);
    kvf_image_free(smooth);
}

/* Idefics3's tiling (sizes checked against the processor in
 * tests/ref/hf_smolvlm_check.py): the longer side to `longest`, then to
 * multiples of the tile. */
static void test_idefics3_tiles(void **state) {
    (void)state;
    int r, c;
    assert_true(image_idefics3_tiles(30, 40, 1456, 364, true, &r, &c)); /* 1456 x 1092 -> 1456 x 1092 */
    assert_int_equal(r, 3);
    assert_int_equal(c, 4);
    assert_true(image_idefics3_tiles(333, 77, 1456, 364, true, &r, &c)); /* tall: 336 x 1456 */
    assert_int_equal(r, 4);
    assert_int_equal(c, 1);
    assert_true(image_idefics3_tiles(30, 40, 364, 364, true, &r, &c)); /* one tile: the global image alone */
    assert_int_equal(r, 0);
    assert_int_equal(c, 0);
    assert_true(image_idefics3_tiles(30, 40, 1456, 364, false, &r, &c));
    assert_int_equal(r + c, 0);
    assert_false(image_idefics3_tiles(30, 40, 5000, 364, true, &r, &c));
    assert_false(image_idefics3_tiles(30, 40, 1456, 0, true, &r, &c));
}

static void test_preprocess_args(void **state) {
    (void)state;
    const uint8_t px[3] = {1, 2, 3};
    struct kvf_image *img;
    assert_int_equal(kvf_image_from_rgb(1, 1, px, &img), KVF_OK);
    float out[3 * 4];
    const float zero[3] = {0.25f, 0.0f, 0.25f};
    assert_int_equal(image_preprocess_llava(img, 0, MEAN, STD, out), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_preprocess_llava(img, -3, MEAN, STD, out), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_preprocess_llava(img, 2, MEAN, zero, out), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_preprocess_llava(NULL, 2, MEAN, STD, out), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_preprocess_llava(img, 2, MEAN, STD, NULL), KVF_ERR_INVALID_ARG);
    assert_int_equal(image_preprocess_llava(img, 2, MEAN, STD, out), KVF_OK);
    kvf_image_free(img);
}

/* Qwen3-VL's video smart_resize, against transformers'
 * video_processing_qwen3_vl.smart_resize (factor 32, frames 2 at a time):
 * over the bound on all frames, under it, a side under 32 scaled up first,
 * and fewer frames than a temporal patch refused. */
static void test_smart_resize_video(void **state) {
    (void)state;
    static const struct { int n, h, w; int64_t lo, hi; int rh, rw; } cases[] = {
        {5, 190, 250, 4096, 102400, 96, 160},   {4, 190, 250, 131072, 786432, 192, 256},
        {3, 20, 700, 4096, 786432, 32, 1120},   {2, 9, 40, 4096, 1000000, 32, 128},
        {7, 1000, 30, 4096, 50000, 480, 32},    {2, 32, 32, 1000000, 2000000, 736, 736},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rh = 0, rw = 0;
        assert_true(image_smart_resize_video(cases[i].n, 2, cases[i].h, cases[i].w, 32, cases[i].lo, cases[i].hi, &rh,
                                             &rw));
        if (rh != cases[i].rh || rw != cases[i].rw)
            fail_msg("case %zu: %dx%d, want %dx%d", i, rw, rh, cases[i].rw, cases[i].rh);
    }
    int rh, rw;
    assert_false(image_smart_resize_video(1, 2, 190, 250, 32, 4096, 102400, &rh, &rw));
    assert_false(image_smart_resize_video(4, 2, 1, 300, 32, 4096, 102400, &rh, &rw)); /* aspect ratio 300 */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lossless_formats), cmocka_unit_test(test_jpeg),
        cmocka_unit_test(test_grey_to_rgb),      cmocka_unit_test(test_alpha_dropped),
        cmocka_unit_test(test_broken_files),     cmocka_unit_test(test_hostile_files),
        cmocka_unit_test(test_pixel_limit),
        cmocka_unit_test(test_from_rgb),         cmocka_unit_test(test_preprocess_pad),
        cmocka_unit_test(test_preprocess_resize), cmocka_unit_test(test_preprocess_tv_bicubic),
        cmocka_unit_test(test_resize_lanczos),    cmocka_unit_test(test_idefics3_tiles),
        cmocka_unit_test(test_preprocess_args),   cmocka_unit_test(test_smart_resize_video),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
