/* GGUF v2/v3 reader and v3 writer.
 *
 * The reader trusts nothing: every count is checked against the bytes left
 * before anything is allocated, so memory use is bounded by a small multiple
 * of the file size, and recursion (nested arrays) is capped. All parsed
 * metadata lives in one arena freed by gguf_close, which keeps error paths
 * free of partial-structure cleanup. Lookups go through name-sorted indexes,
 * so hostile files with many keys cannot make the duplicate check quadratic.
 *
 * Writer extension beyond the scalar contract of gguf_writer_set_arr: with
 * elem_type GGUF_STR, data is struct gguf_str[n]; with GGUF_ARR it is
 * struct gguf_value[n] (each of type GGUF_ARR), i.e. the layout the reader
 * produces in gguf_value.arr.data, so parsed metadata can be written back. */
#include "io/gguf.h"

#include "core/quant.h"
#include "core/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "GGUF scalars are copied as raw little-endian bytes");

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_DEPTH 8 /* levels of arrays; real files use 1 */

/* Smallest encodings, used to bound counts before allocating. */
#define GGUF_MIN_KV_BYTES 14     /* key len u64 + 1 byte key + type u32 + u8 */
#define GGUF_MIN_TENSOR_BYTES 33 /* name len + 1 byte + n_dims + ne + type + offset */
#define GGUF_MIN_ARR_BYTES 12    /* nested array element: type u32 + n u64 */

static size_t vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_U8: case GGUF_I8: case GGUF_BOOL: return 1;
    case GGUF_U16: case GGUF_I16: return 2;
    case GGUF_U32: case GGUF_I32: case GGUF_F32: return 4;
    case GGUF_U64: case GGUF_I64: case GGUF_F64: return 8;
    default: return 0;
    }
}

/* Bytes one array element of type t takes at least in a file; 0 if t is not a
 * value type. */
static size_t vtype_min_bytes(uint32_t t) {
    if (t == GGUF_STR) return 8;
    if (t == GGUF_ARR) return GGUF_MIN_ARR_BYTES;
    return vtype_size(t);
}

static bool vtype_is_int(enum gguf_vtype t) {
    return t <= GGUF_I32 || t == GGUF_U64 || t == GGUF_I64;
}

static bool vtype_is_signed(enum gguf_vtype t) {
    return t == GGUF_I8 || t == GGUF_I16 || t == GGUF_I32 || t == GGUF_I64;
}

/* ------------------------------------------------------------- arena -- */

struct arena_chunk {
    struct arena_chunk *next;
    size_t used, cap;
    max_align_t data[];
};

/* Zeroed, max_align_t-aligned memory that lives until arena_free. */
static void *arena_alloc(struct arena_chunk **head, size_t n) {
    const size_t align = sizeof(max_align_t);
    if (n > SIZE_MAX - align - sizeof(struct arena_chunk)) return NULL;
    n = (n + align - 1) & ~(align - 1);
    struct arena_chunk *c = *head;
    if (c && c->cap - c->used >= n) {
        void *p = (char *)c->data + c->used;
        c->used += n;
        return p;
    }
    /* Big requests get a chunk of their own behind the current one so the
     * free space of the current chunk is not abandoned. */
    const size_t chunk = 64 * 1024;
    bool own = n > chunk / 4;
    size_t cap = own ? n : chunk;
    struct arena_chunk *nc = calloc(1, sizeof *nc + cap);
    if (!nc) return NULL;
    nc->cap = cap;
    nc->used = n;
    if (own && c) {
        nc->next = c->next;
        c->next = nc;
    } else {
        nc->next = c;
        *head = nc;
    }
    return nc->data;
}

static void arena_free(struct arena_chunk *c) {
    while (c) {
        struct arena_chunk *next = c->next;
        free(c);
        c = next;
    }
}

/* ------------------------------------------------------------ reader -- */

struct gguf_impl {
    struct gguf_file pub; /* first: gguf_file pointers are gguf_impl pointers */
    struct arena_chunk *arena;
    const struct gguf_kv **kv_by_key;           /* n_kv, sorted by key        */
    const struct gguf_tensor **tensor_by_name;  /* n_tensors, sorted by name  */
};

struct parser {
    const uint8_t *buf;
    size_t size, pos;
    struct gguf_impl *g;
    char where[112]; /* "key 'x'" / "tensor 'y'": prefixed to error messages */
};

static enum kvf_status parse_fail(struct parser *p, enum kvf_status st, const char *fmt, ...)
    KVF_PRINTF(3, 4);

static enum kvf_status parse_fail(struct parser *p, enum kvf_status st, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return err_set(st, "gguf: %s%s%s (at offset %zu)", p->where, p->where[0] ? ": " : "", msg,
                   p->pos);
}

