#include "common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>

/* Long enough for the list of pre-tokenizer names (tok_pre_from_name). */
static _Thread_local char last_error[2048];

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
    case KVF_ERR_BUFFER: return "buffer too small";
    }
    return "unknown status";
}

double rng_gauss(uint64_t *s) {
    const double u1 = ((double)(rng_splitmix64(s) >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = (double)(rng_splitmix64(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}
