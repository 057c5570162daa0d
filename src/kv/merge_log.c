#include "kv/merge_log.h"

#include <stdlib.h>
#include <string.h>

enum kvf_status kv_merge_log_init(struct kv_merge_log *log, int n_layer, int n_head_kv, bool on) {
    *log = (struct kv_merge_log){.n_layer = n_layer, .n_head_kv = n_head_kv};
    if (!on) return KVF_OK;
    log->heads = calloc((size_t)n_layer * n_head_kv, sizeof *log->heads);
    return log->heads ? KVF_OK : err_set(KVF_ERR_NOMEM, "out of memory for merge records");
}

void kv_merge_log_free(struct kv_merge_log *log) {
    for (size_t i = 0; log->heads && i < (size_t)log->n_layer * log->n_head_kv; i++) free(log->heads[i].m);
    free(log->heads);
    log->heads = NULL;
}

void kv_merge_log_clear(struct kv_merge_log *log) {
    for (size_t i = 0; log->heads && i < (size_t)log->n_layer * log->n_head_kv; i++) log->heads[i].n = 0;
}

enum kvf_status kv_merge_log_copy(struct kv_merge_log *dst, const struct kv_merge_log *src) {
    for (size_t i = 0; dst->heads && src->heads && i < (size_t)src->n_layer * src->n_head_kv; i++) {
        const struct kv_merge_list *from = &src->heads[i];
        const enum kvf_status st = kv_merge_list_reserve(&dst->heads[i], from->n);
        if (st != KVF_OK) return st;
        if (from->n) memcpy(dst->heads[i].m, from->m, sizeof *from->m * (size_t)from->n);
        dst->heads[i].n = from->n;
    }
    return KVF_OK;
}

enum kvf_status kv_merge_list_reserve(struct kv_merge_list *list, int add) {
    if (list->n + add > list->cap) {
        const int cap = KVF_MAX(list->n + add, list->cap * 2);
        struct kvf_kv_merge *m = realloc(list->m, sizeof *m * (size_t)cap);
        if (!m) return err_set(KVF_ERR_NOMEM, "out of memory recording merges");
        list->m = m, list->cap = cap;
    }
    return KVF_OK;
}

enum kvf_status kv_merge_log_note(struct kv_merge_log *log, int l, int32_t from, int32_t into) {
    for (int g = 0; log->heads && g < log->n_head_kv; g++) {
        struct kv_merge_list *list = kv_merge_log_head(log, l, g);
        const enum kvf_status st = kv_merge_list_reserve(list, 1);
        if (st != KVF_OK) return st;
        list->m[list->n++] = (struct kvf_kv_merge){from, into};
    }
    return KVF_OK;
}
