/* What merging folded where, per (layer, kv head), in the order it
 * happened: each record names an entry that left the cache (or, after a
 * reduce step, never reached a layer) and the kept entry it was merged
 * into, by true position. Read through kvf_session_kv_merges. */
#ifndef KVF_KV_MERGE_LOG_H
#define KVF_KV_MERGE_LOG_H

#include "core/common.h"

struct kv_merge_list {
    struct kvf_kv_merge *m; /* [cap], n used */
    int n, cap;
};

struct kv_merge_log {
    struct kv_merge_list *heads; /* [n_layer][n_head_kv]; NULL: nothing is recorded */
    int n_layer, n_head_kv;
};

/* on: whether anything will be recorded (policies that evict or merge);
 * an off log allocates nothing and ignores notes. */
enum kvf_status kv_merge_log_init(struct kv_merge_log *log, int n_layer, int n_head_kv, bool on);
void kv_merge_log_free(struct kv_merge_log *log);
void kv_merge_log_clear(struct kv_merge_log *log);
static inline struct kv_merge_list *kv_merge_log_head(struct kv_merge_log *log, int l, int g) {
    return &log->heads[(size_t)l * log->n_head_kv + g];
}
/* dst (same shape, from kv_merge_log_init, empty) gets src's records. */
enum kvf_status kv_merge_log_copy(struct kv_merge_log *dst, const struct kv_merge_log *src);
/* Room for `add` more records in one head's list. */
enum kvf_status kv_merge_list_reserve(struct kv_merge_list *list, int add);
/* Records in every kv head of layer l that position `from` was folded into
 * position `into`. */
enum kvf_status kv_merge_log_note(struct kv_merge_log *log, int l, int32_t from, int32_t into);

#endif
