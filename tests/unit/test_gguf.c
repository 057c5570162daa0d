/* GGUF reader/writer: round trips, real vocab files, and hostile input
 * (truncation at every byte, byte flips, hand-crafted bad headers). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "io/gguf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------- byte builder (tests) -- */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_put(struct bb *b, const void *d, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        assert_non_null(b->p);
    }
    if (n) memcpy(b->p + b->n, d, n);
    b->n += n;
}
static void bb_u8(struct bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(struct bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_strn(struct bb *b, const char *s, size_t n) {
    bb_u64(b, n);
    bb_put(b, s, n);
}
static void bb_str(struct bb *b, const char *s) { bb_strn(b, s, strlen(s)); }
static void bb_pad(struct bb *b, size_t align) {
    while (b->n % align) bb_u8(b, 0);
}
static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bb_put(b, "GGUF", 4);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}
/* Key plus value type. */
static void bb_key(struct bb *b, const char *key, enum gguf_vtype t) {
    bb_str(b, key);
    bb_u32(b, t);
}

/* Parses a copy in a buffer of exactly n bytes so that ASan sees any read
 * past the end. */
static enum kvf_status parse_exact(const void *p, size_t n, struct gguf_file **f, void **copy) {
    *copy = malloc(n ? n : 1);
    assert_non_null(*copy);
    if (n) memcpy(*copy, p, n);
    return gguf_open_buffer(*copy, n, f);
}

static void expect_fail(const struct bb *b, enum kvf_status want, const char *msg_part) {
    struct gguf_file *f = (struct gguf_file *)1;
    void *copy;
    enum kvf_status st = parse_exact(b->p, b->n, &f, &copy);
    if (st != want || !strstr(kvf_last_error(), msg_part))
        fail_msg("want status %d with '%s', got %d: '%s'", want, msg_part, st, kvf_last_error());
    assert_null(f);
    free(copy);
}

static struct gguf_file *expect_ok(const struct bb *b, void **copy) {
    struct gguf_file *f = NULL;
    enum kvf_status st = parse_exact(b->p, b->n, &f, copy);
    if (st != KVF_OK) fail_msg("unexpected failure %d: %s", st, kvf_last_error());
    return f;
}

static size_t scalar_size(enum gguf_vtype t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* ------------------------------------------------- every value type -- */

static const enum gguf_vtype scalar_types[] = {GGUF_U8, GGUF_I8, GGUF_U16, GGUF_I16,
                                               GGUF_U32, GGUF_I32, GGUF_F32, GGUF_U64,
                                               GGUF_I64, GGUF_F64};
#define N_SCALAR_TYPES (sizeof scalar_types / sizeof scalar_types[0])

static void build_all_types(struct bb *b, uint32_t version) {
    bb_header(b, version, 1, 14 + N_SCALAR_TYPES + 9);
    bb_key(b, "u8", GGUF_U8); bb_u8(b, 200);
    bb_key(b, "i8", GGUF_I8); bb_u8(b, (uint8_t)-100);
    bb_key(b, "u16", GGUF_U16); uint16_t u16 = 60000; bb_put(b, &u16, 2);
    bb_key(b, "i16", GGUF_I16); int16_t i16 = -30000; bb_put(b, &i16, 2);
    bb_key(b, "u32", GGUF_U32); bb_u32(b, 4000000000u);
    bb_key(b, "i32", GGUF_I32); int32_t i32 = -2000000000; bb_put(b, &i32, 4);
    bb_key(b, "f32", GGUF_F32); float f32 = 1.5f; bb_put(b, &f32, 4);
    bb_key(b, "bool", GGUF_BOOL); bb_u8(b, 1);
    bb_key(b, "str", GGUF_STR); bb_str(b, "hello");
    bb_key(b, "str.empty", GGUF_STR); bb_str(b, "");
    bb_key(b, "str.nul", GGUF_STR); bb_strn(b, "a\0b", 3);
    bb_key(b, "u64", GGUF_U64); bb_u64(b, (1ull << 63) + 5);
    bb_key(b, "i64", GGUF_I64); bb_u64(b, (uint64_t)-(1ll << 62));
    bb_key(b, "f64", GGUF_F64); double f64 = -2.25; bb_put(b, &f64, 8);
    /* One 3-element array per scalar type, bytes 0x10.. as payload. */
    for (size_t k = 0; k < N_SCALAR_TYPES; k++) {
        char key[32];
        snprintf(key, sizeof key, "arr.t%d", (int)scalar_types[k]);
        bb_key(b, key, GGUF_ARR);
        bb_u32(b, scalar_types[k]);
        bb_u64(b, 3);
        for (size_t i = 0; i < 3 * scalar_size(scalar_types[k]); i++) bb_u8(b, (uint8_t)(0x10 + i));
    }
    bb_key(b, "arr.bool", GGUF_ARR); bb_u32(b, GGUF_BOOL); bb_u64(b, 3);
    bb_u8(b, 0); bb_u8(b, 1); bb_u8(b, 7);
    bb_key(b, "arr.str", GGUF_ARR); bb_u32(b, GGUF_STR); bb_u64(b, 3);
    bb_str(b, "a"); bb_str(b, ""); bb_str(b, "ccc");
    bb_key(b, "arr.empty", GGUF_ARR); bb_u32(b, GGUF_U32); bb_u64(b, 0);
    bb_key(b, "arr.str.empty", GGUF_ARR); bb_u32(b, GGUF_STR); bb_u64(b, 0);
    bb_key(b, "arr.nested", GGUF_ARR); bb_u32(b, GGUF_ARR); bb_u64(b, 2);
    bb_u32(b, GGUF_U32); bb_u64(b, 2); bb_u32(b, 7); bb_u32(b, 8);
    bb_u32(b, GGUF_STR); bb_u64(b, 1); bb_str(b, "x");
    bb_key(b, "arr.deep", GGUF_ARR); bb_u32(b, GGUF_ARR); bb_u64(b, 1);
    bb_u32(b, GGUF_ARR); bb_u64(b, 1);
    bb_u32(b, GGUF_I16); bb_u64(b, 1); bb_put(b, &i16, 2);
    bb_key(b, "arr.nested.empty", GGUF_ARR); bb_u32(b, GGUF_ARR); bb_u64(b, 0);
    bb_key(b, "general.alignment", GGUF_U32); bb_u32(b, 64);
    bb_key(b, "last", GGUF_STR); bb_str(b, "end");
    /* tensor t0: f32 [4] at offset 0 */
    bb_str(b, "t0"); bb_u32(b, 1); bb_u64(b, 4); bb_u32(b, 0); bb_u64(b, 0);
    bb_pad(b, 64);
    for (int i = 0; i < 4; i++) { float x = (float)i; bb_put(b, &x, 4); }
}

static void check_all_types(const struct gguf_file *f) {
    uint32_t u32;
    int64_t i64;
    float fl;
    bool bo;
    assert_int_equal(f->n_kv, 14 + N_SCALAR_TYPES + 9);
    assert_string_equal(f->kv[0].key.s, "u8"); /* file order kept */
    assert_string_equal(f->kv[f->n_kv - 1].key.s, "last");

    assert_true(gguf_get_u32(f, "u8", &u32)); assert_int_equal(u32, 200);
    assert_true(gguf_get_i64(f, "i8", &i64)); assert_int_equal(i64, -100);
    assert_false(gguf_get_u32(f, "i8", &u32));                    /* negative */
    assert_true(gguf_get_u32(f, "u16", &u32)); assert_int_equal(u32, 60000);
    assert_true(gguf_get_i64(f, "i16", &i64)); assert_int_equal(i64, -30000);
    assert_true(gguf_get_u32(f, "u32", &u32)); assert_true(u32 == 4000000000u);
    assert_true(gguf_get_i64(f, "u32", &i64)); assert_true(i64 == 4000000000ll);
    assert_true(gguf_get_i64(f, "i32", &i64)); assert_int_equal(i64, -2000000000);
    assert_false(gguf_get_u32(f, "u64", &u32));                   /* too big */
    assert_false(gguf_get_i64(f, "u64", &i64));                   /* too big */
    assert_true(gguf_find(f, "u64")->val.u == (1ull << 63) + 5);
    assert_true(gguf_get_i64(f, "i64", &i64)); assert_true(i64 == -(1ll << 62));
    assert_true(gguf_get_f32(f, "f32", &fl)); assert_true(fl == 1.5f);
    assert_true(gguf_get_f32(f, "f64", &fl)); assert_true(fl == -2.25f);
    assert_true(gguf_get_f32(f, "i16", &fl)); assert_true(fl == -30000.0f);
    assert_false(gguf_get_f32(f, "str", &fl));
    assert_false(gguf_get_u32(f, "f32", &u32));
    assert_true(gguf_get_bool(f, "bool", &bo)); assert_true(bo);
    assert_false(gguf_get_bool(f, "u8", &bo));
    assert_string_equal(gguf_get_str(f, "str"), "hello");
    assert_string_equal(gguf_get_str(f, "str.empty"), "");
    assert_int_equal(gguf_find(f, "str.empty")->val.str.len, 0);
    const struct gguf_kv *nul = gguf_find(f, "str.nul");
    assert_int_equal(nul->val.str.len, 3);
    assert_memory_equal(nul->val.str.s, "a\0b", 4);
    assert_null(gguf_get_str(f, "str.nul")); /* a C string would be its prefix ("llama\0x" is not llama) */
    assert_null(gguf_get_str(f, "u8"));
    assert_null(gguf_get_str(f, "missing"));
    assert_null(gguf_find(f, "u"));  /* prefix of a key */
    assert_null(gguf_find(f, "u80"));

    for (size_t k = 0; k < N_SCALAR_TYPES; k++) {
        char key[32];
        snprintf(key, sizeof key, "arr.t%d", (int)scalar_types[k]);
        const struct gguf_value *a = gguf_get_arr(f, key, scalar_types[k]);
        assert_non_null(a);
        assert_int_equal(a->arr.n, 3);
        uint8_t want[24];
        for (size_t i = 0; i < 3 * scalar_size(scalar_types[k]); i++) want[i] = (uint8_t)(0x10 + i);
        assert_memory_equal(a->arr.data, want, 3 * scalar_size(scalar_types[k]));
    }
    assert_null(gguf_get_arr(f, "arr.t4", GGUF_I32)); /* wrong element type */
    assert_null(gguf_get_arr(f, "u8", GGUF_U8));      /* not an array */

    const struct gguf_value *ab = gguf_get_arr(f, "arr.bool", GGUF_BOOL);
    assert_non_null(ab);
    const bool *bv = ab->arr.data;
    assert_false(bv[0]); assert_true(bv[1]); assert_true(bv[2]);

    const struct gguf_value *as = gguf_get_arr(f, "arr.str", GGUF_STR);
    assert_non_null(as);
    const struct gguf_str *sv = as->arr.data;
    assert_int_equal(as->arr.n, 3);
    assert_string_equal(sv[0].s, "a");
    assert_string_equal(sv[1].s, ""); assert_int_equal(sv[1].len, 0);
    assert_string_equal(sv[2].s, "ccc");

    assert_int_equal(gguf_get_arr(f, "arr.empty", GGUF_U32)->arr.n, 0);
    assert_int_equal(gguf_get_arr(f, "arr.str.empty", GGUF_STR)->arr.n, 0);
    assert_int_equal(gguf_get_arr(f, "arr.nested.empty", GGUF_ARR)->arr.n, 0);

    const struct gguf_value *an = gguf_get_arr(f, "arr.nested", GGUF_ARR);
    assert_non_null(an);
    assert_int_equal(an->arr.n, 2);
    const struct gguf_value *inner = an->arr.data;
    assert_int_equal(inner[0].type, GGUF_ARR);
    assert_int_equal(inner[0].arr.type, GGUF_U32);
    assert_int_equal(inner[0].arr.n, 2);
    uint32_t two[2];
    memcpy(two, inner[0].arr.data, 8);
    assert_int_equal(two[0], 7); assert_int_equal(two[1], 8);
    assert_int_equal(inner[1].arr.type, GGUF_STR);
    assert_string_equal(((const struct gguf_str *)inner[1].arr.data)[0].s, "x");

    const struct gguf_value *ad = gguf_get_arr(f, "arr.deep", GGUF_ARR);
    const struct gguf_value *l2 = ad->arr.data;
    assert_int_equal(l2->arr.type, GGUF_ARR);
    const struct gguf_value *l3 = l2->arr.data;
    assert_int_equal(l3->arr.type, GGUF_I16);
    int16_t deep;
    memcpy(&deep, l3->arr.data, 2);
    assert_int_equal(deep, -30000);

    assert_int_equal(f->alignment, 64);
    assert_int_equal(f->data_offset % 64, 0);
    assert_int_equal(f->n_tensors, 1);
    const struct gguf_tensor *t = gguf_find_tensor(f, "t0");
    assert_non_null(t);
    assert_null(gguf_find_tensor(f, "t1"));
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->ne[0], 4);
    assert_int_equal(t->ne[1], 1);
    assert_int_equal(t->ne[3], 1);
    assert_int_equal(t->nbytes, 16);
    assert_ptr_equal(t->data, f->base + f->data_offset);
    float x[4];
    memcpy(x, t->data, 16);
    assert_true(x[0] == 0.0f && x[3] == 3.0f);
}

static void test_all_value_types(void **state) {
    (void)state;
    for (uint32_t version = 2; version <= 3; version++) {
        struct bb b = {0};
        build_all_types(&b, version);
        void *copy;
        struct gguf_file *f = expect_ok(&b, &copy);
        assert_int_equal(f->version, version);
        assert_ptr_equal(f->base, copy);
        assert_null(f->map);
        check_all_types(f);
        gguf_close(f);
        free(copy);
        free(b.p);
    }
}

/* ------------------------------------------------------------ writer -- */

struct wt { const char *name; uint32_t type; int n_dims; int64_t ne[4]; size_t nbytes; };
static const struct wt writer_tensors[] = {
    {"a.f32", 0, 1, {5}, 20},                  /* not a multiple of 32: padding follows */
    {"b.f16", 1, 2, {3, 2}, 12},
    {"c.q8_0", 8, 2, {64, 3}, 2 * 34 * 3},
    {"d.q4_K", 12, 3, {256, 1, 2}, 144 * 2},
    {"e.bf16", 30, 4, {2, 2, 2, 2}, 32},
};
#define N_WT (sizeof writer_tensors / sizeof writer_tensors[0])

static uint8_t tensor_byte(size_t t, size_t i) { return (uint8_t)(t * 31 + i * 7 + 1); }

static void writer_fill(struct gguf_writer *w) {
    gguf_writer_set_str(w, "general.architecture", "test");
    gguf_writer_set_u32(w, "general.alignment", 32);
    gguf_writer_set_u32(w, "n.u32", 4000000000u);
    gguf_writer_set_i32(w, "n.i32", -7);
    gguf_writer_set_f32(w, "n.f32", 0.125f);
    gguf_writer_set_bool(w, "n.bool", true);
    gguf_writer_set_str(w, "s.empty", "");
    const uint8_t u8s[] = {1, 2, 255};
    gguf_writer_set_arr(w, "a.u8", GGUF_U8, u8s, 3);
    const int16_t i16s[] = {-1, 2, -300, 4};
    gguf_writer_set_arr(w, "a.i16", GGUF_I16, i16s, 4);
    const float f32s[] = {0.5f, -1.0f};
    gguf_writer_set_arr(w, "a.f32", GGUF_F32, f32s, 2);
    const uint64_t u64s[] = {UINT64_MAX, 0};
    gguf_writer_set_arr(w, "a.u64", GGUF_U64, u64s, 2);
    const double f64s[] = {1e300};
    gguf_writer_set_arr(w, "a.f64", GGUF_F64, f64s, 1);
    const bool bools[] = {true, false, true};
    gguf_writer_set_arr(w, "a.bool", GGUF_BOOL, bools, 3);
    gguf_writer_set_arr(w, "a.empty", GGUF_I32, NULL, 0);
    const char *strs[] = {"one", "", "three"};
    gguf_writer_set_arr_str(w, "a.str", strs, 3);
    gguf_writer_set_arr_str(w, "a.str.empty", NULL, 0);
    struct gguf_str gs[] = {{1, "z"}, {0, ""}};
    gguf_writer_set_arr(w, "a.gstr", GGUF_STR, gs, 2);
    const uint32_t inner_u32[] = {10, 20, 30};
    struct gguf_value nested[2] = {
        {.type = GGUF_ARR, .arr = {GGUF_U32, 3, (void *)inner_u32}},
        {.type = GGUF_ARR, .arr = {GGUF_STR, 2, gs}},
    };
    gguf_writer_set_arr(w, "a.nested", GGUF_ARR, nested, 2);
    for (size_t t = 0; t < N_WT; t++) {
        uint8_t data[512];
        for (size_t i = 0; i < writer_tensors[t].nbytes; i++) data[i] = tensor_byte(t, i);
        gguf_writer_add_tensor(w, writer_tensors[t].name, writer_tensors[t].type,
                               writer_tensors[t].n_dims, writer_tensors[t].ne, data);
    }
}

static const char *tmp_path(const char *name) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", KVF_TEST_TMP, name);
    return path;
}

