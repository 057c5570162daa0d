/* Vocabulary, special tokens, encode/decode dispatch and the GGUF loader.
 * The algorithms follow llama.cpp's llama-vocab.cpp so that ids match it:
 * special-token texts are cut out of the input first (longest token first),
 * the remaining fragments go to SPM or BPE. */
#include "tok/tok_impl.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------- text map -- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

int32_t tok_find(const struct tokenizer *t, const char *text, size_t len) {
    if (!t->map.slots || len == 0 || len > t->max_len) {
        return -1;
    }
    size_t i = hash_bytes(text, len) & t->map.mask;
    for (;;) {
        uint32_t s = t->map.slots[i];
        if (s == 0) {
            return -1;
        }
        const struct tok_entry *e = &t->vocab[s - 1];
        if (e->len == len && memcmp(e->text, text, len) == 0) {
            return (int32_t)(s - 1);
        }
        i = (i + 1) & t->map.mask;
    }
}

static enum kvf_status map_build(struct tokenizer *t) {
    size_t cap = 16;
    while (cap < (size_t)t->n_vocab * 2) {
        cap *= 2;
    }
    t->map.slots = calloc(cap, sizeof *t->map.slots);
    if (!t->map.slots) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory (vocab map)");
    }
    t->map.mask = cap - 1;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        const struct tok_entry *e = &t->vocab[id];
        if (e->len == 0) {
            continue; /* an empty text can never be matched */
        }
        size_t i = hash_bytes(e->text, e->len) & t->map.mask;
        while (t->map.slots[i] != 0) {
            const struct tok_entry *o = &t->vocab[t->map.slots[i] - 1];
            if (o->len == e->len && memcmp(o->text, e->text, e->len) == 0) {
                return err_set(KVF_ERR_FORMAT, "tokenizer: duplicate token text (ids %u and %d)",
                               t->map.slots[i] - 1, id);
            }
            i = (i + 1) & t->map.mask;
        }
        t->map.slots[i] = (uint32_t)id + 1;
    }
    return KVF_OK;
}

/* --------------------------------------------------------- merge map -- */

static size_t merge_slot(uint64_t key, size_t mask) {
    return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & mask;
}

static enum kvf_status merge_grow(struct tok_merge_map *m) {
    size_t cap = m->slots ? (m->mask + 1) * 2 : 1024;
    struct tok_merge *s = malloc(cap * sizeof *s);
    if (!s) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory (merges)");
    }
    for (size_t i = 0; i < cap; i++) {
        s[i].rank = -1;
    }
    if (m->slots) {
        for (size_t i = 0; i <= m->mask; i++) {
            if (m->slots[i].rank < 0) {
                continue;
            }
            size_t j = merge_slot(m->slots[i].key, cap - 1);
            while (s[j].rank >= 0) {
                j = (j + 1) & (cap - 1);
            }
            s[j] = m->slots[i];
        }
        free(m->slots);
    }
    m->slots = s;
    m->mask = cap - 1;
    return KVF_OK;
}

enum kvf_status tok_merge_add(struct tokenizer *t, const char *left, size_t llen,
                              const char *right, size_t rlen, int32_t rank, int32_t *result) {
    int32_t a = tok_find(t, left, llen), b = tok_find(t, right, rlen);
    if (a < 0 || b < 0) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: merge %d refers to an unknown token '%.*s'",
                       rank, (int)(a < 0 ? KVF_MIN(llen, 64) : KVF_MIN(rlen, 64)),
                       a < 0 ? left : right);
    }
    /* The merged text must itself be a token, as Hugging Face requires. */
    char buf[512];
    size_t n = llen + rlen;
    if (n > t->max_len || n > sizeof buf) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: merge %d yields no token", rank);
    }
    memcpy(buf, left, llen);
    memcpy(buf + llen, right, rlen);
    int32_t r = tok_find(t, buf, n);
    if (r < 0) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: merge %d ('%.*s' + '%.*s') yields no token",
                       rank, (int)KVF_MIN(llen, 64), left, (int)KVF_MIN(rlen, 64), right);
    }
    if (result) {
        *result = r;
    }
    struct tok_merge_map *m = &t->merges;
    if (!m->slots || (m->n + 1) * 2 > m->mask + 1) {
        enum kvf_status st = merge_grow(m);
        if (st != KVF_OK) {
            return st;
        }
    }
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t i = merge_slot(key, m->mask);
    while (m->slots[i].rank >= 0) {
        if (m->slots[i].key == key) {
            return KVF_OK; /* a repeated merge keeps its first (best) rank */
        }
        i = (i + 1) & m->mask;
    }
    m->slots[i] = (struct tok_merge){ key, rank, r };
    m->n++;
    return KVF_OK;
}

