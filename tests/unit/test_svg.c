/* The SVG writer: well-formed XML (tags balanced, text escaped), one
 * polyline and legend entry per series, points on log axes that cannot be
 * drawn skipped, kept maps with one cell per grid position and an embedded
 * PNG that decodes to the PNG signature, clean errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "svg.h"

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
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; (p = strstr(p, what)); p++) n++;
    return n;
}

static void test_chart(void **st) {
    (void)st;
    const double x[4] = {0.05, 0.1, 0.5, 1.0}, y1[4] = {0.2, 0.4, 0.9, 1.0}, y2[4] = {0.1, NAN, 0.7, 1.0};
    const double xz[3] = {0, -1, 0.5}, yz[3] = {1, 2, 3};
    const struct svg_series s[3] = {{"snapkv", 4, x, y1}, {"a<b&c", 4, x, y2}, {"zero x", 3, xz, yz}};
    const struct svg_chart c = {"Quality \"vs\" budget", "budget", "accuracy", true, false, s, 3};
    const char *path = KVF_TEST_TMP "/chart.svg";
    char err[256];
    assert_int_equal(svg_line_chart(path, &c, err, sizeof err), 0);
    char *t = slurp(path);
    assert_well_formed(t);
    assert_int_equal(count(t, "<polyline"), 3);
    assert_int_equal(count(t, "<circle"), 4 + 3 + 1); /* the NaN and the non-positive x on a log axis are skipped */
    assert_int_equal(count(t, ">snapkv<"), 1);
    assert_int_equal(count(t, "a&lt;b&amp;c"), 1);
    assert_non_null(strstr(t, "&quot;vs&quot;"));
    free(t);
    /* one point, and no series at all */
    const struct svg_series one = {"one", 1, x, y1};
    const struct svg_chart c1 = {"one", "x", "y", false, true, &one, 1}, c0 = {"none", "x", "y", false, false, NULL, 0};
    assert_int_equal(svg_line_chart(path, &c1, err, sizeof err), 0);
    t = slurp(path);
    assert_well_formed(t);
    assert_int_equal(count(t, "<circle"), 1);
    free(t);
    assert_int_equal(svg_line_chart(path, &c0, err, sizeof err), 0);
    t = slurp(path);
    assert_well_formed(t);
    assert_non_null(strstr(t, "no data"));
    free(t);
    assert_int_equal(svg_line_chart("/nonexistent-dir/x.svg", &c, err, sizeof err), -1);
    assert_non_null(strstr(err, "/nonexistent-dir/x.svg"));
}

static int b64v(char c) {
    return c >= 'A' && c <= 'Z' ? c - 'A' : c >= 'a' && c <= 'z' ? c - 'a' + 26 : c >= '0' && c <= '9' ? c - '0' + 52
           : c == '+' ? 62 : c == '/' ? 63 : -1;
}

static void test_kept_map(void **st) {
    (void)st;
    enum { R = 6, C = 8 };
    unsigned char state[R * C];
    for (int i = 0; i < R * C; i++) state[i] = (unsigned char)(i % 3);
    uint8_t rgb[20 * 10 * 3];
    for (size_t i = 0; i < sizeof rgb; i++) rgb[i] = (uint8_t)(i * 7);
    const char *path = KVF_TEST_TMP "/map.svg";
    char err[256];
    assert_int_equal(svg_kept_map(path, "layer 3 <head 0>", R, C, state, NULL, 0, 0, err, sizeof err), 0);
    char *t = slurp(path);
    assert_well_formed(t);
    assert_int_equal(count(t, "fill=\"#009E73\""), R * C / 3 + 1); /* kept cells + the legend swatch */
    assert_int_equal(count(t, "fill=\"#E69F00\""), R * C / 3 + 1);
    assert_non_null(strstr(t, "kept: 16"));
    assert_null(strstr(t, "<image"));
    free(t);
    assert_int_equal(svg_kept_map(path, "with image", R, C, state, rgb, 20, 10, err, sizeof err), 0);
    t = slurp(path);
    assert_well_formed(t);
    const char *d = strstr(t, "data:image/png;base64,");
    assert_non_null(d);
    d += strlen("data:image/png;base64,");
    unsigned char head[8];
    for (int i = 0; i < 2; i++) { /* 8 bytes = the first 12 characters, 4 -> 3 */
        const unsigned v = (unsigned)b64v(d[4 * i]) << 18 | (unsigned)b64v(d[4 * i + 1]) << 12 |
                           (unsigned)b64v(d[4 * i + 2]) << 6 | (unsigned)b64v(d[4 * i + 3]);
        head[3 * i] = (unsigned char)(v >> 16), head[3 * i + 1] = (unsigned char)(v >> 8), head[3 * i + 2] = (unsigned char)v;
    }
    const unsigned v = (unsigned)b64v(d[8]) << 18 | (unsigned)b64v(d[9]) << 12 | (unsigned)b64v(d[10]) << 6;
    head[6] = (unsigned char)(v >> 16), head[7] = (unsigned char)(v >> 8);
    assert_memory_equal(head, "\x89PNG\r\n\x1a\n", 8);
    const char *end = strchr(d, '"');
    assert_true((end - d) % 4 == 0);
    free(t);
    assert_int_equal(svg_kept_map(path, "x", 0, C, state, NULL, 0, 0, err, sizeof err), -1);
    assert_int_equal(svg_kept_map(path, "x", R, C, NULL, NULL, 0, 0, err, sizeof err), -1);
    assert_int_equal(svg_kept_map(path, "x", R, C, state, rgb, 0, 10, err, sizeof err), -1);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_chart), cmocka_unit_test(test_kept_map)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