static void check_writer_file(const struct gguf_file *f) {
    assert_int_equal(f->version, 3);
    assert_int_equal(f->alignment, 32);
    assert_int_equal(f->data_offset % 32, 0);
    assert_int_equal(f->n_kv, 18);
    static const char *order[] = {"general.architecture", "general.alignment", "n.u32"};
    for (int i = 0; i < 3; i++) assert_string_equal(f->kv[i].key.s, order[i]);
    assert_string_equal(f->kv[17].key.s, "a.nested");

    uint32_t u32;
    int64_t i64;
    float fl;
    bool bo;
    assert_string_equal(gguf_get_str(f, "general.architecture"), "test");
    assert_true(gguf_get_u32(f, "n.u32", &u32) && u32 == 4000000000u);
    assert_true(gguf_get_i64(f, "n.i32", &i64) && i64 == -7);
    assert_true(gguf_get_f32(f, "n.f32", &fl) && fl == 0.125f);
    assert_true(gguf_get_bool(f, "n.bool", &bo) && bo);
    assert_string_equal(gguf_get_str(f, "s.empty"), "");
    const struct gguf_value *a = gguf_get_arr(f, "a.u8", GGUF_U8);
    assert_int_equal(a->arr.n, 3);
    assert_memory_equal(a->arr.data, ((uint8_t[]){1, 2, 255}), 3);
    a = gguf_get_arr(f, "a.i16", GGUF_I16);
    assert_memory_equal(a->arr.data, ((int16_t[]){-1, 2, -300, 4}), 8);
    a = gguf_get_arr(f, "a.f32", GGUF_F32);
    assert_memory_equal(a->arr.data, ((float[]){0.5f, -1.0f}), 8);
    a = gguf_get_arr(f, "a.u64", GGUF_U64);
    assert_memory_equal(a->arr.data, ((uint64_t[]){UINT64_MAX, 0}), 16);
    a = gguf_get_arr(f, "a.f64", GGUF_F64);
    assert_memory_equal(a->arr.data, ((double[]){1e300}), 8);
    a = gguf_get_arr(f, "a.bool", GGUF_BOOL);
    assert_memory_equal(a->arr.data, ((bool[]){true, false, true}), 3);
    assert_int_equal(gguf_get_arr(f, "a.empty", GGUF_I32)->arr.n, 0);
    a = gguf_get_arr(f, "a.str", GGUF_STR);
    const struct gguf_str *s = a->arr.data;
    assert_int_equal(a->arr.n, 3);
    assert_string_equal(s[0].s, "one");
    assert_int_equal(s[1].len, 0);
    assert_string_equal(s[2].s, "three");
    assert_int_equal(gguf_get_arr(f, "a.str.empty", GGUF_STR)->arr.n, 0);
    a = gguf_get_arr(f, "a.gstr", GGUF_STR);
    assert_string_equal(((const struct gguf_str *)a->arr.data)[0].s, "z");
    a = gguf_get_arr(f, "a.nested", GGUF_ARR);
    assert_int_equal(a->arr.n, 2);
    const struct gguf_value *in = a->arr.data;
    assert_int_equal(in[0].arr.type, GGUF_U32);
    assert_memory_equal(in[0].arr.data, ((uint32_t[]){10, 20, 30}), 12);
    assert_int_equal(in[1].arr.type, GGUF_STR);
    assert_int_equal(in[1].arr.n, 2);
    assert_string_equal(((const struct gguf_str *)in[1].arr.data)[0].s, "z");

    assert_int_equal(f->n_tensors, N_WT);
    uint64_t want_off = 0;
    for (size_t t = 0; t < N_WT; t++) {
        const struct wt *w = &writer_tensors[t];
        const struct gguf_tensor *g = &f->tensors[t]; /* insertion order */
        assert_string_equal(g->name.s, w->name);
        assert_ptr_equal(gguf_find_tensor(f, w->name), g);
        assert_int_equal(g->type, w->type);
        assert_int_equal(g->n_dims, w->n_dims);
        for (int d = 0; d < 4; d++) assert_int_equal(g->ne[d], d < w->n_dims ? w->ne[d] : 1);
        assert_int_equal(g->nbytes, w->nbytes);
        assert_int_equal(g->offset, want_off); /* packed as llama.cpp requires */
        want_off += (w->nbytes + 31) / 32 * 32;
        for (size_t i = 0; i < w->nbytes; i++)
            assert_int_equal(((const uint8_t *)g->data)[i], tensor_byte(t, i));
    }
    assert_int_equal(f->size, f->data_offset + want_off);
}

