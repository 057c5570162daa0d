/* safetensors reader/writer and config.json parsing: round trips, sharded
 * directories, corrupted and hostile files, and the config families. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "io/json.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------------ helpers -- */

static char tmp_dir[512];

static int tmp_setup(void **state) {
    (void)state;
    snprintf(tmp_dir, sizeof tmp_dir, "%s/st_test_XXXXXX", KVF_TEST_TMP);
    return mkdtemp(tmp_dir) ? 0 : -1;
}

static void tmp_clean(void) {
    DIR *d = opendir(tmp_dir);
    if (!d) return;
    struct dirent *e;
    char p[1024];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
        unlink(p);
    }
    closedir(d);
}

/* Each test starts from an empty directory, even after a failed one. */
static int test_teardown(void **state) {
    (void)state;
    tmp_clean();
    return 0;
}

static int tmp_teardown(void **state) {
    (void)state;
    tmp_clean();
    rmdir(tmp_dir);
    return 0;
}

/* Rotates through a few buffers so that two results can be used together. */
static const char *tmp_path(const char *name) {
    static char p[4][1024];
    static int next;
    char *r = p[next++ % 4];
    snprintf(r, sizeof p[0], "%s/%s", tmp_dir, name);
    return r;
}

static void write_text(const char *name, const char *text) {
    FILE *f = fopen(tmp_path(name), "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

static uint8_t *read_bytes(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return b;
}

/* A safetensors image with the given header text, header length field and
 * data bytes (0, 1, 2... so that tensors differ). Exactly sized on the heap
 * so ASan catches any read past the end. */
static uint8_t *make_file(const char *header, uint64_t hlen_field, size_t data_len, size_t *size) {
    size_t h = strlen(header);
    *size = 8 + h + data_len;
    uint8_t *b = malloc(*size ? *size : 1);
    assert_non_null(b);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen_field >> (8 * i));
    memcpy(b + 8, header, h);
    for (size_t i = 0; i < data_len; i++) b[8 + h + i] = (uint8_t)i;
    return b;
}

static enum kvf_status open_header(const char *header, size_t data_len) {
    size_t size;
    uint8_t *b = make_file(header, strlen(header), data_len, &size);
    struct st_set *s = NULL;
    enum kvf_status st = st_open_buffer(b, size, &s);
    if (st == KVF_OK) assert_non_null(s);
    else assert_null(s);
    st_close(s);
    free(b);
    return st;
}

static size_t elem_size(enum dtype t) { return t == DT_F32 ? 4 : 2; }

static void assert_tensor_eq(const struct st_tensor *got, const struct st_tensor *want) {
    assert_non_null(got);
    assert_string_equal(got->name, want->name);
    assert_int_equal(got->type, want->type);
    assert_int_equal(got->n_dims, want->n_dims);
    for (int d = 0; d < want->n_dims; d++) assert_int_equal(got->shape[d], want->shape[d]);
    assert_int_equal(got->nbytes, want->nbytes);
    if (want->nbytes) assert_memory_equal(got->data, want->data, want->nbytes);
}

/* Five tensors of every supported dtype, a scalar and an empty one. */
struct sample {
    float a[6];
    uint16_t b[4], c[8];
    float scalar;
    struct st_tensor t[5];
};

static void sample_init(struct sample *s) {
    for (int i = 0; i < 6; i++) s->a[i] = 0.5f * (float)i - 1.0f;
    /* Raw bit patterns: the container does not interpret them. */
    static const uint16_t h[4] = {0x0000, 0x3400, 0x3800, 0xbc00}; /* 0, .25, .5, -1 in f16 */
    static const uint16_t bf[8] = {0x3f80, 0xc040, 0x0000, 0x7f80, 0x4049, 0x8000, 0x3e80, 0xbf00};
    memcpy(s->b, h, sizeof h);
    memcpy(s->c, bf, sizeof bf);
    s->scalar = 3.25f;
    s->t[0] = (struct st_tensor){.name = "model.a.weight", .type = DT_F32, .n_dims = 2, .shape = {2, 3},
                                 .data = s->a, .nbytes = sizeof s->a};
    s->t[1] = (struct st_tensor){.name = "b", .type = DT_F16, .n_dims = 1, .shape = {4},
                                 .data = s->b, .nbytes = sizeof s->b};
    s->t[2] = (struct st_tensor){.name = "c.bf16", .type = DT_BF16, .n_dims = 3, .shape = {2, 2, 2},
                                 .data = s->c, .nbytes = sizeof s->c};
    s->t[3] = (struct st_tensor){.name = "scalar", .type = DT_F32, .n_dims = 0, .data = &s->scalar,
                                 .nbytes = 4};
    s->t[4] = (struct st_tensor){.name = "empty \"quoted\"", .type = DT_F16, .n_dims = 2, .shape = {0, 5},
                                 .data = NULL, .nbytes = 0};
}

/* --------------------------------------------------------- round trip -- */

static void test_roundtrip(void **state) {
    (void)state;
    struct sample smp;
    sample_init(&smp);
    const char *path = tmp_path("rt.safetensors");
    assert_int_equal(st_write(path, smp.t, 5), KVF_OK);

    size_t size;
    uint8_t *raw = read_bytes(path, &size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | raw[i];
    assert_int_equal(hlen % 8, 0);
    assert_true(raw[8] == '{');
    size_t data_bytes = 0;
    for (int i = 0; i < 5; i++) data_bytes += smp.t[i].nbytes;
    assert_int_equal(size, 8 + hlen + data_bytes);
    /* Data are laid out in the given order right after the header. */
    assert_memory_equal(raw + 8 + hlen, smp.a, sizeof smp.a);
    free(raw);

    struct st_set *s;
    assert_int_equal(st_open(path, &s), KVF_OK);
    assert_int_equal(st_count(s), 5);
    for (int i = 0; i < 5; i++) {
        assert_tensor_eq(st_at(s, i), &smp.t[i]);
        assert_ptr_equal(st_find(s, smp.t[i].name), st_at(s, i));
        assert_int_equal((uintptr_t)st_at(s, i)->data % elem_size(smp.t[i].type), 0);
    }
    assert_null(st_at(s, 5));
    assert_null(st_at(s, -1));
    assert_null(st_find(s, "model.a"));
    assert_null(st_find(s, "zzz"));
    assert_int_equal(st_at(s, 3)->n_dims, 0);
    assert_int_equal(*(const float *)st_at(s, 3)->data, 3.25f);
    st_close(s);

    /* A directory holding model.safetensors opens too. */
    assert_int_equal(rename(path, tmp_path("model.safetensors")), 0);
    assert_int_equal(st_open(tmp_dir, &s), KVF_OK);
    assert_int_equal(st_count(s), 5);
    assert_tensor_eq(st_find(s, "c.bf16"), &smp.t[2]);
    st_close(s);

    /* An empty file set is valid. */
    assert_int_equal(st_write(tmp_path("none.safetensors"), NULL, 0), KVF_OK);
    assert_int_equal(st_open(tmp_path("none.safetensors"), &s), KVF_OK);
    assert_int_equal(st_count(s), 0);
    assert_null(st_find(s, "a"));
    st_close(s);
}

/* Many tensors: lookup must find each one (the index is sorted, not linear). */
static void test_many_tensors(void **state) {
    (void)state;
    enum { N = 300 };
    static struct st_tensor t[N];
    static char names[N][32];
    static float vals[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "layers.%d.w", (i * 7919) % N);
        vals[i] = (float)i;
        t[i] = (struct st_tensor){.name = names[i], .type = DT_F32, .n_dims = 1, .shape = {1},
                                  .data = &vals[i], .nbytes = 4};
    }
    const char *path = tmp_path("many.safetensors");
    assert_int_equal(st_write(path, t, N), KVF_OK);
    struct st_set *s;
    assert_int_equal(st_open(path, &s), KVF_OK);
    assert_int_equal(st_count(s), N);
    for (int i = 0; i < N; i++) {
        const struct st_tensor *x = st_find(s, names[i]);
        assert_non_null(x);
        assert_int_equal(*(const float *)x->data, (float)i);
    }
    st_close(s);
}

static void test_write_errors(void **state) {
    (void)state;
    struct sample smp;
    sample_init(&smp);
    const char *path = tmp_path("bad.safetensors");
    struct st_tensor t[2] = {smp.t[0], smp.t[1]};

    t[1].name = t[0].name;
    assert_int_equal(st_write(path, t, 2), KVF_ERR_INVALID_ARG);
    t[1] = smp.t[1];
    t[1].nbytes = 6;
    assert_int_equal(st_write(path, t, 2), KVF_ERR_INVALID_ARG);
    t[1] = smp.t[1];
    t[1].type = DT_Q4_0;
    assert_int_equal(st_write(path, t, 2), KVF_ERR_UNSUPPORTED);
    t[1] = smp.t[1];
    t[1].n_dims = ST_MAX_DIMS + 1;
    assert_int_equal(st_write(path, t, 2), KVF_ERR_INVALID_ARG);
    t[1] = smp.t[1];
    t[1].shape[0] = -4;
    assert_int_equal(st_write(path, t, 2), KVF_ERR_INVALID_ARG);
    /* No data: a hole of zeros (shape tests of model-sized files). */
    t[1] = smp.t[1];
    t[1].data = NULL;
    assert_int_equal(st_write(path, t, 2), KVF_OK);
    struct st_set *hole;
    assert_int_equal(st_open(path, &hole), KVF_OK);
    const struct st_tensor *ht = st_find(hole, t[1].name);
    assert_non_null(ht);
    assert_int_equal(ht->nbytes, t[1].nbytes);
    for (size_t i = 0; i < ht->nbytes; i++) assert_int_equal(((const uint8_t *)ht->data)[i], 0);
    st_close(hole);
    remove(path);
    t[1] = smp.t[1];
    t[1].name = "__metadata__";
    assert_int_equal(st_write(path, t, 2), KVF_ERR_INVALID_ARG);
    assert_int_equal(st_write(path, t, -1), KVF_ERR_INVALID_ARG);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(st_write("/nonexistent-dir/x.safetensors", smp.t, 1), KVF_ERR_IO);
    assert_true(strlen(kvf_last_error()) > 0);
}

/* ------------------------------------------------------------- shards -- */

static void write_shards(struct sample *smp) {
    assert_int_equal(st_write(tmp_path("model-00001-of-00002.safetensors"), smp->t, 2), KVF_OK);
    assert_int_equal(st_write(tmp_path("model-00002-of-00002.safetensors"), smp->t + 2, 3), KVF_OK);
}

static enum kvf_status open_index(const char *weight_map) {
    char text[2048];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 64}, \"weight_map\": %s}", weight_map);
    write_text("model.safetensors.index.json", text);
    struct st_set *s = NULL;
    enum kvf_status st = st_open(tmp_dir, &s);
    if (st) assert_null(s);
    st_close(s);
    return st;
}