static void parser_where(struct parser *p, const char *what, const struct gguf_str *name) {
    /* Names come from the file: show a bounded prefix. */
    snprintf(p->where, sizeof p->where, "%s '%.*s%s'", what, (int)KVF_MIN(name->len, 80),
             name->s, name->len > 80 ? "..." : "");
}

static size_t parser_left(const struct parser *p) { return p->size - p->pos; }

static enum kvf_status parse_bytes(struct parser *p, void *dst, size_t n, const char *what) {
    if (n > parser_left(p))
        return parse_fail(p, KVF_ERR_FORMAT, "truncated %s: need %zu bytes, %zu left", what, n,
                          parser_left(p));
    memcpy(dst, p->buf + p->pos, n);
    p->pos += n;
    return KVF_OK;
}

static enum kvf_status parse_u32(struct parser *p, uint32_t *v, const char *what) {
    return parse_bytes(p, v, sizeof *v, what);
}

static enum kvf_status parse_u64(struct parser *p, uint64_t *v, const char *what) {
    return parse_bytes(p, v, sizeof *v, what);
}

static void *parse_alloc(struct parser *p, size_t n) { return arena_alloc(&p->g->arena, n); }

#define TRY(expr)                                                                             \
    do {                                                                                      \
        enum kvf_status st_ = (expr);                                                         \
        if (st_ != KVF_OK) return st_;                                                        \
    } while (0)

static enum kvf_status parse_str(struct parser *p, struct gguf_str *s, const char *what) {
    uint64_t len = 0;
    TRY(parse_u64(p, &len, what));
    if (len > parser_left(p))
        return parse_fail(p, KVF_ERR_FORMAT, "%s length %llu exceeds the %zu bytes left", what,
                          (unsigned long long)len, parser_left(p));
    s->len = len;
    s->s = parse_alloc(p, (size_t)len + 1);
    if (!s->s) return parse_fail(p, KVF_ERR_NOMEM, "out of memory for %s", what);
    memcpy(s->s, p->buf + p->pos, (size_t)len);
    s->s[len] = '\0';
    p->pos += (size_t)len;
    return KVF_OK;
}

/* A key or tensor name: non-empty and without NUL, so C-string lookups work. */
static enum kvf_status parse_name(struct parser *p, struct gguf_str *s, const char *what) {
    size_t at = p->pos;
    TRY(parse_str(p, s, what));
    if (s->len == 0 || memchr(s->s, '\0', s->len)) {
        p->pos = at;
        return parse_fail(p, KVF_ERR_FORMAT, "%s is %s", what,
                          s->len == 0 ? "empty" : "not a valid string (contains NUL)");
    }
    return KVF_OK;
}

static enum kvf_status parse_value(struct parser *p, enum gguf_vtype type, struct gguf_value *v,
                                   int depth);

static enum kvf_status parse_array(struct parser *p, struct gguf_value *v, int depth) {
    if (depth >= GGUF_MAX_DEPTH)
        return parse_fail(p, KVF_ERR_FORMAT, "arrays nested deeper than %d levels",
                          GGUF_MAX_DEPTH);
    uint32_t et = 0;
    uint64_t n = 0;
    TRY(parse_u32(p, &et, "array element type"));
    size_t min = vtype_min_bytes(et);
    if (min == 0)
        return parse_fail(p, KVF_ERR_FORMAT, "unknown array element type %u", et);
    TRY(parse_u64(p, &n, "array length"));
    if (n > parser_left(p) / min)
        return parse_fail(p, KVF_ERR_FORMAT,
                          "array of %llu elements needs at least %zu bytes each, %zu bytes left",
                          (unsigned long long)n, min, parser_left(p));
    v->arr.type = (enum gguf_vtype)et;
    v->arr.n = n;
    v->arr.data = NULL;
    if (n == 0) return KVF_OK;

    size_t esize = et == GGUF_STR ? sizeof(struct gguf_str)
                 : et == GGUF_ARR ? sizeof(struct gguf_value)
                                  : min;
    size_t bytes; /* cannot overflow given the check above, but stay explicit */
    if (!size_mul((size_t)n, esize, &bytes) || !(v->arr.data = parse_alloc(p, bytes)))
        return parse_fail(p, KVF_ERR_NOMEM, "out of memory for an array of %llu elements",
                          (unsigned long long)n);
    if (et == GGUF_STR) {
        struct gguf_str *s = v->arr.data;
        for (uint64_t i = 0; i < n; i++) TRY(parse_str(p, &s[i], "array string"));
    } else if (et == GGUF_ARR) {
        struct gguf_value *a = v->arr.data;
        for (uint64_t i = 0; i < n; i++) TRY(parse_value(p, GGUF_ARR, &a[i], depth + 1));
    } else {
        memcpy(v->arr.data, p->buf + p->pos, (size_t)n * min);
        p->pos += (size_t)n * min;
        if (et == GGUF_BOOL) { /* bytes other than 0/1 are not valid C bools */
            uint8_t *b = v->arr.data;
            for (uint64_t i = 0; i < n; i++) b[i] = b[i] != 0;
        }
    }
    return KVF_OK;
}