bool tok_merge_find(const struct tokenizer *t, int32_t left, int32_t right, int32_t *rank,
                    int32_t *result) {
    const struct tok_merge_map *m = &t->merges;
    if (!m->slots || left < 0 || right < 0) {
        return false;
    }
    uint64_t key = (uint64_t)(uint32_t)left << 32 | (uint32_t)right;
    for (size_t i = merge_slot(key, m->mask); m->slots[i].rank >= 0; i = (i + 1) & m->mask) {
        if (m->slots[i].key == key) {
            *rank = m->slots[i].rank;
            *result = m->slots[i].result;
            return true;
        }
    }
    return false;
}

/* ------------------------------------------------------- vec and heap -- */

bool tok_vec_push(struct tok_vec *v, int32_t id) {
    if (v->n == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 64;
        int32_t *p = realloc(v->v, cap * sizeof *p);
        if (!p) {
            return false;
        }
        v->v = p;
        v->cap = cap;
    }
    v->v[v->n++] = id;
    return true;
}

static bool bigram_before(const struct tok_bigram *a, const struct tok_bigram *b) {
    return a->prio > b->prio || (a->prio == b->prio && a->left < b->left);
}

bool tok_heap_push(struct tok_heap *h, struct tok_bigram b) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct tok_bigram *p = realloc(h->v, cap * sizeof *p);
        if (!p) {
            return false;
        }
        h->v = p;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!bigram_before(&b, &h->v[parent])) {
            break;
        }
        h->v[i] = h->v[parent];
        i = parent;
    }
    h->v[i] = b;
    return true;
}

struct tok_bigram tok_heap_pop(struct tok_heap *h) {
    struct tok_bigram top = h->v[0];
    struct tok_bigram last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) {
            break;
        }
        if (c + 1 < h->n && bigram_before(&h->v[c + 1], &h->v[c])) {
            c++;
        }
        if (!bigram_before(&h->v[c], &last)) {
            break;
        }
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n > 0) {
        h->v[i] = last;
    }
    return top;
}

/* ------------------------------------------------------------ builder -- */

enum kvf_status tok_alloc(enum tok_algo algo, int64_t n_vocab, size_t text_bytes,
                          struct tokenizer **out) {
    *out = NULL;
    if (n_vocab <= 0) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: empty vocabulary");
    }
    if (n_vocab >= INT32_MAX) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: absurd vocabulary size %lld",
                       (long long)n_vocab);
    }
    size_t pool;
    if (!size_add(text_bytes, (size_t)n_vocab, &pool)) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: vocabulary text too large");
    }
    struct tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
    }
    t->algo = algo;
    t->n_vocab = (int32_t)n_vocab;
    t->vocab = calloc((size_t)n_vocab, sizeof *t->vocab);
    t->pool = malloc(pool);
    t->pool_size = pool;
    t->bos = t->eos = t->eot = t->eom = t->unk = t->pad = -1;
    memset(t->trie.root, 0xff, sizeof t->trie.root);
    if (!t->vocab || !t->pool) {
        tok_free(t);
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory (%lld tokens)",
                       (long long)n_vocab);
    }
    *out = t;
    return KVF_OK;
}

