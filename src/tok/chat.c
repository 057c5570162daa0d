/* Built-in chat templates, written out by hand as llama.cpp does rather than
 * running the model's Jinja text. The text never starts with BOS: callers
 * tokenize with the model's add_bos. Control-token text (<|im_start|>, </s>,
 * <start_of_turn> ...) must be tokenized with parse_special.
 *
 * Llama-2 follows Meta's reference (each finished exchange is its own
 * BOS ... EOS sequence): "[INST] <<SYS>>\n{sys}\n<</SYS>>\n\n{user} [/INST]
 * {assistant} </s><s>[INST] {user} [/INST]". The "<s>" between turns is
 * written as text and becomes the BOS id under parse_special, which is what
 * Meta's code produces by tokenizing each turn with bos=True, eos=True. */
#include "tok/chat.h"
#include "model/model.h"

#include <ctype.h>
#include <string.h>

static const char vicuna_default_system[] =
    "A chat between a curious user and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, and polite answers to the user's questions.";

/* Appends into the caller's buffer without ever writing past it, counting
 * the bytes a large enough buffer would need. */
struct out {
    char *buf;
    size_t cap;
    size_t n;
};

static void put_n(struct out *o, const char *s, size_t len) {
    if (o->n < o->cap)
        memcpy(o->buf + o->n, s, KVF_MIN(len, o->cap - o->n));
    o->n += len;
}

static void put(struct out *o, const char *s) { put_n(o, s, strlen(s)); }

/* Puts s without leading and trailing white space (Meta's and Gemma's
 * templates strip message content). */
static void put_trimmed(struct out *o, const char *s) {
    size_t len = strlen(s);
    while (len && isspace((unsigned char)*s))
        s++, len--;
    while (len && isspace((unsigned char)s[len - 1]))
        len--;
    put_n(o, s, len);
}

enum role { ROLE_SYSTEM, ROLE_USER, ROLE_ASSISTANT, ROLE_OTHER };

static enum role role_of(const char *r) {
    if (strcmp(r, "system") == 0)
        return ROLE_SYSTEM;
    if (strcmp(r, "user") == 0)
        return ROLE_USER;
    if (strcmp(r, "assistant") == 0 || strcmp(r, "model") == 0)
        return ROLE_ASSISTANT;
    return ROLE_OTHER;
}

static void format_chatml(struct out *o, const struct kvf_chat_message *m, int n, bool add_ass) {
    for (int i = 0; i < n; i++) {
        put(o, "<|im_start|>");
        put(o, m[i].role);
        put(o, "\n");
        put(o, m[i].content);
        put(o, "<|im_end|>\n");
    }
    if (add_ass)
        put(o, "<|im_start|>assistant\n");
}

/* Writes the system messages among m[from..to), each followed by "\n\n"
 * (trailing: also after the last one). */
static void put_gemma_system(struct out *o, const struct kvf_chat_message *m, int from, int to,
                             bool trailing) {
    bool first = true;
    for (int j = from; j < to; j++) {
        if (role_of(m[j].role) != ROLE_SYSTEM)
            continue;
        if (!first)
            put(o, "\n\n");
        put_trimmed(o, m[j].content);
        first = false;
    }
    if (trailing)
        put(o, "\n\n");
}

/* Gemma has no system role: system text joins the next user turn, and the
 * assistant is called "model". */
static void format_gemma(struct out *o, const struct kvf_chat_message *m, int n, bool add_ass) {
    int sys_from = -1; /* first system message not yet written */
    for (int i = 0; i < n; i++) {
        enum role r = role_of(m[i].role);
        if (r == ROLE_SYSTEM) {
            if (sys_from < 0)
                sys_from = i;
            continue;
        }
        put(o, r == ROLE_ASSISTANT ? "<start_of_turn>model\n" : "<start_of_turn>user\n");
        if (r != ROLE_ASSISTANT && sys_from >= 0) {
            put_gemma_system(o, m, sys_from, i, true);
            sys_from = -1;
        }
        put_trimmed(o, m[i].content);
        put(o, "<end_of_turn>\n");
    }
    /* A system message with no user turn after it still reaches the model,
     * as a user turn of its own, instead of vanishing. */
    if (sys_from >= 0) {
        put(o, "<start_of_turn>user\n");
        put_gemma_system(o, m, sys_from, n, false);
        put(o, "<end_of_turn>\n");
    }
    if (add_ass)
        put(o, "<start_of_turn>model\n");
}

static void format_llama2(struct out *o, const struct kvf_chat_message *m, int n, bool add_ass) {
    /* START: nothing written; OPEN: inside "[INST] " before the user text;
     * ANSWER: after " [/INST]"; CLOSED: after " </s>". */
    enum { START, OPEN, ANSWER, CLOSED } st = START;
    for (int i = 0; i < n; i++) {
        enum role r = role_of(m[i].role);
        if (r == ROLE_ASSISTANT) {
            if (st != ANSWER) { /* an answer with no question: empty [INST] */
                put(o, st == START ? "[INST]" : st == CLOSED ? "<s>[INST]" : "");
                put(o, " [/INST]");
            }
            put(o, " ");
            put_trimmed(o, m[i].content);
            put(o, " </s>");
            st = CLOSED;
            continue;
        }
        if (st == ANSWER) /* two questions in a row: close with an empty answer */
            put(o, " </s>"), st = CLOSED;
        if (st == START)
            put(o, "[INST] ");
        else if (st == CLOSED)
            put(o, "<s>[INST] ");
        st = OPEN;
        if (r == ROLE_SYSTEM) {
            put(o, "<<SYS>>\n");
            put_trimmed(o, m[i].content);
            put(o, "\n<</SYS>>\n\n");
        } else {
            put_trimmed(o, m[i].content);
            put(o, " [/INST]");
            st = ANSWER;
        }
    }
    if (add_ass && st == OPEN)
        put(o, " [/INST]");
}