static enum kvf_status parse_value(struct parser *p, enum gguf_vtype type, struct gguf_value *v,
                                   int depth) {
    v->type = type;
    if (type == GGUF_STR) return parse_str(p, &v->str, "string value");
    if (type == GGUF_ARR) return parse_array(p, v, depth);
    size_t size = vtype_size(type);
    if (size == 0) return parse_fail(p, KVF_ERR_FORMAT, "unknown value type %u", (unsigned)type);
    uint64_t raw = 0; /* little-endian: the low `size` bytes hold the value */
    TRY(parse_bytes(p, &raw, size, "value"));
    switch (type) {
    case GGUF_I8: v->i = (int8_t)raw; break;
    case GGUF_I16: v->i = (int16_t)raw; break;
    case GGUF_I32: v->i = (int32_t)raw; break;
    case GGUF_I64: v->i = (int64_t)raw; break;
    case GGUF_F32: { float x; memcpy(&x, &raw, 4); v->f = x; break; }
    case GGUF_F64: memcpy(&v->f, &raw, 8); break;
    case GGUF_BOOL: v->b = raw != 0; break;
    default: v->u = raw; break;
    }
    return KVF_OK;
}

static int str_cmp(const struct gguf_str *a, const struct gguf_str *b) {
    int c = memcmp(a->s, b->s, (size_t)KVF_MIN(a->len, b->len));
    if (c) return c;
    return a->len < b->len ? -1 : a->len > b->len;
}

static int kv_ptr_cmp(const void *a, const void *b) {
    return str_cmp(&(*(const struct gguf_kv *const *)a)->key,
                   &(*(const struct gguf_kv *const *)b)->key);
}

static int kv_key_cmp(const void *key, const void *elem) {
    return str_cmp(key, &(*(const struct gguf_kv *const *)elem)->key);
}

static int tensor_ptr_cmp(const void *a, const void *b) {
    return str_cmp(&(*(const struct gguf_tensor *const *)a)->name,
                   &(*(const struct gguf_tensor *const *)b)->name);
}

static int tensor_name_cmp(const void *key, const void *elem) {
    return str_cmp(key, &(*(const struct gguf_tensor *const *)elem)->name);
}

static int tensor_offset_cmp(const void *a, const void *b) {
    uint64_t x = (*(const struct gguf_tensor *const *)a)->offset;
    uint64_t y = (*(const struct gguf_tensor *const *)b)->offset;
    return x < y ? -1 : x > y;
}

static enum kvf_status parse_kvs(struct parser *p) {
    struct gguf_file *f = &p->g->pub;
    for (uint64_t i = 0; i < f->n_kv; i++) {
        struct gguf_kv *kv = &f->kv[i];
        snprintf(p->where, sizeof p->where, "key #%llu", (unsigned long long)i);
        TRY(parse_name(p, &kv->key, "key"));
        parser_where(p, "key", &kv->key);
        uint32_t type = 0;
        TRY(parse_u32(p, &type, "value type"));
        if (type > GGUF_F64) return parse_fail(p, KVF_ERR_FORMAT, "unknown value type %u", type);
        TRY(parse_value(p, (enum gguf_vtype)type, &kv->val, 0));
    }
    p->where[0] = '\0';

    const struct gguf_kv **idx = p->g->kv_by_key;
    for (uint64_t i = 0; i < f->n_kv; i++) idx[i] = &f->kv[i];
    qsort(idx, (size_t)f->n_kv, sizeof *idx, kv_ptr_cmp);
    for (uint64_t i = 1; i < f->n_kv; i++)
        if (str_cmp(&idx[i - 1]->key, &idx[i]->key) == 0) {
            parser_where(p, "key", &idx[i]->key);
            return parse_fail(p, KVF_ERR_FORMAT, "duplicate key");
        }

    f->alignment = GGUF_DEFAULT_ALIGNMENT;
    const struct gguf_kv *al = gguf_find(f, "general.alignment");
    if (al) {
        snprintf(p->where, sizeof p->where, "key 'general.alignment'");
        if (al->val.type != GGUF_U32)
            return parse_fail(p, KVF_ERR_FORMAT, "must be of type u32, not type %d",
                              (int)al->val.type);
        if (al->val.u == 0 || (al->val.u & (al->val.u - 1)) != 0)
            return parse_fail(p, KVF_ERR_FORMAT, "alignment %llu is not a power of two",
                              (unsigned long long)al->val.u);
        f->alignment = (size_t)al->val.u;
        p->where[0] = '\0';
    }
    return KVF_OK;
}