enum kvf_status tok_set_token(struct tokenizer *t, int32_t id, const char *text, size_t len,
                              float score, int type) {
    if (id < 0 || id >= t->n_vocab) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: token id %d out of range [0, %d)", id,
                       t->n_vocab);
    }
    if (t->vocab[id].text) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: token id %d defined twice", id);
    }
    if (len > UINT32_MAX || len + 1 > t->pool_size - t->pool_used) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: token texts larger than announced");
    }
    char *p = t->pool + t->pool_used;
    memcpy(p, text, len);
    p[len] = '\0';
    t->pool_used += len + 1;
    t->vocab[id] = (struct tok_entry){ p, (uint32_t)len, score,
                                       (uint8_t)(type >= 0 && type <= TOK_BYTE ? type
                                                                               : TOK_UNDEFINED) };
    return KVF_OK;
}

static enum kvf_status trie_insert(struct tok_trie *tr, const char *s, size_t n, int32_t id) {
    /* Room for the whole text first: `link` points into the node array. */
    if (tr->n + n > tr->cap) {
        size_t cap = KVF_MAX(tr->cap * 2, tr->n + n + 256);
        struct tok_trie_node *p = realloc(tr->nodes, cap * sizeof *p);
        if (!p) {
            return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory (special tokens)");
        }
        tr->nodes = p;
        tr->cap = cap;
    }
    int32_t *link = &tr->root[(uint8_t)s[0]];
    for (size_t i = 0;;) {
        int32_t node = *link;
        /* Siblings: find the node for byte s[i] or append one. */
        while (node >= 0 && tr->nodes[node].byte != (uint8_t)s[i]) {
            link = &tr->nodes[node].sibling;
            node = *link;
        }
        if (node < 0) {
            node = (int32_t)tr->n++;
            tr->nodes[node] = (struct tok_trie_node){ -1, -1, -1, (uint8_t)s[i] };
            *link = node;
        }
        if (++i == n) {
            tr->nodes[node].id = id;
            return KVF_OK;
        }
        link = &tr->nodes[node].child;
    }
}

static int special_cmp(const void *a, const void *b, void *ctx) {
    const struct tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->vocab[x].len, ly = t->vocab[y].len;
    if (lx != ly) {
        return lx > ly ? -1 : 1;
    }
    return x < y ? -1 : x > y;
}

static bool is_special_type(int type) {
    return type == TOK_CONTROL || type == TOK_USER_DEFINED || type == TOK_UNKNOWN;
}

/* Texts of tokens that end a turn, as llama.cpp recognises them. */
static const char *const eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
    "<|eom_id|>", "<EOT>", "<|end_of_text|>",
};

static enum kvf_status specials_build(struct tokenizer *t) {
    int32_t n = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        n += is_special_type(t->vocab[id].type) && t->vocab[id].len > 0;
    }
    t->prio = malloc((size_t)t->n_vocab * sizeof *t->prio);
    t->specials = malloc(((size_t)n + 1) * sizeof *t->specials);
    if (!t->prio || !t->specials) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory (special tokens)");
    }
    t->n_specials = 0;
    for (int32_t id = 0; id < t->n_vocab; id++) {
        t->prio[id] = -1;
        if (is_special_type(t->vocab[id].type) && t->vocab[id].len > 0) {
            t->specials[t->n_specials++] = id;
        }
    }
    qsort_r(t->specials, (size_t)t->n_specials, sizeof *t->specials, special_cmp, t);
    for (int32_t i = 0; i < t->n_specials; i++) {
        int32_t id = t->specials[i];
        t->prio[id] = i;
        enum kvf_status st = trie_insert(&t->trie, t->vocab[id].text, t->vocab[id].len, id);
        if (st != KVF_OK) {
            return st;
        }
    }
    return KVF_OK;
}