static void test_writer_roundtrip(void **state) {
    (void)state;
    const char *path = tmp_path("test_gguf_roundtrip.gguf");
    struct gguf_writer *w = gguf_writer_init();
    assert_non_null(w);
    writer_fill(w);
    assert_int_equal(gguf_writer_write(w, path), KVF_OK);
    gguf_writer_free(w);

    struct gguf_file *f;
    if (gguf_open(path, &f) != KVF_OK) fail_msg("%s", kvf_last_error());
    assert_non_null(f->map);
    assert_ptr_equal(f->base, f->map);
    check_writer_file(f);
    gguf_close(f);
    unlink(path);
}

static void writer_expect_error(struct gguf_writer *w, const char *msg_part) {
    enum kvf_status st = gguf_writer_write(w, tmp_path("test_gguf_bad.gguf"));
    assert_int_not_equal(st, KVF_OK);
    if (!strstr(kvf_last_error(), msg_part))
        fail_msg("want '%s' in '%s'", msg_part, kvf_last_error());
    gguf_writer_free(w);
}

static void test_writer_errors(void **state) {
    (void)state;
    float data[256] = {0};
    int64_t ne[4] = {8, 1, 1, 1};
    struct gguf_writer *w = gguf_writer_init();
    gguf_writer_set_u32(w, "k", 1);
    gguf_writer_set_str(w, "k", "again");
    writer_expect_error(w, "duplicate key 'k'");

    w = gguf_writer_init();
    gguf_writer_add_tensor(w, "t", 0, 1, ne, data);
    gguf_writer_add_tensor(w, "t", 0, 1, ne, data);
    writer_expect_error(w, "duplicate tensor 't'");

    w = gguf_writer_init();
    gguf_writer_add_tensor(w, "t", 99, 1, ne, data);
    writer_expect_error(w, "type 99");

    w = gguf_writer_init();
    int64_t ne33[1] = {33};
    gguf_writer_add_tensor(w, "q", 8, 1, ne33, data); /* q8_0 rows need multiples of 32 */
    writer_expect_error(w, "tensor 'q'");

    w = gguf_writer_init();
    gguf_writer_add_tensor(w, "t", 0, 5, ne, data);
    writer_expect_error(w, "n_dims 5");

    w = gguf_writer_init();
    gguf_writer_set_u32(w, "general.alignment", 64);
    writer_expect_error(w, "alignment");

    w = gguf_writer_init();
    gguf_writer_set_str(w, "", "x");
    writer_expect_error(w, "empty key");

    w = gguf_writer_init();
    gguf_writer_set_u32(w, "ok", 1);
    assert_int_equal(gguf_writer_write(w, "/nonexistent-dir/x.gguf"), KVF_ERR_IO);
    gguf_writer_free(w);
    gguf_writer_free(NULL);
}