static enum kvf_status parse_tensor_info(struct parser *p, struct gguf_tensor *t) {
    TRY(parse_name(p, &t->name, "tensor name"));
    parser_where(p, "tensor", &t->name);

    uint32_t n_dims = 0;
    TRY(parse_u32(p, &n_dims, "n_dims"));
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS)
        return parse_fail(p, KVF_ERR_FORMAT, "n_dims %u is outside 1..%d", n_dims,
                          GGUF_MAX_DIMS);
    t->n_dims = (int)n_dims;
    int64_t n_rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        uint64_t ne = 1;
        if (d < t->n_dims) TRY(parse_u64(p, &ne, "dimension"));
        if (ne == 0 || ne > INT64_MAX)
            return parse_fail(p, KVF_ERR_FORMAT, "dimension %d has invalid size %lld", d,
                              (long long)ne);
        t->ne[d] = (int64_t)ne;
        if (d > 0 && __builtin_mul_overflow(n_rows, t->ne[d], &n_rows))
            return parse_fail(p, KVF_ERR_FORMAT, "element count overflows");
    }
    int64_t n_elem;
    if (__builtin_mul_overflow(n_rows, t->ne[0], &n_elem))
        return parse_fail(p, KVF_ERR_FORMAT, "element count overflows");

    TRY(parse_u32(p, &t->type, "tensor type"));
    const struct dtype_traits *dt = dtype_get_file(t->type);
    if (!dt) return parse_fail(p, KVF_ERR_UNSUPPORTED, "unsupported tensor type %u", t->type);
    if (t->ne[0] % dt->block != 0)
        return parse_fail(p, KVF_ERR_FORMAT,
                          "row length %lld is not a multiple of the %s block size %d",
                          (long long)t->ne[0], dt->name, dt->block);
    size_t row = dtype_row_bytes(t->type, t->ne[0]);
    if (row == 0 || !size_mul(row, (size_t)n_rows, &t->nbytes))
        return parse_fail(p, KVF_ERR_FORMAT, "byte size overflows");

    TRY(parse_u64(p, &t->offset, "tensor offset"));
    return KVF_OK;
}

/* Offsets were read with the tensor infos; they can only be checked once the
 * data section start is known. */
static enum kvf_status check_tensor_data(struct parser *p) {
    struct gguf_file *f = &p->g->pub;
    size_t avail = f->size - f->data_offset;
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        struct gguf_tensor *t = &f->tensors[i];
        parser_where(p, "tensor", &t->name);
        p->pos = f->data_offset;
        if (t->offset % f->alignment != 0)
            return parse_fail(p, KVF_ERR_FORMAT, "data offset %llu is not a multiple of the "
                              "alignment %zu", (unsigned long long)t->offset, f->alignment);
        if (t->offset > avail || t->nbytes > avail - t->offset)
            return parse_fail(p, KVF_ERR_FORMAT,
                              "data [%llu, +%zu) relative to the data section lies beyond the "
                              "end of the file (%zu bytes of data)",
                              (unsigned long long)t->offset, t->nbytes, avail);
        t->data = f->base + f->data_offset + t->offset;
    }
    p->where[0] = '\0';

    if (f->n_tensors < 2) return KVF_OK;
    const struct gguf_tensor **by_off = parse_alloc(p, (size_t)f->n_tensors * sizeof *by_off);
    if (!by_off) return parse_fail(p, KVF_ERR_NOMEM, "out of memory");
    for (uint64_t i = 0; i < f->n_tensors; i++) by_off[i] = &f->tensors[i];
    qsort(by_off, (size_t)f->n_tensors, sizeof *by_off, tensor_offset_cmp);
    for (uint64_t i = 1; i < f->n_tensors; i++) {
        const struct gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->nbytes > b->offset) {
            parser_where(p, "tensor", &b->name);
            return parse_fail(p, KVF_ERR_FORMAT, "data at %llu overlaps tensor '%.80s' at %llu "
                              "(%zu bytes)", (unsigned long long)b->offset, a->name.s,
                              (unsigned long long)a->offset, a->nbytes);
        }
    }
    return KVF_OK;
}