enum kvf_status tok_finish(struct tokenizer *t) {
    for (int32_t id = 0; id < t->n_vocab; id++) {
        if (!t->vocab[id].text) {
            return err_set(KVF_ERR_FORMAT, "tokenizer: token id %d has no text", id);
        }
        t->max_len = KVF_MAX(t->max_len, t->vocab[id].len);
    }
    int32_t *ids[] = { &t->bos, &t->eos, &t->eot, &t->eom, &t->unk };
    static const char *const names[] = { "bos", "eos", "eot", "eom", "unknown" };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        if (*ids[i] < -1 || *ids[i] >= t->n_vocab) {
            return err_set(KVF_ERR_FORMAT, "tokenizer: %s token id %d out of range [0, %d)",
                           names[i], *ids[i], t->n_vocab);
        }
    }
    if (t->pad < -1 || t->pad >= t->n_vocab) {
        t->pad = -1; /* never used for encoding; a stray value is harmless */
    }
    enum kvf_status st = map_build(t);
    if (st != KVF_OK) {
        return st;
    }

    t->eog = calloc((size_t)t->n_vocab, 1);
    if (!t->eog) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
    }
    for (size_t i = 0; i < sizeof eog_texts / sizeof eog_texts[0]; i++) {
        int32_t id = tok_find(t, eog_texts[i], strlen(eog_texts[i]));
        if (id < 0) {
            continue;
        }
        if (t->eot < 0 && i < 5) {
            t->eot = id; /* files often omit eot_token_id; the list is in preference order */
        }
        t->eog[id] = 1;
        /* Some converters mark these as normal text; treat them as control
         * tokens as llama.cpp does, so they are parsed and not printed. */
        if (t->vocab[id].type == TOK_NORMAL || t->vocab[id].type == TOK_UNDEFINED) {
            t->vocab[id].type = TOK_CONTROL;
        }
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;
    if (t->bos < 0) {
        t->add_bos = false;
    }

    st = specials_build(t);
    if (st != KVF_OK) {
        return st;
    }

    for (int b = 0; b < 256; b++) {
        char buf[8];
        if (t->algo == TOK_ALGO_SPM) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            t->byte_id[b] = tok_find(t, buf, 6);
        } else {
            t->byte_id[b] = tok_find(t, buf, (size_t)tok_byte_to_utf8((uint8_t)b, buf));
        }
    }
    if (t->algo == TOK_ALGO_BPE && !t->pretok) {
        st = pretok_init(t->pre, &t->pretok);
        if (st != KVF_OK) {
            return st;
        }
    }
    return KVF_OK;
}

void tok_free(struct tokenizer *t) {
    if (!t) {
        return;
    }
    free(t->vocab);
    free(t->pool);
    free(t->map.slots);
    free(t->eog);
    free(t->specials);
    free(t->prio);
    free(t->trie.nodes);
    free(t->merges.slots);
    pretok_free(t->pretok);
    free(t->chat_template);
    free(t);
}

/* ------------------------------------------------------------ encoding -- */

/* A piece of the input: raw text, or a special token cut out of it. */
struct fragment { size_t off, len; int32_t id; };
struct frag_vec { struct fragment *v; size_t n, cap; };

static bool frag_push(struct frag_vec *f, size_t off, size_t len, int32_t id) {
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 16;
        struct fragment *p = realloc(f->v, cap * sizeof *p);
        if (!p) {
            return false;
        }
        f->v = p;
        f->cap = cap;
    }
    f->v[f->n++] = (struct fragment){ off, len, id };
    return true;
}

static bool special_allowed(const struct tokenizer *t, int32_t id, bool parse_special) {
    /* User-defined tokens are always cut out first (as Hugging Face does with
     * non-special added tokens); control and unknown only on request. */
    return parse_special || t->vocab[id].type == TOK_USER_DEFINED;
}

/* Cuts the special tokens out of text, giving them llama.cpp's priority:
 * each token in turn (longest first) takes its leftmost non-overlapping
 * occurrences in what is still raw. A trie pass first finds which specials
 * occur at all, so only those are searched for. */