/* FastChat's vicuna_v1.1 (also LLaVA-1.5's conv_vicuna_v1): system, " ",
 * then "USER: {u} " and "ASSISTANT: {a}</s>"; the prompt ends "ASSISTANT:".
 * System messages (joined by newlines) replace the default system line; an
 * empty one removes it. */
static void format_vicuna(struct out *o, const struct kvf_chat_message *m, int n, bool add_ass) {
    bool have_system = false;
    size_t start = o->n;
    for (int i = 0; i < n; i++) {
        if (role_of(m[i].role) != ROLE_SYSTEM)
            continue;
        if (have_system && m[i].content[0])
            put(o, "\n");
        put(o, m[i].content);
        have_system = true;
    }
    if (!have_system)
        put(o, vicuna_default_system);
    if (o->n > start)
        put(o, " ");
    for (int i = 0; i < n; i++) {
        enum role r = role_of(m[i].role);
        if (r == ROLE_SYSTEM)
            continue;
        put(o, r == ROLE_USER ? "USER: " : "ASSISTANT: ");
        put(o, m[i].content);
        put(o, r == ROLE_USER ? " " : "</s>");
    }
    if (add_ass)
        put(o, "ASSISTANT:");
}

struct template {
    const char *name;
    void (*format)(struct out *o, const struct kvf_chat_message *m, int n, bool add_ass);
    bool any_role; /* roles other than system/user/assistant are written as given */
};

static const struct template templates[] = {
    { "llama2", format_llama2, false },
    { "vicuna", format_vicuna, false },
    { "chatml", format_chatml, true },
    { "gemma", format_gemma, false },
};

const char *kvf_chat_templates(void) { return "llama2,vicuna,chatml,gemma"; }

const char *chat_detect(const char *tmpl) {
    if (!tmpl)
        return NULL;
    for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++)
        if (strcmp(tmpl, templates[i].name) == 0)
            return templates[i].name;
    /* The markers llama.cpp's llm_chat_detect_template looks for, in its
     * order of precedence. */
    if (strstr(tmpl, "<|im_start|>"))
        return "chatml";
    if (strstr(tmpl, "[INST]"))
        return "llama2";
    if (strstr(tmpl, "<start_of_turn>"))
        return "gemma";
    if (strstr(tmpl, "USER: ") && strstr(tmpl, "ASSISTANT: "))
        return "vicuna";
    return NULL;
}

int32_t chat_format(const char *name, const struct kvf_chat_message *msgs, int n_msgs,
                    bool add_assistant_prefix, char *buf, int32_t len) {
    const struct template *t = NULL;
    for (size_t i = 0; i < sizeof templates / sizeof templates[0]; i++)
        if (name && strcmp(name, templates[i].name) == 0)
            t = &templates[i];
    if (!t) {
        err_set(KVF_ERR_INVALID_ARG, "unknown chat template '%s' (known: %s)", name ? name : "(null)",
                kvf_chat_templates());
        return INT32_MIN;
    }
    if (n_msgs < 0 || (n_msgs > 0 && !msgs) || len < 0 || (len > 0 && !buf)) {
        err_set(KVF_ERR_INVALID_ARG, "kvf_chat_apply: bad arguments");
        return INT32_MIN;
    }
    for (int i = 0; i < n_msgs; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            err_set(KVF_ERR_INVALID_ARG, "chat message %d has no role or content", i);
            return INT32_MIN;
        }
        if (!t->any_role && role_of(msgs[i].role) == ROLE_OTHER) {
            err_set(KVF_ERR_INVALID_ARG, "chat template %s has no role '%s'", t->name, msgs[i].role);
            return INT32_MIN;
        }
    }
    struct out o = { .buf = buf, .cap = (size_t)len, .n = 0 };
    t->format(&o, msgs, n_msgs, add_assistant_prefix);
    if (o.n >= INT32_MAX) {
        err_set(KVF_ERR_INVALID_ARG, "chat text of %zu bytes is too long", o.n);
        return INT32_MIN;
    }
    /* -(bytes needed including the NUL), so that a buffer of that size fits. */
    if (o.n + 1 > o.cap)
        return -(int32_t)(o.n + 1);
    buf[o.n] = '\0';
    return (int32_t)o.n;
}

enum kvf_status kvf_chat_apply(const struct kvf_model *model, const char *name,
                               const struct kvf_chat_message *msgs, int n_msgs,
                               bool add_assistant_prefix, char *buf, int32_t len, int32_t *n_chars) {
    if (!n_chars) return err_set(KVF_ERR_INVALID_ARG, "kvf_chat_apply: no n_chars");
    if (!name) {
        if (!model) return err_set(KVF_ERR_INVALID_ARG, "kvf_chat_apply: no template name and no model");
        const char *tmpl = tok_chat_template(model_tokenizer(model));
        name = chat_detect(tmpl);
        if (!name)
            return err_set(KVF_ERR_UNSUPPORTED, "%s", tmpl ? "the model's chat template is not one of the built-in templates"
                                                           : "the model has no chat template");
    }
    const int32_t r = chat_format(name, msgs, n_msgs, add_assistant_prefix, buf, len);
    if (r == INT32_MIN) return KVF_ERR_INVALID_ARG; /* chat_format set the message */
    *n_chars = r < 0 ? -r : r;
    return r < 0 ? err_set(KVF_ERR_BUFFER, "kvf_chat_apply: %d bytes do not fit in %d", -r, len) : KVF_OK;
}
