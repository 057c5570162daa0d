/* Strict JSON reading for model files (io/json.h). */
#include "io/json.h"

#include "core/sys.h"

#include <stdlib.h>

size_t json_values_bound(const char *text, size_t len) {
    size_t n = 1;
    bool in_string = false;
    for (size_t i = 0; i < len; i++) {
        const char c = text[i];
        if (in_string) {
            if (c == '\\')
                i++; /* the escaped character, whatever it is */
            else if (c == '"')
                in_string = false;
        } else {
            in_string = c == '"';
            n += c == ',' || c == '[' || c == '{';
        }
    }
    return n;
}

enum kvf_status json_parse_text(const char *label, const char *text, size_t len, cJSON **out) {
    const size_t values = json_values_bound(text, len);
    if (values > JSON_VALUES_MAX)
        return err_set(KVF_ERR_FORMAT, "%s: JSON of up to %zu values is over the limit of %zu", label, values,
                       JSON_VALUES_MAX);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        size_t at = end && end >= text ? (size_t)(end - text) : 0;
        return err_set(KVF_ERR_FORMAT, "%s: invalid JSON near byte %zu", label, at);
    }
    /* Only padding may follow the value (the writer pads with spaces). */
    for (const char *p = end; p < text + len; p++) {
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            cJSON_Delete(root);
            return err_set(KVF_ERR_FORMAT, "%s: trailing data after JSON at byte %zu", label, (size_t)(p - text));
        }
    }
    *out = root;
    return KVF_OK;
}

enum kvf_status json_load_file(const char *path, cJSON **out) {
    char *text;
    size_t len;
    enum kvf_status st = sys_read_file(path, JSON_FILE_MAX, "a JSON file of a model directory", &text, &len);
    if (st) return st;
    st = json_parse_text(path, text, len, out);
    free(text);
    return st;
}

enum kvf_status json_load_object(const char *path, cJSON **out) {
    enum kvf_status st = json_load_file(path, out);
    if (!st && !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        *out = NULL;
        return err_set(KVF_ERR_FORMAT, "%s: not a JSON object", path);
    }
    return st;
}
