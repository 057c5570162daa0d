/* Private half of the tokenizer: the vocabulary shared by both algorithms,
 * the loaders' builder calls, and the pieces spm.c / bpe.c / pretok.c share.
 * Token ids are int32_t; -1 means "none". */
#ifndef KVF_TOK_IMPL_H
#define KVF_TOK_IMPL_H

#include "tok/tokenizer.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* GGUF tokenizer.ggml.token_type values. */
enum tok_type {
    TOK_UNDEFINED = 0, TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3,
    TOK_USER_DEFINED = 4, TOK_UNUSED = 5, TOK_BYTE = 6,
};

enum tok_algo { TOK_ALGO_SPM, TOK_ALGO_BPE };

/* Longest chain of pre-tokenizer regexes (deepseek-llm, chameleon). */
#define PRETOK_MAX 6

/* A pre-tokenizer of llama.cpp (pretok.c): the regexes it runs in turn for
 * some tokenizer.ggml.pre names and the settings its loader applies with
 * them, or why kvfold cannot run it. */
struct tok_pre {
    const char *names;          /* '|'-separated */
    const char *re[PRETOK_MAX]; /* the chain; NULL after the last */
    const char *hf;             /* the Split regex of tokenizer.json files, or NULL */
    bool ignore_merges;         /* a pre-token that is itself a token skips merging */
    bool add_bos;               /* llama.cpp's default when the file does not say */
    const char *unsupported;    /* why not, or NULL */
};
extern const struct tok_pre tok_pre_table[];
extern const size_t tok_pre_count;

struct tok_entry {
    const char *text; /* into tokenizer.pool, NUL-terminated (may contain NULs) */
    uint32_t len;
    float score;      /* SPM merge priority; -INFINITY: never formed by merging */
    uint8_t type;     /* enum tok_type */
};

/* Open-addressing table from token text to id; slots hold id+1 (0 = empty). */
struct tok_text_map { uint32_t *slots; size_t mask; };

/* Open-addressing table from a pair of token ids to the merge that joins
 * them (BPE). */
struct tok_merge { uint64_t key; int32_t rank, result; };
struct tok_merge_map { struct tok_merge *slots; size_t mask; size_t n; };

/* Trie over the texts of special tokens, to find which of them occur in a
 * text in one pass. Children are sibling lists, except the root's 256. */
struct tok_trie_node { int32_t child, sibling, id; uint8_t byte; };
struct tok_trie { struct tok_trie_node *nodes; size_t n, cap; int32_t root[256]; };

struct pretok; /* compiled pre-tokenizer regexes (pretok.c) */

struct tokenizer {
    enum tok_algo algo;
    char kind[48];                 /* "spm" or "bpe:<pre>" */
    int32_t n_vocab;
    struct tok_entry *vocab;       /* [n_vocab] */
    char *pool;                    /* the token texts, owned */
    size_t pool_size, pool_used;
    struct tok_text_map map;
    uint32_t max_len;              /* longest token text, bytes */

    int32_t bos, eos, eot, eom, unk, pad;
    bool add_bos;                  /* the model wants BOS when the caller asks for it */
    bool add_space_prefix;         /* SPM: a leading "▁" before text that follows BOS/specials */
    uint8_t *eog;                  /* [n_vocab] 1 = ends generation */

    /* Specials (CONTROL, USER_DEFINED, UNKNOWN), in matching priority:
     * longer text first, then lower id. prio[id] is the rank, -1 if not special. */
    int32_t *specials, n_specials;
    int32_t *prio;
    struct tok_trie trie;

    /* SPM: the <0xXX> token of each byte. BPE: the token of the byte's
     * GPT-2 character. -1 when absent. */
    int32_t byte_id[256];

    struct tok_merge_map merges;   /* BPE */
    const struct tok_pre *pre;     /* BPE */
    struct pretok *pretok;
    bool ignore_merges;            /* BPE: a pre-token that is itself a token skips merging */

    char *chat_template;
};

