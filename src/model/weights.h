/* Binding a model's weights (model/weights.c), for the decoder's loader and
 * the vision towers' alike. */
#ifndef KVF_MODEL_WEIGHTS_H
#define KVF_MODEL_WEIGHTS_H

#include "model/model.h"

/* Where weights are looked up: a GGUF file or a safetensors set. */
struct tensor_src {
    const struct gguf_file *gguf;
    const struct st_set *st;
    bool *bound;               /* gguf: a flag per tensor, set once weight_bind* took it (NULL: not kept) */
};
bool tensor_exists(const struct tensor_src *src, const char *name);
/* ne[0] = row length (GGUF order); false when absent. */
bool tensor_shape(const struct tensor_src *src, const char *name, int64_t ne[4], int *n_dims);
/* Binds weight `name` as `rows` rows of `cols` values, stored with n_dims
 * dimensions (n_dims > 2: every dimension but the outermost forms a row, as
 * for a convolution kernel [out][in][kh][kw]). The shape and byte count are
 * checked; a missing optional tensor leaves w->data NULL. Counts towards the
 * model's parameter and byte totals. */
enum kvf_status weight_bind_nd(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                               int64_t rows, int64_t cols, int n_dims, bool required);
/* weight_bind_nd with 1 dimension when rows == 1, else 2. */
enum kvf_status weight_bind(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                            int64_t rows, int64_t cols, bool required);
/* A vector (norm, bias) converted once to F32 (plus `add`), owned by the model. */
enum kvf_status weight_bind_vec(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                                int64_t n, bool required, float add);

/* Hands the model an array it frees with itself (freed here on failure). */
enum kvf_status model_keep(struct kvf_model *m, void *p);

#endif