#define SHARD1 "model-00001-of-00002.safetensors"
#define SHARD2 "model-00002-of-00002.safetensors"
#define GOOD_MAP                                                                                   \
    "{\"model.a.weight\": \"" SHARD1 "\", \"b\": \"" SHARD1 "\", \"c.bf16\": \"" SHARD2             \
    "\", \"scalar\": \"" SHARD2 "\", \"empty \\\"quoted\\\"\": \"" SHARD2 "\"}"

static void test_sharded(void **state) {
    (void)state;
    struct sample smp;
    sample_init(&smp);
    write_shards(&smp);
    assert_int_equal(open_index(GOOD_MAP), KVF_OK);

    struct st_set *s;
    assert_int_equal(st_open(tmp_dir, &s), KVF_OK);
    assert_int_equal(st_count(s), 5);
    for (int i = 0; i < 5; i++) assert_tensor_eq(st_find(s, smp.t[i].name), &smp.t[i]);
    st_close(s);

    /* A shard named in the index but absent. */
    assert_int_equal(open_index("{\"model.a.weight\": \"" SHARD1 "\", \"x\": \"missing.safetensors\"}"),
                     KVF_ERR_IO);
    /* Shard names that leave the directory. */
    assert_int_equal(open_index("{\"b\": \"../x.safetensors\"}"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{\"b\": \"sub/" SHARD1 "\"}"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{\"b\": \"/etc/passwd\"}"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{\"b\": \"\"}"), KVF_ERR_FORMAT);
    /* A tensor listed in the wrong shard, or in none. */
    assert_int_equal(open_index("{\"b\": \"" SHARD2 "\", \"c.bf16\": \"" SHARD1 "\"}"), KVF_ERR_FORMAT);
    assert_true(strstr(kvf_last_error(), "b") != NULL);
    assert_int_equal(open_index("{\"nope\": \"" SHARD1 "\"}"), KVF_ERR_FORMAT);
    assert_true(strstr(kvf_last_error(), "nope") != NULL);
    /* Ill-typed index content. */
    assert_int_equal(open_index("[]"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{}"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{\"b\": 3}"), KVF_ERR_FORMAT);
    assert_int_equal(open_index("{\"b\": \"" SHARD1 "\", \"b\": \"" SHARD1 "\"}"), KVF_ERR_FORMAT);
    write_text("model.safetensors.index.json", "{\"weight_map\": {\"b\": ");
    assert_int_equal(st_open(tmp_dir, &s), KVF_ERR_FORMAT);

    /* The same tensor stored in two shards. */
    assert_int_equal(st_write(tmp_path(SHARD2), smp.t + 1, 4), KVF_OK);
    assert_int_equal(open_index(GOOD_MAP), KVF_ERR_FORMAT);
    assert_true(strstr(kvf_last_error(), "twice") != NULL);
}

static void test_open_errors(void **state) {
    (void)state;
    struct st_set *s = (struct st_set *)&s;
    assert_int_equal(st_open(tmp_path("does-not-exist"), &s), KVF_ERR_IO);
    assert_null(s);
    assert_int_equal(st_open(tmp_dir, &s), KVF_ERR_IO); /* empty directory */
    write_text("tiny.safetensors", "abc");
    assert_int_equal(st_open(tmp_path("tiny.safetensors"), &s), KVF_ERR_FORMAT);
    write_text("empty.safetensors", "");
    assert_int_equal(st_open(tmp_path("empty.safetensors"), &s), KVF_ERR_FORMAT);
    assert_int_equal(st_open(NULL, &s), KVF_ERR_INVALID_ARG);
    assert_int_equal(st_open_buffer(NULL, 0, &s), KVF_ERR_FORMAT);
}

/* --------------------------------------------------------- corruption -- */

static uint8_t *sample_bytes(size_t *size) {
    struct sample smp;
    sample_init(&smp);
    const char *path = tmp_path("sample.safetensors");
    assert_int_equal(st_write(path, smp.t, 5), KVF_OK);
    uint8_t *b = read_bytes(path, size);
    unlink(path);
    return b;
}

/* An accepted buffer must only point inside itself. */
static void assert_in_bounds(const struct st_set *s, const uint8_t *buf, size_t size) {
    for (int i = 0; i < st_count(s); i++) {
        const struct st_tensor *t = st_at(s, i);
        const uint8_t *p = t->data;
        assert_true(p >= buf && p <= buf + size && t->nbytes <= (size_t)(buf + size - p));
        assert_true(t->n_dims >= 0 && t->n_dims <= ST_MAX_DIMS);
    }
}

static void test_truncation(void **state) {
    (void)state;
    size_t size;
    uint8_t *full = sample_bytes(&size);
    for (size_t len = 0; len < size; len++) {
        uint8_t *b = malloc(len ? len : 1);
        memcpy(b, full, len);
        struct st_set *s = NULL;
        enum kvf_status st = st_open_buffer(b, len, &s);
        assert_int_equal(st, KVF_ERR_FORMAT);
        assert_null(s);
        free(b);
    }
    struct st_set *s;
    assert_int_equal(st_open_buffer(full, size, &s), KVF_OK);
    assert_int_equal(st_count(s), 5);
    st_close(s);
    free(full);
}

static void test_byte_flips(void **state) {
    (void)state;
    size_t size;
    uint8_t *orig = sample_bytes(&size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | orig[i];
    static const uint8_t masks[] = {0x01, 0x02, 0x08, 0x20, 0x80, 0xff};
    int accepted = 0, rejected = 0;
    uint8_t *b = malloc(size);
    for (size_t pos = 0; pos < 8 + hlen; pos++) {
        for (size_t m = 0; m < sizeof masks; m++) {
            memcpy(b, orig, size);
            b[pos] ^= masks[m];
            struct st_set *s = NULL;
            enum kvf_status st = st_open_buffer(b, size, &s);
            if (st == KVF_OK) {
                assert_in_bounds(s, b, size);
                accepted++;
            } else {
                assert_true(st == KVF_ERR_FORMAT || st == KVF_ERR_UNSUPPORTED);
                assert_null(s);
                rejected++;
            }
            st_close(s);
        }
    }
    /* Most flips break the JSON or the sizes; some (inside names or the
     * padding) are harmless. */
    assert_true(rejected > accepted);
    assert_true(accepted > 0);
    free(b);
    free(orig);
}

/* The items cJSON made of a tree. */
static size_t json_items(const cJSON *j) {
    size_t n = 1;
    for (const cJSON *c = j->child; c; c = c->next) n += json_items(c);
    return n;
}

/* json_values_bound is at least the items cJSON makes, exactly that for
 * texts without empty containers; commas, brackets and escaped quotes
 * inside strings count nothing. A text over JSON_VALUES_MAX is refused
 * before it is parsed: 4M+1 zeros in an array. */
static void test_json_values(void **state) {
    (void)state;
    const char *texts[] = {
        "0", "\"a,[{\"", "[1,2,3]", "{\"a\":1,\"b\":[true,null,{\"c\":\"x\\\",y\"}]}",
        "[[],{},[[]]]", "{\"k,\":\"[{,\",\"v\":[\"\\\\\",1]}", " [ 1 , { \"a\" : [ 2 ] } ] ",
    };
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        cJSON *j = NULL;
        assert_int_equal(json_parse_text("t", texts[i], strlen(texts[i]), &j), KVF_OK);
        const size_t items = json_items(j), bound = json_values_bound(texts[i], strlen(texts[i]));
        assert_true(bound >= items);
        if (!strstr(texts[i], "[]") && !strstr(texts[i], "{}")) assert_int_equal(bound, items);
        cJSON_Delete(j);
    }
    const size_t n = JSON_VALUES_MAX + 1, len = 2 * n + 1;
    char *big = malloc(len);
    for (size_t i = 0; i < n; i++) big[2 * i] = i ? ',' : '[', big[2 * i + 1] = '0';
    big[len - 1] = ']';
    assert_int_equal(json_values_bound(big, len), n + 1);
    cJSON *j = NULL;
    assert_int_equal(json_parse_text("big", big, len, &j), KVF_ERR_FORMAT);
    assert_null(j);
    free(big);
}

static void test_hostile_headers(void **state) {
    (void)state;
    size_t size;
    struct st_set *s = NULL;
    const char *ok_hdr = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";

    /* Header length field beyond the file, and absurd. */
    uint8_t *b = make_file(ok_hdr, (uint64_t)1 << 63, 8, &size);
    assert_int_equal(st_open_buffer(b, size, &s), KVF_ERR_FORMAT);
    free(b);
    b = make_file(ok_hdr, strlen(ok_hdr) + 9, 8, &size);
    assert_int_equal(st_open_buffer(b, size, &s), KVF_ERR_FORMAT);
    free(b);
    b = make_file(ok_hdr, UINT64_MAX, 8, &size);
    assert_int_equal(st_open_buffer(b, size, &s), KVF_ERR_FORMAT);
    free(b);
    /* Header length shorter than the JSON: it is cut. */
    b = make_file(ok_hdr, strlen(ok_hdr) - 1, 8, &size);
    assert_int_equal(st_open_buffer(b, size, &s), KVF_ERR_FORMAT);
    free(b);

    assert_int_equal(open_header(ok_hdr, 8), KVF_OK);
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}   ", 8), KVF_OK);
    assert_int_equal(open_header("{\"__metadata__\":{\"format\":\"pt\"},\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
                                 "\"data_offsets\":[0,8]}}", 8), KVF_OK);
    assert_int_equal(open_header("{}", 0), KVF_OK);

    /* Not JSON, or not an object. */
    static const char *not_objects[] = {"", "{", "[1,2]", "\"x\"", "null", "7", "{} x", "{\"a\":}",
                                        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}",
                                        "\x01\x02"};
    for (size_t i = 0; i < sizeof not_objects / sizeof *not_objects; i++)
        assert_int_equal(open_header(not_objects[i], 8), KVF_ERR_FORMAT);

    /* Bad entries. */
    static const char *bad[] = {
        "{\"a\":5}",
        "{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":4,\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"Q4\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":2,\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[-2,-1],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[\"2\"],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1e300],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296,4294967296],\"data_offsets\":[0,8]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[4611686018427387904],\"data_offsets\":[0,8]}}",
        /* no bytes (a zero dimension) but the others overflow once multiplied */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[0,4294967296,4294967296],\"data_offsets\":[0,0]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,4]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,1000]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[-8,0]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,16]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,\"8\"]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[1e20,1e20]}}",
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":{\"0\":8}}}",
        "{\"__metadata__\":\"x\",\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
        /* duplicate key */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
        "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
        /* overlapping ranges */
        "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[4,8]}}",
        "{\"a\":{\"dtype\":\"F16\",\"shape\":[3],\"data_offsets\":[2,8]},"
        "\"b\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        enum kvf_status st = open_header(bad[i], 8);
        if (st != KVF_ERR_FORMAT) fail_msg("case %zu (%s): status %d", i, bad[i], st);
        assert_true(strlen(kvf_last_error()) > 0);
    }

    /* Valid dtypes kvfold does not read are UNSUPPORTED, naming tensor and dtype. */
    assert_int_equal(open_header("{\"tok.ids\":{\"dtype\":\"I8\",\"shape\":[8],\"data_offsets\":[0,8]}}", 8),
                     KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "tok.ids"));
    assert_non_null(strstr(kvf_last_error(), "I8"));
    assert_int_equal(open_header("{\"x\":{\"dtype\":\"F64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8),
                     KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "F64"));

    /* Gaps and empty tensors sharing an offset are fine; order in the file
     * need not follow the header. */
    assert_int_equal(open_header("{\"a\":{\"dtype\":\"F16\",\"shape\":[0],\"data_offsets\":[2,2]},"
                                 "\"b\":{\"dtype\":\"F16\",\"shape\":[0,3],\"data_offsets\":[2,2]},"
                                 "\"c\":{\"dtype\":\"F16\",\"shape\":[1],\"data_offsets\":[6,8]},"
                                 "\"d\":{\"dtype\":\"BF16\",\"shape\":[1],\"data_offsets\":[0,2]}}", 8),
                     KVF_OK);
}

/* ------------------------------------------------------------ configs -- */

static enum kvf_status load_config(const char *json, struct hf_config *cfg) {
    write_text("config.json", json);
    memset(cfg, 0x5a, sizeof *cfg);
    return hf_config_load(tmp_dir, cfg);
}

/* SmolLM2-135M-Instruct's config.json. */
static const char *smollm2 =
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
    " \"bos_token_id\": 1, \"eos_token_id\": 2, \"hidden_act\": \"silu\", \"hidden_size\": 576,"
    " \"initializer_range\": 0.041666666666666664, \"intermediate_size\": 1536, \"is_llama_config\": true,"
    " \"max_position_embeddings\": 8192, \"model_type\": \"llama\", \"num_attention_heads\": 9,"
    " \"num_hidden_layers\": 30, \"num_key_value_heads\": 3, \"pad_token_id\": 2, \"pretraining_tp\": 1,"
    " \"rms_norm_eps\": 1e-05, \"rope_interleaved\": false, \"rope_scaling\": null, \"rope_theta\": 100000,"
    " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.42.3\","
    " \"use_cache\": true, \"vocab_size\": 49152}";

static void test_config_llama(void **state) {
    (void)state;
    struct hf_config c;
    assert_int_equal(load_config(smollm2, &c), KVF_OK);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.hidden_size, 576);
    assert_int_equal(c.intermediate_size, 1536);
    assert_int_equal(c.num_hidden_layers, 30);
    assert_int_equal(c.num_attention_heads, 9);
    assert_int_equal(c.num_key_value_heads, 3);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.vocab_size, 49152);
    assert_int_equal(c.max_position_embeddings, 8192);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.sliding_window_pattern, 0);
    assert_float_equal(c.rms_norm_eps, 1e-5f, 1e-12);
    assert_float_equal(c.rope_theta, 100000.0f, 0);
    assert_float_equal(c.rope_local_base_freq, 100000.0f, 0);
    assert_float_equal(c.query_pre_attn_scalar, 64.0f, 0);
    assert_true(c.tie_word_embeddings);
    assert_false(c.attention_bias);
    assert_int_equal(c.bos_token_id, 1);
    assert_int_equal(c.eos_token_id, 2);

    /* A file path works as well as its directory. */
    struct hf_config d;
    assert_int_equal(hf_config_load(tmp_path("config.json"), &d), KVF_OK);
    assert_int_equal(d.num_hidden_layers, 30);

    /* Optional fields take LlamaConfig's defaults; ids are -1 when absent. */
    assert_int_equal(load_config("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}",
                                 &c), KVF_OK);
    assert_int_equal(c.num_key_value_heads, 4);
    assert_int_equal(c.head_dim, 16);
    assert_int_equal(c.max_position_embeddings, 2048);
    assert_float_equal(c.rms_norm_eps, 1e-6f, 1e-12);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_false(c.tie_word_embeddings);
    assert_int_equal(c.bos_token_id, -1);
    assert_int_equal(c.eos_token_id, -1);

    /* Mistral is read as Llama, with its window; eos may be a list. */
    assert_int_equal(load_config("{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
                                 " \"vocab_size\": 100, \"sliding_window\": 4096, \"eos_token_id\": [7, 8],"
                                 " \"head_dim\": 32}", &c), KVF_OK);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.eos_token_id, 7);
    assert_int_equal(c.head_dim, 32);
    assert_int_equal(load_config("{\"model_type\": \"mistral\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100,"
                                 " \"sliding_window\": null, \"eos_token_id\": []}", &c), KVF_OK);
    assert_int_equal(c.sliding_window, 0);
    assert_int_equal(c.eos_token_id, -1);
}