static bool partition(const struct tokenizer *t, const char *text, size_t len,
                      bool parse_special, struct frag_vec *out) {
    struct frag_vec cur = { 0 }, next = { 0 };
    uint8_t *present = NULL;
    bool ok = frag_push(&cur, 0, len, -1);
    bool any = false;
    if (ok && t->n_specials > 0 && len > 0) {
        present = calloc((size_t)t->n_specials, 1);
        ok = present != NULL;
        for (size_t pos = 0; ok && pos < len; pos++) {
            int32_t node = t->trie.root[(uint8_t)text[pos]];
            for (size_t i = pos; node >= 0;) {
                const struct tok_trie_node *nd = &t->trie.nodes[node];
                if (nd->id >= 0 && special_allowed(t, nd->id, parse_special)) {
                    present[t->prio[nd->id]] = 1;
                    any = true;
                }
                if (++i == len) {
                    break;
                }
                for (node = nd->child; node >= 0 && t->trie.nodes[node].byte != (uint8_t)text[i];) {
                    node = t->trie.nodes[node].sibling;
                }
            }
        }
    }
    for (int32_t p = 0; ok && any && p < t->n_specials; p++) {
        if (!present[p]) {
            continue;
        }
        const struct tok_entry *e = &t->vocab[t->specials[p]];
        next.n = 0;
        for (size_t k = 0; ok && k < cur.n; k++) {
            struct fragment f = cur.v[k];
            if (f.id >= 0) {
                ok = frag_push(&next, f.off, f.len, f.id);
                continue;
            }
            size_t start = f.off, end = f.off + f.len;
            while (ok && start < end) {
                const char *m = memmem(text + start, end - start, e->text, e->len);
                if (!m) {
                    break;
                }
                size_t at = (size_t)(m - text);
                if (at > start) {
                    ok = frag_push(&next, start, at - start, -1);
                }
                ok = ok && frag_push(&next, at, e->len, t->specials[p]);
                start = at + e->len;
            }
            if (ok && start < end) {
                ok = frag_push(&next, start, end - start, -1);
            }
        }
        struct frag_vec tmp = cur;
        cur = next;
        next = tmp;
    }
    free(present);
    free(next.v);
    if (!ok) {
        free(cur.v);
        return false;
    }
    *out = cur;
    return true;
}

/* add_bos adds BOS only if the model asks for it (add_bos_token), as
 * llama.cpp's add_special does. Invalid arguments or out of memory give
 * INT32_MIN with the message in kvf_last_error(). */
int32_t tok_encode(const struct tokenizer *t, const char *text, size_t len, int32_t *out,
                   int32_t n_max, bool add_bos, bool parse_special) {
    if (!t || (!text && len > 0) || n_max < 0 || (!out && n_max > 0)) {
        err_set(KVF_ERR_INVALID_ARG, "tok_encode: invalid argument");
        return INT32_MIN;
    }
    struct tok_vec ids = { 0 };
    struct frag_vec frags = { 0 };
    bool ok = true;
    if (add_bos && t->add_bos) {
        ok = tok_vec_push(&ids, t->bos);
    }
    ok = ok && partition(t, text ? text : "", len, parse_special, &frags);
    /* SPM puts the space prefix before text at the start and after specials. */
    bool prev_special = true;
    for (size_t k = 0; ok && k < frags.n; k++) {
        const struct fragment *f = &frags.v[k];
        if (f->id >= 0) {
            ok = tok_vec_push(&ids, f->id);
            prev_special = true;
        } else if (f->len > 0) {
            ok = t->algo == TOK_ALGO_SPM
                     ? tok_spm_encode(t, text + f->off, f->len,
                                      t->add_space_prefix && prev_special, &ids)
                     : tok_bpe_encode(t, text + f->off, f->len, &ids);
            prev_special = false;
        }
    }
    free(frags.v);
    int32_t ret;
    if (!ok) {
        err_set(KVF_ERR_NOMEM, "tok_encode: out of memory");
        ret = INT32_MIN;
    } else if (ids.n > INT32_MAX) {
        err_set(KVF_ERR_INVALID_ARG, "tok_encode: more than INT32_MAX tokens");
        ret = INT32_MIN;
    } else if (ids.n > (size_t)n_max) {
        ret = -(int32_t)ids.n;
    } else {
        if (ids.n) {
            memcpy(out, ids.v, ids.n * sizeof *out);
        }
        ret = (int32_t)ids.n;
    }
    free(ids.v);
    return ret;
}

