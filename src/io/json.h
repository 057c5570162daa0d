/* JSON of model files (safetensors headers and indexes, config.json,
 * preprocessor_config.json) read strictly with cJSON: one value, nothing but
 * whitespace after it, errors naming the file. */
#ifndef KVF_IO_JSON_H
#define KVF_IO_JSON_H

#include "core/common.h"

#include <cjson/cJSON.h>

/* Index and config files are small JSON; anything bigger is not one. */
#define JSON_FILE_MAX ((size_t)64 << 20)

/* text[0..len) as one JSON value; label names it in errors. */
enum kvf_status json_parse_text(const char *label, const char *text, size_t len, cJSON **out);
/* A JSON file of at most JSON_FILE_MAX bytes, as one value / as an object. */
enum kvf_status json_load_file(const char *path, cJSON **out);
enum kvf_status json_load_object(const char *path, cJSON **out);

#endif