/* -------------------------------------------------------- real vocabs -- */

static void test_real_vocab_files(void **state) {
    (void)state;
    const char *dir = KVF_SHARED_DIR "/testdata/tokenizer";
    if (access(dir, R_OK) != 0) {
        print_message("skipping: %s is absent\n", dir);
        skip();
    }
    struct gguf_file *f;
    uint32_t u32;
    bool bo;
    if (gguf_open(KVF_SHARED_DIR "/testdata/tokenizer/ggml-vocab-llama-spm.gguf", &f) != KVF_OK)
        fail_msg("%s", kvf_last_error());
    assert_int_equal(f->n_tensors, 0);
    assert_string_equal(gguf_get_str(f, "general.architecture"), "llama");
    assert_string_equal(gguf_get_str(f, "tokenizer.ggml.model"), "llama");
    const struct gguf_value *tok = gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STR);
    assert_non_null(tok);
    assert_int_equal(tok->arr.n, 32000);
    assert_string_equal(((const struct gguf_str *)tok->arr.data)[1].s, "<s>");
    assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.scores", GGUF_F32)->arr.n, 32000);
    assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.token_type", GGUF_I32)->arr.n, 32000);
    assert_true(gguf_get_u32(f, "tokenizer.ggml.bos_token_id", &u32) && u32 == 1);
    assert_true(gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &bo) && bo);
    gguf_close(f);

    if (gguf_open(KVF_SHARED_DIR "/testdata/tokenizer/ggml-vocab-gpt-2.gguf", &f) != KVF_OK)
        fail_msg("%s", kvf_last_error());
    assert_string_equal(gguf_get_str(f, "tokenizer.ggml.model"), "gpt2");
    assert_string_equal(gguf_get_str(f, "tokenizer.ggml.pre"), "gpt-2");
    assert_int_equal(gguf_get_arr(f, "tokenizer.ggml.tokens", GGUF_STR)->arr.n, 50257);
    const struct gguf_value *merges = gguf_get_arr(f, "tokenizer.ggml.merges", GGUF_STR);
    assert_int_equal(merges->arr.n, 50000);
    assert_string_equal(((const struct gguf_str *)merges->arr.data)[0].s, "\xc4\xa0 t");
    assert_true(gguf_get_u32(f, "tokenizer.ggml.eos_token_id", &u32) && u32 == 50256);
    gguf_close(f);
}