/* ------------------------------------------------------------ decoding -- */

static int32_t copy_out(const char *s, size_t n, char *buf, int32_t len) {
    if ((size_t)len < n) {
        return -(int32_t)n;
    }
    if (n) {
        memcpy(buf, s, n);
    }
    return (int32_t)n;
}

static int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
}

int32_t tok_piece(const struct tokenizer *t, int32_t id, char *buf, int32_t len,
                  bool render_special) {
    if (!t || id < 0 || id >= t->n_vocab || len < 0 || (!buf && len > 0)) {
        return 0;
    }
    const struct tok_entry *e = &t->vocab[id];
    switch (e->type) {
    case TOK_CONTROL:
    case TOK_UNKNOWN:
        return render_special ? copy_out(e->text, e->len, buf, len) : 0;
    case TOK_USER_DEFINED:
        return copy_out(e->text, e->len, buf, len);
    case TOK_BYTE:
        if (e->len == 6 && memcmp(e->text, "<0x", 3) == 0 && hex_digit(e->text[3]) >= 0 &&
            hex_digit(e->text[4]) >= 0) {
            char c = (char)(hex_digit(e->text[3]) * 16 + hex_digit(e->text[4]));
            return copy_out(&c, 1, buf, len);
        }
        return copy_out(e->text, e->len, buf, len);
    case TOK_NORMAL:
        break;
    default:
        return 0; /* unused / undefined tokens print nothing */
    }
    /* Decode into buf while counting, so a short buffer still learns the size. */
    size_t n = 0;
    for (uint32_t i = 0; i < e->len;) {
        const uint8_t *s = (const uint8_t *)e->text + i;
        if (t->algo == TOK_ALGO_SPM) {
            if (i + 3 <= e->len && s[0] == 0xE2 && s[1] == 0x96 && s[2] == 0x81) {
                if (n < (size_t)len) buf[n] = ' ';
                n++;
                i += 3;
            } else {
                if (n < (size_t)len) buf[n] = (char)s[0];
                n++;
                i++;
            }
            continue;
        }
        /* BPE: each character stands for one byte (GPT-2 byte-level). */
        size_t cl = KVF_MIN(tok_utf8_len(s[0]), e->len - i);
        uint32_t cp = cl == 1 ? s[0] : cl == 2 ? (uint32_t)(s[0] & 0x1F) << 6 | (s[1] & 0x3F) : 0;
        int b = cl <= 2 ? tok_cp_to_byte(cp) : -1;
        if (b >= 0) {
            if (n < (size_t)len) buf[n] = (char)b;
            n++;
        } else {
            /* Not a byte-level character: pass its bytes through. */
            for (size_t k = 0; k < cl; k++, n++) {
                if (n < (size_t)len) buf[n] = (char)s[k];
            }
        }
        i += (uint32_t)cl;
    }
    return n > (size_t)len ? -(int32_t)n : (int32_t)n;
}

/* ------------------------------------------------------------ getters -- */

int32_t tok_n_vocab(const struct tokenizer *t) { return t->n_vocab; }
int32_t tok_bos(const struct tokenizer *t) { return t->bos; }
int32_t tok_eos(const struct tokenizer *t) { return t->eos; }
const char *tok_kind(const struct tokenizer *t) { return t->kind; }
const char *tok_chat_template(const struct tokenizer *t) { return t->chat_template; }

bool tok_is_eog(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}

const char *tok_text(const struct tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->vocab[id].text : NULL;
}