/* Qwen2.5-0.5B-Instruct's config.json. */
static void test_config_qwen2(void **state) {
    (void)state;
    struct hf_config c;
    const char *qwen =
        "{\"architectures\": [\"Qwen2ForCausalLM\"], \"attention_dropout\": 0.0, \"bos_token_id\": 151643,"
        " \"eos_token_id\": 151645, \"hidden_act\": \"silu\", \"hidden_size\": 896, \"initializer_range\": 0.02,"
        " \"intermediate_size\": 4864, \"max_position_embeddings\": 32768, \"max_window_layers\": 21,"
        " \"model_type\": \"qwen2\", \"num_attention_heads\": 14, \"num_hidden_layers\": 24,"
        " \"num_key_value_heads\": 2, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000.0,"
        " \"sliding_window\": 32768, \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\","
        " \"transformers_version\": \"4.43.1\", \"use_cache\": true, \"use_sliding_window\": false,"
        " \"vocab_size\": 151936}";
    assert_int_equal(load_config(qwen, &c), KVF_OK);
    assert_string_equal(c.arch, "qwen2");
    assert_int_equal(c.hidden_size, 896);
    assert_int_equal(c.num_attention_heads, 14);
    assert_int_equal(c.num_key_value_heads, 2);
    assert_int_equal(c.head_dim, 64);
    assert_int_equal(c.num_hidden_layers, 24);
    assert_int_equal(c.vocab_size, 151936);
    assert_int_equal(c.sliding_window, 0); /* use_sliding_window is false */
    assert_true(c.attention_bias);
    assert_true(c.tie_word_embeddings);
    assert_float_equal(c.rope_theta, 1e6f, 0);
    assert_int_equal(c.bos_token_id, 151643);
    assert_int_equal(c.eos_token_id, 151645);

    assert_int_equal(load_config("{\"model_type\": \"qwen2\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100,"
                                 " \"use_sliding_window\": true}", &c), KVF_ERR_UNSUPPORTED);
}

