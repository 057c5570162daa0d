/* Text through the fixture vocabulary (byte-level BPE, 300 tokens, read
 * from GGUF or from a Hugging Face tokenizer.json): the input's first byte
 * picks the model and the flags, the rest is the text. It is tokenized
 * (with and without special tokens), the ids are printed back piece by
 * piece, and the text, cut at its NUL bytes into system, user and assistant
 * messages, goes through every chat template. */
#include "fuzz.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct kvf_model *vocab(int which) {
    static const struct kvf_model *m[2];
    if (!m[which]) m[which] = fuzz_fixed_model(which ? "llama-st" : "llama-q4_0.gguf", NULL, true);
    return m[which];
}

static void tokenize(const struct kvf_model *m, const char *text, size_t len, bool bos, bool special) {
    int32_t small[8], n = 0;
    enum kvf_status st = kvf_tokenize(m, text, len, small, 8, bos, special, &n);
    int32_t *ids = small;
    if (st == KVF_ERR_BUFFER) {
        if (!(ids = malloc(sizeof *ids * (size_t)n))) return;
        const int32_t need = n;
        st = kvf_tokenize(m, text, len, ids, need, bos, special, &n);
        if (st != KVF_OK || n != need) __builtin_trap(); /* the size it asked for must do */
    }
    for (int32_t i = 0; st == KVF_OK && i < n; i++) {
        char piece[4];
        int32_t np;
        if (kvf_token_to_piece(m, ids[i], piece, sizeof piece, special, &np) == KVF_ERR_BUFFER) {
            char *big = malloc((size_t)np);
            if (big && kvf_token_to_piece(m, ids[i], big, np, special, &np) != KVF_OK) __builtin_trap();
            free(big);
        }
    }
    if (ids != small) free(ids);
}

/* The conversation through one template (NULL: the model's own): the size
 * reported for a buffer too small must be the size needed. */
static void chat_template(const struct kvf_model *m, const char *name, const struct kvf_chat_message *msgs, int n) {
    char small[16];
    int32_t need, got;
    if (kvf_chat_apply(m, name, msgs, n, true, small, sizeof small, &need) != KVF_ERR_BUFFER) return;
    char *buf = malloc((size_t)need);
    if (buf && (kvf_chat_apply(m, name, msgs, n, true, buf, need, &got) != KVF_OK || got + 1 != need))
        __builtin_trap();
    free(buf);
}

static void chat(const struct kvf_model *m, const char *text, size_t len) {
    static const char *const roles[] = {"system", "user", "assistant"};
    struct kvf_chat_message msgs[3];
    int n = 0;
    for (const char *c = text; n < 3 && c <= text + len; c += strlen(c) + 1, n++)
        msgs[n] = (struct kvf_chat_message){roles[n], c};
    chat_template(m, NULL, msgs, n);
    char names[256];
    snprintf(names, sizeof names, "%s", kvf_chat_templates());
    char *save = NULL;
    for (char *name = strtok_r(names, ",", &save); name; name = strtok_r(NULL, ",", &save))
        chat_template(m, name, msgs, n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const struct kvf_model *m = vocab(data[0] & 1);
    const size_t len = size - 1;
    char *text = malloc(len + 1);
    if (!text) return 0;
    memcpy(text, data + 1, len);
    text[len] = '\0';
    tokenize(m, text, len, data[0] & 2, data[0] & 4);
    chat(m, text, len);
    free(text);
    return 0;
}