static enum kvf_status parse_file(struct parser *p) {
    struct gguf_file *f = &p->g->pub;
    char magic[4];
    TRY(parse_bytes(p, magic, 4, "header"));
    if (memcmp(magic, GGUF_MAGIC, 4) != 0) {
        p->pos = 0;
        return parse_fail(p, KVF_ERR_FORMAT, "not a GGUF file (bad magic)");
    }
    TRY(parse_u32(p, &f->version, "header"));
    if (f->version != 2 && f->version != 3) {
        p->pos = 4;
        return parse_fail(p, KVF_ERR_UNSUPPORTED, "GGUF version %u is not supported (only 2 and "
                          "3%s)", f->version,
                          (f->version & 0xffff) == 0 ? "; the file may be big-endian" : "");
    }
    TRY(parse_u64(p, &f->n_tensors, "header"));
    TRY(parse_u64(p, &f->n_kv, "header"));
    if (f->n_tensors > parser_left(p) / GGUF_MIN_TENSOR_BYTES)
        return parse_fail(p, KVF_ERR_FORMAT, "tensor count %llu cannot fit in the %zu bytes left",
                          (unsigned long long)f->n_tensors, parser_left(p));
    if (f->n_kv > parser_left(p) / GGUF_MIN_KV_BYTES)
        return parse_fail(p, KVF_ERR_FORMAT, "key count %llu cannot fit in the %zu bytes left",
                          (unsigned long long)f->n_kv, parser_left(p));

    /* The counts are now bounded by the file size, so these cannot overflow. */
    struct gguf_impl *g = p->g;
    f->kv = parse_alloc(p, (size_t)f->n_kv * sizeof *f->kv);
    g->kv_by_key = parse_alloc(p, (size_t)f->n_kv * sizeof *g->kv_by_key);
    f->tensors = parse_alloc(p, (size_t)f->n_tensors * sizeof *f->tensors);
    g->tensor_by_name = parse_alloc(p, (size_t)f->n_tensors * sizeof *g->tensor_by_name);
    if (!f->kv || !g->kv_by_key || !f->tensors || !g->tensor_by_name)
        return parse_fail(p, KVF_ERR_NOMEM, "out of memory");

    TRY(parse_kvs(p));

    for (uint64_t i = 0; i < f->n_tensors; i++) {
        snprintf(p->where, sizeof p->where, "tensor #%llu", (unsigned long long)i);
        TRY(parse_tensor_info(p, &f->tensors[i]));
        g->tensor_by_name[i] = &f->tensors[i];
    }
    p->where[0] = '\0';
    qsort(g->tensor_by_name, (size_t)f->n_tensors, sizeof *g->tensor_by_name, tensor_ptr_cmp);
    for (uint64_t i = 1; i < f->n_tensors; i++)
        if (str_cmp(&g->tensor_by_name[i - 1]->name, &g->tensor_by_name[i]->name) == 0) {
            parser_where(p, "tensor", &g->tensor_by_name[i]->name);
            return parse_fail(p, KVF_ERR_FORMAT, "duplicate tensor name");
        }

    /* llama.cpp does not pad vocab-only files (no tensors) to the alignment. */
    f->data_offset = p->pos;
    if (f->n_tensors > 0) {
        size_t pad = (f->alignment - p->pos % f->alignment) % f->alignment;
        if (pad > parser_left(p))
            return parse_fail(p, KVF_ERR_FORMAT, "truncated before the tensor data section "
                              "(needs %zu bytes of padding, %zu left)", pad, parser_left(p));
        f->data_offset += pad;
    }
    return check_tensor_data(p);
}

enum kvf_status gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out) {
    if (!out) return err_set(KVF_ERR_INVALID_ARG, "gguf_open_buffer: out is NULL");
    *out = NULL;
    if (!buf && size > 0) return err_set(KVF_ERR_INVALID_ARG, "gguf_open_buffer: buf is NULL");
    if (size == 0) return err_set(KVF_ERR_FORMAT, "gguf: empty file");

    struct gguf_impl *g = calloc(1, sizeof *g);
    if (!g) return err_set(KVF_ERR_NOMEM, "gguf: out of memory");
    g->pub.base = buf;
    g->pub.size = size;
    struct parser p = {.buf = buf, .size = size, .g = g};
    enum kvf_status st = parse_file(&p);
    if (st != KVF_OK) {
        gguf_close(&g->pub);
        return st;
    }
    *out = &g->pub;
    return KVF_OK;
}

