#include "common.h"

#include <stdarg.h>
#include <stdio.h>

static _Thread_local char last_error[512];

enum kvf_status err_set(enum kvf_status st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return st;
}

void err_clear(void) { last_error[0] = '\0'; }

const char *kvf_last_error(void) { return last_error; }

const char *kvf_status_str(enum kvf_status st) {
    switch (st) {
    case KVF_OK: return "ok";
    case KVF_ERR_INVALID_ARG: return "invalid argument";
    case KVF_ERR_IO: return "i/o error";
    case KVF_ERR_FORMAT: return "malformed file";
    case KVF_ERR_UNSUPPORTED: return "unsupported";
    case KVF_ERR_SHAPE: return "shape mismatch";
    case KVF_ERR_CONTEXT: return "context overflow";
    case KVF_ERR_NOMEM: return "out of memory";
    case KVF_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}