/* gemma-3-270m's config.json (transformers 4.55: layer_types). */
static const char *gemma270m =
    "{\"_sliding_window_pattern\": 6, \"architectures\": [\"Gemma3ForCausalLM\"], \"attention_bias\": false,"
    " \"attention_dropout\": 0.0, \"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"eos_token_id\": 1,"
    " \"final_logit_softcapping\": null, \"head_dim\": 256, \"hidden_activation\": \"gelu_pytorch_tanh\","
    " \"hidden_size\": 640, \"initializer_range\": 0.02, \"intermediate_size\": 2048, \"layer_types\": ["
    " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
    " \"sliding_attention\", \"full_attention\", \"sliding_attention\", \"sliding_attention\","
    " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"full_attention\","
    " \"sliding_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\","
    " \"sliding_attention\", \"full_attention\"], \"max_position_embeddings\": 32768,"
    " \"model_type\": \"gemma3_text\", \"num_attention_heads\": 4, \"num_hidden_layers\": 18,"
    " \"num_key_value_heads\": 1, \"pad_token_id\": 0, \"query_pre_attn_scalar\": 256, \"rms_norm_eps\": 1e-06,"
    " \"rope_local_base_freq\": 10000.0, \"rope_scaling\": null, \"rope_theta\": 1000000.0,"
    " \"sliding_window\": 512, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.55.0.dev0\","
    " \"use_bidirectional_attention\": false, \"use_cache\": true, \"vocab_size\": 262144}";

