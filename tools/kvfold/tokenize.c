/* kvfold tokenize: the token ids of a text, on one line. */
#include "cli.h"

#include <stdlib.h>

static int tokenize_opts(struct args *a, struct opt *out) {
    const struct opt t[] = {
        OPT_MODEL, OPT_PROMPT, OPT_FILE, OPTS_ESCAPE,
        { "--bos", NULL, OPT_FLAG, &a->bos, 0, 0, NULL, "start with BOS when the model's tokenizer adds one" },
        { "--special", NULL, OPT_FLAG, &a->special, 0, 0, NULL, "turn special-token text (<|im_start|>...) into ids" },
    };
    OPTS_RETURN(out, t);
}

/* Only the vocabulary is loaded (vocab_only: no weights), so vocab-only GGUF
 * files and directories holding just tokenizer.json work too. */
static int cmd_tokenize(const struct args *a) {
    char *text = NULL;
    size_t len = 0;
    int rc = input_text("tokenize", a, &text, &len);
    if (rc)
        return rc;
    struct kvf_model_params mp = kvf_model_default_params();
    mp.vocab_only = true;
    struct kvf_model *m = NULL;
    int32_t *ids = NULL, n = 0;
    enum kvf_status st = kvf_model_load(a->model, &mp, &m);
    if (st != KVF_OK) {
        char what[512];
        snprintf(what, sizeof what, "cannot load the tokenizer of '%s'", a->model);
        rc = fail(st, what);
    } else if (!(rc = tokenize_text(m, text, len, a->bos, a->special, &ids, &n))) {
        for (int32_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    kvf_model_free(m);
    free(text);
    return rc;
}

const struct command tokenize_command = {
    .name = "tokenize",
    .summary = "Print the token ids of a text on one line, space separated.",
    .usage = "-m FILE (-p TEXT | -f FILE) [--bos] [--special]",
    .details = "Only the vocabulary is loaded, so vocab-only GGUF files work. No BOS/EOS is added\n"
               "unless --bos, and special-token text is plain text unless --special.",
    .run = cmd_tokenize,
    .opts = tokenize_opts,
};