/* --------------------------------------------------------- corruption -- */

/* A small writer-made file, read back into memory. */
static uint8_t *small_file(size_t *size) {
    const char *path = tmp_path("test_gguf_small.gguf");
    struct gguf_writer *w = gguf_writer_init();
    writer_fill(w);
    assert_int_equal(gguf_writer_write(w, path), KVF_OK);
    gguf_writer_free(w);
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    *size = (size_t)ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *p = malloc(*size);
    assert_int_equal(fread(p, 1, *size, fp), *size);
    fclose(fp);
    unlink(path);
    return p;
}

/* Reads every byte a successful parse exposes, so ASan checks the pointers. */
static unsigned touch_value(const struct gguf_value *v) {
    unsigned h = v->type;
    if (v->type == GGUF_STR) {
        for (uint64_t i = 0; i <= v->str.len; i++) h += (uint8_t)v->str.s[i];
    } else if (v->type == GGUF_ARR) {
        if (v->arr.type == GGUF_STR) {
            const struct gguf_str *s = v->arr.data;
            for (uint64_t i = 0; i < v->arr.n; i++) {
                struct gguf_value e = {.type = GGUF_STR, .str = s[i]};
                h += touch_value(&e);
            }
        } else if (v->arr.type == GGUF_ARR) {
            for (uint64_t i = 0; i < v->arr.n; i++)
                h += touch_value(&((const struct gguf_value *)v->arr.data)[i]);
        } else {
            size_t es = scalar_size(v->arr.type);
            assert_true(es > 0);
            for (size_t i = 0; i < v->arr.n * es; i++) h += ((const uint8_t *)v->arr.data)[i];
        }
    }
    return h;
}

