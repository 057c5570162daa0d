/* GGUF reader (v2/v3) and writer. The reader validates every count, length,
 * offset and shape against the file size before use; tensor data stays in the
 * memory map and is pointed to, never copied. */
#ifndef KVF_GGUF_H
#define KVF_GGUF_H

#include "core/common.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum gguf_vtype {
    GGUF_U8 = 0, GGUF_I8 = 1, GGUF_U16 = 2, GGUF_I16 = 3, GGUF_U32 = 4, GGUF_I32 = 5,
    GGUF_F32 = 6, GGUF_BOOL = 7, GGUF_STR = 8, GGUF_ARR = 9, GGUF_U64 = 10,
    GGUF_I64 = 11, GGUF_F64 = 12,
};

struct gguf_str { uint64_t len; char *s; /* NUL-terminated copy (may contain NULs) */ };

struct gguf_value {
    enum gguf_vtype type;
    union {
        uint64_t u;   /* U8..U64 zero-extended */
        int64_t i;    /* I8..I64 sign-extended */
        double f;     /* F32, F64 */
        bool b;
        struct gguf_str str;
        struct {
            enum gguf_vtype type;  /* element type                               */
            uint64_t n;
            void *data;            /* scalars: n packed elements as in the file
                                      (little-endian); GGUF_STR: struct gguf_str[n];
                                      GGUF_ARR: struct gguf_value[n] (nested)     */
        } arr;
    };
};

struct gguf_kv { struct gguf_str key; struct gguf_value val; };

#define GGUF_MAX_DIMS 4
struct gguf_tensor {
    struct gguf_str name;
    int n_dims;
    int64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the fastest-varying (row length); unused dims are 1 */
    uint32_t type;             /* enum dtype number                        */
    uint64_t offset;           /* relative to the data section            */
    size_t nbytes;
    const void *data;          /* into the mapping; NULL if opened without data */
};

struct gguf_file {
    uint32_t version;
    uint64_t n_kv;
    struct gguf_kv *kv;
    uint64_t n_tensors;
    struct gguf_tensor *tensors;
    size_t alignment;
    size_t data_offset;        /* start of the tensor data section in the file */
    const uint8_t *base;       /* the whole file (mapping or caller buffer)   */
    size_t size;
    void *map;                 /* non-NULL when we own a mapping of `size` bytes */
};

/* Opens and maps a file (read-only). */
enum kvf_status gguf_open(const char *path, struct gguf_file **out);
/* Parses a buffer the caller keeps alive (used by tests and fuzzers). */
enum kvf_status gguf_open_buffer(const void *buf, size_t size, struct gguf_file **out);
void gguf_close(struct gguf_file *f);

const struct gguf_kv *gguf_find(const struct gguf_file *f, const char *key);
const struct gguf_tensor *gguf_find_tensor(const struct gguf_file *f, const char *name);

/* Typed getters: false when the key is absent or of an incompatible type.
 * Integer getters accept any integer type whose value fits; float getters
 * accept F32/F64 and integers. */
bool gguf_get_u32(const struct gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const struct gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const struct gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const struct gguf_file *f, const char *key, bool *out);
/* A string value as a C string; NULL when absent, not a string, or holding
 * a NUL byte (C code would read only its prefix: "llama\0x" as "llama"). */
const char *gguf_get_str(const struct gguf_file *f, const char *key);
/* Array of the given element type, or NULL. */
const struct gguf_value *gguf_get_arr(const struct gguf_file *f, const char *key,
                                      enum gguf_vtype elem_type);

/* ------------------------------------------------------------- writer -- */

struct gguf_writer;
struct gguf_writer *gguf_writer_init(void);
void gguf_writer_free(struct gguf_writer *w);
void gguf_writer_set_u32(struct gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(struct gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_f32(struct gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(struct gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(struct gguf_writer *w, const char *key, const char *v);
/* Arrays of scalars: data holds n packed elements of elem_type. */
void gguf_writer_set_arr(struct gguf_writer *w, const char *key, enum gguf_vtype elem_type,
                         const void *data, uint64_t n);
void gguf_writer_set_arr_str(struct gguf_writer *w, const char *key, const char *const *v,
                             uint64_t n);
/* ne as in struct gguf_tensor; data holds dtype_row_bytes(type, ne[0]) * rows
 * bytes and is copied. data NULL leaves the tensor's bytes a hole in the file
 * (zeros, no disk space): shape tests of files the size of real models. */
void gguf_writer_add_tensor(struct gguf_writer *w, const char *name, uint32_t type, int n_dims,
                            const int64_t *ne, const void *data);
enum kvf_status gguf_writer_write(struct gguf_writer *w, const char *path);

#endif
