/* Prints the metadata and tensor table of a GGUF file (debugging aid).
 * usage: gguf_dump FILE [N]   N = array elements shown (default 4) */
#include "core/quant.h"
#include "io/gguf.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *vtype_name(enum gguf_vtype t) {
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                  "bool", "str", "arr", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static void print_str(const struct gguf_str *s) {
    putchar('"');
    for (uint64_t i = 0; i < s->len && i < 60; i++) {
        unsigned char c = (unsigned char)s->s[i];
        if (c == '"' || c == '\\') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    printf(s->len > 60 ? "\"..." : "\"");
}

static void print_elem(enum gguf_vtype t, const void *data, uint64_t i, int shown);

static void print_value(const struct gguf_value *v, int shown) {
    switch (v->type) {
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: printf("%" PRIu64, v->u); break;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: printf("%" PRId64, v->i); break;
    case GGUF_F32: case GGUF_F64: printf("%.9g", v->f); break;
    case GGUF_BOOL: printf(v->b ? "true" : "false"); break;
    case GGUF_STR: print_str(&v->str); break;
    case GGUF_ARR:
        printf("[%s x %" PRIu64 "]", vtype_name(v->arr.type), v->arr.n);
        if (v->arr.n == 0) break;
        printf(" {");
        for (uint64_t i = 0; i < v->arr.n && i < (uint64_t)shown; i++) {
            if (i) printf(", ");
            print_elem(v->arr.type, v->arr.data, i, shown);
        }
        printf(v->arr.n > (uint64_t)shown ? ", ...}" : "}");
        break;
    }
}

static void print_elem(enum gguf_vtype t, const void *data, uint64_t i, int shown) {
    const uint8_t *p = data;
    struct gguf_value v = {.type = t};
    switch (t) {
    case GGUF_U8: v.u = p[i]; break;
    case GGUF_I8: v.i = ((const int8_t *)p)[i]; break;
    case GGUF_U16: { uint16_t x; memcpy(&x, p + 2 * i, 2); v.u = x; break; }
    case GGUF_I16: { int16_t x; memcpy(&x, p + 2 * i, 2); v.i = x; break; }
    case GGUF_U32: { uint32_t x; memcpy(&x, p + 4 * i, 4); v.u = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, p + 4 * i, 4); v.i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, p + 4 * i, 4); v.f = x; break; }
    case GGUF_BOOL: v.b = p[i]; break;
    case GGUF_U64: memcpy(&v.u, p + 8 * i, 8); break;
    case GGUF_I64: memcpy(&v.i, p + 8 * i, 8); break;
    case GGUF_F64: memcpy(&v.f, p + 8 * i, 8); break;
    case GGUF_STR: v.str = ((const struct gguf_str *)data)[i]; break;
    case GGUF_ARR: v = ((const struct gguf_value *)data)[i]; break;
    }
    print_value(&v, shown);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s FILE [ARRAY_ELEMENTS_SHOWN]\n", argv[0]);
        return 2;
    }
    int shown = argc == 3 ? atoi(argv[2]) : 4;
    struct gguf_file *f;
    if (gguf_open(argv[1], &f) != KVF_OK) {
        fprintf(stderr, "%s\n", kvf_last_error());
        return 1;
    }
    printf("version %u, %" PRIu64 " keys, %" PRIu64 " tensors, alignment %zu, data at %zu, "
           "file %zu bytes\n", f->version, f->n_kv, f->n_tensors, f->alignment, f->data_offset,
           f->size);
    for (uint64_t i = 0; i < f->n_kv; i++) {
        const struct gguf_kv *kv = &f->kv[i];
        printf("kv %-48s %-4s = ", kv->key.s, vtype_name(kv->val.type));
        print_value(&kv->val, shown);
        putchar('\n');
    }
    for (uint64_t i = 0; i < f->n_tensors; i++) {
        const struct gguf_tensor *t = &f->tensors[i];
        const struct dtype_traits *dt = dtype_get(t->type);
        printf("tensor %-40s %-5s [", t->name.s, dt ? dt->name : "?");
        for (int d = 0; d < t->n_dims; d++) printf(d ? ", %" PRId64 : "%" PRId64, t->ne[d]);
        printf("] offset %" PRIu64 " bytes %zu\n", t->offset, t->nbytes);
    }
    gguf_close(f);
    return 0;
}