static void check_consistent(const struct gguf_file *f) {
    volatile unsigned h = 0;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        h += touch_value(&f->kv[i].val);
        assert_ptr_equal(gguf_find(f, f->kv[i].key.s), &f->kv[i]);
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        assert_ptr_equal(gguf_find_tensor(f, t->name.s), t);
        const uint8_t *d = t->data;
        assert_true(d >= f->base + f->data_offset);
        assert_true(t->nbytes <= f->size && d + t->nbytes <= f->base + f->size);
        if (t->nbytes) h += d[0] + d[t->nbytes - 1];
    }
    (void)h;
}

static void test_truncation(void **state) {
    (void)state;
    size_t size;
    uint8_t *file = small_file(&size);
    struct gguf_file *f;
    void *copy;
    assert_int_equal(parse_exact(file, size, &f, &copy), KVF_OK);
    size_t needed = 0; /* end of the last tensor's data */
    for (uint64_t i = 0; i < f->n_tensors; i++)
        needed = KVF_MAX(needed, f->data_offset + f->tensors[i].offset + f->tensors[i].nbytes);
    gguf_close(f);
    free(copy);
    assert_true(needed <= size && needed + 32 > size);

    for (size_t len = 0; len < size; len++) {
        enum kvf_status st = parse_exact(file, len, &f, &copy);
        if (len < needed) {
            if (st == KVF_OK) fail_msg("prefix of %zu/%zu bytes accepted", len, size);
            assert_int_equal(st, KVF_ERR_FORMAT);
            assert_null(f);
            assert_non_null(strstr(kvf_last_error(), "gguf:"));
        } else { /* only trailing padding cut */
            assert_int_equal(st, KVF_OK);
            check_consistent(f);
            gguf_close(f);
        }
        free(copy);
    }
    free(file);
}

static void test_byte_flips(void **state) {
    (void)state;
    size_t size;
    uint8_t *file = small_file(&size);
    struct gguf_file *f;
    void *copy;
    assert_int_equal(parse_exact(file, size, &f, &copy), KVF_OK);
    size_t data_offset = f->data_offset;
    gguf_close(f);
    free(copy);

    uint8_t *mut = malloc(size);
    unsigned n_ok = 0, n_err = 0;
    for (size_t pos = 0; pos < data_offset; pos++) {
        const uint8_t orig = file[pos];
        const uint8_t vals[] = {0x00, 0xff, 0x7f, (uint8_t)(orig ^ 0x01), (uint8_t)(orig ^ 0x80),
                                (uint8_t)(orig + 1)};
        for (size_t k = 0; k < sizeof vals; k++) {
            if (vals[k] == orig) continue;
            memcpy(mut, file, size);
            mut[pos] = vals[k];
            enum kvf_status st = parse_exact(mut, size, &f, &copy);
            if (st == KVF_OK) {
                check_consistent(f);
                gguf_close(f);
                n_ok++;
            } else {
                assert_true(st == KVF_ERR_FORMAT || st == KVF_ERR_UNSUPPORTED);
                assert_non_null(strstr(kvf_last_error(), "gguf:"));
                n_err++;
            }
            free(copy);
        }
    }
    /* Both outcomes must occur: flips in values are harmless, flips in
     * lengths and counts are not. */
    assert_true(n_ok > 0 && n_err > 0);

    /* Tensor data is opaque: flipping it never affects parsing. */
    uint64_t rng = 0x9e3779b97f4a7c15ull;
    for (int i = 0; i < 200; i++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        size_t pos = data_offset + (size_t)(rng >> 33) % (size - data_offset);
        memcpy(mut, file, size);
        mut[pos] ^= (uint8_t)(1u << (rng >> 29 & 7));
        assert_int_equal(parse_exact(mut, size, &f, &copy), KVF_OK);
        check_consistent(f);
        gguf_close(f);
        free(copy);
    }
    free(mut);
    free(file);
}

/* One tensor info after an optional general.alignment key, then padding and
 * data_len bytes of data. */
static void build_tensor_file(struct bb *b, uint32_t alignment, uint32_t n_dims,
                              const uint64_t *ne, uint32_t type, uint64_t offset,
                              size_t data_len) {
    bb_header(b, 3, 1, alignment ? 1 : 0);
    if (alignment) {
        bb_key(b, "general.alignment", GGUF_U32);
        bb_u32(b, alignment);
    }
    bb_str(b, "w");
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++) bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
    bb_pad(b, alignment ? alignment : 32);
    for (size_t i = 0; i < data_len; i++) bb_u8(b, (uint8_t)i);
}

#define HOSTILE_TENSOR(want, msg, n_dims, type, offset, data_len, ...)                         \
    do {                                                                                       \
        struct bb b_ = {0};                                                                    \
        const uint64_t ne_[] = {__VA_ARGS__};                                                  \
        build_tensor_file(&b_, 0, n_dims, ne_, type, offset, data_len);                        \
        expect_fail(&b_, want, msg);                                                           \
        free(b_.p);                                                                            \
    } while (0)

