/* Tokenizers: SentencePiece-style (GGUF model "llama") and byte-level BPE
 * (GGUF model "gpt2") with llama.cpp's pre-tokenizers (tok/pretok.c).
 * Loaded from GGUF metadata or tokenizer.json. */
#ifndef KVF_TOKENIZER_H
#define KVF_TOKENIZER_H

#include "core/common.h"
#include "io/gguf.h"

struct tokenizer; /* opaque, immutable after load */

enum kvf_status tok_load_gguf(const struct gguf_file *f, struct tokenizer **out);
/* dir holds tokenizer.json (and optionally tokenizer_config.json). */
enum kvf_status tok_load_hf(const char *dir, struct tokenizer **out);
void tok_free(struct tokenizer *t);

/* Writes at most n_max ids; returns their count, -(count needed) when n_max
 * is too small, or INT32_MIN on errors (message set). kvf_tokenize wraps it. */
int32_t tok_encode(const struct tokenizer *t, const char *text, size_t len, int32_t *out,
                   int32_t n_max, bool add_bos, bool parse_special);
/* Writes the piece's bytes (no NUL); returns their count, or -(count
 * needed) when len is too small; 0 for an id out of range.
 * kvf_token_to_piece wraps it. */
int32_t tok_piece(const struct tokenizer *t, int32_t id, char *buf, int32_t len,
                  bool render_special);
int32_t tok_n_vocab(const struct tokenizer *t);
int32_t tok_bos(const struct tokenizer *t);  /* -1 when absent */
int32_t tok_eos(const struct tokenizer *t);
bool tok_is_eog(const struct tokenizer *t, int32_t id); /* eos, eot, <|im_end|>, <end_of_turn>... */
/* The vocabulary text of a token (as stored), or NULL if out of range. */
const char *tok_text(const struct tokenizer *t, int32_t id);
/* "spm" or "bpe:<pre>". */
const char *tok_kind(const struct tokenizer *t);
/* tokenizer.chat_template (Jinja text) or NULL. */
const char *tok_chat_template(const struct tokenizer *t);

#endif
