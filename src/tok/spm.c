/* SentencePiece-style encoding (llama.cpp's llm_tokenizer_spm): spaces
 * become U+2581, the text starts as one symbol per UTF-8 character, and the
 * adjacent pair whose concatenation is the best-scoring token is merged until
 * none is left. Symbols that are not tokens fall back to <0xXX> byte tokens. */
#include "tok/tok_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct spm_state {
    const struct tokenizer *t;
    const char *s;            /* escaped text */
    struct tok_symbol *sym;
    struct tok_heap heap;
};

static bool spm_try_bigram(struct spm_state *st, int32_t l, int32_t r) {
    if (l < 0 || r < 0) {
        return true;
    }
    const struct tok_symbol *a = &st->sym[l], *b = &st->sym[r];
    int32_t id = tok_find(st->t, st->s + a->off, (size_t)a->n + b->n);
    if (id < 0) {
        return true;
    }
    float score = st->t->vocab[id].score;
    if (isinf(score) && score < 0) {
        return true; /* a token no merge produces (vocabularies from tokenizer.json) */
    }
    return tok_heap_push(&st->heap, (struct tok_bigram){ score, l, r, a->n, b->n });
}

static bool spm_emit(const struct tokenizer *t, const char *s, const struct tok_symbol *sym,
                     struct tok_vec *out) {
    int32_t id = tok_find(t, s + sym->off, sym->n);
    if (id >= 0) {
        return tok_vec_push(out, id);
    }
    for (uint32_t i = 0; i < sym->n; i++) {
        uint8_t c = (uint8_t)s[sym->off + i];
        id = t->byte_id[c];
        if (id < 0) {
            id = tok_find(t, (const char *)&c, 1);
        }
        if (id < 0) {
            id = t->unk;
        }
        if (id >= 0 && !tok_vec_push(out, id)) {
            return false;
        }
    }
    return true;
}

bool tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool prefix_space,
                    struct tok_vec *out) {
    static const char ws[3] = { '\xE2', '\x96', '\x81' };
    size_t cap;
    if (!size_add(len, 1, &cap) || !size_mul(cap, 3, &cap) || cap / 3 > UINT32_MAX) {
        return false;
    }
    char *s = malloc(cap);
    struct tok_symbol *sym = malloc(cap / 3 * sizeof *sym);
    struct spm_state st = { t, s, sym, { 0 } };
    bool ok = s && sym;
    size_t n = 0;
    if (ok && prefix_space) {
        memcpy(s, ws, 3);
        n = 3;
    }
    for (size_t i = 0; ok && i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, ws, 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    int32_t n_sym = 0;
    for (size_t off = 0; ok && off < n; n_sym++) {
        size_t cl = KVF_MIN(tok_utf8_len((uint8_t)s[off]), n - off);
        sym[n_sym] = (struct tok_symbol){ n_sym - 1, off + cl == n ? -1 : n_sym + 1,
                                          (uint32_t)off, (uint32_t)cl, -1 };
        off += cl;
    }
    for (int32_t i = 1; ok && i < n_sym; i++) {
        ok = spm_try_bigram(&st, i - 1, i);
    }
    while (ok && st.heap.n > 0) {
        struct tok_bigram b = tok_heap_pop(&st.heap);
        struct tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n != b.ln || r->n != b.rn) {
            continue; /* one side has been merged since */
        }
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            sym[r->next].prev = b.left;
        }
        ok = spm_try_bigram(&st, l->prev, b.left) && spm_try_bigram(&st, b.left, l->next);
    }
    for (int32_t i = n_sym > 0 ? 0 : -1; ok && i >= 0; i = sym[i].next) {
        ok = spm_emit(t, s, &sym[i], out);
    }
    free(st.heap.v);
    free(sym);
    free(s);
    return ok;
}