static void test_config_gemma3(void **state) {
    (void)state;
    struct hf_config c;
    assert_int_equal(load_config(gemma270m, &c), KVF_OK);
    assert_string_equal(c.arch, "gemma3");
    assert_int_equal(c.hidden_size, 640);
    assert_int_equal(c.intermediate_size, 2048);
    assert_int_equal(c.num_hidden_layers, 18);
    assert_int_equal(c.num_attention_heads, 4);
    assert_int_equal(c.num_key_value_heads, 1);
    assert_int_equal(c.head_dim, 256); /* not hidden / heads = 160 */
    assert_int_equal(c.vocab_size, 262144);
    assert_int_equal(c.sliding_window, 512);
    assert_int_equal(c.sliding_window_pattern, 6);
    assert_float_equal(c.rope_theta, 1e6f, 0);
    assert_float_equal(c.rope_local_base_freq, 1e4f, 0);
    assert_float_equal(c.query_pre_attn_scalar, 256.0f, 0);
    assert_true(c.tie_word_embeddings); /* Gemma3TextConfig default */
    assert_int_equal(c.bos_token_id, 2);
    assert_int_equal(c.eos_token_id, 1);

    /* Older style: sliding_window_pattern, no layer_types; Gemma defaults. */
    assert_int_equal(load_config("{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"vocab_size\": 300,"
                                 " \"sliding_window_pattern\": 2}", &c), KVF_OK);
    assert_int_equal(c.sliding_window_pattern, 2);
    assert_int_equal(c.sliding_window, 4096);
    assert_int_equal(c.head_dim, 256);
    assert_float_equal(c.rope_theta, 1e6f, 0);
    assert_float_equal(c.rope_local_base_freq, 1e4f, 0);

    /* layer_types that no period explains. */
    assert_int_equal(
        load_config("{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                    " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"vocab_size\": 300,"
                    " \"layer_types\": [\"full_attention\", \"sliding_attention\", \"sliding_attention\"]}",
                    &c),
        KVF_ERR_UNSUPPORTED);
    assert_int_equal(load_config("{\"model_type\": \"gemma3_text\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"vocab_size\": 300,"
                                 " \"layer_types\": [\"full_attention\"]}", &c), KVF_ERR_FORMAT);

    /* The multimodal Gemma 3 config nests the text part. */
    assert_int_equal(load_config("{\"model_type\": \"gemma3\", \"eos_token_id\": [1, 106],"
                                 " \"text_config\": {\"hidden_size\": 2560, \"intermediate_size\": 10240,"
                                 " \"model_type\": \"gemma3_text\", \"num_hidden_layers\": 34,"
                                 " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"sliding_window\": 1024},"
                                 " \"vision_config\": {\"model_type\": \"siglip_vision_model\"}}", &c), KVF_OK);
    assert_string_equal(c.arch, "gemma3");
    assert_int_equal(c.hidden_size, 2560);
    assert_int_equal(c.num_hidden_layers, 34);
    assert_int_equal(c.vocab_size, 262208);
    assert_int_equal(c.sliding_window, 1024);
    assert_int_equal(c.eos_token_id, 1);
}

