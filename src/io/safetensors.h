/* Hugging Face safetensors reader (single file or sharded through
 * model.safetensors.index.json) and writer. What config.json means is
 * model/hf_config.c's. */
#ifndef KVF_SAFETENSORS_H
#define KVF_SAFETENSORS_H

#include "core/common.h"
#include "core/quant.h"

#define ST_MAX_DIMS 8
struct st_tensor {
    char *name;
    enum dtype type;           /* DT_F32, DT_F16 or DT_BF16 */
    int n_dims;
    int64_t shape[ST_MAX_DIMS];/* row-major: shape[n_dims-1] varies fastest */
    const void *data;          /* into the mapping of its shard */
    size_t nbytes;
};

struct st_set; /* opaque: mapped shards + tensor table */

/* path: a .safetensors file or a directory holding model.safetensors or
 * model.safetensors.index.json (+ shards). */
enum kvf_status st_open(const char *path, struct st_set **out);
/* Parses one in-memory file the caller keeps alive (tests, fuzzing). */
enum kvf_status st_open_buffer(const void *buf, size_t size, struct st_set **out);
void st_close(struct st_set *s);
int st_count(const struct st_set *s);
const struct st_tensor *st_at(const struct st_set *s, int i);
const struct st_tensor *st_find(const struct st_set *s, const char *name);

/* Writes one file; tensor data pointers are read, names must be unique. A
 * NULL data pointer leaves a hole (zeros, no disk space): shape tests of
 * files the size of real models. */
enum kvf_status st_write(const char *path, const struct st_tensor *tensors, int n);

#endif
