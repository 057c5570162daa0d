/* JSON of model files (safetensors headers and indexes, config.json,
 * preprocessor_config.json) read strictly with cJSON: one value, nothing but
 * whitespace after it, errors naming the file. */
#ifndef KVF_IO_JSON_H
#define KVF_IO_JSON_H

#include "core/common.h"

#include <cjson/cJSON.h>

/* Index and config files are small JSON; anything bigger is not one. */
#define JSON_FILE_MAX ((size_t)64 << 20)

/* cJSON takes about 80 bytes for each value (a 64-byte item and the
 * allocator's share), 40 times the text of `[0,0,...]`: a parse is refused
 * before it starts where the text could hold more than this many values
 * (json_values_bound), about 320 MiB of items. Real files hold far fewer:
 * a 150K-entry tokenizer.json with its merges about 600K. */
#define JSON_VALUES_MAX ((size_t)4 << 20)

/* At least the number of values (items) cJSON makes of text[0..len): one,
 * and one more for each comma and each '[' or '{' outside strings. */
size_t json_values_bound(const char *text, size_t len);
/* text[0..len) as one JSON value of at most JSON_VALUES_MAX values; label
 * names it in errors. */
enum kvf_status json_parse_text(const char *label, const char *text, size_t len, cJSON **out);
/* A JSON file of at most JSON_FILE_MAX bytes, as one value / as an object. */
enum kvf_status json_load_file(const char *path, cJSON **out);
enum kvf_status json_load_object(const char *path, cJSON **out);

#endif