/* llava-hf/llava-1.5-7b-hf's config.json: text_config lists almost nothing. */
static void test_config_llava(void **state) {
    (void)state;
    struct hf_config c;
    const char *llava =
        "{\"architectures\": [\"LlavaForConditionalGeneration\"], \"ignore_index\": -100,"
        " \"image_token_index\": 32000, \"model_type\": \"llava\", \"pad_token_id\": 32001,"
        " \"projector_hidden_act\": \"gelu\", \"text_config\": {\"_name_or_path\": \"lmsys/vicuna-7b-v1.5\","
        " \"architectures\": [\"LlamaForCausalLM\"], \"max_position_embeddings\": 4096, \"model_type\": \"llama\","
        " \"rms_norm_eps\": 1e-05, \"torch_dtype\": \"float16\", \"vocab_size\": 32064},"
        " \"tie_word_embeddings\": false, \"torch_dtype\": \"float16\", \"transformers_version\": \"4.36.0.dev0\","
        " \"vision_config\": {\"hidden_size\": 1024, \"image_size\": 336, \"intermediate_size\": 4096,"
        " \"model_type\": \"clip_vision_model\", \"num_attention_heads\": 16, \"num_hidden_layers\": 24,"
        " \"patch_size\": 14, \"projection_dim\": 768, \"vocab_size\": 32000},"
        " \"vision_feature_layer\": -2, \"vision_feature_select_strategy\": \"default\", \"vocab_size\": 32064}";
    assert_int_equal(load_config(llava, &c), KVF_OK);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(c.intermediate_size, 11008);
    assert_int_equal(c.num_hidden_layers, 32);
    assert_int_equal(c.num_attention_heads, 32);
    assert_int_equal(c.num_key_value_heads, 32);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.vocab_size, 32064);
    assert_int_equal(c.max_position_embeddings, 4096);
    assert_float_equal(c.rms_norm_eps, 1e-5f, 1e-12);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_false(c.tie_word_embeddings);
    assert_false(c.attention_bias);

    /* Older llava configs keep vocab_size only at the top; text_config may
     * lack model_type (llama) or be absent altogether. */
    assert_int_equal(load_config("{\"model_type\": \"llava\", \"vocab_size\": 32002, \"eos_token_id\": 2,"
                                 " \"text_config\": {\"num_hidden_layers\": 2}}", &c), KVF_OK);
    assert_string_equal(c.arch, "llama");
    assert_int_equal(c.vocab_size, 32002);
    assert_int_equal(c.num_hidden_layers, 2);
    assert_int_equal(c.eos_token_id, 2);
    assert_int_equal(load_config("{\"model_type\": \"llava\"}", &c), KVF_OK);
    assert_int_equal(c.vocab_size, 32000);
    assert_int_equal(c.hidden_size, 4096);
    assert_int_equal(load_config("{\"model_type\": \"llava\", \"text_config\": {\"model_type\": \"qwen2\","
                                 " \"hidden_size\": 896, \"num_attention_heads\": 14, \"num_key_value_heads\": 2}}",
                                 &c), KVF_OK);
    assert_string_equal(c.arch, "qwen2");
    assert_int_equal(c.head_dim, 64);
    assert_true(c.attention_bias);

    assert_int_equal(load_config("{\"model_type\": \"llava\", \"text_config\": 3}", &c), KVF_ERR_FORMAT);
    assert_int_equal(load_config("{\"model_type\": \"llava\", \"text_config\": {\"model_type\": \"llava\"}}", &c),
                     KVF_ERR_UNSUPPORTED);
    assert_int_equal(load_config("{\"model_type\": \"llava\", \"text_config\": {\"model_type\": \"opt\"}}", &c),
                     KVF_ERR_UNSUPPORTED);
}