enum kvf_status gguf_open(const char *path, struct gguf_file **out) {
    if (!out || !path) return err_set(KVF_ERR_INVALID_ARG, "gguf_open: NULL argument");
    *out = NULL;
    int fd = sys_open_read(path);
    if (fd < 0) return err_set(KVF_ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return err_set(KVF_ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return err_set(KVF_ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (sb.st_size == 0) {
        close(fd);
        return err_set(KVF_ERR_FORMAT, "gguf: '%s' is empty", path);
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        close(fd);
        return err_set(KVF_ERR_IO, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)sb.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the file referenced */
    if (map == MAP_FAILED)
        return err_set(KVF_ERR_IO, "gguf: cannot map '%s': %s", path, strerror(e));

    struct gguf_file *f;
    enum kvf_status st = gguf_open_buffer(map, size, &f);
    if (st != KVF_OK) {
        munmap(map, size);
        /* Name the file without losing the parser's message. */
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kvf_last_error());
        return err_set(st, "%s: %s", path, msg);
    }
    f->map = map;
    *out = f;
    return KVF_OK;
}

void gguf_close(struct gguf_file *f) {
    if (!f) return;
    struct gguf_impl *g = (struct gguf_impl *)f;
    if (f->map) munmap(f->map, f->size);
    arena_free(g->arena);
    free(g);
}

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key) {
    if (!f || !key || f->n_kv == 0) return NULL;
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    struct gguf_str k = {strlen(key), (char *)key};
    const struct gguf_kv *const *hit =
        bsearch(&k, g->kv_by_key, (size_t)f->n_kv, sizeof *g->kv_by_key, kv_key_cmp);
    return hit ? *hit : NULL;
}

const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name) {
    if (!f || !name || f->n_tensors == 0) return NULL;
    const struct gguf_impl *g = (const struct gguf_impl *)f;
    struct gguf_str k = {strlen(name), (char *)name};
    const struct gguf_tensor *const *hit = bsearch(
        &k, g->tensor_by_name, (size_t)f->n_tensors, sizeof *g->tensor_by_name, tensor_name_cmp);
    return hit ? *hit : NULL;
}

/* Integer value of a scalar key, widened to a sign flag plus magnitude range
 * check by the callers. */
static bool kv_int(const struct gguf_file *f, const char *key, bool *neg, uint64_t *u,
                   int64_t *i) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv || !vtype_is_int(kv->val.type)) return false;
    if (vtype_is_signed(kv->val.type)) {
        *i = kv->val.i;
        *neg = *i < 0;
        *u = *neg ? 0 : (uint64_t)*i;
    } else {
        *u = kv->val.u;
        *neg = false;
        *i = *u > INT64_MAX ? INT64_MAX : (int64_t)*u;
    }
    return true;
}

bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out) {
    bool neg;
    uint64_t u;
    int64_t i;
    if (!kv_int(f, key, &neg, &u, &i) || neg || u > UINT32_MAX) return false;
    *out = (uint32_t)u;
    return true;
}

bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out) {
    bool neg;
    uint64_t u;
    int64_t i;
    if (!kv_int(f, key, &neg, &u, &i) || (!neg && u > INT64_MAX)) return false;
    *out = i;
    return true;
}

bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) return false;
    enum gguf_vtype t = kv->val.type;
    if (t == GGUF_F32 || t == GGUF_F64) *out = (float)kv->val.f;
    else if (vtype_is_signed(t)) *out = (float)kv->val.i;
    else if (vtype_is_int(t)) *out = (float)kv->val.u;
    else return false;
    return true;
}

bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out) {
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv || kv->val.type != GGUF_BOOL) return false;
    *out = kv->val.b;
    return true;
}

const char *gguf_get_str(const struct gguf_file *f, const char *key) {
    const struct gguf_kv *kv = gguf_find(f, key);
    return kv && kv->val.type == GGUF_STR && strlen(kv->val.str.s) == kv->val.str.len ? kv->val.str.s : NULL;
}

const struct gguf_value *gguf_get_arr(const struct gguf_file *f, const char *key,
                                      enum gguf_vtype elem_type) {
    const struct gguf_kv *kv = gguf_find(f, key);
    return kv && kv->val.type == GGUF_ARR && kv->val.arr.type == elem_type ? &kv->val : NULL;
}

/* ------------------------------------------------------------- writer -- */

struct wbuf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
};

static void wbuf_put(struct wbuf *b, const void *data, size_t n) {
    if (b->oom || n == 0) return;
    if (n > b->cap - b->n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        uint8_t *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, data, n);
    b->n += n;
}

static void wbuf_u32(struct wbuf *b, uint32_t v) { wbuf_put(b, &v, sizeof v); }
static void wbuf_u64(struct wbuf *b, uint64_t v) { wbuf_put(b, &v, sizeof v); }

static void wbuf_str(struct wbuf *b, const char *s, size_t len) {
    wbuf_u64(b, len);
    wbuf_put(b, s, len);
}

struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS];
    size_t nbytes;
    void *data; /* owned copy */
};

struct gguf_writer {
    struct wbuf kv; /* serialised key/value pairs, in insertion order */
    uint64_t n_kv;
    char **keys;    /* for the duplicate check */
    struct wtensor *tensors;
    size_t n_tensors, cap_keys, cap_tensors;
    enum kvf_status st; /* first failure, reported by gguf_writer_write */
    char err[256];
};

