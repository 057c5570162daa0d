/* Byte-level BPE (llama.cpp's llm_tokenizer_bpe): the pre-tokenizer splits
 * the text into words; each byte of a word starts as the token of its GPT-2
 * character, and the adjacent pair with the lowest merge rank is merged until
 * no merge applies. Symbols are tracked by token id, so merges are looked up
 * by id pair without building strings. */
#include "tok/tok_impl.h"

#include <stdlib.h>
#include <string.h>

/* GPT-2 maps the printable bytes (0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF) to
 * themselves and the other 68, in order, to U+0100 onwards. */
static uint32_t byte_to_cp(uint8_t b) {
    if (b <= 0x20) return 0x100 + b;
    if (b >= 0x7F && b <= 0xA0) return 0x100 + 33 + (b - 0x7F);
    if (b == 0xAD) return 0x100 + 33 + 34;
    return b;
}

int tok_byte_to_utf8(uint8_t b, char *out) {
    uint32_t cp = byte_to_cp(b);
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xC0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int tok_cp_to_byte(uint32_t cp) {
    if (cp < 0x100) {
        return byte_to_cp((uint8_t)cp) == cp ? (int)cp : -1;
    }
    if (cp <= 0x100 + 32) return (int)(cp - 0x100);
    if (cp <= 0x100 + 66) return (int)(cp - 0x100 - 33 + 0x7F);
    if (cp == 0x100 + 67) return 0xAD;
    return -1;
}

struct bpe_state {
    const struct tokenizer *t;
    struct tok_vec *out;
    struct tok_symbol *sym;
    size_t sym_cap;
    char *enc;                /* a word in byte-level characters (ignore_merges) */
    size_t enc_cap;
    struct tok_heap heap;
    bool ok;
};

static bool bpe_try_bigram(struct bpe_state *st, int32_t l, int32_t r) {
    int32_t rank, result;
    if (l < 0 || r < 0 || !tok_merge_find(st->t, st->sym[l].id, st->sym[r].id, &rank, &result)) {
        return true;
    }
    return tok_heap_push(&st->heap,
                         (struct tok_bigram){ -(double)rank, l, r, st->sym[l].n, st->sym[r].n });
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return true;
    }
    size_t n = KVF_MAX(need, *cap * 2);
    void *q = realloc(*p, n * elem);
    if (!q) {
        return false;
    }
    *p = q;
    *cap = n;
    return true;
}

/* Whole word as one token, when the vocabulary has it (llama3's ignore_merges). */
static bool bpe_whole_word(struct bpe_state *st, const uint8_t *w, size_t len, int32_t *id) {
    const struct tokenizer *t = st->t;
    *id = -1;
    if (len > t->max_len) {
        return true;
    }
    if (!grow((void **)&st->enc, &st->enc_cap, 2 * len, 1)) {
        return false;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        n += (size_t)tok_byte_to_utf8(w[i], st->enc + n);
    }
    *id = tok_find(t, st->enc, n);
    return true;
}

static bool bpe_word(void *ud, const char *piece, size_t len) {
    struct bpe_state *st = ud;
    const struct tokenizer *t = st->t;
    const uint8_t *w = (const uint8_t *)piece;
    if (t->ignore_merges) {
        int32_t id;
        if (!bpe_whole_word(st, w, len, &id)) {
            return st->ok = false;
        }
        if (id >= 0) {
            return st->ok = tok_vec_push(st->out, id);
        }
    }
    if (len > UINT32_MAX || !grow((void **)&st->sym, &st->sym_cap, len, sizeof *st->sym)) {
        return st->ok = false;
    }
    struct tok_symbol *sym = st->sym;
    for (size_t i = 0; i < len; i++) {
        sym[i] = (struct tok_symbol){ (int32_t)i - 1, i + 1 == len ? -1 : (int32_t)i + 1,
                                      (uint32_t)i, 1, t->byte_id[w[i]] };
    }
    st->heap.n = 0;
    bool ok = true;
    for (size_t i = 1; ok && i < len; i++) {
        ok = bpe_try_bigram(st, (int32_t)i - 1, (int32_t)i);
    }
    while (ok && st->heap.n > 0) {
        struct tok_bigram b = tok_heap_pop(&st->heap);
        struct tok_symbol *l = &sym[b.left], *r = &sym[b.right];
        if (l->n != b.ln || r->n != b.rn) {
            continue; /* one side has been merged since */
        }
        int32_t rank;
        tok_merge_find(t, l->id, r->id, &rank, &l->id);
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) {
            sym[r->next].prev = b.left;
        }
        ok = bpe_try_bigram(st, l->prev, b.left) && bpe_try_bigram(st, b.left, l->next);
    }
    for (int32_t i = len > 0 ? 0 : -1; ok && i >= 0; i = sym[i].next) {
        /* Only a lone byte whose character is not in the vocabulary lacks an
         * id; llama.cpp drops it, we emit <unk> when there is one. */
        int32_t id = sym[i].id >= 0 ? sym[i].id : t->unk;
        if (id >= 0) {
            ok = tok_vec_push(st->out, id);
        }
    }
    return st->ok = ok;
}

bool tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_vec *out) {
    struct bpe_state st = { .t = t, .out = out, .ok = true };
    bool ok = pretok_split(t->pretok, text, len, bpe_word, &st) && st.ok;
    free(st.sym);
    free(st.enc);
    free(st.heap.v);
    return ok;
}