static void test_hostile_tensors(void **state) {
    (void)state;
    const uint64_t big = 1ull << 32;
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "n_dims 5", 5, 0, 0, 64, 1, 1, 1, 1, 1);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "n_dims 0", 0, 0, 0, 64, 1);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "dimension 1 has invalid size 0", 2, 0, 0, 64, 4, 0);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "invalid size -1", 1, 0, 0, 64, (uint64_t)-1);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "element count overflows", 3, 0, 0, 64, 2, big, big);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "byte size overflows", 1, 0, 0, 64, 1ull << 62);
    HOSTILE_TENSOR(KVF_ERR_UNSUPPORTED, "type 99", 1, 99, 0, 64, 4);
    HOSTILE_TENSOR(KVF_ERR_UNSUPPORTED, "type 4294967295", 1, UINT32_MAX, 0, 64, 4);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "block size 32", 1, 8, 0, 64, 33);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "beyond the end", 1, 0, 64, 64, 16);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "beyond the end", 1, 0, 0, 63, 16);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "beyond the end", 1, 0, UINT64_MAX - 31, 64, 16);
    HOSTILE_TENSOR(KVF_ERR_FORMAT, "not a multiple of the alignment", 1, 0, 16, 64, 4);

    /* Exactly fitting data is fine; the tensor error names the tensor. */
    struct bb b = {0};
    const uint64_t ne16[] = {16};
    build_tensor_file(&b, 0, 1, ne16, 0, 0, 64);
    void *copy;
    struct gguf_file *f = expect_ok(&b, &copy);
    gguf_close(f);
    free(copy);
    b.n--;
    expect_fail(&b, KVF_ERR_FORMAT, "tensor 'w'");
    free(b.p);

    /* Alignment from the key: 64 is honoured, 0 and 3 are rejected. */
    b = (struct bb){0};
    build_tensor_file(&b, 64, 1, ne16, 0, 64, 128);
    f = expect_ok(&b, &copy);
    assert_int_equal(f->alignment, 64);
    assert_int_equal(f->data_offset % 64, 0);
    assert_ptr_equal(f->tensors[0].data, f->base + f->data_offset + 64);
    gguf_close(f);
    free(copy);
    free(b.p);
    b = (struct bb){0};
    build_tensor_file(&b, 64, 1, ne16, 0, 32, 128);
    expect_fail(&b, KVF_ERR_FORMAT, "alignment 64");
    free(b.p);
    for (uint32_t al = 0; al < 4; al += 3) {
        b = (struct bb){0};
        bb_header(&b, 3, 0, 1);
        bb_key(&b, "general.alignment", GGUF_U32);
        bb_u32(&b, al);
        expect_fail(&b, KVF_ERR_FORMAT, "not a power of two");
        free(b.p);
    }
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_key(&b, "general.alignment", GGUF_U64);
    bb_u64(&b, 32);
    expect_fail(&b, KVF_ERR_FORMAT, "must be of type u32");
    free(b.p);

    /* Two tensors: duplicates and overlaps are rejected, any order is fine. */
    const struct { const char *n2; uint64_t off1, off2; enum kvf_status want; const char *msg; }
        pairs[] = {
            {"y", 0, 32, KVF_OK, ""},
            {"y", 32, 0, KVF_OK, ""},
            {"y", 0, 0, KVF_ERR_FORMAT, "overlaps"},
            {"y", 32, 32, KVF_ERR_FORMAT, "overlaps"},
            {"x", 0, 32, KVF_ERR_FORMAT, "duplicate tensor name"},
        };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        b = (struct bb){0};
        bb_header(&b, 3, 2, 0);
        const char *names[2] = {"x", pairs[i].n2};
        uint64_t offs[2] = {pairs[i].off1, pairs[i].off2};
        for (int t = 0; t < 2; t++) {
            bb_str(&b, names[t]);
            bb_u32(&b, 1);
            bb_u64(&b, 8); /* f32 x 8 = 32 bytes */
            bb_u32(&b, 0);
            bb_u64(&b, offs[t]);
        }
        bb_pad(&b, 32);
        for (int k = 0; k < 64; k++) bb_u8(&b, 0);
        if (pairs[i].want == KVF_OK) {
            f = expect_ok(&b, &copy);
            assert_int_equal(f->n_tensors, 2);
            gguf_close(f);
            free(copy);
        } else {
            expect_fail(&b, pairs[i].want, pairs[i].msg);
        }
        free(b.p);
    }
}