static void writer_fail(struct gguf_writer *w, enum kvf_status st, const char *fmt, ...)
    KVF_PRINTF(3, 4);

static void writer_fail(struct gguf_writer *w, enum kvf_status st, const char *fmt, ...) {
    if (w->st != KVF_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->err, sizeof w->err, fmt, ap);
    va_end(ap);
    w->st = st;
}

struct gguf_writer *gguf_writer_init(void) { return calloc(1, sizeof(struct gguf_writer)); }

void gguf_writer_free(struct gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w);
}

/* Room for element n of an array of cap elements of esz bytes: returns the
 * (possibly moved) array, or NULL with the old one left intact. */
static void *grow(void *arr, size_t *cap, size_t n, size_t esz) {
    if (n < *cap) return arr;
    size_t nc = *cap ? *cap * 2 : 16, bytes;
    if (!size_mul(nc, esz, &bytes)) return NULL;
    void *p = realloc(arr, bytes);
    if (p) *cap = nc;
    return p;
}

/* Checks and records a new key and writes it with its value type; false if
 * the pair must not be written. */
static bool writer_key(struct gguf_writer *w, const char *key, enum gguf_vtype type) {
    if (!w || w->st != KVF_OK) return false;
    if (!key || !key[0]) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: empty key");
        return false;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) {
            writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: duplicate key '%s'", key);
            return false;
        }
    char *copy = strdup(key);
    char **keys = copy ? grow(w->keys, &w->cap_keys, (size_t)w->n_kv, sizeof *keys) : NULL;
    if (!keys) {
        free(copy);
        writer_fail(w, KVF_ERR_NOMEM, "gguf writer: out of memory");
        return false;
    }
    w->keys = keys;
    w->keys[w->n_kv++] = copy;
    wbuf_str(&w->kv, key, strlen(key));
    wbuf_u32(&w->kv, type);
    return true;
}

void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v) {
    if (writer_key(w, key, GGUF_U32)) wbuf_u32(&w->kv, v);
    if (w && key && strcmp(key, "general.alignment") == 0 && v != GGUF_DEFAULT_ALIGNMENT)
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: only alignment %d is supported",
                    GGUF_DEFAULT_ALIGNMENT);
}

void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v) {
    if (writer_key(w, key, GGUF_I32)) wbuf_put(&w->kv, &v, sizeof v);
}

void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v) {
    if (writer_key(w, key, GGUF_F32)) wbuf_put(&w->kv, &v, sizeof v);
}

void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    if (writer_key(w, key, GGUF_BOOL)) wbuf_put(&w->kv, &b, 1);
}

void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v) {
    if (w && !v) writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: NULL string for '%s'",
                             key ? key : "(null)");
    if (writer_key(w, key, GGUF_STR)) wbuf_str(&w->kv, v, strlen(v));
}

/* Writes an array payload (element type, count, elements); data laid out as
 * in gguf_value.arr.data. */
static void writer_arr(struct gguf_writer *w, const char *key, enum gguf_vtype et,
                       const void *data, uint64_t n, int depth) {
    size_t es = vtype_min_bytes(et);
    if (es == 0 || depth >= GGUF_MAX_DEPTH || (n > 0 && !data)) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: key '%s': invalid array (type %d, "
                    "%llu elements, depth %d)", key, (int)et, (unsigned long long)n, depth);
        return;
    }
    wbuf_u32(&w->kv, et);
    wbuf_u64(&w->kv, n);
    if (et == GGUF_STR) {
        const struct gguf_str *s = data;
        for (uint64_t i = 0; i < n; i++) wbuf_str(&w->kv, s[i].s, (size_t)s[i].len);
    } else if (et == GGUF_ARR) {
        const struct gguf_value *a = data;
        for (uint64_t i = 0; i < n && w->st == KVF_OK; i++) {
            if (a[i].type != GGUF_ARR) {
                writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: key '%s': element %llu of "
                            "a nested array is not an array", key, (unsigned long long)i);
                return;
            }
            writer_arr(w, key, a[i].arr.type, a[i].arr.data, a[i].arr.n, depth + 1);
        }
    } else if (et == GGUF_BOOL) {
        const bool *b = data;
        for (uint64_t i = 0; i < n; i++) {
            uint8_t x = b[i];
            wbuf_put(&w->kv, &x, 1);
        }
    } else {
        size_t bytes;
        if (!size_mul((size_t)n, es, &bytes)) {
            writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: key '%s': array too large", key);
            return;
        }
        wbuf_put(&w->kv, data, bytes);
    }
}

void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                         const void *data, uint64_t n) {
    if (writer_key(w, key, GGUF_ARR)) writer_arr(w, key, elem_type, data, n, 0);
}

