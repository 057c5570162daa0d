/* Weights bound from whichever container a model came from (a GGUF file, a
 * safetensors set): looked up, their shape and bytes checked, counted into
 * the model's totals and its digest; vectors converted to F32 once. The
 * decoder's loader (model.c) and the vision towers' (vit.c, vit_qwen.c) both
 * bind through here. */
#include "model/weights.h"

#include "io/gguf.h"
#include "io/safetensors.h"

#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Looks a tensor up in whichever container the model came from. */
struct tensor_ref {
    bool found;
    int64_t index; /* in the GGUF file's tensors; -1 for safetensors */
    uint32_t type;
    int n_dims;
    int64_t ne[4]; /* ne[0] = row length (GGUF order) */
    const void *data;
    size_t nbytes;
};

static struct tensor_ref tensor_lookup(const struct tensor_src *src, const char *name) {
    struct tensor_ref r = {0};
    if (src->gguf) {
        const struct gguf_tensor *t = gguf_find_tensor(src->gguf, name);
        if (!t) return r;
        r = (struct tensor_ref){true, t - src->gguf->tensors, t->type, t->n_dims,
                                {t->ne[0], t->ne[1], t->ne[2], t->ne[3]}, t->data, t->nbytes};
    } else {
        const struct st_tensor *t = st_find(src->st, name);
        if (!t) return r;
        r.found = true;
        r.index = -1;
        r.type = t->type;
        /* Dimensions past four (a 3-D convolution's kernel) fold into the
         * innermost: a row of a kernel is all of them anyway. */
        int64_t ne[ST_MAX_DIMS];
        for (int i = 0; i < t->n_dims; i++) ne[i] = t->shape[t->n_dims - 1 - i];
        int nd = t->n_dims;
        for (; nd > 4; nd--) {
            ne[1] *= ne[0];
            memmove(ne, ne + 1, sizeof(int64_t) * (size_t)(nd - 1));
        }
        r.n_dims = nd;
        for (int i = 0; i < 4; i++) r.ne[i] = i < nd ? ne[i] : 1;
        r.data = t->data;
        r.nbytes = t->nbytes;
    }
    return r;
}

bool tensor_exists(const struct tensor_src *src, const char *name) { return tensor_lookup(src, name).found; }

bool tensor_shape(const struct tensor_src *src, const char *name, int64_t ne[4], int *n_dims) {
    const struct tensor_ref r = tensor_lookup(src, name);
    memcpy(ne, r.ne, sizeof r.ne);
    *n_dims = r.n_dims;
    return r.found;
}

enum kvf_status weight_bind_nd(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                               int64_t rows, int64_t cols, int n_dims, bool required) {
    const struct tensor_ref r = tensor_lookup(src, name);
    memset(w, 0, sizeof *w);
    if (!r.found) {
        if (required) return err_set(KVF_ERR_FORMAT, "missing tensor '%s'", name);
        return KVF_OK;
    }
    const struct dtype_traits *tr = dtype_get_file(r.type);
    if (!tr) return err_set(KVF_ERR_UNSUPPORTED, "tensor '%s' has unsupported type %u", name, r.type);
    /* n_dims > 2 (a convolution kernel): every dimension but the last forms a row. */
    int64_t row_len = 1;
    for (int i = 0; i < n_dims - 1 && i < 4; i++) row_len *= r.ne[i];
    if (n_dims == 1) row_len = r.ne[0];
    if (r.n_dims != n_dims || row_len != cols || (n_dims > 1 && r.ne[n_dims - 1] != rows))
        return err_set(KVF_ERR_SHAPE, "tensor '%s' has shape [%lld, %lld, %lld, %lld] (%d dims), expected %d dims "
                       "holding %lld rows of %lld", name, (long long)r.ne[0], (long long)r.ne[1], (long long)r.ne[2],
                       (long long)r.ne[3], r.n_dims, n_dims, (long long)rows, (long long)cols);
    const size_t rb = dtype_row_bytes(r.type, cols);
    size_t total;
    if (rb == 0 || !size_mul(rb, (size_t)rows, &total) || total != r.nbytes)
        return err_set(KVF_ERR_SHAPE, "tensor '%s': %zu bytes do not hold [%lld, %lld] of %s", name, r.nbytes,
                       (long long)rows, (long long)cols, tr->name);
    *w = (struct weight){.type = (enum dtype)r.type, .rows = rows, .cols = cols, .row_bytes = rb, .data = r.data};
    if (src->bound && r.index >= 0) src->bound[r.index] = true;
    if (!m->vision) { /* vision towers bind after the decoder, once m->vision is there */
        const int64_t shape[3] = {(int64_t)r.type, rows, cols};
        m->digest = (uint32_t)crc32(m->digest, (const Bytef *)name, (uInt)strlen(name));
        m->digest = (uint32_t)crc32(m->digest, (const Bytef *)shape, sizeof shape);
    }
    m->n_params += rows * cols;
    m->weight_bytes += (int64_t)total;
    return KVF_OK;
}

enum kvf_status weight_bind(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                            int64_t rows, int64_t cols, bool required) {
    return weight_bind_nd(m, src, w, name, rows, cols, rows == 1 ? 1 : 2, required);
}

enum kvf_status weight_bind_vec(struct kvf_model *m, const struct tensor_src *src, struct weight *w, const char *name,
                                int64_t n, bool required, float add) {
    enum kvf_status st = weight_bind(m, src, w, name, 1, n, required);
    if (st != KVF_OK || !w->data) return st;
    float *f = malloc((size_t)n * sizeof(float));
    if (!f) return err_set(KVF_ERR_NOMEM, "out of memory converting '%s'", name);
    quant_dequant_row(w->type, w->data, f, n);
    for (int64_t i = 0; i < n; i++) f[i] += add;
    w->type = DT_F32;
    w->row_bytes = (size_t)n * sizeof(float);
    w->data = NULL;
    st = model_keep(m, f);
    if (st == KVF_OK) w->data = f;
    return st;
}

enum kvf_status model_keep(struct kvf_model *m, void *f) {
    if (m->n_owned == m->cap_owned) {
        int cap = m->cap_owned ? 2 * m->cap_owned : 64;
        void **o = realloc(m->owned, (size_t)cap * sizeof *o);
        if (!o) {
            free(f);
            return err_set(KVF_ERR_NOMEM, "out of memory");
        }
        m->owned = o;
        m->cap_owned = cap;
    }
    m->owned[m->n_owned++] = f;
    return KVF_OK;
}