static void test_hostile_headers(void **state) {
    (void)state;
    struct bb b = {0};

    bb_put(&b, "GGUG", 4); bb_u32(&b, 3); bb_u64(&b, 0); bb_u64(&b, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "bad magic");
    free(b.p);
    const uint32_t versions[] = {0, 1, 4, 0x03000000};
    for (size_t i = 0; i < 4; i++) {
        b = (struct bb){0};
        bb_header(&b, versions[i], 0, 0);
        expect_fail(&b, KVF_ERR_UNSUPPORTED, "version");
        free(b.p);
    }
    b = (struct bb){0};
    bb_header(&b, 3, 0, 0);
    void *copy;
    struct gguf_file *f = expect_ok(&b, &copy); /* minimal valid file */
    assert_int_equal(f->n_kv + f->n_tensors, 0);
    assert_null(gguf_find(f, "x"));
    assert_null(gguf_find_tensor(f, "x"));
    gguf_close(f);
    free(copy);
    free(b.p);

    b = (struct bb){0};
    bb_header(&b, 3, 0, 1ull << 63);
    expect_fail(&b, KVF_ERR_FORMAT, "key count 9223372036854775808");
    free(b.p);
    b = (struct bb){0};
    bb_header(&b, 3, 1ull << 63, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "tensor count");
    free(b.p);

    /* Key with length 2^62, then a value string of 2^62 and of one byte more
     * than remains. */
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_u64(&b, 1ull << 62);
    bb_put(&b, "abcdefghijklmnop", 16);
    expect_fail(&b, KVF_ERR_FORMAT, "key length 4611686018427387904");
    free(b.p);
    const uint64_t lens[] = {1ull << 62, 5};
    for (int i = 0; i < 2; i++) {
        b = (struct bb){0};
        bb_header(&b, 3, 0, 1);
        bb_key(&b, "s", GGUF_STR);
        bb_u64(&b, lens[i]);
        bb_put(&b, "abcd", 4);
        expect_fail(&b, KVF_ERR_FORMAT, "key 's': string value length");
        free(b.p);
    }

    /* Arrays whose count cannot fit in the file. */
    const enum gguf_vtype big_elems[] = {GGUF_U64, GGUF_U8, GGUF_STR, GGUF_ARR};
    for (int i = 0; i < 4; i++) {
        b = (struct bb){0};
        bb_header(&b, 3, 0, 1);
        bb_key(&b, "a", GGUF_ARR);
        bb_u32(&b, big_elems[i]);
        bb_u64(&b, i == 1 ? 65 : 1ull << 60); /* 65 u8 with 64 bytes left */
        for (int k = 0; k < 64; k++) bb_u8(&b, 0);
        expect_fail(&b, KVF_ERR_FORMAT, "key 'a': array of");
        free(b.p);
    }

    /* Nesting: 8 levels of arrays are accepted, 9 and 1000 are not. */
    const int depths[] = {8, 9, 1000};
    for (int i = 0; i < 3; i++) {
        b = (struct bb){0};
        bb_header(&b, 3, 0, 1);
        bb_key(&b, "deep", GGUF_ARR);
        for (int d = 1; d < depths[i]; d++) {
            bb_u32(&b, GGUF_ARR);
            bb_u64(&b, 1);
        }
        bb_u32(&b, GGUF_U8);
        bb_u64(&b, 0);
        if (depths[i] <= 8) {
            f = expect_ok(&b, &copy);
            gguf_close(f);
            free(copy);
        } else {
            expect_fail(&b, KVF_ERR_FORMAT, "nested deeper");
        }
        free(b.p);
    }

    /* Unknown value / element types, bad keys, duplicates. */
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_key(&b, "k", 13);
    bb_u64(&b, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "unknown value type 13");
    free(b.p);
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_key(&b, "k", GGUF_ARR);
    bb_u32(&b, 0xffffffffu);
    bb_u64(&b, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "unknown array element type 4294967295");
    free(b.p);
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_key(&b, "", GGUF_U8);
    bb_u64(&b, 0); /* enough bytes left for the key count check */
    expect_fail(&b, KVF_ERR_FORMAT, "key is empty");
    free(b.p);
    b = (struct bb){0};
    bb_header(&b, 3, 0, 1);
    bb_strn(&b, "a\0b", 3);
    bb_u32(&b, GGUF_U8);
    bb_u8(&b, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "contains NUL");
    free(b.p);
    b = (struct bb){0};
    bb_header(&b, 3, 0, 3);
    bb_key(&b, "dup", GGUF_U8); bb_u8(&b, 0);
    bb_key(&b, "other", GGUF_U8); bb_u8(&b, 0);
    bb_key(&b, "dup", GGUF_STR); bb_str(&b, "x");
    expect_fail(&b, KVF_ERR_FORMAT, "key 'dup': duplicate key");
    free(b.p);

    /* Many keys: the duplicate check must not be quadratic. */
    b = (struct bb){0};
    const uint64_t many = 100000;
    bb_header(&b, 3, 0, many);
    for (uint64_t i = 0; i < many; i++) {
        char key[24];
        snprintf(key, sizeof key, "k%llu", (unsigned long long)(i * 7919 % many));
        bb_key(&b, key, GGUF_U8);
        bb_u8(&b, (uint8_t)i);
    }
    f = expect_ok(&b, &copy);
    assert_int_equal(gguf_find(f, "k7919")->val.u, 1);
    gguf_close(f);
    free(copy);
    free(b.p);

    /* Tensor table truncated inside the padding before the data. */
    b = (struct bb){0};
    bb_header(&b, 3, 1, 0);
    bb_str(&b, "t"); bb_u32(&b, 1); bb_u64(&b, 1); bb_u32(&b, 0); bb_u64(&b, 0);
    expect_fail(&b, KVF_ERR_FORMAT, "padding");
    free(b.p);

    f = (struct gguf_file *)1;
    assert_int_equal(gguf_open_buffer("", 0, &f), KVF_ERR_FORMAT);
    assert_null(f);
    assert_int_equal(gguf_open_buffer(NULL, 4, &f), KVF_ERR_INVALID_ARG);
}

static void test_open_errors(void **state) {
    (void)state;
    struct gguf_file *f = (struct gguf_file *)1;
    assert_int_equal(gguf_open(KVF_TEST_TMP, &f), KVF_ERR_IO);
    assert_null(f);
    assert_non_null(strstr(kvf_last_error(), "not a regular file"));
    assert_int_equal(gguf_open(tmp_path("test_gguf_missing.gguf"), &f), KVF_ERR_IO);

    const char *empty = tmp_path("test_gguf_empty.gguf");
    FILE *fp = fopen(empty, "wb");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(gguf_open(empty, &f), KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "empty"));

    fp = fopen(empty, "wb"); /* bad file: the message names the path */
    fputs("GGUF\x01", fp);
    fclose(fp);
    assert_int_equal(gguf_open(empty, &f), KVF_ERR_FORMAT);
    assert_non_null(strstr(kvf_last_error(), "test_gguf_empty.gguf"));
    unlink(empty);
    gguf_close(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_all_value_types),
        cmocka_unit_test(test_writer_roundtrip),
        cmocka_unit_test(test_writer_errors),
        cmocka_unit_test(test_real_vocab_files),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_byte_flips),
        cmocka_unit_test(test_hostile_tensors),
        cmocka_unit_test(test_hostile_headers),
        cmocka_unit_test(test_open_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
