/* Chat templates: the private half of kvf_chat_apply, usable without a model. */
#ifndef KVF_CHAT_H
#define KVF_CHAT_H

#include "core/common.h"

/* Name of the built-in template that a tokenizer.chat_template (Jinja text)
 * corresponds to: "chatml", "gemma", "llama2" or "vicuna"; a text that is
 * itself one of those names maps to it. NULL when tmpl is NULL or nothing
 * is recognised. The result is a static string. */
const char *chat_detect(const char *tmpl);

/* The conversation in the template given by name (not NULL), NUL-terminated:
 * returns its length, -(bytes needed, NUL included) when len is too small,
 * or INT32_MIN on errors (message set). kvf_chat_apply wraps it. */
int32_t chat_format(const char *name, const struct kvf_chat_message *msgs, int n_msgs,
                    bool add_assistant_prefix, char *buf, int32_t len);

#endif