/* Qwen3-0.6B's config.json: head_dim 128 given apart from hidden_size /
 * heads, no q/k/v biases; attention_bias (biases on the output projection
 * too) is refused, for Qwen3 as for Llama. */
static void test_config_qwen3(void **state) {
    (void)state;
    struct hf_config c;
    const char *qwen3 =
        "{\"architectures\": [\"Qwen3ForCausalLM\"], \"attention_bias\": false, \"attention_dropout\": 0.0,"
        " \"bos_token_id\": 151643, \"eos_token_id\": 151645, \"head_dim\": 128, \"hidden_act\": \"silu\","
        " \"hidden_size\": 1024, \"initializer_range\": 0.02, \"intermediate_size\": 3072,"
        " \"max_position_embeddings\": 40960, \"max_window_layers\": 28, \"model_type\": \"qwen3\","
        " \"num_attention_heads\": 16, \"num_hidden_layers\": 28, \"num_key_value_heads\": 8,"
        " \"rms_norm_eps\": 1e-06, \"rope_scaling\": null, \"rope_theta\": 1000000, \"sliding_window\": null,"
        " \"tie_word_embeddings\": true, \"torch_dtype\": \"bfloat16\", \"transformers_version\": \"4.51.0\","
        " \"use_cache\": true, \"use_sliding_window\": false, \"vocab_size\": 151936}";
    assert_int_equal(load_config(qwen3, &c), KVF_OK);
    assert_string_equal(c.arch, "qwen3");
    assert_int_equal(c.hidden_size, 1024);
    assert_int_equal(c.num_attention_heads, 16);
    assert_int_equal(c.num_key_value_heads, 8);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.sliding_window, 0);
    assert_false(c.attention_bias);
    assert_true(c.tie_word_embeddings);
    assert_float_equal(c.rope_theta, 1e6f, 0);
    assert_float_equal(c.query_pre_attn_scalar, 128.0f, 0);
    /* Qwen3Config's defaults: head_dim 128 whatever hidden_size / heads */
    assert_int_equal(load_config("{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128,"
                                 " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 100}", &c),
                     KVF_OK);
    assert_int_equal(c.head_dim, 128);
    assert_int_equal(c.max_position_embeddings, 32768);
    static const char *const refused[] = {
        "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100, \"attention_bias\": true}",
        "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100, \"use_sliding_window\": true}",
        "{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 4, \"vocab_size\": 100, \"attention_bias\": true}",
    };
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        assert_int_equal(load_config(refused[i], &c), KVF_ERR_UNSUPPORTED);
}

/* Qwen3-VL-2B-Instruct's config.json (text part shortened to the keys
 * that matter): Qwen3 with interleaved M-RoPE from text_config, and its
 * tower with DeepStack layers; a config without sections gets
 * Qwen3VLTextConfig's 24/20/20; DeepStack layers out of order or past the
 * tower are refused. */
static void test_config_qwen3vl(void **state) {
    (void)state;
    struct hf_config c;
    struct hf_vision_config v;
#define QWEN3VL_TEXT                                                                                                \
    "\"text_config\": {\"model_type\": \"qwen3_vl_text\", \"hidden_size\": 2048, \"intermediate_size\": 6144,"      \
    " \"num_hidden_layers\": 28, \"num_attention_heads\": 16, \"num_key_value_heads\": 8, \"head_dim\": 128,"       \
    " \"vocab_size\": 151936, \"rms_norm_eps\": 1e-06, \"tie_word_embeddings\": true, \"rope_scaling\": {"         \
    "\"mrope_interleaved\": true, \"mrope_section\": [24, 20, 20], \"rope_type\": \"default\"},"                  \
    " \"rope_theta\": 5000000}"
    const char *cfg = "{\"model_type\": \"qwen3_vl\", \"architectures\": [\"Qwen3VLForConditionalGeneration\"],"
                      " \"image_token_id\": 151655, \"video_token_id\": 151656, \"tie_word_embeddings\": true, "
                      QWEN3VL_TEXT ", \"vision_config\": {\"deepstack_visual_indexes\": [5, 11, 17], \"depth\": 24,"
                      " \"hidden_act\": \"gelu_pytorch_tanh\", \"hidden_size\": 1024, \"in_channels\": 3,"
                      " \"intermediate_size\": 4096, \"model_type\": \"qwen3_vl\", \"num_heads\": 16,"
                      " \"num_position_embeddings\": 2304, \"out_hidden_size\": 2048, \"patch_size\": 16,"
                      " \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}}";
    assert_int_equal(load_config(cfg, &c), KVF_OK);
    assert_string_equal(c.arch, "qwen3");
    assert_int_equal(c.hidden_size, 2048);
    assert_int_equal(c.head_dim, 128);
    assert_true(c.mrope_interleaved);
    assert_int_equal(c.mrope_section[0], 24);
    assert_int_equal(c.mrope_section[1], 20);
    assert_int_equal(c.mrope_section[2], 20);
    assert_float_equal(c.rope_theta, 5e6f, 0);
    assert_true(c.tie_word_embeddings);
    assert_int_equal(hf_vision_config_load(tmp_dir, &v), KVF_OK);
    assert_true(v.qwen3vl);
    assert_int_equal(v.num_hidden_layers, 24);
    assert_int_equal(v.hidden_size, 1024);
    assert_int_equal(v.patch_size, 16);
    assert_int_equal(v.num_position_embeddings, 2304);
    assert_int_equal(v.n_deepstack, 3);
    assert_int_equal(v.deepstack[2], 17);
    assert_string_equal(v.hidden_act, "gelu_pytorch_tanh");
    /* Qwen3VLVideoProcessor's bounds, for all of a video's frames */
    assert_int_equal(v.video_max_pixels, 768 * 32 * 32);
    assert_false(v.video_cap);
    assert_int_equal(load_config("{\"model_type\": \"qwen3_vl\", \"text_config\": {\"hidden_size\": 64,"
                                 " \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 2,"
                                 " \"vocab_size\": 100}}", &c), KVF_OK);
    assert_int_equal(c.mrope_section[0] + c.mrope_section[1] + c.mrope_section[2], 64);
    assert_true(c.mrope_interleaved);
    assert_float_equal(c.rope_theta, 5e5f, 0);
    static const char *const refused[] = {"[11, 5]", "[5, 24]", "[-1]", "3"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        char buf[1024];
        snprintf(buf, sizeof buf, "{\"model_type\": \"qwen3_vl\", " QWEN3VL_TEXT ", \"vision_config\": {\"depth\": 24,"
                 " \"deepstack_visual_indexes\": %s}}", refused[i]);
        write_text("config.json", buf);
        assert_int_equal(hf_vision_config_load(tmp_dir, &v), KVF_ERR_FORMAT);
    }
#undef QWEN3VL_TEXT
}