void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                             uint64_t n) {
    if (!writer_key(w, key, GGUF_ARR)) return;
    if (n > 0 && !v) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: key '%s': NULL strings", key);
        return;
    }
    wbuf_u32(&w->kv, GGUF_STR);
    wbuf_u64(&w->kv, n);
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i]) {
            writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: key '%s': string %llu is NULL",
                        key, (unsigned long long)i);
            return;
        }
        wbuf_str(&w->kv, v[i], strlen(v[i]));
    }
}

void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                            const int64_t *ne, const void *data) {
    if (!w || w->st != KVF_OK) return;
    if (!name || !name[0] || !ne) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: tensor '%s': missing name or shape",
                    name ? name : "(null)");
        return;
    }
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0) {
            writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: duplicate tensor '%s'", name);
            return;
        }
    struct wtensor t = {.type = type, .n_dims = n_dims};
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: tensor '%s': n_dims %d", name, n_dims);
        return;
    }
    size_t rows = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] <= 0 || (d > 0 && !size_mul(rows, (size_t)t.ne[d], &rows))) {
            writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: tensor '%s': bad dimension %d",
                        name, d);
            return;
        }
    }
    size_t row = dtype_get_file(type) ? dtype_row_bytes(type, t.ne[0]) : 0;
    if (row == 0 || !size_mul(row, rows, &t.nbytes)) {
        writer_fail(w, KVF_ERR_INVALID_ARG, "gguf writer: tensor '%s': type %u cannot hold "
                    "rows of %lld values", name, type, (long long)t.ne[0]);
        return;
    }
    t.name = strdup(name);
    t.data = data ? malloc(t.nbytes) : NULL;
    struct wtensor *ts =
        t.name && (t.data || !data) ? grow(w->tensors, &w->cap_tensors, w->n_tensors, sizeof t) : NULL;
    if (!ts) {
        free(t.name);
        free(t.data);
        writer_fail(w, KVF_ERR_NOMEM, "gguf writer: out of memory for tensor '%s'", name);
        return;
    }
    if (data) memcpy(t.data, data, t.nbytes);
    w->tensors = ts;
    w->tensors[w->n_tensors++] = t;
}

static size_t pad_to(size_t n, size_t align) { return (align - n % align) % align; }

enum kvf_status gguf_writer_write(struct gguf_writer *w, const char *path) {
    if (!w || !path) return err_set(KVF_ERR_INVALID_ARG, "gguf_writer_write: NULL argument");
    if (w->st != KVF_OK) return err_set(w->st, "%s", w->err);

    const size_t align = GGUF_DEFAULT_ALIGNMENT;
    struct wbuf h = {0};
    wbuf_put(&h, GGUF_MAGIC, 4);
    wbuf_u32(&h, 3);
    wbuf_u64(&h, w->n_tensors);
    wbuf_u64(&h, w->n_kv);
    wbuf_put(&h, w->kv.p, w->kv.n);
    /* llama.cpp requires each tensor to start right after the padded end of
     * the previous one. */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        wbuf_str(&h, t->name, strlen(t->name));
        wbuf_u32(&h, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims; d++) wbuf_u64(&h, (uint64_t)t->ne[d]);
        wbuf_u32(&h, t->type);
        wbuf_u64(&h, off);
        off += t->nbytes + pad_to(t->nbytes, align);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    wbuf_put(&h, zeros, pad_to(h.n, align));
    if (h.oom || w->kv.oom) {
        free(h.p);
        return err_set(KVF_ERR_NOMEM, "gguf writer: out of memory");
    }

    FILE *fp = fopen(path, "wb");
    if (!fp) {
        free(h.p);
        return err_set(KVF_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(errno));
    }
    bool ok = fwrite(h.p, 1, h.n, fp) == h.n;
    const uint64_t total = h.n + off;
    free(h.p);
    for (size_t i = 0; ok && i < w->n_tensors; i++) {
        const struct wtensor *t = &w->tensors[i];
        size_t pad = pad_to(t->nbytes, align);
        if (!t->data) { /* a hole: reads as zeros, takes no disk space */
            ok = fseeko(fp, (off_t)(t->nbytes + pad), SEEK_CUR) == 0;
            continue;
        }
        ok = fwrite(t->data, 1, t->nbytes, fp) == t->nbytes &&
             fwrite(zeros, 1, pad, fp) == pad;
    }
    ok = ok && fflush(fp) == 0 && ftruncate(fileno(fp), (off_t)total) == 0;
    int e = errno;
    if (fclose(fp) != 0 && ok) {
        ok = false;
        e = errno;
    }
    if (!ok) return err_set(KVF_ERR_IO, "gguf writer: cannot write '%s': %s", path, strerror(e));
    return KVF_OK;
}