/* ------------------------------------------------------------ builder -- */
/* Loaders call tok_alloc, set every entry with tok_set_token, add merges,
 * set the special ids and flags, then tok_finish. On error the loader frees
 * the tokenizer with tok_free. */
enum kvf_status tok_alloc(enum tok_algo algo, int64_t n_vocab, size_t text_bytes,
                          struct tokenizer **out);
enum kvf_status tok_set_token(struct tokenizer *t, int32_t id, const char *text, size_t len,
                              float score, int type);
/* Validates ids, builds the lookup tables, the special list, the EOG set
 * and the byte tokens. */
enum kvf_status tok_finish(struct tokenizer *t);

/* Id of the token with exactly this text, or -1. */
int32_t tok_find(const struct tokenizer *t, const char *text, size_t len);

/* The pre-tokenizer for a GGUF tokenizer.ggml.pre name. KVF_ERR_UNSUPPORTED
 * naming it and why when kvfold cannot run it, or listing the known names
 * when it is unknown. */
enum kvf_status tok_pre_from_name(const char *name, const struct tok_pre **out);
/* The pre-tokenizer whose tokenizer.json Split regex this is, or NULL. */
const struct tok_pre *tok_pre_from_hf(const char *regex);

/* ----------------------------------------------------------- encoding -- */

struct tok_vec { int32_t *v; size_t n, cap; };
bool tok_vec_push(struct tok_vec *v, int32_t id);

/* Bigram work queue shared by SPM and BPE: highest prio first, then the
 * leftmost. ln/rn are the symbol lengths when queued, to drop stale entries. */
struct tok_bigram { double prio; int32_t left, right; uint32_t ln, rn; };
struct tok_heap { struct tok_bigram *v; size_t n, cap; };
bool tok_heap_push(struct tok_heap *h, struct tok_bigram b);
struct tok_bigram tok_heap_pop(struct tok_heap *h);

/* A symbol of the merge loops: bytes [off, off+n) of the word, linked list. */
struct tok_symbol { int32_t prev, next; uint32_t off, n; int32_t id; };

/* Encodes one fragment of raw text (no special tokens inside) and appends
 * the ids. Return false only when out of memory. */
bool tok_spm_encode(const struct tokenizer *t, const char *text, size_t len, bool prefix_space,
                    struct tok_vec *out);
bool tok_bpe_encode(const struct tokenizer *t, const char *text, size_t len, struct tok_vec *out);

/* Merge table (BPE). tok_merge_add checks that both sides and their
 * concatenation are tokens and gives the latter's id in *result (may be
 * NULL); tok_merge_find gives rank and result of merging left and right,
 * false if they do not merge. */
enum kvf_status tok_merge_add(struct tokenizer *t, const char *left, size_t llen,
                              const char *right, size_t rlen, int32_t rank, int32_t *result);
bool tok_merge_find(const struct tokenizer *t, int32_t left, int32_t right, int32_t *rank,
                    int32_t *result);

/* GPT-2 byte-level mapping: the UTF-8 of the character standing for byte b
 * (writes 1-2 bytes, returns the count), and the reverse for one code point
 * (-1 if cp stands for no byte). */
int tok_byte_to_utf8(uint8_t b, char *out);
int tok_cp_to_byte(uint32_t cp);

/* ------------------------------------------------------ pre-tokenizer -- */

enum kvf_status pretok_init(const struct tok_pre *pre, struct pretok **out);
void pretok_free(struct pretok *p);
/* Splits text into pieces; calls fn(ud, piece, len) for each, in order. The
 * pieces are of the text, or of a copy with invalid UTF-8 replaced as
 * llama.cpp does (U+FFFD). Stops and returns false when fn does, or when out
 * of memory. */
bool pretok_split(const struct pretok *p, const char *text, size_t len,
                  bool (*fn)(void *ud, const char *piece, size_t len), void *ud);

/* Length of a UTF-8 sequence from its lead byte (1 for stray continuation bytes). */
static inline size_t tok_utf8_len(uint8_t c) {
    static const uint8_t lens[16] = { 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4 };
    return lens[c >> 4];
}

#endif