static void test_config_errors(void **state) {
    (void)state;
    struct hf_config c;
#define BASE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"vocab_size\": 100"
    assert_int_equal(load_config("{\"model_type\": \"gpt2\", " BASE ", \"num_attention_heads\": 4}", &c),
                     KVF_ERR_UNSUPPORTED);
    assert_non_null(strstr(kvf_last_error(), "gpt2"));
    assert_non_null(strstr(kvf_last_error(), "llama"));
    assert_non_null(strstr(kvf_last_error(), "gemma3"));

    static const char *format_errors[] = {
        "{" BASE ", \"num_attention_heads\": 4}",                                   /* no model_type */
        "{\"model_type\": 5, " BASE ", \"num_attention_heads\": 4}",
        "{\"model_type\": \"llama\", " BASE "}",                                   /* no heads */
        "{\"model_type\": \"llama\", \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
        " \"vocab_size\": 100, \"num_attention_heads\": 4}",                        /* no hidden */
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": \"4\"}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4.5}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 0}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": -4}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 1e12}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 6}",       /* 64 % 6 */
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"num_key_value_heads\": 0}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"head_dim\": 0}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"tie_word_embeddings\": \"yes\"}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"rms_norm_eps\": \"x\"}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"rms_norm_eps\": 0}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"rope_theta\": -1}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"rope_theta\": 1e300}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"eos_token_id\": \"2\"}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"eos_token_id\": [-1]}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"max_position_embeddings\": 0}",
        "{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4, \"rope_scaling\": 3}",
        "{\"model_type\": \"gemma3_text\", " BASE ", \"num_attention_heads\": 4, \"sliding_window_pattern\": 0}",
        "{\"model_type\": \"mistral\", " BASE ", \"num_attention_heads\": 4, \"sliding_window\": -5}",
        "[1]",
        "{\"model_type\": \"llama\"",
        "",
    };
    for (size_t i = 0; i < sizeof format_errors / sizeof *format_errors; i++) {
        enum kvf_status st = load_config(format_errors[i], &c);
        if (st != KVF_ERR_FORMAT) fail_msg("case %zu (%s): status %d", i, format_errors[i], st);
    }

    /* A head_dim given explicitly need not divide hidden_size. */
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 6,"
                                 " \"head_dim\": 16}", &c), KVF_OK);
    assert_int_equal(c.head_dim, 16);
    /* RoPE scalings kvfold does not implement are refused rather than
     * ignored; llama3 is read (its fields required); "default" is plain RoPE. */
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4,"
                                 " \"rope_scaling\": {\"rope_type\": \"dynamic\", \"factor\": 32.0}}", &c),
                     KVF_ERR_UNSUPPORTED);
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4,"
                                 " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0}}", &c),
                     KVF_ERR_FORMAT);
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4,"
                                 " \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 32.0,"
                                 " \"low_freq_factor\": 1, \"high_freq_factor\": 4,"
                                 " \"original_max_position_embeddings\": 8192}}", &c),
                     KVF_OK);
    assert_int_equal(c.rope_scaling.type, ROPE_SCALING_LLAMA3);
    assert_float_equal(c.rope_scaling.factor, 32.0f, 0);
    assert_int_equal(c.rope_scaling.orig_ctx, 8192);
    /* rope_scaling wins over rope_parameters, which a model of one layer
     * type then ignores (its rope_theta too), as transformers reads them */
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4,"
                                 " \"rope_theta\": 10000.0, \"rope_scaling\": {\"rope_type\": \"linear\","
                                 " \"factor\": 2.0}, \"rope_parameters\": {\"rope_type\": \"yarn\","
                                 " \"factor\": 8.0, \"rope_theta\": 500000.0}}", &c),
                     KVF_OK);
    assert_int_equal(c.rope_scaling.type, ROPE_SCALING_LINEAR);
    assert_float_equal(c.rope_theta, 10000.0f, 0);
    assert_int_equal(load_config("{\"model_type\": \"llama\", " BASE ", \"num_attention_heads\": 4,"
                                 " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 500000.0}}", &c),
                     KVF_OK);
    assert_float_equal(c.rope_theta, 500000.0f, 0);
#undef BASE

    assert_int_equal(hf_config_load(tmp_path("missing.json"), &c), KVF_ERR_IO);
    assert_int_equal(hf_config_load(NULL, &c), KVF_ERR_INVALID_ARG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_roundtrip, test_teardown),
        cmocka_unit_test_teardown(test_many_tensors, test_teardown),
        cmocka_unit_test_teardown(test_write_errors, test_teardown),
        cmocka_unit_test_teardown(test_sharded, test_teardown),
        cmocka_unit_test_teardown(test_open_errors, test_teardown),
        cmocka_unit_test_teardown(test_truncation, test_teardown),
        cmocka_unit_test_teardown(test_byte_flips, test_teardown),
        cmocka_unit_test_teardown(test_hostile_headers, test_teardown),
        cmocka_unit_test(test_json_values),
        cmocka_unit_test_teardown(test_config_llama, test_teardown),
        cmocka_unit_test_teardown(test_config_qwen2, test_teardown),
        cmocka_unit_test_teardown(test_config_qwen3, test_teardown),
        cmocka_unit_test_teardown(test_config_qwen3vl, test_teardown),
        cmocka_unit_test_teardown(test_config_gemma3, test_teardown),
        cmocka_unit_test_teardown(test_config_llava, test_teardown),
        cmocka_unit_test_teardown(test_config_errors, test_teardown),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