/* --------------------------------------------------------- GGUF loader -- */

/* The array under key with elements of type elem; *out NULL when absent.
 * Present with another type is a format error. */
static enum kvf_status gguf_arr(const struct gguf_file *f, const char *key, enum gguf_vtype elem,
                                const struct gguf_value **out) {
    *out = NULL;
    const struct gguf_kv *kv = gguf_find(f, key);
    if (!kv) {
        return KVF_OK;
    }
    if (kv->val.type != GGUF_ARR || kv->val.arr.type != elem) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: %s has the wrong type", key);
    }
    *out = &kv->val;
    return KVF_OK;
}

/* A token id under key into *id (left alone when absent). */
static enum kvf_status gguf_token_id(const struct gguf_file *f, const char *key, int64_t n_vocab,
                                     int32_t *id) {
    if (!gguf_find(f, key)) {
        return KVF_OK;
    }
    int64_t v;
    if (!gguf_get_i64(f, key, &v)) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: %s is not an integer", key);
    }
    if (v < 0 || v >= n_vocab) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: %s = %lld out of range [0, %lld)", key,
                       (long long)v, (long long)n_vocab);
    }
    *id = (int32_t)v;
    return KVF_OK;
}

static enum kvf_status load_gguf(const struct gguf_file *f, struct tokenizer **out) {
    const char *model = gguf_get_str(f, "tokenizer.ggml.model");
    if (!model) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: tokenizer.ggml.model missing");
    }
    enum tok_algo algo;
    if (strcmp(model, "llama") == 0) {
        algo = TOK_ALGO_SPM;
    } else if (strcmp(model, "gpt2") == 0) {
        algo = TOK_ALGO_BPE;
    } else {
        return err_set(KVF_ERR_UNSUPPORTED,
                       "tokenizer: model '%.64s' not supported (llama, gpt2)", model);
    }
    const struct tok_pre *pre = NULL;
    /* llama.cpp's choice when the file names none, with a warning. */
    const char *pre_name = "default";
    if (algo == TOK_ALGO_BPE) {
        if (gguf_get_str(f, "tokenizer.ggml.pre")) {
            pre_name = gguf_get_str(f, "tokenizer.ggml.pre");
        }
        enum kvf_status st = tok_pre_from_name(pre_name, &pre);
        if (st != KVF_OK) {
            return st;
        }
    }

    const struct gguf_value *tokens, *scores, *types, *merges = NULL;
    enum kvf_status st;
    if ((st = gguf_arr(f, "tokenizer.ggml.tokens", GGUF_STR, &tokens)) != KVF_OK ||
        (st = gguf_arr(f, "tokenizer.ggml.scores", GGUF_F32, &scores)) != KVF_OK ||
        (st = gguf_arr(f, "tokenizer.ggml.token_type", GGUF_I32, &types)) != KVF_OK) {
        return st;
    }
    if (!tokens) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: tokenizer.ggml.tokens missing");
    }
    uint64_t n = tokens->arr.n;
    if (scores && scores->arr.n != n) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: %llu scores for %llu tokens",
                       (unsigned long long)scores->arr.n, (unsigned long long)n);
    }
    if (types && types->arr.n != n) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: %llu token types for %llu tokens",
                       (unsigned long long)types->arr.n, (unsigned long long)n);
    }
    if (algo == TOK_ALGO_BPE) {
        if ((st = gguf_arr(f, "tokenizer.ggml.merges", GGUF_STR, &merges)) != KVF_OK) {
            return st;
        }
        if (!merges) {
            return err_set(KVF_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges missing");
        }
    }
    if (n == 0 || n >= INT32_MAX) {
        return err_set(KVF_ERR_FORMAT, "tokenizer: vocabulary of %llu tokens",
                       (unsigned long long)n);
    }

    const struct gguf_str *strs = tokens->arr.data;
    size_t text_bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!size_add(text_bytes, strs[i].len, &text_bytes)) {
            return err_set(KVF_ERR_FORMAT, "tokenizer: vocabulary text too large");
        }
    }
    struct tokenizer *t;
    if ((st = tok_alloc(algo, (int64_t)n, text_bytes, &t)) != KVF_OK) {
        return st;
    }
    *out = t;
    for (uint64_t i = 0; i < n; i++) {
        float score = 0.0f;
        int32_t type = TOK_NORMAL;
        if (scores) {
            memcpy(&score, (const char *)scores->arr.data + 4 * i, 4);
        }
        if (types) {
            memcpy(&type, (const char *)types->arr.data + 4 * i, 4);
        }
        if ((st = tok_set_token(t, (int32_t)i, strs[i].s, strs[i].len, score, type)) != KVF_OK) {
            return st;
        }
    }

    if (algo == TOK_ALGO_SPM) {
        /* llama.cpp's defaults for SentencePiece vocabularies. */
        if (n > 2) {
            t->unk = 0;
            t->bos = 1;
            t->eos = 2;
        }
        t->add_bos = true;
        t->add_space_prefix = true;
        snprintf(t->kind, sizeof t->kind, "spm");
    } else {
        t->add_bos = pre->add_bos;
        t->ignore_merges = pre->ignore_merges;
        t->pre = pre;
        snprintf(t->kind, sizeof t->kind, "bpe:%.40s", pre_name);
    }
    static const char *const id_keys[] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
        "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id",
        "tokenizer.ggml.unknown_token_id",
    };
    int32_t *id_dst[] = { &t->bos, &t->eos, &t->eot, &t->eom, &t->unk };
    for (size_t i = 0; i < sizeof id_keys / sizeof id_keys[0]; i++) {
        if ((st = gguf_token_id(f, id_keys[i], (int64_t)n, id_dst[i])) != KVF_OK) {
            return st;
        }
    }
    int64_t pad;
    if (gguf_get_i64(f, "tokenizer.ggml.padding_token_id", &pad) && pad >= 0 && pad < (int64_t)n) {
        t->pad = (int32_t)pad;
    }
    bool flag;
    if (gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &flag)) {
        t->add_bos = flag;
    }
    if (algo == TOK_ALGO_SPM && gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &flag)) {
        t->add_space_prefix = flag;
    }
    const char *tmpl = gguf_get_str(f, "tokenizer.chat_template");
    if (tmpl && !(t->chat_template = strdup(tmpl))) {
        return err_set(KVF_ERR_NOMEM, "tokenizer: out of memory");
    }

    if ((st = tok_finish(t)) != KVF_OK) {
        return st;
    }
    if (merges) {
        if (merges->arr.n >= INT32_MAX) {
            return err_set(KVF_ERR_FORMAT, "tokenizer: absurd merge count");
        }
        const struct gguf_str *ms = merges->arr.data;
        for (uint64_t i = 0; i < merges->arr.n; i++) {
            /* "left right"; the first character may itself be a space. */
            const char *sp = ms[i].len > 1 ? memchr(ms[i].s + 1, ' ', ms[i].len - 1) : NULL;
            if (!sp) {
                return err_set(KVF_ERR_FORMAT, "tokenizer: merge %llu has no separator",
                               (unsigned long long)i);
            }
            size_t llen = (size_t)(sp - ms[i].s);
            if ((st = tok_merge_add(t, ms[i].s, llen, sp + 1, ms[i].len - llen - 1,
                                    (int32_t)i, NULL)) != KVF_OK) {
                return st;
            }
        }
    }
    return KVF_OK;
}

enum kvf_status tok_load_gguf(const struct gguf_file *f, struct tokenizer **out) {
    if (!f || !out) {
        return err_set(KVF_ERR_INVALID_ARG, "tok_load_gguf: NULL argument");
    }
    *out = NULL;
    struct tokenizer *t = NULL;
    enum kvf_status st = load_gguf(f, &t);
    if (st != KVF_OK) {
        tok_free(t);
        return st;
    }
    *out = t;
    return KVF_OK;
}
